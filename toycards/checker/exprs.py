"""Shape inference for expressions.

Owns: the shape of every expression node (recorded in `AlgoInfo.shapes`), the symbol of every
name node (`AlgoInfo.symbols`), and the diagnostics for unknown names, family members used
outside their loop, operator shape mismatches, indexing, concatenation, indicators and sums.
Long left-deep chains (`a + a + … + a`) are walked iteratively, so that a 10,000-term sum
needs no deep recursion. Calls are delegated to calls.py.
Leaves out: statements (steps.py) and the operator rules themselves (shapes.py).
"""

from __future__ import annotations

from toycards.checker.context import Ctx
from toycards.checker.dims import Dim, DimError, expr_to_dim
from toycards.checker.fragments import parse_expr_text
from toycards.checker.names import Entry, Symbol
from toycards.checker.shapes import (
    BINARY,
    NATURAL,
    SCALAR,
    Pick,
    Shape,
    ShapeError,
    concat,
    divide,
    elementwise,
    family_concat,
    index,
    join_field,
    matmul,
    transpose,
)
from toycards.lang import ir

_SHOW = {"-": "−"}
_CMP = {"<", "≤", "=", "≠", "≥", ">"}


class ExprChecker:
    def __init__(self, ctx: Ctx) -> None:
        from toycards.checker.calls import CallChecker  # calls.py needs this class too

        self.ctx = ctx
        self.calls = CallChecker(self)
        self._kinds = {
            ir.Name: self.name, ir.Num: self.num, ir.Const: lambda e: SCALAR, ir.Str: lambda e: Shape("S"),
            ir.UnOp: self.unop, ir.Transpose: self.transpose, ir.Index: self.index, ir.Call: self.calls.call,
            ir.MaskDef: self.stray_mask, ir.Indicator: self.indicator, ir.Sum: self.sum, ir.Concat: self.concat,
        }  # fmt: skip

    def infer(self, e: ir.Expr) -> Shape | None:
        """The shape of `e` (None after a reported error); records shapes and symbols."""
        s = self._chain(e) if isinstance(e, ir.BinOp) else self._kinds[type(e)](e)
        if s is not None:
            self.ctx.info.shapes[id(e)] = s
        return s

    def scalar(self, e: ir.Expr, what: str) -> Shape | None:
        s = self.infer(e)
        if s is not None and not s.is_scalar() and s.field != "I":
            self.ctx.error(e.span, f"{what} must be a scalar, got {s}", shapes=(s,))
            return None
        return s

    def dim(self, e: ir.Expr) -> Dim | None:
        """`e` read as a dimension, or None (not reported: the caller decides)."""
        try:
            return expr_to_dim(e, self.ctx.scope.is_dim)
        except DimError as exc:
            self.ctx.error(e.span, f"dimension {exc}")
            return None
        except RecursionError:
            return None

    # ── names ──
    def name(self, e: ir.Name) -> Shape | None:
        scope = self.ctx.scope
        found = scope.lookup(e.id)
        if found is None:
            return self._unresolved(e)
        entry, idx = found.entry, None
        if found.index_text:
            idx = self.member_index(found.index_text, e)
        self.ctx.info.symbols[id(e)] = Symbol(entry.kind, entry.key, idx, entry.decl)
        return entry.shape

    def _unresolved(self, e: ir.Name) -> Shape | None:
        scope = self.ctx.scope
        if e.id in scope.options:
            opt = scope.options[e.id]
            self.ctx.info.symbols[id(e)] = Symbol("option", e.id, None, opt.decl)
            return opt.shape
        member = scope.unbound_member(e.id)
        if member is not None:
            entry, var = member
            self.ctx.error(
                e.span,
                f"{e.id}: the index {var} is not bound here",
                f"{entry.key} is a family indexed by {entry.family_var}; use it inside a loop over {var}",
            )
            return None
        self.ctx.error(e.span, f"unknown name {e.id}", scope.hint_for(e.id))
        return None

    def member_index(self, text: str, e: ir.Name) -> ir.Expr | None:
        if text.isdigit():
            idx: ir.Expr | None = ir.Num(text, span=e.span)
        elif self.ctx.scope.var(text) is not None or self.ctx.scope.is_dim(text):
            idx = ir.Name(text, span=e.span)
        else:
            idx = parse_expr_text(text, e.span)
        if idx is None:
            self.ctx.error(e.span, f"cannot read the family index {{{text}}} of {e.id}")
            return None
        self.scalar(idx, f"the index {text} of {e.id}")
        return idx

    def num(self, e: ir.Num) -> Shape:
        return NATURAL if e.text.isdigit() else SCALAR

    def stray_mask(self, e: ir.MaskDef) -> None:
        self.ctx.error(e.span, "a mask definition `Mask[…] = …` is only allowed as a call parameter")
        return None

    # ── operators ──
    def _chain(self, e: ir.BinOp) -> Shape | None:
        chain: list[ir.BinOp] = []
        node: ir.Expr = e
        while isinstance(node, ir.BinOp):
            chain.append(node)
            node = node.left
        left = self.infer(node)
        for b in reversed(chain):
            right = self.infer(b.right)
            left = self.binop(b, left, right)
            if left is not None and b is not e:
                self.ctx.info.shapes[id(b)] = left
        return left

    def binop(self, b: ir.BinOp, left: Shape | None, right: Shape | None) -> Shape | None:
        if left is None or right is None:
            return None
        op, eq = b.op, self.ctx.eq
        try:
            if op in ("+", "-", "⊙"):
                return elementwise(_SHOW.get(op, op), left, right, eq)
            if op == "/":
                return divide(left, right, eq)
            if op == "·":
                return matmul(left, right, eq)
            if op in _CMP and "E" in (left.field, right.field):
                return self.enum_compare(b, left, right)
            if op == "^":
                _need_scalar("an exponent", right)
                return elementwise("^", left, SCALAR, eq).with_dims(left.dims, "R")
            _need_scalar(f"each side of {op}", left)
            _need_scalar(f"each side of {op}", right)
            return Shape(join_field(left, right)) if op == "mod" else BINARY
        except ShapeError as exc:
            self.ctx.error(b.span, exc.message, exc.hint, (left, right))
            return None

    def enum_compare(self, b: ir.BinOp, left: Shape, right: Shape) -> Shape:
        enum, other, node = (left, right, b.right) if left.field == "E" else (right, left, b.left)
        if b.op not in ("=", "≠"):
            raise ShapeError(f"an option of {enum} can only be compared with = or ≠")
        if isinstance(node, ir.Str) and node.value not in enum.options:
            raise ShapeError(f"{node.value!r} is not one of {enum}")
        if other.field not in ("E", "S") or (other.field == "E" and other.options != enum.options):
            raise ShapeError(f"{other} compared with an option of {enum}")
        return BINARY

    def unop(self, e: ir.UnOp) -> Shape | None:
        s = self.infer(e.operand)
        if s is None:
            return None
        if not s.numeric:
            self.ctx.error(e.span, f"{_SHOW.get(e.op, e.op)} needs numbers, got {s}", shapes=(s,))
            return None
        if e.op == "¬":
            if s.dims:
                self.ctx.error(e.span, f"¬ needs a scalar condition, got {s}", shapes=(s,))
                return None
            return BINARY
        return s.with_dims(s.dims, "R" if e.op == "√" else ("Z" if s.field in "NBI" else s.field))

    def transpose(self, e: ir.Transpose) -> Shape | None:
        if isinstance(e.operand, ir.Num) and e.operand.text == "1":
            self.infer(e.operand)
            return Shape("R", (Dim.num(1), None))  # a row of ones, width from context
        s = self.infer(e.operand)
        if s is None:
            return None
        try:
            return transpose(s)
        except ShapeError as exc:
            self.ctx.error(e.span, exc.message, exc.hint, (s,))
            return None

    # ── indexing, indicators, sums, concatenation ──
    def index(self, e: ir.Index) -> Shape | None:
        base = self.infer(e.base)
        picks = [self.pick(i) for i in e.indices]
        if base is None or any(p is None for p in picks):
            return None
        try:
            return index(base, picks)
        except ShapeError as exc:
            self.ctx.error(e.span, f"{self.ctx.text(e.base)}: {exc.message}", exc.hint, (base,))
            return None

    def pick(self, item: ir.Expr | ir.Slice) -> Pick | None:
        if not isinstance(item, ir.Slice):
            return Pick(True) if self.scalar(item, "an index") is not None else None
        ends = [x for x in (item.lo, item.hi) if x is not None]
        if any(self.scalar(x, "a slice end") is None for x in ends):
            return None
        lo = self.dim(item.lo) if item.lo is not None else None
        hi = self.dim(item.hi) if item.hi is not None else None
        known = (item.lo is None or lo is not None) and (item.hi is None or hi is not None)
        return Pick(False, lo, hi, known)

    def indicator(self, e: ir.Indicator) -> Shape | None:
        return BINARY if self.scalar(e.cond, "the condition in ⟦…⟧") is not None else None

    def sum(self, e: ir.Sum) -> Shape | None:
        self.scalar(e.lo, "the lower end of Σ")
        self.scalar(e.hi, "the upper end of Σ")
        self.ctx.scope.push({e.var: Entry("loopvar", e.var, NATURAL, e, bound=self.dim(e.hi))})
        try:
            body = self.infer(e.body)
        finally:
            self.ctx.scope.pop()
        return None if body is None else body.with_dims(body.dims, "R")

    def concat(self, e: ir.Concat) -> Shape | None:
        if e.ellipsis:
            return self.family_range(e)
        shapes = [self.infer(x) for x in e.items]
        if any(s is None for s in shapes):
            return None
        try:
            return concat(shapes, e.axis, self.ctx.eq)
        except ShapeError as exc:
            self.ctx.error(e.span, exc.message, exc.hint, tuple(shapes))
            return None

    def family_range(self, e: ir.Concat) -> Shape | None:
        first, last = e.items
        shapes = [self.infer(first), self.infer(last)]
        syms = [self.ctx.info.symbols.get(id(x)) for x in (first, last)]
        if any(s is None for s in shapes):
            return None
        if (
            not all(isinstance(x, ir.Name) for x in (first, last))
            or any(s is None or s.family_index is None for s in syms)
            or syms[0].key != syms[1].key
        ):
            sep = "," if e.axis == "cols" else ";"
            self.ctx.error(
                e.span,
                f"[{self.ctx.text(first)}{sep} …{sep} {self.ctx.text(last)}] needs two members of one family",
                f"e.g. [e_1{sep} …{sep} e_ℓ] after `for t ∈ [ℓ]: e_t ← …`",
            )
            return None
        lo, hi = self.dim(syms[0].family_index), self.dim(syms[1].family_index)
        count = None if lo is None or hi is None else hi - lo + 1
        try:
            return family_concat(shapes[0], count, e.axis)
        except ShapeError as exc:
            self.ctx.error(e.span, exc.message, exc.hint, (shapes[0],))
            return None


def _need_scalar(what: str, s: Shape) -> None:
    if s.dims:
        raise ShapeError(f"{what} must be a scalar, got {s}")
