"""Symbolic dimension arithmetic: a normal form, exact division, evaluation and printing.

Owns: `Dim`, a dimension expression kept as a Laurent polynomial over dimension names with
`Fraction` coefficients, so that equal dimensions compare equal however they were written
(`3·d_e = d_e·3`, `(H·d_h)/H = d_h`, `b − a + 1` for a slice `a:b`); the divisions a dimension
went through (`d_e/H` must divide exactly once values are known); `from_ir` (IR → Dim),
`evaluate` (Dim → int for concrete values), `solve_for` (unification of a callee's dimension
pattern with a caller's dimension) and printing back in card syntax.
Leaves out: which names are dimensions and what derived hyperparameters stand for (the
checker passes substitutions in), and shapes (shapes.py).

>>> d_e, H = Dim.name("d_e"), Dim.name("H")
>>> str(3 * d_e), 3 * d_e == d_e * 3
('3·d_e', True)
>>> d_h = d_e / H
>>> str(d_h), H * d_h == d_e
('d_e/H', True)
>>> evaluate(d_h, {"d_e": 768, "H": 12})
64
>>> str(Dim.name("b") - Dim.name("a") + 1)
'b − a + 1'
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from fractions import Fraction

from toycards.errors import ToycardsError
from toycards.lang import ir
from toycards.lang.names import ascii_name

Monomial = tuple[tuple[str, int], ...]  # ((name, exponent), …) sorted by name, exponents ≠ 0


class DimError(ToycardsError):
    """A dimension that cannot be formed or evaluated (`10/3`, a missing value, `a/(b+c)`).

    A ToycardsError, so that a division that fails once values are concrete (a GGUF file whose
    d_e is not a multiple of H) reaches the user as a one-line message."""


def _mono_mul(a: Monomial, b: Monomial, sign: int = 1) -> Monomial:
    exps = dict(a)
    for name, e in b:
        exps[name] = exps.get(name, 0) + sign * e
    return tuple(sorted((n, e) for n, e in exps.items() if e))


class Dim:
    """An immutable dimension expression in normal form; equality ignores recorded divisions."""

    __slots__ = ("terms", "divisions", "_hash")

    def __init__(
        self, terms: dict[Monomial, Fraction] | None = None, divisions: tuple[tuple[Dim, Dim], ...] = ()
    ) -> None:
        self.terms: dict[Monomial, Fraction] = {m: c for m, c in (terms or {}).items() if c}
        self.divisions = divisions  # (numerator, denominator) pairs that must divide exactly
        self._hash: int | None = None

    # construction
    @staticmethod
    @functools.lru_cache(maxsize=4096)
    def name(n: str) -> Dim:
        return Dim({((n, 1),): Fraction(1)})

    @staticmethod
    def num(v: int | Fraction) -> Dim:
        return _small(v) if isinstance(v, int) and -8 <= v <= 64 else Dim({(): Fraction(v)})

    @staticmethod
    def lift(x: Dim | int) -> Dim:
        return x if isinstance(x, Dim) else Dim.num(x)

    # queries
    def names(self) -> set[str]:
        return {n for m in self.terms for n, _ in m}

    def constant(self) -> Fraction | None:
        """The value when the dimension has no names (`6/3` → 2), else None."""
        if not self.terms:
            return Fraction(0)
        if list(self.terms) == [()]:
            return self.terms[()]
        return None

    def as_name(self) -> str | None:
        """`d_e` → "d_e"; anything else → None."""
        if len(self.terms) == 1:
            ((m, c),) = self.terms.items()
            if c == 1 and len(m) == 1 and m[0][1] == 1:
                return m[0][0]
        return None

    def is_integral(self) -> bool:
        """True when written without division: whole coefficients and no negative exponents."""
        return all(c.denominator == 1 and all(e > 0 for _, e in m) for m, c in self.terms.items())

    # arithmetic
    def __add__(self, other: Dim | int) -> Dim:
        o = Dim.lift(other)
        terms = dict(self.terms)
        for m, c in o.terms.items():
            terms[m] = terms.get(m, Fraction(0)) + c
        return Dim(terms, self.divisions + o.divisions)

    __radd__ = __add__

    def __neg__(self) -> Dim:
        return Dim({m: -c for m, c in self.terms.items()}, self.divisions)

    def __sub__(self, other: Dim | int) -> Dim:
        return self + (-Dim.lift(other))

    def __rsub__(self, other: Dim | int) -> Dim:
        return Dim.lift(other) - self

    def __mul__(self, other: Dim | int) -> Dim:
        o = Dim.lift(other)
        terms: dict[Monomial, Fraction] = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in o.terms.items():
                m = _mono_mul(m1, m2)
                terms[m] = terms.get(m, Fraction(0)) + c1 * c2
        return Dim(terms, self.divisions + o.divisions)

    __rmul__ = __mul__

    def __truediv__(self, other: Dim | int) -> Dim:
        """Exact division; a constant that does not divide raises, a symbolic one is recorded."""
        o = Dim.lift(other)
        if not o.terms:
            raise DimError(f"{_paren(self)}/0: division by zero")
        if len(o.terms) != 1:
            raise DimError(f"cannot divide by a sum of dimensions ({o})")
        ((m, c),) = o.terms.items()
        inverse = Dim({_mono_mul((), m, -1): 1 / c})
        out = self * inverse
        mine, theirs = self.constant(), o.constant()
        if mine is not None and theirs is not None:
            if (mine / theirs).denominator != 1:
                raise DimError(f"{self}/{_paren(o)} is not a whole number")
            return Dim(out.terms, self.divisions + o.divisions)
        if out.is_integral():
            return Dim(out.terms, self.divisions + o.divisions)
        return Dim(out.terms, self.divisions + o.divisions + ((self, o),))

    def __rtruediv__(self, other: Dim | int) -> Dim:
        return Dim.lift(other) / self

    def __pow__(self, k: int) -> Dim:
        if k == 1:
            return self
        if k < 0:
            if len(self.terms) != 1:
                raise DimError(f"cannot divide by a sum of dimensions ({self})")
            return Dim.num(1) / self ** (-k)
        out = Dim.num(1)
        for _ in range(k):
            out = out * self
        return out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            other = Dim.num(other)
        return isinstance(other, Dim) and self.terms == other.terms

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self.terms.items()))
        return self._hash

    def substitute(self, defs: dict[str, Dim]) -> Dim:
        """Replace names by dimensions (derived hyperparameters, a callee's bindings)."""
        if not defs or not (self.names() & defs.keys()):
            return self
        out = Dim.num(0)
        for m, c in self.terms.items():
            kept = tuple((n, e) for n, e in m if n not in defs)
            term = Dim({kept: c})
            for n, e in m:
                if n in defs:
                    term = term * defs[n] ** e
            out = out + term
        divisions = tuple((a.substitute(defs), b.substitute(defs)) for a, b in self.divisions)
        return Dim(out.terms, divisions + out.divisions)

    # printing
    def __repr__(self) -> str:
        return f"Dim({str(self)!r})"

    def __str__(self) -> str:
        return self.render()

    def render(self, ascii: bool = False) -> str:
        """Card syntax: `3·d_e`, `d_e/H`, `b − a + 1` (ASCII: `3*d_e`, `b - a + 1`)."""
        if not self.terms:
            return "0"
        minus, dot = (" - ", "*") if ascii else (" − ", "·")
        order = sorted(self.terms.items(), key=lambda mc: (not mc[0], mc[1] < 0, mc[0]))
        out = ""
        for i, (m, c) in enumerate(order):
            text = _term(m, abs(c), dot, ascii)
            if i == 0:
                out = ("-" if ascii else "−") + text if c < 0 else text
            else:
                out += (minus if c < 0 else " + ") + text
        return out


@functools.cache
def _small(v: int) -> Dim:
    return Dim({(): Fraction(v)})


def _paren(d: Dim) -> str:
    text = str(d)
    return f"({text})" if len(d.terms) > 1 or " " in text or "/" in text else text


def _term(m: Monomial, c: Fraction, dot: str, ascii: bool) -> str:
    spell = ascii_name if ascii else (lambda n: n)
    up = [spell(n) for n, e in m for _ in range(e) if e > 0]
    down = [spell(n) for n, e in m for _ in range(-e) if e < 0]
    if c.numerator != 1 or not up:
        up.insert(0, str(c.numerator))
    if c.denominator != 1:
        down.insert(0, str(c.denominator))
    text = dot.join(up)
    if down:
        text += "/" + (down[0] if len(down) == 1 else "(" + dot.join(down) + ")")
    return text


# ── IR → Dim, evaluation, unification ───────────────────────────────────────────────────
_OPS = {"+": Dim.__add__, "-": Dim.__sub__, "*": Dim.__mul__, "/": Dim.__truediv__}


def from_ir(d: ir.Dim) -> Dim:
    """The normal form of a dimension as written in a type; raises DimError for `10/3`.

    >>> str(from_ir(ir.DimOp("*", ir.DimName("d_e"), ir.DimNum(3))))
    '3·d_e'
    """
    if isinstance(d, ir.DimName):
        return Dim.name(d.name)
    if isinstance(d, ir.DimNum):
        return Dim.num(d.value)
    return _OPS[d.op](from_ir(d.left), from_ir(d.right))


def evaluate(dim: Dim, values: dict[str, int]) -> int:
    """The whole number a dimension stands for; raises DimError on a missing value or inexact division.

    >>> evaluate(Dim.name("d_e") / Dim.name("H"), {"d_e": 10, "H": 3})
    Traceback (most recent call last):
    ...
    toycards.checker.dims.DimError: d_e/H = 10/3 is not a whole number
    """
    missing = sorted(dim.names() - values.keys())
    if missing:
        raise DimError(f"no value for dimension {', '.join(missing)} in {dim}")
    for num, den in dim.divisions:
        a, b = _value(num, values), _value(den, values)
        if b == 0:
            raise DimError(f"{_paren(num)}/{_paren(den)}: division by zero")
        if (a / b).denominator != 1:
            raise DimError(f"{_paren(num)}/{_paren(den)} = {a}/{b} is not a whole number")
    v = _value(dim, values)
    if v.denominator != 1:
        raise DimError(f"{dim} = {v} is not a whole number")
    return int(v)


def _value(dim: Dim, values: dict[str, int]) -> Fraction:
    total = Fraction(0)
    for m, c in dim.terms.items():
        term = c
        for n, e in m:
            term *= Fraction(values[n]) ** e
        total += term
    return total


def solve_for(pattern: Dim, value: Dim, known: dict[str, Dim]) -> tuple[str, Dim] | None:
    """Solve `pattern = value` for the one unknown name of `pattern`, if it appears linearly.

    `pattern` is in the callee's names, `known` maps callee names to caller dimensions and
    `value` is a caller dimension. Returns (name, dimension) or None when there is not exactly
    one unknown appearing with exponent 1 in one term.

    >>> solve_for(3 * Dim.name("d"), 3 * Dim.name("d_e"), {})
    ('d', Dim('d_e'))
    """
    unknown = pattern.names() - known.keys()
    if len(unknown) != 1:
        return None
    (u,) = unknown
    with_u = [(m, c) for m, c in pattern.terms.items() if any(n == u for n, _ in m)]
    if len(with_u) != 1 or dict(with_u[0][0])[u] != 1:
        return None
    m, c = with_u[0]
    coef = Dim({tuple((n, e) for n, e in m if n != u): c}).substitute(known)
    rest = Dim({k: v for k, v in pattern.terms.items() if k != m}).substitute(known)
    return u, (value - rest) / coef


_EXPR_OPS = {"+": Dim.__add__, "-": Dim.__sub__, "·": Dim.__mul__, "/": Dim.__truediv__}


def expr_to_dim(e: ir.Expr, is_dim: Callable[[str], bool]) -> Dim | None:
    """Read an expression as a dimension (`d_e / H`, `b − a + 1`, `2·i`), or None when it is not
    one (a call, a real number, a name that is not a dimension). Raises DimError for `10/3`.

    >>> str(expr_to_dim(ir.BinOp("/", ir.Name("d_e"), ir.Name("H")), lambda n: True))
    'd_e/H'
    """
    if isinstance(e, ir.Name):
        return Dim.name(e.id) if is_dim(e.id) else None
    if isinstance(e, ir.Num):
        return Dim.num(int(e.text)) if e.text.isdigit() else None
    if isinstance(e, ir.UnOp) and e.op == "-":
        inner = expr_to_dim(e.operand, is_dim)
        return None if inner is None else -inner
    if isinstance(e, ir.BinOp) and e.op in _EXPR_OPS:
        left = expr_to_dim(e.left, is_dim)
        right = expr_to_dim(e.right, is_dim) if left is not None else None
        return None if right is None else _EXPR_OPS[e.op](left, right)
    return None


def ir_dim_names(d: ir.Dim) -> list[ir.DimName]:
    """The name nodes of an IR dimension, left to right (`H·d_h` → H, d_h)."""
    out, stack = [], [d]
    while stack:
        x = stack.pop()
        if isinstance(x, ir.DimName):
            out.append(x)
        elif isinstance(x, ir.DimOp):
            stack += [x.right, x.left]
    return out


def type_dim_names(t: ir.Type) -> list[ir.DimName]:
    """The dimension name nodes of a declared type (`ℝ^{d_e×ℓ}` → d_e, ℓ; `[N_V]` → N_V)."""
    if isinstance(t, ir.TensorType):
        return [n for d in t.dims for n in ir_dim_names(d)]
    if isinstance(t, ir.IndexType):
        return ir_dim_names(t.bound)
    return []
