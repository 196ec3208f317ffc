"""What the footprint walk (footprint.py) reads off a card's steps without running them: which
locals generated code holds at each step, the window a mask leaves a query, the elements per
token of a shape, and the small queries on IR nodes the walk asks.

Owns: `held_locals`, `mask_window`, `reads_through_its_mask`, `kept_per_token`, `per_token`,
`is_view`, `names`, `target_name`, `children`, `options`, `card_text`.
Leaves out: the walk itself and what it adds up (footprint.py).
"""

from __future__ import annotations

from toycards.checker.dims import Dim
from toycards.lang import ir
from toycards.lang.interpret.frames import Mask, member_keys
from toycards.lang.interpret.values import truth

WINDOW_PROBE = 1 << 20  # the query position a mask is read at to find its window


def held_locals(algo: ir.Algorithm, info) -> dict[int, frozenset[str]]:
    """Generated code holds a local from its first assignment until the function returns (a name
    keeps its value until it is assigned again, and the old value lives while the new one is
    computed): the locals held at each plain step are those assigned at an earlier step, and in a
    sequential loop those assigned anywhere in its body (by the previous iteration)."""
    steps: list = []
    loops: list[tuple[int, int]] = []

    def flat(body: tuple) -> None:
        for s in body:
            if isinstance(s, ir.ForSeq):
                start = len(steps)
                flat(s.body)
                loops.append((start, len(steps) - 1))
            elif isinstance(s, ir.ForAll):
                flat(s.body)
            elif isinstance(s, ir.If):
                flat(s.then)
                flat(s.orelse)
            elif isinstance(s, ir.Assign | ir.Return):
                steps.append(s)

    flat(algo.body)
    own = {n for d in (*algo.input_decls, *algo.hyper_decls) for n in d.names}
    own |= {n for d, _ in algo.all_params() for n in d.names}

    def key(name: str) -> str:
        return next((k for k, _ in member_keys(name) if k in info.families), name)

    writes = [({key(target_name(s))} - own - {""}) if isinstance(s, ir.Assign) else set() for s in steps]
    out = {}
    for i, s in enumerate(steps):
        held = set().union(*writes[:i])
        for a, b in loops:
            if a <= i <= b:
                held |= set().union(*writes[a : b + 1])
        out[id(s)] = frozenset(held)
    return out


def options(algo: ir.Algorithm) -> frozenset[str]:
    return frozenset(o for d in algo.hyper_decls if isinstance(d.type, ir.EnumType) for o in d.type.options)


def names(e) -> set[str]:
    return {n.id for n in ir.walk(e) if isinstance(n, ir.Name)}


def target_name(s: ir.Assign) -> str:
    t = s.target
    while isinstance(t, ir.Index):
        t = t.base
    return t.id if isinstance(t, ir.Name) else ""


def children(e) -> list:
    if isinstance(e, ir.BinOp):
        return [e.left, e.right]
    if isinstance(e, ir.UnOp | ir.Transpose):
        return [e.operand]
    if isinstance(e, ir.Index):
        return [e.base, *(i for i in e.indices if not isinstance(i, ir.Slice))]
    if isinstance(e, ir.Indicator):
        return [e.cond]
    if isinstance(e, ir.Concat):
        return list(e.items)
    return []


def per_token(shape, token: frozenset[str]) -> Dim | None:
    """The product of a shape's dimensions other than this pass's tokens."""
    if shape is None:
        return None
    out = Dim.num(1)
    for d in shape.dims:
        if d is None:
            return None
        if d.as_name() in token:
            continue
        if d.names() & token:
            return None  # a mix of token positions and sizes: not rows per token
        out = out * d
    return out


def mask_window(declared: dict) -> int | None:
    """The tokens the one mask among a call's `declared` values lets a query see (a sliding window),
    or None when it sees every earlier one or none is known here.

    >>> from toycards.codegen.code import parse_expr
    >>> from toycards.lang.interpret.exprs import Evaluator
    >>> from toycards.lang.interpret.frames import Frame
    >>> body = parse_expr("⟦t_z ≤ t_x ∧ t_x − t_z < w⟧")
    >>> mask = Mask(("t_z", "t_x"), body, Frame(None, {}, declared={"w": 4}), Evaluator(None, {}).eval)
    >>> mask_window({"Mask": mask}), mask_window({})
    (4, None)
    """
    masks = [v for v in declared.values() if isinstance(v, Mask) and len(v.indices) == 2]
    if len(masks) != 1:
        return None
    mask = masks[0]
    at = WINDOW_PROBE

    def sees(z: int) -> bool:
        try:
            return truth(mask.entry([z, at]))
        except Exception:  # noqa: BLE001 - a mask that reads run-time values
            return True

    if sees(1) or not sees(at):
        return None
    lo, hi = 1, at  # sees(lo) false, sees(hi) true
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if sees(mid) else (mid, hi)
    return at - hi + 1


def reads_through_its_mask(callee) -> bool:
    """Whether generated code lets the cache drop what `callee`'s mask window leaves behind: the
    library's algorithms that read their keys through their mask alone (codegen's WINDOW_READING)."""
    from toycards.codegen.values import WINDOW_READING
    from toycards.library import library_algorithms

    return callee.name in WINDOW_READING and library_algorithms().get(callee.name) == callee


def card_text(e) -> str:
    from toycards.lang.printer import Renderer

    try:
        return Renderer().expr(e)
    except Exception:  # noqa: BLE001 - a node the printer does not take: its type
        return type(e).__name__


def kept_per_token(arg, info, token: frozenset[str], maps: dict[str, Dim]) -> Dim | None:
    """The elements per token of what a KV cache keeps for the argument `arg` of a call in an
    algorithm (checked as `info`), inside maps over `maps` (variable → range): a family member
    picked by a map variable's expression stands for its whole family (`K̂^{⌈h·H_kv/H⌉}`: the
    H_kv heads), rows(A, i, k) so picked for A, another value for itself times the ranges of the
    map variables it reads; None where a dimension mixes token positions in."""
    if isinstance(arg, ir.Name):
        sym = info.symbol_of(arg)
        index = getattr(sym, "family_index", None)
        if index is not None and names(index) & maps.keys():
            for key, _ in member_keys(sym.key):
                if key in info.families:
                    member, size = info.families[key]
                    per = per_token(member, token)
                    return None if per is None or size is None else size * per
    if (
        isinstance(arg, ir.Call)
        and arg.func == "rows"
        and len(arg.args) == 3
        and names(arg.args[1]) & maps.keys()
    ):
        return per_token(info.shape_of(arg.args[0]), token)
    per = per_token(info.shape_of(arg), token)
    for var in sorted(names(arg) & maps.keys()):
        per = None if per is None else per * maps[var]
    return per


def is_view(index, maps) -> bool:
    """An index that picks a view: a slice, or the variable of a map being vectorised."""
    return isinstance(index, ir.Slice) or (isinstance(index, ir.Name) and index.id in maps)
