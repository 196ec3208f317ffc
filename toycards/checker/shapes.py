"""Shapes of values and the shape rules of the card's operators.

Owns: `Shape` (a field such as ℝ or ℕ plus symbolic dimensions; printable as `ℝ^{d_e×ℓ}`),
turning a declared IR type into a Shape, comparing shapes modulo derived hyperparameters
(`DimEq`), and the rules of `+ − ⊙ / · ^⊺`, indexing and concatenation in the paper's column
convention (a vector `ℝ^{n}` is a column; `X ∈ ℝ^{d×ℓ}` holds one column per token).
Each rule returns the result shape or raises `ShapeError(message, hint)`; the checker turns
that into a diagnostic at the operator's span.
Leaves out: names, calls and statements (the other check modules).

>>> d, l = Dim.name("d_e"), Dim.name("ℓ")
>>> str(matmul(Shape("R", (Dim.name("d_mlp"), d)), Shape("R", (d, l)), DimEq()))
'ℝ^{d_mlp×ℓ}'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from toycards.checker.dims import Dim, DimError, from_ir
from toycards.lang import ir

FIELD_TEXT = {"R": "ℝ", "N": "ℕ", "Z": "ℤ", "B": "{0,1}", "P": "(0,1)", "V": "V", "S": "𝕊"}
FIELD_ASCII = {"R": "R", "N": "N", "Z": "Z", "B": "{0,1}", "P": "(0,1)", "V": "V", "S": "S"}
NUMERIC = frozenset("RNZBPI")  # I: an index in [n], usable in arithmetic like a natural number
WHOLE = frozenset("NZBI")


class ShapeError(Exception):
    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


@dataclass(frozen=True)
class Shape:
    """The type of a value.

    field: "R" "N" "Z" "B" "P" numbers; "V" token ids (`V^ℓ` a sequence, `V` one id);
    "I" an index in 1…bound (`[n]`); "E" an enumeration (options); "S" a string.
    dims: () for a scalar, (n,) for a column vector, (m, n) for a matrix; None marks a
    dimension taken from context (the width of `1^⊺`).
    """

    field: str = "R"
    dims: tuple[Dim | None, ...] = ()
    bound: Dim | None = None
    options: tuple[str, ...] = ()

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def numeric(self) -> bool:
        return self.field in NUMERIC

    def is_scalar(self) -> bool:
        return not self.dims and self.field in NUMERIC | {"V"}

    def with_dims(self, dims: tuple[Dim | None, ...], field: str | None = None) -> Shape:
        return Shape(field or self.field, tuple(dims), self.bound, self.options)

    def __str__(self) -> str:
        return self.render()

    def __repr__(self) -> str:
        return f"Shape({self.render()!r})"

    def render(self, ascii: bool = False) -> str:
        if self.field == "I":
            return f"[{self.bound.render(ascii) if self.bound is not None else '?'}]"
        if self.field == "E":
            return "{" + ", ".join(self.options) + "}"
        head = (FIELD_ASCII if ascii else FIELD_TEXT)[self.field]
        if not self.dims:
            return head
        sep = " x " if ascii else "×"
        parts = [_dim_text(d, ascii, len(self.dims) > 1) for d in self.dims]
        return f"{head}^{{{sep.join(parts)}}}"


def _dim_text(d: Dim | None, ascii: bool, paren: bool) -> str:
    if d is None:
        return "?"
    text = d.render(ascii)
    return f"({text})" if paren and len(d.terms) > 1 else text


SCALAR = Shape("R")
NATURAL = Shape("N")
BINARY = Shape("B")


def shape_from_type(t: ir.Type, on_error: Callable[[ir.Dim, str], None]) -> Shape:
    """The Shape of a declared type; a dimension that cannot be formed (`10/3`) is reported
    through `on_error(dim_node, message)` and becomes unknown."""

    def dim(d: ir.Dim) -> Dim | None:
        try:
            return from_ir(d)
        except DimError as exc:
            on_error(d, str(exc))
            return None

    if isinstance(t, ir.TensorType):
        return Shape(t.field, tuple(dim(d) for d in t.dims))
    if isinstance(t, ir.IndexType):
        return Shape("I", (), dim(t.bound))
    if isinstance(t, ir.EnumType):
        return Shape("E", options=t.options)
    return Shape("S")


class DimEq:
    """Equality of dimensions after substituting derived hyperparameters (`d_h ≔ d_e / H`)."""

    def __init__(self, defs: dict[str, Dim] | None = None) -> None:
        self.defs = defs or {}
        self._expanded: dict[Dim, Dim] = {}

    def define(self, name: str, d: Dim) -> None:
        """Add `name = d` (a local `n ← length(x)` names x's length)."""
        self.defs = {**self.defs, name: d.substitute(self.defs)}
        self._expanded.clear()

    def expand(self, d: Dim) -> Dim:
        out = self._expanded.get(d)
        if out is None:
            out = self._expanded[d] = d.substitute(self.defs)
        return out

    def same(self, a: Dim | None, b: Dim | None) -> bool:
        if a is None or b is None:
            return True
        if a == b:
            return True
        try:
            return self.expand(a) == self.expand(b)
        except DimError:
            return False


# ── combining shapes ────────────────────────────────────────────────────────────────────
def join_field(a: Shape, b: Shape) -> str:
    if a.field in WHOLE and b.field in WHOLE:
        return "N" if a.field == b.field == "N" else "Z"
    return "R"


def unify(a: Shape, b: Shape, eq: DimEq) -> Shape | None:
    """The common shape of a and b (wildcards filled from the other side), or None."""
    if a.rank != b.rank or not all(eq.same(x, y) for x, y in zip(a.dims, b.dims)):
        return None
    dims = tuple(x if x is not None else y for x, y in zip(a.dims, b.dims))
    return Shape(join_field(a, b), dims)


def compatible(declared: Shape, actual: Shape, eq: DimEq) -> bool:
    """Does a value of shape `actual` fit a declaration (or `∷` annotation) `declared`?"""
    if declared.field in ("E", "S") or actual.field in ("E", "S"):
        return declared.field == actual.field or (declared.field == "E" and actual.field == "S")
    if (declared.field == "V") != (actual.field == "V") and declared.dims:
        return False
    return unify(declared, actual, eq) is not None


def _where_differ(a: Shape, b: Shape, eq: DimEq) -> str:
    if a.rank != b.rank:
        return f"{a.rank}-axis and {b.rank}-axis values"
    for i, (x, y) in enumerate(zip(a.dims, b.dims)):
        if not eq.same(x, y):
            return f"dimension {i + 1}: {x} and {y} differ"
    return "shapes differ"


def _numeric(op: str, *shapes: Shape) -> None:
    for s in shapes:
        if not s.numeric and not (s.field == "V" and not s.dims):
            raise ShapeError(f"{op} needs numbers, got {s}")


def elementwise(op: str, a: Shape, b: Shape, eq: DimEq) -> Shape:
    """`+ − ⊙`: equal shapes, a scalar on either side, or a `b · 1^⊺` broadcast."""
    _numeric(op, a, b)
    if not a.dims:
        return b.with_dims(b.dims, join_field(a, b))
    if not b.dims:
        return a.with_dims(a.dims, join_field(a, b))
    out = unify(a, b, eq)
    if out is None:
        hint = "broadcast a vector over columns with b · 1^⊺" if {a.rank, b.rank} == {1, 2} else ""
        raise ShapeError(f"{a} {op} {b}: {_where_differ(a, b, eq)}", hint)
    return out


def divide(a: Shape, b: Shape, eq: DimEq) -> Shape:
    _numeric("/", a, b)
    if not b.dims:
        return a.with_dims(a.dims, "R")
    out = unify(a, b, eq)
    if out is None:
        raise ShapeError(f"{a} / {b}: divide by a scalar or by a value of the same shape")
    return out.with_dims(out.dims, "R")


def matmul(a: Shape, b: Shape, eq: DimEq) -> Shape:
    """`A · B` in the column convention: (m×k)·(k×n), (m×k)·(k), (m)·(1×n), scalar·anything."""
    _numeric("·", a, b)
    field = join_field(a, b)
    if not a.dims or not b.dims:
        return Shape(field, a.dims or b.dims)
    if a.rank > 2 or b.rank > 2:
        raise ShapeError(
            f"{a} · {b}: · multiplies matrices and vectors, not {max(a.rank, b.rank)}-axis values"
        )
    a2 = a.dims if a.rank == 2 else (a.dims[0], Dim.num(1))
    b2 = b.dims if b.rank == 2 else (b.dims[0], Dim.num(1))
    if not eq.same(a2[1], b2[0]):
        hint = "a vector is a column: write v^⊺ · w for a dot product" if a.rank == b.rank == 1 else ""
        raise ShapeError(f"{a} · {b}: inner dimensions {a2[1]} and {b2[0]} differ", hint)
    if b.rank == 1:
        return Shape(field, () if a2[0] == 1 else (a2[0],))
    return Shape(field, (a2[0], b2[1]))


def transpose(a: Shape) -> Shape:
    """`v^⊺` of a vector is a row (1×n); the transpose of a row is a vector again (a column)."""
    if a.rank == 1:
        return Shape(a.field, (Dim.num(1), a.dims[0]))
    if a.rank == 2 and a.dims[0] == 1:
        return Shape(a.field, (a.dims[1],))
    if a.rank == 2:
        return Shape(a.field, (a.dims[1], a.dims[0]))
    raise ShapeError(f"^⊺ needs a vector or a matrix, got {a}", "a scalar needs no transpose")


# ── indexing ────────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class Pick:
    """One index item: `at` one position, or a slice `lo:hi` (None ends: from 1 / to the end)."""

    at: bool
    lo: Dim | None = None
    hi: Dim | None = None
    known: bool = True  # False when a slice end is not a dimension expression


def index(base: Shape, picks: list[Pick]) -> Shape:
    """`x[t]`, `X[:, t]`, `W[a:b, :]`, `X[i, j]`; 1-based and inclusive like the paper."""
    if not base.dims:
        raise ShapeError(f"cannot index {base}: it has no axes")
    if len(picks) != base.rank:
        raise ShapeError(
            f"{base} has {base.rank} ax{'is' if base.rank == 1 else 'es'} but is indexed with {len(picks)}",
            "a matrix takes two indices, e.g. X[:, t]",
        )
    kept: list[Dim | None] = []
    for p, n in zip(picks, base.dims):
        if p.at:
            continue
        if not p.known:
            kept.append(None)
        elif p.lo is None and p.hi is None:
            kept.append(n)
        else:
            hi = p.hi if p.hi is not None else n
            lo = p.lo if p.lo is not None else Dim.num(1)
            kept.append(None if hi is None else hi - lo + 1)
    if base.rank == 2 and picks[0].at and not picks[1].at:
        kept = [Dim.num(1), *kept]  # one row of a matrix stays a row (1×n)
    field = "V" if base.field == "V" else base.field
    return Shape(field, tuple(kept))


# ── concatenation ───────────────────────────────────────────────────────────────────────
def concat(items: list[Shape], axis: str, eq: DimEq) -> Shape:
    """`[a, b, c]` side by side (columns) or `[a; b; c]` stacked (rows)."""
    _numeric("[…]", *items)
    if all(not s.dims for s in items):
        return Shape("R", (Dim.num(len(items)),))
    if axis == "cols":
        mats = [s.dims if s.rank == 2 else (s.dims[0], Dim.num(1)) for s in items if s.rank in (1, 2)]
        if len(mats) != len(items):
            raise ShapeError("[a, b, …] puts vectors or matrices side by side")
        return Shape("R", (_common([m[0] for m in mats], items, eq), _total([m[1] for m in mats])))
    ranks = {s.rank for s in items}
    if ranks in ({1}, {0, 1}):  # a number among vectors is one entry: [a; b] appends b to a
        return Shape("R", (_total([s.dims[0] if s.dims else Dim.num(1) for s in items]),))
    if ranks == {2}:
        return Shape(
            "R", (_total([s.dims[0] for s in items]), _common([s.dims[1] for s in items], items, eq))
        )
    raise ShapeError(
        "[a; b; …] stacks values of one kind: " + ", ".join(str(s) for s in items),
        "stack vectors (and numbers, one entry each) or matrices",
    )


def family_concat(member: Shape, count: Dim | None, axis: str) -> Shape:
    """`[e_1, …, e_ℓ]` (members side by side) or `[Y^1; …; Y^H]` (members stacked)."""
    if not member.dims:
        return Shape("R", (count,))
    if member.rank > 2:
        raise ShapeError(f"cannot concatenate members of shape {member}")
    n = member.dims[-1] if axis == "cols" else member.dims[0]
    grown = None if n is None or count is None else count * n
    if axis == "cols":
        return Shape("R", (member.dims[0], grown) if member.rank == 2 else (member.dims[0], count))
    return Shape("R", (grown, *member.dims[1:]))


def _common(dims: list[Dim | None], items: list[Shape], eq: DimEq) -> Dim | None:
    first = next((d for d in dims if d is not None), None)
    if not all(eq.same(first, d) for d in dims):
        raise ShapeError("cannot concatenate " + ", ".join(str(s) for s in items) + ": sizes differ")
    return first


def _total(dims: list[Dim | None]) -> Dim | None:
    if any(d is None for d in dims):
        return None
    total = Dim.num(0)
    for d in dims:
        total = total + d
    return total
