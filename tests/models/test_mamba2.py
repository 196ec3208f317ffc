"""Mamba-2 (general.architecture = "mamba2"): mamba2.card and the prelude's `ssd_scan` held to
transformers' `Mamba2ForCausalLM` and to llama.cpp.

The oracle (tests/oracle, case "mamba2") is a tiny Mamba2ForCausalLM with random weights (8 heads of 8
channels in 2 groups, d_state 16, SSD chunks of 8 tokens), run on its PyTorch reference path (no
mamba-ssm or causal-conv1d kernels) and written to GGUF as llama.cpp's Mamba2Model writes it: A stored
as −exp(A_log) and D as [H, 1], the gated norm's scales as [G, d_inner/G], dt_bias as ssm_dt.bias. The
shared suites hold it in a full pass (F32, Q8_0), in the interpreter, through describe's round trip
and against llama.cpp; here: `ssd_scan` against llama.cpp's ssm_scan written out in NumPy, cached
decoding (token by token, after a prefill, in chunks) and batches against transformers, toycards
against llama.cpp directly, and a cache whose state does not grow with the context and never
falls back to recomputing.

Tolerance: |Δ| ≤ 1e-4 on logits of up to ~10 (tests/models/test_models_oracle.py's bound; measured ≈ 2e-5).
"""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
from test_mamba import decode, held_bytes, want_rows  # the same checks as Mamba's
from test_models_oracle import assert_logits_close, ids_for
from test_save_peer import _llama_cpp_python

from toycards.checker import check_card
from toycards.inspect.describe import describe
from toycards.lang.interpret import run
from toycards.library import library_algorithms, library_card
from toycards.models.load import load
from toycards.runtime.model_base import CacheRecomputes

TARGETS = ("numpy", "torch")
N_V = 288  # the oracle's vocabulary (tests/oracle/archs.py ARCHS["mamba2"])


@pytest.fixture(scope="module")
def models(oracle_files):
    """`models(target)`: toycards' model of the F32 oracle file, loaded once per target."""
    made: dict[str, object] = {}

    def get(target: str):
        if target not in made:
            made[target] = load(oracle_files("mamba2").path, target=target)
        return made[target]

    return get


# ── the card and the prelude's scan ─────────────────────────────────────────────────────
def test_card_checks_clean_and_its_scan_keeps_each_heads_state():
    problems = [d.headline() for d in check_card(library_card("mamba2")).diagnostics if d.severity != "note"]
    assert not problems, problems
    prelude = library_algorithms()
    assert not prelude["ssd_scan"].state_decls  # no state of its own: each head's ssd_head keeps h
    assert [n for d in prelude["ssd_head"].state_decls for n in d.names] == ["h"]


def ggml_ssm_scan(x, dt, A, B, C, D, G):
    """llama.cpp's ssm_scan for a Mamba-2 A (one number per head) and the D skip its graph adds after
    it, as loops: head h of p channels reads group h // (H / G) (0-based), dA = exp(dt[h] · A[h])."""
    H, length = dt.shape
    p, n = x.shape[0] // H, B.shape[0] // G
    state, y = np.zeros((H, p, n)), np.zeros_like(x)
    for t in range(length):
        for h in range(H):
            g = h // (H // G)
            xs = x[h * p : (h + 1) * p, t]
            state[h] = state[h] * np.exp(dt[h, t] * A[h]) + np.outer(xs * dt[h, t], B[g * n : (g + 1) * n, t])
            y[h * p : (h + 1) * p, t] = state[h] @ C[g * n : (g + 1) * n, t] + D[h] * xs
    return y


@pytest.mark.parametrize("H, G", [(4, 1), (4, 2), (6, 3)])
def test_ssd_scan_is_llama_cpps_ssm_scan(H, G):
    rng = np.random.default_rng(H + G)
    p, n, length = 3, 5, 7
    x = rng.standard_normal((H * p, length))
    dt = np.log1p(np.exp(rng.standard_normal((H, length))))
    B, C = rng.standard_normal((G * n, length)), rng.standard_normal((G * n, length))
    A, D = -np.exp(rng.standard_normal(H)), rng.standard_normal(H)
    prelude = library_card("prelude")
    got = run(prelude, [x, dt, B, C], {"A": A, "D": D, "G": G}, algorithm="ssd_scan")
    np.testing.assert_allclose(got, ggml_ssm_scan(x, dt, A, B, C, D, G), atol=1e-12)


def test_a_mamba2_file_gets_the_library_card_bound_to_its_config(oracle_files):
    from test_describe import card_values, same_number

    f = oracle_files("mamba2")
    described = describe(f.path)
    assert described.origin == "library" and described.card_path.endswith("mamba2.card")
    c = f.config
    config = {"L": c.num_hidden_layers, "d_e": c.hidden_size, "d_i": c.expand * c.hidden_size}
    config |= {"d_s": c.state_size, "k": c.conv_kernel, "H": c.num_heads, "G": c.n_groups}
    config |= {"ε": c.layer_norm_epsilon, "N_V": c.vocab_size}
    values = card_values(described)
    assert all(same_number(values[name], want) for name, want in config.items()), (values, config)


# ── cached decoding and batches against transformers ────────────────────────────────────
SCHEDULES = {  # passes of a 20-token sequence through one cache (transformers' SSD chunks: 8 tokens)
    "token by token": [1] * 20,
    "prefill then tokens": [9] + [1] * 11,
    "chunks": [3, 3, 7, 2, 5],
}


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("target", TARGETS)
def test_cached_decoding_matches_transformers(oracle_files, models, target, schedule):
    f = oracle_files("mamba2")
    seqs = np.asarray([ids_for(N_V, 20)])
    got, _ = decode(models(target), seqs, SCHEDULES[schedule])
    assert_logits_close(got[0], want_rows(f, seqs)[0], what=f"{target}, cached, {schedule}")


@pytest.mark.parametrize("target", TARGETS)
def test_batches_match_transformers(oracle_files, models, target):
    f, model = oracle_files("mamba2"), models(target)
    seqs = np.random.default_rng(3).integers(0, N_V, size=(3, 12))
    want = want_rows(f, seqs)
    full = model._forward_numpy(seqs, None)
    cached, _ = decode(model, seqs, [4] + [1] * 8)
    for b in range(3):
        assert_logits_close(full[b], want[b], what=f"{target}, batch of 3, sequence {b + 1}")
        assert_logits_close(cached[b], want[b], what=f"{target}, batch of 3, cached, sequence {b + 1}")


@pytest.mark.parametrize("target", TARGETS)
def test_the_cache_holds_a_fixed_state_and_never_recomputes(oracle_files, models, target):
    """After 4 tokens and after 40 the cache holds the same bytes: per block the convolution's last
    d_conv inputs of [x; B; C] (d_inner + 2·G·d_state channels) and the d_inner × d_state scan state,
    float32; no KV rows, no token ids."""
    f, model = oracle_files("mamba2"), models(target)
    c = f.config
    d_i = c.expand * c.hidden_size
    per_sequence = (
        c.num_hidden_layers * ((d_i + 2 * c.n_groups * c.state_size) * c.conv_kernel + d_i * c.state_size) * 4
    )
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


# ── llama.cpp ───────────────────────────────────────────────────────────────────────────
@pytest.mark.skipif(
    _llama_cpp_python() is None, reason="llama-cpp-python is not installed (a benchmark dependency)"
)
def test_toycards_decodes_the_oracle_file_as_llama_cpp_does(oracle_files, models, tmp_path):
    """llama.cpp's logits of the file (2e-5 of max |logit|, as in test_models_oracle.py), against
    toycards' decoding: a prefill of 5 tokens, then one at a time."""
    f = oracle_files("mamba2")
    ids = ids_for(N_V, 12)
    out = tmp_path / "llama_cpp.npy"
    script = Path(__file__).resolve().parents[1] / "peers" / "llama_cpp_logits.py"
    subprocess.run([_llama_cpp_python(), script, f.path, json.dumps(ids), out], check=True, timeout=300)
    want = np.load(out)
    bound = 2e-5 * max(1.0, float(np.abs(want).max()))
    for target in TARGETS:
        got, _ = decode(models(target), np.asarray([ids]), [5] + [1] * 7)
        assert_logits_close(got[0], want, atol=bound, what=f"toycards {target} (cached) vs llama.cpp")
