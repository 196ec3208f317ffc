"""Functions a card may call without defining them, with their shape rules.

Owns: `BUILTINS`, the table of builtin functions (`length`, the elementwise functions
`exp log tanh erf sin cos sqrt abs sigmoid`, `max`/`min`, `ceil` (written ⌈x⌉), `rows` (the
i-th block of k rows: the head split) and `topk`), each with its arity and a rule from argument
shapes to the result shape. A rule gets the argument shapes and, for arguments that read as
dimensions (`d_h` in `rows(W_q, h, d_h)`), their Dims.
Leaves out: algorithms defined in cards (calls.py resolves those first).

>>> from toycards.checker.dims import Dim
>>> d, l = Dim.name("d_e"), Dim.name("ℓ")
>>> str(BUILTINS["rows"].rule([Shape("R", (d, l)), Shape("N"), Shape("N")], [None, None, Dim.name("d_h")]))
'ℝ^{d_h×ℓ}'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from toycards.checker.dims import Dim
from toycards.checker.shapes import NATURAL, Shape, ShapeError

Rule = Callable[[list[Shape], list["Dim | None"]], Shape]


@dataclass(frozen=True)
class Builtin:
    arity: tuple[int, ...]
    rule: Rule
    doc: str


def _scalar(s: Shape, what: str) -> None:
    if s.dims or not (s.numeric or s.field == "V"):
        raise ShapeError(f"{what} must be a scalar, got {s}")


def _elementwise(args: list[Shape], dims: list[Dim | None]) -> Shape:
    (x,) = args
    if not x.numeric:
        raise ShapeError(f"needs numbers, got {x}")
    return x.with_dims(x.dims, "R")


def _length(args: list[Shape], dims: list[Dim | None]) -> Shape:
    (x,) = args
    if not x.dims:
        raise ShapeError(f"length of {x}: a scalar has no length")
    return NATURAL


def _extreme(args: list[Shape], dims: list[Dim | None]) -> Shape:
    if len(args) == 2:
        a, b = args
        if a.dims or b.dims:
            raise ShapeError(
                f"max(a, b) compares two scalars, got {a} and {b}", "max(v) takes the largest entry of v"
            )
        return Shape("R")
    (v,) = args
    if not v.dims:
        raise ShapeError(f"max(v) needs a vector, got {v}", "max(a, b) compares two scalars")
    return v.with_dims(v.dims[1:])  # per column for a matrix (implicit map)


def _ceil(args: list[Shape], dims: list[Dim | None]) -> Shape:
    (x,) = args
    if not x.numeric:
        raise ShapeError(f"⌈x⌉ needs numbers, got {x}")
    return x.with_dims(x.dims, "N")


def _rows(args: list[Shape], dims: list[Dim | None]) -> Shape:
    a, i, k = args
    _scalar(i, "the block number i of rows(A, i, k)")
    _scalar(k, "the block size k of rows(A, i, k)")
    if a.rank not in (1, 2):
        raise ShapeError(f"rows(A, i, k) needs a vector or a matrix, got {a}")
    return Shape(a.field, (dims[2], *a.dims[1:]))


def _topk(args: list[Shape], dims: list[Dim | None]) -> Shape:
    v, k = args
    _scalar(k, "k of topk(v, k)")
    if not v.dims:
        raise ShapeError(f"topk(v, k) needs a vector, got {v}")
    return Shape("N", (dims[1], *v.dims[1:]))


_ELEMENTWISE_DOC = "elementwise; any shape"
BUILTINS: dict[str, Builtin] = {
    "length": Builtin((1,), _length, "length(x): the number of entries of a sequence or columns"),
    **{f: Builtin((1,), _elementwise, _ELEMENTWISE_DOC) for f in ("exp", "log", "tanh", "erf", "sin", "cos", "sqrt", "abs", "sigmoid")},
    "max": Builtin((1, 2), _extreme, "max(v): the largest entry of a vector; max(a, b) of two scalars"),
    "min": Builtin((1, 2), _extreme, "min(v): the smallest entry of a vector; min(a, b) of two scalars"),
    "ceil": Builtin((1,), _ceil, "⌈x⌉: the smallest whole number ≥ x"),
    "rows": Builtin((3,), _rows, "rows(A, i, k) = A[(i−1)·k+1 : i·k, :], the i-th block of k rows"),
    "topk": Builtin((2,), _topk, "topk(v, k): the indices of the k largest entries of v"),
}  # fmt: skip
