"""C kernels for the per-token glue of a decoding step: RMSNorm, RoPE and attention on few rows.

Owns: deciding when the C versions in kernels/quant.c apply (few tokens, contiguous float32 CPU
tensors of the plain classes, no autograd) and calling them; each function returns None where they
do not, and ops_torch then runs torch's own operator. On one token torch's composite operators
cost 10–30 µs a call (rms_norm ~10, rope ~20, scaled_dot_product_attention ~30), a few hundred
calls per token; these cost the ctypes call and one output tensor.
Leaves out: the meaning of each operation (ops_torch.py, whose torch versions these equal; the
tests in tests/test_kernels.py hold both to the card's own steps), the build (quant_kernels.py).
"""

from __future__ import annotations

import ctypes
import functools

import torch

from toycards.runtime import quant_kernels

FEW_ROWS = 8  # query tokens (rows per head) up to which the C versions are used

_P, _I, _D = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_lib = None
_tried = False


def _library():
    global _lib, _tried
    if not _tried:
        _tried = True
        _lib = quant_kernels.library()
    return _lib


def _plain(*tensors) -> bool:
    """Every tensor a contiguous float32 CPU tensor of a plain class, and no autograd to record."""
    grad = torch.is_grad_enabled()
    for t in tensors:
        if (
            t.__class__ not in _PLAIN
            or t.dtype is not torch.float32
            or not t.is_cpu
            or not t.is_contiguous()
            or (grad and t.requires_grad)
        ):
            return False
    return True


def rms_norm(e, gamma, epsilon):
    """e / √(mean(e²) + ε) · γ over the last axis, or None."""
    lib = _library()
    if (
        lib is None
        or not isinstance(epsilon, int | float)
        or not torch.is_tensor(e)
        or not torch.is_tensor(gamma)
    ):
        return None
    d = e.shape[-1]
    if gamma.dim() != 1 or gamma.shape[0] != d or not _plain(e, gamma):
        return None
    rows = e.numel() // d if d else 0
    if rows == 0 or rows > FEW_ROWS:
        return None
    y = torch.empty(e.shape, dtype=torch.float32)
    lib.tc_rms_norm(_P(e.data_ptr()), _P(gamma.data_ptr()), _I(rows), _I(d), _D(epsilon), _P(y.data_ptr()))
    return y


def rope(x, cos, sin, pairs: bool):
    """x [..., T, d] rotated by cos, sin [T, half] (pairs (2i, 2i+1), or halves (i, i+half); entries
    from 2·half on unchanged), or None."""
    lib = _library()
    if lib is None or x.dim() < 2 or cos.dim() != 2 or not torch.is_tensor(x):
        return None
    T, d = x.shape[-2], x.shape[-1]
    half = cos.shape[-1]
    if cos.shape != (T, half) or sin.shape != (T, half) or 2 * half > d or T > FEW_ROWS:
        return None
    if not _plain(x, cos, sin):
        return None
    rows = x.numel() // (T * d) if T * d else 0
    if rows == 0:
        return None
    y = torch.empty(x.shape, dtype=torch.float32)
    lib.tc_rope(_P(x.data_ptr()), _P(cos.data_ptr()), _P(sin.data_ptr()), _I(rows), _I(T), _I(d), _I(half),
                ctypes.c_int(1 if pairs else 0), _P(y.data_ptr()))  # fmt: skip
    return y


@functools.lru_cache(maxsize=64)
def _heads(kv_index: tuple, n_kv: int) -> torch.Tensor | None:
    """kv_index as an int64 tensor for the kernel, or None when it names a head that K lacks."""
    if any(int(i) != i or i < 0 or i >= n_kv for i in kv_index):
        return None
    with torch.inference_mode(False):
        return torch.tensor(kv_index, dtype=torch.int64)


def _rows_contiguous(t: torch.Tensor) -> bool:
    """[B, H, S, d] with each row of d entries contiguous and rows of a head one after another
    (a view of the first S rows of a KV cache buffer)."""
    return t.stride(-1) == 1 and (t.shape[-2] <= 1 or t.stride(-2) == t.shape[-1])


def attention(Q, K, V, allowed, kv_index):
    """softmax(Q·Kᵀ / √d + mask)·V for few queries: Q [B, H, Tq, d], K, V [B, H_kv, S, d], allowed
    [Tq, S] (bool), kv_index (query head → key/value head, or None: the same head); or None."""
    lib = _library()
    if lib is None or Q.dim() != 4 or K.dim() != 4 or V.dim() != 4:
        return None
    B, H, Tq, d = Q.shape
    S = K.shape[-2]
    if Tq > FEW_ROWS or S == 0 or K.shape[0] != B or V.shape != K.shape or K.shape[-1] != d:
        return None
    if not _plain(Q) or allowed.dtype is not torch.bool or tuple(allowed.shape) != (Tq, S):
        return None
    for t in (K, V):
        if (
            t.__class__ not in _PLAIN
            or t.dtype is not torch.float32
            or not t.is_cpu
            or not _rows_contiguous(t)
        ):
            return None
        if torch.is_grad_enabled() and t.requires_grad:
            return None
    heads = _heads(tuple(kv_index) if kv_index is not None else tuple(range(H)), K.shape[1])
    if heads is None or heads.shape[0] != H:
        return None
    mask = allowed.contiguous()
    out = torch.empty((B, H, Tq, d), dtype=torch.float32)
    code = lib.tc_attention(
        _P(Q.data_ptr()), _P(K.data_ptr()), _P(V.data_ptr()), _I(B), _I(H), _I(Tq), _I(S), _I(d),
        _I(K.stride(0)), _I(K.stride(1)), _I(V.stride(0)), _I(V.stride(1)), _P(heads.data_ptr()),
        _P(mask.data_ptr()), _D(d**-0.5), _P(out.data_ptr()),
    )  # fmt: skip
    if code != 0:
        raise RuntimeError(f"attention kernel failed with code {code}")
    return out
