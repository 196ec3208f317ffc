"""Granite's multipliers and SmolLM3's NoPE layers, read the way llama.cpp reads them.

The shared suites (test_models_oracle, test_interpreter, test_kv_cache, test_cards, test_describe)
run both oracle cases like every other family. Here, what is particular to each, against
transformers models and llama.cpp's rules:

- granite (src/models/granite.cpp): `{arch}.embedding_scale`, `.residual_scale` and
  `.attention.scale` are optional, and absent or 0 they change nothing (the attention scale falls
  back to 1/√d_h); `{arch}.logit_scale` is required. The converter writes each multiplier only when
  it is non-zero, and no `attention.key_length` (it drops the config's head_dim).
- smollm3 (src/models/smollm3.cpp): block il (from 0) is rotated iff (il + 1) mod 4 ≠ 0, with no
  metadata key; transformers' default `no_rope_layers` is the same rule. The test shows that the
  NoPE layer changes the logits, so the card's `if l mod n_nope = 0` is exercised.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from oracle.hf_gguf import hf_logits, tiny_model, write_gguf
from test_models_oracle import assert_logits_close, ids_for, worst

from toycards.errors import ToycardsError
from toycards.inspect.describe import describe
from toycards.models.load import load

OPTIONAL_GRANITE_KEYS = ("granite.embedding_scale", "granite.residual_scale", "granite.attention.scale")


def test_granite_multipliers_are_bound_from_the_converters_keys(oracle_files):
    f = oracle_files("granite")
    fields = gguf.GGUFReader(f.path).fields
    assert "granite.attention.key_length" not in fields  # GraniteModel drops head_dim
    card = describe(f.path)
    assert card.problems == () and card.bound.unused_tensors == []
    values, c = card.bound.hyper, f.config
    want = {"m_e": c.embedding_multiplier, "m_r": c.residual_multiplier}
    want |= {"m_a": c.attention_multiplier, "m_z": c.logits_scaling}
    assert {k: np.float32(values[k]) for k in want} == {k: np.float32(v) for k, v in want.items()}
    assert {card.bound.hyper_source[k] for k in want} == {
        'key "granite.embedding_scale"',
        'key "granite.residual_scale"',
        'key "granite.attention.scale"',
        'key "granite.logit_scale"',
    }


@pytest.mark.parametrize("stored", ["absent", "zero"])
def test_granite_optional_multipliers_absent_or_zero_change_nothing(stored, tmp_path):
    """Multipliers 1, 1 and 1/√d_h are what llama.cpp uses when the keys are absent or 0."""
    model, config = tiny_model(
        "granite", embedding_multiplier=1.0, residual_multiplier=1.0, attention_multiplier=0.25
    )  # d_h = 16
    extra = {key: None if stored == "absent" else 0.0 for key in OPTIONAL_GRANITE_KEYS}
    path = write_gguf(model, config, tmp_path / "granite.gguf", "granite", extra_kv=extra)
    ids = ids_for(config.vocab_size, 9)
    card = describe(path)
    assert card.problems == ()
    assert [card.bound.hyper[k] for k in ("m_e", "m_r", "m_a")] == [0, 0, 0]
    want = hf_logits(model, ids)
    for target in ("numpy", "torch"):
        assert_logits_close(load(path, target=target).logits(ids), want, what=f"{stored}, {target}")


def test_granite_logit_scale_is_required(oracle_files, tmp_path):
    f = oracle_files("granite")
    path = write_gguf(
        f.model, f.config, tmp_path / "g.gguf", "granite", extra_kv={"granite.logit_scale": None}
    )
    with pytest.raises(ToycardsError, match="granite.logit_scale"):
        load(path, target="numpy")


def test_smollm3_every_fourth_layer_has_no_rope(oracle_files):
    f = oracle_files("smollm3")
    assert f.config.num_hidden_layers == 4 and list(f.config.no_rope_layers) == [1, 1, 1, 0]
    ids = ids_for(f.config.vocab_size, 24)
    got = load(f.path, target="numpy").logits(ids)
    assert_logits_close(got, hf_logits(f.model, ids), what="smollm3 vs transformers")
    rotated, _ = tiny_model("smollm3", no_rope_layers=[1, 1, 1, 1])  # the same weights (seed 0)
    moved = hf_logits(rotated, ids)
    assert np.abs(got - moved).max() > 0.1, f"the NoPE layer changes nothing: {worst(got, moved)}"
