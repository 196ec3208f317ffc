"""The builtin functions of the card language: one registry, read by the checker, codegen and binding.

Owns: `BUILTINS`, one `Builtin` per function a card may call without defining it — its arity,
the name of its shape rule (the checker's `checker/builtins.py` implements each rule once), a
one-line meaning, the function both runtime op modules (`runtime/numpy/ops.py`,
`runtime/torch/ops.py`) provide under `ops`, and its meaning on plain Python numbers (`scalar`,
spelt `scalar_code` in generated code) where it has one.
Leaves out: algorithms written as cards (the prelude), how a rule computes shapes (checker),
how a form is laid out in generated code (codegen dispatches on `rule`, never on a name).

Adding a builtin is one entry here plus, if its `ops` name is new, that function in both op
modules (tests/lang/test_builtins.py holds every entry to both and to `scalar`).

>>> BUILTINS["exp"].rule, BUILTINS["exp"].ops, BUILTINS["exp"].scalar(0.0)
('elementwise', 'exp', 1.0)
>>> sorted(b.name for b in BUILTINS.values() if b.rule == "extreme")
['max', 'min']
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Builtin:
    name: str
    arity: tuple[int, ...]  # the numbers of arguments it accepts
    rule: str  # its shape rule, one of RULES
    doc: str
    ops: str | None = None  # the function in both runtime op modules (`ops.exp(x)`)
    ops_pair: str | None = None  # for max/min: the two-argument form (`ops.maximum(a, b)`)
    scalar: Callable | None = None  # its meaning on Python numbers (hyperparameters, loop indices)
    scalar_code: str | None = None  # that meaning spelt in generated code


RULES = ("elementwise", "length", "extreme", "ceil", "rows", "topk", "zeros", "filled", "present")

_ELEMENTWISE = {  # name: (ops name, scalar function, its code)
    "exp": ("exp", math.exp, "math.exp"),
    "expm1": ("expm1", math.expm1, "math.expm1"),  # e^x − 1, exact near 0 (xIELU's negative side)
    "log": ("log", math.log, "math.log"),
    "tanh": ("tanh", math.tanh, "math.tanh"),
    "erf": ("erf", math.erf, "math.erf"),
    "sin": ("sin", math.sin, "math.sin"),
    "cos": ("cos", math.cos, "math.cos"),
    "sqrt": ("sqrt", math.sqrt, "math.sqrt"),
    "abs": ("abs_", abs, "abs"),
    "sigmoid": ("sigmoid", lambda x: 1.0 / (1.0 + math.exp(-x)), None),
    "softplus": ("softplus", lambda x: max(x, 0.0) + math.log1p(math.exp(-abs(x))), None),
}


def _entries() -> list[Builtin]:
    out = [Builtin("length", (1,), "length", "length(x): the number of entries of a sequence or columns")]
    out += [
        Builtin(
            name,
            (1,),
            "elementwise",
            f"{name}(x): elementwise; any shape",
            ops=ops,
            scalar=fn,
            scalar_code=code,
        )
        for name, (ops, fn, code) in _ELEMENTWISE.items()
    ]
    for name, word in (("max", "largest"), ("min", "smallest")):
        doc = f"{name}(v): the {word} entry of a vector; {name}(a, b) of two scalars"
        pair = "maximum" if name == "max" else "minimum"
        fn = max if name == "max" else min
        out.append(
            Builtin(
                name, (1, 2), "extreme", doc, ops=f"{name}_last", ops_pair=pair, scalar=fn, scalar_code=name
            )
        )
    out += [
        Builtin("ceil", (1,), "ceil", "⌈x⌉: the smallest whole number ≥ x", ops="ceil", scalar=math.ceil,
                scalar_code="math.ceil"),
        Builtin("rows", (3,), "rows", "rows(A, i, k) = A[(i−1)·k+1 : i·k, :], the i-th block of k rows"),
        Builtin("topk", (2,), "topk",
                "topk(v, k): the indices (1-based) of the k largest entries of v, largest first, ties to "
                "the lower index; per column of a matrix", ops="topk"),
        Builtin("zeros", (1, 2), "zeros",
                "zeros(n): a vector of n zeros; zeros(m, n): an m×n matrix of zeros", ops="zeros"),
        Builtin("filled", (2, 3), "filled",
                "filled(c, n): a vector of n entries c; filled(c, m, n): an m×n matrix of them", ops="filled"),
        Builtin("present", (1, 2), "present",
                'present("name"): 1 where the file holds that tensor, else 0; present("blk.{l-1}.name", n): '
                "one such flag for each l = 1, …, n; a derived hyperparameter's value, read when a file binds"),
    ]  # fmt: skip
    return out


BUILTINS: dict[str, Builtin] = {b.name: b for b in _entries()}
