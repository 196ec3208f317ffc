"""Base class of generated torch modules: an `nn.Module` whose parameters carry GGUF names.

Owns: registering each tensor as an `nn.Parameter` at its GGUF name (`blk.0.attn_q.weight`
is `state_dict()["blk.0.attn_q.weight"]`, through nested module dicts), tied tensors shared
as one parameter, `w` (the forward pass's view of those parameters by name), `__call__` with a
KV cache, and the torch side of `ModelAPI`.
Leaves out: the forward pass (generated), loading files (models/load.py). Imported lazily.

`w[name]` reads the parameter its module holds now, not the one registered at first: FSDP
(`torch.distributed.fsdp.fully_shard`) swaps a module's parameters for sharded ones at rest
and for gathered ones during the forward pass, and the forward pass must use what it swapped in.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
import torch
from torch import nn

from toycards.runtime.context import KVCache
from toycards.runtime.model_base import ModelAPI


def _register(root: nn.Module, name: str, param: nn.Parameter) -> nn.Module:
    """Register `param` at the dotted `name` under `root`, making the modules on the way; the
    module that holds it."""
    *path, leaf = name.split(".")
    node = root
    for part in path:
        if part not in node._modules:
            node.add_module(part, nn.Module())
        node = node._modules[part]
    node.register_parameter(leaf, param)
    return node


class Weights(Mapping):
    """The model's parameters by GGUF name, each read from the module that holds it at the time.

    >>> holder = _register(nn.Module(), "blk.0.attn_q.weight", nn.Parameter(torch.ones(2)))
    >>> w = Weights({"blk.0.attn_q.weight": holder})
    >>> holder._parameters["weight"] = nn.Parameter(torch.zeros(2))  # as fully_shard swaps it
    >>> w["blk.0.attn_q.weight"].tolist()
    [0.0, 0.0]
    """

    def __init__(self, holders: dict[str, nn.Module]) -> None:
        self._at = {name: (module, name.rpartition(".")[2]) for name, module in holders.items()}

    def __getitem__(self, name: str) -> nn.Parameter:
        module, leaf = self._at[name]
        return module._parameters[leaf]

    def __iter__(self) -> Iterator[str]:
        return iter(self._at)

    def __len__(self) -> int:
        return len(self._at)


class TorchModel(nn.Module, ModelAPI):
    def __init__(self, hp: dict, weights: dict[str, object], shared: dict[str, str] | None = None) -> None:
        """`shared` maps a tensor name to another whose parameter it reuses (tied weights)."""
        super().__init__()
        self.hp = dict(hp)
        params: dict[str, nn.Parameter] = {}
        holders: dict[str, nn.Module] = {}
        for name, value in weights.items():
            if shared and name in shared:
                continue
            t = (
                torch.as_tensor(np.array(value, dtype=np.float32))
                if not torch.is_tensor(value)
                else value.float()
            )
            params[name] = nn.Parameter(t)
            holders[name] = _register(self, name, params[name])
        for name, other in (shared or {}).items():
            holders[name] = _register(self, name, params[other])
        self.w = Weights(holders)

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
