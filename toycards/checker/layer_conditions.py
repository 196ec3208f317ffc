"""Parameter groups that exist in some layers only: `for l ∈ [L], in "blk.{l-1}.", if n_kv[l] ≠ 0:`.

Owns: the group's condition (a scalar of hyperparameters and the group variable, like a step's
`if`), and the rule that a member of such a group is read only where its condition is known to
hold: inside `if c then … end` with c the group's condition (its variable renamed to the member's
index), or in the `else` of the opposite condition (`=` ↔ `≠`, `<` ↔ `≥`, `>` ↔ `≤`, `¬c` ↔ `c`),
or of `c ∧ …`; a condition `a ∧ b` holds where a and b each do (`if a then if b then … end end`). A layer whose branch is not taken then needs none of the group's tensors, and the
binder (models/binding.py) requires them exactly in the layers where the condition holds.
Leaves out: the steps' own checks (steps.py) and binding to a file.

>>> str(negate(ir.BinOp("=", ir.Name("a"), ir.Num("0"))).op)
'≠'
"""

from __future__ import annotations

from toycards.checker.context import Ctx
from toycards.checker.exprs import ExprChecker
from toycards.checker.names import Entry, family_key
from toycards.checker.shapes import NATURAL
from toycards.lang import ir
from toycards.lang.names import split_name

_OPPOSITE = {"=": "≠", "≠": "=", "<": "≥", "≥": "<", ">": "≤", "≤": ">"}


def negate(cond: ir.Expr) -> ir.Expr:
    """The opposite condition, written as a reader would: `a = b` → `a ≠ b`, `¬c` → `c`."""
    if isinstance(cond, ir.BinOp) and cond.op in _OPPOSITE:
        return ir.BinOp(_OPPOSITE[cond.op], cond.left, cond.right)
    if isinstance(cond, ir.UnOp) and cond.op == "¬":
        return cond.operand
    return ir.UnOp("¬", cond)


def check_layer_conditions(ctx: Ctx, ex: ExprChecker) -> None:
    """Each conditional group's condition, then every read of its members in the steps."""
    groups = [g for g in ctx.algo.param_decls if isinstance(g, ir.ParamGroup) and g.cond is not None]
    if not groups:
        return
    keys: dict[str, ir.ParamGroup] = {}
    for g in groups:
        _group_condition(ctx, ex, g)
        for d in g.decls:
            for n in d.names:
                if (key := family_key(n, g.var)) is not None:
                    keys[key] = g
    _Reads(ctx, keys).body(ctx.algo.body, ())


def _group_condition(ctx: Ctx, ex: ExprChecker, g: ir.ParamGroup) -> None:
    ctx.scope.push({g.var: Entry("loopvar", g.var, NATURAL, g, where=g.span.line)})
    ex.scalar(g.cond, "a group's condition")
    ctx.scope.pop()
    for node in ir.walk(g.cond):
        if not isinstance(node, ir.Name) or node.id == g.var:
            continue
        entry = ctx.scope.declared.get(node.id)
        if entry is None or entry.kind != "hyper":
            ctx.error(
                node.span,
                f"a group's condition may only use hyperparameters and {g.var}; {node.id} is not one",
                f"which layers hold the tensors comes from the file: `, if n_kv[{g.var}] ≠ 0`",
            )


def _rename(e: ir.Expr, var: str, to: str) -> ir.Expr:
    """`e` with the name `var` replaced by `to` (spans dropped: conditions compare by meaning)."""
    if isinstance(e, ir.Name):
        return ir.Name(to if e.id == var else e.id)
    if isinstance(e, ir.Num | ir.Const | ir.Str):
        return e
    if isinstance(e, ir.BinOp):
        return ir.BinOp(e.op, _rename(e.left, var, to), _rename(e.right, var, to))
    if isinstance(e, ir.UnOp):
        return ir.UnOp(e.op, _rename(e.operand, var, to))
    if isinstance(e, ir.Index):
        return ir.Index(_rename(e.base, var, to), tuple(_rename(i, var, to) for i in e.indices))
    if isinstance(e, ir.Call):
        args = tuple(_rename(a, var, to) for a in e.args)
        return ir.Call(e.func, args, tuple(_rename(p, var, to) for p in e.params), e.has_bar)
    return e


def _facts(cond: ir.Expr) -> tuple[ir.Expr, ...]:
    """What holds inside `then`: the condition, and each side of a conjunction."""
    if isinstance(cond, ir.BinOp) and cond.op == "∧":
        return (cond, *_facts(cond.left), *_facts(cond.right))
    return (cond,)


def _holds(need: ir.Expr, facts: tuple[ir.Expr, ...]) -> bool:
    """Whether `need` follows from `facts`: it is one of them, or a conjunction of two that do.

    >>> a, b = ir.BinOp(">", ir.Name("l"), ir.Name("L_d")), ir.BinOp(">", ir.Name("d_s"), ir.Num("0"))
    >>> _holds(ir.BinOp("∧", a, b), (a, b)), _holds(ir.BinOp("∧", a, b), (a,))
    (True, False)
    """
    if need in facts:
        return True
    return (
        isinstance(need, ir.BinOp)
        and need.op == "∧"
        and _holds(need.left, facts)
        and _holds(need.right, facts)
    )


class _Reads:
    def __init__(self, ctx: Ctx, keys: dict[str, ir.ParamGroup]) -> None:
        self.ctx, self.keys = ctx, keys

    def body(self, stmts: tuple[ir.Stmt, ...], facts: tuple[ir.Expr, ...]) -> None:
        for s in stmts:
            if isinstance(s, ir.If):
                self.reads(s.cond, facts)
                self.body(s.then, facts + self.facts(s.cond))
                self.body(s.orelse, facts + self.facts(negate(s.cond)))
            elif isinstance(s, ir.ForSeq | ir.ForAll):
                for part in (getattr(s, "start", None), getattr(s, "second", None), getattr(s, "stop", None)):
                    if part is not None:
                        self.reads(part, facts)
                self.body(s.body, facts)
            elif isinstance(s, ir.Assign | ir.Return):
                self.reads(s.value, facts)
                if isinstance(s, ir.Assign):
                    self.reads(s.target, facts)

    def facts(self, cond: ir.Expr) -> tuple[ir.Expr, ...]:
        """`_facts`, and for a flag f (a {0,1} hyperparameter or entry: `m_E[l]`) the other spelling
        of each fact about it: `f = 1` is `f ≠ 0`, `f = 0` is `f ≠ 1`."""
        out = _facts(cond)
        return out + tuple(same for f in out if (same := self.flag_twin(f)) is not None)

    def flag_twin(self, f: ir.Expr) -> ir.Expr | None:
        if not (isinstance(f, ir.BinOp) and f.op in ("=", "≠") and f.right in (ir.Num("0"), ir.Num("1"))):
            return None
        base = f.left.base if isinstance(f.left, ir.Index) else f.left
        entry = self.ctx.scope.declared.get(base.id) if isinstance(base, ir.Name) else None
        if entry is None or entry.kind != "hyper" or entry.shape is None or entry.shape.field != "B":
            return None
        other = ir.Num("1" if f.right == ir.Num("0") else "0")
        return ir.BinOp(_OPPOSITE[f.op], f.left, other)

    def reads(self, e: ir.Expr, facts: tuple[ir.Expr, ...]) -> None:
        for node in ir.walk(e):
            if not isinstance(node, ir.Name):
                continue
            _, sub, sup = split_name(node.id)
            for index in {sub, sup} - {""}:
                g = self.keys.get(family_key(node.id, index) or "")
                if g is None:
                    continue
                need = _rename(g.cond, g.var, index)
                if not _holds(need, facts):
                    self.ctx.error(
                        node.span,
                        f"{node.id} exists only in the layers where {self.ctx.text(g.cond)} (its group's condition)",
                        "read it inside `if` that condition `then … end`, or in the `else` of its opposite",
                    )
