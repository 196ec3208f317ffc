"""GLM-4.5 (glm4moe): the llama.cpp rules the shared suites do not show by themselves.

The shared suites hold the `glm4moe` case (partial NEOX RoPE, q/k/v biases, a dense block, then
sigmoid-gated experts with a selection bias, renormalised and scaled, a shared expert; a NextN block
counted in block_count) against transformers on every target. Here: a file that holds the NextN
block's tensors, as the converter writes a real checkpoint, runs the same (llama.cpp never runs that
block); the selection bias chooses experts but does not weigh them; per-head q/k norms are applied in
the blocks whose tensors the file holds, as llama.cpp applies them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
from oracle import archs
from oracle.hf_gguf import gguf_tensors, hf_logits, tiny_model, write_gguf
from stateful_checks import silenced_shift
from test_models_oracle import assert_logits_close, ids_for, worst

from toycards.inspect.describe import describe
from toycards.models.load import load

CARD = Path(__file__).resolve().parents[2] / "toycards" / "library" / "cards" / "glm4moe.card"


def _nextn_block(model, config) -> dict[str, np.ndarray]:
    """What Glm4MoeModel writes for the MTP block `blk.{L}` of a real checkpoint: an MoE block's
    tensors (here the last block's, moved) plus its own nextn.* tensors; random, never run."""
    last, nextn = config.num_hidden_layers - 1, config.num_hidden_layers
    rng = np.random.default_rng(7)
    block = {
        name.replace(f"blk.{last}.", f"blk.{nextn}."): rng.standard_normal(w.shape).astype(np.float32)
        for name, w in gguf_tensors(model, config, "glm4moe").items()
        if name.startswith(f"blk.{last}.")
    }
    d_e = config.hidden_size
    own = {"nextn.eh_proj.weight": (d_e, 2 * d_e), "nextn.enorm.weight": (d_e,), "nextn.hnorm.weight": (d_e,)}
    own["nextn.shared_head_norm.weight"] = (d_e,)
    return block | {f"blk.{nextn}.{n}": rng.standard_normal(s).astype(np.float32) for n, s in own.items()}


def test_glm4moe_runs_the_blocks_before_the_nextn_block(oracle_files, tmp_path, monkeypatch):
    """block_count 4 with nextn_predict_layers 1: blocks 1–3 run; blk.3 (the NextN block, every
    tensor of it in the file) is bound by nothing, and describe says so."""
    f = oracle_files("glm4moe")
    nextn = _nextn_block(f.model, f.config)
    spec = dataclasses.replace(archs.ARCHS["glm4moe"], extra_tensors=lambda _: nextn)
    monkeypatch.setitem(archs.ARCHS, "glm4moe", spec)
    path = write_gguf(f.model, f.config, tmp_path / "nextn.gguf", "glm4moe")
    ids = ids_for(f.config.vocab_size, 12)
    want = hf_logits(f.model, ids)
    for target in ("numpy", "torch"):
        assert_logits_close(load(path, target=target).logits(ids), want, what=f"glm4moe + NextN, {target}")
    unused = describe(path).bound.unused_tensors
    assert unused and all(name.startswith("blk.3.") for name in unused), unused


def test_glm4moe_selection_bias_chooses_but_does_not_weigh(oracle_files, tmp_path, monkeypatch):
    """exp_probs_b moved into the weights (selection and weighting by the biased gates, as a reader
    of DeepSeek V3's router might) is far from transformers; the card adds it for the choice only."""
    f = oracle_files("glm4moe")
    ids = ids_for(f.config.vocab_size, 16)
    want = hf_logits(f.model, ids)
    assert_logits_close(load(f.path, target="numpy").logits(ids), want, what="glm4moe")
    card = CARD.read_text(encoding="utf-8")
    wrong = card.replace("F ← MoE_biased(X̃ | W_r^l, b_r^l,", "F ← MoE_biased(X̃ | W_r^l, 0 · b_r^l,")
    assert wrong != card
    path = tmp_path / "unbiased.card"
    path.write_text(wrong, encoding="utf-8")
    got = load(path, weights=str(f.path), target="numpy").logits(ids)
    assert np.abs(got - want).max() > 1e-2, worst(got, want)


def test_glm4moe_with_q_k_norms_reads_them(tmp_path):
    """GLM-4.5 355B (use_qk_norm): llama.cpp normalises each q/k head in the blocks that store
    attn_q_norm, and no key says so; the card reads the same from the file's tensors and gives
    transformers' logits on every target, and the norms move the logits."""
    model, config = tiny_model("glm4moe", seed=1, use_qk_norm=True)
    path = write_gguf(model, config, tmp_path / "qk.gguf", "glm4moe")
    ids = ids_for(config.vocab_size, 10)
    want = hf_logits(model, ids)
    for target in ("reference", "numpy", "torch"):
        assert_logits_close(load(path, target=target).logits(ids), want, what=f"q/k norms, {target}")
    assert silenced_shift(model, "self_attn.q_norm", ids) > 0.1
