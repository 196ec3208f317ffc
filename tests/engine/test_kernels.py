"""Each single kernel that generated torch code may run equals the card steps it replaces.

A generated module holds the card's steps alone; where toycards loads it, the kernel table
(models/kernel_table.py) puts an adapter in place of each prelude algorithm that has a kernel,
the steps kept as its `__wrapped__`. These tests run the prelude functions of modules loaded that
way with `ops.fast` off (the card's steps, the naive reference) and on (the kernel), every table
entry among them, on random inputs, and whole models both ways; and a card's own algorithm of the
same name keeps its steps.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gqa_passes import SIZES, run_layers, run_passes, window  # noqa: E402

from toycards import engine  # noqa: E402
from toycards.engine import ckernels as quant_kernels  # noqa: E402
from toycards.lang.parse import parse  # noqa: E402
from toycards.library import library_card  # noqa: E402
from toycards.models.kernel_table import KERNELS  # noqa: E402
from toycards.models.load import module_namespace  # noqa: E402
from toycards.runtime.torch import ops as ops_torch  # noqa: E402
from toycards.runtime.torch import rope as rope_torch  # noqa: E402


@pytest.fixture(scope="module")
def funcs():
    """The functions of generated torch modules as toycards loads them (the kernels in place)."""
    namespace: dict = {}
    halves = parse(library_card("llama").source.replace("rope_pairs", "rope_halves"))
    exact_gelu = parse(library_card("gpt2").source.replace("GELU_tanh(", "GELU("))
    # together they call every prelude algorithm of the table
    for card in (library_card("gpt2"), exact_gelu, library_card("qwen3moe"), library_card("llama"), halves):
        namespace.update(module_namespace(card, "torch"))
    return namespace


def both(fn, *args):
    """fn(*args) with the card's steps, then with the kernel."""
    try:
        ops_torch.fast = False
        slow = fn(*args)
        ops_torch.fast = True
        fast = fn(*args)
    finally:
        ops_torch.fast = True
    return slow, fast


def assert_close(slow, fast, tol=2e-6):
    worst = (slow - fast).abs().max().item()
    where = np.unravel_index(int((slow - fast).abs().argmax()), tuple(slow.shape))
    assert worst <= tol * max(1.0, slow.abs().max().item()), f"max |Δ| {worst:.3g} at {where}"


def kernel_runs(monkeypatch, where, name: str) -> list[bool]:
    """Patches where.name (a kernel that may decline) to record, call by call, whether it ran."""
    real, ran = getattr(where, name), []

    def counted(*args):
        out = real(*args)
        ran.append(out is not None)
        return out

    monkeypatch.setattr(where, name, counted)
    return ran


g = torch.Generator().manual_seed(0)


def rand(*shape, scale=1.0):
    return torch.randn(*shape, generator=g) * scale


# Arguments for every entry of the torch kernel table; the tests after this one go further for most.
TABLE_CASES = {
    "softmax": lambda: (rand(2, 5, 33, scale=4.0),),
    "SiLU": lambda: (rand(2, 5, 33, scale=4.0),),
    "GELU": lambda: (rand(2, 5, 33, scale=4.0),),
    "GELU_tanh": lambda: (rand(2, 5, 33, scale=4.0),),
    "layer_norm": lambda: (rand(3, 7, 64, scale=3.0), rand(64) + 1, rand(64), 1e-5),
    "rms_norm": lambda: (rand(3, 7, 64, scale=3.0), rand(64) + 1, 1e-6),
    "rope_pairs": lambda: (rand(2, 3, 5, 16), torch.arange(3, 8.0).reshape(-1, 1), 500.0, rand(8).abs() + 0.5),
    "rope_halves": lambda: (rand(2, 3, 5, 16), torch.arange(3, 8.0).reshape(-1, 1), 500.0, rand(8).abs() + 0.5),
    # c left out: the adapter gives the kernel the function's default, as the steps take it
    "attention": lambda: (rand(2, 3, 6, 16), rand(2, 3, 9, 16), rand(2, 3, 9, 16), lambda t_z, t_x: t_z <= t_x + 3),
    "GQAttention": lambda: (
        rand(1, 5, 4 * 16), rand(1, 5, 2 * 16), rand(1, 5, 2 * 16), 4, 2, "pairs", 1e4, rand(8).abs() + 0.5,
        lambda t_z, t_x: t_z <= t_x,
    ),
    "SwiGLU": lambda: (rand(1, 2, 32), rand(48, 32), rand(48, 32), rand(32, 48)),
    "MoE": lambda: (*moe_inputs(), 2, "renormalise"),
    "MoE_biased": lambda: (*moe_biased_inputs(), 2, "renormalise", "sigmoid", 2.5, 4, 2),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(KERNELS["torch"]))
def test_every_table_entry_equals_the_steps_it_replaces(funcs, monkeypatch, name):
    """The loaded module's function is the adapter, which calls the kernel once (and gives its
    result where it does not decline); the steps it replaces give the same numbers."""
    entry, fn = KERNELS["torch"][name], funcs[name]
    assert fn.__wrapped__.__name__ == fn.__name__ and fn is not fn.__wrapped__
    ran = kernel_runs(monkeypatch, ops_torch, entry.name)
    with torch.no_grad():
        slow, fast = both(fn, *TABLE_CASES[name]())
    assert fast.shape == slow.shape
    assert_close(slow, fast, tol=1e-5 if name.startswith("MoE") else 3e-6)
    assert ran == [not entry.declines or quant_kernels.library() is not None]


@pytest.mark.parametrize("name", ["softmax", "SiLU", "GELU_tanh"])
def test_elementwise_and_softmax(funcs, name):
    x = rand(2, 5, 33, scale=4.0)
    assert_close(*both(funcs[name], x))


def test_norms(funcs):
    e, gamma, beta = rand(3, 7, 64, scale=3.0), rand(64) + 1, rand(64)
    assert_close(*both(funcs["layer_norm"], e, gamma, beta, 1e-5))
    assert_close(*both(funcs["rms_norm"], e, gamma, 1e-6))


def test_norms_with_one_scale_per_head(funcs):
    """γ and β with a row per head (`[H, 1, d]`: a card's `Γ[:, h]` in `for h ∈ [H], t ∈ [ℓ]`,
    stablelm_parallel's q/k norms) broadcast over the tokens of each head, kernel and steps alike."""
    e, gamma, beta = rand(2, 4, 7, 16, scale=3.0), rand(4, 1, 16) + 1, rand(4, 1, 16)
    assert_close(*both(funcs["layer_norm"], e, gamma, beta, 1e-5))
    assert_close(*both(funcs["rms_norm"], e, gamma, 1e-6))
    mean, var = e.mean(-1, keepdim=True), e.var(-1, unbiased=False, keepdim=True)
    assert_close(
        (e - mean) / torch.sqrt(var + 1e-5) * gamma + beta, funcs["layer_norm"](e, gamma, beta, 1e-5)
    )


@pytest.mark.parametrize("shape", [(1, 1, 64), (2, 3, 33), (5,), (2, 300, 576)], ids=str)
def test_rms_norm_in_c(funcs, shape):
    """The C version (glue_torch) on a decoding step's rows, odd widths, and a prompt's rows (spread
    over the threads)."""
    from toycards.engine import ckernels as quant_kernels
    from toycards.engine.torch import glue as glue_torch

    e, gamma = rand(*shape, scale=3.0), rand(shape[-1]) + 1
    assert_close(*both(funcs["rms_norm"], e, gamma, 1e-6))
    if quant_kernels.library() is not None:
        assert glue_torch.rms_norm(e, gamma, 1e-6) is not None  # the C version ran


@pytest.mark.parametrize("d_r", [16, 8])  # 8: partial rotary, the last 8 entries of each head pass
@pytest.mark.parametrize("name", ["rope_pairs", "rope_halves"])
def test_rope(funcs, name, d_r):
    x, t = rand(2, 3, 5, 16, scale=2.0), torch.arange(3, 8, dtype=torch.float32).reshape(-1, 1)
    rho = torch.rand(d_r // 2, generator=g) + 0.5
    assert_close(*both(funcs[name], x, t, 500.0, rho))
    assert_close(*both(funcs[name], x, t + 11, 500.0, rho))  # other positions: not the cached angles
    from toycards.engine import ckernels as quant_kernels
    from toycards.engine.torch import glue as glue_torch

    if quant_kernels.library() is not None:  # 5 positions: few enough for the C version
        cos, sin = rope_torch.angles(t, 500.0, rho, d_r)
        assert glue_torch.rope(x, cos, sin, pairs=name == "rope_pairs") is not None


@pytest.mark.parametrize("name", ["rope_pairs", "rope_halves"])
def test_partial_rope_by_hand(funcs, name):
    """d_r = 2·len(ρ) = 4 of 6 entries rotate, with the frequencies of a 4-entry head θ^(−2(i−1)/4);
    entries 5 and 6 pass unchanged (llama.cpp's n_rot < head size)."""
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]], dtype=torch.float64)
    t, theta, rho = torch.tensor([[4.0]]), 100.0, torch.tensor([1.0, 2.0], dtype=torch.float64)
    phi = 3.0 / (np.array([1.0, theta**0.5]) * np.array([1.0, 2.0]))  # (t − 1) / (θ^(2(i−1)/d_r) · ρ_i)
    c, s = np.cos(phi), np.sin(phi)
    if name == "rope_pairs":  # pairs (1, 2) and (3, 4)
        want = [1 * c[0] - 2 * s[0], 1 * s[0] + 2 * c[0], 3 * c[1] - 4 * s[1], 3 * s[1] + 4 * c[1], 5, 6]
    else:  # pairs (1, 3) and (2, 4)
        want = [1 * c[0] - 3 * s[0], 2 * c[1] - 4 * s[1], 1 * s[0] + 3 * c[0], 2 * s[1] + 4 * c[1], 5, 6]
    for got in both(funcs[name], x, t, theta, rho):
        np.testing.assert_allclose(np.asarray(got, dtype=np.float64)[0], want, rtol=1e-6)


@pytest.mark.parametrize("causal", [True, False])
def test_attention(funcs, causal):
    Q, K, V = rand(2, 3, 6, 16), rand(2, 3, 9, 16), rand(2, 3, 9, 16)
    mask = (lambda t_z, t_x: t_z <= t_x + 3) if causal else (lambda t_z, t_x: 1)
    assert_close(*both(funcs["attention"], Q, K, V, mask))


@pytest.mark.parametrize("kv_index", [None, [0, 0, 1, 1, 2, 2], [0, 2, 1, 0, 1, 2]])
def test_soft_capped_attention(funcs, kv_index):
    """The cap c > 0 (Gemma 2's scores: c · tanh(s / c) before the mask), which SDPA cannot do."""
    Q, K, V = rand(2, 6, 5, 16, scale=4.0), rand(2, 3 if kv_index else 6, 9, 16, scale=4.0), rand(2, 3, 9, 16)
    V = V if kv_index else rand(2, 6, 9, 16)
    mask = lambda t_z, t_x: t_z <= t_x + 4  # noqa: E731
    slow, fast = both(lambda *a: funcs["attention"](*a, 2.5, kv_index=kv_index), Q, K, V, mask)
    assert_close(slow, fast)
    uncapped, _ = both(lambda *a: funcs["attention"](*a, kv_index=kv_index), Q, K, V, mask)
    assert (slow - uncapped).abs().max() > 1e-2  # the scores reach past ±2.5, so the cap changes them


@pytest.mark.parametrize("kv_index", [None, [0, 0, 1, 1, 2, 2]])
def test_attention_with_sinks(funcs, kv_index):
    """A sink logit σ (gpt-oss's attn_sinks) joins each query's softmax without a value: the kernel
    against the card's steps, and against the softmax over [S; σ] written out here. (gpt-oss.card
    passes one σ per head, [H, 1] from its map over heads: its oracle case runs that shape.)"""
    Q, K, V = rand(2, 6, 5, 16), rand(2, 3 if kv_index else 6, 9, 16), rand(2, 3 if kv_index else 6, 9, 16)
    mask = lambda t_z, t_x: t_z <= t_x + 4  # noqa: E731
    slow, fast = both(lambda *a: funcs["attention"](*a, 0, 0.5, kv_index=kv_index), Q, K, V, mask)
    assert_close(slow, fast)
    Kh, Vh = (K[:, kv_index], V[:, kv_index]) if kv_index else (K, V)
    allowed = torch.arange(1, 10.0) <= torch.arange(1, 6.0)[:, None] + 4
    S = (Q @ Kh.mT / 4.0).masked_fill(~allowed, -math.inf)
    weights = torch.softmax(torch.cat([S, torch.full((2, 6, 5, 1), 0.5)], dim=-1), dim=-1)
    assert_close(fast, weights[..., :-1] @ Vh)
    unsunk, _ = both(lambda *a: funcs["attention"](*a, kv_index=kv_index), Q, K, V, mask)
    assert (fast - unsunk).abs().max() > 1e-2


@pytest.mark.parametrize("kv_index", [[0, 0, 1, 1, 2, 2], [0, 1, 2, 0, 1, 2]])
def test_grouped_query_attention(funcs, kv_index):
    """Query head h reads key/value head kv_index[h]: grouped (SDPA's own grouping) or any other."""
    Q, K, V = rand(2, 6, 5, 16), rand(2, 3, 9, 16), rand(2, 3, 9, 16)
    mask = lambda t_z, t_x: t_z <= t_x + 4  # noqa: E731
    slow, fast = both(lambda *a: funcs["attention"](*a, kv_index=kv_index), Q, K, V, mask)
    assert_close(slow, fast)
    idx = torch.tensor(kv_index)
    ungrouped, _ = both(funcs["attention"], Q, K[:, idx], V[:, idx], mask)
    assert_close(ungrouped, slow)


# 16: rows of whole vectors (AVX-512's 16 lanes, AVX2's 8); 24: whole AVX2 vectors, a tail on AVX-512;
# 20: the plain loop on either
@pytest.mark.parametrize("d", [16, 24, 20])
@pytest.mark.parametrize("kv_index", [None, [0, 0, 1, 1, 2, 2], [2, 0, 1, 0, 1, 2]])
def test_attention_on_cache_views(funcs, kv_index, d):
    """One query against keys and values that are the first rows of a larger cache buffer (a
    strided view, as KVCache.append returns them): the C version for few queries."""
    from toycards.engine import ckernels as quant_kernels
    from toycards.engine.torch import glue as glue_torch

    H = 3 if kv_index is None else 6
    Q, buf = rand(2, H, 1, d), rand(2, 2, 3, 32, d)
    K, V = buf[0, :, :, :11], buf[1, :, :, :11]
    mask = lambda t_z, t_x: t_z <= t_x + 5  # noqa: E731 - keys 1…6 of 11
    call = (lambda *a: funcs["attention"](*a, kv_index=kv_index)) if kv_index else funcs["attention"]
    assert_close(*both(call, Q, K, V, mask))
    if quant_kernels.library() is not None:
        allowed = torch.ones(1, 11, dtype=torch.bool)
        assert glue_torch.attention(Q, K, V, allowed, kv_index) is not None  # the C version ran


@pytest.mark.parametrize(
    "layout, half, cap", [("pairs", 8, 0), ("halves", 6, 0), ("none", 8, 2.5), ("pairs", 5, 2.5)]
)
@pytest.mark.parametrize("H, H_kv, lead", [(4, 2, (2,)), (6, 6, ()), (6, 4, (1,))], ids=str)
@pytest.mark.parametrize("steps_above", [None, 8], ids=["kernel-all", "steps-for-prompts"])
def test_grouped_query_attention_pass_by_pass(
    funcs, monkeypatch, layout, half, cap, H, H_kv, lead, steps_above
):
    """GQAttention's kernel (RoPE of every head, the KV cache, attention: one C call) equals the
    card's steps over passes that share one cache: a prompt of 37 tokens (three runs of 16 queries
    and a part, the blocked scores of a prompt), decoding steps of 1 and 3 tokens and a second prompt
    of 19 on the cache so far, under a sliding window whose width the mask function reads from its
    closure (rows whose keys start past the first). Partial rotary (2·half < d_h), halves, no RoPE,
    a soft cap, a batch axis and ⌈h·H_kv/H⌉ groups of unequal size (6 on 4). With the kernel
    declining more than 8 new tokens, the steps fill the cache for the prompts and the kernel reads it."""
    from toycards.engine.torch import glue as glue_torch

    if steps_above is not None:  # the kernel declines more new tokens, as it does under autograd
        real = glue_torch.gq_attention
        monkeypatch.setattr(
            engine.backend("torch"),
            "gq_attention",
            lambda Q, *a: None if Q.shape[-2] > steps_above else real(Q, *a),
        )
    d = 16
    rho = rand(half).abs() + 0.5
    inputs = [(rand(*lead, n, H * d), rand(*lead, n, H_kv * d), rand(*lead, n, H_kv * d)) for n in SIZES]
    ran = kernel_runs(monkeypatch, engine.backend("torch"), "gq_attention")
    args = (funcs["GQAttention"], ops_torch, inputs, H, H_kv, layout, rho, window(6), cap)
    for slow, fast in zip(run_passes(*args, fast=False), run_passes(*args, fast=True), strict=True):
        assert fast.shape == slow.shape
        assert_close(slow, fast, tol=3e-6)
    if quant_kernels.library() is not None:
        assert ran == [n <= (steps_above or n) for n in SIZES]


@pytest.mark.parametrize("d, half", [(16, 8), (20, 10), (64, 32), (128, 16)])
def test_half_cache_pass_by_pass(funcs, monkeypatch, d, half):
    """A float16 KV cache: GQAttention's kernel (keys and values rounded to halves as it writes
    them, read back as halves) equals the card's steps over the same float16 cache (torch's own
    rounding) pass by pass, prompts and decoding steps, for head sizes of whole vectors (64 and 128:
    the unrolled ones, 128 in two passes of 8 registers on AVX2), with a tail, and partly rotated;
    the half cache's outputs are not the float32 cache's (the rows were rounded) but within
    float16's relative precision of them."""

    H, H_kv = 6, 2
    rho = rand(half).abs() + 0.5
    inputs = [(rand(1, n, H * d), rand(1, n, H_kv * d), rand(1, n, H_kv * d)) for n in SIZES]
    ran = kernel_runs(monkeypatch, engine.backend("torch"), "gq_attention")
    args = (funcs["GQAttention"], ops_torch, inputs, H, H_kv, "pairs", rho, window(6), 0)
    exact = run_passes(*args, fast=True)
    slow, fast = run_passes(*args, fast=False, kv_type="f16"), run_passes(*args, fast=True, kv_type="f16")
    for s, f, e in zip(slow, fast, exact, strict=True):
        assert f.dtype == torch.float32
        assert_close(s, f, tol=3e-6)
        assert 0 < (f - e).abs().max() < 4e-3 * e.abs().max()
    if quant_kernels.library() is not None:
        assert ran == [True] * len(SIZES) * 2


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
@pytest.mark.parametrize("H, H_kv, lead", [(4, 2, (2,)), (6, 4, (1,))], ids=str)
def test_sinks_pass_by_pass(funcs, monkeypatch, kv_type, H, H_kv, lead):
    """A finite sink logit per query head (σ, gpt-oss's attn_sinks): GQAttention's kernel (the sink in
    each row's maximum and denominator, as ggml_soft_max_add_sinks) equals the card's steps (the keys'
    share of the softmax over [S; σ_h]) over passes that share one cache of `kv_type`: a prompt of 37
    tokens (attend_run's blocks), decoding steps of 1 and 3 tokens and a second prompt, under a
    sliding window. Sinks of −∞ are none: the outputs of a call that leaves σ out, bit for bit."""
    d = 16
    rho = rand(d // 2).abs() + 0.5
    sinks = rand(H, scale=3.0)  # some above every score of a row, some far below
    inputs = [(rand(*lead, n, H * d), rand(*lead, n, H_kv * d), rand(*lead, n, H_kv * d)) for n in SIZES]
    ran = kernel_runs(monkeypatch, engine.backend("torch"), "gq_attention")
    args = (funcs["GQAttention"], ops_torch, inputs, H, H_kv, "halves", rho, window(6), 0)
    slow = run_passes(*args, fast=False, kv_type=kv_type, sinks=sinks)
    fast = run_passes(*args, fast=True, kv_type=kv_type, sinks=sinks)
    plain = run_passes(*args, fast=True, kv_type=kv_type)
    none = run_passes(*args, fast=True, kv_type=kv_type, sinks=torch.full((H,), -math.inf))
    for s, f, p, n in zip(slow, fast, plain, none, strict=True):
        assert_close(s, f, tol=3e-6)
        assert (f - p).abs().max() > 1e-2  # the sinks take their share
        assert torch.equal(n, p)
    if quant_kernels.library() is not None:
        assert ran == [True] * len(SIZES) * 3


def test_sinks_the_kernel_cannot_read_are_left_to_the_steps(funcs, monkeypatch):
    """Sinks that are not float32 [H] on the CPU (float64 here): the kernel declines, and the card's
    steps apply them."""
    H, H_kv, d = 4, 2, 16
    rho = rand(d // 2).abs() + 0.5
    inputs = [(rand(1, n, H * d), rand(1, n, H_kv * d), rand(1, n, H_kv * d)) for n in (5, 1)]
    ran = kernel_runs(monkeypatch, engine.backend("torch"), "gq_attention")
    args = (funcs["GQAttention"], ops_torch, inputs, H, H_kv, "pairs", rho, window(3), 0)
    sinks = rand(H).double()
    slow = run_passes(*args, fast=False, sinks=sinks.float())
    for s, f in zip(slow, run_passes(*args, fast=True, sinks=sinks), strict=True):
        assert_close(s, f, tol=3e-6)
    assert ran == [False, False]


def test_layers_with_their_own_masks_and_rope_over_one_cache(funcs, monkeypatch):
    """Layers that alternate a sliding window with a causal mask and two RoPE bases (Gemma's local and
    global layers), over passes that share one cache (a prompt, decoding steps, a second prompt):
    the kernel, whose prepared calls the cache keeps from pass to pass, equals the card's steps layer
    by layer; each layer of a pass holds a call of its own, and a decoding step prepares none anew."""
    from toycards.engine.torch import glue as glue_torch

    H, H_kv, d = 4, 2, 16
    rho = rand(d // 2).abs() + 0.5
    layers = [(window(3), 1e4), (lambda t_z, t_x: t_z <= t_x, 1e6)] * 2
    inputs = [
        [(rand(1, n, H * d), rand(1, n, H_kv * d), rand(1, n, H_kv * d)) for _ in layers] for n in SIZES
    ]
    made = kernel_runs(monkeypatch, glue_torch, "_prepare")
    ran = kernel_runs(monkeypatch, engine.backend("torch"), "gq_attention")
    args = (
        funcs["GQAttention"],
        ops_torch,
        inputs,
        [(H, H_kv, "pairs", theta, rho, mask, 0) for mask, theta in layers],
    )
    for slow, fast in zip(run_layers(*args, fast=False), run_layers(*args, fast=True), strict=True):
        assert_close(slow, fast, tol=3e-6)
    if quant_kernels.library() is not None:
        assert all(ran) and len(ran) == len(SIZES) * len(layers)
        assert len(made) == 2 * len(set(SIZES))  # per shape of new tokens, one call for each of the two sites


def test_a_layer_whose_query_the_kernel_cannot_read(funcs, monkeypatch):
    """A pass's later layer whose Q is not contiguous (a transposed view): its shortcut to glue.cpp's
    gqa is declined there before anything is written, the kernel declines it too, and the card's
    steps run for that layer on the same cache; every layer, pass after pass, equals the steps."""
    from toycards.engine.torch import native as glue_cpp

    H, H_kv, d, rho = 4, 2, 16, rand(8).abs() + 0.5
    causal = lambda t_z, t_x: t_z <= t_x  # noqa: E731

    def layer(n, i):
        Q = rand(1, H * d, n).transpose(-1, -2) if i == 1 else rand(1, n, H * d)
        return Q, rand(1, n, H_kv * d), rand(1, n, H_kv * d)

    inputs = [[layer(n, i) for i in range(3)] for n in SIZES]
    tried = kernel_runs(monkeypatch, glue_cpp.module(), "gqa") if glue_cpp.module() is not None else []
    args = (funcs["GQAttention"], ops_torch, inputs, [(H, H_kv, "pairs", 1e4, rho, causal, 0)] * 3)
    for slow, fast in zip(run_layers(*args, fast=False), run_layers(*args, fast=True), strict=True):
        assert_close(slow, fast, tol=3e-6)
    if glue_cpp.module() is not None and quant_kernels.library() is not None:
        assert False in tried and True in tried  # the shortcut declined where the view came, and ran


def test_a_cache_reused_for_another_head_size(funcs):
    """After a reset, a cache takes rows of another head size (new buffers: the kernel never writes
    rows of one size into buffers of another, glue.cpp's check or not); without a reset, an error."""
    from toycards.runtime.context import Context, KVCache

    causal = lambda t_z, t_x: t_z <= t_x  # noqa: E731
    cache = KVCache()

    def run(H, H_kv, d, n=8):
        Q, K, V, rho = rand(n, H * d), rand(n, H_kv * d), rand(n, H_kv * d), torch.ones(d // 2)
        ctx = Context(n, cache, ops_torch)
        out = funcs["GQAttention"](Q, K, V, H, H_kv, "pairs", 1e4, rho, causal, 0, ctx=ctx)
        ctx.finish()
        ops_torch.fast = False
        try:
            ref = funcs["GQAttention"](Q, K, V, H, H_kv, "pairs", 1e4, rho, causal, 0, ctx=None)
        finally:
            ops_torch.fast = True
        assert_close(ref, out, tol=3e-6)

    run(4, 2, 16)
    cache.reset()
    run(2, 2, 64)
    assert cache.slots[0][0][0].shape[-1] == 64
    with pytest.raises(ValueError, match="changed shape within one cache"):
        run(4, 2, 16, n=1)


def test_a_mask_with_axes_of_its_own(funcs, monkeypatch):
    """A mask per batch row (padding, from a hand-written caller): the kernel declines before it
    touches the cache, and the card's steps broadcast the mask over the scores. Oracle: each batch
    row alone with its own two-axis mask, through the kernel."""
    from toycards.runtime.context import Context, KVCache

    H, H_kv, d, T = 4, 2, 16, 5
    Q, K, V, rho = rand(2, T, H * d), rand(2, T, H_kv * d), rand(2, T, H_kv * d), torch.ones(d // 2)
    first = torch.tensor([1.0, 3.0]).reshape(2, 1, 1, 1)  # row 1's first two keys are padding
    padded = lambda t_z, t_x: (t_z <= t_x) & (t_z >= first)  # noqa: E731
    ran = kernel_runs(monkeypatch, engine.backend("torch"), "gq_attention")
    cache = KVCache()
    ctx = Context(T, cache, ops_torch)
    out = funcs["GQAttention"](Q, K, V, H, H_kv, "pairs", 1e4, rho, padded, 0, ctx=ctx)
    ctx.finish()
    if quant_kernels.library() is not None:
        assert ran == [False]
    assert cache.slots[0][1] == T  # the steps filled the slot the kernel left alone
    for b, f in enumerate((1.0, 3.0)):
        alone = lambda t_z, t_x, f=f: (t_z <= t_x) & (t_z >= f)  # noqa: E731
        row = funcs["GQAttention"](Q[b], K[b], V[b], H, H_kv, "pairs", 1e4, rho, alone, 0, ctx=None)
        # rows of row 1 before its first key see no key at all (NaN either way): compare the rest
        keep = slice(2, None) if b else slice(None)
        assert_close(row[keep], out[b][keep], tol=3e-6)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_whole_model(arch):
    card = library_card(arch)
    values = {  # string keys: Python would fold the identifier ℓ_max to l_max
        "gpt2": {"L": 2, "H": 2, "d_e": 16, "d_mlp": 32, "ℓ_max": 32, "N_V": 50},
        "llama": {"L": 2, "H": 4, "H_kv": 2, "d_e": 32, "d_ff": 48, "ℓ_max": 32, "N_V": 50, "ε": 1e-5},
    }[arch]
    from toycards.models.binding import bind_values
    from toycards.models.load import _random_weights, module_class

    bound = bind_values(card.main, values)
    assert not bound.problems, bound.problems
    weights = {k: v * 20 if v.ndim == 2 else v for k, v in _random_weights(bound, seed=3).items()}
    model = module_class(card, "torch")(bound.hyper, weights)
    ids = torch.tensor([[1, 7, 3, 9, 4, 2]])
    with torch.no_grad():
        slow, fast = both(model, ids)
    assert_close(slow, fast, tol=1e-5)


OWN_SOFTMAX = """
Algorithm: y ← softmax(x)
/* the card's own: a softmax at temperature 2 */
Input: x ∈ ℝ^{n}
Output: y ∈ (0,1)^{n}
1  m ← max(x)            ∷ ℝ
2  z ← exp((x − m) / 2)  ∷ ℝ^{n}
3  return y = z / Σ_{i=1}^{n} z[i]
"""
OWN_ATTENTION = """
Algorithm: Ṽ ← attention(Q, K, V | Mask, c)
/* the card's own: scores scaled by 1/d_h rather than 1/√d_h, no cap */
Input:
  Q ∈ ℝ^{d_h×ℓ_x}
  K ∈ ℝ^{d_h×ℓ_z}
  V ∈ ℝ^{d_h×ℓ_z}
Output: Ṽ ∈ ℝ^{d_h×ℓ_x}
Hyperparameters:
  Mask ∈ {0,1}^{ℓ_z×ℓ_x}
  c ∈ ℝ  default 0
1  S ← K^⊺ · Q / d_h  ∷ ℝ^{ℓ_z×ℓ_x}
2  for t_z ∈ [ℓ_z], t_x ∈ [ℓ_x] do
3    if ¬Mask[t_z, t_x] then S[t_z, t_x] ← −∞
4  end
5  return Ṽ = V · softmax(S)
"""
CALLS_BOTH = """
Algorithm: P ← Tiny(x | θ)
/* one causal attention head and a softmax gate, called by the entry point itself */
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{N_V×ℓ}
Hyperparameters:
  d ∈ ℕ  from "{arch}.embedding_length"
  N_V ∈ ℕ
Parameters:
  W_e ∈ ℝ^{d×N_V}           from "token_embd.weight"^⊺
  W_q, W_k, W_v ∈ ℝ^{d×d}  from "attn_q.weight", "attn_k.weight", "attn_v.weight"
  W_u ∈ ℝ^{N_V×d}           from "output.weight"
1  ℓ ← length(x)
2  for t ∈ [ℓ]: e_t ← W_e[:, x[t]]
3  X ← [e_1, …, e_ℓ]                                                    ∷ ℝ^{d×ℓ}
4  X ← X + attention(W_q · X, W_k · X, W_v · X | Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧)  ∷ ℝ^{d×ℓ}
5  X ← X ⊙ softmax(X)                                                   ∷ ℝ^{d×ℓ}
6  Z ← W_u · X                                                          ∷ ℝ^{N_V×ℓ}
7  return P = softmax(Z)
"""


@pytest.mark.parametrize("own", ["softmax", "attention", "softmax and attention"])
def test_a_card_that_defines_a_prelude_algorithm_keeps_its_steps(own):
    """A card that defines its own `softmax` or `attention` (and calls it) runs its own steps with
    the kernels on: its torch module's logits, full pass and cached decoding, equal the reference
    interpreter's running the card (and differ from those of the prelude's algorithms); the prelude
    algorithms it does not define still run their kernels."""
    from toycards.models.binding import bind_values
    from toycards.models.load import _random_weights, put_kernels
    from toycards.models.reference import ReferenceModel

    defined = own.split(" and ")
    card = parse(
        "".join({"softmax": OWN_SOFTMAX, "attention": OWN_ATTENTION}[n] for n in defined) + CALLS_BOTH
    )
    prelude_only = parse(CALLS_BOTH)
    bound = bind_values(card.main, {"d": 16, "N_V": 50})
    weights = {k: v * 50 if v.ndim == 2 else v for k, v in _random_weights(bound, seed=3).items()}  # ~N(0, 1)
    namespace = module_namespace(card, "torch")
    assert set(put_kernels(namespace, card, "torch")) == {"softmax", "attention"} - set(defined)
    ids = np.array([1, 7, 3, 9, 4, 2])
    model = namespace["Model"](bound.hyper, weights)
    cache = model.new_cache()
    with torch.no_grad():
        full = model._forward_numpy(ids[None], None)[0]
        cached = np.concatenate(
            [model._forward_numpy(ids[None, a:b], cache)[0] for a, b in [(0, 4), (4, 5), (5, 6)]]
        )
    want = ReferenceModel(card, bound, weights).sequence_logits(ids)
    of_the_prelude = ReferenceModel(prelude_only, bound, weights).sequence_logits(ids)
    assert np.abs(want - of_the_prelude).max() > 1e-2  # the card's own algorithms change the logits
    for got in (full, cached):
        np.testing.assert_allclose(got, want, atol=2e-5 * max(1.0, np.abs(want).max()), rtol=0)


def test_rope_angles_of_a_decoding_run():
    """A decoding step's positions (one, or a few in a row) take their angles from a block of
    rope_torch.ROPE_ROWS positions made once: every position of a run past two blocks, and windows
    across a block's end, equal cos and sin of φ = (t − 1) / (θ^(2(i−1)/d_h) · ρ_i) computed in
    float64 (within float32's rounding of φ, ~|φ|·6e-8), as contiguous [T, half] rows; positions not
    in a row (or many) are computed as before."""
    rho = torch.rand(8, generator=g) + 0.5
    theta, d_h = 500.0, 16
    divisors = theta ** (2 * torch.arange(8, dtype=torch.float64) / d_h) * rho.double()

    def check(positions):
        t = torch.tensor(positions, dtype=torch.float32).reshape(-1, 1)
        with torch.no_grad():
            cos, sin = rope_torch.angles(t, theta, rho, d_h)
        phi = (t.double() - 1) / divisors
        assert cos.shape == sin.shape == (len(positions), 8) and cos.is_contiguous() and sin.is_contiguous()
        tol = 2e-7 * max(1.0, phi.abs().max().item())
        assert (torch.cos(phi) - cos.double()).abs().max() <= tol
        assert (torch.sin(phi) - sin.double()).abs().max() <= tol

    n = 2 * rope_torch.ROPE_ROWS + 9
    for p in range(1, n):
        check([p])
    for p in (rope_torch.ROPE_ROWS - 1, n - 2, 3):  # across a block's end, and back to the start
        check([p, p + 1, p + 2])
    check([7, 5])  # not in a row
    check(list(range(1, 40)))  # a prompt's many


def test_cached_rope_angles_leave_the_divisors_storage_resizable():
    """FSDP frees a gathered parameter by resizing its storage to 0 (torch's fsdp free_storage):
    a no-grad pass that caches RoPE angles must not pin ρ's storage (numpy() on it would)."""
    rho = torch.rand(8, generator=g) + 0.5
    with torch.no_grad():
        ops_torch.rope_pairs(rand(1, 2, 5, 16), torch.arange(1, 6.0).reshape(-1, 1), 500.0, rho)
    assert rho.untyped_storage().resizable()
    rho.untyped_storage().resize_(0)  # what FSDP does: no RuntimeError


def test_training_after_inference_in_one_process():
    """Tensors cached while serving logits (inference mode) must not break a later backward pass."""
    from toycards.models.binding import bind_values
    from toycards.models.load import _random_weights, module_class

    card = library_card("llama")
    values = {"L": 1, "H": 4, "H_kv": 2, "d_e": 16, "d_ff": 24, "ℓ_max": 16, "N_V": 20, "ε": 1e-5}
    bound = bind_values(card.main, values)
    model = module_class(card, "torch")(bound.hyper, _random_weights(bound, seed=0))
    model.logits([1, 2, 3])
    loss = model(torch.tensor([[1, 2, 3]])).logsumexp(-1).sum()
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


# ── the mixture of experts: the card's dense steps and the grouped kernel ───────────────────
@pytest.fixture(scope="module")
def moe():
    """The generated `MoE` of the torch target (the qwen3moe card calls it)."""
    return module_namespace(library_card("qwen3moe"), "torch")["MoE"]


def moe_inputs(E=8, d_e=16, d_ff=12, shape=(2, 7)):
    """Router rows scaled so that tokens pick different experts (checked below), drawn from a
    generator of their own: the module's `g` hands each test what the tests before it in the same
    worker left, and for some orders the 14 tokens chose only 4 experts."""
    own = torch.Generator().manual_seed(3)

    def draw(*shape, scale=1.0):
        return torch.randn(*shape, generator=own) * scale

    return (
        draw(*shape, d_e), draw(E, d_e, scale=2.0), draw(E, d_ff, d_e, scale=0.3),
        draw(E, d_ff, d_e, scale=0.3), draw(E, d_e, d_ff, scale=0.3),
    )  # fmt: skip


@pytest.mark.parametrize("norm", ["renormalise", "keep"])
@pytest.mark.parametrize("k", [1, 3])
def test_moe_kernel_equals_the_card_steps(moe, norm, k):
    """(The NumPy target's MoE kernel: tests/engine/test_kernels_numpy.py.)"""
    X, W_r, W_gate, W_up, W_down = moe_inputs()
    chosen = ops_torch.topk((X @ W_r.T).softmax(-1), k)
    assert len({tuple(c) for c in chosen.reshape(-1, k).tolist()}) > 4, "the router should spread tokens"
    assert_close(*both(moe, X, W_r, W_gate, W_up, W_down, k, norm), tol=1e-5)


def test_moe_kernel_breaks_ties_like_topk(moe):
    """Two experts with the same router row tie on every token: the lower one is chosen, as `topk` does."""
    X, W_r, W_gate, W_up, W_down = moe_inputs(E=4)
    W_r[2] = W_r[1]
    assert_close(*both(moe, X, W_r, W_gate, W_up, W_down, 1, "keep"), tol=1e-5)


def moe_biased_inputs():
    """moe_inputs with a selection bias [E] large enough to change which experts the gates pick."""
    X, W_r, W_gate, W_up, W_down = moe_inputs()
    b = torch.randn(W_r.shape[0], generator=torch.Generator().manual_seed(4)) * 0.3
    return X, W_r, b, W_gate, W_up, W_down


@pytest.mark.parametrize("gating", ["softmax", "sigmoid"])
@pytest.mark.parametrize("norm", ["renormalise", "keep"])
def test_moe_biased_kernel_equals_the_card_steps(funcs, gating, norm):
    """MoE_biased (glm4moe's router): the bias picks, the unbiased gates weigh, then × s.
    (The NumPy target's: tests/engine/test_kernels_numpy.py.)"""
    X, W_r, b, W_gate, W_up, W_down = moe_biased_inputs()
    z = X @ W_r.T
    P = z.sigmoid() if gating == "sigmoid" else z.softmax(-1)
    assert (ops_torch.topk(P + b, 2) != ops_torch.topk(P, 2)).any(), "the bias should change a choice"
    with torch.no_grad():
        assert_close(*both(funcs["MoE_biased"], X, W_r, b, W_gate, W_up, W_down, 2, norm, gating, 2.5), tol=1e-5)


@pytest.mark.parametrize(("n_g", "k_g"), [(2, 1), (4, 1)])
@pytest.mark.parametrize("gating", ["softmax", "sigmoid"])
def test_moe_biased_groups_route_as_llama_cpp(funcs, gating, n_g, k_g):
    """MoE_biased with groups of experts: the card's steps and the kernel both choose within each
    token's k_g best groups, as llama.cpp's build_moe_ffn (tests/engine/test_kernels_numpy.py's
    routed_by_hand, in float64)."""
    from test_kernels_numpy import routed_by_hand

    inputs = moe_biased_inputs()
    args = (*inputs, 2, "renormalise", gating, 2.5, n_g, k_g)
    want = torch.from_numpy(routed_by_hand(*(t.numpy() for t in inputs), *args[6:])).float()
    with torch.no_grad():
        slow, fast = both(funcs["MoE_biased"], *args)
    assert_close(want, slow, tol=1e-5)
    assert_close(want, fast, tol=1e-5)


@pytest.mark.parametrize("k", [1, 2])
def test_moe_biased_weighs_the_input_with_w_b(funcs, k):
    """MoE_biased with w_b = 1 (llama4's weight_before_ffn): each chosen sigmoid gate multiplies its
    expert's input, not its output; steps and kernel against the sum written out by hand."""
    X, W_r, b, W_gate, W_up, W_down = moe_biased_inputs()
    P = (X @ W_r.T).sigmoid()
    chosen = (ops_torch.topk(P, k) - 1).long()  # (…, k) 0-based
    want = torch.zeros_like(X)
    for j in range(k):
        e = chosen[..., j]
        xs = X * P.gather(-1, e[..., None])  # the weighted input
        g = torch.einsum("...d,...fd->...f", xs, W_gate[e])
        h = torch.nn.functional.silu(g) * torch.einsum("...d,...fd->...f", xs, W_up[e])
        want += torch.einsum("...f,...df->...d", h, W_down[e])
    with torch.no_grad():
        slow, fast = both(
            funcs["MoE_biased"], X, W_r, 0 * b, W_gate, W_up, W_down, k, "keep", "sigmoid", 1, 1, 1, 1
        )
    assert_close(want, slow, tol=1e-5)
    assert_close(want, fast, tol=1e-5)


def test_moe_biased_clamps_a_tiny_sum_of_weights(funcs):
    """Renormalised weights whose sum is below F16's smallest normal are divided by that number
    instead (llama.cpp's clamp in build_moe_ffn): sigmoid gates near 0, steps and kernel alike."""
    X, W_r, b, W_gate, W_up, W_down = moe_biased_inputs()
    X, W_r = X.abs(), -8 * W_r.abs()  # every logit below −20
    assert (X @ W_r.T < -20).all()
    args = (X, W_r, b, W_gate, W_up, W_down, 2)
    with torch.no_grad():
        slow, fast = both(funcs["MoE_biased"], *args, "renormalise", "sigmoid")
        kept = both(funcs["MoE_biased"], *args, "keep", "sigmoid")[0]
    torch.testing.assert_close(slow, kept / 6.103515625e-5, rtol=1e-4, atol=0)
    torch.testing.assert_close(fast, slow, rtol=1e-4, atol=1e-12)


# ── SwiGLU: the products and SiLU·up of a decoding step in one C call ──────────────────────────
SWIGLU_MIXES = {  # gate, up, down; "Q4_K_M": llama.cpp's mix keeps some ffn_down in Q6_K
    "F32": ("F32", "F32", "F32"), "F16": ("F16", "F16", "F16"), "Q8_0": ("Q8_0", "Q8_0", "Q8_0"),
    "Q4_0": ("Q4_0", "Q4_0", "Q4_0"), "Q4_1": ("Q4_1", "Q4_1", "Q4_1"), "Q5_0": ("Q5_0", "Q5_0", "Q5_0"),
    "Q5_1": ("Q5_1", "Q5_1", "Q5_1"), "Q5_K": ("Q5_K", "Q5_K", "Q5_K"), "Q4_K_M": ("Q4_K", "Q4_K", "Q6_K"),
    "F32+Q8_0": ("F32", "Q8_0", "F16"),
}  # fmt: skip


def few_token_kernels(kinds) -> bool:
    """Whether every weight of these kinds has a few-token C product here (float32 ones need the
    in-place float kernel, which a build without AVX2 or AVX-512 lacks)."""
    lib = quant_kernels.library()
    return lib is not None and ("F32" not in kinds or quant_kernels.float_direct(0))


def swiglu_weight(kind: str, shape: tuple[int, int]):
    """A weight of `kind` [shape], entries of order 0.1: a float32 tensor, or a QuantWeight of random
    blocks (test_quant_kernels.small_blocks)."""
    from gguf import GGMLQuantizationType
    from test_quant_kernels import small_blocks

    from toycards.engine.torch.quant import QuantWeight

    qtype = GGMLQuantizationType[kind]
    blocks = small_blocks(qtype, shape, np.random.default_rng(abs(hash((kind, shape))) % 2**32))
    return torch.from_numpy(blocks) if kind == "F32" else QuantWeight(blocks, qtype, shape)


@pytest.mark.parametrize("mix", list(SWIGLU_MIXES))
@pytest.mark.parametrize(
    "lead, scale", [((1, 1), 1.0), ((2, 3), 1.0), ((1, 1), 300.0), ((9,), 1.0), ((2, 70), 300.0)], ids=str
)
def test_swiglu_kernel_equals_the_card_steps(funcs, monkeypatch, mix, lead, scale):
    """SwiGLU's kernel (gate and up products, SiLU(gate)·up, the down product: one C call for up to
    FEW_TOKENS tokens; for more, the products as the steps make them and SiLU(gate)·up in C, spread
    over the threads for 140 tokens) equals the card's three steps, for float32 weights and for each
    block type, a Q4_K/Q6_K mix among them. x scaled by 300 sends the gate far into both tails of
    SiLU (e^−g overflows and underflows)."""

    d_e, d_ff = 256, 512  # K-quant blocks hold 256 entries
    kinds, shapes = SWIGLU_MIXES[mix], ((d_ff, d_e), (d_ff, d_e), (d_e, d_ff))
    gate, up, down = (swiglu_weight(kind, shape) for kind, shape in zip(kinds, shapes, strict=True))
    x = rand(*lead, d_e, scale=scale)
    ran = kernel_runs(monkeypatch, ops_torch, "swiglu")
    with torch.no_grad():
        slow, fast = both(funcs["SwiGLU"], x, gate, up, down)
    assert fast.shape == slow.shape == (*lead, d_e)
    # float weights: SiLU's own rounding; int8 types: SiLU·up is rounded to int8 blocks again for the
    # down product, where an entry 1 ulp apart may round to the next step (1/127 of its block's max)
    assert_close(slow, fast, tol=2e-6 if mix in ("F32", "F16") else 2e-3)
    assert ran == [quant_kernels.library() is not None]  # one C call, or the products and SiLU·up in C


def test_swiglu_kernel_declines_what_it_does_not_cover(funcs):
    """Autograd, a float64 x, or a weight that is neither float32 nor GGUF blocks: the steps run."""
    from toycards.engine.torch import quant as quant_torch

    d_e, d_ff = 32, 64
    x = rand(1, 1, d_e)
    W = [rand(d_ff, d_e), rand(d_ff, d_e), rand(d_e, d_ff)]
    assert quant_torch.swiglu(x.double(), *W) is None
    assert quant_torch.swiglu(x, W[0].double(), W[1], W[2]) is None
    assert quant_torch.swiglu(x, W[0], W[1], W[2].T.contiguous().T) is None  # W_down not contiguous
    trained = [w.clone().requires_grad_() for w in W]
    assert quant_torch.swiglu(x, *trained) is None
    if few_token_kernels(["F32"]):
        with torch.no_grad():
            assert quant_torch.swiglu(x, *trained) is not None


def test_swiglu_kernel_silu_within_a_few_ulp():
    """With W_gate the identity, W_up reading a constant 1 and W_down the identity, the kernel
    returns SiLU(x) itself (float32 products with one nonzero term are exact): each entry within
    4 ulp of x / (1 + e^−x) in float64 over both tails. Where e^−x overflows float32 (x < −88.7,
    |SiLU(x)| < 3e-37) the kernel gives −0, as torch's float32 SiLU does."""
    from toycards.engine.torch import quant as quant_torch

    if not few_token_kernels(["F32"]):
        pytest.skip("no C float32 products here")
    n, T = 1024, 8
    x = torch.ones(T, n + 1)
    x[:, :n] = torch.linspace(-110.0, 110.0, n * T).reshape(T, n)
    eye = torch.eye(n + 1)[:n]  # W_gate [n, n + 1]: g_i = x_i
    ones = torch.zeros(n, n + 1)
    ones[:, n] = 1.0  # W_up: u_i = the constant 1
    down = torch.eye(n + 1)[:, :n].contiguous()  # W_down [n + 1, n]: y_i = h_i, y_n = 0
    with torch.no_grad():
        y = quant_torch.swiglu(x, eye, ones, down)[:, :n].double().numpy().ravel()
    g = x[:, :n].double().numpy().ravel()
    with np.errstate(over="ignore"):
        want = g / (1.0 + np.exp(-g))
    normal = np.abs(want) > 1e-35
    ulp = np.spacing(np.abs(want[normal]).astype(np.float32)).astype(np.float64)
    assert (np.abs(y[normal] - want[normal]) / ulp).max() <= 4
    assert np.abs(y[~normal]).max() <= 1e-35


@pytest.mark.parametrize(
    "kinds",
    [
        ("F32", "F32"),
        ("F16", "BF16", "F32"),
        ("Q4_K", "Q4_K", "Q6_K"),
        ("Q8_0", "F16", "Q4_0"),
        ("Q4_1",) * 3,
    ],
)
@pytest.mark.parametrize("lead", [(1, 1), (3,), (9,)], ids=str)
@pytest.mark.parametrize("rows", [(256, 512, 768), (37, 13, 6)], ids=str)
def test_linears_equal_one_product_each(monkeypatch, kinds, lead, rows):
    """ops.linears (consecutive card steps multiplying one X: one C call for few tokens, x rounded to
    int8 once for all the weights whose product rounds it, one loop over the rows of float weights)
    gives exactly the products one at a time, for float32, float16 and bfloat16 weights, block types
    mixed, and row counts that leave rows outside the packed groups of four; on 9 tokens it
    multiplies one weight at a time itself."""
    from toycards.engine.torch import native as glue_cpp

    d_e = 256
    Ws = [swiglu_weight(kind, (n, d_e)) for kind, n in zip(kinds, rows, strict=False)]
    x = rand(*lead, d_e)
    ran = kernel_runs(
        monkeypatch, engine.backend("torch"), "linears"
    )  # the one call, from Python or from C++
    ran_cx = kernel_runs(monkeypatch, cx, "linears") if (cx := glue_cpp.module()) is not None else []
    with torch.no_grad():
        together = ops_torch.linears(x, *Ws)
        alone = tuple(ops_torch.linear(x, W) for W in Ws)
    assert len(together) == len(Ws)
    for a, b in zip(together, alone, strict=True):
        assert a.shape == b.shape and torch.equal(a, b)
    assert any(ran + ran_cx) == (lead != (9,) and few_token_kernels(kinds))


def test_a_pass_imports_no_symbolic_shapes():
    """A forward pass stays clear of the torch functions whose first call imports sympy and torch's
    symbolic shapes (torch.broadcast_shapes: ~500 modules, ~0.3 s and tens of MB, once a process)."""
    import subprocess
    import sys

    script = (
        "import sys, torch\n"
        "from toycards.library import library_card\n"
        "from toycards.models.binding import bind_values\n"
        "from toycards.models.load import _random_weights, module_class\n"
        "card = library_card('llama')\n"
        "bound = bind_values(card.main, {'L': 1, 'H': 4, 'H_kv': 2, 'd_e': 32, 'd_ff': 48, 'ℓ_max': 32,"
        " 'N_V': 50, 'ε': 1e-5})\n"
        "model = module_class(card, 'torch')(bound.hyper, _random_weights(bound, seed=0))\n"
        "cache = model.new_cache()\n"
        "with torch.inference_mode():\n"
        "    model(torch.tensor([[1, 2, 3]]), cache)\n"
        "    model(torch.tensor([[4]]), cache)\n"
        "print('sympy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
