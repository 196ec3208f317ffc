"""Decoding several sequences at once: one forward pass whose batch rows are sequences of their own,
each with its own KV cache at its own length.

Owns: `Rows` (what such a pass takes as its cache: the rows' caches, the positions of their new
tokens, each row's keys and values and decoder states) and `RowsRefused` (what a pass raises where
something reads the rows as if every row were at the same position). Leaves out: the kernel that
attends per row (engine/*/glue.py `gq_attention_rows`), `ModelAPI.step` (model_base.py), which runs
such a pass and, where it is refused, steps each sequence alone.

Why the prelude's GQAttention alone reads positions and caches keys: a row's new token sits at the
row's own position, and reads the keys of its own cache only. The GQAttention kernel takes RoPE
angles, a mask and a cache per row; a card's own steps make one list of positions and one cache for
every row, so in such a pass whatever else reads the positions (`runtime.positions`) or extends the
cache (`runtime.extend`) refuses. A decoder state (`State:`) needs no position: each row's comes from
its own cache and goes back there (`recall`, `keep`). What a refused pass wrote to the caches is
undone (`restore`), and the pass's rows go one at a time: the same numbers, without the shared
reading of the weights.
"""

from __future__ import annotations

import weakref

import numpy as np

from toycards.errors import ToycardsError


class RowsRefused(ToycardsError):
    """A pass over rows at different positions reached a step that cannot take them (why)."""


class Rows:
    """The caches of a pass's batch rows (row b: `caches[b]`, holding that sequence's tokens so far),
    as generated code's `cache` argument. `RAGGED` tells runtime.context's Context so."""

    RAGGED = True

    def __init__(self, caches: list) -> None:
        self.caches = list(caches)
        if len({id(c) for c in self.caches}) != len(self.caches):
            raise ToycardsError("step(): each sequence needs a cache of its own (a cache appears twice)")
        kinds = {c.kv_type for c in self.caches}
        if len(kinds) > 1:
            raise ToycardsError(
                f"step(): the caches keep keys as {' and '.join(sorted(kinds))}; use one kind"
            )
        for c in self.caches:
            if c.ids is not None:
                raise RowsRefused("a cache holds the token ids so far: the model recomputes the sequence")
        self.half = self.caches[0].half if self.caches else False
        self.lengths = [c.length for c in self.caches]
        self.zeros = (0,) * len(self.caches)  # no row's window dropped any

    def positions(self, n_new: int):
        """The 1-based positions of each row's n_new new tokens, int64 [B, n_new]."""
        return np.asarray(self.lengths, dtype=np.int64)[:, None] + np.arange(1, n_new + 1)

    def buffers(
        self, slot: int, window, T: int, like, ops, ready, describe
    ) -> tuple[tuple, tuple, list] | None:
        """An attention kernel's cache slot `slot` (read through a sliding `window`, or None) for T
        new tokens a row, with room for them in each row's buffers (shaped like `like` but for the
        rows): each row's rows its window dropped (`firsts`), keys its queries read (`reads`: those
        held, and the new) and its entry of tc_gqa's `rows` table (`describe(K, V)`, the buffers'
        addresses and head strides, then the rows used); None where a row's buffers are not ones
        the kernel writes (`ready(K, V)` False). Each row's slot then counts its new rows as held
        (the kernel writes them next; a pass that does not end puts them back: `restore`). A row's
        description is kept in its cache's `prepared` while its buffers stay those it describes."""
        firsts = tuple(c.window_slot(slot, window) for c in self.caches) if window is not None else self.zeros
        key, table, reads = ("rows", slot), [], []
        lead, width = like.shape[:-2], like.shape[-1]
        for c in self.caches:
            e = c.slots[slot] if slot < len(c.slots) else None
            kept = c.prepared.get(key)
            if (
                e is not None
                and kept is not None
                and kept[0]() is e[0][0]
                and kept[1]() is e[0][1]
                and e[1] + T <= kept[3]
            ):
                used = e[1]  # a decoding step's common case: the buffers described before, with room
            else:
                K = e[0][0] if e is not None else None
                if K is not None and not ready(*e[0]):
                    return None
                if K is None or e[1] + T > K.shape[-2] or K.shape[:-2] != lead or K.shape[-1] != width:
                    (K, V), used = c.reserve(slot, ops, (like, like), T)  # (grown, or first made)
                else:
                    V, used = e[0][1], e[1]
                # (weak: a buffer the cache lets go of, grown on a step alone, is not held here)
                kept = c.prepared[key] = (weakref.ref(K), weakref.ref(V), describe(K, V), K.shape[-2])
            table.append((*kept[2], used))
            reads.append(used + T)
            c.slots[slot][1] = used + T
        return firsts, tuple(reads), table

    def allowed(self, memo: dict, mask, t, firsts: tuple, reads: tuple, array):
        """The card's `mask` for each row b, its queries at positions t[b] against its `reads[b]`
        keys, those at positions firsts[b] + 1 …: uint8 [B, T, max reads], 0 past a row's keys (kept
        in `memo`, a site's, for the layers after); None where the mask has axes of its own. `array`
        makes the target's array of a NumPy one, as the mask's code takes them."""
        key = ("rows", firsts, reads)
        if key not in memo:
            S = max(reads)
            columns = np.arange(1, S + 1, dtype=np.float32)
            t_z = np.asarray(firsts, dtype=np.float32)[:, None, None] + columns  # [B, 1, S]
            t_x = np.asarray(t, dtype=np.float32)[:, :, None]  # [B, T, 1]
            m = np.asarray(mask(array(t_z), array(t_x)))
            if m.ndim > 3:
                memo[key] = None
            else:
                inside = columns <= np.asarray(reads)[:, None, None]  # [B, 1, S]
                m = np.broadcast_to(m, (*t_x.shape[:2], S)) & inside
                memo[key] = np.ascontiguousarray(m, dtype=np.uint8)
        return memo[key]

    def recall(self, slot: int, k: int, zeros):
        """State k of a stateful call's `slot` for every row, [B, …]: each row's as its cache holds it
        ([1, …]), or its zeros where the cache holds none yet (a sequence's first pass)."""
        parts = []
        for b, c in enumerate(self.caches):
            kept = c.states[slot][k] if slot < len(c.states) else zeros[b : b + 1]
            if tuple(kept.shape) != (1, *zeros.shape[1:]):
                refuse(f"a cache holds a state of shape {tuple(kept.shape)}, not one sequence's")
            parts.append(kept)
        return _batch(parts)

    def keep(self, slot: int, values: tuple) -> None:
        """The states [B, …] a stateful call leaves: row b's to its own cache, kept when the pass ends."""
        for b, c in enumerate(self.caches):
            c.staged[slot] = tuple(_copy(v[b : b + 1]) for v in values)

    def begin_pass(self) -> None:
        for c in self.caches:
            c.begin_pass()

    def advance(self, n: int) -> None:
        """The pass over n new tokens a row ended: each cache holds them."""
        for c in self.caches:
            c.advance(n)

    def restore(self) -> None:
        """After a pass that did not end: each cache as it was before it (rows written past its
        length are forgotten)."""
        for c, n in zip(self.caches, self.lengths, strict=True):
            c.staged = {}
            c.truncate(n)


def _batch(parts: list):
    """Arrays [1, …] of one target (NumPy arrays, or torch tensors) joined along their first axis."""
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts, axis=0)
    import torch  # (a torch target's pass: torch is loaded)

    return torch.cat(parts, 0)


def _copy(a):
    """A row's own copy of a view (NumPy or torch), so that the batch's array is not kept alive by it."""
    return a.clone() if hasattr(a, "clone") else a.copy()


def refuse(what: str):
    """Raise RowsRefused: a pass over rows at different positions reached `what`."""
    raise RowsRefused(f"{what}, which a batch of sequences at different positions cannot share")
