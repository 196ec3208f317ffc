"""The small set of array operations that generated NumPy modules call.

Owns: the NumPy meaning of each card operation under the codegen layout (a card matrix
`ℝ^{m×n}` is an array `[…, n, m]`, a vector `ℝ^{n}` is `[…, n]`, a scalar computed from arrays
is `[…, 1]`; leading axes are batch, head or other mapped axes), plus `erf`, which NumPy lacks.
Leaves out: anything torch (runtime/torch/ops.py mirrors these names), caching (context.py).
"""

from __future__ import annotations

import math

import numpy as np

from toycards import engine
from toycards.runtime.context import zero_pages

kernels = engine.backend("numpy")

fast = True  # models/kernel_table.py runs gq_attention and moe below in place of a prelude algorithm's steps
inf = np.inf
exp, log, tanh, sin, cos, sqrt, abs_ = np.exp, np.log, np.tanh, np.sin, np.cos, np.sqrt, np.abs
expm1 = np.expm1


def erf(x):
    """Error function, |error| < 1.2e-7 (Numerical Recipes' erfc Chebyshev fit), float32 in, float32 out.

    >>> round(float(erf(np.float32(0.5))), 6)
    0.5205
    """
    x = np.asarray(x)
    z = np.abs(x).astype(np.float64)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = (
        -z * z
        - 1.26551223
        + t
        * (
            1.00002368
            + t
            * (
                0.37409196
                + t
                * (
                    0.09678418
                    + t
                    * (
                        -0.18628806
                        + t
                        * (
                            0.27886807
                            + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))
                        )
                    )
                )
            )
        )
    )
    r = 1.0 - t * np.exp(poly)
    return np.where(x >= 0, r, -r).astype(x.dtype if x.dtype.kind == "f" else np.float32)  # fmt: skip


def sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def softplus(x):
    return np.logaddexp(0.0, x)


def zeros(*shape):
    """Zeros of `shape` (code order), float32."""
    return np.zeros(shape, dtype=np.float32)


def filled(c, *shape):
    """`c` in every entry of `shape` (code order); an array c (one number per batch entry, […, 1])
    keeps its leading axes."""
    c = np.asarray(c, dtype=np.float32)
    c = c[..., 0] if c.ndim else c
    return np.array(np.broadcast_to(c[(...,) + (None,) * len(shape)], c.shape + tuple(shape)))


def ceil(x):
    return np.ceil(x)


def topk(v, k):
    """`topk(v, k)`: 1-based indices of the k largest entries along the last axis, largest first,
    ties to the lower index.

    >>> topk(np.array([0.5, 2.0, -1.0, 2.0]), 3).tolist()
    [2, 4, 1]
    """
    return np.argsort(-np.asarray(v), axis=-1, kind="stable")[..., :k] + 1


def linear(x, W):
    """W · X for a weight stored as [d_out, d_in] (or a stack [..., d_out, d_in]): x [..., d_in] → [..., d_out].
    A weight kept in its GGUF blocks multiplies by its own kernel, few tokens of a float32 weight by
    the C product (engine/numpy/quant.py); a stack of weights kept in their blocks, each matrix by
    its own kernel (x [..., E, ℓ, d_in]: engine/numpy/stack.py)."""
    if W.__class__ is kernels.QuantWeight or W.__class__ is kernels.QuantStack:
        return W.linear(x)
    if (y := kernels.float_linear(x, W)) is not None:  # few tokens of a float32 matrix: the C product
        return y
    return kernels.blas_product(x, W.T if W.ndim == 2 else np.swapaxes(W, -1, -2))


def scale(c, x):
    """c · x for a number c (`m · Q`): x itself when c is 1 (as runtime.torch.ops.scale).

    >>> x = np.array([1.5, -0.0], dtype=np.float32)
    >>> scale(1.0, x) is x, scale(2, x), scale(1.0, np.arange(2))  # an integer x times 1.0: floats
    (True, array([ 3., -0.], dtype=float32), array([0., 1.]))
    """
    kind = getattr(x, "dtype", np.dtype(bool)).kind  # a bool array (or no array): 1·x is not x
    if c == 1 and (kind in "fc" or (isinstance(c, int) and kind in "iu")):
        return x
    return c * x


def maximum(a, b):
    return np.maximum(a, b)


def minimum(a, b):
    return np.minimum(a, b)


def matmul(a, b):
    return kernels.blas_product(a, b)


def mT(a):
    return np.swapaxes(a, -1, -2)


def sum_last(x):
    return np.sum(x, axis=-1, keepdims=True)


def sum_axis(x, axis):
    """The sum over one axis, which is dropped (a Σ over a map variable's axis)."""
    return np.sum(x, axis=axis)


def copies(value, n, after):
    """n copies of `value` along a new axis with `after` axes after it (a map's members that
    do not depend on its variable, `for i ∈ [n]: c_i ← 1`)."""
    v = (
        np.asarray(value, dtype=np.float32)
        if np.ndim(value) == 0 or np.asarray(value).dtype.kind != "f"
        else np.asarray(value)
    )
    v = np.expand_dims(v, v.ndim - after)
    return np.broadcast_to(v, v.shape[: v.ndim - after - 1] + (n,) + v.shape[v.ndim - after :])


def logical_not(x):
    """¬x of a boolean array, or of a mask's 0/1 number (where `~1` would be −2, true)."""
    return np.logical_not(x)


def flip_last(x):
    """The entries of the last axis in reverse order (`v[n + 1 − i]`)."""
    return np.flip(x, axis=-1)


def max_keep(x, axis):
    """The largest entry along one axis, kept as a size-1 axis (the shift of a stable Σ exp)."""
    return np.max(x, axis=axis, keepdims=True)


def max_last(x):
    return np.max(x, axis=-1, keepdims=True)


def min_last(x):
    return np.min(x, axis=-1, keepdims=True)


def where(cond, a, b):
    return np.where(cond, a, b)


def take(a, index, axis):
    """a's entries at 0-based `index` along `axis`."""
    return np.take(a, np.asarray(index), axis=axis)


def embed(W, ids):
    """Rows of W (stored [N, d]) picked by integer ids [...] → [..., d]."""
    if W.__class__ is kernels.QuantWeight:
        return W.embed(ids)
    return W[np.asarray(ids)]


def index_of(x):
    """Card indices computed as numbers (topk's, ⌈…⌉'s) as integers, to pick with."""
    return np.asarray(x).astype(np.int64)


def split_rows(a, k):
    """Card rows in blocks of k (heads): [..., ℓ, n·k] → [..., n, ℓ, k]; a vector [n·k] → [n, 1, k]."""
    if a.ndim == 1:
        return a.reshape(-1, 1, k)
    *lead, ell, nk = a.shape
    return np.swapaxes(a.reshape(*lead, ell, nk // k, k), -2, -3)


def merge_rows(a):
    """Inverse of split_rows: [..., n, ℓ, k] → [..., ℓ, n·k]."""
    *lead, n, ell, k = a.shape
    return np.swapaxes(a, -2, -3).reshape(*lead, ell, n * k)


def cat_last(parts):
    """Blocks stacked by card rows (the last axis). A number is one entry, and leading axes
    broadcast: `[v_t; b]` stacks a column of a map on a vector that is the same for every t."""
    arrays = [np.asarray(p) for p in parts]
    dtype = np.result_type(*[a.dtype for a in arrays if a.ndim], np.float32)
    arrays = [a.reshape(1).astype(dtype) if a.ndim == 0 else a for a in arrays]
    lead = np.broadcast_shapes(*(a.shape[:-1] for a in arrays))
    return np.concatenate([np.broadcast_to(a, lead + a.shape[-1:]) for a in arrays], axis=-1)


def cat_cols(parts):
    """Matrices side by side (their columns, axis −2, one after the other)."""
    lead = np.broadcast_shapes(*(np.shape(a)[:-2] for a in parts))
    return np.concatenate([np.broadcast_to(a, lead + np.shape(a)[-2:]) for a in parts], axis=-2)


def stack_cols(parts):
    """Vectors side by side, one column each (leading axes broadcast)."""
    lead = np.broadcast_shapes(*(np.shape(a) for a in parts))
    return np.stack([np.broadcast_to(a, lead) for a in parts], axis=-2)


def index_vector(values, ndim_after):
    """A 1-D array of index values shaped to broadcast against `ndim_after` trailing axes."""
    v = np.asarray(values)
    return v.reshape(v.shape + (1,) * ndim_after)


def arange(start, stop):
    return np.arange(start, stop)


def copy(a):
    """A new array with `a`'s entries (entry writes to it leave `a` alone)."""
    return np.array(a, copy=True)


def zeros_for(value, size):
    """A zero array shaped like `value` but with `size` entries on the last axis."""
    value = np.asarray(value)
    return np.zeros(value.shape[:-1] + (size,), dtype=value.dtype if value.dtype.kind == "f" else np.float32)


def zeros_batch(like, rank, *shape):
    """Zeros with `like`'s leading (batch) axes, those before its last `rank`, then `shape` (a state
    at the start of a sequence)."""
    like = np.asarray(like)
    lead = like.shape[: like.ndim - rank]
    return np.zeros(lead + tuple(shape), dtype=like.dtype if like.dtype.kind == "f" else np.float32)


def shift_cols(a, offset, n):
    """Columns offset + 1 … offset + n of a code-layout matrix (axis −2): `X[:, t + offset]` for
    t = 1 … n. Past either end is an error, as the card's index would be. (runtime/torch/ops.py's too: a
    tensor slices alike.)"""
    if offset < 0 or offset + n > a.shape[-2]:
        raise IndexError(f"columns {offset + 1} … {offset + n} of a matrix with {a.shape[-2]} columns")
    return a[..., offset : offset + n, :]


def cumsum(a, axis):
    """Running sums along `axis`: entry i holds the sum of entries 1 … i."""
    return np.cumsum(a, axis=axis)


def put_col(a, k, column, n=None):
    """`a` with column k (0-based, axis −2) set to `column`; for `a` None, zeros with n columns
    shaped after `column` first (a matrix written column by column)."""
    column = np.asarray(column)
    if a is None:
        a = np.zeros(column.shape[:-1] + (n, column.shape[-1]), dtype=np.result_type(column, np.float32))
    a = widen(a, column[..., None, :], 2)
    a[..., k, :] = column
    return a


def widen(a, value, rank):
    """`a` with the leading (batch) axes of `value` that it lacks, both having `rank` axes of their
    own: an array made without them (`zeros(d, ℓ)`) before a value per sequence is written in."""
    value = np.asarray(value)
    lead = np.broadcast_shapes(a.shape[: a.ndim - rank], value.shape[: value.ndim - rank])
    return (
        a if lead == a.shape[: a.ndim - rank] else np.broadcast_to(a, lead + a.shape[a.ndim - rank :]).copy()
    )


def zeros_grid(value, n_cols, n_rows):
    """Zeros for a matrix defined by its entries: `value`'s leading axes, then [n_cols, n_rows]."""
    value = np.asarray(value)
    lead = value.shape[:-2] if value.ndim >= 2 else ()
    return np.zeros(lead + (n_cols, n_rows), dtype=value.dtype if value.dtype.kind == "f" else np.float32)


def run_time(x):
    """A hyperparameter that some call gives a run-time value (an array [..., 1], one number per head
    or batch row) and another a number: the number as such an array, [1]."""
    return x if isinstance(x, np.ndarray) else np.array([x], dtype=np.float32)


def as_float(x):
    return np.asarray(x, dtype=np.float32)


def gq_attention(Q, K, V, H, H_kv, layout, theta, rho, mask, cap, sinks, t, ctx):
    """The prelude's GQAttention as one C call where it applies (engine/numpy/glue.py), else None:
    the card's steps run."""
    return kernels.gq_attention(Q, K, V, H, H_kv, layout, theta, rho, mask, cap, sinks, t, ctx)


def gq_attention_rows(Q, K, V, H, H_kv, layout, theta, rho, mask, cap, sinks, ctx):
    """gq_attention over batch rows at positions of their own (runtime/rows.py), or None."""
    return kernels.gq_attention_rows(Q, K, V, H, H_kv, layout, theta, rho, mask, cap, sinks, ctx)


def moe(X, W_r, W_gate, W_up, W_down, k, norm):
    """The prelude's MoE: `moe_biased` with softmax gating, no selection bias and no scale."""
    return moe_biased(X, W_r, None, W_gate, W_up, W_down, k, norm, "softmax")


# llama.cpp's build_moe_ffn divides renormalised weights by their sum clamped to F16's smallest normal
MOE_WEIGHTS_SUM_MIN = 6.103515625e-5


def moe_biased(X, W_r, b, W_gate, W_up, W_down, k, norm, gating, s=1, n_g=1, k_g=1, w_b=0):
    """The prelude's MoE_biased in one kernel, tokens grouped per expert (runtime.torch.moe.moe_biased
    says how).

    X [..., ℓ, d_e]; W_r [E, d_e]; b [E] or None; W_gate, W_up [E, d_ff, d_e]; W_down [E, d_e, d_ff]
    (float32 arrays, or stacks kept in their blocks: each expert's products by its kernels)
    → [..., ℓ, d_e].
    """
    x = X.reshape(-1, X.shape[-1])  # (N, d_e)
    z = kernels.blas_product(x, W_r.T)  # (N, E) router logits
    if gating == "sigmoid":
        P = sigmoid(z)
    else:
        P = np.exp(z - z.max(axis=-1, keepdims=True))
        P = P / P.sum(axis=-1, keepdims=True)
    B = P if b is None else P + b  # (N, E) selection scores
    if n_g > 1:
        B = _within_groups(B, n_g, k_g)
    chosen = topk(B, k) - 1  # (N, k) by the biased probabilities
    G = np.take_along_axis(P, chosen, axis=-1)  # (N, k) their unbiased probabilities
    if norm == "renormalise":
        G = G / np.maximum(G.sum(axis=-1, keepdims=True), np.float32(MOE_WEIGHTS_SUM_MIN))
    if s not in (0, 1):  # llama.cpp scales by neither
        G = G * np.float32(s)
    flat = chosen.reshape(-1)
    order = np.argsort(flat, kind="stable")  # grouped by expert
    tokens, weights = order // k, G.reshape(-1)[order]
    counts = np.bincount(flat, minlength=W_r.shape[0])
    grouped = np.empty((flat.shape[0], x.shape[-1]), dtype=x.dtype)  # (N·k, d_e), by expert
    prompt = x.shape[0] > engine.FEW_TOKENS  # each expert's products as the pass's, however few its tokens
    start = 0
    for e, n in enumerate(counts.tolist()):
        if n:
            xs = x[tokens[start : start + n]]  # (n, d_e)
            w = weights[start : start + n, None]  # (n, 1); w_b: they weigh the input (weight_before_ffn)
            xs = xs * w if w_b else xs
            g = _product(xs, W_gate[e], prompt)
            h = g / (1 + np.exp(-g)) * _product(xs, W_up[e], prompt)  # (n, d_ff)
            y = _product(h, W_down[e], prompt)  # (n, d_e)
            grouped[start : start + n] = y if w_b else y * w
            start += n
    chosen_out = np.empty_like(grouped)
    chosen_out[order] = grouped  # back to (token, choice) order
    return chosen_out.reshape(*X.shape[:-1], k, X.shape[-1]).sum(axis=-2)


def _product(x, W, prompt):
    """x [n, k] · Wᵀ for one expert's W [m, k]: a matrix of a stack kept in its blocks by its kernel
    (`QuantWeight.linear`, as a prompt's product where `prompt`), a float32 one by NumPy's BLAS."""
    return W.linear(x, prompt) if W.__class__ is kernels.QuantWeight else kernels.blas_product(x, W.T)


def _within_groups(B, n_g, k_g):
    """Selection scores B (N, E) with the experts outside each token's k_g best groups of E / n_g
    (a group's score: its two best) moved below every kept one, as MoE_biased's steps move them.

    >>> _within_groups(np.array([[0.1, 0.2, 0.9, 0.3]]), 2, 1).round(6).tolist()  # group 2 kept
    [[-1.7, -1.6, 0.9, 0.3]]
    """
    N, E = B.shape
    groups = np.sort(B.reshape(N, n_g, E // n_g), axis=-1)[..., -2:].sum(axis=-1)  # (N, n_g)
    kept = np.zeros((N, n_g), dtype=B.dtype)
    np.put_along_axis(kept, topk(groups, k_g) - 1, 1, axis=-1)
    spread = B.max(axis=-1, keepdims=True) - B.min(axis=-1, keepdims=True) + 1  # (N, 1)
    return B - spread * (1 - np.repeat(kept, E // n_g, axis=-1))


def zeros_rows(like, n, half=False):
    """Zeros shaped like `like` but with n rows (axis −2), laid out row by row, of like's dtype, or
    float16 when `half` and like is floating (a cache buffer: memory only where written,
    context.zero_pages)."""
    shape = like.shape[:-2] + (n, like.shape[-1])
    dtype = np.dtype(np.float16) if half and np.issubdtype(like.dtype, np.floating) else like.dtype
    pages = zero_pages(math.prod(shape) * dtype.itemsize)
    if pages is None:
        return np.zeros(shape, dtype=dtype)
    return np.frombuffer(pages, dtype=dtype).reshape(shape)


def cast_like(x, like):
    """x in like's dtype (x itself when it is already)."""
    return x if x.dtype == like.dtype else x.astype(like.dtype)
