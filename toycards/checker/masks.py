"""What a mask or a condition says about positions, for the cache planner (tokenflow.py).

Owns: recognising a mask-typed hyperparameter, the value −∞, a causal indicator (one of its
conjuncts is `t_z ≤ t_x`, so sliding windows count), a masking condition (`¬Mask[t_z, t_x]` with
a causal Mask, or `t_z > t_x`), and factors that are evidently positive (dividing masked scores
by them keeps −∞ where it was).
Leaves out: following values through a card (tokenflow.py).

>>> from toycards.codegen.code import parse_expr
>>> causal_condition(parse_expr("⟦t_x − w < t_z ∧ t_z ≤ t_x⟧").cond, "t_z", "t_x")
True
>>> causal_condition(parse_expr("⟦t_z ≥ t_x⟧").cond, "t_z", "t_x")
False
"""

from __future__ import annotations

from toycards.lang import ir


def is_mask(t) -> bool:
    return isinstance(t, ir.TensorType) and t.field == "B" and len(t.dims) == 2


def is_neg_inf(e) -> bool:
    return (
        isinstance(e, ir.UnOp)
        and e.op in ("-", "−")
        and isinstance(e.operand, ir.Const)
        and e.operand.name == "∞"
    )


def positive(e) -> bool:
    """A factor that is evidently positive: a positive number, √…, exp(…), and their products."""
    if isinstance(e, ir.Num):
        return float(e.text) > 0
    if isinstance(e, ir.Call) and e.func in ("√", "sqrt", "exp"):
        return True
    if isinstance(e, ir.UnOp) and e.op in ("√", "sqrt"):
        return True
    if isinstance(e, ir.BinOp) and e.op in ("·", "/", "⊙"):
        return positive(e.left) and positive(e.right)
    return False


def conjuncts(cond):
    if isinstance(cond, ir.BinOp) and cond.op in ("∧", "and"):
        yield from conjuncts(cond.left)
        yield from conjuncts(cond.right)
    else:
        yield cond


def causal_condition(cond, z: str, x: str) -> bool:
    """cond implies z ≤ x: one of its conjuncts is `z ≤ x`, `z < x`, `x ≥ z` or `x > z`."""
    for c in conjuncts(cond):
        if isinstance(c, ir.BinOp) and isinstance(c.left, ir.Name) and isinstance(c.right, ir.Name):
            pair = (c.left.id, c.right.id)
            if (c.op in ("≤", "<=", "<") and pair == (z, x)) or (c.op in ("≥", ">=", ">") and pair == (x, z)):
                return True
    return False


def unmasked_by(cond, z: str, x: str, causal: frozenset) -> bool:
    """cond is `¬M[z, x]` with M a causal mask."""
    if not (isinstance(cond, ir.UnOp) and cond.op in ("¬", "not") and isinstance(cond.operand, ir.Index)):
        return False
    m = cond.operand
    return (
        isinstance(m.base, ir.Name)
        and m.base.id in causal
        and [getattr(i, "id", None) for i in m.indices] == [z, x]
    )


def after(cond, z: str, x: str) -> bool:
    """cond is `z > x` (or `x < z`): the entries past the query's position."""
    if isinstance(cond, ir.BinOp) and isinstance(cond.left, ir.Name) and isinstance(cond.right, ir.Name):
        pair = (cond.left.id, cond.right.id)
        return (cond.op == ">" and pair == (z, x)) or (cond.op == "<" and pair == (x, z))
    return False
