"""Phi-3 (general.architecture = "phi3"): LongRoPE and partial rotary against transformers and llama.cpp.

The shared suites (test_models_oracle.py, test_kv_cache.py, test_describe.py, test_cards.py) hold
the plain phi3 case and the LongRoPE files to transformers at every length and to themselves. Here:
LongRoPE where transformers and llama.cpp agree, at positions past the original context.

transformers switches LongRoPE's factors by the length of the sequence it is given (long ones past
`original_max_position_embeddings`); llama.cpp chooses once, by its context size, whose default is
the trained context_length (`get_rope_factors`: long iff n_ctx_seq > n_ctx_orig_yarn), and the
card follows llama.cpp's default. So the oracle is transformers at 48 > 32 positions (long factors
both sides), and llama.cpp itself where llama-cpp-python is installed (its n_ctx of 64 is past 32
as well). Both apply the attention factor √(1 + ln(128/32) / ln 32) to cos and sin, which the
converter writes as rope.scaling.attn_factor; with partial rotary (Phi-4-mini) the factor and the
rotation reach only the first rope.dimension_count entries of each head.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest
from oracle.hf_gguf import hf_logits
from test_models_oracle import assert_logits_close, ids_for, worst
from test_save_peer import _llama_cpp_python

from toycards.models.load import load

LONG = ("phi3-longrope", "phi3-partial")
LENGTH = 48  # past the original context of 32


@pytest.mark.parametrize("target", ["reference", "numpy", "torch"])
@pytest.mark.parametrize("case", LONG)
def test_longrope_matches_transformers_past_the_original_context(oracle_files, case, target):
    f = oracle_files(case)
    ids = ids_for(f.config.vocab_size, LENGTH)
    want = hf_logits(f.model, ids)
    assert_logits_close(load(f.path, target=target).logits(ids), want, what=f"{case}, {target}")


def test_the_file_holds_what_the_converter_writes(oracle_files):
    """rope_factors_long/short (d_r/2 entries), the attention factor, the rotated entries."""
    for case, d_r in (("phi3-longrope", 16), ("phi3-partial", 8)):
        f = oracle_files(case)
        reader = gguf.GGUFReader(f.path)
        tensors = {t.name: t for t in reader.tensors}
        params = f.config.rope_parameters
        np.testing.assert_array_equal(
            tensors["rope_factors_long.weight"].data, np.float32(params["long_factor"])
        )
        np.testing.assert_array_equal(
            tensors["rope_factors_short.weight"].data, np.float32(params["short_factor"])
        )
        fields = reader.fields
        assert int(fields["phi3.rope.dimension_count"].contents()) == d_r
        factor = float(fields["phi3.rope.scaling.attn_factor"].contents())
        assert factor == pytest.approx(math.sqrt(1 + math.log(128 / 32) / math.log(32)), rel=1e-6)
        assert "phi3.rope.scaling.type" not in fields  # Phi3MiniModel writes none


def test_the_factors_and_the_magnitude_matter(oracle_files):
    """The card's long factors and attention factor each change the logits far beyond tolerance."""
    f = oracle_files("phi3-longrope")
    ids = ids_for(f.config.vocab_size, LENGTH)
    want = hf_logits(f.model, ids)
    model = load(f.path, target="numpy")
    short = np.asarray(f.config.rope_parameters["short_factor"], np.float32)
    for name, value in (("rope_factors_long.weight", short), ("a_r", 1.0)):  # short factors; no magnitude
        other = load(f.path, target="numpy")
        (other.hp if name in other.hp else other.w)[name] = value
        got = other.logits(ids)
        assert np.abs(got - want).max() > 0.05, f"{name}: {worst(got, want)}"
    assert_logits_close(model.logits(ids), want, what="unchanged")


@pytest.mark.skipif(
    _llama_cpp_python() is None, reason="llama-cpp-python is not installed (a benchmark dependency)"
)
@pytest.mark.parametrize("case", ("phi3", *LONG))
def test_llama_cpp_reads_phi3_as_the_card_does(oracle_files, case, tmp_path):
    f = oracle_files(case)
    ids = ids_for(f.config.vocab_size, LENGTH)
    out = tmp_path / "llama_cpp.npy"
    script = Path(__file__).resolve().parents[1] / "peers" / "llama_cpp_logits.py"
    subprocess.run([_llama_cpp_python(), script, f.path, json.dumps(ids), out], check=True, timeout=300)
    want = load(f.path, target="numpy").logits(ids)
    assert_logits_close(np.load(out), want, atol=2e-5 * max(1.0, float(np.abs(want).max())), what=case)
