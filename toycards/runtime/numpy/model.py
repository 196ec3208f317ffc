"""Base class of generated NumPy modules: weights keyed by GGUF tensor name, as float32 arrays (an F32
tensor a read-only view of the file) or kept in their blocks (`QuantWeight`; `QuantStack`, a stack of
experts).

Owns: construction from hyperparameters and a weight dict, `__call__`, the NumPy side of
`ModelAPI`. Leaves out: the forward pass (generated), loading files (models/load.py).
"""

from __future__ import annotations

import numpy as np

from toycards import engine
from toycards.runtime.context import KVCache
from toycards.runtime.model_base import ModelAPI


class NumpyModel(ModelAPI):
    TARGET = "numpy"

    def __init__(self, hp: dict, weights: dict[str, np.ndarray]) -> None:
        self.hp = dict(hp)
        kernels = engine.backend("numpy")
        kept = (kernels.QuantWeight, kernels.QuantStack)  # in their GGUF blocks: a matrix, a stack
        self.w = {
            k: v if isinstance(v, kept) else np.asarray(v, dtype=np.float32) for k, v in weights.items()
        }
        self._kernel_choices(self.w.values())

    def forward(self, x, cache: KVCache | None = None):  # replaced by the generated class
        raise NotImplementedError

    def __call__(self, x, cache: KVCache | None = None, last: bool = False) -> np.ndarray:
        """Logits [..., ℓ, N_V] of token ids x [..., ℓ] (with a cache: the new tokens); `last`: of the
        last token alone, [..., 1, N_V]."""
        from toycards.runtime.numpy import ops

        self._check_file()
        x = np.asarray(x, dtype=np.int64)
        if cache is not None and not self.RECOMPUTE:
            cache.begin_pass()  # sliding windows drop the rows no new token reads
        if cache is not None and self.RECOMPUTE:
            n_new = 1 if last else x.shape[-1]
            out = self.forward(self._with_history(x, cache, np.concatenate), None, last)[..., -n_new:, :]
        elif x.size <= engine.FEW_FLOAT_TOKENS:  # decoding
            out = self._decoding_step(self.forward, x, cache, last)
        else:
            out = self.forward(x, cache, last)
        if cache is not None:
            cache.advance(x.shape[-1])
        out = out[..., -1:, :] if last else out  # a card with no cut point computes every token
        return out if isinstance(out, np.ndarray) else ops.as_float(out)

    def _rows_pass(self, ids: np.ndarray, rows) -> np.ndarray:
        rows.begin_pass()
        return np.asarray(self.forward(np.asarray(ids, dtype=np.int64), rows, False), dtype=np.float32)

    def _forward_numpy(self, ids: np.ndarray, cache: KVCache | None, last: bool = False) -> np.ndarray:
        return np.asarray(self(ids, cache, last), dtype=np.float32)
