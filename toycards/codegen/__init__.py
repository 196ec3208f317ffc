"""Code generation: card IR → readable, runnable Python modules (torch or NumPy).

Owns: `generate_source(card, target)`, which runs the emitter (every decision) and lays the
result out through `templates/module.py.jinja` (text only), then verifies the output
(verify.py: only what the emitter writes) before returning it. jinja2 is imported only when a
module is generated, so that verify.py can be used without it. Leaves out: loading weights and running (runtime/, models/).
"""

from __future__ import annotations

import functools
import hashlib
import re
from importlib import resources

from toycards.codegen.module import comment_safe
from toycards.codegen.verify import verify_source
from toycards.errors import ToycardsError
from toycards.lang import ir
from toycards.lang.outputs import returns_distribution
from toycards.lang.scale import collector_paused

TARGETS = {
    "torch": (
        [
            "import torch  # noqa: F401",
            "",
            "from toycards.runtime import context as runtime",
            "from toycards.runtime.torch import ops",
            "from toycards.runtime.torch.model import TorchModel",
        ],
        "TorchModel",
    ),
    "numpy": (
        [
            "import numpy as np  # noqa: F401",
            "",
            "from toycards.runtime import context as runtime",
            "from toycards.runtime.numpy import ops",
            "from toycards.runtime.numpy.model import NumpyModel",
        ],
        "NumpyModel",
    ),
}


@functools.cache
def _template():
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    env.filters["pyrepr"] = repr
    env.filters["docstring"] = _docstring_safe
    env.filters["comment"] = comment_safe
    text = (
        resources.files("toycards.codegen").joinpath("templates/module.py.jinja").read_text(encoding="utf-8")
    )
    return env.from_string(text)


def _docstring_safe(text: str) -> str:
    r"""Text that cannot end a triple-quoted docstring or start an escape.

    A quote is escaped when another quote or the end of the text follows it: no run of three
    raw quotes remains, and a trailing quote cannot merge with the docstring's closing quotes.

    >>> print(_docstring_safe('a "b" c"" \\ d"'))
    a "b" c\"" \\ d\"
    """
    return re.sub(r'"(?="|\Z)', r'\\"', text.replace("\\", "\\\\"))


def _checked(card: ir.Card):
    """What the checker says about `card`: the token axes (toycards/checker/tokenflow.py) and the
    shape of every expression (codegen/values.py `Checked`)."""
    from toycards.checker import check_card, check_prelude
    from toycards.checker.tokenflow import CachePlan, cache_plan
    from toycards.codegen.values import Checked

    result = check_card(card)
    if not result.ok:
        return CachePlan("the card does not check"), Checked()
    prelude = check_prelude()
    return cache_plan(card, result, prelude), Checked(result, prelude)


@collector_paused()  # the IR holds no cycles for the collector to find (lang/scale.py)
def generate_source(card: ir.Card, target: str = "torch") -> str:
    """Python source of a module implementing `card`'s main algorithm for `target`."""
    from toycards.codegen.emitter import Emitter
    from toycards.codegen.module import ModuleSpec
    from toycards.lang.printer import render_card
    from toycards.library import library_algorithms

    if target not in TARGETS:
        raise ToycardsError(f"unknown target {target!r}: choose one of {', '.join(TARGETS)}")
    if not card.algorithms:
        raise ToycardsError("the card has no algorithm to generate")
    main = card.main
    if not main.body:
        raise ToycardsError(f"{main.name} has no steps (a declaration-only card); nothing to generate")
    text = render_card(card)
    plan, checked = _checked(card)
    emitter = Emitter(card, target, library_algorithms(), plan, checked)
    main_fn, funcs = emitter.emit(main)
    hyper = [
        (emitter.module_ns.name(n), n)
        for d in main.hyper_decls
        for n in d.names
        if not (isinstance(d.type, ir.TensorType) and d.type.dims)
    ]
    spec = ModuleSpec(target, "Model", text, hashlib.sha256(text.encode()).hexdigest(), main_fn, funcs, hyper)
    spec.recompute = plan.note(card)
    spec.logits_from_softmax = returns_distribution(main)  # else the module returns the card's output
    imports, base = TARGETS[target]
    lines = [line for f in (main_fn, *funcs) for line in (*f.args, *f.body)]  # (a default may be −math.inf)
    needs_math = any(re.search(r"(?<![\w.])math\.", line) for line in lines)
    source = _template().render(spec=spec, imports=imports, base_class=base, needs_math=needs_math)
    verify_source(source, f"<generated {main.name} {target}>")
    return source
