"""Evaluating a card's dimensions and scalar expressions with concrete hyperparameter values.

Owns: `eval_dim` (`d_e/H` with exact division), `eval_scalar` (derived values and conditions:
arithmetic, comparisons, `sqrt`, `ceil`, …) and `EvalError`, which is all they ever raise: values
come from files, so a head count of 0, the square root of a negative or a power too large to
compute is an EvalError naming the values, never a ZeroDivisionError or a hang; and `unit_axes`
(a stored shape against a card's, with llama.cpp's leeway for leading axes of 1).
Leaves out: where the values come from and what a failure means for a card (binding.py).

>>> eval_scalar(ir.BinOp("/", ir.Name("d_e"), ir.Name("H")), {"d_e": 64, "H": 4})
16
>>> eval_scalar(ir.BinOp("/", ir.Name("d_e"), ir.Name("H")), {"d_e": 64, "H": 0})
Traceback (most recent call last):
toycards.models.scalars.EvalError: 64 / 0 divides by zero
"""

from __future__ import annotations

import math
import re

from toycards.lang import ir
from toycards.lang.builtins import BUILTINS

MAX_EXPONENT = 4096  # `a ^ b` with integers: larger powers are refused, not computed


class EvalError(Exception):
    pass


class UnboundDim(EvalError):
    """A dimension named after a hyperparameter that has no value."""

    def __init__(self, name: str) -> None:
        super().__init__(f"dimension {name} has no value")
        self.name = name


def eval_dim(d: ir.Dim, values: dict[str, object]) -> int:
    """A dimension's value; division must be exact."""
    if isinstance(d, ir.DimNum):
        return d.value
    if isinstance(d, ir.DimName):
        if d.name not in values:
            raise UnboundDim(d.name)
        return int(values[d.name])
    a, b = eval_dim(d.left, values), eval_dim(d.right, values)
    if d.op == "/":
        if b == 0 or a % b:
            raise EvalError(f"{a}/{b} is not a whole number")
        return a // b
    return {"+": a + b, "-": a - b, "*": a * b}[d.op]


_BINOPS = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "·": lambda a, b: a * b, "/": lambda a, b: a / b,
    "^": lambda a, b: a**b, "mod": lambda a, b: a % b, "<": lambda a, b: a < b, "≤": lambda a, b: a <= b,
    "=": lambda a, b: a == b, "≠": lambda a, b: a != b, "≥": lambda a, b: a >= b, ">": lambda a, b: a > b,
    "∧": lambda a, b: bool(a) and bool(b), "∨": lambda a, b: bool(a) or bool(b),
}  # fmt: skip


def eval_scalar(e: ir.Expr, values: dict[str, object], enum_names: frozenset[str] = frozenset()) -> object:
    """Evaluate a scalar expression over hyperparameters (used for derived values and conditions)."""
    if isinstance(e, ir.Num):
        v = float(e.text)
        return int(v) if v.is_integer() and re.fullmatch(r"\d+", e.text) else v
    if isinstance(e, ir.Const):
        return math.inf if e.name == "∞" else math.pi
    if isinstance(e, ir.Str):
        return e.value
    if isinstance(e, ir.Name):
        if e.id in values:
            return values[e.id]
        if e.id in enum_names:
            return e.id
        raise EvalError(f"{e.id} has no value")
    if isinstance(e, ir.UnOp):
        v = eval_scalar(e.operand, values, enum_names)
        return _arith(e.op, {"-": lambda x: -x, "¬": lambda x: not x, "√": math.sqrt}[e.op], v)
    if isinstance(e, ir.BinOp) and e.op in _BINOPS:
        a, b = eval_scalar(e.left, values, enum_names), eval_scalar(e.right, values, enum_names)
        if e.op == "/" and isinstance(a, int) and isinstance(b, int) and b and a % b == 0:
            return a // b
        if e.op == "^" and isinstance(a, int) and isinstance(b, int) and abs(a) > 1 and b > MAX_EXPONENT:
            raise EvalError(f"{a} ^ {b} is too large")
        return _arith(e.op, _BINOPS[e.op], a, b)
    if isinstance(e, ir.Index) and len(e.indices) == 1 and not isinstance(e.indices[0], ir.Slice):
        return _entry(eval_scalar(e.base, values, enum_names), eval_scalar(e.indices[0], values, enum_names))
    if isinstance(e, ir.Concat) and e.axis == "cols" and not e.ellipsis:
        return tuple(eval_scalar(item, values, enum_names) for item in e.items)  # `[0, 0, 8]`
    if isinstance(e, ir.Call) and not e.params and (b := BUILTINS.get(e.func)) and b.scalar is not None:
        return _arith(e.func, b.scalar, *(eval_scalar(a, values, enum_names) for a in e.args))
    raise EvalError("not a scalar expression of hyperparameters")


def _entry(vector: object, i: object) -> object:
    """Entry i (from 1) of a per-layer hyperparameter's values: `n_kv[l]`."""
    if not isinstance(vector, tuple) or not isinstance(i, int) or not 1 <= i <= len(vector):
        raise EvalError(f"entry {i!r} of {vector!r}: not an entry of a per-layer value")
    return vector[i - 1]


def _arith(op: str, fn, *args: object) -> object:
    """`fn(*args)`, with arithmetic failures (values from a file: a head count of 0) as EvalError."""
    try:
        return fn(*args)
    except (ZeroDivisionError, OverflowError, ValueError, TypeError) as exc:
        binary = len(args) == 2 and op in _BINOPS
        shown = f" {op} ".join(map(repr, args)) if binary else f"{op}({', '.join(map(repr, args))})"
        why = "divides by zero" if isinstance(exc, ZeroDivisionError) else f"fails ({exc})"
        raise EvalError(f"{shown} {why}") from None


def unit_axes(stored: tuple[int, ...], want: tuple[int, ...]) -> int:
    """How many leading axes of 1 the file's NumPy shape `stored` has beyond the card's `want`, as
    llama.cpp's loader allows (it compares ggml's ne with the expected sizes, an absent axis as 1:
    ERNIE 4.5 MoE's exp_probs_b is written [1, E] and read as {E}); -1 when the shapes differ otherwise.

    >>> unit_axes((1, 8), (8,)), unit_axes((8,), (8,)), unit_axes((2, 8), (8,))
    (1, 0, -1)
    """
    extra = len(stored) - len(want)
    if extra < 0 or tuple(stored[extra:]) != tuple(want) or any(n != 1 for n in stored[:extra]):
        return -1
    return extra
