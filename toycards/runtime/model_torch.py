"""Base class of generated torch modules: an `nn.Module` whose parameters carry GGUF names.

Owns: registering each tensor as an `nn.Parameter` at its GGUF name (`blk.0.attn_q.weight`
is `state_dict()["blk.0.attn_q.weight"]`, through nested module dicts), tied tensors shared
as one parameter, `__call__` with a KV cache, and the torch side of `ModelAPI`.
Leaves out: the forward pass (generated), loading files (models/load.py). Imported lazily.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from toycards.runtime.context import KVCache
from toycards.runtime.model_base import ModelAPI


def _register(root: nn.Module, name: str, param: nn.Parameter) -> None:
    *path, leaf = name.split(".")
    node = root
    for part in path:
        if part not in node._modules:
            node.add_module(part, nn.Module())
        node = node._modules[part]
    node.register_parameter(leaf, param)


class TorchModel(nn.Module, ModelAPI):
    def __init__(self, hp: dict, weights: dict[str, object], shared: dict[str, str] | None = None) -> None:
        """`shared` maps a tensor name to another whose parameter it reuses (tied weights)."""
        super().__init__()
        self.hp = dict(hp)
        self.w: dict[str, nn.Parameter] = {}
        for name, value in weights.items():
            if shared and name in shared:
                continue
            t = (
                torch.as_tensor(np.array(value, dtype=np.float32))
                if not torch.is_tensor(value)
                else value.float()
            )
            self.w[name] = nn.Parameter(t)
            _register(self, name, self.w[name])
        for name, other in (shared or {}).items():
            self.w[name] = self.w[other]
            _register(self, name, self.w[other])

    def forward(self, x, cache: KVCache | None = None):  # replaced by the generated class
        raise NotImplementedError

    def __call__(self, x, cache: KVCache | None = None):
        x = torch.as_tensor(x, dtype=torch.long)
        if cache is not None and self.RECOMPUTE:
            n_new = x.shape[-1]
            out = super().__call__(self._with_history(x, cache, torch.cat), None)[..., -n_new:, :]
        else:
            out = super().__call__(x, cache)
        if cache is not None:
            cache.length += x.shape[-1]
        return out

    def _forward_numpy(self, ids: np.ndarray, cache: KVCache | None) -> np.ndarray:
        with torch.inference_mode():
            return self(torch.as_tensor(ids), cache).float().cpu().numpy()
