"""Falcon-H1 (general.architecture = "falcon-h1"): the llama.cpp rules the shared suites do not show by
themselves.

The shared suites hold the `falcon-h1` case (two blocks, each grouped-query attention 4/2 with head_dim
8 ≠ d_e/H and RoPE on halves beside a Mamba-2 mixer of 6 heads in 2 groups with d_inner 96 ≠ 2·d_e,
then a SwiGLU MLP; every µP multiplier ≠ 1) against transformers' FalconH1ForCausalLM on its PyTorch
path (no mamba-ssm or causal-conv1d kernels) on every target, F32 and Q8_0, in the interpreter, with a
KV cache, through describe's round trip. Here: each of the three branches moves the logits and so does
each multiplier the converter folds into a weight (so agreement shows both are read right); the
mixers decode from their State, token by token, in chunks and in batches; a file with the mixer's
MLP biases, which llama.cpp applies on sight and the card does not model, is refused; the mixer's
grouped RMSNorm is read where the file stores it.
"""

from __future__ import annotations

import numpy as np
import pytest
from oracle.hf_gguf import hf_logits, tiny_model, write_gguf
from stateful_checks import silenced_shift, token_by_token
from test_mamba import decode, want_rows
from test_models_oracle import assert_logits_close, ids_for

from toycards.errors import ToycardsError
from toycards.models.load import load

ARCH = "falcon-h1"
TARGETS = ("numpy", "torch")


@pytest.mark.parametrize("module", ["mamba.out_proj", "self_attn.o_proj", "feed_forward.down_proj"])
def test_each_branch_moves_the_logits(oracle_files, module):
    """transformers' logits with one branch silenced (its output projection zeroed) are far from the
    oracle's: agreeing with the oracle computes all three."""
    f = oracle_files(ARCH)
    ids = ids_for(f.config.vocab_size, 12)
    assert silenced_shift(f.model, module, ids) > 0.05 * np.abs(hf_logits(f.model, ids)).max()


@pytest.mark.parametrize(
    "unit",
    [
        {"embedding_multiplier": 1.0},
        {"key_multiplier": 1.0},
        {"attention_in_multiplier": 1.0},
        {"attention_out_multiplier": 1.0},
        {"ssm_in_multiplier": 1.0},
        {"ssm_multipliers": [1.0] * 5},
        {"ssm_out_multiplier": 1.0},
        {"mlp_multipliers": [1.0, 1.0]},
        {"lm_head_multiplier": 1.0},
    ],
    ids=lambda unit: next(iter(unit)),
)
def test_each_folded_multiplier_moves_the_logits(oracle_files, unit):
    """The same weights with one µP multiplier at 1 give other logits: the file, which carries the
    multipliers only inside its weights (FalconH1Model.modify_tensors), is read right only if each
    one is folded where transformers applies it."""
    f = oracle_files(ARCH)
    ids = ids_for(f.config.vocab_size, 12)
    plain, _ = tiny_model(ARCH, **unit)
    want = hf_logits(f.model, ids)
    assert np.abs(hf_logits(plain, ids) - want).max() > 1e-2 * np.abs(want).max()


def test_no_multiplier_is_metadata(oracle_files):
    from gguf import GGUFReader

    keys = GGUFReader(oracle_files(ARCH).path).fields
    assert not [k for k in keys if "multiplier" in k or k.endswith("_scale")]


@pytest.mark.parametrize("target", TARGETS)
def test_mixers_decode_from_their_state(oracle_files, target):
    """The generated module keeps each block's convolution window and scan state as its State, beside
    the KV rows: no rerun of the sequence, and the tokens one by one give the full pass's logits."""
    f = oracle_files(ARCH)
    ids = ids_for(f.config.vocab_size, 10)
    assert_logits_close(
        token_by_token(f.path, target, ids),
        hf_logits(f.model, ids),
        what=f"falcon-h1 token by token, {target}",
    )


@pytest.mark.parametrize("target", TARGETS)
def test_chunks_and_batches_match_transformers(oracle_files, target):
    """Three sequences in one batch, in a full pass and through one cache in passes of 5, 1, 7 and 3
    tokens (transformers' SSD chunks are 8 tokens long)."""
    f = oracle_files(ARCH)
    model = load(f.path, target=target)
    seqs = np.random.default_rng(3).integers(0, f.config.vocab_size, size=(3, 16))
    want = want_rows(f, seqs)
    full = model._forward_numpy(seqs, None)
    cached, _ = decode(model, seqs, [5, 1, 7, 3])
    for b in range(3):
        assert_logits_close(full[b], want[b], what=f"{target}, batch of 3, sequence {b + 1}")
        assert_logits_close(cached[b], want[b], what=f"{target}, batch of 3, cached, sequence {b + 1}")


def test_the_mixers_grouped_norm_is_read_where_the_file_stores_it(tmp_path):
    """llama.cpp applies the mixer's grouped RMSNorm (mamba_rms_norm) in the blocks that store
    ssm_norm, after the gate, and no key says so: the card reads the same (`present`) and gives
    transformers' logits (its norm after the gate too, as the released configs set it)."""
    model, cfg = tiny_model(ARCH, mamba_rms_norm=True, mamba_norm_before_gate=False)
    path = write_gguf(model, cfg, tmp_path / "ssm_norm.gguf", ARCH)
    ids = ids_for(cfg.vocab_size, 12)
    want = hf_logits(model, ids)
    for target in ("reference", "numpy", "torch"):
        assert_logits_close(load(path, target=target).logits(ids), want, what=f"ssm_norm, {target}")
    assert silenced_shift(model, "mamba.norm", ids) > 0.1


def test_mlp_biases_are_refused(tmp_path):
    """llama.cpp adds the MLP's biases (mlp_bias) whenever the file holds them; the prelude's SwiGLU
    has none, so the library refuses such a file rather than run it without them."""
    model, cfg = tiny_model(ARCH, mlp_bias=True)
    path = write_gguf(model, cfg, tmp_path / "variant.gguf", ARCH)
    with pytest.raises(ToycardsError, match="MLP biases"):
        load(path, target="numpy")
