"""Chat templates (`tokenizer.chat_template`), rendered only inside a bounded jinja2 sandbox.

Owns: `render_chat(template, messages, source=…, **kw)`: the conventions of Hugging Face chat
templates (`trim_blocks`, `lstrip_blocks`, loop controls, `raise_exception`, `strftime_now`, a
`tojson` that keeps non-ASCII text), and the mapping of every template failure, a limit of the
sandbox included, to one ToycardsError naming the file the template came from.
Leaves out: the sandbox and its limits (sandbox.py), choosing among several named templates,
tool-call parsing, and llama.cpp's built-in template heuristics.

A template comes from a downloaded file and is untrusted code: the sandbox refuses attribute
access to Python internals (`''.__class__.__mro__`), refuses to mutate the lists and dicts
passed in, and bounds time, output, loop iterations, nesting and the size of every string it
builds (`range(10**9)`, `'a' * 10**9` and endless loops end in a ToycardsError, quickly).

>>> render_chat("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}",
...             [{"role": "user", "content": "Hi"}])
'<|user|>Hi'
"""

from __future__ import annotations

import json
from datetime import datetime

import jinja2
from jinja2.sandbox import SecurityError
from jinja2.utils import pass_context

from toycards.errors import ToycardsError
from toycards.tokenizer.sandbox import BoundedSandbox, LimitExceeded, Limits

_MESSAGE_CHARS = 300  # of a value quoted in an error message, which is one line
# What a template can raise besides the sandbox's own errors; SyntaxError is Python's limit on
# the nesting of the code jinja2 generates (20 nested loops).
_FAILURES = (
    jinja2.TemplateError,
    TypeError,
    ValueError,
    AttributeError,
    LookupError,
    ArithmeticError,
    SyntaxError,
)


class _TemplateRaised(Exception):
    """`raise_exception(msg)` called by the template itself."""


@pass_context
def _raise_exception(context, message: object) -> None:
    context.environment.budget.text(message)
    raise _TemplateRaised(str(message))


def _tojson(
    value: object, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False
) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 1] + "…"


def render_chat(template: str, messages: list[dict], *, source: str | None = None, **kw: object) -> str:
    """Render a chat template with `messages` and extra variables (`add_generation_prompt`,
    `bos_token`, `eos_token`, `tools`, …). Any failure, a sandbox violation or limit included,
    raises ToycardsError; its message starts with `source`, the file the template came from."""
    where = f"{source}: chat template" if source else "chat template"
    env = BoundedSandbox(
        Limits(),
        filters={"tojson": _tojson},
        globals={"raise_exception": _raise_exception, "strftime_now": _strftime_now},
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.loopcontrols"],
    )
    try:
        return env.render(template, {"messages": messages, **kw})
    except LimitExceeded as e:
        raise ToycardsError(f"{where} {e}") from None
    except SecurityError as e:
        raise ToycardsError(f"{where} refused by the sandbox: {_clip(str(e))}") from None
    except _TemplateRaised as e:
        raise ToycardsError(f"{where} raised: {_clip(str(e))}") from None
    except jinja2.TemplateSyntaxError as e:
        raise ToycardsError(f"{where} syntax error at line {e.lineno}: {_clip(e.message or '')}") from None
    except RecursionError:
        raise ToycardsError(f"{where} nests too deeply for Python's recursion limit") from None
    except _FAILURES as e:
        raise ToycardsError(f"{where} failed: {type(e).__name__}: {_clip(str(e))}") from None
