"""Granite 4.0 hybrid (general.architecture = "granitehybrid"): the llama.cpp rules the shared suites do not
show by themselves.

The shared suites hold the `granitehybrid` case (blocks mamba, attention, mamba, attention; top-2 of 4
experts with a shared one) and `granitehybrid-dense` (no experts: one SwiGLU MLP) against transformers'
GraniteMoeHybridForCausalLM on every target, full = cached = batched, F32 and Q8_0, describe's card read
back, and llama.cpp where TOYCARDS_LLAMA_CPP_PYTHON names an interpreter with llama-cpp-python. Here:
both kinds of block move the logits, so agreement shows each is computed; a Mamba-2 block decodes from
its State (no rerun of the sequence); RoPE runs exactly when the file's rope.scaling.finetuned says so
(the converter writes false for Granite 4, true for Bamba); a file without logit_scale is not divided
(optional for granitehybrid in llama.cpp's loader); llama.cpp gives the same logits.
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
ARCH = "granitehybrid"


@pytest.mark.parametrize("module", ["mamba.out_proj", "self_attn.o_proj"])
def test_each_kind_of_block_moves_the_logits(oracle_files, module):
    """transformers' logits with one kind of block silenced (its output projection zeroed) are far from
    the oracle's: agreeing with the oracle computes both."""
    f = oracle_files(ARCH)
    ids = ids_for(f.config.vocab_size, 12)
    assert silenced_shift(f.model, module, ids) > 0.05 * np.abs(hf_logits(f.model, ids)).max()


def test_the_per_block_head_count_is_read_and_shown(oracle_files):
    text = str(describe(oracle_files(ARCH).path))
    assert "n_kv ∈ ℕ^{L} = [0, 2, 0, 2]" in text
    assert "rot ∈ {0,1} = 0" in text  # no RoPE: the converter's rope.scaling.finetuned = false


@pytest.mark.parametrize("case", [ARCH, "granitehybrid-dense"])
@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_mamba_blocks_decode_from_their_state(oracle_files, case, target):
    """The generated module keeps each Mamba-2 block's convolution window and scan state as its State:
    no rerun of the sequence (no CacheRecomputes warning), and the tokens one by one give the full
    pass's logits."""
    f = oracle_files(case)
    ids = ids_for(f.config.vocab_size, 10)
    assert_logits_close(
        token_by_token(f.path, target, ids), hf_logits(f.model, ids), what=f"{case} token by token, {target}"
    )


def test_rope_runs_where_the_file_says_so(tmp_path):
    """A file whose rope.scaling.finetuned is true (as the converter writes Bamba's) rotates queries and
    keys on adjacent pairs of the permuted rows: transformers' model with position_embedding_type "rope"
    (rotating halves of the unpermuted rows); the same weights without RoPE are far from it."""
    model, config = tiny_model(ARCH, position_embedding_type="rope")
    kv = {f"{ARCH}.rope.scaling.finetuned": True, f"{ARCH}.context_length": config.max_position_embeddings}
    path = write_gguf(model, config, tmp_path / "rope.gguf", ARCH, extra_kv=kv)
    ids = ids_for(config.vocab_size, 12)
    want = hf_logits(model, ids)
    assert_logits_close(load(path, target="numpy").logits(ids), want, what="granitehybrid with RoPE")
    unrotated = write_gguf(model, config, tmp_path / "nope.gguf", ARCH)
    assert np.abs(load(unrotated, target="numpy").logits(ids) - want).max() > 1e-3


def test_a_file_without_logit_scale_is_not_divided(oracle_files, tmp_path):
    """llama.cpp's granitehybrid reads logit_scale as optional (granite requires it): absent, the logits
    are the head's output itself, the oracle's times its logits_scaling."""
    f = oracle_files(ARCH)
    path = write_gguf(
        f.model, f.config, tmp_path / "unscaled.gguf", ARCH, extra_kv={f"{ARCH}.logit_scale": None}
    )
    ids = ids_for(f.config.vocab_size, 8)
    want = hf_logits(f.model, ids) * f.config.logits_scaling
    assert_logits_close(
        load(path, target="numpy").logits(ids), want, what="granitehybrid without logit_scale"
    )


@pytest.mark.skipif(_llama_cpp_python() is None, reason="llama-cpp-python is not installed")
@pytest.mark.parametrize("case", [ARCH, "granitehybrid-dense"])
def test_llama_cpp_agrees(oracle_files, tmp_path, case):
    f = oracle_files(case)
    ids = ids_for(f.config.vocab_size, 16)
    out = tmp_path / "llama_cpp.npy"
    subprocess.run([_llama_cpp_python(), PEER, f.path, json.dumps(ids), out], check=True, timeout=300)
    want = hf_logits(f.model, ids)
    assert_logits_close(np.load(out), want, 2e-5 * max(1.0, float(np.abs(want).max())), "llama.cpp")
    assert_logits_close(load(f.path, target="numpy").logits(ids), want, what="toycards numpy")
