"""C kernels for the per-token glue: RMSNorm, SiLU·up, RoPE, attention and the whole of grouped-query
attention (RoPE, the KV cache, attention).

Owns: deciding when the C versions in kernels/blockops.c apply (contiguous float32 CPU tensors of the
plain classes, no autograd; RoPE and attention alone, which the card's steps call where the whole
GQAttention kernel declines, only on few rows) and calling them; each function returns None where
they do not, and runtime/torch/ops.py then runs torch's own operator. On one token torch's composite
operators (rms_norm, RoPE's steps, scaled_dot_product_attention) cost more in dispatch than in
arithmetic, a few hundred calls per token; these cost the ctypes call and one output tensor. On a
prompt the C versions of RMSNorm, SiLU·up and GQAttention spread rows (and heads' runs of queries)
over the threads, and attention scores a block of keys for several queries at once, where torch's
RoPE and SDPA run as separate steps. `bench/decode.py` measures both against transformers.
Leaves out: the meaning of each operation (runtime/torch/ops.py, whose torch versions these equal; the
tests in tests/engine/test_kernels.py hold both to the card's own steps), the build (engine/ckernels.py).
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np
import torch

from toycards.engine import ckernels
from toycards.engine.torch import native

FEW_ROWS = 8  # query tokens (rows per head) up to which the C versions of RoPE and attention are used

_P, _I, _D = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_lib = None
_tried = False


def _library():
    global _lib, _tried
    if not _tried:
        _tried = True
        _lib = ckernels.library()
    return _lib


def plain(*tensors) -> bool:
    """Every tensor a contiguous float32 CPU tensor of a plain class, and no autograd to record."""
    if (cx := native.module()) is not None:
        return cx.plain(*tensors)  # the same question, from C++
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
    """e / √(mean(e²) + ε) · γ over the last axis, or None (runtime.torch.ops.rms_norm tries glue.cpp's
    version of this call first)."""
    lib = _library()
    if (
        lib is None
        or not isinstance(epsilon, int | float)
        or not torch.is_tensor(e)
        or not torch.is_tensor(gamma)
    ):
        return None
    d = e.shape[-1]
    if gamma.dim() != 1 or gamma.shape[0] != d or not plain(e, gamma):
        return None
    rows = e.numel() // d if d else 0
    if rows == 0:
        return None
    y = torch.empty(*e.shape, dtype=torch.float32)  # sizes as arguments: a cheaper call than a tuple
    lib.tc_rms_norm(_P(e.data_ptr()), _P(gamma.data_ptr()), _I(rows), _I(d), _D(epsilon), _P(y.data_ptr()))
    return y


def available() -> bool:
    """Whether the C kernels are here at all."""
    return _library() is not None


def silu_mul(g, u):
    """g ← SiLU(g) ⊙ u in place (SwiGLU's middle step; threads when long), g returned: g and u plain
    tensors of one shape (runtime.torch.ops.swiglu's products), the kernels `available`."""
    if g.shape != u.shape or not plain(g, u):
        raise ValueError(f"SiLU·up takes two plain float32 tensors of one shape, not {g.shape} and {u.shape}")
    if (cx := native.module()) is not None:
        cx.spoil("SiLU·up wrote in place")  # (a step being recorded cannot replay this write)
    _library().tc_silu_mul(_P(g.data_ptr()), _P(u.data_ptr()), _I(g.numel()))
    return g


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
    if not plain(x, cos, sin):
        return None
    rows = x.numel() // (T * d) if T * d else 0
    if rows == 0:
        return None
    y = torch.empty(*x.shape, dtype=torch.float32)
    lib.tc_rope(_P(x.data_ptr()), _P(cos.data_ptr()), _P(sin.data_ptr()), _I(rows), _I(T), _I(d), _I(half),
                ctypes.c_int(1 if pairs else 0), _P(y.data_ptr()))  # fmt: skip
    return y


@functools.lru_cache(maxsize=64)
def _heads(kv_index: tuple, n_kv: int) -> torch.Tensor | None:
    """kv_index as an int64 tensor for the kernel, or None when it names a head that K lacks."""
    if any(int(i) != i or i < 0 or i >= n_kv for i in kv_index):
        return None
    with torch.inference_mode(False):  # on the CPU also under a model's `with torch.device(…)`
        return torch.tensor(kv_index, dtype=torch.int64, device="cpu")


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
    if not plain(Q) or allowed.dtype is not torch.bool or tuple(allowed.shape) != (Tq, S):
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
    out = torch.empty(B, H, Tq, d, dtype=torch.float32)
    code = lib.tc_attention(
        _P(Q.data_ptr()), _P(K.data_ptr()), _P(V.data_ptr()), _I(B), _I(H), _I(Tq), _I(S), _I(d),
        _I(K.stride(0)), _I(K.stride(1)), _I(V.stride(0)), _I(V.stride(1)), _P(heads.data_ptr()),
        _P(mask.data_ptr()), _D(d**-0.5), _P(out.data_ptr()),
    )  # fmt: skip
    if code != 0:
        raise RuntimeError(f"attention kernel failed with code {code}")
    return out


class _GQACall:
    """What the GQAttention calls of one pass with the same shapes share: the argument struct with
    its constant fields set (None where tc_gqa does not apply to these shapes), and the tensors its
    pointer fields were last set from (kept alive, and compared by identity so that a layer sets only
    what differs from the one before)."""

    def __init__(self, shapes, args=None, heads=(), width=(), kv=None):
        self.shapes, self.args, self.heads, self.width, self.kv = shapes, args, heads, width, kv
        self.lead = (*heads[:-2], *heads[-1:])  # the cache buffers' shape but for the rows
        self.ref = ctypes.byref(args) if args is not None else None
        self.addr = ctypes.addressof(args) if args is not None else 0
        self.like = torch.empty(*heads, dtype=torch.float32) if args is not None else None  # the cache's rows
        self.cos = self.mask = self.Kc = self.Vc = None
        self.T = args.T if args is not None else 0  # (a ctypes field costs a conversion at each read)
        self.S = 0  # the key count of the mask at `allowed` (0: none set yet)
        self.first = 0  # the rows a sliding window's slot dropped ahead of those keys
        self.ctx = None  # the pass whose site holds this call (_prepared)


def _prepare(Q, K, V, H, H_kv, layout, cap) -> _GQACall:
    """The _GQACall for these shapes and hyperparameters (its `args` None where tc_gqa does not apply)."""
    declined = _GQACall((Q.shape, K.shape, V.shape))
    fits = ckernels.gqa_shapes(Q.shape, K.shape, V.shape, H, H_kv, layout, cap)
    if fits is None:
        return declined
    lead, T, d = fits
    kv = _heads(ckernels.gqa_groups(H, H_kv), H_kv)
    B = Q.numel() // (T * H * d)
    args = ckernels.GQAArgs(
        B=B, T=T, H=H, Hkv=H_kv, d=d, layout=ckernels.GQA_LAYOUTS[layout], kv=kv.data_ptr(), scale=d**-0.5,
        cap=cap,
    )  # fmt: skip
    return _GQACall(declined.shapes, args, (*lead, H_kv, T, d), (*lead, T, H * d), kv)


def _prepared(ctx, Q, K, V, H, H_kv, layout, cap) -> _GQACall:
    """_prepare's call for a site of this pass, kept in the cache for its later passes (a decoding
    run's steps): one no other site of this pass holds (sites of one pass with other masks or RoPE,
    Gemma's local and global layers say, each hold their own), its angles and mask unset."""
    cache = ctx.cache if ctx is not None else None
    if cache is None:
        return _prepare(Q, K, V, H, H_kv, layout, cap)
    kept = cache.prepared.setdefault(("torch gqa", Q.shape, K.shape, V.shape, H, H_kv, layout, cap), [])
    call = next((c for c in kept if c.ctx is not ctx), None)
    if call is None:
        call = _prepare(Q, K, V, H, H_kv, layout, cap)
        kept.append(call)
    call.ctx, call.cos, call.mask, call.S, call.first = ctx, None, None, 0, 0
    return call


def _cache_ready(buffers, half: bool) -> bool:
    """A cache slot's buffers (or none yet) are ones tc_gqa can write: two contiguous CPU tensors of
    float32 (float16 in a half cache)."""
    if len(buffers) != 2:
        return False
    if not half:
        return plain(*(b for b in buffers if b is not None))
    return all(
        b is None
        or (b.__class__ is torch.Tensor and b.dtype is torch.float16 and b.is_cpu and b.is_contiguous())
        for b in buffers
    )


def gq_attention(Q, K, V, H, H_kv, layout, site, cap, sinks, ctx, ops):
    """The prelude's GQAttention in one C call for few new tokens, or None (its steps then run).

    Q [..., T, H·d], K, V [..., T, H_kv·d]; `sinks` None (none) or each query head's sink logit, a
    float32 CPU tensor [H] (another one: None); `site` is what the layers of a pass with the same RoPE,
    mask and hyperparameters share (runtime/torch/ops.py's `_GQASite`): `site.angles(d)` gives cos, sin
    [T, half] at the new tokens' positions, `site.allowed(S)` the mask [T, S] over the S keys so far
    (bool; None for a mask with axes of its own, which the steps broadcast), and `site.call` keeps
    this function's _GQACall, so that the checks that depend on shapes alone run once a pass. With a
    cache in `ctx`, the rotated keys and the values are appended to its next slot (as
    `runtime.extend` would), else they are the only keys. Nothing is written to `ctx` when this
    returns None."""
    call = site.call
    if call is not None and call.S and ctx is not None and (cache := ctx.cache) is not None:
        # a pass's later layers: the slot's buffers as a layer before checked them, with room for
        # the new rows, and the angles and mask this pass set; glue.cpp checks the tensors (None
        # where they do not fit, before anything is written)
        slot, cx = ctx.slot, native.module()
        entry = cache.slots[slot] if slot < len(cache.slots) else None
        note = entry[2] if entry is not None else None
        if note is not None and cx is not None:
            used = entry[1]
            S = used + call.T
            if (
                S == call.S
                and cache.firsts.get(slot, 0) == call.first
                and S <= note[2]
                and note[0] is entry[0][0]
                and note[1] is entry[0][1]
                and note[3] == call.lead
            ):
                out = cx.gqa(call.addr, Q, K, V, note[0], note[1], used, True, site, sinks)
                if out is not None:
                    entry[1] = S
                    ctx.slot = slot + 1
                    return out
    lib = _library()
    if lib is None or not Q.is_cpu:  # a model on another device: its shapes are not prepared here
        return None
    if call is None or call.shapes[0] != Q.shape or call.shapes[1] != K.shape or call.shapes[2] != V.shape:
        call = site.call = _prepared(ctx, Q, K, V, H, H_kv, layout, cap)
    a = call.args
    if a is None or not plain(Q, K, V):
        return None
    if sinks is not None and not (plain(sinks) and sinks.dim() == 1 and sinks.numel() == a.H):
        return None  # sinks tc_gqa cannot read: the steps apply them
    cos, sin = site.angles(a.d)
    if cos is not call.cos:
        half = cos.shape[-1]
        if 2 * half > a.d or cos.shape != (a.T, half) or sin.shape != cos.shape or not plain(cos, sin):
            return None
        call.cos, call.sin = cos, sin
        a.cos, a.sin, a.half = cos.data_ptr(), sin.data_ptr(), half
    cache = ctx.cache if ctx is not None else None
    entry, first = None, 0
    if cache is not None:
        slot = ctx.slot
        entry = cache.slots[slot] if slot < len(cache.slots) else None
        window = getattr(site.mask, "window", None)  # a sliding window: the cache keeps the rows it reaches
        if window is not None:
            first = cache.window_slot(slot, window)
    mask = site.allowed(
        (entry[1] if entry is not None else 0) + a.T, first
    )  # before the cache: it may decline
    if mask is None:
        return None
    if cache is not None:
        # the slot's buffers as this function last checked them (entry[2]: the buffers, their rows
        # and their shape but for the rows) while they still have room: a decoding step's common case
        note = entry[2] if entry is not None else None
        if note is not None and (
            note[0] is not entry[0][0]
            or note[1] is not entry[0][1]
            or note[3] != call.lead
            or entry[1] + a.T > note[2]
        ):
            note = None
        if note is None:
            if entry is not None and not _cache_ready(entry[0], cache.half):
                return None
            (Kc, Vc), used = cache.reserve(slot, ops, (call.like, call.like), a.T)
            cache.slots[slot][2] = (Kc, Vc, Kc.shape[-2], call.lead)
        else:
            Kc, Vc, used = note[0], note[1], entry[1]
        ctx.slot += 1
    else:
        Kc, Vc, used = (
            torch.empty(*call.heads, dtype=torch.float32),
            torch.empty(*call.heads, dtype=torch.float32),
            0,
        )
    a.kv_half = int(cache is not None and cache.half)  # (the buffers reserve made are float16 then)
    if mask is not call.mask:
        if tuple(mask.shape) != (a.T, used + a.T):  # positions for another number of tokens
            raise ValueError(f"the attention mask is {tuple(mask.shape)}, not {(a.T, used + a.T)}")
        call.mask, call.S, call.first = mask, used + a.T, first
        a.allowed = mask.data_ptr()
    cx = native.module()
    if cx is not None:  # the rest in C++: the tensors' addresses, the output, the call
        out = cx.gqa(call.addr, Q, K, V, Kc, Vc, used, False, site, sinks)
    else:
        if Kc is not call.Kc or Vc is not call.Vc:
            for c in (Kc, Vc):  # what tc_gqa writes (glue.cpp checks the same: cache_fits)
                if (*c.shape[:-2], c.shape[-1]) != call.lead or not c.is_contiguous():
                    raise RuntimeError(f"a KV cache buffer of shape {tuple(c.shape)} for rows {call.lead}")
            call.Kc, call.Vc = Kc, Vc
            a.Kc, a.Vc, a.kh, a.vh = Kc.data_ptr(), Vc.data_ptr(), Kc.stride(-3), Vc.stride(-3)
            a.kb, a.vb = a.kh * a.Hkv, a.vh * a.Hkv
        out = torch.empty(*call.width, dtype=torch.float32)
        a.Q, a.K, a.V, a.used, a.out = Q.data_ptr(), K.data_ptr(), V.data_ptr(), used, out.data_ptr()
        a.sinks = sinks.data_ptr() if sinks is not None else None
        code = lib.tc_gqa(call.ref)
        if code != 0:
            raise RuntimeError(f"grouped-query attention kernel failed with code {code}")
    if cache is not None:
        cache.slots[slot][1] = used + a.T
    return out


def gq_attention_rows(Q, K, V, H, H_kv, layout, site, cap, sinks, ctx, ops):
    """gq_attention for a pass whose batch rows are sequences of their own (`ctx.rows`: runtime/rows.py):
    row b's new tokens at its own positions (`site.t` [B, T]) attend to the keys of `ctx.rows.caches[b]`
    alone, through the card's mask at those positions, and are appended there. One C call; None
    (nothing written) where tc_gqa does not take the call."""
    lib, rows = _library(), ctx.rows
    if lib is None or not Q.is_cpu or Q.dim() != 3 or Q.shape[0] != len(rows.caches) or not plain(Q, K, V):
        return None
    if sinks is not None and not (plain(sinks) and sinks.dim() == 1 and sinks.numel() == H):
        return None
    call = site.call
    if call is None or call.shapes != (Q.shape, K.shape, V.shape):
        call = site.call = _prepare(Q, K, V, H, H_kv, layout, cap)
    a = call.args
    if a is None:
        return None
    cos, sin = site.angles(a.d)
    half = cos.shape[-1]
    if 2 * half > a.d or cos.shape != (Q.shape[0] * a.T, half) or not plain(cos, sin):
        return None
    slot, kind = ctx.slot, torch.float16 if rows.half else torch.float32
    if call.like.shape[0] != 1:
        call.like = call.like[:1]  # one row's: [1, H_kv, T, d]
    ready = lambda K, V: K.dtype is kind is V.dtype  # noqa: E731
    made = rows.buffers(slot, getattr(site.mask, "window", None), a.T, call.like, ops, ready, _described)
    allowed = made and rows.allowed(site.masks, site.mask, site.t, *made[:2], torch.from_numpy)
    if allowed is None:
        return None
    out = torch.empty(*call.width, dtype=torch.float32)
    a.Q, a.K, a.V, a.out = Q.data_ptr(), K.data_ptr(), V.data_ptr(), out.data_ptr()
    a.cos, a.sin, a.half, a.allowed = cos.data_ptr(), sin.data_ptr(), half, allowed.ctypes.data
    a.kv_half, a.sinks = int(rows.half), sinks.data_ptr() if sinks is not None else None
    ckernels.gqa_rows(call.ref, a, np.array(made[2], dtype=np.int64))
    ctx.slot = slot + 1
    return out


def _described(K, V) -> tuple:
    """A row's cache buffers as tc_gqa's `rows` table takes them: addresses, head strides in entries."""
    return K.data_ptr(), V.data_ptr(), K.stride(-3), V.stride(-3)
