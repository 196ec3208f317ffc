"""StableLM (general.architecture = "stablelm"): the variants the shared suites do not hold.

The shared suites hold the `stablelm` case (StableLM 2: q/k/v biases) and `stablelm2-12b` (per-head
q/k LayerNorms with the parallel block: stablelm_parallel.card, chosen by blk.0.attn_q_norm.weight).
Here: StableLM-3B-4E1T's layout without q/k/v biases (the card's `or 0`), against transformers and
llama.cpp; the 12B layout with q/k/v biases; and the two layouts llama.cpp also runs that no card
models, each refused with one line rather than run wrong: the parallel block without q/k norms
(stablelm.card requires ffn_norm) and q/k norms in the sequential block (CARDS_REFUSED_BY_TENSORS).
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
from toycards.inspect.describe import describe
from toycards.models.load import load


@pytest.mark.parametrize("target", ["reference", "numpy", "torch"])
def test_stablelm_without_qkv_biases_matches_transformers(oracle_files, target):
    f = oracle_files("stablelm-nobias")
    assert not any(t.endswith("attn_q.bias") for t in f.model.state_dict())  # the converter writes none
    ids = ids_for(f.config.vocab_size, 20)
    assert_logits_close(load(f.path, target=target).logits(ids), hf_logits(f.model, ids), what=target)


def test_a_parallel_residual_file_without_qk_norms_is_refused(tmp_path):
    model, config = tiny_model("stablelm", seed=2, use_parallel_residual=True)
    path = write_gguf(model, config, tmp_path / "parallel.gguf", "stablelm")
    with pytest.raises(ToycardsError) as err:
        load(path, target="numpy").logits([1, 2, 3])
    message = str(err.value)
    assert "ffn_norm" in message and "\n" not in message.strip(), message


def test_qk_norms_in_a_sequential_block_are_refused(tmp_path):
    """q/k norms and ffn_norm: stablelm_parallel.card would pass over ffn_norm (and stablelm.card
    over the q/k norms), so no card is chosen, and load and describe say why in one line."""
    model, config = tiny_model("stablelm2-12b", seed=2, use_parallel_residual=False)
    path = write_gguf(model, config, tmp_path / "sequential.gguf", "stablelm2-12b")
    with pytest.raises(ToycardsError) as err:
        load(path, target="numpy")
    message = str(err.value)
    assert "attn_q_norm" in message and "ffn_norm" in message and "\n" not in message.strip(), message
    described = describe(path)
    assert described.origin == "declaration-only" and "attn_q_norm" in described.notice, described.notice


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_stablelm_12b_layout_with_qkv_biases_matches_transformers(target, tmp_path):
    """The q/k/v biases (`or 0` in stablelm_parallel.card) come before the per-head norms."""
    model, config = tiny_model("stablelm2-12b", seed=3, use_qkv_bias=True)
    path = write_gguf(model, config, tmp_path / "biases.gguf", "stablelm2-12b")
    ids = ids_for(config.vocab_size, 20)
    assert_logits_close(load(path, target=target).logits(ids), hf_logits(model, ids), what=target)


@pytest.mark.skipif(
    _llama_cpp_python() is None, reason="llama-cpp-python is not installed (a benchmark dependency)"
)
def test_llama_cpp_reads_stablelm_without_biases_as_the_card_does(oracle_files, tmp_path):
    f = oracle_files("stablelm-nobias")
    ids = ids_for(f.config.vocab_size, 20)
    out = tmp_path / "llama_cpp.npy"
    script = Path(__file__).resolve().parents[1] / "peers" / "llama_cpp_logits.py"
    subprocess.run([_llama_cpp_python(), script, f.path, json.dumps(ids), out], check=True, timeout=300)
    want = load(f.path, target="numpy").logits(ids)
    assert_logits_close(np.load(out), want, atol=2e-5 * max(1.0, float(np.abs(want).max())), what="stablelm")


def test_each_head_is_normalised_by_its_own_row(oracle_files, tmp_path):
    """The oracle bites on the per-head norms: the same model with its query and key heads' norm
    weights handed to other heads (rows reversed) is far from the original's logits, while toycards
    still follows transformers on it; so agreement above means every head read its own row."""
    import copy

    import torch

    f = oracle_files("stablelm2-12b")
    swapped = copy.deepcopy(f.model)
    with torch.no_grad():
        for layer in swapped.model.layers:
            for norms in (layer.self_attn.q_layernorm.norms, layer.self_attn.k_layernorm.norms):
                weights = [n.weight.clone() for n in norms]
                for n, w in zip(norms, reversed(weights), strict=True):
                    n.weight.copy_(w)
    path = write_gguf(swapped, f.config, tmp_path / "swapped.gguf", "stablelm2-12b")
    ids = ids_for(f.config.vocab_size, 16)
    got = load(path, target="numpy").logits(ids)
    assert_logits_close(got, hf_logits(swapped, ids), what="rows reversed")
    moved = np.abs(got - hf_logits(f.model, ids)).max()  # measured 0.29
    assert moved > 1e-2, f"reversing the heads' norm rows moved the logits by only {moved:.3g}"
