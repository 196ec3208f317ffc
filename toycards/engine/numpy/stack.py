"""A NumPy stack of matrices kept in its GGUF blocks: `QuantStack` (a layer's experts, [E, n, k]).

Owns: engine.stack.Stack speaking NumPy: `shape`, `ndim`, `dtype`; `W[e]` is matrix e as a
QuantWeight over the same blocks (what runtime/numpy/ops.py's MoE kernel and a card's `W[e, :, :]`
multiply by); `__array__`, ufuncs, operators and any other array attribute get the dequantized
float32 array [E, n, k], computed for that use and not kept (engine/numpy/quant.py's QuantWeight
does the same for a matrix).
Leaves out: the products (QuantWeight), what any target's stack shares (engine/stack.py).
"""

from __future__ import annotations

import numpy as np

from toycards.engine import ckernels as kernels
from toycards.engine.numpy.quant import QuantWeight
from toycards.engine.stack import Stack


def _unwrap(args):
    return tuple(a.dequantize() if isinstance(a, QuantStack | QuantWeight) else a for a in args)


class QuantStack(Stack):
    """W [E, n, k] as GGUF blocks: `whole`, a QuantWeight [E·n, k].

    >>> from gguf import GGMLQuantizationType, quants
    >>> W = np.arange(3 * 2 * 32, dtype=np.float32).reshape(6, 32) / 64
    >>> blocks = quants.quantize(W, GGMLQuantizationType.Q8_0)
    >>> s = QuantStack(QuantWeight(blocks, GGMLQuantizationType.Q8_0, (6, 32)), 3)
    >>> s.shape, s[1].shape, s.linear(np.ones((3, 1, 32), dtype=np.float32)).shape
    ((3, 2, 32), (2, 32), (3, 1, 2))
    """

    ndim = 3
    dtype = np.dtype(np.float32)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.E, self.n, self.k)

    def __array__(self, dtype=None, copy=None):
        out = self.dequantize()
        return out if dtype is None else out.astype(dtype)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return getattr(ufunc, method)(*_unwrap(inputs), **kwargs)

    def _stacked(self, ys):
        return np.stack(ys, axis=-3)

    def __getattr__(self, name: str):  # any other array attribute or method: the dequantized array's
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.dequantize(), name)


kernels.forward_operators(QuantStack, _unwrap)
