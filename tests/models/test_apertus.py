"""Apertus: the llama.cpp rules the shared suites do not show by themselves.

The shared suites hold the `apertus` case (per-head q/k RMSNorm, NEOX RoPE with llama3 rope_freqs,
an ungated MLP with xIELU whose numbers differ per block) against transformers. Here: block l's MLP
uses entry l of the xielu.* arrays (the same file with the arrays reversed is far off), one number
in place of an array stands for every block (llama.cpp's get_key_or_arr), and the attention biases
llama.cpp's apertus adds when a file has them (bq, bk, bv, bo).
"""

from __future__ import annotations

import numpy as np
import torch
from oracle.archs import ARCHS
from oracle.hf_gguf import hf_logits, tiny_model, write_gguf
from test_models_oracle import assert_logits_close, ids_for, worst

from toycards.models.load import load

XIELU = ("xielu.alpha_n", "xielu.alpha_p", "xielu.beta", "xielu.eps")


def test_apertus_reads_block_l_xielu_numbers_from_entry_l(oracle_files, tmp_path):
    f = oracle_files("apertus")
    kv = ARCHS["apertus"].weight_kv[1](f.model.state_dict())
    reversed_kv = {k: (list(reversed(v)), t) for k, (v, t) in kv.items()}
    assert kv["xielu.alpha_p"][0] != reversed_kv["xielu.alpha_p"][0]  # the blocks' numbers differ
    path = write_gguf(f.model, f.config, tmp_path / "reversed.gguf", "apertus", extra_kv=reversed_kv)
    ids = ids_for(f.config.vocab_size, 16)
    got, want = load(path, target="numpy").logits(ids), hf_logits(f.model, ids)
    assert np.abs(got - want).max() > 1e-3, worst(got, want)


def test_apertus_one_xielu_number_for_every_block(tmp_path):
    """get_key_or_arr: a scalar key gives every block the same number."""
    model, config = tiny_model("apertus", seed=4)
    values = {"alpha_n": 0.7, "alpha_p": -0.4, "beta": 0.3, "eps": -1e-6}
    with torch.no_grad():
        for name, t in model.state_dict().items():
            leaf = name.rsplit(".", 1)[-1]
            if ".act_fn." in name:
                t.fill_(values[leaf])
    scalars = {k: float(values[k.split(".")[1]]) for k in XIELU}
    path = write_gguf(model, config, tmp_path / "scalars.gguf", "apertus", extra_kv=scalars)
    ids = ids_for(config.vocab_size, 12)
    got = load(path, target="numpy").logits(ids)
    assert_logits_close(got, hf_logits(model, ids), what="apertus with one xIELU number per key")


def test_apertus_attention_biases_when_the_file_has_them(tmp_path):
    """attention_bias: q/k/v/output biases, each of which llama.cpp's apertus adds when present."""
    model, config = tiny_model("apertus", seed=5, attention_bias=True)
    path = write_gguf(model, config, tmp_path / "biases.gguf", "apertus")
    ids = ids_for(config.vocab_size, 12)
    got = load(path, target="numpy").logits(ids)
    assert_logits_close(got, hf_logits(model, ids), what="apertus with attention biases")
