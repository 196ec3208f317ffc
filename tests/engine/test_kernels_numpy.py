"""The NumPy target's single kernels equal the card steps they replace (no torch here).

Where toycards loads a generated NumPy module, the kernel table (models/kernel_table.py) puts the
prelude's GQAttention (one C call, engine/numpy/glue.py) and MoE in place of their steps; these
tests run the prelude functions of modules loaded that way with `ops_numpy.fast` off (the card's
steps, the naive reference) and on (the kernel), every table entry among them, pass by pass over
one KV cache, and whole models both ways. Few tokens of a float32 weight multiply by the C product
(quant_numpy.float_linear), held here to NumPy's own product.
"""

from __future__ import annotations

import numpy as np
import pytest
from gqa_passes import SIZES, run_passes, window

from toycards.engine import ckernels as quant_kernels
from toycards.engine.numpy import glue as glue_numpy
from toycards.engine.numpy import quant as quant_numpy
from toycards.lang.parse import parse
from toycards.library import library_card
from toycards.models.kernel_table import KERNELS
from toycards.models.load import module_namespace
from toycards.runtime.context import Context, KVCache
from toycards.runtime.numpy import ops as ops_numpy

needs_kernels = pytest.mark.skipif(quant_kernels.library() is None, reason="no C compiler: no kernels")


@pytest.fixture(scope="module")
def funcs():
    """The functions of generated NumPy modules as toycards loads them (the kernels in place)."""
    namespace: dict = {}
    halves = parse(library_card("llama").source.replace("rope_pairs", "rope_halves"))
    for card in (library_card("qwen3moe"), library_card("llama"), halves):  # MoE, GQAttention
        namespace.update(module_namespace(card, "numpy"))
    return namespace


rng = np.random.default_rng(0)


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def assert_close(slow, fast, tol):
    worst = float(np.abs(slow - fast).max())
    assert worst <= tol * max(1.0, float(np.abs(slow).max())), f"max |Δ| {worst:.3g}"


def kernel_runs(monkeypatch, name: str = "gq_attention") -> list[bool]:
    """Records, call by call, whether ops_numpy.<name> ran (rather than declined)."""
    real, ran = getattr(ops_numpy, name), []

    def counted(*args):
        out = real(*args)
        ran.append(out is not None)
        return out

    monkeypatch.setattr(ops_numpy, name, counted)
    return ran


# Arguments for every entry of the NumPy kernel table; the tests after this one go further.
TABLE_CASES = {
    # c left out: the adapter gives the kernel the function's default, as the steps take it
    "GQAttention": lambda: (
        rand(1, 5, 4 * 16), rand(1, 5, 2 * 16), rand(1, 5, 2 * 16), 4, 2, "pairs", 1e4,
        np.abs(rand(8)) + 0.5, lambda t_z, t_x: t_z <= t_x,
    ),
    "MoE": lambda: (*moe_inputs(), 2, "renormalise"),
    "MoE_biased": lambda: (*moe_biased_inputs(), 2, "renormalise", "sigmoid", 2.5, 4, 2),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(KERNELS["numpy"]))
def test_every_table_entry_equals_the_steps_it_replaces(funcs, monkeypatch, name):
    """The loaded module's function is the adapter, which calls the kernel once (and gives its
    result where it does not decline); the steps it replaces give the same numbers."""
    entry, fn = KERNELS["numpy"][name], funcs[name]
    assert fn.__wrapped__.__name__ == fn.__name__ and fn is not fn.__wrapped__
    ran = kernel_runs(monkeypatch, entry.name)
    slow, fast = both_ways(fn, *TABLE_CASES[name]())
    assert fast.shape == slow.shape and fast.dtype == np.float32
    assert_close(slow, fast, tol=1e-5)
    assert ran == [not entry.declines or quant_kernels.library() is not None]


@needs_kernels
@pytest.mark.parametrize(
    "layout, half, cap", [("pairs", 8, 0), ("halves", 6, 0), ("none", 8, 2.5), ("pairs", 5, 2.5)]
)
@pytest.mark.parametrize("H, H_kv, lead", [(4, 2, (2,)), (6, 6, ()), (6, 4, (1,))], ids=str)
def test_grouped_query_attention_pass_by_pass(funcs, monkeypatch, layout, half, cap, H, H_kv, lead):
    """GQAttention's C call equals the card's NumPy steps over passes that share one cache: a prompt
    of 37 tokens (on one thread: more than FEW_TOKENS), decoding steps of 1 and 3 tokens and a
    second prompt of 19 on the cache so far, under a sliding window whose width the mask reads from
    its closure. Partial rotary (2·half < d_h), halves, no RoPE, a soft cap, a batch axis and
    ⌈h·H_kv/H⌉ groups of unequal size (6 on 4)."""
    d = 16
    rho = np.abs(rand(half)) + 0.5
    inputs = [(rand(*lead, n, H * d), rand(*lead, n, H_kv * d), rand(*lead, n, H_kv * d)) for n in SIZES]
    ran = kernel_runs(monkeypatch)
    args = (funcs["GQAttention"], ops_numpy, inputs, H, H_kv, layout, rho, window(6), cap)
    for slow, fast in zip(run_passes(*args, fast=False), run_passes(*args, fast=True), strict=True):
        assert fast.shape == slow.shape and fast.dtype == np.float32
        assert_close(slow, fast, tol=3e-6)
    assert ran == [True] * len(SIZES)


@needs_kernels
@pytest.mark.parametrize("d, half", [(16, 8), (20, 10), (64, 32), (128, 16)])
def test_half_cache_pass_by_pass(funcs, monkeypatch, d, half):
    """A float16 KV cache: GQAttention's C call (keys and values rounded to halves as it writes
    them, read back as halves) equals the card's NumPy steps over the same float16 cache (NumPy's own
    rounding) pass by pass, for head sizes of whole vectors (64 and 128: the unrolled ones), with a
    tail, and partly rotated; and the half cache's outputs are not the float32 cache's (the rows were
    rounded) but within float16's relative precision of them."""
    H, H_kv = 6, 2
    rho = np.abs(rand(half)) + 0.5
    inputs = [(rand(1, n, H * d), rand(1, n, H_kv * d), rand(1, n, H_kv * d)) for n in SIZES]
    ran = kernel_runs(monkeypatch)
    args = (funcs["GQAttention"], ops_numpy, inputs, H, H_kv, "halves", rho, window(6), 0)
    exact = run_passes(*args, fast=True)
    slow, fast = run_passes(*args, fast=False, kv_type="f16"), run_passes(*args, fast=True, kv_type="f16")
    for s, f, e in zip(slow, fast, exact, strict=True):
        assert f.dtype == np.float32
        assert_close(s, f, tol=3e-6)
        assert 0 < np.abs(f - e).max() < 4e-3 * np.abs(e).max()
    assert ran == [True] * len(SIZES) * 2


@needs_kernels
@pytest.mark.parametrize("kv_type", ["f32", "f16"])
@pytest.mark.parametrize("H, H_kv, lead", [(4, 2, (2,)), (6, 4, (1,))], ids=str)
def test_sinks_pass_by_pass(funcs, monkeypatch, kv_type, H, H_kv, lead):
    """A finite sink logit per query head (σ, gpt-oss's attn_sinks): GQAttention's C call (the sink in
    each row's maximum and denominator, as ggml_soft_max_add_sinks) equals the card's steps (the keys'
    share of the softmax over [S; σ_h]) over passes that share one cache of `kv_type`: a prompt of 37
    tokens (attend_run's blocks), decoding steps of 1 and 3 tokens and a second prompt, under a
    sliding window. Sinks of −∞ are none: the outputs of a call that leaves σ out, bit for bit."""
    d = 16
    rho = np.abs(rand(d // 2)) + 0.5
    sinks = 3 * rand(H)  # some above every score of a row, some far below
    inputs = [(rand(*lead, n, H * d), rand(*lead, n, H_kv * d), rand(*lead, n, H_kv * d)) for n in SIZES]
    ran = kernel_runs(monkeypatch)
    args = (funcs["GQAttention"], ops_numpy, inputs, H, H_kv, "halves", rho, window(6), 0)
    slow = run_passes(*args, fast=False, kv_type=kv_type, sinks=sinks)
    fast = run_passes(*args, fast=True, kv_type=kv_type, sinks=sinks)
    plain = run_passes(*args, fast=True, kv_type=kv_type)
    none = run_passes(*args, fast=True, kv_type=kv_type, sinks=np.full(H, -np.inf, dtype=np.float32))
    for s, f, p, n in zip(slow, fast, plain, none, strict=True):
        assert_close(s, f, tol=3e-6)
        assert np.abs(f - p).max() > 1e-2  # the sinks take their share
        np.testing.assert_array_equal(n, p)
    assert ran == [True] * len(SIZES) * 3


@needs_kernels
def test_half_cache_on_a_plain_x86_64(tmp_path):
    """The same float16 cache tests with the kernels built for a bare x86-64 (no F16C, no AVX): the
    rounding to halves in C arithmetic alone (ties to even, subnormals, as NumPy rounds) and the
    scalar loops that read the halves back."""
    import platform

    from rebuilt import run_rebuilt

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("an x86-64 build")
    ran = run_rebuilt(
        __file__, "x86-64", tmp_path, "test_half_cache_pass_by_pass or test_halves_as_numpy_rounds"
    )
    assert ran == "." * 5, ran


@needs_kernels
def test_attention_in_avx2_vectors_on_an_avx512_cpu(tmp_path):
    """The attention tests with the kernels built for AVX2 (x86-64-v3: 8-lane vectors, where this
    CPU's own build takes 16): the float16 cache's dot products, the softmax, the weighted values
    (a head of 128 in two passes of 8 registers) and a prompt's blocked scores at the other width.
    Where the CPU has AVX2 and not AVX-512 its own build is that one, and the tests above cover it."""
    from rebuilt import run_rebuilt

    flags = quant_kernels._cpu_flags().split()
    if "avx512f" not in flags or "avx2" not in flags:
        pytest.skip("the CPU's own build is the AVX2 one, or it cannot run it")
    select = "test_half_cache_pass_by_pass or test_grouped_query_attention_pass_by_pass"
    assert run_rebuilt(__file__, "x86-64-v3", tmp_path, select) == "." * (4 + 4 * 3), select


@needs_kernels
def test_halves_as_numpy_rounds():
    """Keys and values written to a float16 cache by the kernel are NumPy's float16 of them, bit for
    bit, across the half range: ties, subnormals, the largest half, overflow to ±∞ (no RoPE, so the
    keys are stored as given), and ±0."""
    H = H_kv = 1
    d = 64
    edges = np.array([0.0, -0.0, 65504.0, 65519.0, 65520.0, -70000.0, 6.0e-8, 2.0**-25, 3 * 2.0**-25,
                      2.0**-14, 2.0**-14 * (1 - 2.0**-11), 1 + 2.0**-11, 1 + 3 * 2.0**-11, -2.5e-6],
                     dtype=np.float32)  # fmt: skip
    rng = np.random.default_rng(5)
    spread = rng.standard_normal(4 * d - len(edges)) * 10.0 ** rng.uniform(-9, 5, 4 * d - len(edges))
    values = np.concatenate([edges, spread.astype(np.float32)]).reshape(4, 1, d)  # 4 tokens
    Q = np.zeros((4, d), dtype=np.float32)
    cache = KVCache("f16")
    ctx = Context(4, cache, ops_numpy)
    rho = np.ones(d // 2, dtype=np.float32)
    K, V = values.reshape(4, d), values.reshape(4, d)[::-1].copy()
    causal = lambda t_z, t_x: t_z <= t_x  # noqa: E731
    out = glue_numpy.gq_attention(Q, K, V, H, H_kv, "none", 1e4, rho, causal, 0, None, ctx.pos, ctx)
    assert out is not None  # the kernel wrote the cache
    Kc, Vc = cache.slots[0][0]
    assert Kc.dtype == np.float16
    with np.errstate(over="ignore"):  # the values past the largest half: ±∞, as they should
        want = values.reshape(4, d).astype(np.float16)
    np.testing.assert_array_equal(Kc[0, :4].view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(Vc[0, :4].view(np.uint16), want[::-1].view(np.uint16))


@needs_kernels
def test_steps_and_kernel_share_one_cache(funcs, monkeypatch):
    """Where the kernel declines (here: a float64 prompt) the steps fill the cache's slot; a later
    float32 step then declines too (the buffers are not float32), and the results still equal the
    steps' all the way; a cache the kernel filled is read by the steps where the kernel declines."""
    H, H_kv, d = 4, 2, 16
    rho = np.ones(d // 2, dtype=np.float32)
    causal = lambda t_z, t_x: t_z <= t_x  # noqa: E731
    ran = kernel_runs(monkeypatch)

    def run(first_dtype, fast_steps):
        cache, outs = KVCache(), []
        for i, n in enumerate((5, 1, 1)):
            Q, K, V = rand(n, H * d), rand(n, H_kv * d), rand(n, H_kv * d)
            if i == 0:
                Q, K, V = (a.astype(first_dtype) for a in (Q, K, V))
            ops_numpy.fast = fast_steps[i]
            try:
                ctx = Context(n, cache, ops_numpy)
                outs.append(funcs["GQAttention"](Q, K, V, H, H_kv, "pairs", 1e4, rho, causal, 0, ctx=ctx))
                ctx.finish()
            finally:
                ops_numpy.fast = True
        return outs

    state = rng.bit_generator.state
    slow = run(np.float32, (False, False, False))
    # float64 first: the kernel declines all three passes; float32 with the steps in the middle: the
    # kernel runs the first and the last
    cases = (((np.float64, (True, True, True)), [False] * 3), ((np.float32, (True, False, True)), [True] * 2))
    for (first, fast), expected in cases:
        rng.bit_generator.state = state  # the same inputs
        ran.clear()
        got = run(first, fast)
        for a, b in zip(slow, got, strict=True):
            assert_close(a, b, tol=1e-5)
        assert ran == expected


@needs_kernels
@pytest.mark.parametrize("fast", [False, True], ids=["steps", "kernel"])
def test_a_cache_reused_for_another_head_size(funcs, fast):
    """After a reset, a cache takes rows of another head size (new buffers; the kernel never writes
    rows of one size into buffers of another); without a reset that is an error on both paths."""
    rho_16, rho_64 = np.ones(8, dtype=np.float32), np.ones(32, dtype=np.float32)
    causal = lambda t_z, t_x: t_z <= t_x  # noqa: E731
    cache = KVCache()

    def run(H, H_kv, d, rho, n=8):
        Q, K, V = rand(n, H * d), rand(n, H_kv * d), rand(n, H_kv * d)
        ops_numpy.fast = fast
        try:
            ctx = Context(n, cache, ops_numpy)
            out = funcs["GQAttention"](Q, K, V, H, H_kv, "pairs", 1e4, rho, causal, 0, ctx=ctx)
            ctx.finish()
        finally:
            ops_numpy.fast = True
        ops_numpy.fast = False
        try:
            ref = funcs["GQAttention"](
                Q, K, V, H, H_kv, "pairs", 1e4, rho, causal, 0, ctx=Context(n, None, ops_numpy)
            )
        finally:
            ops_numpy.fast = True
        assert_close(ref, out, tol=3e-6)

    run(4, 2, 16, rho_16)
    cache.reset()
    run(2, 2, 64, rho_64)
    assert cache.slots[0][0][0].shape[-1] == 64
    with pytest.raises(ValueError, match="changed shape within one cache"):
        run(4, 2, 16, rho_16, n=1)


@needs_kernels
def test_masks_that_differ_only_in_default_arguments_are_not_shared(funcs, monkeypatch):
    """Two layers of one pass whose masks share code and closure but not their default arguments
    (a window width) each get their own mask."""
    H, H_kv, d, n = 4, 2, 16, 9
    rho = np.ones(d // 2, dtype=np.float32)
    masks = [lambda t_z, t_x, w=w: (t_z <= t_x) & (t_x - t_z < w) for w in (2, 100)]
    layers = [(rand(n, H * d), rand(n, H_kv * d), rand(n, H_kv * d)) for _ in masks]
    ran = kernel_runs(monkeypatch)
    outs = {}
    for fast in (False, True):
        ops_numpy.fast, cache = fast, KVCache()
        try:
            ctx = Context(n, cache, ops_numpy)  # one pass: the layers share ctx.memo
            outs[fast] = [
                funcs["GQAttention"](Q, K, V, H, H_kv, "pairs", 1e4, rho, mask, 0, ctx=ctx)
                for (Q, K, V), mask in zip(layers, masks, strict=True)
            ]
        finally:
            ops_numpy.fast = True
    for slow, fast in zip(outs[False], outs[True], strict=True):
        assert_close(slow, fast, tol=3e-6)
    assert ran == [True, True]


def test_an_unhashable_theta_shares_nothing(funcs):
    """θ as a 0-d array (no hash): the layers of a pass share nothing, and the kernel still runs."""
    H, H_kv, d, n = 4, 2, 16, 5
    Q, K, V = rand(n, H * d), rand(n, H_kv * d), rand(n, H_kv * d)
    rho, causal = np.ones(d // 2, dtype=np.float32), (lambda t_z, t_x: t_z <= t_x)
    outs = []
    for fast in (False, True):
        ops_numpy.fast = fast
        try:
            ctx = Context(n, KVCache(), ops_numpy)
            outs.append(
                funcs["GQAttention"](Q, K, V, H, H_kv, "pairs", np.array(1e4), rho, causal, 0, ctx=ctx)
            )
        finally:
            ops_numpy.fast = True
    assert_close(*outs, tol=3e-6)


@needs_kernels
def test_gq_attention_declines_what_it_does_not_cover():
    Q, K, V = rand(3, 4 * 16), rand(3, 2 * 16), rand(3, 2 * 16)
    rho, causal = np.ones(8, dtype=np.float32), (lambda t_z, t_x: t_z <= t_x)
    t = np.arange(1, 4)
    args = (4, 2, "pairs", 1e4, rho, causal, 0, None, t, None)
    assert glue_numpy.gq_attention(Q, K, V, *args) is not None
    assert glue_numpy.gq_attention(Q.astype(np.float64), K, V, *args) is None
    assert glue_numpy.gq_attention(rand(64, 3).T, K, V, *args) is None  # not C order
    assert glue_numpy.gq_attention(Q, K, V, 4, 2, "sideways", 1e4, rho, causal, 0, None, t, None) is None
    assert glue_numpy.gq_attention(Q, rand(3, 3 * 16), V, *args) is None  # K's width is not H_kv·d
    for sinks in (rand(4).astype(np.float64), rand(3), rand(1, 4)):  # not float32 [H]: the steps apply them
        assert glue_numpy.gq_attention(Q, K, V, 4, 2, "pairs", 1e4, rho, causal, 0, sinks, t, None) is None
    # a mask with axes of its own (a padding mask per batch row, say): the steps broadcast it
    padded = lambda t_z, t_x: (t_z <= t_x) & np.ones((2, 1, 1, 1), dtype=bool)  # noqa: E731
    cache = KVCache()
    args = (4, 2, "pairs", 1e4, rho, padded, 0, None, t, Context(3, cache, ops_numpy))
    assert glue_numpy.gq_attention(Q, K, V, *args) is None
    assert cache.slots == []  # nothing written


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_whole_model_both_ways(arch, monkeypatch):
    """A whole generated NumPy model with its kernels and with the card's steps, over a prompt and
    decoding steps on one cache."""
    from toycards.models.binding import bind_values
    from toycards.models.load import _random_weights, module_class

    card = library_card(arch)
    values = {
        "gpt2": {"L": 2, "H": 2, "d_e": 16, "d_mlp": 32, "ℓ_max": 32, "N_V": 50},
        "llama": {"L": 2, "H": 4, "H_kv": 2, "d_e": 32, "d_ff": 48, "ℓ_max": 32, "N_V": 50, "ε": 1e-5},
    }[arch]
    bound = bind_values(card.main, values)
    assert not bound.problems, bound.problems
    weights = {
        k: (v * 20 if v.ndim == 2 else v).astype(np.float32)
        for k, v in _random_weights(bound, seed=3).items()
    }
    model = module_class(card, "numpy")(bound.hyper, weights)
    ran = kernel_runs(monkeypatch)
    outs = {}
    for fast in (False, True):
        ops_numpy.fast, cache = fast, model.new_cache()
        try:
            outs[fast] = [model(np.array([ids]), cache) for ids in ([1, 7, 3, 9, 4, 2], [5], [8])]
        finally:
            ops_numpy.fast = True
    for slow, fast in zip(outs[False], outs[True], strict=True):
        assert_close(slow, fast, tol=1e-5)
    if arch == "llama" and quant_kernels.library() is not None:  # its 2 layers over 3 passes
        assert ran == [True] * 6


@needs_kernels
@pytest.mark.parametrize("rows", [1, 3, 8])
@pytest.mark.parametrize("n, k", [(37, 64), (5, 576), (1, 16)])
def test_float_linear_equals_numpys_product(rows, n, k):
    """Few tokens of a float32 weight by the C product equal NumPy's product (float64 as the
    oracle, float32 sums: within their rounding); many tokens, or another dtype, are NumPy's."""
    x, W = rand(rows, k), rand(n, k)
    y = quant_numpy.float_linear(x, W)
    exact = x.astype(np.float64) @ W.astype(np.float64).T
    assert y is not None and y.shape == (rows, n) and y.dtype == np.float32
    assert np.abs(y - exact).max() <= 1e-5 * np.abs(x).max() * np.abs(W).max() * k
    assert np.array_equal(ops_numpy.linear(x, W), y)
    assert quant_numpy.float_linear(rand(9, k), W) is None  # past FEW_FLOAT_TOKENS
    assert quant_numpy.float_linear(x.astype(np.float64), W) is None
    assert quant_numpy.float_linear(x, np.repeat(W, 2, axis=1)[:, ::2]) is None  # W not C-contiguous


# ── the mixture of experts: the card's dense steps (every expert on every token) and the grouped kernel
def moe_inputs(E=8, d_e=16, d_ff=12, shape=(2, 7)):
    """Router rows scaled so that tokens pick different experts (checked by the test), from a
    generator of their own (the order of the tests in a worker does not change them)."""
    own = np.random.default_rng(3)

    def draw(*shape, scale=1.0):
        return (own.standard_normal(shape) * scale).astype(np.float32)

    return (
        draw(*shape, d_e), draw(E, d_e, scale=2.0), draw(E, d_ff, d_e, scale=0.3),
        draw(E, d_ff, d_e, scale=0.3), draw(E, d_e, d_ff, scale=0.3),
    )  # fmt: skip


@pytest.fixture(scope="module")
def moe():
    return module_namespace(library_card("qwen3moe"), "numpy")["MoE"]


def both_ways(fn, *args):
    try:
        ops_numpy.fast = False
        slow = fn(*args)
        ops_numpy.fast = True
        return slow, fn(*args)
    finally:
        ops_numpy.fast = True


@pytest.mark.parametrize("norm", ["renormalise", "keep"])
@pytest.mark.parametrize("k", [1, 3])
def test_moe_kernel_equals_the_card_steps(moe, norm, k):
    X, W_r, W_gate, W_up, W_down = moe_inputs()
    z = X @ W_r.T
    chosen = np.argsort(-z, axis=-1, kind="stable")[..., :k]  # softmax keeps the order of the logits
    assert len({tuple(c) for c in chosen.reshape(-1, k).tolist()}) > 4, "the router should spread tokens"
    assert_close(*both_ways(moe, X, W_r, W_gate, W_up, W_down, k, norm), tol=1e-5)


def test_moe_kernel_breaks_ties_like_topk(moe):
    """Two experts with the same router row tie on every token: the lower one is chosen, as `topk` does."""
    X, W_r, W_gate, W_up, W_down = moe_inputs(E=4)
    W_r[2] = W_r[1]
    assert_close(*both_ways(moe, X, W_r, W_gate, W_up, W_down, 1, "keep"), tol=1e-5)


def moe_biased_inputs():
    """moe_inputs with a selection bias [E] (between the router's inputs and the experts) large
    enough to change which experts the sigmoid gates pick."""
    X, W_r, W_gate, W_up, W_down = moe_inputs()
    b = (np.random.default_rng(4).standard_normal(W_r.shape[0]) * 0.3).astype(np.float32)
    return X, W_r, b, W_gate, W_up, W_down


@pytest.mark.parametrize("gating", ["softmax", "sigmoid"])
@pytest.mark.parametrize("norm", ["renormalise", "keep"])
def test_moe_biased_kernel_equals_the_card_steps(funcs, gating, norm):
    """MoE_biased (glm4moe's router): the bias picks, the unbiased gates weigh, then × s."""
    X, W_r, b, W_gate, W_up, W_down = moe_biased_inputs()
    z = X @ W_r.T
    P = 1 / (1 + np.exp(-z)) if gating == "sigmoid" else np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    by_bias = np.argsort(-(P + b), axis=-1, kind="stable")[..., :2]
    assert (by_bias != np.argsort(-P, axis=-1, kind="stable")[..., :2]).any(), "the bias should change a choice"
    fn = funcs["MoE_biased"]
    assert_close(*both_ways(fn, X, W_r, b, W_gate, W_up, W_down, 2, norm, gating, 2.5), tol=1e-5)


@pytest.mark.parametrize("k", [1, 2])
def test_moe_biased_weighs_the_input_with_w_b(funcs, k):
    """MoE_biased with w_b = 1 (llama4's weight_before_ffn): each chosen sigmoid gate multiplies its
    expert's input, not its output; steps and kernel against the sum written out by hand."""
    X, W_r, b, W_gate, W_up, W_down = moe_biased_inputs()
    P = 1 / (1 + np.exp(-(X @ W_r.T)))
    chosen = np.argsort(-P, axis=-1, kind="stable")[..., :k]
    want = np.zeros_like(X)
    for j in range(k):
        e = chosen[..., j]
        xs = X * np.take_along_axis(P, e[..., None], axis=-1)  # the weighted input
        g = np.einsum("...d,...fd->...f", xs, W_gate[e])
        h = g / (1 + np.exp(-g)) * np.einsum("...d,...fd->...f", xs, W_up[e])
        want += np.einsum("...f,...df->...d", h, W_down[e])
    args = (X, W_r, 0 * b, W_gate, W_up, W_down, k, "keep", "sigmoid", 1, 1, 1, 1)
    slow, fast = both_ways(funcs["MoE_biased"], *args)
    assert_close(want, slow, tol=1e-5)
    assert_close(want, fast, tol=1e-5)


def routed_by_hand(X, W_r, b, W_gate, W_up, W_down, k, norm, gating, s, n_g, k_g):
    """llama.cpp's build_moe_ffn written out token by token in float64: softmax or sigmoid gates,
    the selection bias, the groups outside the k_g whose two best biased gates sum highest at −∞,
    the top k, their unbiased gates divided by their sum clamped to 6.103515625e-5 (renormalise),
    times s (unless 0 or 1), each chosen SwiGLU expert weighted by its gate."""
    E = W_r.shape[0]
    m, out = E // n_g, np.zeros(X.shape, np.float64)
    for at in np.ndindex(X.shape[:-1]):
        x = X[at].astype(np.float64)
        z = W_r.astype(np.float64) @ x
        p = 1 / (1 + np.exp(-z)) if gating == "sigmoid" else np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        chosen_by = p + b
        if n_g > 1:
            score = [sum(sorted(chosen_by[g * m : (g + 1) * m])[-2:]) for g in range(n_g)]
            kept = sorted(range(n_g), key=lambda g: -score[g])[:k_g]
            chosen_by = np.where([e // m in kept for e in range(E)], chosen_by, -np.inf)
        chosen = sorted(range(E), key=lambda e: -chosen_by[e])[:k]
        w = p[chosen]
        if norm == "renormalise":
            w = w / max(w.sum(), 6.103515625e-5)
        w = w * (s if s not in (0, 1) else 1)
        for e, w_e in zip(chosen, w, strict=True):
            g, u = W_gate[e].astype(np.float64) @ x, W_up[e].astype(np.float64) @ x
            out[at] += w_e * (W_down[e].astype(np.float64) @ (g / (1 + np.exp(-g)) * u))
    return out


@pytest.mark.parametrize(("n_g", "k_g"), [(2, 1), (4, 1)])
@pytest.mark.parametrize("gating", ["softmax", "sigmoid"])
def test_moe_biased_groups_route_as_llama_cpp(funcs, gating, n_g, k_g):
    """MoE_biased with groups of experts (DeepSeek V3's n_group, topk_group): the card's steps and
    the kernel both choose within each token's k_g best groups, as llama.cpp (routed_by_hand)."""
    X, W_r, b, W_gate, W_up, W_down = moe_biased_inputs()
    args = (X, W_r, b, W_gate, W_up, W_down, 2, "renormalise", gating, 2.5)
    want = routed_by_hand(*args, n_g, k_g)
    assert np.abs(want - routed_by_hand(*args, 1, 1)).max() > 1e-3, "the groups should change a choice"
    slow, fast = both_ways(funcs["MoE_biased"], *args, n_g, k_g)
    assert_close(want, slow, tol=1e-5)
    assert_close(want, fast, tol=1e-5)


def test_moe_biased_clamps_a_tiny_sum_of_weights(funcs):
    """Renormalised weights whose sum is below F16's smallest normal are divided by that number
    instead (llama.cpp's clamp in build_moe_ffn, for every architecture): sigmoid gates near 0."""
    X, W_r, b, W_gate, W_up, W_down = moe_biased_inputs()
    X, W_r = np.abs(X), -8 * np.abs(W_r)  # every logit below −20
    assert (X @ W_r.T < -20).all()  # sigmoid < 2e-9: two of them sum below 6.1e-5
    args = (X, W_r, b, W_gate, W_up, W_down, 2)
    slow, fast = both_ways(funcs["MoE_biased"], *args, "renormalise", "sigmoid")
    kept = both_ways(funcs["MoE_biased"], *args, "keep", "sigmoid")[0]
    np.testing.assert_allclose(slow, kept / np.float32(6.103515625e-5), rtol=1e-4, atol=0)
    np.testing.assert_allclose(fast, slow, rtol=1e-4, atol=1e-12)


class _Sub(np.ndarray):
    """An ndarray subclass (as a user's array may be)."""


def test_data_ptr_is_the_address_ctypes_gives(tmp_path):
    """quant_numpy.data_ptr reads an array's data pointer from the array object: the address
    `.ctypes.data` gives, for fresh arrays, views at an offset, transposes, memory maps and
    subclasses, kept right as the arrays they came from are gone; anything else is refused."""
    base = np.arange(60, dtype=np.float32).reshape(6, 10)
    arrays = [base, base[2:, 3:], base.T, base[::2], np.empty(0, np.int8), np.zeros((), np.float64),
              np.ones(7, np.float16)[1:], np.frombuffer(bytearray(32), np.uint8)[5:], base[1:].view(_Sub),
              np.memmap(tmp_path / "m.bin", dtype=np.int32, mode="w+", shape=(4, 4))[1:]]  # fmt: skip
    for a in arrays:
        assert quant_numpy.data_ptr(a) == a.ctypes.data, (type(a), a.shape)
    views = [np.arange(i + 5, dtype=np.int64)[i:] for i in range(50)]  # each the last reference to its base
    assert all(quant_numpy.data_ptr(v) == v.ctypes.data for v in views)
    for other in ([1.0, 2.0], b"abcd", memoryview(b"abcd"), 3.0):
        with pytest.raises(TypeError):
            quant_numpy.data_ptr(other)
