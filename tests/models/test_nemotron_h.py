"""NVIDIA Nemotron-H (general.architecture = "nemotron_h"): the llama.cpp rules the shared suites do not
show by themselves.

The shared suites hold the `nemotron_h` case (blocks "M-*-M-": Mamba-2, a squared-ReLU MLP, GQA 4/2
without positions, head_dim 8 ≠ d_e / H) against transformers' NemotronHForCausalLM on every target,
full = cached = batched, F32 and Q8_0, describe's card read back, and the file against what the
converter writes (test_oracle_selfcheck.py). Here: each kind of block moves the logits, so agreement
shows each is computed; the kinds come from the two per-block keys, head_count_kv and
feed_forward_length, in any order the pattern gives them; a Mamba-2 block decodes from its State; the
Q/K permutation the converter applies changes nothing (no RoPE); the optional tensors llama.cpp's loader
takes (the MLP's biases, the convolution's bias) are read when present and zeros when absent; llama.cpp
gives the same logits.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest
from oracle.hf_gguf import hf_logits, tiny_model, write_gguf
from stateful_checks import silenced_shift, token_by_token
from test_models_oracle import assert_logits_close, ids_for
from test_save_peer import _llama_cpp_python

from toycards.inspect.describe import describe
from toycards.models.load import load

PEER = Path(__file__).resolve().parents[1] / "peers" / "llama_cpp_logits.py"
ARCH = "nemotron_h"


@pytest.mark.parametrize("module", ["mixer.out_proj", "mixer.o_proj", "mixer.down_proj"])
def test_each_kind_of_block_moves_the_logits(oracle_files, module):
    """transformers' logits with one kind of block silenced (its output projection zeroed) are far from
    the oracle's: agreeing with the oracle computes all three."""
    f = oracle_files(ARCH)
    ids = ids_for(f.config.vocab_size, 12)
    assert silenced_shift(f.model, module, ids) > 0.05 * np.abs(hf_logits(f.model, ids)).max()


def test_the_per_block_keys_are_read_and_shown(oracle_files):
    text = str(describe(oracle_files(ARCH).path))
    assert "n_kv ∈ ℕ^{L} = [0, 0, 2, 0, 0, 0]" in text
    assert "n_ff ∈ ℕ^{L} = [0, 96, 0, 96, 0, 96]" in text


@pytest.mark.parametrize(
    "kinds",
    [
        ["full_attention", "linear_attention", "mlp"],  # "*M-": attention first
        ["mlp", "mlp", "linear_attention", "full_attention", "full_attention"],  # "--M**"
    ],
)
def test_any_pattern_reads_as_the_file_says(tmp_path, kinds):
    """Other orders of the three kinds (what hybrid_override_pattern gives) read from the same two keys."""
    model, config = tiny_model(ARCH, layers_block_type=kinds)
    path = write_gguf(model, config, tmp_path / "pattern.gguf", ARCH)
    ids = ids_for(config.vocab_size, 12)
    assert_logits_close(load(path, target="numpy").logits(ids), hf_logits(model, ids), what=f"{kinds}")


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_mamba_blocks_decode_from_their_state(oracle_files, target):
    """The generated module keeps each Mamba-2 block's convolution window and scan state as its State:
    no rerun of the sequence (no CacheRecomputes warning), and the tokens one by one give the full
    pass's logits."""
    f = oracle_files(ARCH)
    ids = ids_for(f.config.vocab_size, 10)
    assert_logits_close(
        token_by_token(f.path, target, ids), hf_logits(f.model, ids), what=f"token by token, {target}"
    )


def test_the_qk_permutation_changes_no_score(oracle_files, tmp_path):
    """The converter permutes Q and K rows as for adjacent-pair RoPE (GraniteHybridModel's undo_permute);
    nothing rotates them, so a file without the permutation gives the same logits."""
    f = oracle_files(ARCH)
    path = write_gguf(f.model, f.config, tmp_path / "unpermuted.gguf", ARCH, permute=False)
    ids = ids_for(f.config.vocab_size, 12)
    assert_logits_close(load(path, target="numpy").logits(ids), hf_logits(f.model, ids), what="unpermuted")


def test_optional_biases_are_read_when_present(tmp_path):
    """llama.cpp's loader takes ffn_up.bias and ffn_down.bias where the file has them (a config with
    mlp_bias), and ssm_conv1d.bias optionally: a model with MLP biases and none on the convolution."""
    model, config = tiny_model(ARCH, mlp_bias=True, use_conv_bias=False)
    path = write_gguf(model, config, tmp_path / "biases.gguf", ARCH)
    names = {t.name for t in gguf.GGUFReader(path).tensors}
    assert {"blk.1.ffn_up.bias", "blk.1.ffn_down.bias"} <= names and "blk.0.ssm_conv1d.bias" not in names
    ids = ids_for(config.vocab_size, 12)
    assert_logits_close(load(path, target="numpy").logits(ids), hf_logits(model, ids), what="MLP biases")


@pytest.mark.skipif(_llama_cpp_python() is None, reason="llama-cpp-python is not installed")
def test_llama_cpp_agrees(oracle_files, tmp_path):
    f = oracle_files(ARCH)
    ids = ids_for(f.config.vocab_size, 16)
    out = tmp_path / "llama_cpp.npy"
    subprocess.run([_llama_cpp_python(), PEER, f.path, json.dumps(ids), out], check=True, timeout=300)
    want = hf_logits(f.model, ids)
    assert_logits_close(np.load(out), want, 2e-5 * max(1.0, float(np.abs(want).max())), "llama.cpp")
    assert_logits_close(load(f.path, target="numpy").logits(ids), want, what="toycards numpy")
