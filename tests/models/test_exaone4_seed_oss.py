"""EXAONE 4.0 and Seed-OSS: the llama.cpp rules the shared suites do not show by themselves.

The shared suites hold the `exaone4` (1.2B's shape: no windows), `exaone4-swa` (64 blocks, windows)
and `seed_oss` cases against transformers. Here, for exaone4.card: the windows belong to the
64-block model only (a smaller file with a window key is all global and rotated, as llama.cpp runs
it, whatever transformers would do with that config), and each feature of the 64-block case moves
the logits, so agreement shows it is computed.
For Seed-OSS: a file with an output-projection bias, which llama.cpp does not load, is refused.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from oracle.hf_gguf import hf_logits, tiny_model, write_gguf
from test_models_oracle import assert_logits_close, ids_for, worst
from test_save_peer import _llama_cpp_python

from toycards.errors import ToycardsError
from toycards.inspect.describe import describe
from toycards.models.load import load

CARD = Path(__file__).resolve().parents[2] / "toycards" / "library" / "cards" / "exaone4.card"
PEER = Path(__file__).resolve().parents[1] / "peers" / "llama_cpp_logits.py"


def llama_cpp_logits(path: Path, ids: list[int], tmp_path: Path) -> np.ndarray:
    out = tmp_path / "llama_cpp.npy"
    subprocess.run([_llama_cpp_python(), PEER, path, json.dumps(ids), out], check=True, timeout=300)
    return np.load(out)


def test_exaone4_windows_belong_to_the_64_block_model_only(oracle_files, tmp_path):
    """llama.cpp gives exaone4 windows (and NoPE global blocks) only when it has 64 blocks: the
    2-block file with a window of 4 and both blocks flagged sliding runs as the model without
    windows, not as transformers' windowed model of that config (measured |Δ| 16 on 16 tokens)."""
    f = oracle_files("exaone4")
    # the same weights (seed 0) in transformers' model of a window of 4 on both blocks, rotated
    windowed, _ = tiny_model("exaone4", sliding_window=4, layer_types=["sliding_attention"] * 2)
    extra = {"exaone4.attention.sliding_window": 4, "exaone4.attention.sliding_window_pattern": [True, True]}
    path = write_gguf(f.model, f.config, tmp_path / "window.gguf", "exaone4", extra_kv=extra)
    ids = ids_for(f.config.vocab_size, 16)
    got, want = load(path, target="numpy").logits(ids), hf_logits(f.model, ids)
    assert_logits_close(got, want, what="exaone4, 2 blocks with a window key")
    assert np.abs(got - hf_logits(windowed, ids)).max() > 1e-2, worst(got, hf_logits(windowed, ids))
    if _llama_cpp_python() is not None:
        bound = 2e-5 * max(1.0, float(np.abs(want).max()))
        assert_logits_close(llama_cpp_logits(path, ids, tmp_path), want, bound, "llama.cpp, 2 blocks")


# The 64-block case with one thing changed, each far from transformers (measured on 16 tokens): the
# window too large to act (|Δ| 3.1), RoPE on the global blocks too (1.0).
CHANGES = {
    "window 1000": ({"exaone4.attention.sliding_window": 1000}, None),
    "rotated global blocks": ({}, ("V | H, H_kv, none, θ_base", "V | H, H_kv, halves, θ_base")),
}


@pytest.mark.parametrize("change", CHANGES)
def test_each_exaone4_window_feature_moves_the_logits(oracle_files, change, tmp_path):
    f = oracle_files("exaone4-swa")
    keys, edit = CHANGES[change]
    path = write_gguf(f.model, f.config, tmp_path / "changed.gguf", "exaone4-swa", extra_kv=keys)
    if edit is None:
        model = load(path, target="numpy")
    else:
        card = tmp_path / "exaone4.card"
        card.write_text(CARD.read_text(encoding="utf-8").replace(*edit), encoding="utf-8")
        model = load(card, weights=str(path), target="numpy")
    ids = ids_for(f.config.vocab_size, 16)
    got, want = model.logits(ids), hf_logits(f.model, ids)
    assert np.abs(got - want).max() > 0.1, f"{change}: {worst(got, want)}"


def test_seed_oss_output_bias_is_refused_as_llama_cpp_refuses_it(tmp_path):
    """attention_out_bias: the converter writes attn_output.bias, which llama.cpp's seed_oss does not
    load (it refuses the file); no card runs it, in one line, rather than passing over the bias."""
    model, config = tiny_model("seed_oss", seed=2, attention_out_bias=True)
    path = write_gguf(model, config, tmp_path / "output_bias.gguf", "seed_oss")
    with pytest.raises(ToycardsError) as err:
        load(path, target="numpy")
    message = str(err.value)
    assert "attn_output.bias" in message and "\n" not in message.strip(), message
    described = describe(path)
    assert described.origin == "declaration-only" and "attn_output.bias" in described.notice
    if _llama_cpp_python() is not None:
        with pytest.raises(subprocess.CalledProcessError):
            llama_cpp_logits(path, [1, 2, 3], tmp_path)
