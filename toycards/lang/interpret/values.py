"""The values the reference interpreter computes with, and the card's operators on them.

Owns: what a value is at run time and the meaning of `+ − ⊙ / · ^ ^⊺`, indexing (1-based,
inclusive slices, checked bounds), entry writes, concatenation and the entry-by-entry use of a
scalar function, in the card's own orientation (a vector is a column; `X ∈ ℝ^{d×ℓ}` holds one
column per token; `W ∈ ℝ^{d_out×d_in}` is applied as `W · X`).
Leaves out: names, calls and statements (machine.py, frames.py), builtins (primitives.py).

Values:

- a number: a Python `int`/`float`/`bool` or a NumPy scalar (ℝ, ℕ, token ids, loop indices);
- a vector `ℝ^{n}`: a 1-axis float64 array (a column); a token sequence `V^ℓ`: a 1-axis int array;
- a matrix `ℝ^{m×n}`: a 2-axis array; a row (`v^⊺`, `X[i, :]`) is a matrix with one row;
- `ONES`, the row `1^⊺` whose length comes from context, and `Spread(b)`, the matrix `b · 1^⊺`
  that repeats the column b as often as the other side of `+`, `−` or `⊙` has columns;
- a `Mask` (frames.py): a matrix given by its entries, `Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧`;
- a string (an enumeration option, `linear`).

Every operator checks its operands' shapes the way docs/card-language.md states the rule, and
never relies on NumPy broadcasting: a vector plus a matrix is an error, not a silent broadcast.

>>> matmul(np.array([[1.0, 2.0]]), np.array([3.0, 4.0]))   # a row times a column is a number
11.0
>>> take(np.array([10.0, 20.0, 30.0, 40.0]), [Pick(lo=2, hi=3)]).tolist()   # x[2:3], 1-based
[20.0, 30.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from toycards.errors import ToycardsError


class Fault(ToycardsError):
    """A card step that has no value (a shape mismatch, an index out of range, …).

    The innermost step that fails puts its place in the card in front of the message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.located = False

    def at(self, span: object, algorithm: str) -> Fault:
        if not self.located:
            self.located = True
            self.message = f"{span}: in {algorithm}: {self.message}"
            self.args = (self.message,)
        return self


# ── value kinds ─────────────────────────────────────────────────────────────────────────
class _Ones:
    """`1^⊺`: a row of ones; its length is the number of columns on the other side."""

    def __repr__(self) -> str:
        return "1^⊺"


ONES = _Ones()


@dataclass(frozen=True)
class Spread:
    """`b · 1^⊺`: the column b repeated over as many columns as it is combined with."""

    column: np.ndarray

    def over(self, n_cols: int) -> np.ndarray:
        out = np.empty((len(self.column), n_cols))
        for j in range(n_cols):
            out[:, j] = self.column
        return out


def is_number(v: object) -> bool:
    return isinstance(v, int | float | np.number | np.bool_) and not isinstance(v, str)


def is_array(v: object) -> bool:
    return isinstance(v, np.ndarray)


def shape_of(v: object) -> tuple[int, ...]:
    """The card shape: () for a number, (n,) for a vector, (m, n) for a matrix."""
    if is_array(v):
        return v.shape
    if is_number(v):
        return ()
    raise Fault(f"{v!r} has no shape here")


def describe(v: object) -> str:
    """`ℝ^{3×4}`-style text of a value's shape, for messages."""
    if is_array(v) and v.ndim:
        return "ℝ^{" + "×".join(map(str, v.shape)) + "}"
    if is_number(v) or is_array(v):
        return "a number"
    if isinstance(v, Spread):
        return f"ℝ^{{{len(v.column)}×?}} (b · 1^⊺)"
    return type(v).__name__ if not isinstance(v, str) else f"the option {v}"


def copy(v: object) -> object:
    """Value semantics: every assignment and every argument gets its own copy."""
    return np.array(v, copy=True) if is_array(v) else v


def whole(v: object, what: str = "an index") -> int:
    """`v` as a whole number (3.0 → 3); anything else is an error."""
    if isinstance(v, bool | np.bool_):
        return int(v)
    if isinstance(v, int | np.integer):
        return int(v)
    if isinstance(v, float | np.floating) and math.isfinite(v) and float(v).is_integer():
        return int(v)
    raise Fault(f"{what} must be a whole number, got {v!r}")


def truth(v: object) -> bool:
    """A condition's value: a comparison, or an indicator or mask entry (1 or 0)."""
    if isinstance(v, bool | np.bool_):
        return bool(v)
    if is_number(v) and v in (0, 1):
        return bool(v)
    raise Fault(f"a condition must be true or false (or 1 or 0), got {v!r}")


def floats(v: object) -> object:
    """A number or array with reals in float64 (the interpreter's only precision)."""
    if is_array(v):
        return v.astype(np.float64)
    return v


# ── entry by entry ──────────────────────────────────────────────────────────────────────
def entrywise(fn: Callable[[float], object], v: object, what: str) -> object:
    """`fn` applied to each entry of v (a number, a vector or a matrix), one call per entry."""
    if not is_array(v):
        return _one(fn, v, what)
    out = np.empty(v.shape)
    for pos in np.ndindex(*v.shape):
        out[pos] = _one(fn, v[pos], what)
    return out


def _one(fn: Callable[[float], object], x: object, what: str) -> object:
    try:
        return fn(float(x))
    except (OverflowError, ValueError) as exc:
        raise Fault(f"{what}({float(x)!r}) has no value ({exc})") from None


# ── arithmetic ──────────────────────────────────────────────────────────────────────────
_ELEMENTWISE = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "⊙": lambda a, b: a * b,
}


def elementwise(op: str, a: object, b: object) -> object:
    """`a + b`, `a − b`, `a ⊙ b`: equal shapes, a number on either side, or a `b · 1^⊺` spread."""
    f = _ELEMENTWISE[op]
    if isinstance(a, Spread) and isinstance(b, Spread):  # b·1^⊺ + c·1^⊺ = (b + c)·1^⊺
        return Spread(elementwise(op, a.column, b.column))
    if isinstance(a, Spread) and is_array(b) and b.ndim == 2:
        a = _spread_like(a, b, op)
    if isinstance(b, Spread) and is_array(a) and a.ndim == 2:
        b = _spread_like(b, a, op)
    _numeric(op, a, b)
    if is_number(a) or is_number(b) or a.shape == b.shape:
        return f(floats(a), floats(b))
    raise Fault(f"{describe(a)} {_SHOW.get(op, op)} {describe(b)}: the shapes differ")


def _spread_like(s: Spread, other: np.ndarray, op: str) -> np.ndarray:
    if len(s.column) != other.shape[0]:
        raise Fault(f"{describe(s)} {_SHOW.get(op, op)} {describe(other)}: the column lengths differ")
    return s.over(other.shape[1])


_SHOW = {"-": "−"}


def _numeric(op: str, *vs: object) -> None:
    for v in vs:
        if not (is_number(v) or is_array(v)):
            raise Fault(f"{_SHOW.get(op, op)} needs numbers, vectors or matrices, got {describe(v)}")


def divide(a: object, b: object) -> object:
    """`a / b`: b a number, or a value of a's shape (entry by entry). Whole numbers that divide
    stay whole (`d_e / H`); otherwise the quotient is real."""
    if isinstance(a, Spread) and is_number(b):
        return Spread(divide(a.column, b))
    _numeric("/", a, b)
    if isinstance(a, int | np.integer) and isinstance(b, int | np.integer) and b != 0 and a % b == 0:
        return int(a) // int(b)
    if is_number(b) or (is_array(a) and a.shape == b.shape):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.float64(a) / b if is_number(a) and is_number(b) else floats(a) / floats(b)
    raise Fault(f"{describe(a)} / {describe(b)}: divide by a number or by a value of the same shape")


def power(a: object, b: object) -> object:
    """`(a)^b`, entry by entry; whole powers of whole numbers stay whole."""
    _numeric("^", a, b)
    if isinstance(a, int | np.integer) and isinstance(b, int | np.integer) and b >= 0:
        return int(a) ** int(b)
    if is_array(b) and not (is_number(a) or (is_array(a) and a.shape == b.shape)):
        raise Fault(f"{describe(a)} ^ {describe(b)}: the shapes differ")
    with np.errstate(invalid="ignore", over="ignore"):
        return np.power(np.float64(a) if is_number(a) else floats(a), b)


def negate(a: object) -> object:
    if isinstance(a, Spread):
        return Spread(-a.column)
    _numeric("−", a)
    return -floats(a) if is_array(a) else -a


def matmul(a: object, b: object, number: bool | None = None) -> object:
    """`A · B` in the column convention.

    A number times anything scales it; (m×k)·(k×n) is m×n; (m×k)·(k) is a vector of m entries,
    or a number when A is a row (1×k); a vector (m) times a row (1×n) is the m×n outer
    product; a vector times `1^⊺` is the spread `b · 1^⊺`. `number`: whether a 1×k matrix times
    a vector is a number (a row's product) or a vector of one entry, where the checker knows.
    """
    if b is ONES:
        if is_array(a) and a.ndim == 1:
            return Spread(floats(a))
        raise Fault(f"{describe(a)} · 1^⊺: only a vector is spread over columns")
    if isinstance(a, Spread) and is_number(b) or is_number(a) and isinstance(b, Spread):
        return Spread(matmul(a.column, b) if isinstance(a, Spread) else matmul(a, b.column))
    _numeric("·", a, b)
    if is_number(a) or is_number(b):
        return floats(a) * floats(b)
    if a.ndim > 2 or b.ndim > 2:
        raise Fault(f"{describe(a)} · {describe(b)}: · multiplies vectors and matrices")
    a2 = a if a.ndim == 2 else a.reshape(-1, 1)
    b2 = b if b.ndim == 2 else b.reshape(-1, 1)
    if a2.shape[1] != b2.shape[0]:
        raise Fault(f"{describe(a)} · {describe(b)}: inner dimensions {a2.shape[1]} and {b2.shape[0]} differ")
    product = np.matmul(floats(a2), floats(b2))
    if b.ndim == 2:
        return product
    row = a2.shape[0] == 1 and a.ndim == 2 if number is None else number
    return float(product[0, 0]) if row else product[:, 0]


def transpose(a: object, vector: bool | None = None) -> object:
    """`A^⊺`: a vector becomes a row (1×n), a row becomes a vector, a matrix is transposed.
    `vector`: whether the result is a vector (a row's transpose) or a matrix, where the checker
    knows; else a 1×n value is taken for a row."""
    if not is_array(a) or a.ndim not in (1, 2):
        raise Fault(f"^⊺ needs a vector or a matrix, got {describe(a)}")
    if a.ndim == 1:
        return a.reshape(1, -1).copy()
    if a.shape[0] == 1 and (vector is None or vector):
        return a[0].copy()
    return a.T.copy()


def compare(op: str, a: object, b: object) -> bool:
    if is_array(a) or is_array(b):
        raise Fault(f"{op} compares numbers (or options), got {describe(a)} and {describe(b)}")
    return {
        "<": lambda: a < b, "≤": lambda: a <= b, "=": lambda: a == b, "≠": lambda: a != b,
        "≥": lambda: a >= b, ">": lambda: a > b,
    }[op]()  # fmt: skip


# ── indexing ────────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class Pick:
    """One index item, 1-based: `at` one position, or the inclusive slice `lo:hi` (None: the end)."""

    at: int | None = None
    lo: int | None = None
    hi: int | None = None


def _numpy_index(shape: tuple[int, ...], picks: list[Pick], what: str) -> tuple:
    if len(picks) != len(shape):
        raise Fault(
            f"{what} has {len(shape)} ax{'is' if len(shape) == 1 else 'es'}, indexed with {len(picks)}"
        )
    out: list[object] = []
    for p, n in zip(picks, shape):
        if p.at is not None:
            if not 1 <= p.at <= n:
                raise Fault(f"index {p.at} is outside 1…{n} of {what}")
            out.append(p.at - 1)
            continue
        lo, hi = (1 if p.lo is None else p.lo), (n if p.hi is None else p.hi)
        if not (1 <= lo <= hi + 1 and hi <= n):
            raise Fault(f"slice {lo}:{hi} is outside 1…{n} of {what}")
        out.append(slice(lo - 1, hi))
    return tuple(out)


def take(base: object, picks: list[Pick], what: str = "the value") -> object:
    """`x[t]`, `X[:, t]`, `W[a:b, :]`, `X[i, j]` (a copy); one row of a matrix stays a row."""
    if not is_array(base):
        raise Fault(f"cannot index {describe(base)}: it has no axes")
    out = base[_numpy_index(base.shape, picks, what)]
    if base.ndim == 2 and picks[0].at is not None and picks[1].at is None:
        out = out.reshape(1, -1)
    return copy(out) if is_array(out) else out


def write(target: np.ndarray, picks: list[Pick], value: object, what: str) -> None:
    """`S[t_z, t_x] ← v`, `X̃[:, t] ← v`: the entries picked get `value`, whose shape must be
    the shape those entries have."""
    region = take(target, picks, what)
    if shape_of(region) != shape_of(value):
        raise Fault(f"{what}: the entries picked are {describe(region)} but the value is {describe(value)}")
    idx = _numpy_index(target.shape, picks, what)
    target[idx] = np.reshape(value, np.shape(target[idx])) if is_array(value) else value


# ── concatenation ───────────────────────────────────────────────────────────────────────
def concat(items: list[object], axis: str) -> np.ndarray:
    """`[a, b, c]` (columns side by side) or `[a; b; c]` (stacked by rows); numbers make a vector,
    and stacked among vectors a number is one entry."""
    _numeric("[…]", *items)
    if all(is_number(v) for v in items):
        return np.array([float(v) for v in items])
    if axis == "rows" and all(is_number(v) or v.ndim == 1 for v in items):  # [a; b]: b one more entry
        return np.concatenate([np.array([float(v)]) if is_number(v) else floats(v) for v in items])
    if any(is_number(v) for v in items):
        raise Fault("[…] mixes numbers with vectors or matrices: " + ", ".join(map(describe, items)))
    if axis == "cols":
        cols = [v.reshape(-1, 1) if v.ndim == 1 else v for v in items]
        if len({c.shape[0] for c in cols}) != 1:
            raise Fault("[a, b, …]: the columns differ in length: " + ", ".join(map(describe, items)))
        return np.concatenate([floats(c) for c in cols], axis=1)
    ranks = {v.ndim for v in items}
    if ranks == {2} and len({v.shape[1] for v in items}) != 1:
        raise Fault("[a; b; …]: the blocks differ in width: " + ", ".join(map(describe, items)))
    if len(ranks) != 1:
        raise Fault("[a; b; …] stacks values of one kind: " + ", ".join(map(describe, items)))
    return np.concatenate([floats(v) for v in items], axis=0)
