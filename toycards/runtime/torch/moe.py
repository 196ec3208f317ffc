"""The prelude's mixtures of experts as single kernels for the torch target (`ops.moe`,
`ops.moe_biased`, which runtime.torch.ops exports): routing as llama.cpp's build_moe_ffn routes
(gates, selection bias, groups of experts, renormalising with its clamp, scale), then each chosen
expert once on the tokens that chose it.

Owns: `moe`, `moe_biased` and the group limit. Leaves out: the card's own steps (the prelude's
MoE_biased, which tests/engine/test_kernels.py ties these to), the NumPy target's kernels
(runtime/numpy/ops.py), the builtin `topk` (runtime.torch.ops, which imports this module: `_top`
follows its rule).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from toycards import engine
from toycards.runtime.numpy.ops import MOE_WEIGHTS_SUM_MIN

kernels = engine.backend("torch")


def moe(X, W_r, W_gate, W_up, W_down, k, norm):
    """The prelude's MoE: `moe_biased` with softmax gating, no selection bias and no scale."""
    return moe_biased(X, W_r, None, W_gate, W_up, W_down, k, norm, "softmax")


def moe_biased(X, W_r, b, W_gate, W_up, W_down, k, norm, gating, s=1, n_g=1, k_g=1, w_b=0):
    """The prelude's MoE_biased in one kernel, tokens grouped per expert: the router's softmax or
    sigmoid (`gating`), the top k of those plus the selection bias b (None: none; ties to the lower
    expert, as `topk`) within each token's k_g best groups of experts (n_g > 1), the chosen unbiased
    ones (divided by their sum, at least MOE_WEIGHTS_SUM_MIN, when `norm` is "renormalise") times s
    (0 or 1: unscaled), then each expert that any token chose runs once on its tokens, its output
    weighted (w_b = 0) or its input (w_b = 1: llama.cpp's weight_before_ffn). The card's
    steps run every expert on every token, weighted 0 unless chosen (tests/engine/test_kernels.py
    ties the two).
    X [..., ℓ, d_e]; W_r [E, d_e]; b [E]; W_gate, W_up [E, d_ff, d_e]; W_down [E, d_e, d_ff] (float32
    tensors, or stacks kept in their blocks: each expert's products by its kernels) → [..., ℓ, d_e].
    """
    x = X.reshape(-1, X.shape[-1])  # (N, d_e): every token of the batch
    z = F.linear(x, W_r)  # (N, E) router logits
    P = torch.sigmoid(z) if gating == "sigmoid" else torch.softmax(z, dim=-1)  # (N, E) probabilities
    B = P if b is None else P + b  # (N, E) selection scores
    if n_g > 1:
        B = _within_groups(B, n_g, k_g)
    chosen = _top(B, k)  # (N, k) experts, highest first
    G = P.gather(-1, chosen)  # (N, k) their unbiased probabilities
    if norm == "renormalise":
        G = G / G.sum(dim=-1, keepdim=True).clamp_min(MOE_WEIGHTS_SUM_MIN)
    if s not in (0, 1):  # llama.cpp scales by neither
        G = G * s
    flat = chosen.reshape(-1)  # (N·k,) one entry per (token, choice)
    order = torch.argsort(flat, stable=True)  # grouped by expert
    tokens, weights = order // k, G.reshape(-1)[order]
    counts = torch.bincount(flat, minlength=W_r.shape[0]).tolist()
    grouped = x.new_empty(flat.shape[0], x.shape[-1])  # (N·k, d_e) the experts' outputs, by expert
    prompt = x.shape[0] > engine.FEW_TOKENS  # each expert's products as the pass's, however few its tokens
    start = 0
    for e, n in enumerate(counts):
        if n:
            xs = x[tokens[start : start + n]]  # (n, d_e) the tokens that chose expert e
            w = weights[start : start + n, None]  # (n, 1) their weights
            xs = xs * w if w_b else xs
            y = _expert(xs, W_gate[e], W_up[e], W_down[e], prompt)  # (n, d_e)
            grouped[start : start + n] = y if w_b else y * w
            start += n
    # back to (token, choice) order and summed over the choices: a permutation, not index_add_
    # (torch's CPU index_add_/scatter_add_ are slow on one token's row)
    chosen_out = torch.empty_like(grouped)
    chosen_out[order] = grouped
    return chosen_out.reshape(*X.shape[:-1], k, X.shape[-1]).sum(dim=-2)


def _expert(xs, W_gate, W_up, W_down, prompt):
    """One expert's SwiGLU on its tokens, W_down · (SiLU(W_gate · x) ⊙ (W_up · x)) for xs (n, d_e) →
    (n, d_e): the matrices of stacks kept in their blocks by the kernels (decoding: one C call,
    kernels.swiglu; a prompt, `prompt`: each product as a prompt's, `QuantWeight.linear`), float32
    ones by torch."""
    kept = W_gate.__class__ is kernels.QuantWeight
    if kept and not prompt and (y := kernels.swiglu(xs, W_gate, W_up, W_down)) is not None:
        return y
    h = F.silu(_product(xs, W_gate, prompt)) * _product(xs, W_up, prompt)  # (n, d_ff)
    return _product(h, W_down, prompt)


def _product(x, W, prompt):
    """x [n, k] · Wᵀ for one expert's W [m, k]: by its kernel where it is kept in its blocks."""
    return W.linear(x, prompt) if W.__class__ is kernels.QuantWeight else F.linear(x, W)


def _within_groups(B, n_g, k_g):
    """Selection scores B (N, E) with the experts outside each token's k_g best groups of E / n_g
    (a group's score: its two best) moved below every kept one, as MoE_biased's steps move them."""
    N, E = B.shape
    groups = B.reshape(N, n_g, E // n_g).topk(2, dim=-1).values.sum(dim=-1)  # (N, n_g)
    kept = torch.zeros_like(groups).scatter_(-1, _top(groups, k_g), 1.0)
    spread = B.amax(dim=-1, keepdim=True) - B.amin(dim=-1, keepdim=True) + 1  # (N, 1)
    return B - spread * (1 - kept.repeat_interleave(E // n_g, dim=-1))


def _top(v, k):
    """0-based indices of the k largest entries along the last axis, largest first, ties to the
    lower index: `ops.topk`'s rule (tests/engine/test_kernels.py, test_moe_kernel_breaks_ties_like_topk)."""
    return torch.sort(v, dim=-1, descending=True, stable=True).indices[..., :k]
