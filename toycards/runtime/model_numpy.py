"""Base class of generated NumPy modules: weights keyed by GGUF tensor name, as float32 arrays (an F32
tensor a read-only view of the file) or kept in their blocks (`QuantWeight`).

Owns: construction from hyperparameters and a weight dict, `__call__`, the NumPy side of
`ModelAPI`. Leaves out: the forward pass (generated), loading files (models/load.py).
"""

from __future__ import annotations

import numpy as np

from toycards.runtime.context import KVCache
from toycards.runtime.model_base import ModelAPI
from toycards.runtime.quant_numpy import QuantWeight


class NumpyModel(ModelAPI):
    def __init__(self, hp: dict, weights: dict[str, np.ndarray]) -> None:
        self.hp = dict(hp)
        self.w = {
            k: v if isinstance(v, QuantWeight) else np.asarray(v, dtype=np.float32)
            for k, v in weights.items()
        }

    def forward(self, x, cache: KVCache | None = None):  # replaced by the generated class
        raise NotImplementedError

    def __call__(self, x, cache: KVCache | None = None) -> np.ndarray:
        from toycards.runtime import ops_numpy

        x = np.asarray(x, dtype=np.int64)
        if cache is not None and self.RECOMPUTE:
            n_new = x.shape[-1]
            out = self.forward(self._with_history(x, cache, np.concatenate), None)[..., -n_new:, :]
        else:
            out = self.forward(x, cache)
        if cache is not None:
            cache.length += x.shape[-1]
        return out if isinstance(out, np.ndarray) else ops_numpy.as_float(out)

    def _forward_numpy(self, ids: np.ndarray, cache: KVCache | None) -> np.ndarray:
        return np.asarray(self(ids, cache), dtype=np.float32)
