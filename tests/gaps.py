"""Known gaps: library cards that a generated target cannot run yet, each a codegen or runtime
limit (never a fault of the card, which the interpreter and the other target run correctly).

Owns: `TARGET_GAPS` ((card, target) → why) and the two ways tests honour it. A parametrised test
whose `target` and `name` (a card) or `case` (an oracle case named after its card) name a gap is
marked `xfail(strict=True)` by tests/conftest.py; a test that loops over targets itself calls
`expect_gap`, which requires the failure. Either way a fix shows up as a failing test that says to
delete the entry here. Leaves out: the tests themselves.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

CONSTANT_ENTRIES = (
    "torch target: an entry write of a constant, `for i ∈ [n]: y[i] ← 1` (prelude `ones`, the RoPE "
    "divisors of a card without rope_freqs), emits ops.zeros_for(1, n), and ops_torch.zeros_for "
    "needs a tensor ('int' object has no attribute 'new_zeros')"
)

TARGET_GAPS: dict[tuple[str, str], str] = {
    ("gemma", "torch"): CONSTANT_ENTRIES,
    ("olmo2", "torch"): CONSTANT_ENTRIES,
}


def gap(card: str, target: str) -> str | None:
    """Why `card` does not run on `target` yet, or None.

    >>> gap("llama", "torch") is None, gap("gemma", "numpy") is None, gap("gemma", "torch") is not None
    (True, True, True)
    """
    return TARGET_GAPS.get((card, target))


def expect_gap(card: str, target: str, run: Callable[[], object]) -> None:
    """`run()` must still fail the way TARGET_GAPS says; when it succeeds, the gap is closed."""
    try:
        run()
    except Exception:  # noqa: BLE001 - any failure is the known one; success is the news
        return
    pytest.fail(f"{card} now runs on {target}: delete ({card!r}, {target!r}) from tests/gaps.py")
