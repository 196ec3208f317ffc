"""Mamba (general.architecture = "mamba"): mamba.card and the prelude's stateful blocks
(`causal_conv`, `selective_scan`) held to transformers' `MambaForCausalLM`.

The oracle (tests/oracle, cases "mamba" and "mamba-untied") is a tiny MambaForCausalLM with random
weights, run on its PyTorch reference path (no mamba-ssm or causal-conv1d kernels) and written to
GGUF as llama.cpp's converter writes it: A stored as −exp(A_log), the convolution squeezed, tied
output left out. Held to its logits: the interpreter; the numpy and torch targets in a full pass, in
cached decoding (token by token, after a prefill, in chunks), batched (2, 3, 4 sequences), for the
last token alone, and from F16 and Q8_0 files; `toycards run`'s greedy text. The cache keeps a
fixed state (each layer's last d_conv inputs and its d_inner × d_state scan state) however long the
context, and never falls back to recomputing; `describe`'s bound card reads back and runs the same.

Tolerance: |Δ| ≤ 1e-4 on logits of up to ~20 (tests/models/test_models_oracle.py's bound; measured ≈ 1e-5).
"""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
from cli_run import cli
from oracle.hf_gguf import hf_logits
from test_models_oracle import assert_logits_close, ids_for
from test_save_peer import _llama_cpp_python

from toycards.checker import check, check_card
from toycards.inspect.describe import describe
from toycards.lang.parse import parse
from toycards.library import library_algorithms, library_card
from toycards.models.load import load
from toycards.runtime.model_base import CacheRecomputes

TARGETS = ("numpy", "torch")
N_V = 288  # the oracle's vocabulary (tests/oracle/hf_gguf.py ARCHS["mamba"])


@pytest.fixture(scope="module")
def models(oracle_files):
    """`models(case, target, ftype="F32")`: toycards' model of an oracle file, loaded once."""
    made: dict[tuple[str, str, str], object] = {}

    def get(case: str, target: str, ftype: str = "F32"):
        if (case, target, ftype) not in made:
            made[case, target, ftype] = load(oracle_files(case, ftype).path, target=target)
        return made[case, target, ftype]

    return get


def want_rows(f, seqs: np.ndarray) -> np.ndarray:
    """transformers' logits [B, ℓ, N_V] of each sequence, one full pass apiece."""
    return np.stack([hf_logits(f.model, s.tolist()) for s in seqs])


def decode(model, seqs: np.ndarray, chunks: list[int]) -> tuple[np.ndarray, object]:
    """Logits [B, ℓ, N_V] of `seqs` fed through one cache in passes of `chunks` tokens; the cache."""
    cache, parts, start = model.new_cache(), [], 0
    for n in chunks:
        parts.append(model._forward_numpy(seqs[:, start : start + n], cache))
        start += n
        assert cache.length == start
    assert start == seqs.shape[1]
    return np.concatenate(parts, axis=1), cache


def held_bytes(cache) -> int:
    """What a cache holds for the model: its states and its KV slots, in bytes."""
    arrays = [a for state in cache.states for a in state] + [
        b for slot in cache.slots for b in slot[0] if b is not None
    ]
    return sum(a.nbytes if isinstance(a, np.ndarray) else a.numel() * a.element_size() for a in arrays)


# ── the card ────────────────────────────────────────────────────────────────────────────
def test_card_checks_clean_and_its_blocks_carry_state():
    problems = [d.headline() for d in check_card(library_card("mamba")).diagnostics if d.severity != "note"]
    assert not problems, problems
    prelude = library_algorithms()
    states = {
        name: [n for d in prelude[name].state_decls for n in d.names]
        for name in ("causal_conv", "selective_scan")
    }
    assert states == {"causal_conv": ["W"], "selective_scan": ["h"]}


def test_a_mamba_file_gets_the_library_card_bound_to_its_config(oracle_files):
    from test_describe import card_values, same_number

    f = oracle_files("mamba")
    described = describe(f.path)
    assert described.origin == "library" and described.card_path.endswith("mamba.card")
    c = f.config
    config = {"L": c.num_hidden_layers, "d_e": c.hidden_size, "d_i": c.intermediate_size, "d_s": c.state_size}
    config |= {"k": c.conv_kernel, "r": c.time_step_rank, "ε": c.layer_norm_epsilon, "N_V": c.vocab_size}
    values = card_values(described)
    assert all(same_number(values[name], want) for name, want in config.items()), (values, config)


# ── full passes against transformers ────────────────────────────────────────────────────
@pytest.mark.parametrize("length", [1, 4, 9])
def test_interpreter_matches_transformers(oracle_files, length):
    f = oracle_files("mamba")
    ids = ids_for(N_V, length)
    got = load(f.path, target="reference").logits(ids)
    assert_logits_close(got, hf_logits(f.model, ids), what=f"interpreter, {length} tokens")


@pytest.mark.skipif(
    _llama_cpp_python() is None, reason="llama-cpp-python is not installed (a benchmark dependency)"
)
def test_llama_cpp_reads_the_oracle_file_as_the_model_it_came_from(oracle_files, tmp_path):
    """The oracle's file is what llama.cpp runs as Mamba (2e-5 of max |logit|, as for the other
    families in tests/models/test_models_oracle.py)."""
    f = oracle_files("mamba")
    ids = ids_for(N_V, 12)
    out = tmp_path / "llama_cpp.npy"
    script = Path(__file__).resolve().parents[1] / "peers" / "llama_cpp_logits.py"
    subprocess.run([_llama_cpp_python(), script, f.path, json.dumps(ids), out], check=True, timeout=300)
    want = hf_logits(f.model, ids)
    bound = 2e-5 * max(1.0, float(np.abs(want).max()))
    assert_logits_close(np.load(out), want, atol=bound, what="llama.cpp vs transformers")


@pytest.mark.parametrize("length", [1, 4, 8, 32, 64])  # the convolution's width, the state size, d_e
@pytest.mark.parametrize("case", ["mamba", "mamba-untied"])
@pytest.mark.parametrize("target", TARGETS)
def test_full_pass_matches_transformers(oracle_files, models, target, case, length):
    f = oracle_files(case)
    ids = ids_for(N_V, length)
    got = models(case, target).logits(ids)
    assert got.dtype == np.float32
    assert_logits_close(got, hf_logits(f.model, ids), what=f"{case} {target}, {length} tokens")


@pytest.mark.parametrize("ftype", ["F16", "Q8_0"])
@pytest.mark.parametrize("target", TARGETS)
def test_quantized_file_matches_its_dequantized_reference(oracle_files, models, target, ftype):
    f = oracle_files("mamba", ftype)
    ids = ids_for(N_V, 24)
    want = f.expected_logits(ids)
    assert_logits_close(models("mamba", target, ftype).logits(ids), want, what=f"{ftype} {target}")
    moved = np.abs(hf_logits(f.model, ids) - want).max()
    assert moved > 1e-3, f"{ftype}: quantization moved the logits by only {moved:.3g}; not quantized?"


# ── cached decoding, batches, the last token ────────────────────────────────────────────
SCHEDULES = {  # passes of a 20-token sequence through one cache
    "token by token": [1] * 20,
    "prefill then tokens": [5] + [1] * 15,
    "chunks": [3, 3, 7, 2, 5],
}


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("target", TARGETS)
def test_cached_decoding_matches_transformers(oracle_files, models, target, schedule):
    f = oracle_files("mamba")
    seqs = np.asarray([ids_for(N_V, 20)])
    got, _ = decode(models("mamba", target), seqs, SCHEDULES[schedule])
    assert_logits_close(got[0], want_rows(f, seqs)[0], what=f"{target}, cached, {schedule}")


@pytest.mark.parametrize("batch", [2, 3, 4])  # 4: the convolution's width
@pytest.mark.parametrize("target", TARGETS)
def test_batches_match_transformers(oracle_files, models, target, batch):
    f, model = oracle_files("mamba"), models("mamba", target)
    seqs = np.random.default_rng(batch).integers(0, N_V, size=(batch, 12))
    want = want_rows(f, seqs)
    full = model._forward_numpy(seqs, None)
    cached, _ = decode(model, seqs, [4] + [1] * 8)
    for b in range(batch):
        assert_logits_close(full[b], want[b], what=f"{target}, batch of {batch}, sequence {b + 1}")
        assert_logits_close(cached[b], want[b], what=f"{target}, batch of {batch}, cached, sequence {b + 1}")


@pytest.mark.parametrize("target", TARGETS)
def test_last_token_alone(oracle_files, models, target):
    f, model = oracle_files("mamba"), models("mamba", target)
    seqs = np.random.default_rng(5).integers(0, N_V, size=(2, 10))
    want = want_rows(f, seqs)
    assert_logits_close(
        model._forward_numpy(seqs, None, last=True)[:, 0], want[:, -1], what=f"{target}, last"
    )
    cache = model.new_cache()
    model._forward_numpy(seqs[:, :6], cache, last=True)
    got = model._forward_numpy(seqs[:, 6:], cache, last=True)
    assert got.shape == (2, 1, N_V)
    assert_logits_close(got[:, 0], want[:, -1], what=f"{target}, cached, last")


@pytest.mark.parametrize("target", TARGETS)
def test_the_state_carries_the_context(oracle_files, models, target):
    """A token's logits depend on the tokens before it through the state alone: without them (a new
    cache) they differ from transformers'; after `reset` the cache starts a sequence afresh."""
    f, model = oracle_files("mamba"), models("mamba", target)
    seqs = np.asarray([ids_for(N_V, 12)])
    want = want_rows(f, seqs)[0]
    alone = model._forward_numpy(seqs[:, -1:], model.new_cache())[0, 0]
    assert np.abs(alone - want[-1]).max() > 0.1, "the last token's logits ignore the context"
    _, cache = decode(model, seqs, [12])
    cache.reset()
    again = model._forward_numpy(seqs[:, :5], cache)[0]
    assert_logits_close(again, want[:5], what=f"{target}, after reset")


@pytest.mark.parametrize("target", TARGETS)
def test_the_cache_holds_a_fixed_state_and_never_recomputes(oracle_files, models, target):
    """After 4 tokens and after 40 the cache holds the same bytes: per layer the convolution's last
    d_conv inputs and the d_inner × d_state scan state, float32; no KV rows, no token ids."""
    f, model = oracle_files("mamba"), models("mamba", target)
    c = f.config
    per_sequence = c.num_hidden_layers * c.intermediate_size * (c.conv_kernel + c.state_size) * 4
    seqs = np.random.default_rng(9).integers(0, N_V, size=(2, 40))
    assert not model.RECOMPUTE
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheRecomputes)
        cache = model.new_cache()
        model._forward_numpy(seqs[:, :4], cache)
        after_4 = held_bytes(cache)
        for t in range(4, 40):
            model._forward_numpy(seqs[:, t : t + 1], cache)
    assert cache.length == 40 and cache.ids is None
    assert after_4 == held_bytes(cache) == 2 * per_sequence


# ── describe and run through the command line ───────────────────────────────────────────
def test_describe_round_trip(oracle_files, tmp_path):
    """`describe --format card` gives the bound card, which parses back to the same card, checks
    clean and, loaded with the file's weights, runs exactly as the file does."""
    path = oracle_files("mamba").path
    out = cli("describe", path, "--format", "card")
    assert out.exit_code == 0, out.output
    card_path = tmp_path / "mamba.card"
    card_path.write_text(out.stdout, encoding="utf-8")
    card = parse(out.stdout)
    assert card == describe(path) and check(card) == []
    ids = ids_for(N_V, 9)
    for target in TARGETS:
        ours = load(card_path, weights=str(path), target=target).logits(ids)
        assert np.array_equal(ours, load(path, target=target).logits(ids)), target


@pytest.mark.parametrize("target", TARGETS)
def test_run_prints_transformers_greedy_continuation(oracle_files, target):
    import torch

    from toycards.tokenizer.tokenizer import load_tokenizer

    f = oracle_files("mamba")
    tok, prompt, n = load_tokenizer(f.path), "the cat sat on", 10
    ids = tok.encode(prompt)
    with torch.no_grad():
        for _ in range(n):
            nxt = int(f.model(torch.tensor([ids]), use_cache=False).logits[0, -1].argmax())
            if tok.is_eog(nxt):
                break
            ids.append(nxt)
    decoder = tok.decoder(at_start=False)
    pieces = [decoder.push(i) for i in ids[len(tok.encode(prompt)) :]] + [decoder.flush()]
    out = cli("run", f.path, "--prompt", prompt, "-n", n, "--target", target)
    assert out.exit_code == 0, out.output
    assert out.stdout == prompt + "".join(pieces) + "\n"
