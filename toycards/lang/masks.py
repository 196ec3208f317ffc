"""The sliding window a mask's own text states.

Owns: `mask_window(m)`: for a mask `Mask[t_z, t_x] = ⟦…⟧` (key position t_z, query position t_x), an
expression w of other names such that the mask is false wherever t_x − t_z ≥ w, read from one
conjunct of its condition (`t_x − t_z < w`, `t_z > t_x − w`, `t_x − t_z ≤ w − 1`, `t_z + w > t_x`, …);
None where no conjunct says so. It is sound by construction: a conjunction is false where any of
its conjuncts is, whatever the others say. Generated code notes the window on the mask
(runtime/context.py `windowed`), so that a KV cache may drop the rows no later query reads.
Leaves out: what a window costs (inspect/memory.py), how a cache drops rows (runtime/context.py).

>>> from toycards.codegen.code import parse_expr
>>> def window(text):
...     w = mask_window(ir.MaskDef("Mask", ("t_z", "t_x"), parse_expr(text)))
...     return None if w is None else render(w)
>>> window("⟦t_z ≤ t_x ∧ t_x − t_z < w⟧"), window("⟦t_z > t_x − w ∧ t_z ≤ t_x⟧"), window("⟦t_x − t_z ≤ w⟧")
('w', 'w', 'w + 1')
>>> window("⟦t_z ≤ t_x⟧"), window("⟦t_z ≤ t_x ∨ t_x − t_z < w⟧"), window("⟦t_z − t_x < w⟧")
(None, None, None)
"""

from __future__ import annotations

from toycards.lang import ir

COMPARISONS = ("<", "≤", ">", "≥")


def mask_window(m: ir.MaskDef) -> ir.Expr | None:
    """w where a conjunct of `m`'s condition rules out every key t_z ≤ t_x − w (see the module)."""
    if len(m.indices) != 2:
        return None
    z, x = m.indices
    cond = m.body.cond if isinstance(m.body, ir.Indicator) else m.body
    for conjunct in _conjuncts(cond):
        w = _window(conjunct, z, x)
        if w is not None:
            return w
    return None


def render(e: ir.Expr) -> str:
    from toycards.lang.printer import Renderer

    return Renderer().expr(e)


def _conjuncts(e: ir.Expr):
    if isinstance(e, ir.BinOp) and e.op == "∧":
        yield from _conjuncts(e.left)
        yield from _conjuncts(e.right)
    else:
        yield e


def _window(c: ir.Expr, z: str, x: str) -> ir.Expr | None:
    """w where comparison `c` holds only for t_x − t_z < w, else None."""
    if not isinstance(c, ir.BinOp) or c.op not in COMPARISONS:
        return None
    left, right = _linear(c.left, z, x), _linear(c.right, z, x)
    if left is None or right is None:
        return None
    # as D > 0 (strict) or D ≥ 0, D = a·t_x + b·t_z + rest
    hi, lo = (right, left) if c.op in ("<", "≤") else (left, right)
    a, b, rest = hi[0] - lo[0], hi[1] - lo[1], hi[2] + [(-s, r) for s, r in lo[2]]
    if (a, b) != (-1, 1):  # t_z − t_x + rest > 0: t_x − t_z < rest
        return None
    w = _sum(rest)
    return w if c.op in ("<", ">") else ir.BinOp("+", w, ir.Num("1"))


def _linear(e: ir.Expr, z: str, x: str) -> tuple[int, int, list[tuple[int, ir.Expr]]] | None:
    """e as a·t_x + b·t_z + Σ ±r (each r free of t_z and t_x): (a, b, [(±1, r)]), or None."""
    if isinstance(e, ir.Name) and e.id in (z, x):
        return (1, 0, []) if e.id == x else (0, 1, [])
    if isinstance(e, ir.BinOp) and e.op in ("+", "-"):
        left, right = _linear(e.left, z, x), _linear(e.right, z, x)
        if left is None or right is None:
            return None
        s = 1 if e.op == "+" else -1
        return left[0] + s * right[0], left[1] + s * right[1], left[2] + [(s * t, r) for t, r in right[2]]
    if isinstance(e, ir.UnOp) and e.op == "-":
        inner = _linear(e.operand, z, x)
        return None if inner is None else (-inner[0], -inner[1], [(-s, r) for s, r in inner[2]])
    if any(isinstance(n, ir.Name) and n.id in (z, x) for n in ir.walk(e)):
        return None
    return 0, 0, [(1, e)]


def _sum(terms: list[tuple[int, ir.Expr]]) -> ir.Expr:
    out: ir.Expr | None = None
    for sign, term in sorted(terms, key=lambda st: -st[0]):  # a positive term first where there is one
        if out is None:
            out = term if sign > 0 else ir.UnOp("-", term)
        else:
            out = ir.BinOp("+" if sign > 0 else "-", out, term)
    return out if out is not None else ir.Num("0")
