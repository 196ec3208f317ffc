"""ERNIE 4.5 MoE: the llama.cpp rules the shared suites do not show by themselves.

The shared suites hold the `ernie4_5-moe` case (block 1 dense, then softmax-routed experts with a
selection bias and a shared expert; moe_layer_interval 1, as in every released model). Here: which
blocks have experts follows ernie4-5-moe.cpp's `il ≥ leading_dense_block_count ∧ (il + 1) mod
interleave_moe_layer_step = 0` at a step of 2, a file with no shared experts (300B-A47B's layout:
no expert_shared_feed_forward_length, no ffn_*_shexp) reads as llama.cpp reads it, and the selection
bias, written [1, E] as the checkpoint holds it, moves the logits.
"""

from __future__ import annotations

import numpy as np
import torch
from oracle.hf_gguf import gguf_tensors, hf_logits, tiny_model, write_gguf
from test_models_oracle import assert_logits_close, ids_for, worst

from toycards.models.load import load


def test_ernie4_5_moe_experts_every_second_block(tmp_path):
    """moe_layer_interval 2 from block 1 (il): blocks il = 1 and 3 have experts, il = 0 and 2 a
    dense MLP. (llama.cpp's loader asks for expert tensors in every block from
    leading_dense_block_count on, so it loads only files whose step is 1; its graph, which the card
    follows, picks the blocks this way.)"""
    model, config = tiny_model("ernie4_5-moe", seed=1, num_hidden_layers=4, moe_layer_interval=2)
    path = write_gguf(model, config, tmp_path / "step2.gguf", "ernie4_5-moe")
    names = gguf_tensors(model, config, "ernie4_5-moe")
    assert {"blk.1.ffn_gate_exps.weight", "blk.3.ffn_gate_exps.weight", "blk.2.ffn_gate.weight"} <= set(names)
    ids = ids_for(config.vocab_size, 12)
    got = load(path, target="numpy").logits(ids)
    assert_logits_close(got, hf_logits(model, ids), what="ernie4_5-moe, experts every second block")


def test_ernie4_5_moe_without_shared_experts(tmp_path):
    """moe_num_shared_experts 0: the converter writes no expert_shared_feed_forward_length and no
    shared expert; llama.cpp adds none (n_ff_shexp = 0)."""
    model, config = tiny_model("ernie4_5-moe", seed=2, moe_num_shared_experts=0)
    path = write_gguf(model, config, tmp_path / "unshared.gguf", "ernie4_5-moe")
    ids = ids_for(config.vocab_size, 12)
    got = load(path, target="numpy").logits(ids)
    assert_logits_close(got, hf_logits(model, ids), what="ernie4_5-moe without shared experts")


def test_ernie4_5_moe_selection_bias_moves_the_logits(oracle_files, tmp_path):
    """The oracle's bias (~ N(0, 0.1²) against probabilities of ~1/8) changes which experts some
    tokens use: the model with it zeroed is another model, and the card tells the two apart."""
    f = oracle_files("ernie4_5-moe")
    ids = ids_for(f.config.vocab_size, 16)
    got = load(f.path, target="numpy").logits(ids)
    unbiased = tiny_model("ernie4_5-moe", seed=0)[0]
    with torch.no_grad():
        for name, p in unbiased.named_parameters():
            if name.endswith("e_score_correction_bias"):
                p.zero_()
    other = hf_logits(unbiased, ids)
    assert np.abs(got - other).max() > 1e-3, worst(got, other)
    assert_logits_close(got, hf_logits(f.model, ids), what="ernie4_5-moe")
