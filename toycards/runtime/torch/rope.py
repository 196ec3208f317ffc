"""RoPE's angles for the torch target: cos φ and sin φ of φ_i = (t − 1) / (θ^(2(i−1)/d_h) · ρ_i),
kept for the other layers of a pass, and for a decoding run a block of positions at a time.

Owns: `angles(t, θ, ρ, d_h)` and what it keeps (the divisors, the angles of a pass's positions, the
blocks of a decoding run's). Leaves out: rotating by them (runtime.torch.ops.rope_pairs / rope_halves, and
the C kernels that take cos and sin).
"""

from __future__ import annotations

import torch

_ROPE_ANGLES: dict = {}
_ROPE_DIVISORS: dict = {}  # θ^(2(i−1)/d_h) · ρ_i by (θ, ρ's values, d_h, device)
_ROPE_BLOCKS: dict = {}  # by the same key: (first position, cos, sin [ROPE_ROWS, half]), _rope_rows


def angles(t, theta, rho, d_h):
    """cos φ and sin φ of φ_i = (t − 1) / (θ^(2(i−1)/d_h) · ρ_i), kept for the other layers of a pass
    (d_h: the rotated entries, llama.cpp's n_rot).

    The cache key holds ρ's values (`tolist()`): `numpy()` on ρ itself would mark its storage as not
    resizable, and FSDP frees a gathered parameter (ρ is one) by resizing its storage to 0."""
    t = torch.as_tensor(t)
    if torch.is_grad_enabled() or not rho.is_cpu:  # training, or a GPU: no sharing of angles (its
        # key would read the positions and ρ back to the host, a wait for the device at every call)
        i = torch.arange(1, d_h // 2 + 1, dtype=torch.float32, device=rho.device)
        phi = (t.to(torch.float32) - 1) / ((theta ** ((2 * (i - 1)) / d_h)) * rho)
        return torch.cos(phi), torch.sin(phi)
    flat = t.reshape(-1)
    few = tuple(flat.tolist()) if flat.numel() <= 16 else None  # a decoding step's positions
    # ρ's values, not a view: numpy() would pin ρ's own storage
    rope = (float(theta), tuple(rho.detach().reshape(-1).tolist()), d_h, t.device)
    if few and t.dim() == 2 and t.shape[1] == 1 and few == tuple(range(int(few[0]), int(few[0]) + len(few))):
        return _rope_rows(rope, int(few[0]), len(few), rho)
    key = (tuple(t.shape), few or (flat[0].item(), flat[-1].item()), *rope)  # (the ends of many)
    hit = _ROPE_ANGLES.get(key)
    if hit is None:
        phi = (t.to(torch.float32) - 1) / _rope_divisors(rope, rho)
        hit = (torch.cos(phi), torch.sin(phi))
        if len(_ROPE_ANGLES) > 8:
            _ROPE_ANGLES.clear()
        _ROPE_ANGLES[key] = hit
    return hit


def _rope_divisors(rope: tuple, rho):
    """θ^(2(i−1)/d_h) · ρ_i for `rope` = (θ, ρ's values, d_h, device), kept: the same at every position."""
    divisors = _ROPE_DIVISORS.get(rope)
    if divisors is None:
        theta, _, d_h, _ = rope
        i = torch.arange(1, d_h // 2 + 1, dtype=torch.float32, device=rho.device)
        divisors = (theta ** ((2 * (i - 1)) / d_h)) * rho  # (theta ** …: the costly part of the angles)
        if len(_ROPE_DIVISORS) > 8:
            _ROPE_DIVISORS.clear()
        _ROPE_DIVISORS[rope] = divisors
    return divisors


ROPE_ROWS = 256  # positions a decoding run's block of angles covers


def _rope_rows(rope: tuple, first: int, n: int, rho):
    """cos φ, sin φ [n, half] at positions first … first + n − 1: rows of a block of ROPE_ROWS
    positions made once (computed as for any positions), so that a decoding step slices its row
    instead of computing it (four operators, each slow on the caches the weights' stream left cold)."""
    block = _ROPE_BLOCKS.get(rope)
    if block is None or not (block[0] <= first and first + n <= block[0] + ROPE_ROWS):
        t = torch.arange(first, first + max(n, ROPE_ROWS), dtype=torch.float32, device=rho.device).reshape(
            -1, 1
        )
        phi = (t - 1) / _rope_divisors(rope, rho)
        block = _ROPE_BLOCKS[rope] = (first, torch.cos(phi), torch.sin(phi))
        if len(_ROPE_BLOCKS) > 8:
            _ROPE_BLOCKS.pop(next(iter(_ROPE_BLOCKS)))
    at = first - block[0]
    return block[1][at : at + n], block[2][at : at + n]
