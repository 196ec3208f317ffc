"""GQAttention over passes that share one KV cache, with a target's kernels on or off: what
tests/engine/test_kernels.py (torch) and tests/engine/test_kernels_numpy.py hold each target's kernel to."""

from __future__ import annotations

from toycards.runtime.context import Context, KVCache

SIZES = (37, 1, 3, 19, 1)  # a prompt (three runs of 16 queries and a part), decoding steps, a second prompt


def window(w: int):
    """A sliding window whose width the mask function reads from its closure."""
    return lambda t_z, t_x: (t_z <= t_x) & (t_x - t_z < w)


def run_passes(
    gqa, ops, inputs, H, H_kv, layout, rho, mask, cap, fast: bool, kv_type: str = "f32", sinks=None
) -> list:
    """A generated module's `GQAttention` on each (Q, K, V) of `inputs` in turn over one cache (of
    `kv_type`), with `ops.fast` set to `fast` (and back on after); `sinks` its σ (None: left out)."""
    layer = (H, H_kv, layout, 1e4, rho, mask, cap, sinks)
    return run_layers(gqa, ops, [[qkv] for qkv in inputs], [layer], fast, kv_type)


def run_layers(gqa, ops, inputs, layers, fast: bool, kv_type: str = "f32") -> list:
    """Passes over one cache (of `kv_type`) of several GQAttention layers each: `inputs[p][i]` is the
    (Q, K, V) of layer i in pass p, `layers[i]` its (H, H_kv, layout, θ, ρ, mask, cap) and optionally
    its sinks σ; every layer's output, pass after pass, with `ops.fast` set to `fast` (and back on after)."""
    ops.fast, cache, outs = fast, KVCache(kv_type), []
    try:
        for qkvs in inputs:
            ctx = Context(qkvs[0][0].shape[-2], cache, ops)
            for (Q, K, V), layer in zip(qkvs, layers, strict=True):
                sinks = layer[7:8] if len(layer) > 7 and layer[7] is not None else ()  # σ, or left out
                outs.append(gqa(Q, K, V, *layer[:7], *sinks, ctx=ctx))
            ctx.finish()
    finally:
        ops.fast = True
    return outs
