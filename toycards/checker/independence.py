"""The iterations of a parallel map must not depend on each other.

Owns: `check_independent(ctx, s)`, run on every `for v ∈ [n]: …` after its body is checked.
The language's rule (docs/card-language.md, "Meaning"): a map's iterations are independent, so
running them one after another (the interpreter) or all at once (the generated array code) gives
the same value. Two ways a card can break it, each an error at the exact place:

- an iteration **reads what another writes**: the map writes `X[:, t] ← …` (or the family
  member `e_t ← …`) and the body reads `X[:, 1]`, `X` whole or `e_{t−1}`; reading the entry being
  written (`X[:, t]`, `X[1:k, t]`, `e_t`) is fine;
- every iteration **writes the same entry** (`for t ∈ [ℓ]: s[1] ← x[t]`): the last one would win
  in one order and another in another.

Leaves out: everything else about maps (steps.py).
"""

from __future__ import annotations

from toycards.checker.context import Ctx
from toycards.checker.names import family_key
from toycards.lang import ir
from toycards.lang.names import split_name


def check_independent(ctx: Ctx, s: ir.ForAll, per_iteration: set[str]) -> None:
    """Report reads of another iteration's writes, and writes every iteration shares.

    `per_iteration`: locals the map creates afresh in each iteration (they are its own)."""
    variables = {r.var for r in s.ranges}
    entries: dict[str, list[ir.Index]] = {}  # array → the targets this map writes into it
    members: dict[str, str] = {}  # family member written (`e_t`) → its map variable (t)
    for a in _assignments(s.body):
        t = a.target
        if isinstance(t, ir.Index) and isinstance(t.base, ir.Name):
            if t.base.id in per_iteration:
                continue
            entries.setdefault(t.base.id, []).append(t)
            _same_entry(ctx, t, variables)
        elif isinstance(t, ir.Name):
            for v in variables:
                if family_key(t.id, v) is not None:
                    members[t.id] = v
    if not entries and not members:
        return
    for a in _assignments(s.body):
        targets = a.target.indices if isinstance(a.target, ir.Index) else ()
        for e in (a.value, *(i for i in targets if not isinstance(i, ir.Slice))):
            _reads(ctx, e, entries, members, a)
    for cond in _conditions(s.body):
        _reads(ctx, cond, entries, members, None)


def _same_entry(ctx: Ctx, t: ir.Index, variables: set[str]) -> None:
    used = {n.id for i in t.indices for n in ir.walk(i) if isinstance(n, ir.Name)}
    _, sub, sup = split_name(t.base.id)
    used |= {sub, sup}
    missing = sorted(variables - used)
    if missing:
        ctx.error(
            t.span,
            f"every iteration of the map over {', '.join(missing)} writes this same entry",
            f"index the entry by {missing[0]} (or compute it outside the map)",
        )


def _reads(ctx: Ctx, e, entries, members, within: ir.Assign | None) -> None:
    """Errors for the reads in `e` of entries or family members another iteration writes."""
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, ir.Index) and isinstance(n.base, ir.Name) and n.base.id in entries:
            if not any(_inside(ctx, n, w) for w in entries[n.base.id]):
                _conflict(ctx, n, n.base.id, entries[n.base.id][0])
            stack.extend(i for i in n.indices if not isinstance(i, ir.Slice))
            stack.extend(b for i in n.indices if isinstance(i, ir.Slice) for b in (i.lo, i.hi) if b)
            continue
        if isinstance(n, ir.Name):
            if n.id in entries:
                _conflict(ctx, n, n.id, entries[n.id][0])
            sym = ctx.info.symbols.get(id(n))
            if sym is not None and sym.key in members and sym.family_index is not None:
                index = sym.family_index
                if not (isinstance(index, ir.Name) and index.id == members[sym.key]):
                    ctx.error(
                        n.span,
                        f"{n.id} is a member this map writes in another iteration",
                        "a map's iterations are independent: read the family after the map, or "
                        f"only its own member ({members[sym.key]})",
                    )
            continue
        if isinstance(n, tuple):
            stack.extend(n)
        elif hasattr(n, "__dataclass_fields__") and not isinstance(n, ir.MaskDef):
            stack.extend(getattr(n, f) for f in n.__dataclass_fields__ if f != "span")


def _inside(ctx: Ctx, read: ir.Index, write: ir.Index) -> bool:
    """The read stays inside the entry being written: same index wherever the write names one."""
    if len(read.indices) != len(write.indices):
        return False
    for r, w in zip(read.indices, write.indices):
        if isinstance(w, ir.Slice) and w.lo is None and w.hi is None:
            continue
        if isinstance(r, ir.Slice) or isinstance(w, ir.Slice) or _text(ctx, r) != _text(ctx, w):
            return False
    return True


def _conflict(ctx: Ctx, node, name: str, write: ir.Index) -> None:
    ctx.error(
        node.span,
        f"this map writes {ctx.text(write)} (line {write.span.line}); reading "
        f"{ctx.text(node)} here sees entries another iteration writes",
        "a map's iterations are independent: write the results under a new name "
        f"(`Y[:, t] ← …`) and read {name} unchanged",
    )


def _text(ctx: Ctx, e) -> str:
    return "".join(ctx.text(e).split())


def _assignments(stmts):
    for s in stmts:
        if isinstance(s, ir.Assign):
            yield s
        elif isinstance(s, ir.If):
            yield from _assignments(s.then)
            yield from _assignments(s.orelse)
        elif isinstance(s, ir.ForSeq | ir.ForAll):
            yield from _assignments(s.body)


def _conditions(stmts):
    for s in stmts:
        if isinstance(s, ir.If):
            yield s.cond
            yield from _conditions(s.then)
            yield from _conditions(s.orelse)
        elif isinstance(s, ir.ForSeq | ir.ForAll):
            yield from _conditions(s.body)
