"""Pair merging, the loop both of llama.cpp's BPE tokenizers share.

Owns: `merge_pairs`: start from a list of symbols, repeatedly merge the adjacent pair with the
best priority (leftmost on ties) until no pair has one. A heap holds the candidate pairs;
a popped pair whose sides changed since it was pushed is stale and skipped. Symbols only grow,
so a pair is stale exactly when its combined length changed (llama.cpp's own test).
Leaves out: what a pair's priority is: the merge rank for byte-level BPE
(tokenizer/bpe.py), the token's score for SentencePiece (tokenizer/spm.py).

>>> ranks = {("a", "b"): 0, ("ab", "c"): 1}
>>> merge_pairs(list("abcab"), lambda a, b: ranks.get((a, b)))
['abc', 'ab']
"""

from __future__ import annotations

import heapq
from collections.abc import Callable


def merge_pairs(symbols: list[str], priority: Callable[[str, str], float | None]) -> list[str]:
    """The merged symbols (the list given is not changed); `priority(left, right)` is None for a pair that
    cannot merge, else a number, lowest first."""
    symbols = list(symbols)  # symbols[i] == "" once merged into its left neighbour
    nxt = [*range(1, len(symbols)), -1]
    prv = list(range(-1, len(symbols) - 1))
    heap: list[tuple[float, int, int, int]] = []

    def push(left: int, right: int) -> None:
        if left >= 0 and right >= 0:
            rank = priority(symbols[left], symbols[right])
            if rank is not None:
                heapq.heappush(heap, (rank, left, right, len(symbols[left]) + len(symbols[right])))

    for i in range(1, len(symbols)):
        push(i - 1, i)
    while heap:
        _, left, right, size = heapq.heappop(heap)
        a, b = symbols[left], symbols[right]
        if not a or not b or len(a) + len(b) != size:
            continue
        symbols[left], symbols[right] = a + b, ""
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prv[nxt[right]] = left
        push(prv[left], left)
        push(left, nxt[left])
    return [s for s in symbols if s]
