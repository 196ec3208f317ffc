"""Granite's multipliers and SmolLM3's NoPE layers, read the way llama.cpp reads them.

The shared suites (test_models_oracle, test_interpreter, test_kv_cache, test_cards, test_describe)
run both oracle cases like every other family. Here, what is particular to each, against
transformers models and, where llama-cpp-python is installed (the interpreter named by
TOYCARDS_LLAMA_CPP_PYTHON, or this one), against llama.cpp itself:

- granite (llama.cpp src/models/granite.cpp): `{arch}.embedding_scale`, `.residual_scale` and
  `.attention.scale` are optional, and absent or 0 they change nothing (the attention scale falls
  back to 1/√d_h); `{arch}.logit_scale` is required; `{arch}.rope.scaling.finetuned = false` turns
  RoPE off; an optional `rope_freqs.weight` is read. The converter writes each multiplier only when
  it is non-zero, and no `attention.key_length` (it drops the config's head_dim).
- smollm3 (src/models/smollm3.cpp, src/llama-model.cpp): block il (from 0) is rotated iff
  (il + 1) mod 4 ≠ 0, with no metadata key; transformers' default `no_rope_layers` is the same
  rule. The NoPE layer changes the logits, so the card's `if l mod n_nope = 0` is exercised. No
  `rope_freqs.weight` is loaded (a file with one is refused).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest
from oracle.hf_gguf import hf_logits, tiny_model, write_gguf
from test_cards import _with_tensor
from test_models_oracle import assert_logits_close, ids_for, worst
from test_save_peer import _llama_cpp_python

from toycards.errors import ToycardsError
from toycards.inspect.describe import describe
from toycards.models.load import load

OPTIONAL_GRANITE_KEYS = ("granite.embedding_scale", "granite.residual_scale", "granite.attention.scale")
PEER = Path(__file__).resolve().parents[1] / "peers" / "llama_cpp_logits.py"
LLAMA_CPP = _llama_cpp_python()
needs_llama_cpp = pytest.mark.skipif(
    LLAMA_CPP is None, reason="llama-cpp-python is not installed (a benchmark dependency)"
)


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    """`variants(name)` → (path, transformers model): granite files beyond the oracle case."""
    root, made = tmp_path_factory.mktemp("granite-variants"), {}

    def build(name: str):
        if name in made:
            return made[name]
        if name in ("absent", "zero"):  # multipliers 1, 1 and 1/√d_h (d_h = 16), stored as absent or 0
            model, config = tiny_model(
                "granite", embedding_multiplier=1.0, residual_multiplier=1.0, attention_multiplier=0.25
            )
            extra = {key: None if name == "absent" else 0.0 for key in OPTIONAL_GRANITE_KEYS}
        else:  # "no-rope": transformers' SmolLM3 with no RoPE in any layer, neutral multipliers
            model, config = tiny_model("smollm3", num_hidden_layers=2, no_rope_layers=[0, 0])
            config.embedding_multiplier = config.residual_multiplier = config.logits_scaling = 1.0
            config.attention_multiplier = 0.25
            extra = {"granite.rope.scaling.finetuned": False}
        made[name] = write_gguf(model, config, root / f"{name}.gguf", "granite", extra_kv=extra), model
        return made[name]

    return build


# ── against transformers ────────────────────────────────────────────────────────────────
def test_granite_multipliers_are_bound_from_the_converters_keys(oracle_files):
    f = oracle_files("granite")
    assert "granite.attention.key_length" not in gguf.GGUFReader(f.path).fields  # no head_dim
    card = describe(f.path)
    assert card.problems == () and card.bound.unused_tensors == []
    values, c = card.bound.hyper, f.config
    want = {"m_e": c.embedding_multiplier, "m_r": c.residual_multiplier}
    want |= {"m_a": c.attention_multiplier, "m_z": c.logits_scaling}
    assert {k: np.float32(values[k]) for k in want} == {k: np.float32(v) for k, v in want.items()}
    assert [card.bound.hyper_source[k] for k in want] == [
        'key "granite.embedding_scale"',
        'key "granite.residual_scale"',
        'key "granite.attention.scale"',
        'key "granite.logit_scale"',
    ]
    assert card.bound.hyper["rot"] == 1 and card.bound.hyper_source["rot"] == "default"


@pytest.mark.parametrize("name", ["absent", "zero"])
def test_granite_optional_multipliers_absent_or_zero_change_nothing(variants, name):
    path, model = variants(name)
    card = describe(path)
    assert card.problems == () and [card.bound.hyper[k] for k in ("m_e", "m_r", "m_a")] == [0, 0, 0]
    ids = ids_for(model.config.vocab_size, 9)
    want = hf_logits(model, ids)
    for target in ("numpy", "torch"):
        assert_logits_close(load(path, target=target).logits(ids), want, what=f"{name}, {target}")


def test_granite_rope_switch_off_is_a_llama_without_rope(variants):
    path, model = variants("no-rope")
    ids = ids_for(model.config.vocab_size, 12)
    want = hf_logits(model, ids)
    for target in ("numpy", "torch"):
        m = load(path, target=target)
        assert m.hp["rot"] == 0
        assert_logits_close(m.logits(ids), want, what=f"granite without RoPE, {target}")


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


# ── against llama.cpp ───────────────────────────────────────────────────────────────────
def llama_cpp_logits(path: Path, ids: list[int], out: Path) -> np.ndarray | None:
    """llama.cpp's logits `[len(ids), N_V]` for the file, or None when it refuses to load it."""
    run = subprocess.run([LLAMA_CPP, PEER, path, json.dumps(ids), out], capture_output=True, timeout=300)
    return np.load(out) if run.returncode == 0 else None


def assert_like_llama_cpp(path: Path, ids: list[int], tmp_path: Path, what: str) -> None:
    want = llama_cpp_logits(path, ids, tmp_path / "llama_cpp.npy")
    assert want is not None, f"{what}: llama.cpp refuses the file"
    got = load(path, target="numpy").logits(ids)
    assert_logits_close(got, want, atol=2e-4 * max(1.0, float(np.abs(want).max())), what=what)


@needs_llama_cpp
@pytest.mark.parametrize("case", ["granite", "smollm3"])
def test_llama_cpp_computes_what_the_card_computes(oracle_files, case, tmp_path):
    """F32 files: llama.cpp's quantized matmuls also quantize the activations, so a quantized
    file differs by more than rounding; the blocks themselves are checked in test_models_oracle."""
    f = oracle_files(case, "F32")
    assert_like_llama_cpp(f.path, ids_for(f.config.vocab_size, 20), tmp_path, case)


@needs_llama_cpp
@pytest.mark.parametrize("name", ["absent", "zero", "no-rope"])
def test_llama_cpp_reads_granite_keys_as_the_card_does(variants, name, tmp_path):
    path, model = variants(name)
    assert_like_llama_cpp(path, ids_for(model.config.vocab_size, 12), tmp_path, name)


@needs_llama_cpp
def test_llama_cpp_refuses_granite_without_logit_scale(oracle_files, tmp_path):
    f = oracle_files("granite")
    path = write_gguf(
        f.model, f.config, tmp_path / "g.gguf", "granite", extra_kv={"granite.logit_scale": None}
    )
    assert llama_cpp_logits(path, [1, 2, 3], tmp_path / "out.npy") is None


@needs_llama_cpp
def test_llama_cpp_reads_granite_rope_freqs_as_the_card_does(oracle_files, tmp_path):
    """llama.cpp's granite loader takes an optional rope_freqs.weight (gguf-py lists none for
    granite, so its converter never writes one); the card binds it the same way."""
    f = oracle_files("granite")
    path = _with_tensor(f.path, "rope_freqs.weight", np.linspace(1, 4, 8, dtype=np.float32))
    assert_like_llama_cpp(path, ids_for(f.config.vocab_size, 12), tmp_path, "granite with rope_freqs")


@needs_llama_cpp
def test_llama_cpp_refuses_smollm3_with_rope_freqs(oracle_files, tmp_path):
    """llama.cpp's smollm3 loads no rope_freqs.weight, so a file with one does not load there. The
    card still reads it (`or 1`): ones without a tensor is the codegen gap of test_interpreter.py."""
    f = oracle_files("smollm3")
    path = _with_tensor(f.path, "rope_freqs.weight", np.full(8, 2.0, dtype=np.float32))
    assert llama_cpp_logits(path, [1, 2, 3], tmp_path / "out.npy") is None
