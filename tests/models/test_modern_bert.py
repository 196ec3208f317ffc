"""ModernBERT (modern-bert.card): what the shared suites do not show by themselves.

The shared suites hold each token's embedding (the card's output) to transformers' `ModernBertModel`
on the three targets, F32 and Q8_0 (test_models_oracle.py) and on the interpreter (test_interpreter.py),
from a file written as ModernBertModel converts the checkpoint (one attn_qkv, Wi as ffn_up, no
blk.0.attn_norm), 3 blocks: global, local (window 4), global. Here, each against transformers: the
file's pooling (CLS) of sequences of different lengths (transformers' padded batch); a pass with a
cache, which runs the tokens so far again (the attention is not causal); and what each of llama.cpp's
rules changes: the symmetric window of the local block, its own RoPE base, the pattern's default of 3
when the file has no sliding_window_pattern, and the tanh GELU of ggml_geglu.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from encoder_checks import cached_passes_run_the_tokens_so_far
from oracle.hf_gguf import tiny_model, write_gguf
from test_models_oracle import assert_logits_close, worst

from toycards.models.load import load

CASE = "modern-bert"
CARD = Path(__file__).resolve().parents[2] / "toycards" / "library" / "cards" / f"{CASE}.card"
IDS = list(range(5, 21))  # 16 tokens: the window of 4 leaves most of them out of the local block
ATOL = 1e-4  # embeddings of O(1) after LayerNorm; float32 in another order (test_models_oracle.py)


@pytest.fixture(scope="module")
def modern(oracle_files):
    return oracle_files(CASE, "F32")


def hidden(model, ids: list[list[int]], mask: np.ndarray | None = None) -> np.ndarray:
    """transformers' last hidden states [B, ℓ, d_e] of a batch of ids (of one length, or padded)."""
    with torch.no_grad():
        kwargs = {} if mask is None else {"attention_mask": torch.tensor(mask)}
        return model(torch.tensor(ids), **kwargs).last_hidden_state.numpy()


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def with_card(tmp_path: Path, old: str, new: str) -> Path:
    """modern-bert.card with `old` (which it holds once) replaced by `new`."""
    text = CARD.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    card = tmp_path / f"{CASE}.card"
    card.write_text(text.replace(old, new), encoding="utf-8")
    return card


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_sequences_of_different_lengths_equal_transformers_padded_batch(modern, target):
    """The file's pooling (CLS: the first token) of each sequence, and each token's embedding, against
    transformers' right-padded batch with its attention mask (RoPE positions from 0 in every row)."""
    seqs = [IDS[:5], IDS[:11], IDS]
    ids = np.full((3, len(IDS)), 287)  # the pad id
    mask = np.zeros_like(ids)
    for b, s in enumerate(seqs):
        ids[b, : len(s)], mask[b, : len(s)] = s, 1
    h = hidden(modern.model, ids.tolist(), mask)
    m = load(modern.path, target=target)
    assert m.hp["pooling"] == "cls"
    assert_logits_close(m.embed(seqs), unit(h[:, 0]), 1e-5, f"{target}: CLS-pooled batch of 3 lengths")
    for b, e in enumerate(m.embed(seqs, pooling="none", normalize=-1)):
        assert_logits_close(e, h[b][mask[b].astype(bool)], ATOL, f"{target}: tokens of sequence {b}")


def test_cached_passes_run_the_tokens_so_far(modern):
    """The mask is not causal, so a pass with a cache runs every token so far again (RECOMPUTE): each
    new column is transformers' full pass over the tokens up to it."""
    models = {target: load(modern.path, target=target) for target in ("numpy", "torch")}

    def full(m, ids):  # transformers' last row over the tokens so far
        return hidden(modern.model, ids.tolist())[0, -1:]

    cached_passes_run_the_tokens_so_far(models, np.asarray(IDS[:9])[None, :], full, ATOL)


@pytest.mark.parametrize(
    "old, new, what",
    [
        # the local block seeing every token, as a global one
        ("∧ 2 · (t_x − t_z) ≤ w ∧ 2 · (t_z − t_x) ≤ w⟧", "⟧", "no window"),
        # a causal window (the last w tokens, as gemma3's) in place of the symmetric one
        ("∧ 2 · (t_x − t_z) ≤ w ∧ 2 · (t_z − t_x) ≤ w⟧", "∧ t_x − t_z < w⟧", "a causal window"),
        # the local block rotating with the global base
        ("halves, θ_local, ρ", "halves, θ_base, ρ", "the global base"),
        # ggml_geglu's halves the other way round: GELU on ffn_up's second half
        ("GELU_tanh(G) ⊙ U", "G ⊙ GELU_tanh(U)", "GELU on the up half"),
        # RoPE on adjacent pairs (rope type NORM) where llama.cpp's modern-bert is NEOX
        ("H, halves, θ_local", "H, pairs, θ_local", "pairs in the local block"),
    ],
)
def test_each_rule_moves_the_embeddings(modern, tmp_path, old, new, what):
    """Each of llama.cpp's rules, stated otherwise in the card, takes the same file far from
    transformers (the card as it is: within 1e-4, test_models_oracle.py)."""
    card = with_card(tmp_path, old, new)
    got, want = (
        load(card, weights=str(modern.path), target="numpy").logits(IDS),
        hidden(modern.model, [IDS])[0],
    )
    assert np.abs(got - want).max() > 1e-2, f"{what}: {worst(got, want)}"


def test_without_a_pattern_every_third_block_is_global(modern, tmp_path):
    """llama.cpp's loader takes sliding_window_pattern 3 when the file has none (ModernBERT's own
    global_attn_every_n_layers): the oracle's file (global every 2nd) without the key is read as global,
    local, local, transformers' model of the same weights with global_attn_every_n_layers 3."""
    every3, config3 = tiny_model(CASE, global_attn_every_n_layers=3)  # seed 0: the oracle's weights
    assert config3.layer_types == ["full_attention", "sliding_attention", "sliding_attention"]
    path = write_gguf(modern.model, modern.config, tmp_path / "no-pattern.gguf", CASE,
                      extra_kv={"modern-bert.attention.sliding_window_pattern": None})  # fmt: skip
    m = load(path, target="numpy")
    assert m.hp["n_p"] == 3
    got = m.logits(IDS)
    assert_logits_close(got, hidden(every3, [IDS])[0], ATOL, "global every 3rd block")
    want = hidden(modern.model, [IDS])[0]
    assert np.abs(got - want).max() > 1e-2, worst(got, want)  # the oracle's own model: global every 2nd


def test_gelu_is_the_tanh_form_whatever_hidden_activation_says(modern, tmp_path):
    """ModernBERT's own hidden_activation is exact "gelu"; llama.cpp's GEGLU is ggml_geglu, the tanh
    form: the file of the exact model gives the tanh model's embeddings, apart from the exact model's."""
    exact, config = tiny_model(CASE, hidden_activation="gelu")
    path = write_gguf(exact, config, tmp_path / "exact.gguf", CASE)
    got = load(path, target="numpy").logits(IDS)
    assert_logits_close(got, hidden(modern.model, [IDS])[0], ATOL, "the tanh model")
    assert np.abs(got - hidden(exact, [IDS])[0]).max() > 1e-5


def test_a_file_without_attention_causal_is_read_causal(modern, tmp_path):
    """llama.cpp's causal_attn is true unless the file says otherwise (the converter writes false): a
    file without the key masks later tokens, so a prefix's embeddings are the whole sequence's first."""
    path = write_gguf(modern.model, modern.config, tmp_path / "no-causal.gguf", CASE,
                      extra_kv={"modern-bert.attention.causal": None})  # fmt: skip
    m = load(path, target="numpy")
    assert m.hp["attention"] == "causal"
    assert_logits_close(m.logits(IDS)[:5], m.logits(IDS[:5]), 1e-5, "a prefix, causal")
    assert not np.allclose(load(modern.path, target="numpy").logits(IDS)[:5], m.logits(IDS[:5]), atol=1e-2)
