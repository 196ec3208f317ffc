"""Llama 4 (llama4): the llama.cpp rules the shared suites do not show by themselves.

The shared suites hold the `llama4` case against transformers on every target: three chunked blocks
with RoPE (llama3 rope_freqs) and q/k L2 norms, a NoPE block, dense and expert blocks interleaved,
the experts' sigmoid gates weighing their inputs. But llama.cpp fixes the chunk and the attention
temperature's floor at 8192 tokens, so no test sequence crosses either. Here the card's two
constants and the model's config are shrunk to 4 together, and the chunks, the temperature and
the weights before the experts are each shown to move the logits; a file with sliding_window 0
(MobileLLM-style: no chunks, only the last block without RoPE) and the 128-expert model (no q/k
norms) run as transformers does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from oracle.hf_gguf import hf_logits, tiny_model, write_gguf
from test_models_oracle import assert_logits_close, ids_for, worst

from toycards.models.load import load

CARD = (Path(__file__).resolve().parents[2] / "toycards" / "library" / "cards" / "llama4.card").read_text(
    encoding="utf-8"
)
# llama.cpp's fixed chunk (n_swa) and temperature floor (n_attn_temp_floor_scale), as the card states them
CHUNK = "c ∈ ℕ                                     ≔ 8192"
FLOOR = "f_T ∈ ℕ                                   ≔ 8192"


def shrunk(card: str = CARD, n: int = 4) -> str:
    """The card with chunks of n tokens and a temperature floor of n (what a config with
    attention_chunk_size = floor_scale = n computes)."""
    assert CHUNK in card and FLOOR in card
    return card.replace(CHUNK, CHUNK.replace("8192", str(n))).replace(FLOOR, FLOOR.replace("8192", str(n)))


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The oracle's llama4 model with chunks of 4 and a temperature floor of 4, its file and the
    card shrunk to match; 13 tokens cross three chunk borders and three floors."""
    model, config = tiny_model("llama4", attention_chunk_size=4, floor_scale=4)
    path = write_gguf(model, config, tmp_path_factory.mktemp("llama4") / "small.gguf", "llama4")
    ids = ids_for(config.vocab_size, 13)
    return path, ids, hf_logits(model, ids)


def decode(model, ids: list[int], chunks: list[int]) -> np.ndarray:
    """Logits [ℓ, N_V] of `ids` fed through one cache in passes of `chunks` tokens."""
    seqs, cache, parts, start = np.asarray([ids]), model.new_cache(), [], 0
    for n in chunks:
        parts.append(model._forward_numpy(seqs[:, start : start + n], cache))
        start += n
    return np.concatenate(parts, axis=1)[0]


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_llama4_chunks_and_temperature_match_transformers(small, target):
    """Chunks of 4 (a key is seen from its own chunk only) and the NoPE block's temperature
    1 + 0.1 ln(1 + ⌊t / 4⌋): the full pass and cached decoding (one token, then 3, 4 and 5) give
    transformers' logits; the card as llama.cpp fixes it (8192) does not."""
    path, ids, want = small
    model = load(shrunk(), weights=str(path), target=target)
    assert_logits_close(model.logits(ids), want, what=f"llama4 chunks of 4, {target}")
    assert_logits_close(decode(model, ids, [1, 3, 4, 5]), want, what=f"llama4 chunks of 4, cached, {target}")
    wide = load(CARD, weights=str(path), target=target).logits(ids)
    assert np.abs(wide - want).max() > 1e-2, worst(wide, want)


def test_llama4_interpreter_runs_chunks_and_temperature(small):
    """The reference interpreter on the shrunk card: the same logits."""
    path, ids, want = small
    got = load(shrunk(), weights=str(path), target="reference").logits(ids[:9])
    assert_logits_close(got, want[:9], what="llama4 chunks of 4, reference")


WRONG = {  # a rule of the card → the card without it
    "weights after the experts": ("k, keep, sigmoid, 0, 1, 1, 1)", "k, keep, sigmoid, 0, 1, 1, 0)"),
    "no temperature": (
        "s_T ∈ ℝ                                   ≔ 0.1",
        "s_T ∈ ℝ                                   ≔ 0",
    ),
    "no chunks": ("∧ ⌈t_z / c⌉ = ⌈t_x / c⌉⟧", "⟧"),
    "no q/k norms": ("if E ≠ 128 then", "if E = 128 then"),
}


@pytest.mark.parametrize("rule", sorted(WRONG))
def test_llama4_each_rule_moves_the_logits(small, rule):
    """Each rule, left out of the shrunk card, takes the logits far from transformers'."""
    path, ids, want = small
    old, new = WRONG[rule]
    card = shrunk()
    assert old in card
    got = load(card.replace(old, new), weights=str(path), target="numpy").logits(ids)
    assert np.abs(got - want).max() > 1e-2, f"{rule}: {worst(got, want)}"


def test_llama4_sliding_window_zero_has_no_chunks_and_one_nope_block(tmp_path):
    """attention.sliding_window = 0 (the converter writes it when every layer is full attention):
    llama.cpp chunks nothing and sets n_no_rope_layer_step to the block count, so only the last block
    goes without RoPE, and no temperature (f_attn_temp_scale stays 0)."""
    model, config = tiny_model(
        "llama4",
        layer_types=["full_attention"] * 4,
        no_rope_layers=[1, 1, 1, 0],
        attn_temperature_tuning=False,
        attention_chunk_size=4,  # unused by full-attention layers
    )
    path = write_gguf(model, config, tmp_path / "full.gguf", "llama4")
    ids = ids_for(config.vocab_size, 13)
    want = hf_logits(model, ids)
    for target in ("numpy", "torch"):
        assert_logits_close(load(path, target=target).logits(ids), want, what=f"llama4 window 0, {target}")


def test_llama4_128_experts_have_no_q_k_norms(tmp_path):
    """llama.cpp's use_kq_norm is false for the 128-expert model (Maverick), whatever the file says;
    transformers' use_qk_norm = False is the same model."""
    model, config = tiny_model("llama4", num_local_experts=128, use_qk_norm=False)
    path = write_gguf(model, config, tmp_path / "e128.gguf", "llama4")
    ids = ids_for(config.vocab_size, 9)
    assert_logits_close(load(path, target="numpy").logits(ids), hf_logits(model, ids), what="llama4 E = 128")
