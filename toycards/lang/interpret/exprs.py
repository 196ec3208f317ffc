"""Expressions, as the reference interpreter evaluates them: one node at a time.

Owns: the value of every expression node — names (docs/card-language.md's lookup order, then
family members such as `γ_l^1`, `e_ℓ`, `K̂^{⌈h·H_kv/H⌉}`, then enumeration options), numbers and
constants, the operators (values.py), indexing and masks entry by entry, `⟦cond⟧`, `Σ` as a
loop, `[e_1, …, e_ℓ]` and `[Y^1; …; Y^H]` as the family's members in order, and calls: a
builtin (primitives.py) or an algorithm of the card or the library, with the implicit map (an
argument with more trailing axes than the callee declares is passed one column, or one
entry, at a time).
Leaves out: running an algorithm's steps (machine.py supplies `invoke`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from toycards.errors import ToycardsError
from toycards.lang import ir
from toycards.lang.builtins import BUILTINS
from toycards.lang.interpret.frames import Frame, Mask, Var, member_keys
from toycards.lang.interpret.primitives import call_builtin
from toycards.lang.interpret.values import (
    ONES,
    Fault,
    Pick,
    compare,
    concat,
    describe,
    divide,
    elementwise,
    entrywise,
    matmul,
    negate,
    power,
    shape_of,
    take,
    transpose,
    truth,
    whole,
)  # fmt: skip
from toycards.lang.options import call_params, option_argument

_ARITH = {"+": "+", "-": "-", "⊙": "⊙"}


class Evaluator:
    """Evaluates expressions in a Frame; `invoke(algo, home, args, params)` runs a callee."""

    def __init__(self, card: ir.Card, library: dict[str, ir.Algorithm]) -> None:
        self.card = card
        self.library = library
        # the checker's rank of a node where known (models/reference.py gives it): it tells a 1×n
        # matrix from a row (a transposed vector) where a length of 1 makes the values alike
        self.rank_of: Callable[[object], int | None] = lambda node: None
        self._kinds = {
            ir.Name: self.name, ir.Num: self.num, ir.Const: self.const, ir.Str: lambda e, f: e.value,
            ir.UnOp: self.unop, ir.Transpose: self.transpose, ir.Index: self.index, ir.Call: self.call,
            ir.MaskDef: self.mask, ir.Indicator: self.indicator, ir.Sum: self.sum, ir.Concat: self.concat,
        }  # fmt: skip

    def invoke(self, algo: ir.Algorithm, home: dict, args: list, params: list) -> object:
        raise NotImplementedError

    def eval(self, e: ir.Expr, f: Frame) -> object:
        if isinstance(e, ir.BinOp):
            return self.binop(e, f)
        return self._kinds[type(e)](e, f)

    # ── names ──
    def name(self, e: ir.Name, f: Frame) -> object:
        return self.lookup(e.id, f)

    def lookup(self, name: str, f: Frame) -> object:
        found, value = f.exact(name)
        if found:
            return value
        member = f.member(name, lambda text: self.member_index(text, f))
        if member is not None:
            key, i = member
            if i not in f.families[key]:
                raise Fault(f"{name}: member {i} of the family {key} has no value")
            return f.families[key][i]
        if name in f.options:
            return name
        raise Fault(f"{name} has no value here")

    def member_index(self, text: str, f: Frame) -> int:
        """The number a family index stands for: `1`, `t`, `ℓ`, or an expression `⌈h·H_kv/H⌉`."""
        if text.isdigit():
            return int(text)
        found, value = f.exact(text)
        if found:
            return whole(value, f"the family index {text}")
        expr = _index_expr(text)
        if expr is None:
            raise Fault(f"the family index {text} is not an expression")
        return whole(self.eval(expr, f), f"the family index {text}")

    def num(self, e: ir.Num, f: Frame) -> int | float:
        return int(e.text) if e.text.isdigit() else float(e.text)

    def const(self, e: ir.Const, f: Frame) -> float:
        return math.inf if e.name == "∞" else math.pi

    # ── operators ──
    def binop(self, e: ir.BinOp, f: Frame) -> object:
        """A left-deep chain `a + b + … + z` is walked as a loop, not a recursion."""
        chain: list[ir.BinOp] = []
        node: ir.Expr = e
        while isinstance(node, ir.BinOp):
            chain.append(node)
            node = node.left
        value = self.eval(node, f)
        for op in reversed(chain):
            value = self.apply_op(op.op, value, self.eval(op.right, f), op)
        return value

    def apply_op(self, op: str, a: object, b: object, node: object = None) -> object:
        if op in _ARITH:
            return elementwise(op, a, b)
        if op == "·":
            rank = self.rank_of(node)
            return matmul(a, b, number=None if rank is None else rank == 0)
        if op == "/":
            return divide(a, b)
        if op == "^":
            return power(a, b)
        if op == "mod":
            return whole(a, "a mod b") % whole(b, "a mod b")
        if op == "∧":
            return truth(a) and truth(b)
        if op == "∨":
            return truth(a) or truth(b)
        return compare(op, a, b)

    def unop(self, e: ir.UnOp, f: Frame) -> object:
        v = self.eval(e.operand, f)
        if e.op == "-":
            return negate(v)
        if e.op == "¬":
            return not truth(v)
        return entrywise(BUILTINS["sqrt"].scalar, v, "√")

    def transpose(self, e: ir.Transpose, f: Frame) -> object:
        if isinstance(e.operand, ir.Num) and e.operand.text == "1":
            return ONES
        rank = self.rank_of(e)
        return transpose(self.eval(e.operand, f), vector=None if rank is None else rank == 1)

    def indicator(self, e: ir.Indicator, f: Frame) -> int:
        return 1 if truth(self.eval(e.cond, f)) else 0

    # ── indexing ──
    def index(self, e: ir.Index, f: Frame) -> object:
        base = self.eval(e.base, f)
        picks = [self.pick(i, f) for i in e.indices]
        if isinstance(base, Mask):
            if any(p.at is None for p in picks):
                raise Fault("a mask is read one entry at a time: Mask[t_z, t_x]")
            return base.entry([p.at for p in picks])
        return take(base, picks, _text(e.base))

    def pick(self, item: ir.Expr | ir.Slice, f: Frame) -> Pick:
        if isinstance(item, ir.Slice):
            lo = None if item.lo is None else whole(self.eval(item.lo, f), "a slice start")
            hi = None if item.hi is None else whole(self.eval(item.hi, f), "a slice end")
            return Pick(lo=lo, hi=hi)
        return Pick(at=whole(self.eval(item, f)))

    def mask(self, e: ir.MaskDef, f: Frame) -> Mask:
        return Mask(e.indices, e.body, f, self.eval)

    # ── Σ and concatenation ──
    def sum(self, e: ir.Sum, f: Frame) -> object:
        """`Σ_{i=lo}^{hi} body`: the body for i = lo, lo+1, …, hi, added in that order (0 if none)."""
        lo, hi = whole(self.eval(e.lo, f), "a sum's start"), whole(self.eval(e.hi, f), "a sum's end")
        total: object = 0
        f.vars.append({})
        try:
            for i in range(lo, hi + 1):
                f.vars[-1][e.var] = Var(i)
                term = self.eval(e.body, f)
                total = term if i == lo else elementwise("+", total, term)
        finally:
            f.vars.pop()
        return total

    def concat(self, e: ir.Concat, f: Frame) -> np.ndarray:
        items = (
            self.family_range(e.items[0], e.items[-1], f)
            if e.ellipsis
            else [self.eval(i, f) for i in e.items]
        )
        return concat(items, e.axis)

    def family_range(self, first: ir.Expr, last: ir.Expr, f: Frame) -> list[object]:
        """`e_1, …, e_ℓ`: the members of one family from the first index to the last."""
        if isinstance(first, ir.Name) and isinstance(last, ir.Name):
            ends = dict(member_keys(last.id))
            for key, text in member_keys(first.id):
                if key in f.families and key in ends:
                    lo, hi = self.member_index(text, f), self.member_index(ends[key], f)
                    missing = [i for i in range(lo, hi + 1) if i not in f.families[key]]
                    if missing:
                        raise Fault(f"{key}: members {missing} have no value")
                    return [f.families[key][i] for i in range(lo, hi + 1)]
        raise Fault(f"[{_text(first)}, …, {_text(last)}] names no family")

    # ── calls ──
    def call(self, c: ir.Call, f: Frame) -> object:
        algo, home = self.resolve(c.func, f)
        if algo is None:
            if c.func not in BUILTINS:
                raise Fault(f"unknown function {c.func}")
            if c.params:
                raise Fault(f"{c.func} takes no parameters after |")
            return call_builtin(BUILTINS[c.func], [self.eval(a, f) for a in c.args])
        args = [self.eval(a, f) for a in c.args]
        passed = call_params(algo, c)  # what it writes, then the defaults it leaves out
        params = [self.param(algo, name, p, f) for name, p in zip(algo.params, passed)]
        if len(args) != len(algo.inputs) or len(passed) != len(algo.params):
            raise Fault(
                f"{algo.name} takes {len(algo.inputs)} input(s) and {len(algo.params)} parameter(s), "
                f"got {len(args)} and {len(params)}"
            )
        return self.mapped(algo, home, args, params)

    def param(self, algo: ir.Algorithm, name: str, p: ir.Expr, f: Frame) -> object:
        """A parameter's value; a bare option of the callee's enumeration `name` is that option."""
        option = option_argument(algo, name, p)
        if option is not None and not f.exact(option)[0]:
            return option
        return self.eval(p, f)

    def resolve(self, name: str, f: Frame) -> tuple[ir.Algorithm | None, dict]:
        """An algorithm of the caller's own card first, then of the library, then a builtin."""
        if name in f.home:
            return f.home[name], f.home
        if name in self.library:
            return self.library[name], self.library
        return None, {}

    def mapped(self, algo: ir.Algorithm, home: dict, args: list, params: list) -> object:
        """The implicit map: inputs with trailing axes beyond their declaration are passed one
        column (or entry) at a time; the results are put back along those axes."""
        ranks = [declared_rank(algo, n) for n in algo.inputs]
        extra: tuple[int, ...] = ()
        for a, r, n in zip(args, ranks, algo.inputs):
            s = shape_of(a)
            if len(s) < r:
                raise Fault(f"{algo.name}: {n} gets {describe(a)}, declared with {r} axes")
            if s[r:] and extra and s[r:] != extra:
                raise Fault(f"{algo.name}: the arguments are mapped over different trailing axes")
            extra = s[r:] or extra
        if not extra:
            return self.invoke(algo, home, args, params)
        out = None
        for pos in np.ndindex(*extra):
            item = [a[(slice(None),) * r + pos] if len(shape_of(a)) > r else a for a, r in zip(args, ranks)]
            y = self.invoke(algo, home, item, params)
            if out is None:
                out = np.full(shape_of(y) + extra, np.nan)
            out[(slice(None),) * len(shape_of(y)) + pos] = y
        return out


def declared_rank(algo: ir.Algorithm, name: str) -> int:
    """How many axes the input `name` is declared with (`ℝ` 0, `ℝ^{n}` 1, `V^ℓ` 1, `ℝ^{d×ℓ}` 2)."""
    for d in algo.input_decls:
        if name in d.names and isinstance(d.type, ir.TensorType):
            return len(d.type.dims)
    return 0


def _text(e: ir.Expr) -> str:
    return e.id if isinstance(e, ir.Name) else "the value"


@functools.lru_cache(maxsize=256)
def _index_expr(text: str) -> ir.Expr | None:
    """A family index written in braces (`⌈h·H_kv/H⌉`), read with the card grammar itself."""
    from toycards.lang.parse import parse

    if "\n" in text:
        return None
    try:
        step = parse(f"Algorithm: a ← f(x)\n1 a ← {text}\n").main.body[0]
    except ToycardsError:
        return None
    return step.value if isinstance(step, ir.Assign) else None
