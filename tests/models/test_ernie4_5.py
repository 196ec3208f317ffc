"""ERNIE 4.5 (dense): the llama.cpp rules the shared suites do not show by themselves.

The shared suites hold the `ernie4_5` case (unpermuted Q/K, head_dim ≠ d_e / H, tied) against
transformers. Here: the card's RoPE layout is what makes it agree (the same file read with RoPE on
halves is far off), and the optional attention biases llama.cpp's ernie4_5 loads (bq, bk, bv, bo)
are applied when a file has them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch
from oracle import archs
from oracle.hf_gguf import hf_logits, tiny_model, write_gguf
from test_models_oracle import assert_logits_close, ids_for, worst

from toycards.models.load import load

CARD = Path(__file__).resolve().parents[2] / "toycards" / "library" / "cards" / "ernie4_5.card"


def test_ernie4_5_rotates_adjacent_pairs_of_the_stored_q_k(oracle_files, tmp_path):
    """The converter writes Q/K as transformers has them, and llama.cpp rotates adjacent pairs (rope
    type NORM): read with RoPE on halves, the same file is far from transformers."""
    f = oracle_files("ernie4_5")
    card = tmp_path / "ernie4_5.card"
    card.write_text(
        CARD.read_text(encoding="utf-8").replace("H_kv, pairs,", "H_kv, halves,"), encoding="utf-8"
    )
    ids = ids_for(f.config.vocab_size, 16)
    got, want = load(card, weights=str(f.path), target="numpy").logits(ids), hf_logits(f.model, ids)
    assert np.abs(got - want).max() > 1e-2, worst(got, want)


def test_ernie4_5_attention_biases_when_the_file_has_them(tmp_path, monkeypatch):
    """use_bias: q/k/v/output biases, which llama.cpp's ernie4_5 adds when present. transformers'
    use_bias also gives the MLP biases that llama.cpp does not load: zeroed here and left out of the
    file, so the file holds the attention biases alone."""
    model, config = tiny_model("ernie4_5", seed=3, use_bias=True)
    mlp_biases = tuple(n for n, _ in model.named_parameters() if ".mlp." in n and n.endswith(".bias"))
    with torch.no_grad():
        for name in mlp_biases:
            model.get_parameter(name).zero_()
    spec = dataclasses.replace(archs.ARCHS["ernie4_5"], dropped=mlp_biases)
    monkeypatch.setitem(archs.ARCHS, "ernie4_5", spec)
    path = write_gguf(model, config, tmp_path / "biases.gguf", "ernie4_5")
    ids = ids_for(config.vocab_size, 16)
    want = hf_logits(model, ids)
    assert_logits_close(load(path, target="numpy").logits(ids), want, what="ernie4_5 with attention biases")
