"""The shape rules of the builtin functions (the functions themselves: lang/builtins.py).

Owns: `RULES`, one function per rule name of the registry, from argument shapes to the result
shape, and `shape_of(builtin, shapes, dims)`. A rule gets the argument shapes and, for
arguments that read as dimensions (`d_h` in `rows(W_q, h, d_h)`), their Dims.
Leaves out: which builtins exist and what they compute (lang/builtins.py), algorithms defined in
cards (calls.py resolves those first).

>>> from toycards.checker.dims import Dim
>>> d, l = Dim.name("d_e"), Dim.name("ℓ")
>>> str(shape_of(BUILTINS["rows"], [Shape("R", (d, l)), Shape("N"), Shape("N")], [None, None, Dim.name("d_h")]))
'ℝ^{d_h×ℓ}'
"""

from __future__ import annotations

from collections.abc import Callable

from toycards.checker.dims import Dim
from toycards.checker.shapes import NATURAL, Shape, ShapeError
from toycards.lang.builtins import BUILTINS, Builtin

Rule = Callable[[list[Shape], list["Dim | None"]], Shape]


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


def _sizes(args: list[Shape], dims: list[Dim | None], what: str) -> tuple[Dim, ...]:
    for s, d in zip(args, dims):
        if s.dims or d is None:
            raise ShapeError(
                f"the sizes of {what} must be dimensions, got {s}",
                "write dimension names, hyperparameters or numbers: zeros(d, n)",
            )
    return tuple(dims)


def _zeros(args: list[Shape], dims: list[Dim | None]) -> Shape:
    return Shape("R", _sizes(args, dims, "zeros(m, n)"))


def _filled(args: list[Shape], dims: list[Dim | None]) -> Shape:
    _scalar(args[0], "the value c of filled(c, m, n)")
    return Shape("R", _sizes(args[1:], dims[1:], "filled(c, m, n)"))


def _present(args: list[Shape], dims: list[Dim | None]) -> Shape:
    if args[0].field != "S" or args[0].dims:
        raise ShapeError(
            f"present(name) takes a tensor name in quotes, got {args[0]}", 'present("output.weight")'
        )
    if len(args) == 1:
        return Shape("B")
    return Shape("B", _sizes(args[1:], dims[1:], 'present("blk.{l-1}.name", n)'))


RULES: dict[str, Rule] = {
    "elementwise": _elementwise,
    "length": _length,
    "extreme": _extreme,
    "ceil": _ceil,
    "rows": _rows,
    "topk": _topk,
    "zeros": _zeros,
    "filled": _filled,
    "present": _present,
}

__all__ = ["BUILTINS", "RULES", "shape_of"]


def shape_of(builtin: Builtin, shapes: list[Shape], dims: list[Dim | None]) -> Shape:
    """The result shape of a call of `builtin` (raises ShapeError naming what is wrong)."""
    return RULES[builtin.rule](shapes, dims)
