"""Nomic BERT (nomic-bert.card): what the shared suites do not show by themselves.

The shared suites hold each token's embedding (the card's output) to transformers' `NomicBertModel`
on the three targets, F32 and Q8_0 (test_models_oracle.py) and on the interpreter (test_interpreter.py),
from a file written as NomicBertModel converts the checkpoint (one attn_qkv, fc11/fc12/fc2 as
ffn_up/ffn_gate/ffn_down). Here, each against transformers: the pooled embeddings and a batch of
texts of different lengths (transformers' padded batch); a pass with a cache, which runs the tokens so
far again (the attention is not causal); the RoPE layout (halves; pairs is far off); and the
attn_q/attn_k/attn_v layout that llama.cpp's loader also reads.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from encoder_checks import cached_passes_run_the_tokens_so_far
from oracle import archs
from oracle.hf_gguf import write_gguf
from oracle.vocab import WPM_VOCAB
from test_models_oracle import assert_logits_close, worst

from toycards.models.load import load

CASE = "nomic-bert"
CARD = Path(__file__).resolve().parents[2] / "toycards" / "library" / "cards" / f"{CASE}.card"
TEXTS = ["Hello, world!", "The cat is playing with a dog.", "New-York cafés: 3 cats, 12 dogs?"]
ATOL = 1e-4  # embeddings of O(1) after LayerNorm; float32 in another order (test_models_oracle.py)


@pytest.fixture(scope="module")
def nomic(oracle_files):
    return oracle_files(CASE, "F32")


@pytest.fixture(scope="module")
def hf_tokenizer():
    import transformers

    return transformers.BertTokenizer(vocab={t: i for i, t in enumerate(WPM_VOCAB)})


def hidden(model, ids: list[list[int]], mask: np.ndarray | None = None) -> np.ndarray:
    """transformers' last hidden states [B, ℓ, d_e] of a batch of ids (of one length, or padded)."""
    with torch.no_grad():
        kwargs = {} if mask is None else {"attention_mask": torch.tensor(mask)}
        return model(torch.tensor(ids), **kwargs).last_hidden_state.numpy()


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_texts_of_different_lengths_equal_transformers_padded_batch(nomic, hf_tokenizer, target):
    """The file's pooling (mean) of each text, and each token's embedding, against transformers'
    padded batch with its attention mask (RoPE positions from 0 in every row)."""
    batch = hf_tokenizer(TEXTS, padding=True, return_tensors="np")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert len(set(mask.sum(1))) == len(TEXTS)  # three lengths
    h = hidden(nomic.model, ids.tolist(), mask)
    m = load(nomic.path, target=target)
    want = np.stack([unit(h[b][mask[b].astype(bool)].mean(0)) for b in range(len(TEXTS))])
    assert_logits_close(m.embed(TEXTS), want, 1e-5, f"{target}: mean-pooled batch of 3 lengths")
    for b, e in enumerate(m.embed(TEXTS, pooling="none", normalize=-1)):
        assert_logits_close(e, h[b][mask[b].astype(bool)], ATOL, f"{target}: tokens of text {b}")


def test_cached_passes_run_the_tokens_so_far(nomic):
    """The mask is not causal, so a pass with a cache runs every token so far again (RECOMPUTE): each
    new column is transformers' full pass over the tokens up to it."""
    models = {target: load(nomic.path, target=target) for target in ("numpy", "torch")}

    def full(m, ids):  # transformers' last row over the tokens so far
        return hidden(nomic.model, ids.tolist())[0, -1:]

    cached_passes_run_the_tokens_so_far(models, np.arange(10, 19)[None, :], full, ATOL)


def test_rope_rotates_halves(nomic, tmp_path):
    """llama.cpp's rope type for nomic-bert is NEOX, as transformers' rotate_half: read with RoPE on
    adjacent pairs, the same file is far from transformers."""
    card = tmp_path / f"{CASE}.card"
    card.write_text(
        CARD.read_text(encoding="utf-8").replace("H_kv, halves,", "H_kv, pairs,"), encoding="utf-8"
    )
    ids = list(range(5, 21))
    got, want = load(card, weights=str(nomic.path), target="numpy").logits(ids), hidden(nomic.model, [ids])[0]
    assert np.abs(got - want).max() > 1e-2, worst(got, want)


def test_separate_q_k_v_tensors(nomic, tmp_path, monkeypatch):
    """llama.cpp's loader takes attn_q, attn_k, attn_v where a file has no attn_qkv: the same model."""
    monkeypatch.setitem(archs.ARCHS, CASE, dataclasses.replace(archs.ARCHS[CASE], qkv="split"))
    config = copy.deepcopy(nomic.config)
    config.num_key_value_heads = config.num_attention_heads  # the sizes of the split (no GQA here)
    path = write_gguf(nomic.model, config, tmp_path / "split.gguf", CASE)
    m = load(path, target="numpy")
    assert "blk.0.attn_q.weight" in m.w and "blk.0.attn_qkv.weight" not in m.w
    ids = list(range(5, 21))
    assert_logits_close(m.logits(ids), hidden(nomic.model, [ids])[0], ATOL, "attn_q, attn_k, attn_v")
