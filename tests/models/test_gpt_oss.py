"""gpt-oss (gpt-oss.card): what its oracle case alone would not show to matter.

The shared suites run the case (tests/oracle/cases.py) against transformers on every target, F32 and
Q8_0, full = cached = batch. Here each feature is switched off in both the transformers model and the
file, and the card follows: the attention sinks (−∞: none), which blocks slide (llama.cpp's
set_swa_pattern, from attention.sliding_window_pattern), and the YaRN keys (a file without them is
far from the model that was trained with them). A file whose routed experts are MXFP4, as gpt-oss is
released, gives the logits of the model whose experts are those MXFP4 numbers.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from oracle.hf_gguf import hf_logits, quantized_copy, tiny_model, write_gguf
from test_models_oracle import assert_logits_close, worst

from toycards.models.load import load

IDS = np.random.default_rng(11).integers(0, 288, size=48).tolist()  # past the original context of 32


def test_without_sinks_the_card_follows_transformers(tmp_path):
    """Sinks of −∞ take nothing from the softmax: the card gives transformers' logits, and those
    differ from the model's with its sinks."""
    model, config = tiny_model("gpt-oss")
    with_sinks = hf_logits(model, IDS)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.fill_(-math.inf)
    want = hf_logits(model, IDS)
    path = write_gguf(model, config, tmp_path / "nosinks.gguf", "gpt-oss")
    assert_logits_close(load(path, target="numpy").logits(IDS), want, what="gpt-oss without sinks")
    assert np.abs(with_sinks - want).max() > 0.05, worst(with_sinks, want)


def test_the_window_pattern_key_picks_the_sliding_blocks(tmp_path):
    """attention.sliding_window_pattern = 1 (llama.cpp: block il slides iff il mod 1 < 0, never) makes
    every block full, as transformers' layer_types all "full_attention"; the default (2) slides
    blocks 1 and 3 (from 1), and with a window of 4 over 48 tokens that moves the logits."""
    model, config = tiny_model("gpt-oss")
    full, _ = tiny_model("gpt-oss", layer_types=["full_attention"] * 4)
    path = write_gguf(model, config, tmp_path / "p1.gguf", "gpt-oss",
                      extra_kv={"gpt-oss.attention.sliding_window_pattern": 1})  # fmt: skip
    want = hf_logits(full, IDS)
    assert_logits_close(load(path, target="numpy").logits(IDS), want, what="gpt-oss, no sliding block")
    sliding = hf_logits(model, IDS)
    assert np.abs(sliding - want).max() > 0.05, worst(sliding, want)


def test_the_yarn_keys_are_read(tmp_path):
    """The same file without rope.scaling.* runs unscaled RoPE: far from the YaRN model."""
    model, config = tiny_model("gpt-oss")
    keys = ("type", "factor", "original_context_length", "yarn_beta_fast", "yarn_beta_slow")
    path = write_gguf(model, config, tmp_path / "plain.gguf", "gpt-oss",
                      extra_kv={f"gpt-oss.rope.scaling.{k}": None for k in keys})  # fmt: skip
    unscaled, want = load(path, target="numpy").logits(IDS), hf_logits(model, IDS)
    assert np.abs(unscaled - want).max() > 0.05, worst(unscaled, want)


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_mxfp4_experts_give_their_models_logits(tmp_path, target):
    """MXFP4 blocks (an E8M0 scale and 32 four-bit E2M1 numbers) are read through gguf.quants; the
    file's logits equal those of the model whose experts are exactly the stored numbers, and those
    differ from the float model's."""
    import gguf

    model, config = tiny_model("gpt-oss")
    path = write_gguf(model, config, tmp_path / "mxfp4.gguf", "gpt-oss", "MXFP4_MOE")
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(path).tensors}
    assert types["blk.0.ffn_gate_exps.weight"] == gguf.GGMLQuantizationType.MXFP4
    want = hf_logits(quantized_copy(model, config, "gpt-oss", "MXFP4_MOE"), IDS)
    assert_logits_close(load(path, target=target).logits(IDS), want, what=f"gpt-oss MXFP4 experts, {target}")
    float_model = hf_logits(model, IDS)
    assert np.abs(float_model - want).max() > 1e-2, worst(float_model, want)
