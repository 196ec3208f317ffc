"""The NumPy target's one C call for the prelude's GQAttention (RoPE of every head, the KV cache,
attention): kernels/blockops.c's `tc_gqa`, as the torch target calls it (engine.torch.glue.gq_attention).

Owns: deciding when it applies (float32 C-contiguous arrays, a layout and shapes `tc_gqa` takes, a
cache whose buffers it can write) and calling it with what the layers of a pass share (`_Site`: RoPE's
angles at the pass's positions, the mask per key count, the argument struct). Where it does not
apply it returns None and the card's steps run, as generated code says.
Why: on a decoding step the card's steps are many small NumPy calls a layer (RoPE's angles and
rotations, each query head's copy of its key and value head, the scores, the mask, softmax), each
paying NumPy's overhead on a few numbers; on a small model they are most of a token. The C call
pays that overhead once (`bench/vs_llama_cpp.py --numpy` measures the NumPy target's decoding).
Leaves out: the meaning (the prelude's steps, which tests/engine/test_kernels_numpy.py holds this to),
torch (engine/torch/glue.py), the build (engine/ckernels.py).
"""

from __future__ import annotations

import ctypes

import numpy as np

from toycards.engine import ckernels
from toycards.engine.numpy.quant import FEW_TOKENS, data_ptr, prompt_one_thread
from toycards.runtime.context import gqa_site


def _plain(*arrays) -> bool:
    """Every array a C-contiguous float32 NumPy array."""
    for a in arrays:
        if a.__class__ is not np.ndarray or a.dtype != np.float32 or not a.flags.c_contiguous:
            return False
    return True


def _cache_plain(buffers, half: bool) -> bool:
    """A cache slot's buffers (or none yet) are ones tc_gqa can write: C-contiguous float32 arrays
    (float16 in a half cache)."""
    dtype = np.float16 if half else np.float32
    return all(
        b is None or (b.__class__ is np.ndarray and b.dtype == dtype and b.flags.c_contiguous)
        for b in buffers
    )


class _Site:
    """What the GQAttention calls of one pass with the same RoPE, mask and hyperparameters share."""

    __slots__ = ("t", "rho", "theta", "layout", "mask", "cos", "sin", "masks", "calls")

    def __init__(self, t, rho, theta, layout, mask) -> None:
        self.t, self.rho, self.theta, self.layout, self.mask = t, rho, theta, layout, mask
        self.cos = self.sin = None
        self.masks: dict = {}
        self.calls: dict = {}  # shapes → (GQAArgs, its kv index array, a zero shaped as the cache's rows) or None

    def angles(self):
        """cos, sin [T, half] of the rotation at the pass's positions, as the steps' rope_pairs and
        rope_halves compute φ (the same NumPy expression: the same values, rounded to float32 where
        a float64 ρ or θ makes the steps' float64); half 0 for no RoPE."""
        if self.cos is None:
            if self.layout == "none":
                self.cos = self.sin = np.empty((len(self.t), 0), dtype=np.float32)
            else:
                rho = np.asarray(self.rho)
                d_r = rho.shape[-1] * 2
                t = np.asarray(self.t).astype(np.float32).reshape(-1, 1)
                i = np.arange(1, d_r // 2 + 1).astype(np.float32)
                phi = (t - 1) / ((self.theta ** ((2 * (i - 1)) / d_r)) * rho)
                self.cos = np.ascontiguousarray(np.cos(phi), dtype=np.float32)
                self.sin = np.ascontiguousarray(np.sin(phi), dtype=np.float32)
        return self.cos, self.sin

    def allowed(self, S: int, first: int = 0) -> np.ndarray | None:
        """The card's mask over S keys, those at positions first + 1 … first + S (a sliding window's
        cache slot holds no earlier ones), at the pass's query positions: bool [T, S], or None where
        it is not one mask for every head and batch row (it has axes of its own)."""
        if (S, first) not in self.masks:
            t_z = np.arange(first + 1, first + S + 1).astype(np.float32)
            t_x = np.asarray(self.t).astype(np.float32).reshape(-1, 1)
            m = np.asarray(self.mask(t_z, t_x))
            shape = (len(t_x), S)
            try:
                fits = m.ndim <= 2 and np.broadcast_shapes(m.shape, shape) == shape
            except ValueError:  # the steps say what is wrong with it
                fits = False
            self.masks[S, first] = (
                np.ascontiguousarray(np.broadcast_to(m, shape), dtype=bool) if fits else None
            )
        return self.masks[S, first]


def _call(site: _Site, Q, K, V, H, H_kv, layout, cap):
    """The argument struct of tc_gqa for these shapes, its kv index and an array shaped as the
    cache's rows [..., H_kv, T, d] (a broadcast zero: no memory), or None where tc_gqa does not take
    them."""
    shapes = (Q.shape, K.shape, V.shape)
    if shapes in site.calls:
        return site.calls[shapes]
    fits = ckernels.gqa_shapes(Q.shape, K.shape, V.shape, H, H_kv, layout, cap)
    made = None
    if fits is not None:
        lead, T, d = fits
        kv = np.array(ckernels.gqa_groups(H, H_kv), dtype=np.int64)
        args = ckernels.GQAArgs(
            B=Q.size // (T * H * d), T=T, H=H, Hkv=H_kv, d=d, layout=ckernels.GQA_LAYOUTS[layout],
            kv=kv.ctypes.data, scale=d**-0.5, cap=cap,
        )  # fmt: skip
        made = (args, kv, np.broadcast_to(np.float32(0), (*lead, H_kv, T, d)))
    site.calls[shapes] = made
    return made


def gq_attention(Q, K, V, H, H_kv, layout, theta, rho, mask, cap, sinks, t, ctx):
    """The prelude's GQAttention in one C call: Q [..., T, H·d], K, V [..., T, H_kv·d] at positions
    t → [..., T, H·d], each query head h with its sink logit sinks[h] (sinks None: none; else a
    float32 array [H]); with a cache in ctx, the rotated keys and the values go to its next slot (as
    `runtime.extend` would put them). None where it does not apply (then nothing is written to the
    cache, and the card's steps run)."""
    lib = ckernels.library()
    if lib is None or not _plain(Q, K, V):
        return None
    if sinks is not None and not (_plain(sinks) and sinks.shape == (H,)):
        return None  # sinks tc_gqa cannot read: the steps apply them
    site = gqa_site(
        ctx, "numpy", mask, rho, t, (theta, layout, H, H_kv, cap), lambda: _Site(t, rho, theta, layout, mask)
    )
    call = _call(site, Q, K, V, H, H_kv, layout, cap)
    if call is None:
        return None
    a, _, like = call
    cos, sin = site.angles()
    if cos.shape != (a.T, cos.shape[-1]) or 2 * cos.shape[-1] > a.d:
        return None
    cache = ctx.cache if ctx is not None else None
    entry = cache.slots[ctx.slot] if cache is not None and ctx.slot < len(cache.slots) else None
    half = cache is not None and cache.half
    if entry is not None and not _cache_plain(entry[0], half):
        return None  # the steps filled this slot with another dtype
    window = getattr(mask, "window", None)  # a sliding window: the cache keeps the rows it reaches
    first = cache.window_slot(ctx.slot, window) if cache is not None and window is not None else 0
    allowed = site.allowed((entry[1] if entry is not None else 0) + a.T, first)
    if allowed is None:
        return None
    if cache is not None:
        slot = ctx.slot
        (Kc, Vc), used = cache.reserve(slot, ctx.ops, (like, like), a.T)
        for c in (Kc, Vc):  # what tc_gqa writes: [..., H_kv, rows, d] with room for the new rows
            fits = c.shape[:-2] == like.shape[:-2] and c.shape[-1] == a.d and c.shape[-2] >= used + a.T
            if not fits or not c.flags.c_contiguous or c.dtype != (np.float16 if half else np.float32):
                raise RuntimeError(f"a KV cache buffer of shape {c.shape} for rows of shape {like.shape}")
    else:
        Kc, Vc, used = np.empty(like.shape, dtype=np.float32), np.empty(like.shape, dtype=np.float32), 0
    out = np.empty((*Q.shape[:-1], a.H * a.d), dtype=np.float32)
    kh, vh = Kc.strides[-3] // Kc.itemsize, Vc.strides[-3] // Vc.itemsize
    a.Q, a.K, a.V, a.out = data_ptr(Q), data_ptr(K), data_ptr(V), data_ptr(out)
    a.cos, a.sin, a.half = data_ptr(cos), data_ptr(sin), cos.shape[-1]
    a.Kc, a.Vc, a.kh, a.vh, a.kb, a.vb = data_ptr(Kc), data_ptr(Vc), kh, vh, kh * a.Hkv, vh * a.Hkv
    a.used, a.allowed, a.kv_half = used, data_ptr(allowed), int(half)
    a.sinks = data_ptr(sinks) if sinks is not None else None
    # a prompt's on this thread alone where NumPy's BLAS has run products: its threads, still
    # spinning after them, and the kernels' OpenMP threads would fight over the cores
    a.one_thread = a.T > FEW_TOKENS and prompt_one_thread()
    code = lib.tc_gqa(ctypes.byref(a))
    if code != 0:
        raise RuntimeError(f"grouped-query attention kernel failed with code {code}")
    if cache is not None:
        cache.slots[slot][1] = used + a.T
        ctx.slot += 1
    return out


def gq_attention_rows(Q, K, V, H, H_kv, layout, theta, rho, mask, cap, sinks, ctx):
    """gq_attention for a pass whose batch rows are sequences of their own (`ctx.rows`: runtime/rows.py):
    row b's new tokens at its own positions (`ctx.pos` [B, T]) attend to the keys of `ctx.rows.caches[b]`
    alone, through the card's mask at those positions, and are appended there. One C call; None
    (nothing written) where tc_gqa does not take the call."""
    lib, rows = ckernels.library(), ctx.rows
    if lib is None or not _plain(Q, K, V) or Q.ndim != 3 or Q.shape[0] != len(rows.caches):
        return None
    if sinks is not None and not (_plain(sinks) and sinks.shape == (H,)):
        return None
    t = ctx.pos
    make = lambda: _Site(t, rho, theta, layout, mask)  # noqa: E731
    site = gqa_site(ctx, "numpy rows", mask, rho, t, (theta, layout, H, H_kv, cap), make)
    call = _call(site, Q, K, V, H, H_kv, layout, cap)
    if call is None:
        return None
    a, _, like = call
    cos, sin = site.angles()
    if cos.shape != (Q.shape[0] * a.T, cos.shape[-1]) or 2 * cos.shape[-1] > a.d:
        return None
    slot = ctx.slot
    ready = lambda K, V: _cache_plain((K, V), rows.half)  # noqa: E731
    made = rows.buffers(slot, getattr(mask, "window", None), a.T, like[:1], ctx.ops, ready, _described)
    allowed = made and rows.allowed(site.masks, mask, t, *made[:2], lambda x: x)
    if allowed is None:
        return None
    out = np.empty((*Q.shape[:-1], a.H * a.d), dtype=np.float32)
    a.Q, a.K, a.V, a.out = data_ptr(Q), data_ptr(K), data_ptr(V), data_ptr(out)
    a.cos, a.sin, a.half, a.allowed = data_ptr(cos), data_ptr(sin), cos.shape[-1], allowed.ctypes.data
    a.kv_half, a.sinks, a.one_thread = int(rows.half), data_ptr(sinks) if sinks is not None else None, False
    ckernels.gqa_rows(ctypes.byref(a), a, np.array(made[2], dtype=np.int64))
    ctx.slot = slot + 1
    return out


def _described(K, V) -> tuple:
    """A row's cache buffers as tc_gqa's `rows` table takes them: addresses, head strides in entries."""
    return data_ptr(K), data_ptr(V), K.strides[-3] // K.itemsize, V.strides[-3] // V.itemsize
