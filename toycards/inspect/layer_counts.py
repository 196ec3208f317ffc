"""How many layers a per-layer condition picks, for the cost of a card (cost.py).

Owns: the symbol that counts the turns of a layer loop where conditions on the loop variable hold
(`#{l: n_kv[l] = 0}`: the convolution blocks of an LFM2 file, whose per-layer hyperparameter
n_kv says which blocks attend), and its number once the hyperparameters are known.
Leaves out: the FLOPs and parameters themselves (cost.py) and binding (models/binding.py).

>>> counts = LayerCounts()
>>> cond = ir.BinOp("=", ir.Index(ir.Name("n_kv"), (ir.Name("l"),)), ir.Num("0"))
>>> d = counts.count("l", ir.Num("1"), ir.Name("L"), (cond,))
>>> str(d), counts.values({"L": 3, "n_kv": (0, 8, 0)})
('#{l: n_kv[l] = 0}', {'#{l: n_kv[l] = 0}': 2})
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from toycards.checker.dims import Dim, from_ir
from toycards.checker.layer_conditions import negate
from toycards.lang import ir
from toycards.lang.printer import Renderer


def mentions(e: ir.Expr, var: str) -> bool:
    """Whether the name `var` occurs in `e`."""
    return any(isinstance(n, ir.Name) and n.id == var for n in ir.walk(e))


class LayerCounts:
    """Count symbols handed out while a card's cost is read, and what each counts."""

    def __init__(self) -> None:
        # symbol → (loop variable, first value, last value, conditions that all hold)
        self.what: dict[str, tuple[str, ir.Expr, ir.Expr, tuple[ir.Expr, ...]]] = {}

    def count(self, var: str, start: ir.Expr, stop: ir.Expr, conds: tuple[ir.Expr, ...]) -> Dim:
        """The number of values of `var` from `start` to `stop` where every one of `conds` holds."""
        r = Renderer()
        symbol = f"#{{{var}: {' ∧ '.join(r.expr(c) for c in conds)}}}"
        self.what[symbol] = (var, start, stop, conds)
        return Dim.name(symbol)

    def loop(
        self,
        s: ir.ForSeq,
        stmts: Sequence[ir.Stmt],
        stmt: Callable[[ir.Stmt], Dim],
        block: Callable[[Sequence[ir.Stmt]], Dim],
        turns: Dim,
        conds: tuple[ir.Expr, ...] = (),
    ) -> Dim:
        """The cost of a sequential loop's body, `stmt` (one step's cost) times the turns each step
        runs in: a branch on the loop variable whose branches cost differently (`if n_kv[l] = 0`)
        runs in the turns its conditions pick, `#{l: n_kv[l] = 0}` and `#{l: n_kv[l] ≠ 0}`; so does a
        choice between two branches that both have products (`if E = 0`: an MLP, else experts), in all
        turns or none."""
        total = Dim.num(0)
        for st in stmts:
            if isinstance(st, ir.If) and _splits(st, s.var, block):
                total += self.loop(s, st.then, stmt, block, turns, (*conds, st.cond))
                total += self.loop(s, st.orelse, stmt, block, turns, (*conds, negate(st.cond)))
            else:
                total += (self.count(s.var, s.start, s.stop, conds) if conds else turns) * stmt(st)
        return total

    def group(self, g: ir.ParamGroup) -> Dim:
        """How many layers hold a group's tensors: all, or those its condition picks (`, if n_kv[l] ≠ 0`)."""
        if g.cond is None:
            return from_ir(g.bound)
        return self.count(g.var, ir.Num("1"), _expr(g.bound), (g.cond,))

    def values(self, hyper: dict[str, object]) -> dict[str, int]:
        """Each symbol's number under the hyperparameters `hyper`; a symbol they cannot decide is left out."""
        from toycards.models.scalars import EvalError, eval_scalar

        out = {}
        for symbol, (var, start, stop, conds) in self.what.items():
            try:
                lo, hi = int(eval_scalar(start, hyper)), int(eval_scalar(stop, hyper))
                out[symbol] = sum(
                    all(eval_scalar(c, {**hyper, var: v}) for c in conds) for v in range(lo, hi + 1)
                )
            except (EvalError, TypeError, ValueError):
                continue
        return out


def _splits(st: ir.If, var: str, block: Callable[[Sequence[ir.Stmt]], Dim]) -> bool:
    """Whether a branch in a layer loop is counted in the turns its condition picks: its branches cost
    differently, and it reads the loop variable or both of them have products."""
    then, orelse = block(st.then), block(st.orelse)
    zero = Dim.num(0)
    return then != orelse and (mentions(st.cond, var) or (then != zero and orelse != zero))


def _expr(d: ir.Dim) -> ir.Expr:
    """A dimension as an expression (`L`), to evaluate with the hyperparameters."""
    if isinstance(d, ir.DimName):
        return ir.Name(d.name)
    if isinstance(d, ir.DimNum):
        return ir.Num(str(d.value))
    return ir.BinOp({"*": "·"}.get(d.op, d.op), _expr(d.left), _expr(d.right))
