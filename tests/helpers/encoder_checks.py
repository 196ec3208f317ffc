"""What every encoder card's cache must do, checked the same way for bert, nomic-bert and modern-bert.

Owns: `cached_passes_run_the_tokens_so_far`. Leaves out: each family's oracle (its test file says
what a full pass over some tokens should give).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from test_models_oracle import assert_logits_close


def cached_passes_run_the_tokens_so_far(
    models: dict, ids: np.ndarray, full: Callable[[object, np.ndarray], np.ndarray], atol: float
) -> None:
    """An encoder's mask is not causal, so a pass with a cache runs every token so far again
    (RECOMPUTE, with its warning): after a first pass over 3 tokens, each step's new column equals
    `full(model, ids[:, : t + 1])`, the last row of a full pass over the tokens up to it. `models`:
    target → loaded model; `ids` [1, ≥ 9]."""
    for target, m in models.items():
        assert m.RECOMPUTE
        cache = m.new_cache()
        with pytest.warns(UserWarning, match="recomputes"):
            m._forward_numpy(ids[:, :3], cache)
        for t in range(3, 9):
            step = m._forward_numpy(ids[:, t : t + 1], cache)[0, 0]
            assert_logits_close(step[None], full(m, ids[:, : t + 1]), atol, f"{target} step {t}")
