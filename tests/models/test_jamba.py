"""Jamba (general.architecture = "jamba"): the llama.cpp rules the shared suites do not show by themselves.

The shared suites hold the `jamba` case (blocks attention, Mamba, Mamba, attention; a SwiGLU MLP in
blocks 1 and 3, experts in 2 and 4) against transformers' JambaForCausalLM on every target, full =
cached = batched, F32 and Q8_0, and describe's card read back. Here: every part of a block moves the
logits, the RMSNorms of dt, B and C included, so agreement shows each is computed; which blocks are
Mamba blocks comes from the file's per-block `attention.head_count_kv`; a Mamba block decodes from its
State (no rerun of the sequence); which blocks hold experts is read from the file's tensors, as
llama.cpp reads it, whatever the layout; llama.cpp (where
llama-cpp-python is installed) gives the same logits.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from oracle.hf_gguf import hf_logits, tiny_model, write_gguf
from stateful_checks import silenced_shift, token_by_token
from test_models_oracle import assert_logits_close, ids_for
from test_save_peer import _llama_cpp_python

from toycards.inspect.describe import describe
from toycards.models.load import load

PEER = Path(__file__).resolve().parents[1] / "peers" / "llama_cpp_logits.py"


@pytest.mark.parametrize(
    "module",
    [
        "mamba.out_proj",  # the Mamba blocks
        "self_attn.o_proj",  # the attention blocks
        "feed_forward.down_proj",  # the dense MLPs
        "feed_forward.experts.down_proj",  # the experts
        "mamba.dt_layernorm",  # Jamba's RMSNorms of the step-size rows, B and C
        "mamba.b_layernorm",
        "mamba.c_layernorm",
    ],
)
def test_each_part_moves_the_logits(oracle_files, module):
    """transformers' logits with one part zeroed are far from the oracle's: agreeing with the oracle
    computes every part."""
    f = oracle_files("jamba")
    ids = ids_for(f.config.vocab_size, 12)
    assert silenced_shift(f.model, module, ids) > 0.1


def test_the_per_block_head_count_is_read_and_shown(oracle_files):
    """describe shows the array as one entry per block, and H_kv, the attention blocks' count."""
    text = str(describe(oracle_files("jamba").path))
    assert "n_kv ∈ ℕ^{L} = [2, 0, 0, 2]" in text
    assert "H_kv ∈ ℕ = 2" in text


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_mamba_blocks_decode_from_their_state(oracle_files, target):
    """The generated module keeps each Mamba block's window and scan state as States: no rerun of
    the sequence (no CacheRecomputes warning), and the tokens one by one give the full pass's logits."""
    f = oracle_files("jamba")
    ids = ids_for(f.config.vocab_size, 10)
    assert_logits_close(
        token_by_token(f.path, target, ids), hf_logits(f.model, ids), what=f"jamba token by token, {target}"
    )


@pytest.mark.parametrize("offset, period", [(0, 2), (0, 1), (1, 4)])
def test_experts_in_any_blocks_are_read_from_the_file(tmp_path, offset, period):
    """llama.cpp tells an expert block by its ffn_gate_inp tensor, which no key records; the card
    reads the same (`present`), so a file laid out other than Jamba's released checkpoints (experts in
    every other block from the second) gives transformers' logits too, and describe shows the layout."""
    model, config = tiny_model("jamba", expert_layer_offset=offset, expert_layer_period=period)
    path = write_gguf(model, config, tmp_path / f"experts{offset}{period}.gguf", "jamba")
    ids = ids_for(config.vocab_size, 10)
    want = hf_logits(model, ids)
    for target in ("numpy", "torch"):
        assert_logits_close(load(path, target=target).logits(ids), want, what=f"experts at {offset} mod {period}")
    flags = [int(i % period == offset) for i in range(config.num_hidden_layers)]
    shown = " ".join(str(describe(path)).split())
    assert f'm_E ∈ {{0,1}}^{{L}} = {flags} ≔ present("blk.{{l-1}}.ffn_gate_inp.weight", L)' in shown


@pytest.mark.skipif(_llama_cpp_python() is None, reason="llama-cpp-python is not installed")
def test_llama_cpp_agrees(oracle_files, tmp_path):
    f = oracle_files("jamba")
    ids = ids_for(f.config.vocab_size, 16)
    out = tmp_path / "llama_cpp.npy"
    subprocess.run([_llama_cpp_python(), PEER, f.path, json.dumps(ids), out], check=True, timeout=300)
    want = hf_logits(f.model, ids)
    assert_logits_close(np.load(out), want, 2e-5 * max(1.0, float(np.abs(want).max())), "llama.cpp")
    assert_logits_close(load(f.path, target="numpy").logits(ids), want, what="toycards numpy")
