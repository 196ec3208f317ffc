"""StableLM (general.architecture = "stablelm"): the variants the shared suites do not hold.

The shared suites hold the `stablelm` case (StableLM 2: q/k/v biases). Here: StableLM-3B-4E1T's
layout without q/k/v biases (the card's `or 0`), against transformers and llama.cpp; and a file of
StableLM 2 12B's parallel block (no ffn_norm: llama.cpp then feeds the MLP from the attention's
LayerNorm), which the card does not model and must refuse with one line, not run as sequential.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from oracle.hf_gguf import hf_logits, tiny_model, write_gguf
from test_models_oracle import assert_logits_close, ids_for
from test_save_peer import _llama_cpp_python

from toycards.errors import ToycardsError
from toycards.models.load import load


@pytest.mark.parametrize("target", ["reference", "numpy", "torch"])
def test_stablelm_without_qkv_biases_matches_transformers(oracle_files, target):
    f = oracle_files("stablelm-nobias")
    assert not any(t.endswith("attn_q.bias") for t in f.model.state_dict())  # the converter writes none
    ids = ids_for(f.config.vocab_size, 20)
    assert_logits_close(load(f.path, target=target).logits(ids), hf_logits(f.model, ids), what=target)


def test_a_parallel_residual_file_is_refused(tmp_path):
    model, config = tiny_model("stablelm", seed=2, use_parallel_residual=True)
    path = write_gguf(model, config, tmp_path / "parallel.gguf", "stablelm")
    with pytest.raises(ToycardsError) as err:
        load(path, target="numpy").logits([1, 2, 3])
    message = str(err.value)
    assert "ffn_norm" in message and "\n" not in message.strip(), message


@pytest.mark.skipif(
    _llama_cpp_python() is None, reason="llama-cpp-python is not installed (a benchmark dependency)"
)
def test_llama_cpp_reads_stablelm_without_biases_as_the_card_does(oracle_files, tmp_path):
    f = oracle_files("stablelm-nobias")
    ids = ids_for(f.config.vocab_size, 20)
    out = tmp_path / "llama_cpp.npy"
    script = Path(__file__).resolve().parent / "peers" / "llama_cpp_logits.py"
    subprocess.run([_llama_cpp_python(), script, f.path, json.dumps(ids), out], check=True, timeout=300)
    want = load(f.path, target="numpy").logits(ids)
    assert_logits_close(np.load(out), want, atol=2e-5 * max(1.0, float(np.abs(want).max())), what="stablelm")
