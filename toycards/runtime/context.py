"""Run-time context of one forward pass: token positions and the KV cache.

Owns: `KVCache` (per attention call, the keys and values of every token seen so far, grown
in place by doubling), `Context` (the absolute 1-based positions of the tokens in this pass
and a cursor over the cache's slots), and the two helpers generated code calls:
`positions(ctx, n)` and `extend(ctx, K, V)`.
Leaves out: array maths (ops_numpy.py / ops_torch.py).

Generated code calls `attention` once per layer in the same order on every pass, so the
i-th call of a pass owns slot i of the cache.
"""

from __future__ import annotations


class KVCache:
    """Keys and values per attention call; `length` tokens are stored."""

    def __init__(self) -> None:
        self.length = 0
        self.slots: list[list] = []  # [K buffer, V buffer, used]

    def reset(self) -> None:
        self.length = 0
        self.slots.clear()

    def append(self, slot: int, ops, K, V):
        if slot == len(self.slots):
            self.slots.append([None, None, 0])
        entry = self.slots[slot]
        n_new = K.shape[-2]
        K_buf, V_buf, used = entry
        if K_buf is None or K_buf.shape[-2] < used + n_new or K_buf.shape[:-2] != K.shape[:-2]:
            if K_buf is not None and K_buf.shape[:-2] != K.shape[:-2]:
                raise ValueError("the batch shape changed within one cache; start a new cache")
            capacity = max(2 * (used + n_new), 16)
            K_buf = _grow(ops, K_buf, K, used, capacity)
            V_buf = _grow(ops, V_buf, V, used, capacity)
        K_buf[..., used : used + n_new, :] = K
        V_buf[..., used : used + n_new, :] = V
        entry[:] = [K_buf, V_buf, used + n_new]
        return K_buf[..., : used + n_new, :], V_buf[..., : used + n_new, :]


def _grow(ops, old, like, used: int, capacity: int):
    """A buffer of `capacity` rows shaped like `like` otherwise, holding the `used` rows of `old`."""
    new = ops.zeros_rows(like, capacity)
    if old is not None and used:
        new[..., :used, :] = old[..., :used, :]
    return new


class Context:
    """Positions of this pass's tokens (1-based, after those already cached)."""

    def __init__(self, n_new: int, cache: KVCache | None, ops) -> None:
        self.cache, self.ops = cache, ops
        self.offset = cache.length if cache is not None else 0
        self.n_new = n_new
        self.pos = ops.arange(self.offset + 1, self.offset + n_new + 1)
        self.slot = 0

    def finish(self) -> None:
        if self.cache is not None:
            self.cache.length = self.offset + self.n_new


def positions(ctx: Context | None, n: int):
    """Absolute positions 1…n of a windowed sequence (1…n itself without a context)."""
    if ctx is None:
        import numpy as np

        return np.arange(1, n + 1)
    return ctx.pos


def extend(ctx: Context | None, K, V):
    """Keys and values of all tokens so far: the cached ones followed by K, V (new columns)."""
    if ctx is None or ctx.cache is None:
        return K, V
    slot = ctx.slot
    ctx.slot += 1
    return ctx.cache.append(slot, ctx.ops, K, V)
