"""LFM2 (general.architecture = "lfm2"): the llama.cpp rules the shared suites do not show by themselves.

The shared suites hold the `lfm2` case (blocks conv, attention, conv, attention) against transformers'
Lfm2ForCausalLM on every target, full = cached = batched, F32 and Q8_0, and describe's card read back.
Here: which blocks are convolutions comes from the file's per-block `attention.head_count_kv` (0: a
convolution), and both kinds of block move the logits, so agreement shows each is computed; a
convolution block decodes from its State (no rerun of the sequence); a file whose per-block array has
the wrong length, or that lacks a tensor of a block its head count makes an attention block, is refused
in one line; llama.cpp (where llama-cpp-python is installed) gives the same logits.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from oracle.hf_gguf import hf_logits, write_gguf
from stateful_checks import silenced_shift, token_by_token
from test_models_oracle import assert_logits_close, ids_for
from test_save_peer import _llama_cpp_python

from toycards.errors import ToycardsError
from toycards.inspect.describe import describe
from toycards.models.load import load

PEER = Path(__file__).resolve().parents[1] / "peers" / "llama_cpp_logits.py"
N_KV = "lfm2.attention.head_count_kv"


@pytest.mark.parametrize("module", ["conv.conv", "self_attn.out_proj"])
def test_each_kind_of_block_moves_the_logits(oracle_files, module):
    """transformers' logits with one kind of block silenced (its convolution taps, or its attention's
    output projection, zeroed) are far from the oracle's: agreeing with the oracle computes both."""
    f = oracle_files("lfm2")
    ids = ids_for(f.config.vocab_size, 12)
    assert silenced_shift(f.model, module, ids) > 0.1


def test_the_per_block_head_count_is_read_and_shown(oracle_files):
    """describe shows the array as one entry per block, and H_kv, the attention blocks' count."""
    text = str(describe(oracle_files("lfm2").path))
    assert "n_kv ∈ ℕ^{L} = [0, 2, 0, 2]" in text
    assert "H_kv ∈ ℕ = 2" in text


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_convolution_blocks_decode_from_their_state(oracle_files, target):
    """The generated module keeps each convolution block's window as its State: no rerun of the
    sequence (no CacheRecomputes warning), and the tokens one by one give the full pass's logits."""
    f = oracle_files("lfm2")
    ids = ids_for(f.config.vocab_size, 10)
    assert_logits_close(
        token_by_token(f.path, target, ids), hf_logits(f.model, ids), what=f"lfm2 token by token, {target}"
    )


def test_a_per_block_array_of_the_wrong_length_is_refused(oracle_files, tmp_path):
    f = oracle_files("lfm2")
    path = write_gguf(f.model, f.config, tmp_path / "short.gguf", "lfm2", extra_kv={N_KV: [0, 2, 0]})
    with pytest.raises(ToycardsError, match=r"n_kv has 3 entries, but L = 4 layers"):
        load(path, target="numpy")


def test_a_missing_tensor_of_an_attention_block_is_refused(oracle_files, tmp_path):
    """head_count_kv says block 3 (blk.2) attends, but the file holds a convolution there."""
    f = oracle_files("lfm2")
    path = write_gguf(f.model, f.config, tmp_path / "flipped.gguf", "lfm2", extra_kv={N_KV: [0, 2, 2, 2]})
    with pytest.raises(ToycardsError, match=r"tensor 'blk\.2\.attn_q\.weight' is missing .* layer 3 holds"):
        load(path, target="numpy")


@pytest.mark.skipif(_llama_cpp_python() is None, reason="llama-cpp-python is not installed")
def test_llama_cpp_agrees(oracle_files, tmp_path):
    f = oracle_files("lfm2")
    ids = ids_for(f.config.vocab_size, 16)
    out = tmp_path / "llama_cpp.npy"
    subprocess.run([_llama_cpp_python(), PEER, f.path, json.dumps(ids), out], check=True, timeout=300)
    want = hf_logits(f.model, ids)
    assert_logits_close(np.load(out), want, 2e-5 * max(1.0, float(np.abs(want).max())), "llama.cpp")
    assert_logits_close(load(f.path, target="numpy").logits(ids), want, what="toycards numpy")
