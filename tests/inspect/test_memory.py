"""Memory per context (toycards/inspect/memory.py and footprint.py, `describe --memory`).

References: for toycards' cache, the runtime itself: each oracle file (tests/oracle: a tiny random
model per library family) loaded with `toycards.load`, a prompt of n tokens run through
`new_cache(kv_type)`, then the bytes of every array the cache holds (keys and values, states,
token ids); for the weights, the `gguf` package's reader; for the llama.cpp column, the Hugging
Face config each oracle file was written from, with llama.cpp's sizing rules written out here by
hand (n_ctx padded to 256 cells, a sliding-window layer ⌈min(n_ctx, n_swa + n_ubatch)/256⌉·256
cells, a recurrent layer (d_conv − 1)·d_inner + d_state·d_inner floats).
"""

from __future__ import annotations

import json
import warnings

import gguf
import numpy as np
import pytest
from cli_run import cli, one_error

from toycards.errors import ToycardsError
from toycards.inspect.cache_rows import cache_rows, touched_bytes
from toycards.inspect.describe import describe
from toycards.inspect.memory import cache_bytes, memory_report, parse_contexts
from toycards.models.load import load
from toycards.runtime.model_base import CacheRecomputes

# llama: GQA 4/2; gemma3: a window of 4 on layers 1–5, layer 6 global; qwen3moe: head_dim 128 ≠ d_e/H;
# mamba: a state per block, no KV rows; gpt2: fused q/k/v, every head's K and V from one matrix
FAMILIES = ("llama", "gemma3", "qwen3moe", "mamba", "gpt2")
CONTEXTS = (5, 20, 40)  # a cache's first 16 rows, then 40 and 80 (rows grow by doubling)


@pytest.fixture(scope="module")
def described(oracle_files):
    held = {}

    def get(case: str):
        if case not in held:
            held[case] = describe(oracle_files(case, "F32").path)
        return held[case]

    return get


@pytest.fixture(scope="module")
def loaded(oracle_files):
    held = {}

    def get(case: str, target: str):
        if (case, target) not in held:
            held[case, target] = load(oracle_files(case, "F32").path, target=target)
        return held[case, target]

    return get


def held_bytes(cache) -> int:
    """The bytes of every array a runtime cache holds: KV buffers, states, token ids."""
    arrays = [b for slot in cache.slots for b in slot[0] if b is not None]
    arrays += [a for state in cache.states for a in state]
    arrays += [cache.ids] if cache.ids is not None else []
    return sum(a.nbytes if isinstance(a, np.ndarray) else a.numel() * a.element_size() for a in arrays)


def prefill(model, n: int, batch: int, kv_type: str):
    """A new cache of `model` after a prompt of n tokens of `batch` sequences, fed as generation
    feeds one (passes of `ubatch` tokens)."""
    import torch

    cache = model.new_cache(kv_type)
    ids = np.random.default_rng(n).integers(0, model.hp["N_V"], size=(batch, n))
    with torch.no_grad():
        model.feed(ids, cache)
    assert cache.length == n
    return cache


# ── toycards' cache: the estimate against what the runtime allocates ─────────────────────
@pytest.mark.parametrize("target", ("numpy", "torch"))
@pytest.mark.parametrize("kv_type", ("f32", "f16"))
@pytest.mark.parametrize("case", FAMILIES)
def test_the_cache_estimate_is_what_new_cache_allocates(described, loaded, case, kv_type, target):
    card, model = described(case), loaded(case, target)
    report = memory_report(card, CONTEXTS, kv_type)
    for n, column in zip(CONTEXTS, report.columns, strict=True):
        got = held_bytes(prefill(model, n, 1, kv_type))
        mine = column.toycards
        assert mine["kv_allocated"] + mine["state"] + mine["token_ids"] == got, (case, n, mine, got)
        assert cache_bytes(card, n, kv_type) == got


@pytest.mark.parametrize("target", ("numpy", "torch"))
@pytest.mark.parametrize("case", ("llama", "gemma3"))
def test_a_long_prompt_in_micro_batches_holds_what_the_estimate_says(described, loaded, case, target):
    """1,200 tokens go through in passes of 512, 512 and 176; gemma3's sliding layers (a window of
    4) then hold the rows their window reaches, its global layer every token."""
    card, model = described(case), loaded(case, target)
    mine = memory_report(card, (1200,), "f16").columns[0].toycards
    assert mine["kv_allocated"] == held_bytes(prefill(model, 1200, 1, "f16"))


@pytest.mark.parametrize("case", ("llama", "gemma3", "mamba"))
def test_a_batch_of_sequences_holds_a_cache_row_per_sequence(described, loaded, case):
    card, model = described(case), loaded(case, "numpy")
    assert cache_bytes(card, 20, "f16", batch=3) == held_bytes(prefill(model, 20, 3, "f16"))


def test_a_state_is_the_same_at_every_context_and_kv_rows_are_none(described):
    """Mamba keeps per block the convolution's last d_conv inputs and the d_inner × d_state scan
    state, float32 whatever the KV cache type: 2 blocks · 64 · (4 + 8) · 4 bytes."""
    report = memory_report(described("mamba"), (16, 4096), "f16")
    for column in report.columns:
        assert column.toycards["state"] == 2 * 64 * (4 + 8) * 4
        assert column.toycards["kv_allocated"] == 0 and column.llama_cpp["kv"] == 0


def test_growth_follows_the_runtime_kv_cache(described):
    """Rows after a prompt, then after steps of one token: 16 at least, doubling past the end."""
    assert [cache_rows(n) for n in (1, 8, 9, 100)] == [16, 16, 18, 200]
    assert cache_rows(20, *[1] * 20) == 40 and cache_rows(20, *[1] * 21) == 82


def test_resident_rows_are_the_pages_the_written_rows_touch(described):
    """A buffer of 64 KiB or more is zero pages mapped as they are written. A prompt of 512 tokens of
    tiny llama (f32, H_kv·d_h = 2·16) tells the cache to expect 512 tokens: buffers of 512 rows, all
    written. A 1024-row buffer of 2 heads with 512 rows written per head touches half its pages."""
    column = memory_report(described("llama"), (512,), "f32").columns[0].toycards
    assert column["kv_allocated"] == 2 * 2 * 512 * 32 * 4
    assert column["kv_resident"] == column["kv_allocated"]
    assert touched_bytes(2, 1024, 512, 16 * 4) == 2 * 1024 * 16 * 4 // 2


# ── weights ─────────────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize("case", ("llama", "gemma3"))
def test_the_weights_row_is_the_files_tensor_data(oracle_files, described, case):
    path = oracle_files(case, "F32").path
    stored = sum(int(t.n_bytes) for t in gguf.GGUFReader(path).tensors)
    report = memory_report(described(case), (16,))
    assert report.weights.total_stored == stored
    assert report.columns[0].llama_cpp["weights"] == stored


def test_an_f32_file_is_held_as_stored_plus_the_cards_constant_fills(oracle_files, described):
    """Every tensor of the llama file is bound, read in the file's pages or copied; the card's ρ
    (no rope_freqs tensor: `or 1`) is a fill of d_h/2 float32 ones."""
    f = oracle_files("llama", "F32")
    d_h = f.config.hidden_size // f.config.num_attention_heads
    w = memory_report(described("llama"), (16,)).weights
    assert w.mapped + w.copies == w.total_stored + d_h // 2 * 4
    assert w.packed_first == w.packed_later == 0


# ── llama.cpp's column, by its rules written out ────────────────────────────────────────
def pad(n: int) -> int:
    return -(-n // 256) * 256


def llama_cpp_kv(config, n: int, bytes_per: float, layer_window) -> int:
    """K and V of every layer: cells × H_kv · head_dim · bytes, a windowed layer's cells capped."""
    d_h = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    row = config.num_key_value_heads * d_h * bytes_per
    total = 0
    for il in range(config.num_hidden_layers):
        window = layer_window(il)
        cells = pad(n) if window is None else pad(min(pad(n), window + min(n, 512)))
        total += int(2 * cells * row)
    return total


@pytest.mark.parametrize("n", (5, 300, 2048, 8192))
def test_llama_cpp_kv_cache_for_llama_pads_the_context_to_256_cells(oracle_files, described, n):
    config = oracle_files("llama").config
    for kv_type, bytes_per in (("f16", 2), ("f32", 4), ("q8_0", 34 / 32)):
        column = memory_report(described("llama"), (n,), kv_type).columns[0].llama_cpp
        assert column["kv"] == llama_cpp_kv(config, n, bytes_per, lambda il: None), kv_type
        assert column["kv_sliding"] == 0


@pytest.mark.parametrize("n", (5, 300, 2048))
def test_llama_cpp_sliding_window_layers_keep_the_window_and_a_ubatch(oracle_files, described, n):
    config = oracle_files("gemma3").config
    local = lambda il: config.sliding_window if il % 6 < 5 else None  # noqa: E731 - llama.cpp's pattern 6
    column = memory_report(described("gemma3"), (n,)).columns[0].llama_cpp
    assert column["kv"] + column["kv_sliding"] == llama_cpp_kv(config, n, 2, local)
    assert column["kv"] == llama_cpp_kv(config, n, 2, lambda il: None) // config.num_hidden_layers


def test_llama_cpp_recurrent_state_drops_the_convolutions_oldest_column(oracle_files, described):
    c = oracle_files("mamba").config
    per_layer = ((c.conv_kernel - 1) * c.intermediate_size + c.state_size * c.intermediate_size) * 4
    for batch in (1, 2):
        column = memory_report(described("mamba"), (64,), batch=batch).columns[0].llama_cpp
        assert column["recurrent"] == batch * c.num_hidden_layers * per_layer


# ── contexts ────────────────────────────────────────────────────────────────────────────
def test_contexts_take_max_and_k_and_stop_at_learned_positions(described):
    gpt2 = described("gpt2")
    trained = gpt2.bound.hyper["ℓ_max"]
    assert parse_contexts("max,2k,64,64", described("llama")) == (64, 128, 2048)  # llama: ℓ_max 128
    assert parse_contexts(None, gpt2) == (trained,)  # the defaults past its positions left out
    with pytest.raises(ToycardsError, match="learned positions"):
        parse_contexts(str(trained + 1), gpt2)
    with pytest.raises(ToycardsError, match="whole number"):
        parse_contexts("0", gpt2)


# ── the command line ────────────────────────────────────────────────────────────────────
def test_describe_memory_prints_a_column_per_context_and_the_formulas(oracle_files):
    r = cli("describe", oracle_files("llama").path, "--memory", "--ctx", "20,max", "--explain")
    assert r.exit_code == 0, r.output
    assert "ℓ = 20" in r.stdout and "ℓ = 128" in r.stdout
    assert "2 · L · B · ℓ · H_kv·d_h · 4 bytes" in r.stdout
    assert "2 · L · B · ⌈ℓ/256⌉·256 · H_kv·d_h · 2 bytes" in r.stdout
    assert "activations at peak (estimate)" in r.stdout


def test_describe_memory_json_carries_the_figures(oracle_files, described):
    r = cli("describe", oracle_files("gemma3").path, "--memory", "--ctx", "20", "--format", "json")
    assert r.exit_code == 0, r.output
    memory = json.loads(r.stdout)["memory"]
    assert memory["kv_cache"] == {"toycards": "f32", "llama.cpp": "f16"}
    assert memory["contexts"][0]["toycards"]["kv_allocated"] == cache_bytes(described("gemma3"), 20)


@pytest.mark.parametrize(
    "args, said",
    [
        (("--kv-cache", "f16"), "go with --memory"),
        (("--memory", "--ctx", "0"), "--ctx 0"),
        (("--memory", "--format", "html"), "terminal, text or json"),
    ],
)
def test_describe_memory_errors_are_one_line(oracle_files, args, said):
    assert said in one_error(cli("describe", oracle_files("llama").path, *args))


# ── a card of one's own: the same rules, no architecture named ───────────────────────────
OWN_CARD = """toycards 1
Algorithm: Ṽ ← Scores(Q, K, V | Mask)
/* attention written out in the card: scaled scores, masked, softmax over the context */
Input:
  Q ∈ ℝ^{n×ℓ_x}
  K ∈ ℝ^{n×ℓ_z}
  V ∈ ℝ^{n×ℓ_z}
Output: Ṽ ∈ ℝ^{n×ℓ_x}
Hyperparameters: Mask ∈ {0,1}^{ℓ_z×ℓ_x}
1  S ← K^⊺ · Q / √n
2  for t_z ∈ [ℓ_z], t_x ∈ [ℓ_x] do
3    if ¬Mask[t_z, t_x] then S[t_z, t_x] ← −∞
4  end
5  return Ṽ = V · softmax(S)

Algorithm: P ← Net(x | θ)
/* token embedding, then per layer attention over the last w tokens, unembedding */
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{N_V×ℓ}
Hyperparameters:
  L ∈ ℕ = 3  from "{arch}.block_count"
  d ∈ ℕ = 8  from "{arch}.width"
  w ∈ ℕ = 5  from "{arch}.window"
  N_V ∈ ℕ = 11
Parameters:
  E ∈ ℝ^{d×N_V}  from "token_embd.weight"^⊺
  for l ∈ [L], in "blk.{l-1}.":
    A_l ∈ ℝ^{d×d}  from "a.weight"
  U ∈ ℝ^{N_V×d}  from "output.weight"
1  ℓ ← length(x)
2  for t ∈ [ℓ]: e_t ← E[:, x[t]]
3  X ← [e_1, …, e_ℓ]
4  for l = 1, 2, …, L do
5    X ← X + Scores(A_l · X, A_l · X, X | Mask[t_z, t_x] = ⟦t_z ≤ t_x ∧ t_x − t_z < w⟧)
6  end
7  return P = softmax(U · X)
"""


@pytest.fixture(scope="module")
def own_file(tmp_path_factory):
    import toycards

    path = tmp_path_factory.mktemp("own") / "own.gguf"
    toycards.save(load(OWN_CARD), path, arch="own")
    return path


def test_a_card_of_ones_own_is_sized_by_the_same_walk(own_file):
    """Each layer's Scores call extends K = A_l · X and V = X, d = 8 entries per token each; its mask
    is a window of w = 5 tokens, which llama.cpp would give ⌈min(n_ctx, 5 + n_ubatch)/256⌉·256 cells."""
    card, model = describe(own_file), load(own_file)
    report = memory_report(card, CONTEXTS + (2048,), "f16", batch=2)
    for n, column in zip(CONTEXTS, report.columns[:-1], strict=True):
        mine = column.toycards
        assert mine["kv_allocated"] + mine["state"] + mine["token_ids"] == held_bytes(
            prefill(model, n, 2, "f16")
        )
    theirs = report.columns[-1].llama_cpp
    assert theirs["kv"] == 0
    assert theirs["kv_sliding"] == 3 * 2 * 2 * pad(5 + 512) * 8 * 2  # L · (K, V) · B · cells · d · f16
    assert "2 · L · B · min(ℓ, 5 − 1 + min(ℓ, 256)) · d · 2 bytes" in dict(report.formulas).get(
        "toycards KV cache, Scores's K, V (in Net), window 5", ""
    )


def test_a_card_the_cache_cannot_follow_keeps_the_token_ids(tmp_path):
    """A mask that lets a token see later ones: decoding reruns the sequence, so the cache holds the
    ids so far (int64), whatever the cache type."""
    import toycards

    path = tmp_path / "open.gguf"
    toycards.save(load(OWN_CARD.replace("⟦t_z ≤ t_x ∧ t_x − t_z < w⟧", "1")), path, arch="own")
    card, model = describe(path), load(path)
    report = memory_report(card, CONTEXTS, "f32")
    for n, column in zip(CONTEXTS, report.columns, strict=True):
        assert column.toycards["token_ids"] == n * 8 and column.toycards["kv_allocated"] == 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CacheRecomputes)  # said once per model
            assert held_bytes(prefill(model, n, 1, "f32")) == n * 8
    assert any("keeps the token ids" in note for note in report.notes)
