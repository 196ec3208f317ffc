"""A stack of matrices kept in its GGUF blocks: `Stack`, the part of each target's `QuantStack`
(engine/torch/stack.py, engine/numpy/stack.py) that does not depend on the target.

Owns: what a stack W [E, n, k] of one ggml type is as stored (a layer's experts, `ffn_gate_exps`;
DeepSeek's per-head `attn_k_b`): the file's blocks of E·n rows, one 2-D block matrix, held as the
target's `QuantWeight` over all of them (`whole`), so that matrix e is rows e·n … (e+1)·n − 1 of it;
`W[e]` (and `W[e, :, :]`) is that matrix as a weight of its own over the same blocks
(`QuantWeight.rows`: no copy, made once, reading the packed copy of the whole where there is one);
`linear`, matrix e times slice e of x (a map over heads, `W[h, :, :] · X^h`), each by its kernel
product; and the dequantized float32 stack [E, n, k] for any other use, computed for that use.
`block_matrix`: a stack's whole, any other weight itself (what the packing rules take).
Leaves out: the target's tensor protocol (`__torch_function__`, `__array__`: the subclasses), the
products themselves (QuantWeight), and when the blocks pack (engine/packing.py, which packs the
whole: the matrices are row views of it).
"""

from __future__ import annotations

import operator

from toycards.gguf.facts import QUANT_NAMES


def matrix_index(index, E: int) -> int | None:
    """The matrix (0 … E−1) that `W[index]` picks whole from a stack of E matrices (`W[e]`,
    `W[e, :, :]`, `W[e, ...]`, e negative from the end), or None for any other index.

    >>> matrix_index(2, 4), matrix_index((-1, slice(None), slice(None)), 4), matrix_index(slice(0, 2), 4)
    (2, 3, None)
    """
    if isinstance(index, tuple):
        whole = [i is Ellipsis or (isinstance(i, slice) and i == slice(None)) for i in index[1:]]
        if not index or not all(whole) or sum(i is Ellipsis for i in index[1:]) > 1:
            return None
        index = index[0]
    if isinstance(index, bool):
        return None
    try:
        e = operator.index(index)  # a Python, NumPy or 0-d torch integer
    except TypeError:
        return None
    if not -E <= e < E:
        raise IndexError(f"matrix {e} of a stack of {E}")
    return e % E


def block_matrix(weight):
    """The block matrix `weight` is stored as: a stack's `whole` (what packs, engine/packing.py, and
    what the packing rules count), any other weight itself."""
    return weight.whole if isinstance(weight, Stack) else weight


class Stack:
    """W [E, n, k] as the blocks of `whole`, a QuantWeight [E·n, k] (the target's)."""

    is_quantized_weight = True

    def __init__(self, whole, E: int) -> None:
        rows, k = whole.shape
        assert E > 0 and rows % E == 0, (E, tuple(whole.shape))
        self.whole, self.E, self.n, self.k = whole, E, rows // E, k
        self.ggml_type, self.name = whole.ggml_type, whole.name

    @property
    def blocks(self):
        """The blocks as stored: uint8 [E·n, row_bytes] (the file's bytes, memory-mapped)."""
        return self.whole.blocks

    @property
    def nbytes(self) -> int:
        return self.whole.blocks.nbytes

    def __len__(self) -> int:
        return self.E

    def __repr__(self) -> str:
        kind = QUANT_NAMES.get(self.ggml_type, str(self.ggml_type))
        return f"{type(self).__name__}({self.name}: {kind} {tuple(self.shape)}, {self.nbytes} bytes)"

    def matrix(self, e: int):
        """Matrix e (0-based) as a QuantWeight [n, k] over the same blocks."""
        return self.whole.rows(e * self.n, (e + 1) * self.n)

    def __getitem__(self, index):
        e = matrix_index(index, self.E)
        return self.dequantize()[index] if e is None else self.matrix(e)

    def dequantize(self):
        """W as a new float32 array or tensor [E, n, k]."""
        return self.whole.dequantize().reshape(self.E, self.n, self.k)

    def linear(self, x):
        """Each matrix times its slice of x: x [..., E, ℓ, k] → [..., E, ℓ, n] (x [..., 1, ℓ, k] or
        [ℓ, k]: the same x for every matrix), matrix e by `QuantWeight.linear` on x[..., e, :, :]."""
        x = x[None] if x.ndim < 3 else x
        m = x.shape[-3]
        if m not in (1, self.E) or x.shape[-1] != self.k:
            raise ValueError(f"{self.name}: a stack {tuple(self.shape)} times x of shape {tuple(x.shape)}")
        ys = [self.matrix(e).linear(x[..., e if m > 1 else 0, :, :]) for e in range(self.E)]
        return self._stacked(ys)  # E × (..., ℓ, n) → (..., E, ℓ, n)

    def _stacked(self, ys):
        """The products ys (E of [..., ℓ, n]) as one [..., E, ℓ, n]: the target's stack."""
        raise NotImplementedError
