"""Qwen3-Next (general.architecture = "qwen3next"): qwen3next.card and the prelude's gated delta rule
(`deltanet_head`, `deltanet_scan`, `l2_norm`), the llama.cpp rules the shared suites do not show by
themselves.

The shared suites hold the `qwen3next` case (blocks DeltaNet, attention, DeltaNet, attention; top-2 of
4 experts renormalised with a gated shared expert) against transformers' Qwen3NextForCausalLM on every
target, full = cached = batched, F32 and Q8_0, describe's card read back. Here: the prelude's scan
against transformers' recurrent gated delta rule, its L2 norm against ggml_l2_norm's definition, both
kinds of block moving the logits (so agreement shows each is computed), the DeltaNet blocks decoding
from their State (no rerun of the sequence), and a file without full_attention_interval read as
llama.cpp reads it (every 4th block attends).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from oracle.hf_gguf import hf_logits, tiny_model, write_gguf
from stateful_checks import silenced_shift, token_by_token
from test_models_oracle import assert_logits_close, ids_for
from transformers.models.qwen3_next.modeling_qwen3_next import torch_recurrent_gated_delta_rule

from toycards.checker import check_card
from toycards.inspect.describe import describe
from toycards.lang.interpret import run
from toycards.library import library_algorithms, library_card
from toycards.models.load import load

ARCH = "qwen3next"


def test_card_checks_clean_and_each_head_keeps_its_memory():
    problems = [d.headline() for d in check_card(library_card(ARCH)).diagnostics if d.severity != "note"]
    assert not problems, problems
    prelude = library_algorithms()
    assert not prelude["deltanet_scan"].state_decls  # no state of its own: each head's deltanet_head keeps S
    assert [n for d in prelude["deltanet_head"].state_decls for n in d.names] == ["S"]


@pytest.mark.parametrize("G, H", [(1, 1), (2, 4), (3, 3)])
def test_deltanet_scan_is_transformers_gated_delta_rule(G, H):
    """Value head h reads query/key head ⌈h·G/H⌉ (transformers' repeat_interleave), decays its memory
    by exp(g), corrects it toward v by β, and is read by q / √d_k."""
    rng = np.random.default_rng(G + H)
    d_k, d_v, length = 5, 3, 7
    q, k = rng.standard_normal((G * d_k, length)), rng.standard_normal((G * d_k, length))
    k /= np.linalg.norm(k.reshape(G, d_k, length), axis=1).repeat(d_k, axis=0)  # unit keys, as the card's
    v = rng.standard_normal((H * d_v, length))
    g = -np.exp(rng.standard_normal((H, length)))
    beta = 1 / (1 + np.exp(-rng.standard_normal((H, length))))
    got = run(library_card("prelude"), [q, k, v, g, beta], {"G": G}, algorithm="deltanet_scan")

    def heads(a, n):  # card [n·d, ℓ] → transformers' [1, ℓ, n, d]
        return torch.tensor(a.T.reshape(1, length, n, -1))

    want, _ = torch_recurrent_gated_delta_rule(
        heads(q, G), heads(k, G), heads(v, H), g=torch.tensor(g.T[None]), beta=torch.tensor(beta.T[None])
    )  # computes in float32
    np.testing.assert_allclose(got, want[0].reshape(length, H * d_v).numpy().T, atol=1e-5)


def test_l2_norm_is_ggml_l2_norm():
    """x / max(‖x‖, ε) (ggml_compute_forward_l2_norm_f32), which transformers' x / √(‖x‖² + 1e-6)
    approaches for ‖x‖ ≫ ε."""
    prelude = library_card("prelude")
    x = np.array([3.0, 4.0])
    np.testing.assert_allclose(run(prelude, [x], {"ε": 1e-6}, algorithm="l2_norm"), [0.6, 0.8])
    np.testing.assert_allclose(run(prelude, [x * 1e-3], {"ε": 0.5}, algorithm="l2_norm"), x * 1e-3 / 0.5)


@pytest.mark.parametrize("module", ["linear_attn.out_proj", "self_attn.o_proj"])
def test_each_kind_of_block_moves_the_logits(oracle_files, module):
    f = oracle_files(ARCH)
    ids = ids_for(f.config.vocab_size, 12)
    assert silenced_shift(f.model, module, ids) > 0.05 * np.abs(hf_logits(f.model, ids)).max()


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_deltanet_blocks_decode_from_their_state(oracle_files, target):
    """The generated module keeps each DeltaNet block's convolution window and per-head memory as
    its State: the tokens one by one, with no rerun of the sequence, give the full pass's logits."""
    f = oracle_files(ARCH)
    ids = ids_for(f.config.vocab_size, 10)
    assert_logits_close(
        token_by_token(f.path, target, ids), hf_logits(f.model, ids), what=f"{ARCH}, {target}"
    )


def test_without_full_attention_interval_every_fourth_block_attends(tmp_path):
    """llama.cpp's qwen3next takes full_attention_interval = 4 when the key is absent (three DeltaNet
    blocks, then attention): a file without it is the model with the interval 4."""
    model, config = tiny_model(ARCH, full_attention_interval=4)
    kv = {f"{ARCH}.full_attention_interval": None}
    path = write_gguf(model, config, tmp_path / "interval.gguf", ARCH, extra_kv=kv)
    assert "n_fa ∈ ℕ = 4" in str(describe(path))
    ids = ids_for(config.vocab_size, 9)
    assert_logits_close(load(path, target="numpy").logits(ids), hf_logits(model, ids), what="interval 4")
