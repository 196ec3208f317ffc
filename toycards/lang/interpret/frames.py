"""One running algorithm's names: the reference interpreter's frames, families and dimensions.

Owns: `Frame` (the loop and map variables in scope, the locals, the declared names — inputs,
hyperparameters, parameters, dimensions — and the families such as `e_•`, `Y^•` or the
per-layer `γ_•^1`), name lookup in the order docs/card-language.md gives ("How a name is found":
variables, locals, declared names, then a family member whose sub- or superscript is an index),
where an assignment stores its value, and the values of dimensions: evaluating `H·d_h` and
solving a callee's declared shapes against the shapes of its arguments (`W_q ∈ ℝ^{H·d_h×d_e}`
with H = 4 and a 64×32 matrix gives d_h = 16, d_e = 32).
Leaves out: evaluating expressions and running statements (machine.py).

>>> f = Frame(None, {})
>>> f.declared["H"] = 4
>>> solve([(ir.DimOp("*", ir.DimName("H"), ir.DimName("d_h")), 64)], f.declared)
>>> f.declared["d_h"]
16
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from toycards.lang import ir
from toycards.lang.interpret.values import Fault, is_number, whole
from toycards.lang.names import split_name

FAMILY_MARK = "•"


@dataclass
class Var:
    """A loop, map or Σ variable: its value, and the range of a map variable (for new arrays)."""

    value: int
    bound: int | None = None
    is_map: bool = False


@dataclass
class Mask:
    """A mask passed by definition, `Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧`: its entry (i, j) is the
    right-hand side with t_z = i, t_x = j, evaluated where the call is written."""

    indices: tuple[str, ...]
    body: ir.Expr
    frame: Frame
    evaluate: Callable[[ir.Expr, Frame], object]

    def entry(self, at: list[int]) -> object:
        if len(at) != len(self.indices):
            raise Fault(f"the mask has {len(self.indices)} indices, got {len(at)}")
        self.frame.vars.append({n: Var(i) for n, i in zip(self.indices, at)})
        try:
            return self.evaluate(self.body, self.frame)
        finally:
            self.frame.vars.pop()


def family_key(base: str, sub: str, sup: str) -> str:
    """The key of a family, the varying part written `•`: `γ_•^1`, `e_•`, `Y^•`."""
    return base + (f"_{sub}" if sub else "") + (f"^{sup}" if sup else "")


def member_keys(name: str) -> list[tuple[str, str]]:
    """The (family key, index text) a name may be a member of: superscript first, then subscript.

    >>> member_keys("γ_l^1")
    [('γ_l^•', '1'), ('γ_•^1', 'l')]
    """
    base, sub, sup = split_name(name)
    out = []
    if sup:
        out.append((family_key(base, sub, FAMILY_MARK), sup))
    if sub:
        out.append((family_key(base, FAMILY_MARK, sup), sub))
    return out


@dataclass
class Frame:
    """The names of one call of one algorithm."""

    algo: ir.Algorithm | None
    home: dict[str, ir.Algorithm]  # where the algorithm's own calls look first (its card)
    vars: list[dict[str, Var]] = field(default_factory=list)
    locals: dict[str, object] = field(default_factory=dict)
    declared: dict[str, object] = field(default_factory=dict)  # inputs, hyperparameters, params, dims
    families: dict[str, dict[int, object]] = field(default_factory=dict)
    options: frozenset[str] = frozenset()  # the options of enumeration hyperparameters
    writable: set[str] = field(default_factory=set)  # declared names whose entries may be assigned: inputs
    readonly: set[str] = field(default_factory=set)  # hyperparameters, parameters, parameter families
    built: set[str] = field(default_factory=set)  # arrays made by their entries (they outlive a map)

    # ── lookup ──
    def var(self, name: str) -> Var | None:
        for frame in reversed(self.vars):
            if name in frame:
                return frame[name]
        return None

    def exact(self, name: str) -> tuple[bool, object]:
        """(found, value) for a variable, a local or a declared name spelt exactly `name`."""
        v = self.var(name)
        if v is not None:
            return True, v.value
        for table in (self.locals, self.declared):
            if name in table:
                return True, table[name]
        return False, None

    def member(self, name: str, index: Callable[[str], int]) -> tuple[str, int] | None:
        """(family key, member index) when `name` is a member of a known family; `index` turns
        the written index (`1`, `t`, `⌈h·H_kv/H⌉`) into a number."""
        for key, text in member_keys(name):
            if key in self.families:
                try:
                    return key, index(text)
                except Fault:
                    continue  # `W_qkv^l`: "qkv" is no index, the superscript l is
        return None

    def map_var_of(self, name: str) -> str:
        """The map variable in scope that is `name`'s superscript or subscript (`e_t` → t), or ""."""
        _, sub, sup = split_name(name)
        for text in (sup, sub):
            v = self.var(text) if text else None
            if v is not None and v.is_map:
                return text
        return ""


# ── dimensions ──────────────────────────────────────────────────────────────────────────
def dim_names(d: ir.Dim) -> set[str]:
    if isinstance(d, ir.DimName):
        return {d.name}
    if isinstance(d, ir.DimOp):
        return dim_names(d.left) | dim_names(d.right)
    return set()


def dim_value(d: ir.Dim, value_of: Callable[[str], object]) -> Fraction:
    """A dimension expression's exact value (a Fraction), names through `value_of`."""
    if isinstance(d, ir.DimNum):
        return Fraction(d.value)
    if isinstance(d, ir.DimName):
        return Fraction(whole(value_of(d.name), f"the dimension {d.name}"))
    a, b = dim_value(d.left, value_of), dim_value(d.right, value_of)
    if d.op == "/":
        if b == 0:
            raise Fault("a dimension divides by zero")
        return a / b
    return {"+": a + b, "-": a - b, "*": a * b}[d.op]


def dim_int(d: ir.Dim, value_of: Callable[[str], object]) -> int:
    """A dimension's value, which must be a whole number (`d_e / H` must divide)."""
    v = dim_value(d, value_of)
    if v.denominator != 1 or v < 0:
        raise Fault(f"the dimension {_text(d)} is {v}, not a whole number")
    return int(v)


def _text(d: ir.Dim) -> str:
    if isinstance(d, ir.DimNum):
        return str(d.value)
    if isinstance(d, ir.DimName):
        return d.name
    return f"({_text(d.left)}{'·' if d.op == '*' else d.op}{_text(d.right)})"


def solve(pairs: list[tuple[ir.Dim, int]], known: dict[str, object]) -> None:
    """Bind the dimension names in `pairs` (pattern, size) into `known`, solving each pattern
    for its one unknown name once the others are known; a pattern whose names are all known
    must equal its size."""
    pending = list(pairs)
    while pending:
        left = []
        for pattern, size in pending:
            unknown = dim_names(pattern) - {n for n, v in known.items() if is_number(v)}
            if not unknown:
                got = dim_value(pattern, known.__getitem__)
                if got != size:
                    raise Fault(f"the dimension {_text(pattern)} is {got} here but the value has {size}")
                continue
            x = _solve_one(pattern, next(iter(unknown)), size, known) if len(unknown) == 1 else None
            if x is None:
                left.append((pattern, size))
            else:
                known[next(iter(unknown))] = x
        if len(left) == len(pending):
            return  # names no shape determines stay unbound; using one is an error there
        pending = left


def _solve_one(pattern: ir.Dim, name: str, size: int, known: dict[str, object]) -> int | None:
    """The whole x ≥ 0 with pattern(name = x) = size, for a pattern affine in `name`."""

    def at(x: int) -> Fraction | None:
        try:
            return dim_value(pattern, lambda n: x if n == name else known[n])
        except (Fault, ZeroDivisionError):
            return None

    f0, f1, f2 = at(0), at(1), at(2)
    if f0 is None or f1 is None or f2 is None or f1 == f0 or f2 - f1 != f1 - f0:
        return None
    x = (size - f0) / (f1 - f0)
    return int(x) if x.denominator == 1 and x >= 0 and at(int(x)) == size else None
