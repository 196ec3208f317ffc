"""Dequantisation of GGUF tensor data to float32, in NumPy shape.

Owns: turning raw tensor data (as `GGUFFile.raw` returns it: plain types typed, the
rest as uint8 blocks) into float32. Plain types are a cast; BF16, Q8_0, Q4_0, Q4_1,
Q5_0 and Q5_1 go through small vectorised kernels of our own, which the tests hold
bit-identical to `gguf.quants`; every other type `gguf.quants` knows (the K-quants,
IQ*, TQ*, MXFP4) goes through `gguf.quants.dequantize`.
Leaves out: reading files (gguf/reader.py) and quantising (use `gguf.quants.quantize`).

Block layouts (ggml-common.h; `d`, `m` are float16, `qs` packed nibbles whose low
halves are elements 0…15 and high halves 16…31, `qh` the 5th bits as a uint32):

    Q8_0  d qs[32]:int8          x = d · q
    Q4_0  d qs[16]               x = d · (q − 8)
    Q4_1  d m qs[16]             x = d · q + m
    Q5_0  d qh qs[16]            x = d · (q + 16·bit − 16)
    Q5_1  d m qh qs[16]          x = d · (q + 16·bit) + m

Why kernels of our own for BF16, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1: gguf.quants dequantizes them
more slowly (bench/dequant.py times both on a 4096×4096 matrix of each type).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import numpy as np

from toycards.errors import ToycardsError
from toycards.gguf.facts import QUANT_NAMES, QUANT_SIZES

T = SimpleNamespace(**{name: code for code, name in QUANT_NAMES.items()})  # ggml type ids by name

# types stored as plain little-endian numbers: raw data comes typed, not as blocks
PLAIN_DTYPES: dict[int, np.dtype] = {
    T.F32: np.dtype("<f4"),
    T.F16: np.dtype("<f2"),
    T.F64: np.dtype("<f8"),
    T.I8: np.dtype("i1"),
    T.I16: np.dtype("<i2"),
    T.I32: np.dtype("<i4"),
    T.I64: np.dtype("<i8"),
}
_CHUNK = 1 << 14  # blocks per kernel call: keeps temporaries cache-sized


def _f16(blocks: np.ndarray, start: int) -> np.ndarray:
    """The float16 at byte `start` of every block, as float32 of shape (n, 1)."""
    return blocks[:, start : start + 2].copy().view("<f2").astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(n, 16) packed bytes → (n, 32) uint8: low nibbles are elements 0…15, high 16…31."""
    q = np.empty((qs.shape[0], 32), dtype=np.uint8)
    np.bitwise_and(qs, 0x0F, out=q[:, :16])
    np.right_shift(qs, 4, out=q[:, 16:])
    return q


def _five_bits(qh: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """Nibbles plus the 5th bits: bit j of the little-endian uint32 `qh` belongs to element j."""
    q = _nibbles(qs)
    q |= np.unpackbits(qh, axis=1, bitorder="little") << 4
    return q


def _q8_0(b: np.ndarray, out: np.ndarray) -> None:
    np.multiply(b[:, 2:].view(np.int8), _f16(b, 0), out=out)


def _q4_0(b: np.ndarray, out: np.ndarray) -> None:
    q = _nibbles(b[:, 2:]).view(np.int8)
    q -= 8
    np.multiply(q, _f16(b, 0), out=out)


def _q4_1(b: np.ndarray, out: np.ndarray) -> None:
    out[...] = _nibbles(b[:, 4:])
    out *= _f16(b, 0)
    out += _f16(b, 2)


def _q5_0(b: np.ndarray, out: np.ndarray) -> None:
    q = _five_bits(b[:, 2:6], b[:, 6:]).view(np.int8)
    q -= 16
    np.multiply(q, _f16(b, 0), out=out)


def _q5_1(b: np.ndarray, out: np.ndarray) -> None:
    out[...] = _five_bits(b[:, 4:8], b[:, 8:])
    out *= _f16(b, 0)
    out += _f16(b, 2)


# ggml type → kernel(blocks (n, type_size) uint8, out (n, block_size) float32)
KERNELS: dict[int, Callable[[np.ndarray, np.ndarray], None]] = {
    T.Q8_0: _q8_0,
    T.Q4_0: _q4_0,
    T.Q4_1: _q4_1,
    T.Q5_0: _q5_0,
    T.Q5_1: _q5_1,
}


def dequantize(raw: np.ndarray, ggml_type: int, shape: tuple[int, ...], what: str = "tensor") -> np.ndarray:
    """Dequantise `raw` (typed for plain types, uint8 blocks otherwise) to float32 of `shape`.

    An F32 input comes back as it is (a view, reshaped); everything else is a new array.
    `what` names the tensor in error messages.

    >>> blocks = np.array([[0x00, 0x3C] + [1, 0xFF] * 16], dtype=np.uint8)   # d = 1.0
    >>> dequantize(blocks, T.Q8_0, (32,))[:4]
    array([ 1., -1.,  1., -1.], dtype=float32)
    """
    if ggml_type not in QUANT_SIZES:
        raise ToycardsError(f"{what}: unknown tensor type {ggml_type}")
    name = QUANT_NAMES[ggml_type]
    block, type_size = QUANT_SIZES[ggml_type]
    n_elements = int(np.prod(shape, dtype=object))
    if n_elements % block or raw.nbytes != n_elements // block * type_size:
        raise ToycardsError(f"{what}: {raw.nbytes} bytes of {name} data do not fit shape {shape}")
    if ggml_type in PLAIN_DTYPES:
        if raw.dtype != PLAIN_DTYPES[ggml_type]:  # bytes given: reinterpret them
            raw = np.ascontiguousarray(raw).reshape(-1).view(np.uint8).view(PLAIN_DTYPES[ggml_type])
        return raw.astype(np.float32, copy=False).reshape(shape)
    if ggml_type == T.BF16:  # the upper half of a float32
        bits = raw.view("<u2").astype(np.uint32)
        bits <<= 16
        return bits.view(np.float32).reshape(shape)
    if ggml_type in KERNELS:
        return _blockwise(KERNELS[ggml_type], raw.reshape(-1, type_size), block).reshape(shape)
    from gguf import GGMLQuantizationType, quants  # imported here: loading a file needs none of it

    try:  # whole rows: gguf.quants works through them 16 at a time
        out = quants.dequantize(
            raw.reshape(-1, shape[-1] // block * type_size), GGMLQuantizationType(ggml_type)
        )
    except NotImplementedError:
        raise ToycardsError(f"{what}: dequantising {name} is not supported") from None
    return out.reshape(shape)


def _blockwise(kernel: Callable, blocks: np.ndarray, block: int) -> np.ndarray:
    out = np.empty((blocks.shape[0], block), dtype=np.float32)  # (n_blocks, block)
    for s in range(0, blocks.shape[0], _CHUNK):
        kernel(blocks[s : s + _CHUNK], out[s : s + _CHUNK])
    return out
