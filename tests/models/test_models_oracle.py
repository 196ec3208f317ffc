"""Whole models against Hugging Face `transformers`: the oracle's GGUF files run by toycards.

Each case (`tests/oracle/cases.py`) is a tiny `transformers` model with random weights, written to
GGUF the way llama.cpp's converter does (Llama Q/K rows permuted). `transformers` loads that file
back (`gguf_file=`), toycards loads it with each target, and all of them must give the same logits.
Also here: the numpy and torch targets agree on every library card that binds tensors.

Tolerances. F32: |Δ| ≤ 1e-4 (the issue's bound; measured ≈ 1e-5 on logits of up to ~30, float32
rounding in a different order of operations). F16 and Q8_0: the reference is `expected_logits`,
the float model whose weights are exactly the dequantized stored values. F16 → F32 is exact, and a
Q8_0 weight is d·q with d an F16 scale and q an int8, a product of at most 11 + 7 significant bits,
exact in float32; so a correct loader sees bit-identical weights and the F32 bound applies
unchanged. (How far quantization moves logits from the float model is the oracle self-check's
business; here we only show the file is really quantized: that distance is far above 1e-4.)
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from oracle.hf_gguf import hf_logits, tiny_model, transformers_reads, write_gguf
from test_save_peer import _llama_cpp_python

from toycards.errors import ToycardsError
from toycards.lang import ir
from toycards.lang.printer import render_card
from toycards.library import card_names, library_card
from toycards.models.binding import bind_values
from toycards.models.load import load

TARGETS = ("numpy", "torch")
LENGTHS = (1, 7, 64)
# llama: GQA 4/2 untied; llama-tied: GQA, tied output; granite, smollm3, gemma, olmo2: transformers
# cannot read their files back; gemma2, gemma3: it reads them without their soft-caps, query scale
# and per-layer RoPE: the in-memory model only (and llama.cpp, where installed)
FAMILIES = ("gpt2", "llama", "llama-tied", "granite", "smollm3", "gemma", "olmo2", "gemma2", "gemma3")
FAMILIES += ("olmoe", "qwen3moe", "qwen2moe", "mixtral")  # mixtures of experts (mixtral: arch llama)
# phi3: fused attn_qkv and ffn_up (LongRoPE, which transformers switches by length: test_phi3.py);
# phi2: parallel attention and MLP, partial rotary, biases, an output bias
FAMILIES += ("phi3", "phi2")
FAMILIES += ("stablelm",)  # LayerNorm, q/k/v biases, partial rotary (no biases: test_stablelm.py)
FAMILIES += ("olmo3",)  # olmo2.card on an OLMo 3 file: sliding window on 3 blocks of 4
FAMILIES += ("phi2-fused", "phi3-split")  # the other q/k/v layout llama.cpp reads: parts of attn_qkv, or not
FAMILIES += ("stablelm2-12b",)  # StableLM 2 12B: per-head q/k LayerNorms, parallel block (stablelm_parallel)
FAMILIES += ("granitemoe", "arcee")  # granite's multipliers with experts; llama with an ungated ReLU² MLP
FAMILIES += ("granitemoeshared",)  # granitemoe.card on a file with a shared expert (GraniteMoeShared)
# EXAONE 4.0: post-norms, per-head q/k norms; without windows (1.2B) and with (64 blocks: sliding with
# RoPE, global without); Seed-OSS: llama with q/k/v biases and head_dim ≠ d_e/H
FAMILIES += ("exaone4", "exaone4-swa", "seed_oss")
FAMILIES += ("ernie4_5",)  # ERNIE 4.5: unpermuted Q/K (adjacent-pair rope), head_dim ≠ d_e/H, tied
FAMILIES += ("deepseek2",)  # MLA (absorbed: one latent cached per token), dense block 1, experts after
FAMILIES += ("deepseek3",)  # deepseek2.card on V3: sigmoid routing, selection bias, expert groups
FAMILIES += (
    "apertus",
)  # Apertus: per-head q/k RMSNorm, llama3 rope_freqs, an ungated xIELU MLP (per-block metadata)
FAMILIES += ("ernie4_5-moe",)  # ERNIE 4.5 MoE: dense, then softmax-routed experts with a selection bias
FAMILIES += (
    "glm4moe",
)  # GLM-4.5: partial NEOX rope, dense then sigmoid-routed experts with a selection bias
FAMILIES += (
    "llama4",
)  # Llama 4: chunked RoPE blocks with q/k L2 norms, a NoPE block; input-weighted experts
FAMILIES += ("gpt-oss",)  # attention sinks, sliding and full blocks alternating, YaRN, clamped SwiGLU experts
FAMILIES += ("mamba2",)  # Mamba-2: a state per block, no attention; 8 heads in 2 groups (test_mamba2.py)
FAMILIES += ("hunyuan-dense",)  # Hunyuan: RoPE, then per-head q/k RMSNorm; NTK-alpha base; tied
FAMILIES += ("granitehybrid", "granitehybrid-dense")  # Mamba-2 and NoPE GQA blocks; experts or an MLP
FAMILIES += ("falcon-h1",)  # GQA (RoPE on halves) and a Mamba-2 mixer side by side; µP folded into weights
FAMILIES += (
    "lfm2",
)  # LFM2: gated short convolutions and GQA, per the per-block head_count_kv (test_lfm2.py)
FAMILIES += ("jamba",)  # Jamba: Mamba and NoPE GQA blocks (per-block head_count_kv), dense and expert MLPs
FAMILIES += ("qwen3next",)  # Qwen3-Next: gated DeltaNet and gated GQA blocks, experts (test_qwen3next.py)
FAMILIES += ("nemotron_h",)  # Nemotron-H: Mamba-2, NoPE GQA and ReLU² MLP blocks (test_nemotron_h.py)
# Command R: parallel block, bias-free LayerNorm, tied logits × logit_scale; R+: per-head q/k LayerNorm
# (64 blocks); Command R7B (cohere2): sliding layers with RoPE, global ones without
FAMILIES += ("command-r", "command-r-plus", "cohere2")
FAMILIES += ("bert",)  # an encoder: its output is each token's embedding, [ℓ, d_e] (test_bert.py)
FAMILIES += ("nomic-bert",)  # bert with RoPE, no positions, one attn_qkv, SwiGLU (test_nomic_bert.py)
ENCODERS = ("bert", "nomic-bert", "modern-bert")  # llama.cpp gives them embeddings, not logits to compare
FAMILIES += ("modern-bert",)  # pre-norm encoder, global and symmetric-window blocks (test_modern_bert.py)
QUANTIZED = [(c, "F16") for c in ("gpt2", "llama", "llama-tied")] + [(c, "Q8_0") for c in FAMILIES]
ATOL = 1e-4
# (case, file type) of the quantized tests: F16 and Q8_0 for the first families, Q8_0 (blocks of 32
# with an F16 scale, the harder of the two) for those added since, to keep the suite quick


def worst(got: np.ndarray, want: np.ndarray) -> str:
    """Where two logit arrays `[ℓ, N_V]` differ most, for failure messages."""
    diff = np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))
    t, v = np.unravel_index(np.nanargmax(diff), diff.shape)
    return (
        f"max |Δ| = {diff[t, v]:.3g} at position {t}, vocab id {v} "
        f"(got {got[t, v]:.6g}, want {want[t, v]:.6g}; max |want| = {np.abs(want).max():.3g})"
    )


def assert_logits_close(got: np.ndarray, want: np.ndarray, atol: float = ATOL, what: str = "") -> None:
    """Same shape, |Δ| ≤ atol everywhere, and the same argmax at every position."""
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    assert np.isfinite(got).all(), f"{what}: non-finite logits"
    diff = np.abs(np.asarray(got, np.float64) - want)
    assert diff.max() <= atol, f"{what}: {worst(got, want)}"
    bad = np.flatnonzero(got.argmax(-1) != want.argmax(-1))
    assert bad.size == 0, f"{what}: argmax differs at positions {bad.tolist()}; {worst(got, want)}"


def transformers_reads_gguf(arch: str) -> bool:
    """Whether `transformers` can build a model from a GGUF file of `arch` (its own table)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return arch in GGUF_SUPPORTED_ARCHITECTURES


def ids_for(n_vocab: int, length: int) -> list[int]:
    """Token ids spread over the whole vocabulary, fixed per length."""
    return np.random.default_rng(1000 + length).integers(0, n_vocab, size=length).tolist()


@pytest.fixture(scope="module")
def models(oracle_files):
    """`models(case, ftype, target)`: toycards' model of an oracle file, loaded once."""
    cache: dict[tuple[str, str, str], object] = {}

    def get(case: str, ftype: str, target: str):
        key = (case, ftype, target)
        if key not in cache:
            cache[key] = load(oracle_files(case, ftype).path, target=target)
        return cache[key]

    return get


# ── F32: transformers (in memory and reloaded from the GGUF) and both targets agree ─────────
@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("case", FAMILIES)
def test_f32_logits_match_transformers(oracle_files, models, case, length):
    f = oracle_files(case, "F32")
    ids = ids_for(f.config.vocab_size, length)
    want = hf_logits(f.model, ids)
    reloaded = hf_logits(oracle_files.reloaded(case, "F32"), ids) if transformers_reads(f.arch) else None
    if reloaded is not None:  # gemma, olmo2: transformers cannot read the file (llama.cpp can, below)
        assert_logits_close(reloaded, want, what=f"{case} transformers(gguf_file=) vs the original model")
    for target in TARGETS:
        got = models(case, "F32", target).logits(ids)
        assert got.dtype == np.float32
        assert_logits_close(got, want, what=f"{case} toycards {target} vs transformers")
        if reloaded is not None:
            assert_logits_close(got, reloaded, what=f"{case} toycards {target} vs transformers(gguf_file=)")


@pytest.mark.parametrize("case, ftype", QUANTIZED)
@pytest.mark.parametrize("target", TARGETS)
def test_quantized_file_matches_its_dequantized_reference(oracle_files, models, case, ftype, target):
    f = oracle_files(case, ftype)
    ids = ids_for(f.config.vocab_size, 64)
    want = f.expected_logits(ids)
    got = models(case, ftype, target).logits(ids)
    assert_logits_close(got, want, what=f"{case} {ftype} toycards {target} vs dequantized reference")
    float_model = hf_logits(f.model, ids)
    moved = np.abs(float_model - want).max()
    assert moved > 10 * ATOL, f"{case} {ftype}: quantization moved logits by only {moved:.3g}; not quantized?"


def test_oracle_catches_a_missing_qk_permutation(oracle_files, tmp_path):
    """A llama file written without llama.cpp's Q/K permutation must *not* match: the oracle bites."""
    f = oracle_files("llama", "F32")
    path = write_gguf(f.model, f.config, tmp_path / "unpermuted.gguf", "llama", permute=False)
    ids = ids_for(f.config.vocab_size, 64)
    got, want = load(path, target="numpy").logits(ids), hf_logits(f.model, ids)
    assert np.abs(got - want).max() > 0.1, worst(got, want)


@pytest.mark.skipif(
    _llama_cpp_python() is None, reason="llama-cpp-python is not installed (a benchmark dependency)"
)
@pytest.mark.parametrize("case", ENCODERS)
def test_llama_cpp_embeds_the_oracle_encoder_file_as_toycards_does(oracle_files, case, tmp_path):
    """An encoder's file gives llama.cpp's embedding (its pooling, from the file; not normalised) on
    toycards too (whose embedding is held to transformers' in the family's own tests). GELU models:
    llama.cpp's F16 GELU table, as above."""
    f = oracle_files(case, "F32")
    ids = ids_for(f.config.vocab_size, 12)
    out = tmp_path / "llama_cpp.npy"
    script = Path(__file__).resolve().parents[1] / "peers" / "llama_cpp_embeddings.py"
    subprocess.run([_llama_cpp_python(), script, f.path, json.dumps(ids), out], check=True, timeout=300)
    want = np.load(out)
    got = np.asarray(load(f.path, target="numpy").embed(ids, normalize=-1), dtype=np.float32).reshape(
        want.shape
    )
    act = str(getattr(f.config, "hidden_act", "") or getattr(f.config, "hidden_activation", ""))
    bound = (1e-3 if "gelu" in act else 2e-5) * max(1.0, float(np.abs(want).max()))
    assert_logits_close(got, want, atol=bound, what=f"{case}: toycards vs llama.cpp embeddings")


# Each Gemma 2 / Gemma 3 feature changes the oracle case's logits: the file with one key changed
# (a cap or window too large to act, another RoPE rule) must be far from transformers, or the
# agreement above would not show that the card computes the feature.
FEATURES = [
    ("gemma2", {"gemma2.attn_logit_softcapping": 1e6}),  # measured |Δ| 0.58 on 16 tokens
    ("gemma2", {"gemma2.final_logit_softcapping": 1e6}),  # 0.47
    ("gemma2", {"gemma2.attention.sliding_window": 1000}),  # 1.5
    ("gemma3", {"gemma3.attention.sliding_window": 1000}),  # 2.0
    ("gemma3", {"gemma3.attention.sliding_window": None}),  # 2.3: no window, every layer global
    ("gemma3", {"gemma3.rope.scaling.type": "none"}),  # 0.13: the global layer unscaled
    ("gemma3", {"gemma3.rope.freq_base": 10000.0}),  # 0.048: the global layer with the local base
    ("gemma3", {"gemma3.final_logit_softcapping": 2.0}),  # 0.53
]


@pytest.mark.parametrize("case, change", FEATURES, ids=[next(iter(c)) for _, c in FEATURES])
def test_each_gemma_feature_moves_the_logits(oracle_files, case, change, tmp_path):
    f = oracle_files(case, "F32")
    ids = ids_for(f.config.vocab_size, 16)
    path = write_gguf(f.model, f.config, tmp_path / "changed.gguf", case, extra_kv=change)
    got, want = load(path, target="numpy").logits(ids), hf_logits(f.model, ids)
    assert np.abs(got - want).max() > 100 * ATOL, f"{case} {change}: {worst(got, want)}"


def test_gemma3_final_soft_cap_when_the_file_has_one(oracle_files, tmp_path):
    """A Gemma 3 file with final_logit_softcapping gives transformers' logits with that cap."""
    import copy

    f = oracle_files("gemma3", "F32")
    capped = copy.deepcopy(f.model)
    capped.config.final_logit_softcapping = 2.0  # read at every forward
    path = write_gguf(capped, capped.config, tmp_path / "capped.gguf", "gemma3")
    ids = ids_for(f.config.vocab_size, 16)
    assert_logits_close(load(path, target="numpy").logits(ids), hf_logits(capped, ids), what="gemma3 capped")


# llama.cpp's query scale for the 27B models, chosen by block count (46: Gemma 2 27B, 62: Gemma 3
# 27B): 1/√(d_e/H) instead of 1/√d_h, which transformers writes as query_pre_attn_scalar = d_e/H.
@pytest.mark.parametrize("case, blocks", [("gemma2", 46), ("gemma3", 62)])
def test_gemma_27b_query_scale(case, blocks, tmp_path):
    model, config = tiny_model(case, num_hidden_layers=blocks, query_pre_attn_scalar=64 // 4)  # d_e/H ≠ d_h
    path = write_gguf(model, config, tmp_path / f"{case}-{blocks}.gguf", case)
    ids = ids_for(config.vocab_size, 12)
    want = hf_logits(model, ids)
    for target in TARGETS:
        assert_logits_close(
            load(path, target=target).logits(ids), want, what=f"{case} {blocks} blocks {target}"
        )


def test_expert_width_without_its_key_is_d_ff_over_k(oracle_files, tmp_path):
    """llama-model.cpp: qwen3moe's n_ff_exp is n_ff / n_expert_used when expert_feed_forward_length
    is absent. The tiny experts are 32 wide: a file without the key and feed_forward_length 64
    (top-2) must still give transformers' logits; feed_forward_length 96 must not load."""
    model, config = oracle_files.model("qwen3moe")
    ids = ids_for(config.vocab_size, 7)
    gone = {"qwen3moe.expert_feed_forward_length": None}
    path = write_gguf(
        model, config, tmp_path / "q.gguf", "qwen3moe", extra_kv={**gone, "qwen3moe.feed_forward_length": 64}
    )
    assert_logits_close(load(path, target="numpy").logits(ids), hf_logits(model, ids), what="d_x = d_ff / k")
    wrong = write_gguf(
        model, config, tmp_path / "w.gguf", "qwen3moe", extra_kv={**gone, "qwen3moe.feed_forward_length": 96}
    )
    with pytest.raises(ToycardsError, match="ffn_gate_exps"):
        load(wrong, target="numpy")


# ── llama.cpp itself reads the oracle's files as transformers wrote them ─────────────────
@pytest.mark.skipif(
    _llama_cpp_python() is None, reason="llama-cpp-python is not installed (a benchmark dependency)"
)
@pytest.mark.parametrize("case", [c for c in FAMILIES if c not in ENCODERS])
def test_llama_cpp_reads_the_oracle_file_as_the_model_it_came_from(oracle_files, case, tmp_path):
    """The oracle writes what llama.cpp reads: the only check of gemma's and olmo2's files, which
    transformers cannot read back. Bound, as a fraction of max |logit|: 2e-5 (float32 in another
    order, measured 5e-7), except where the MLP uses GELU: llama.cpp's CPU GELU reads an F16 table,
    so each activation carries up to 2^-11 relative error (measured: gpt2 2.4e-4, gemma 1.4e-4, and
    gemma 1.2e-6 once transformers' GELU is rounded through F16 as well; gemma2 3.2e-4, gemma3
    4.2e-4); 1e-3 there."""
    f = oracle_files(case, "F32")
    ids = ids_for(f.config.vocab_size, 12)
    out = tmp_path / "llama_cpp.npy"
    script = Path(__file__).resolve().parents[1] / "peers" / "llama_cpp_logits.py"
    subprocess.run([_llama_cpp_python(), script, f.path, json.dumps(ids), out], check=True, timeout=300)
    got, want = np.load(out), hf_logits(f.model, ids)
    names = ("hidden_act", "hidden_activation", "activation_function")  # Gemma 2 and 3: hidden_activation
    act = next((a for a in (getattr(f.config, n, None) for n in names) if a), "")
    bound = (1e-3 if "gelu" in act else 2e-5) * max(1.0, float(np.abs(want).max()))
    assert_logits_close(got, want, atol=bound, what=f"{case}: llama.cpp vs transformers")


# ── numpy and torch agree on every library card that binds tensors ───────────────────────
# Concrete hyperparameters for `load(card)`; a new card whose hyperparameters are not here fails
# below with the names to add.
CARD_VALUES: dict[str, int | float | str | tuple[int, ...]] = {
    "L": 2, "H": 4, "H_kv": 2, "d_e": 32, "d_ff": 48, "d_mlp": 48, "ℓ_max": 64, "N_V": 50,
    "ε": 1e-5, "θ_base": 10000.0,
    "m_z": 2.0,  # granite's logit_scale, a required key (command-r's and cohere2's too)
    "w": 4,  # cohere2's sliding window, a required key
    "E": 8, "k": 2, "d_x": 16, "d_s": 32,  # experts, experts per token, expert and shared-expert widths
    "d_i": 64, "r": 4,  # Mamba's inner width and time-step rank (its d_s: state size, k: convolution width)
    "G": 2,  # Mamba-2's groups of heads (its H: heads)
    "H_s": 8, "d_sh": 32,  # granitehybrid's Mamba-2 heads and shared-expert width
    "attention": "bidirectional", "N_T": 2,  # bert's attention.causal (false) and token types
    "n_kv": (0, 2), "k_c": 3,  # lfm2's key/value heads per block (a convolution block, then attention), width
    "L_all": 2, "L_d": 1, "N_s": 2, "s_w": 2.5,  # glm4moe: blocks (N_n = 0: L), dense ones, shared experts, scale
    "α_p": (0.5, -1.0), "α_n": (0.3, 1.2), "β": (0.5, 0.4), "ε_x": (-1e-6, -1e-6),  # apertus's xIELU, per block
    "s_m": 1,  # ernie4_5-moe's interleave_moe_layer_step: every block after the L_d dense ones has experts
    # llama4: L = 2 (above) runs block 1 with RoPE in chunks and block 2 without (c = 8192 ≫ the tests' lengths)
    "r_q": 8, "d_c": 16, "d_r": 4, "d_k": 12, "d_v": 8, "n_s": 1,  # deepseek2: q rank, latent, rope part, heads
    "m_E": (0, 1), "n_qk": (0, 1), "m_n": (0, 1),  # what blocks store (present): experts (jamba), q/k norms
    # (glm4moe), the mixer's grouped norm (falcon-h1)
    "n_fa": 2,  # qwen3next's full_attention_interval: a DeltaNet block, then an attention block
    "n_ff": (48, 0),  # nemotron_h's MLP width per block: an MLP block, then (n_kv) an attention block
}  # fmt: skip


def binds_tensors(card: ir.Card) -> bool:
    algo = card.algorithms[-1] if card.algorithms else None
    return algo is not None and any(
        d.binding is not None and d.binding.kind == "from" for d, _ in algo.all_params()
    )


BOUND_CARDS = [name for name in card_names() if binds_tensors(library_card(name))]


def with_values(card: ir.Card, values: dict[str, object]) -> ir.Card:
    """`card` with `= value` on each hyperparameter named in `values` (a bound card)."""
    main = card.main
    decls = tuple(
        dataclasses.replace(d, value=_value_expr(values[d.names[0]]))
        if len(d.names) == 1 and d.names[0] in values and d.value is None
        else d
        for d in main.hyper_decls
    )
    main = dataclasses.replace(main, hyper_decls=decls)
    return dataclasses.replace(card, algorithms=(*card.algorithms[:-1], main))


def _value_expr(value: int | float | str | tuple[int, ...]) -> ir.Expr:
    """`= value` of a hyperparameter: a number, an enumeration's option by name, or one number per
    layer (`= [0, 2]`)."""
    if isinstance(value, tuple):
        return ir.Concat(tuple(ir.Num(repr(v)) for v in value), "cols")
    return ir.Name(value) if isinstance(value, str) else ir.Num(repr(value))


def bound_library_card(name: str) -> str:
    """The text of library card `name` with concrete hyperparameters from CARD_VALUES."""
    card = with_values(library_card(name), CARD_VALUES)
    problems = [d.message for d in bind_values(card.main).problems if d.severity == "error"]
    assert not problems, f"{name}.card: add values to CARD_VALUES in {__file__}: {problems}"
    return render_card(card)


def randomise(numpy_model, torch_model, seed: int = 0) -> None:
    """Give both models the same weights, large enough for logits of a few units.

    Vectors (norm scales, biases, RoPE divisors) ~ 1 + N(0, 0.1²); matrices ~ N(0, 1/fan_in).
    """
    import torch

    rng = np.random.default_rng(seed)
    for name in sorted(numpy_model.w):
        shape = numpy_model.w[name].shape
        w = (1 + 0.1 * rng.standard_normal(shape)) if len(shape) == 1 else rng.standard_normal(shape)
        w = (w / np.sqrt(shape[-1]) if len(shape) == 2 and "token_embd" not in name else w).astype(np.float32)
        if name.endswith(".ssm_a"):  # Mamba's A = −exp(A_log) < 0: a positive A grows the state without bound
            w = -np.exp(w)
        numpy_model.w[name] = w
        with torch.no_grad():
            torch_model.w[name].copy_(torch.from_numpy(w))


def test_some_library_cards_bind_tensors():
    assert {"gpt2", "llama"} <= set(BOUND_CARDS)


@pytest.mark.parametrize("name", BOUND_CARDS)
def test_targets_agree_on_library_card(name):
    text = bound_library_card(name)
    np_model, torch_model = load(text, target="numpy"), load(text, target="torch")
    assert np_model.hp == torch_model.hp
    assert set(np_model.w) == set(torch_model.w)
    ids = ids_for(CARD_VALUES["N_V"], 33)
    assert_logits_close(
        torch_model.logits(ids), np_model.logits(ids), what=f"{name}: random init, torch vs numpy"
    )
    randomise(np_model, torch_model)
    want = np_model.logits(ids)
    assert np.abs(want).max() > 0.5, "weights too small for a meaningful comparison"
    assert_logits_close(torch_model.logits(ids), want, what=f"{name}: torch vs numpy")


# ── the shipped example ─────────────────────────────────────────────────────────────────
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny-llama.gguf"


def test_example_is_reproducible(tmp_path):
    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        import make_example
    finally:
        sys.path.remove(str(EXAMPLE.parent))
    if not make_example.DEFAULT_VOCAB.exists():
        pytest.skip(f"{make_example.DEFAULT_VOCAB} is not here")
    rebuilt = make_example.build(tmp_path / "tiny-llama.gguf", make_example.DEFAULT_VOCAB)
    assert rebuilt.read_bytes() == EXAMPLE.read_bytes(), "run `.venv/bin/python examples/make_example.py`"


@pytest.mark.parametrize("target", TARGETS)
def test_example_matches_transformers(target):
    from oracle.hf_gguf import hf_from_gguf

    ids = ids_for(1024, 20)
    want = hf_logits(hf_from_gguf(EXAMPLE), ids)
    model = load(EXAMPLE, target=target)
    assert_logits_close(model.logits(ids), want, what=f"examples/tiny-llama.gguf, {target}")
    assert model.tokenizer.decode(model.tokenizer.encode("Hello, world")) == "Hello, world"
