"""Checks the hybrid and state-space family tests share (test_lfm2.py, test_jamba.py,
test_granitehybrid.py): a transformers model with one part silenced, and a file decoded one token
at a time with a recomputation counted as an error.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import torch
from oracle.hf_gguf import hf_logits

from toycards.models.load import load
from toycards.runtime.model_base import CacheRecomputes


def silenced_shift(model, module: str, ids) -> float:
    """How far transformers' logits of `ids` move (max |difference|) when every parameter of `module`
    (`mamba.out_proj`: a name part, or a name's end) is zeroed."""
    quiet = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in quiet.named_parameters():
            if f".{module}." in name or name.endswith(f".{module}"):
                p.zero_()
    return float(np.abs(hf_logits(quiet, ids) - hf_logits(model, ids)).max())


def token_by_token(path, target: str, ids) -> np.ndarray:
    """The logits [len(ids), N_V] of the file at `path` fed one token at a time through one cache, on
    `target`, with a CacheRecomputes warning raised as an error (a State decodes each token alone)."""
    model = load(path, target=target)
    assert not model.RECOMPUTE
    cache = model.new_cache()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", CacheRecomputes)
        steps = [np.asarray(model(np.array([[i]]), cache))[0] for i in ids]
    return np.concatenate(steps)
