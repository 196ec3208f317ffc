"""Base class of generated torch modules: an `nn.Module` whose parameters carry GGUF names.

Owns: registering each tensor as an `nn.Parameter` at its GGUF name (`blk.0.attn_q.weight`
is `state_dict()["blk.0.attn_q.weight"]`, through nested module dicts; a part that is already an
attribute, as in "w.weight", takes a `~`: `w~.weight`, which `gguf_name` undoes), tied tensors shared
as one parameter, weights kept in their GGUF blocks (`QuantWeight`, and `QuantStack` for a stack
of experts; not parameters: they do not train), `w` (the forward pass's view of those parameters
and weights by name), `__call__` with a KV cache, the device its forward passes run on, and the
torch side of `ModelAPI`.
Leaves out: the forward pass (generated), loading files (models/load.py). Imported lazily.

`w[name]` reads the parameter its module holds now, not the one registered at first: FSDP
(`torch.distributed.fsdp.fully_shard`) swaps a module's parameters for sharded ones at rest
and for gathered ones during the forward pass, and the forward pass must use what it swapped in.

Devices: `model.to("cuda")` (or any move off the CPU) first turns each weight kept in its GGUF
blocks into a float32 parameter (the block kernels run on the CPU alone), then moves the
parameters as any module does; each forward pass then runs under `torch.device(...)`, so that
what generated code makes from numbers (positions, masks, RoPE angles, the KV cache) is made
there too. On the CPU nothing of this runs: a decoding step pays no device bookkeeping.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, ValuesView

import numpy as np
import torch
from torch import nn

from toycards import engine
from toycards.runtime.context import KVCache
from toycards.runtime.model_base import ModelAPI
from toycards.runtime.rows import Rows, RowsRefused
from toycards.runtime.torch import ops

kernels = engine.backend("torch")
QuantWeight = kernels.QuantWeight
KEPT = (kernels.QuantWeight, kernels.QuantStack)  # weights kept in their GGUF blocks: a matrix, a stack

_MODEL_NAMES = {"w"}  # attributes the model sets after registering its parameters


def _register(root: nn.Module, name: str, param: nn.Parameter) -> nn.Module:
    """Register `param` at the dotted `name` under `root`, making the modules on the way; the
    module that holds it. A part of the name that is an attribute of the module on the way (a
    tensor "w.weight" beside the model's `w`) takes a `~` after it: `w~.weight` in the state dict.

    >>> root = nn.Module()
    >>> _ = _register(root, "training.weight", nn.Parameter(torch.ones(1)))
    >>> list(root.state_dict())
    ['training~.weight']
    """
    *path, leaf = name.split(".")
    node = root
    for part in path:
        taken = hasattr(node, part) or node is root and part in _MODEL_NAMES
        part = part + "~" if taken and part not in node._modules else part
        if part not in node._modules:
            node.add_module(part, nn.Module())
        node = node._modules[part]
    node.register_parameter(leaf, param)
    return node


def gguf_name(key: str) -> str:
    """The GGUF name of a state-dict key (`_register`'s `~` taken off: `w~.weight` → `w.weight`)."""
    return ".".join(part.removesuffix("~") for part in key.split("."))


class Weights(dict):
    """The model's parameters by GGUF name, each read from the module that holds it at the time.

    A mapping: the weights kept in their GGUF blocks (not parameters) are this dict's own entries, so
    that a decoding step reads them at dict speed (hundreds of reads a step); a parameter's name
    misses, and `__missing__` reads it from its module.

    >>> holder = _register(nn.Module(), "blk.0.attn_q.weight", nn.Parameter(torch.ones(2)))
    >>> w = Weights({"blk.0.attn_q.weight": holder})
    >>> holder._parameters["weight"] = nn.Parameter(torch.zeros(2))  # as fully_shard swaps it
    >>> w["blk.0.attn_q.weight"].tolist(), list(w), "blk.0.attn_q.weight" in w, len(w.items())
    ([0.0, 0.0], ['blk.0.attn_q.weight'], True, 1)
    """

    def __init__(
        self, holders: dict[str, nn.Module], quantized: dict[str, QuantWeight] | None = None
    ) -> None:
        super().__init__(quantized or {})
        self._at = {name: (module, name.rpartition(".")[2]) for name, module in holders.items()}
        self._quantized = dict(quantized or {})  # weights kept in their GGUF blocks: not parameters

    def __missing__(self, name: str) -> nn.Parameter:
        module, leaf = self._at[name]
        return module._parameters[leaf]

    def __iter__(self) -> Iterator[str]:
        yield from self._at
        yield from (n for n in self._quantized if n not in self._at)

    def __len__(self) -> int:
        return len(self._at.keys() | self._quantized.keys())

    def __contains__(self, name) -> bool:
        return name in self._quantized or name in self._at

    def get(self, name, default=None):
        return self[name] if name in self else default

    def keys(self):
        return KeysView(self)

    def values(self):
        return ValuesView(self)

    def items(self):
        return ItemsView(self)


def _is_filled(value) -> bool:
    """Whether `value` is one number broadcast to its shape (every stride 0: load.filled, a tensor
    the file leaves out and the card fills in), as an array or a tensor."""
    if torch.is_tensor(value):
        return value.numel() > 1 and not any(value.stride())
    return isinstance(value, np.ndarray) and value.size > 1 and not any(value.strides)


def _as_float_tensor(value) -> torch.Tensor:
    """A float32 tensor of `value`; a writable float32 array (a copy-on-write view of the file) is
    shared, not copied; a filled-in constant (load.filled) stays one number, expanded."""
    if torch.is_tensor(value):
        return value.float()
    if _is_filled(value):
        return torch.full((), float(value.flat[0]), dtype=torch.float32).expand(value.shape)
    if isinstance(value, np.ndarray) and value.dtype == np.float32 and value.flags.writeable:
        return torch.from_numpy(value)
    return torch.as_tensor(np.array(value, dtype=np.float32))


def _own_memory_for_loaded_constants(module, state_dict, prefix, *_) -> None:
    """Before `load_state_dict` copies into the parameters (a checkpoint resumed): each filled-in
    constant it gives a value gets memory of its own, as copying into one expanded number cannot."""
    for name, p in module.named_parameters():
        if prefix + name in state_dict and _is_filled(p):
            p.data = p.data.contiguous()


class TorchModel(nn.Module, ModelAPI):
    TARGET = "torch"

    def __init__(self, hp: dict, weights: dict[str, object], shared: dict[str, str] | None = None) -> None:
        """`shared` maps a tensor name to another whose parameter it reuses (tied weights)."""
        super().__init__()
        self.hp = dict(hp)
        params: dict[str, nn.Parameter] = {}
        holders: dict[str, nn.Module] = {}
        quantized: dict[str, QuantWeight | kernels.QuantStack] = {}
        weights = engine.resident_float32(weights)  # the file's float32 matrices in memory of ours
        for name, value in weights.items():
            if shared and name in shared:
                continue
            if isinstance(value, KEPT):
                quantized[name] = value
                continue
            tensor = _as_float_tensor(value)  # a filled-in constant is no weight: not trained
            params[name] = nn.Parameter(tensor, requires_grad=not _is_filled(tensor))
            holders[name] = _register(self, name, params[name])
        for name, other in (shared or {}).items():
            if other in quantized:
                quantized[name] = quantized[other]
            else:
                holders[name] = _register(self, name, params[other])
        self.w = Weights(holders, quantized)
        self._kernel_choices(quantized.values())
        self.register_load_state_dict_pre_hook(_own_memory_for_loaded_constants)

    def forward(self, x, cache: KVCache | None = None):  # replaced by the generated class
        raise NotImplementedError

    _device: torch.device | None = None  # where the parameters are, when not on the CPU (`_apply`)

    def _apply(self, fn, recurse: bool = True):
        """What `to`, `cuda`, `cpu`, `half` … run: `fn` converts each tensor. Where it moves them off
        the CPU, the weights kept in their blocks first become float32 parameters."""
        device = fn(torch.empty(0)).device
        if device.type != "cpu":
            self._float_kept()
        self.__dict__.pop("_constants", None)  # made again, on the device and in the type the weights take
        moved = super()._apply(fn, recurse)
        self._device = None if device.type == "cpu" else device
        return moved

    def _float_kept(self) -> None:
        """Each weight kept in its GGUF blocks (a matrix, or a stack of them: [E, n, k]) becomes a
        float32 parameter at its GGUF name (tied names share one), as `load(..., dequantize=True)`
        would have made it."""
        kept = self.w._quantized
        if not kept:
            return
        self._check_file()  # the blocks are read in the file's pages
        holders = {name: module for name, (module, _) in self.w._at.items()}
        made: dict[int, nn.Parameter] = {}
        for name, q in kept.items():
            if id(q) not in made:
                made[id(q)] = nn.Parameter(q.dequantize())
            holders[name] = _register(self, name, made[id(q)])
        self.w = Weights(holders)
        self._kernel_choices(())

    def constant(self, step: int, make):
        """ModelAPI.constant, made outside inference mode (a pass under `torch.inference_mode()`
        would make inference tensors, which a later pass with autograd could not save for its
        backward); a decoding step being recorded reads it as its own (engine/torch/replay.py `constant`)."""
        made = self.__dict__.setdefault("_constants", {})
        if step not in made:
            with torch.inference_mode(False):
                made[step] = make()
        value = made[step]
        kernels.replay_constant(value)
        return value

    @property
    def device(self) -> torch.device:
        """Where the forward pass runs (and its logits are made)."""
        return self._device or torch.device("cpu")

    def __call__(self, x, cache: KVCache | None = None, last: bool = False):
        """Logits [..., ℓ, N_V] of token ids x [..., ℓ] (with a cache: the new tokens); `last`: of the
        last token alone, [..., 1, N_V]. On a model moved to a device, ids anywhere are moved there."""
        if self._device is None:
            return self._call(x, cache, last)
        with self._device:  # tensors made from numbers during the pass are made on the device
            return self._call(x, cache, last)

    def _call(self, x, cache: KVCache | None, last: bool):
        self._check_file()
        x = torch.as_tensor(x, dtype=torch.long)
        if cache is not None and not self.RECOMPUTE:
            cache.begin_pass()  # sliding windows drop the rows no new token reads
        if cache is not None and self.RECOMPUTE:
            n_new = 1 if last else x.shape[-1]
            out = super().__call__(self._with_history(x, cache, torch.cat), None, last)[..., -n_new:, :]
        elif x.numel() <= engine.FEW_FLOAT_TOKENS and self._device is None:  # decoding
            out = self._decoding_step(self._step, x, cache, last)
        else:
            if cache is not None:  # a recorded step is replayed only right after steps like it
                cache.prepared.pop(kernels.REPLAY_KEY, None)
            out = super().__call__(x, cache, last)
        if cache is not None:
            cache.advance(x.shape[-1])
        return out[..., -1:, :] if last else out  # a card with no cut point computes every token

    replay_why = ""  # why this model's decoding steps are not replayed (engine/torch/replay.py), once refused
    _replay_tries = kernels.REPLAY_TRIES

    def _step(self, x, cache: KVCache | None, last: bool):
        """One decoding step: the cache's recorded step replayed where it may be (engine/torch/replay.py)."""
        return kernels.replay_step(self, super().__call__, x, cache, last, ops)

    def _rows_pass(self, ids: np.ndarray, rows: Rows) -> np.ndarray:
        if self._device is not None:
            raise RowsRefused("a batch of sequences at different positions: the kernel runs on the CPU alone")
        for cache in rows.caches:  # a recorded step is replayed only right after steps like it
            cache.prepared.pop(kernels.REPLAY_KEY, None)
        with torch.inference_mode():
            rows.begin_pass()  # (its windows move rows of buffers made in inference mode)
            return super().__call__(torch.as_tensor(ids), rows, False).float().numpy()

    def _forward_numpy(self, ids: np.ndarray, cache: KVCache | None, last: bool = False) -> np.ndarray:
        with torch.inference_mode():
            return self(torch.as_tensor(ids), cache, last).float().cpu().numpy()
