"""The KV cache and batching: incremental decoding equals the full forward pass, both targets.

The reference is the same model's full pass over the whole sequence (which the oracle tests tie to
`transformers`); here the cache must reproduce it whatever the split: prefill k tokens then one at
a time, uneven chunks, past the cache's first capacity (16 slots, then doubling). A batch of
sequences must equal the sequences run one by one, with and without a cache.
"""

from __future__ import annotations

import mmap
import os

import numpy as np
import pytest
from test_models_oracle import assert_logits_close

from toycards.models.load import load
from toycards.runtime import context

TARGETS = ("numpy", "torch")
# qwen3: per-head q/k norm on the cached keys; granite: scaled queries; smollm3: a layer whose
# cached keys are not rotated; gemma: √d_e-scaled embeddings, one K/V head; olmo2: q/k norm over
# the whole width, norms after attention and MLP; gemma2: a window of 4 on alternate layers (the
# cache holds more than the window), soft-capped scores; gemma3: q/k norms, 5 local layers to 1 global
CASES = ("gpt2", "llama", "qwen3", "granite", "smollm3", "gemma", "olmo2", "gemma2", "gemma3")
CASES += ("olmoe", "qwen2moe", "mixtral")  # experts chosen per token; qwen2moe: a gated shared expert
# phi3-partial: fused qkv and gate/up, LongRoPE's long factors on half of each head, its magnitude;
# phi2: parallel attention and MLP from one LayerNorm, half of each head rotated
CASES += ("phi3-partial", "phi2")
CASES += ("stablelm",)  # q/k/v biases, a quarter of each head rotated
CASES += ("stablelm2-12b",)  # per-head q/k LayerNorms on the cached keys, parallel attention and MLP
CASES += ("olmo3",)  # a window of 4 on 3 blocks of 4, over the cache
CASES += ("seed_oss",)  # q/k/v biases, head_dim ≠ d_e/H
CASES += ("ernie4_5",)  # unpermuted Q/K, adjacent-pair rope, head_dim ≠ d_e/H
CASES += ("deepseek2",)  # MLA: the cache keeps the latent and rope part, d_c + d_r per token
CASES += ("apertus",)  # per-head q/k RMSNorm, NEOX rope with rope_freqs, xIELU per block
CASES += ("ernie4_5-moe",)  # dense then softmax-routed MoE blocks with a selection bias and a shared expert
CASES += ("glm4moe",)  # partial rope on halves, q/k/v biases, dense then MoE blocks
CASES += ("llama4",)  # chunks of 8192 (a window the cache keeps) with RoPE, a NoPE block, MoE blocks
CASES += ("gpt-oss",)  # sinks; a window of 4 on alternate blocks (the cache keeps 4 rows there)
CASES += ("hunyuan-dense",)  # RoPE, then per-head q/k RMSNorm on the cached keys
CASES += ("granitehybrid",)  # KV rows in attention blocks, a Mamba-2 State in the others
CASES += ("falcon-h1",)  # KV rows and a Mamba-2 State in every block
CASES += ("lfm2",)  # KV rows in attention blocks, a convolution window in the others (per-block head_count_kv)
CASES += ("jamba",)  # KV rows in attention blocks, a window and a scan state in the Mamba blocks
CASES += ("qwen3next",)  # KV rows in attention blocks, a window and a memory per head in the DeltaNet blocks
CASES += ("nemotron_h",)  # KV rows in the attention block, a Mamba-2 State in two, nothing in the MLP blocks
CASES += ("granitemoeshared", "arcee")  # granite's multipliers, experts and a shared one; ungated ReLU² MLP
CASES += ("command-r", "cohere2")  # scaled tied logits; a window of 4 with RoPE on 3 layers of 4, NoPE on 1


def tol(want: np.ndarray) -> float:
    """Same model, same weights: only the order of float32 sums changes, which moves a logit by a few
    units in the last place of the largest (~1e-6 of it; BLAS kernels differ between CPUs)."""
    return max(1e-5, 1e-6 * float(np.abs(want).max()))


@pytest.fixture(scope="module")
def model(oracle_files):
    loaded: dict[tuple[str, str], object] = {}

    def get(case: str, target: str):
        if (case, target) not in loaded:
            loaded[case, target] = load(oracle_files(case, "F32").path, target=target)
        return loaded[case, target]

    return get


def run(m, ids: np.ndarray, cache=None) -> np.ndarray:
    """`m(ids[B, T], cache)` as float32 NumPy `[B, T, N_V]`, for either target."""
    import torch

    with torch.no_grad():
        out = m(np.asarray(ids, dtype=np.int64), cache)
    return out.numpy() if torch.is_tensor(out) else np.asarray(out)


def decode_in_chunks(m, ids: np.ndarray, sizes: list[int], cache=None) -> np.ndarray:
    """Logits of `ids[B, T]` fed through one cache (a new one by default) in chunks of the given sizes."""
    assert sum(sizes) == ids.shape[-1]
    cache = m.new_cache() if cache is None else cache
    parts, start = [], 0
    for n in sizes:
        parts.append(run(m, ids[:, start : start + n], cache))
        start += n
        assert cache.length == start, f"cache holds {cache.length} tokens after {start}"
    return np.concatenate(parts, axis=1)


def token_ids(n_vocab: int, batch: int, length: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n_vocab, size=(batch, length))


@pytest.mark.parametrize("prefill", [1, 5])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("target", TARGETS)
def test_prefill_then_one_token_at_a_time_equals_full_pass(model, target, case, prefill):
    m = model(case, target)
    ids = token_ids(m.hp["N_V"], 1, 40)  # 40 tokens: the cache grows past 16 and 32 slots
    full = run(m, ids)
    got = decode_in_chunks(m, ids, [prefill] + [1] * (40 - prefill))
    assert_logits_close(got[0], full[0], tol(full[0]), f"{case} {target} prefill {prefill} then 1 by 1")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("target", TARGETS)
def test_uneven_chunks_on_a_batch(model, target, case):
    m = model(case, target)
    ids = token_ids(m.hp["N_V"], 3, 23, seed=1)
    full = run(m, ids)
    got = decode_in_chunks(m, ids, [7, 1, 9, 2, 4])
    for b in range(3):
        assert_logits_close(got[b], full[b], tol(full[b]), f"{case} {target} chunks 7,1,9,2,4, sequence {b}")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("target", TARGETS)
def test_batch_of_three_equals_three_single_runs(model, target, case):
    m = model(case, target)
    ids = token_ids(m.hp["N_V"], 3, 12, seed=2)
    batch = run(m, ids)
    assert batch.shape == (3, 12, m.hp["N_V"])
    for b in range(3):
        single = m.logits(ids[b].tolist())
        assert_logits_close(batch[b], single, tol(single), f"{case} {target} batch row {b} vs a single run")


@pytest.mark.parametrize("target", TARGETS)
def test_two_caches_do_not_interfere(model, target):
    """Interleaving two generations, each with its own cache, changes neither."""
    m = model("llama", target)
    a, b = token_ids(m.hp["N_V"], 1, 10, seed=3), token_ids(m.hp["N_V"], 1, 10, seed=4)
    cache_a, cache_b, got_a, got_b = m.new_cache(), m.new_cache(), [], []
    for t in range(10):
        got_a.append(run(m, a[:, t : t + 1], cache_a))
        got_b.append(run(m, b[:, t : t + 1], cache_b))
    for got, ids, which in ((got_a, a, "a"), (got_b, b, "b")):
        want = run(m, ids)[0]
        assert_logits_close(np.concatenate(got, 1)[0], want, tol(want), f"{target} cache {which}")


@pytest.mark.parametrize("case", ["llama", "olmo3"])  # olmo3: a sliding window over the cache
@pytest.mark.parametrize("target", TARGETS)
def test_a_reset_cache_keeps_its_buffers_and_equals_a_new_one(model, target, case):
    """After `reset`, a cache forgets its tokens but keeps its buffers: the next sequence, shorter
    than the last (the old rows past it still there), longer than its buffers, or of another batch
    size, gives what a new cache gives."""
    m = model(case, target)
    cache = m.new_cache()
    for t in range(3):
        run(m, token_ids(m.hp["N_V"], 1, 1, seed=20 + t), cache)
    run(m, token_ids(m.hp["N_V"], 1, 14, seed=5), cache)
    kept = [list(entry[0]) for entry in cache.slots]
    for ids, what in (
        (token_ids(m.hp["N_V"], 1, 6, seed=6), "a shorter sequence"),
        (token_ids(m.hp["N_V"], 1, 40, seed=7), "a sequence past the buffers"),
        (token_ids(m.hp["N_V"], 2, 9, seed=8), "a batch of two"),
    ):
        cache.reset()
        assert cache.length == 0
        got = decode_in_chunks(m, ids, [ids.shape[1] - 2, 1, 1], cache)
        want = decode_in_chunks(m, ids, [ids.shape[1]])
        for b in range(ids.shape[0]):
            assert_logits_close(got[b], want[b], tol(want[b]), f"{case} {target} after a reset: {what}")
        if what == "a shorter sequence":
            assert all(e[0][k] is buf for e, bufs in zip(cache.slots, kept) for k, buf in enumerate(bufs))


def run_last(m, ids: np.ndarray, cache=None) -> np.ndarray:
    """`m(ids, cache, last=True)`: the last token's logits alone, [B, 1, N_V]."""
    import torch

    with torch.no_grad():
        out = m(np.asarray(ids, dtype=np.int64), cache, last=True)
    return out.numpy() if torch.is_tensor(out) else np.asarray(out)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("target", TARGETS)
def test_last_token_alone_equals_the_full_pass(model, target, case):
    """`last=True` (what decoding asks for: llama.cpp computes the last token's logits alone too)
    gives the full pass's last row, for a prompt through a cache, single tokens after it, a chunk,
    and without a cache; a batch of two."""
    m = model(case, target)
    ids = token_ids(m.hp["N_V"], 2, 18, seed=5)
    full = run(m, ids)
    cache, start = m.new_cache(), 0
    for n in (9, 1, 1, 4, 1):
        got = run_last(m, ids[:, start : start + n], cache)
        start += n
        assert got.shape == (2, 1, m.hp["N_V"]) and cache.length == start
        for b in range(2):
            want = full[b, start - 1 : start]
            assert_logits_close(got[b], want, tol(want), f"{case} {target} last of {start}")
    uncached = run_last(m, ids[:, :7])
    for b in range(2):
        assert_logits_close(
            uncached[b], full[b, 6:7], tol(full[b, 6:7]), f"{case} {target} last of 7, no cache"
        )


def test_every_library_card_computes_the_last_token_alone_when_asked():
    """Each family card's generated forward keeps only the last column after its last attention
    (the cache plan's cut point), rather than computing every token's logits and dropping them."""
    from toycards.codegen import generate_source
    from toycards.library import ARCH_CARDS, library_card

    encoders = {"bert", "nomic-bert", "modern-bert"}  # tokens read later ones
    for name in sorted(set(ARCH_CARDS.values()) - encoders):
        for target in TARGETS:
            src = generate_source(library_card(name), target)
            assert "if last:" in src and "ctx.keep_last()" in src, (name, target)


@pytest.mark.parametrize("target", TARGETS)
def test_cache_in_zero_pages_equals_the_full_pass(model, target, monkeypatch):
    """Cache buffers made of on-demand zero pages (context.zero_pages; here every buffer, whatever
    its size) decode as the full pass does."""
    monkeypatch.setattr(context, "LAZY_BYTES", 1)
    m = model("qwen3", target)
    ids = token_ids(m.hp["N_V"], 2, 40, seed=3)
    full = run(m, ids)
    cache = m.new_cache()
    got = np.concatenate(
        [run(m, ids[:, :5], cache)] + [run(m, ids[:, t : t + 1], cache) for t in range(5, 40)], 1
    )
    if target == "numpy":  # torch.frombuffer keeps no Python base to look at
        buffers = [b for slot in cache.slots for b in slot[0] if b is not None]
        assert buffers and all(isinstance(_memory_of(b), mmap.mmap) for b in buffers)
    for b in range(2):
        assert_logits_close(got[b], full[b], tol(full[b]), f"qwen3 {target} zero-page cache, sequence {b}")


def _memory_of(a: np.ndarray):
    while isinstance(a, np.ndarray):
        a = a.base
    return a.obj if isinstance(a, memoryview) else a


def _anon_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("RssAnon:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="no /proc/self/status")
@pytest.mark.parametrize("target", TARGETS)
def test_cache_rows_not_yet_written_take_no_memory(target):
    """A 24 MiB cache buffer (ops.zeros_rows) costs memory only for the rows written: the doubling
    leaves up to half of every buffer unused."""
    import importlib

    ops = importlib.import_module(f"toycards.runtime.{target}.ops")
    like = np.zeros((2, 3, 1, 64), np.float32)
    if target == "torch":
        import torch

        like = torch.from_numpy(like)
    before = _anon_kib()
    buf = ops.zeros_rows(like, 1 << 14)  # 2·3·16384·64 float32: 24 MiB
    assert tuple(buf.shape) == (2, 3, 1 << 14, 64)
    buf[..., :16, :] = 1.0
    grown = _anon_kib() - before
    assert grown < 4 * 1024, f"{grown} KiB resident for 16 rows written"
    assert float(buf[..., 16:, :].sum()) == 0.0 and float(buf[..., :16, :].sum()) == 2 * 3 * 16 * 64
