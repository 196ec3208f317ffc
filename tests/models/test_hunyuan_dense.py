"""Hunyuan dense: the llama.cpp rules the shared suites do not show by themselves.

The shared suites hold the `hunyuan-dense` case (RoPE on halves, then per-head q/k RMSNorm; the
converter's NTK-alpha base; tied) against transformers. Here: the order of RoPE and the q/k norms is
what makes the card agree (normalised first, as Qwen3 does, it is far off); the base the converter
writes is what the card uses, and llama.cpp's loader rule for `rope.scaling.alpha` gives the same
model from the unscaled base; an untied file reads its output.weight.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from oracle.hf_gguf import hf_logits, tiny_model, write_gguf
from test_models_oracle import assert_logits_close, ids_for, worst

from toycards.models.load import load

CARD = Path(__file__).resolve().parents[2] / "toycards" / "library" / "cards" / "hunyuan-dense.card"
ARCH = "hunyuan-dense"


def test_hunyuan_dense_norms_q_k_after_rope(oracle_files, tmp_path):
    """llama.cpp (and transformers) rotate Q and K first and normalise each head after: the same file
    read with the norms first (Qwen3's order) is far from transformers."""
    f = oracle_files(ARCH)
    text = CARD.read_text(encoding="utf-8")
    swapped = text
    for x, g in (("Q, h", "γ_q^l"), ("K, j", "γ_k^l")):
        rotated_then_normed = f"rms_norm(rope_halves(m · rows({x}, d_h)[:, t], t | θ, ρ̃) | {g}, ε)"
        normed_then_rotated = f"rope_halves(rms_norm(m · rows({x}, d_h)[:, t] | {g}, ε), t | θ, ρ̃)"
        assert rotated_then_normed in swapped
        swapped = swapped.replace(rotated_then_normed, normed_then_rotated)
    card = tmp_path / f"{ARCH}.card"
    card.write_text(swapped, encoding="utf-8")
    ids = ids_for(f.config.vocab_size, 16)
    got, want = load(card, weights=str(f.path), target="numpy").logits(ids), hf_logits(f.model, ids)
    assert np.abs(got - want).max() > 1e-2, worst(got, want)


def test_hunyuan_dense_alpha_key_scales_the_base_as_llama_cpp_loads_it(oracle_files, tmp_path):
    """llama.cpp's loader multiplies rope.freq_base by α^(d_h/(d_h−2)) when rope.scaling.alpha > 0:
    rope_theta with the key is the model the converter's pre-scaled base is; without it, far off."""
    f = oracle_files(ARCH)
    theta, alpha = f.config.rope_parameters["rope_theta"], f.config.rope_parameters["alpha"]
    ids = ids_for(f.config.vocab_size, 16)
    want = hf_logits(f.model, ids)
    keyed = write_gguf(
        f.model,
        f.config,
        tmp_path / "alpha.gguf",
        ARCH,
        extra_kv={f"{ARCH}.rope.freq_base": float(theta), f"{ARCH}.rope.scaling.alpha": float(alpha)},
    )
    assert_logits_close(load(keyed, target="numpy").logits(ids), want, what="rope.scaling.alpha")
    unscaled = write_gguf(
        f.model, f.config, tmp_path / "unscaled.gguf", ARCH, extra_kv={f"{ARCH}.rope.freq_base": float(theta)}
    )
    got = load(unscaled, target="numpy").logits(ids)
    assert np.abs(got - want).max() > 1e-2, worst(got, want)


def test_hunyuan_dense_untied_output(tmp_path):
    """A checkpoint with its own lm_head: the converter writes output.weight, which the card reads."""
    model, config = tiny_model(ARCH, seed=4, tie_word_embeddings=False)
    path = write_gguf(model, config, tmp_path / "untied.gguf", ARCH)
    ids = ids_for(config.vocab_size, 16)
    assert_logits_close(load(path, target="torch").logits(ids), hf_logits(model, ids), what="untied")
