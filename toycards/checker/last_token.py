"""Where a forward pass may keep only its last token: decoding wants the last token's logits alone.

Owns: `last_cut(...)`, the cache plan's `last_cut` (checker/tokenflow.py calls it once the plan
holds), which codegen turns into `if last: X = X[..., -1:, :]` (codegen/emitter.py `_last_only`).
Leaves out: following the token axes (tokenflow.py), generating code (codegen/).
"""

from __future__ import annotations

from toycards.checker.context import CheckResult
from toycards.lang import ir


def last_cut(
    card: ir.Card, result: CheckResult, prelude: CheckResult | None, extend: dict, seq: str
) -> tuple[int, dict[str, int]] | None:
    """Where only the last token's outputs can be kept (decoding wants its logits alone): after the
    entry point's last top-level step that reads a context (a call the cache extends, or an algorithm
    with a state, at any depth),
    every step acts on each token alone (the plan holds), so the live values may keep their last
    column. Returns that step's index and, per value live there with a token axis, which card axis
    it is; None when no step reads a context or a live value's token axis is not plainly ℓ."""
    main = card.main
    algos = {n: i.algorithm for n, i in (prelude.algorithms.items() if prelude else ())}
    algos.update({a.name: a for a in card.algorithms})
    reading: dict[str, bool] = {}

    def reads(node, seen=frozenset()) -> bool:
        for c in (n for n in ir.walk(node) if isinstance(n, ir.Call)):
            if id(c) in extend:
                return True
            callee = algos.get(c.func)
            if callee is not None and callee.state_decls:  # its state must see every token
                return True
            if callee is not None and callee.name not in seen:
                if callee.name not in reading:
                    reading[callee.name] = reads(callee.body, seen | {callee.name})
                if reading[callee.name]:
                    return True
        return False

    steps = main.body
    cuts = [i for i, s in enumerate(steps) if reads(s)]
    if not cuts or cuts[-1] == len(steps) - 1:
        return None
    cut = cuts[-1]
    before = set(main.inputs) | {
        n.id for s in steps[: cut + 1] for a in ir.walk(s) if isinstance(a, ir.Assign)
        for n in ir.walk(a.target) if isinstance(n, ir.Name)
    }  # fmt: skip
    info = result.algorithms[main.name]
    axes: dict[str, int] = {}
    for node in (n for s in steps[cut + 1 :] for n in ir.walk(s) if isinstance(n, ir.Name)):
        if node.id not in before:
            continue
        shape = info.shape_of(node) or info.locals.get(node.id)
        if shape is None:
            continue
        hits = [k for k, d in enumerate(shape.dims) if d is not None and seq in d.names()]
        if not hits:
            continue
        if len(hits) > 1 or shape.dims[hits[0]].as_name() != seq or axes.get(node.id, hits[0]) != hits[0]:
            return None
        axes[node.id] = hits[0]
    return cut, axes
