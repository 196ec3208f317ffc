"""A torch stack of matrices kept in its GGUF blocks: `QuantStack` (a layer's experts, [E, n, k]).

Owns: engine.stack.Stack speaking torch: a shape, `dim()` and the tensor attributes generated code
and the MoE kernels read; `W[e]` is matrix e as a QuantWeight over the same blocks (what
runtime/torch/moe.py and a card's `W[e, :, :]` multiply by); any torch function, tensor method or
operator applied to the stack gets the dequantized float32 tensor [E, n, k], computed for that
use and not kept (as engine/torch/quant.py's QuantWeight does for a matrix).
Leaves out: the products (QuantWeight), what any target's stack shares (engine/stack.py).
"""

from __future__ import annotations

import torch

from toycards.engine import ckernels as kernels
from toycards.engine.stack import Stack
from toycards.engine.torch.quant import TensorLike, unwrap


class QuantStack(TensorLike, Stack):
    """W [E, n, k] as GGUF blocks: `whole`, a QuantWeight [E·n, k].

    >>> from gguf import GGMLQuantizationType, quants
    >>> from toycards.engine.torch.quant import QuantWeight
    >>> W = torch.arange(3 * 2 * 32, dtype=torch.float32).reshape(6, 32) / 64
    >>> blocks = quants.quantize(W.numpy(), GGMLQuantizationType.Q8_0)
    >>> s = QuantStack(QuantWeight(blocks, GGMLQuantizationType.Q8_0, (6, 32)), 3)
    >>> s.shape, s[1].shape, s.linear(torch.ones(3, 1, 32)).shape
    (torch.Size([3, 2, 32]), torch.Size([2, 32]), torch.Size([3, 1, 2]))
    """

    requires_grad = False
    dtype = torch.float32

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.E, self.n, self.k))

    @property
    def device(self) -> torch.device:
        return self.whole.device

    def _stacked(self, ys):
        return torch.stack(ys, dim=-3)


kernels.forward_operators(QuantStack, unwrap)
