"""Chat templates (`tokenizer.chat_template`), rendered only inside jinja2's sandbox.

Owns: `render_chat(template, messages, **kw)`: an `ImmutableSandboxedEnvironment` with the
conventions of Hugging Face chat templates (`trim_blocks`, `lstrip_blocks`, loop controls,
`raise_exception`, `strftime_now`, a `tojson` that keeps non-ASCII text), and the mapping of
every template failure to one ToycardsError.
Leaves out: choosing among several named templates, tool-call parsing, and llama.cpp's
built-in template heuristics.

A template comes from a downloaded file and is untrusted code: the sandbox refuses attribute
access to Python internals (`''.__class__.__mro__`), and the immutable variant refuses to
mutate lists and dicts passed in.

>>> render_chat("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}",
...             [{"role": "user", "content": "Hi"}])
'<|user|>Hi'
"""

from __future__ import annotations

import json
from datetime import datetime

from toycards.errors import ToycardsError


class _TemplateRaised(Exception):
    """`raise_exception(msg)` called by the template itself."""


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _tojson(
    value: object, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False
) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment():  # jinja2 is imported only when a template is rendered
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

    class Sandbox(ImmutableSandboxedEnvironment):
        """Fails on the first unsafe attribute instead of rendering it as empty."""

        def unsafe_undefined(self, obj: object, attribute: str) -> jinja2.Undefined:
            raise SecurityError(
                f"access to attribute {attribute!r} of a {type(obj).__name__} object is unsafe"
            )

    env = Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
    return env


def render_chat(template: str, messages: list[dict], **kw: object) -> str:
    """Render a chat template with `messages` and extra variables (`add_generation_prompt`,
    `bos_token`, `eos_token`, `tools`, …). Any failure, a sandbox violation included,
    raises ToycardsError."""
    import jinja2
    from jinja2.sandbox import SecurityError

    try:
        return _environment().from_string(template).render(messages=messages, **kw)
    except SecurityError as e:
        raise ToycardsError(f"chat template refused by the sandbox: {e}") from None
    except _TemplateRaised as e:
        raise ToycardsError(f"chat template raised: {e}") from None
    except jinja2.TemplateSyntaxError as e:
        raise ToycardsError(f"chat template syntax error at line {e.lineno}: {e.message}") from None
    except (jinja2.TemplateError, TypeError, ValueError, AttributeError, KeyError, IndexError) as e:
        raise ToycardsError(f"chat template failed: {type(e).__name__}: {e}") from None
