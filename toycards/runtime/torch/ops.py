"""The small set of tensor operations that generated torch modules call (mirrors runtime/numpy/ops.py).

Owns: the torch meaning of each card operation under the codegen layout (a card matrix `ℝ^{m×n}` is
a tensor `[…, n, m]`, a vector `[…, n]`, an array scalar `[…, 1]`), and where a kernel applies, the
engine's (`kernels`). Leaves out: NumPy (runtime/numpy/ops.py), caching (context.py).
"""

from __future__ import annotations

import functools
import math
import sys

import torch
import torch.nn.functional as F

from toycards import engine
from toycards.runtime.context import gqa_site, zero_pages
from toycards.runtime.numpy.ops import shift_cols  # noqa: F401 - slicing alike on both targets
from toycards.runtime.torch import rope
from toycards.runtime.torch.moe import moe, moe_biased  # noqa: F401 - the prelude's MoE kernels

kernels = engine.backend("torch")

inf = math.inf
fast = True  # models/kernel_table.py runs the single kernels below in place of a prelude algorithm's steps
exp, log, tanh, sin, cos, sqrt = torch.exp, torch.log, torch.tanh, torch.sin, torch.cos, torch.sqrt
abs_, erf, sigmoid, ceil = torch.abs, torch.erf, torch.sigmoid, torch.ceil
expm1 = torch.expm1
softplus = F.softplus  # (x itself past x = 20, where log(1 + e^x) rounds to x in float32)


zeros = functools.partial(torch.zeros, dtype=torch.float32)  # zeros(*shape), shape in code order


def filled(c, *shape):
    """`c` in every entry of `shape`; a tensor c ([…, 1], a number per batch entry) keeps its axes."""
    c = c if torch.is_tensor(c) else torch.tensor(float(c))
    c = c[..., 0] if c.dim() else c
    return c[(...,) + (None,) * len(shape)].expand(*c.shape, *shape).clone()


def topk(v, k):
    """`topk(v, k)`: 1-based indices of the k largest entries along the last axis, largest first,
    ties to the lower index (a stable sort: torch.topk leaves the order of ties open)."""
    indices = torch.sort(v, dim=-1, descending=True, stable=True).indices[..., :k] + 1
    return indices.to(v.dtype)  # numbers, as the card reads them (ops.index_of makes them integers to pick)


def linear(x, W):
    """W · X for a weight stored as [d_out, d_in] (or a stack [..., d_out, d_in]): x [..., d_in] → [..., d_out].
    A weight kept in its GGUF blocks multiplies by its own kernel (engine/torch/quant.py), a stack of
    them each matrix by its own (x [..., E, ℓ, d_in]: engine/torch/stack.py)."""
    if (cx := engine.native()) is not None and (y := cx.linear(x, W)) is not None:
        return y  # few tokens, and a weight with a kernel plan: the product below, from C++ (engine/torch/native.py)
    if W.__class__ is kernels.QuantWeight or W.__class__ is kernels.QuantStack:
        return W.linear(x)
    if W.dim() != 2:
        return x @ W.transpose(-1, -2)
    y = kernels.float_linear(x, W)  # few tokens of a float32 weight: the C kernel reading it in place
    return kernels.float_gemm(x, W) if y is None else y


def swiglu(x, W_gate, W_up, W_down):
    """The prelude's SwiGLU with its glue in C, or None (the card's steps then run): one C call for
    few tokens (kernels.swiglu); else the three products as `linear` makes them for the steps,
    SiLU(gate) ⊙ up in place by kernels.silu_mul."""
    if (cx := engine.native()) is not None and (y := cx.swiglu(x, W_gate, W_up, W_down)) is not None:
        return y  # kernels.swiglu's call, from C++ (engine/torch/native.py)
    y = kernels.swiglu(x, W_gate, W_up, W_down)
    if y is not None or not kernels.available() or not kernels.plain(x):
        return y
    if not all(W.__class__ is kernels.QuantWeight or kernels.plain(W) for W in (W_gate, W_up, W_down)):
        return None  # a product of x by these might not be a plain float32 tensor
    return linear(kernels.silu_mul(linear(x, W_gate), linear(x, W_up)), W_down)


def linears(x, *Ws):
    """W_1 · X, W_2 · X, … for consecutive card steps multiplying one X (codegen/steps.py merges
    them): one C call for few tokens where every weight has a kernel plan, else one product each."""
    if (cx := engine.native()) is not None and (ys := cx.linears(x, *Ws)) is not None:
        return ys  # kernels.linears' call, from C++ (engine/torch/native.py)
    ys = kernels.linears(x, Ws)
    return ys if ys is not None else tuple(linear(x, W) for W in Ws)


def scale(c, x):
    """c · x for a number c (`m · Q`): x itself when c is 1, the same numbers (1·x = x exactly for
    every float, and an integer x keeps its type under an integer 1; a bool x does not, 1·x is an
    integer tensor), without a new tensor.

    >>> x = torch.tensor([1.5, -0.0])
    >>> scale(1.0, x) is x, scale(2, x), scale(1.0, torch.arange(2))
    (True, tensor([3., -0.]), tensor([0., 1.]))
    """
    if c == 1 and torch.is_tensor(x) and x.dtype is not torch.bool:
        if isinstance(c, int) or x.dtype.is_floating_point:
            return x
    return c * x


def maximum(a, b):
    if not torch.is_tensor(b):
        return torch.clamp_min(a, b)
    if not torch.is_tensor(a):
        return torch.clamp_min(b, a)
    return torch.maximum(a, b)


def minimum(a, b):
    if not torch.is_tensor(b):
        return torch.clamp_max(a, b)
    if not torch.is_tensor(a):
        return torch.clamp_max(b, a)
    return torch.minimum(a, b)


def matmul(a, b):
    return a @ b


def mT(a):
    return a.transpose(-1, -2)


def sum_last(x):
    return x.sum(-1, keepdim=True)


def sum_axis(x, axis):
    """The sum over one axis, which is dropped (a Σ over a map variable's axis)."""
    return torch.sum(x, dim=axis)


def copies(value, n, after):
    """n copies of `value` along a new axis with `after` axes after it (a map's members that
    do not depend on its variable, `for i ∈ [n]: c_i ← 1`)."""
    v = (
        value
        if torch.is_tensor(value) and value.is_floating_point()
        else torch.as_tensor(value, dtype=torch.float32)
    )
    v = v.unsqueeze(v.dim() - after)
    return v.expand(*v.shape[: v.dim() - after - 1], n, *v.shape[v.dim() - after :])


def logical_not(x):
    """¬x of a boolean array, or of a mask's 0/1 number (where `~1` would be −2, true)."""
    return torch.logical_not(x if torch.is_tensor(x) else torch.as_tensor(x))


def flip_last(x):
    """The entries of the last axis in reverse order (`v[n + 1 − i]`)."""
    return torch.flip(x, dims=(-1,))


def max_keep(x, axis):
    """The largest entry along one axis, kept as a size-1 axis (the shift of a stable Σ exp)."""
    return x.amax(axis, keepdim=True)


def max_last(x):
    return x.amax(-1, keepdim=True)


def min_last(x):
    return x.amin(-1, keepdim=True)


def where(cond, a, b):
    if not torch.is_tensor(cond) or cond.dtype != torch.bool:
        cond = torch.as_tensor(cond).bool()
    if not torch.is_tensor(a):
        a = torch.as_tensor(a, dtype=b.dtype if torch.is_tensor(b) else torch.float32)
    if not torch.is_tensor(b):
        b = torch.as_tensor(b, dtype=a.dtype)
    return torch.where(cond, a, b)


@functools.lru_cache(maxsize=256)
def _index_tensor(index: tuple[int, ...], device: torch.device) -> torch.Tensor:
    with torch.inference_mode(False):  # a normal tensor, usable when training too
        return torch.tensor(index, dtype=torch.long, device=device)


def take(a, index, axis):
    """a's entries at 0-based `index` (a list, or a 1-D tensor of positions) along `axis`."""
    if torch.is_tensor(index):
        idx = index.to(dtype=torch.long, device=a.device).reshape(-1)
    else:
        idx = _index_tensor(tuple(int(i) for i in index), a.device)
    return torch.index_select(a, axis % a.dim(), idx)


def embed(W, ids):
    if (cx := engine.native()) is not None and (y := cx.embed(W, ids)) is not None:
        return y  # the rows of a weight with a kernel plan, or of a float32 table, from C++
    if W.__class__ is kernels.QuantWeight:
        return W.embed(ids)
    return F.embedding(torch.as_tensor(ids, dtype=torch.long, device=W.device), W)


def index_of(x):
    """Card indices computed as numbers (topk's, ⌈…⌉'s) as integers, to pick with."""
    return torch.as_tensor(x).long()


def split_rows(a, k):
    if a.dim() == 1:
        return a.reshape(-1, 1, k)
    *lead, ell, nk = a.shape
    return a.reshape(*lead, ell, nk // k, k).transpose(-2, -3)


def merge_rows(a):
    *lead, n, ell, k = a.shape
    return a.transpose(-2, -3).reshape(*lead, ell, n * k)


def cat_last(parts):
    """Blocks stacked by card rows (the last axis). A number is one entry, and leading axes
    broadcast: `[v_t; b]` stacks a column of a map on a vector that is the same for every t."""
    like = next((p for p in parts if torch.is_tensor(p) and p.dim()), torch.zeros(1))
    tensors = [p if torch.is_tensor(p) else like.new_tensor(float(p)) for p in parts]
    tensors = [t.reshape(1).to(like.dtype) if t.dim() == 0 else t for t in tensors]
    lead = torch.broadcast_shapes(*(tuple(t.shape[:-1]) for t in tensors))
    return torch.cat([t.expand(*lead, t.shape[-1]) for t in tensors], dim=-1)


def cat_cols(parts):
    """Matrices side by side (their columns, axis −2, one after the other)."""
    lead = torch.broadcast_shapes(*(tuple(a.shape[:-2]) for a in parts))
    return torch.cat([a.expand(*lead, *a.shape[-2:]) for a in parts], dim=-2)


def stack_cols(parts):
    """Vectors side by side, one column each (leading axes broadcast)."""
    lead = torch.broadcast_shapes(*(tuple(a.shape) for a in parts))
    return torch.stack([a.expand(*lead) for a in parts], dim=-2)


def index_vector(values, ndim_after):
    v = torch.as_tensor(values)
    return v.reshape(tuple(v.shape) + (1,) * ndim_after)


def arange(start, stop):
    return torch.arange(start, stop)


copy = torch.clone  # a new tensor with a's entries (entry writes to it leave a alone)


def zeros_for(value, size):
    value = value if torch.is_tensor(value) else torch.as_tensor(value, dtype=torch.float32)
    return value.new_zeros(tuple(value.shape[:-1]) + (size,))


def zeros_batch(like, rank, *shape):
    """Zeros with `like`'s leading (batch) axes, those before its last `rank`, then `shape`."""
    dtype = like.dtype if like.is_floating_point() else torch.float32
    return like.new_zeros(tuple(like.shape[: like.dim() - rank]) + tuple(shape), dtype=dtype)


cumsum = torch.cumsum  # cumsum(a, axis): entry i, the sum of entries 1 … i along `axis`


def put_col(a, k, column, n=None):
    """`a` with column k (0-based, axis −2) set to `column` (`a` None: zeros with n columns first);
    a new tensor where autograd follows either, so that no value a gradient needs is overwritten."""
    if a is None:
        a = column.new_zeros((*column.shape[:-1], n, column.shape[-1]))
    a = widen(a, column[..., None, :], 2)
    if torch.is_grad_enabled() and (a.requires_grad or column.requires_grad):
        index = torch.zeros(a.shape[-2], 1, dtype=torch.bool, device=a.device)
        index[k] = True
        return torch.where(index, column.unsqueeze(-2).to(a.dtype), a)
    a[..., k, :] = column
    return a


def widen(a, value, rank):
    """`a` with the leading axes of `value` that it lacks (both with `rank` axes of their own)."""
    lead = torch.broadcast_shapes(a.shape[: a.dim() - rank], value.shape[: value.dim() - rank])
    return a if lead == a.shape[: a.dim() - rank] else a.expand(*lead, *a.shape[a.dim() - rank :]).clone()


def zeros_grid(value, n_cols, n_rows):
    """Zeros for a matrix defined by its entries: `value`'s leading axes, then [n_cols, n_rows]."""
    value = value if torch.is_tensor(value) else torch.as_tensor(value, dtype=torch.float32)
    lead = tuple(value.shape[:-2]) if value.dim() >= 2 else ()
    return value.new_zeros(
        lead + (n_cols, n_rows), dtype=value.dtype if value.is_floating_point() else torch.float32
    )


def run_time(x):
    """A hyperparameter that some call gives a run-time value (an array [..., 1], one number per head
    or batch row) and another a number: the number as such an array, [1]."""
    return x if torch.is_tensor(x) else torch.tensor([float(x)])


def as_float(x):
    return torch.as_tensor(x, dtype=torch.float32)


# ── single kernels for prelude algorithms (each tied to the card's steps by tests/engine/test_kernels.py)
def softmax(x):
    return torch.softmax(x, dim=-1)


def layer_norm(e, gamma, beta, epsilon):
    """LayerNorm over the last axis; γ and β of more axes (one row per head, `[H, 1, d]`, from a
    card's `Γ[:, h]` in a map over heads) broadcast after normalising, which F.layer_norm cannot."""
    d = (e.shape[-1],)
    if gamma.dim() <= 1 and beta.dim() <= 1:
        return F.layer_norm(e, d, gamma, beta, epsilon)
    return F.layer_norm(e, d, None, None, epsilon) * gamma + beta


def rms_norm(e, gamma, epsilon):
    """RMSNorm over the last axis; γ of more axes broadcasts, as in layer_norm."""
    if (cx := engine.native()) is not None and (y := cx.rms_norm(e, gamma, epsilon)) is not None:
        return y  # kernels.rms_norm's call, from C++ (engine/torch/native.py)
    y = kernels.rms_norm(e, gamma, epsilon)  # few tokens and one row of γ: the C version
    if y is not None:
        return y
    d = (e.shape[-1],)
    return F.rms_norm(e, d, gamma, epsilon) if gamma.dim() <= 1 else F.rms_norm(e, d, None, epsilon) * gamma


def silu(x):
    return F.silu(x)


def gelu(x):
    return F.gelu(x)


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def attention(Q, K, V, mask, cap, sink, t_z, t_x, kv_index=None):
    """Scaled dot-product attention with the card's mask evaluated at key positions t_z, query positions t_x.

    `kv_index[h]` is the key/value head that query head h reads (grouped-query attention); when
    the query heads read consecutive groups of equal size, SDPA does the grouping without copies.
    `cap` > 0 soft-caps the scores (cap · tanh(s / cap)) before the mask, which SDPA cannot do; a
    `sink` other than −∞ (one logit per query head, shaped to broadcast against [..., H, T]) joins
    each query's softmax without a value, which SDPA cannot do either.
    """
    allowed = _allowed(mask, t_z, t_x)
    sunk = _sunk(sink)
    if cap > 0 or sunk:  # soft-capped scores or a sink: neither SDPA nor the C version has them
        if kv_index is not None:
            K, V = take(K, kv_index, -3), take(V, kv_index, -3)
        S = torch.matmul(Q, K.mT) / math.sqrt(Q.shape[-1])
        S = cap * torch.tanh(S / cap) if cap > 0 else S
        S = S.masked_fill(~allowed, -math.inf)
        Y = torch.matmul(torch.softmax(S, dim=-1), V)
        if sunk:  # the keys' share of softmax([S; σ]): sigmoid(log Σ exp S − σ), per query
            lse = torch.logsumexp(S, dim=-1)  # [..., T]
            share = torch.sigmoid(lse - torch.as_tensor(sink, dtype=S.dtype))
            Y = Y * share[..., None]
        return Y
    y = kernels.attention(Q, K, V, allowed, kv_index)  # few queries: the C version
    if y is not None:
        return y
    if kv_index is None:
        return F.scaled_dot_product_attention(Q, K, V, attn_mask=allowed)
    n_q, n_kv = len(kv_index), K.shape[-3]
    if n_q % n_kv == 0 and list(kv_index) == [h // (n_q // n_kv) for h in range(n_q)]:
        return F.scaled_dot_product_attention(Q, K, V, attn_mask=allowed, enable_gqa=True)
    return F.scaled_dot_product_attention(Q, take(K, kv_index, -3), take(V, kv_index, -3), attn_mask=allowed)


def _sunk(sink) -> bool:
    """Whether a sink takes part: a number other than −∞, or a tensor with a finite entry (sinks left
    out are −∞ in every entry); a tensor on another device counts as one without reading it, which
    would wait for the device."""
    if not torch.is_tensor(sink):
        return sink != -math.inf
    return not sink.is_cpu or bool(torch.isfinite(sink).any())


def _allowed(mask, t_z, t_x):
    """The card's mask at key positions t_z [S] and query positions t_x [T], as bool [..., T, S]
    (a mask with axes of its own, a padding mask per batch row say, keeps them: the scores
    broadcast against it)."""
    t_z = torch.as_tensor(t_z, dtype=torch.float32).reshape(1, -1)
    t_x = torch.as_tensor(t_x, dtype=torch.float32).reshape(-1, 1)
    m = torch.as_tensor(mask(t_z, t_x)).bool()
    # (not torch.broadcast_shapes: its first call imports hundreds of modules, a pause on a first pass)
    return m.expand(*m.shape[:-2], t_x.shape[0], t_z.shape[1])


def gq_attention(Q, K, V, H, H_kv, layout, theta, rho, mask, cap, sinks, t, ctx):
    """The prelude's GQAttention (RoPE on each head of Q and K, the KV cache of `ctx` when given,
    attention of each query head with key/value head ⌈h·H_kv/H⌉, its sink logit `sinks[h]` in the
    softmax; `sinks` None: none) as one C kernel for few new tokens at positions t; None where that
    does not apply, and the card's steps run instead.

    The layers of one pass share a `_GQASite` (in `ctx.memo`) when their RoPE (ρ, positions, θ,
    layout), hyperparameters and mask are the same (context.gqa_site says when a mask is)."""
    site = gqa_site(
        ctx,
        "torch",
        mask,
        rho,
        t,
        (theta, layout, H, H_kv, cap),
        lambda: _GQASite(rho, t, theta, layout, mask),
    )
    return kernels.gq_attention(Q, K, V, H, H_kv, layout, site, cap, sinks, ctx, sys.modules[__name__])


def gq_attention_rows(Q, K, V, H, H_kv, layout, theta, rho, mask, cap, sinks, ctx):
    """gq_attention for a pass whose batch rows are sequences at positions of their own, each with
    its own cache (`ctx.rows`, runtime/rows.py); None where the kernel does not take the call."""
    make = lambda: _GQASite(rho, ctx.pos, theta, layout, mask)  # noqa: E731
    site = gqa_site(ctx, "torch rows", mask, rho, ctx.pos, (theta, layout, H, H_kv, cap), make)
    return kernels.gq_attention_rows(Q, K, V, H, H_kv, layout, site, cap, sinks, ctx, sys.modules[__name__])


class _GQASite:
    """What GQAttention calls of one pass share (see gq_attention): RoPE's angles at the pass's
    positions, the mask per key count, and engine/torch/glue.py's prepared C call (`call`)."""

    __slots__ = ("rho", "t", "theta", "layout", "mask", "cos", "sin", "masks", "call")

    def __init__(self, rho, t, theta, layout, mask):
        self.rho, self.t, self.theta, self.layout, self.mask = rho, t, theta, layout, mask
        self.cos = self.sin = self.call = None
        self.masks: dict = {}

    def angles(self, d_h):
        """cos, sin [T, half] of the rotation at the pass's positions (half = len(ρ); none: half 0)."""
        if self.cos is None:
            if self.layout == "none":
                self.cos = self.sin = torch.empty(len(self.t), 0)
            else:
                t = torch.as_tensor(self.t, dtype=torch.float32).reshape(-1, 1)  # as the steps' t ∈ [ℓ]
                self.cos, self.sin = rope.angles(t, self.theta, self.rho, 2 * self.rho.shape[-1])
        return self.cos, self.sin

    def allowed(self, S, first=0):
        """The card's mask over S keys, those at positions first + 1 … first + S (a sliding window's
        cache slot holds no earlier ones), at the pass's query positions: bool [T, S], or None where
        it is not one mask for every head and batch row (it has axes of its own)."""
        if (S, first) not in self.masks:
            m = _allowed(self.mask, arange(first + 1, first + S + 1), self.t)
            self.masks[S, first] = m.contiguous() if m.dim() == 2 else None
        return self.masks[S, first]


def rope_pairs(x, t, theta, rho):
    """RoPE rotating entries (2i−1, 2i) of the first d_r = 2·len(ρ) entries of each head vector;
    the rest pass unchanged (partial rotary)."""
    d_r = 2 * rho.shape[-1]
    cos, sin = rope.angles(t, theta, rho, d_r)
    y = kernels.rope(x, cos, sin, pairs=True)  # few tokens: the C version
    if y is not None:
        return y
    x1, x2 = x[..., 0:d_r:2], x[..., 1:d_r:2]
    rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    return rotated if d_r == x.shape[-1] else torch.cat((rotated, x[..., d_r:]), dim=-1)


def rope_halves(x, t, theta, rho):
    """RoPE rotating entry i with entry i + d_r/2 of the first d_r = 2·len(ρ) entries of each head
    vector; the rest pass unchanged (partial rotary)."""
    half = rho.shape[-1]
    cos, sin = rope.angles(t, theta, rho, 2 * half)
    y = kernels.rope(x, cos, sin, pairs=False)  # few tokens: the C version
    if y is not None:
        return y
    x1, x2 = x[..., :half], x[..., half : 2 * half]
    rotated = (x1 * cos - x2 * sin, x1 * sin + x2 * cos)
    rest = () if 2 * half == x.shape[-1] else (x[..., 2 * half :],)
    return torch.cat((*rotated, *rest), dim=-1)


def zeros_rows(like, n, half=False):
    """Zeros like `like` with n rows (axis −2), float16 if `half` (a cache buffer: zero_pages on the CPU)."""
    shape = (*like.shape[:-2], n, like.shape[-1])
    dtype = torch.float16 if half and like.is_floating_point() else like.dtype
    pages = zero_pages(math.prod(shape) * dtype.itemsize) if like.is_cpu else None
    if pages is None:
        return like.new_zeros(shape, dtype=dtype)
    return torch.frombuffer(pages, dtype=dtype).view(shape)


def cast_like(x, like):  # x in like's dtype (x itself when it is already)
    return x if x.dtype == like.dtype else x.to(like.dtype)
