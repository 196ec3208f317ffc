"""The rows of the runtime's KV cache, by the runtime's own rules run on shapes alone.

Owns: `cache_rows(*passes, window=None)` and `slot_after(passes, window)` (a slot's rows of room and
rows held after passes of so many tokens: `KVCache.reserve`'s growth, a sliding window's
`KVCache.begin_pass`), `prefill_passes(n)` (the passes `ModelAPI.feed` makes of a prompt) and
`touched_bytes` (the pages written rows touch in a buffer of zero pages).
Leaves out: what a card keeps per token (footprint.py), the report (memory.py).
"""

from __future__ import annotations

import mmap


class _Rows:
    """A cache buffer's shape alone, for KVCache.reserve to grow (no memory behind it)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def __getitem__(self, key) -> _Rows:
        return self

    def __setitem__(self, key, value) -> None:
        pass

    def clone(self) -> _Rows:
        return self


class _ShapeOps:
    @staticmethod
    def zeros_rows(like, n: int, half: bool = False) -> _Rows:
        return _Rows((*like.shape[:-2], n, like.shape[-1]))


def cache_rows(*passes: int, window: int | None = None) -> int:
    """The rows a cache buffer has after passes of these many tokens (a prompt, then one at a
    time), by the runtime's own growth rule (`KVCache.reserve`); `window`: a sliding window's slot.

    >>> cache_rows(3), cache_rows(20), cache_rows(20, 1), cache_rows(20, *[1] * 21)
    (16, 40, 40, 82)
    >>> cache_rows(512, 512, 512, 512), cache_rows(512, 512, 512, 512, window=4)
    (3072, 515)
    """
    return slot_after(passes, window)[0]


def slot_after(passes, window: int | None, expected: int = 0) -> tuple[int, int]:
    """(rows of room, rows held) of a cache slot after passes of these many tokens, the cache told to
    expect `expected` tokens (`KVCache.expect`: what `ModelAPI.feed` says of a prompt).

    >>> slot_after([512, 512, 176], None), slot_after([512, 512, 176], None, expected=1200)
    ((2400, 1200), (1200, 1200))
    """
    from toycards.runtime.context import KVCache

    cache, like, buf = KVCache(), _Rows((1, 1)), None
    cache.expect(expected)
    if window is not None:
        cache.windows[0] = window
    for n in passes:
        cache.begin_pass()
        (buf,), used = cache.reserve(0, _ShapeOps, (like,), n)
        cache.slots[0][1] = used + n
        cache.length += n
    return (buf.shape[-2], cache.slots[0][1]) if buf is not None else (0, 0)


def prefill_passes(n: int) -> list[int]:
    """The tokens of each pass that feeds a prompt of n tokens (`ModelAPI.feed`, `ubatch` at a time)."""
    from toycards.runtime.model_base import UBATCH

    return [min(UBATCH, n - start) for start in range(0, n, UBATCH)]


def touched_bytes(chunks: int, rows: int, used: int, row_bytes: int) -> int:
    """Bytes of the pages that `used` rows of each of `chunks` blocks of `rows` rows touch, in a
    buffer laid out block after block (a head's rows together) that starts on a page."""
    page = mmap.PAGESIZE
    pages, last = 0, -1
    for c in range(chunks):
        a = c * rows * row_bytes
        b = a + used * row_bytes  # one past the last byte written
        first, end = a // page, (b - 1) // page
        first = max(first, last + 1)
        if end >= first:
            pages += end - first + 1
            last = end
    return pages * page
