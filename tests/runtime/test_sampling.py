"""Tests for toycards.runtime.sampling against hand-computed distributions and HF's warpers."""

from __future__ import annotations

import numpy as np
import pytest

from toycards.errors import ToycardsError
from toycards.runtime.sampling import (
    distribution,
    log_softmax,
    perplexity,
    sample,
    softmax,
    token_logprobs,
    top_logprobs,
)

# Probabilities 0.1, 0.5, 0.15, 0.25 on ids 0..3: sorted, the ids are 1, 3, 2, 0 and the
# cumulative masses 0.5, 0.75, 0.9, 1.0.
P4 = np.array([0.1, 0.5, 0.15, 0.25])
Z4 = np.log(P4)


def assert_probs(got: np.ndarray, want: list[float], atol: float = 1e-12) -> None:
    got, want_a = np.asarray(got), np.asarray(want, dtype=np.float64)
    diff = np.abs(got - want_a)
    worst = int(np.argmax(diff))
    assert diff[worst] <= atol, f"worst difference {diff[worst]:.3g} at id {worst}: got {got}, want {want_a}"


# ---- the distribution sample() draws from, computed by hand ---------------------------------


@pytest.mark.parametrize(
    "top_p, want",
    [
        (0.4, [0, 1, 0, 0]),  # 0.5 ≥ 0.4 already
        (0.7, [0, 0.5 / 0.75, 0, 0.25 / 0.75]),  # 0.5 < 0.7 ≤ 0.75: keep ids 1, 3
        (0.8, [0, 0.5 / 0.9, 0.15 / 0.9, 0.25 / 0.9]),  # 0.75 < 0.8 ≤ 0.9: keep ids 1, 3, 2
        (0.95, list(P4)),
        (1.0, list(P4)),
        (None, list(P4)),
    ],
)
def test_top_p_keeps_the_smallest_prefix_with_enough_mass(top_p, want):
    assert_probs(distribution(Z4, temperature=1.0, top_p=top_p), want)


@pytest.mark.parametrize(
    "top_k, want",
    [
        (1, [0, 1, 0, 0]),
        (2, [0, 0.5 / 0.75, 0, 0.25 / 0.75]),
        (3, [0, 0.5 / 0.9, 0.15 / 0.9, 0.25 / 0.9]),
        (4, list(P4)),
        (100, list(P4)),  # k larger than the vocabulary keeps everything
    ],
)
def test_top_k_keeps_the_k_largest(top_k, want):
    assert_probs(distribution(Z4, temperature=1.0, top_k=top_k), want)


def test_top_p_acts_on_the_renormalised_top_k_survivors():
    # top_k=3 leaves 0.5, 0.25, 0.15 → renormalised 0.556, 0.278, 0.167; cumulative 0.833 ≥ 0.8,
    # so top_p=0.8 keeps two tokens (without top_k it would keep three: 0.75 < 0.8).
    assert_probs(distribution(Z4, 1.0, top_k=3, top_p=0.8), [0, 0.5 / 0.75, 0, 0.25 / 0.75])
    assert np.count_nonzero(distribution(Z4, 1.0, top_p=0.8)) == 3


def test_temperature_sharpens_and_flattens():
    z = np.log([0.5, 0.25, 0.25])
    assert_probs(distribution(z, 0.5), [0.25 / 0.375, 0.0625 / 0.375, 0.0625 / 0.375])  # ∝ p²
    s = np.sqrt([0.5, 0.25, 0.25])
    assert_probs(distribution(z, 2.0), list(s / s.sum()))  # ∝ √p


def test_top_p_is_chosen_before_temperature_like_llama_cpp():
    # At T=1 the masses are 0.6, 0.3, 0.1: top_p=0.85 keeps two tokens. Applying T=2 first
    # (as transformers does) would flatten them to 0.47, 0.33, 0.19 and keep all three.
    z = np.log([0.6, 0.3, 0.1])
    s = np.sqrt([0.6, 0.3])
    assert_probs(distribution(z, 2.0, top_p=0.85), [*(s / s.sum()), 0.0])


def test_greedy_takes_the_largest_logit_and_the_lowest_id_among_ties():
    z = np.array([1.0, 3.0, -2.0, 3.0, 0.5])
    assert sample(z) == 1
    assert sample(z, temperature=0.0, top_k=2, top_p=0.1) == 1
    assert_probs(distribution(z), [0, 1, 0, 0, 0])
    rng = np.random.default_rng(0)
    before = rng.bit_generator.state
    sample(z, 0.0, rng=rng)
    assert rng.bit_generator.state == before, "greedy decoding must not consume random numbers"


def test_top_k_ties_at_the_boundary_keep_the_lower_ids():
    z = np.array([0.0, 2.0, 1.0, 1.0, 1.0])
    e = np.exp([2.0, 1.0])
    assert_probs(distribution(z, 1.0, top_k=2), [0, e[0] / e.sum(), e[1] / e.sum(), 0, 0])


def test_minus_infinity_marks_forbidden_tokens():
    z = np.array([-np.inf, 0.0, -np.inf, np.log(3.0)])
    assert_probs(distribution(z, 1.0), [0, 0.25, 0, 0.75])
    rng = np.random.default_rng(1)
    draws = {sample(z, 1.0, rng=rng) for _ in range(500)}
    assert draws == {1, 3}


def test_large_logits_are_stable():
    z = np.array([1000.0, 1000.0 + np.log(3.0), -1000.0])
    assert_probs(distribution(z, 1.0), [0.25, 0.75, 0.0])
    assert_probs(distribution(z.astype(np.float32), 1e-3), [0.0, 1.0, 0.0])


# ---- drawing -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(temperature=1.0),
        dict(temperature=1.0, top_p=0.7),
        dict(temperature=0.7, top_k=3),
        dict(temperature=1.5, top_k=3, top_p=0.8),
    ],
)
def test_empirical_frequencies_match_the_distribution(kwargs):
    n = 20_000
    rng = np.random.default_rng(1234)
    counts = np.bincount([sample(Z4, rng=rng, **kwargs) for _ in range(n)], minlength=4)
    p = distribution(Z4, **kwargs)
    freq = counts / n
    sigma = np.sqrt(p * (1 - p) / n)
    z_score = np.abs(freq - p) / np.maximum(sigma, 1e-300)
    worst = int(np.argmax(z_score))
    assert np.all(counts[p == 0] == 0), f"drew tokens outside the kept set: counts {counts}, p {p}"
    assert z_score[worst] < 5, f"id {worst}: frequency {freq[worst]:.4f} vs p {p[worst]:.4f} ({kwargs})"


def test_a_seed_makes_draws_reproducible():
    z = np.random.default_rng(7).normal(size=50)

    def draws(seed):
        rng = np.random.default_rng(seed)
        return [sample(z, 1.0, top_k=20, top_p=0.9, rng=rng) for _ in range(40)]

    assert draws(3) == draws(3)
    assert draws(3) != draws(4)


def test_sample_without_rng_returns_a_kept_token():
    assert sample(Z4, 1.0, top_k=2) in {1, 3}


@pytest.mark.parametrize(
    "scale, top_k, top_p, sizes",
    [
        (8.0, None, 0.5, (1, 64)),  # a handful of tokens: the first 64 candidates hold them
        (1.0, None, 0.95, (64, 45_000)),
        (0.05, None, 0.9, (30_000, 50_000)),  # nearly flat: candidates grow to the whole vocabulary
        (0.3, 30_000, 0.9, (10_000, 30_000)),  # the mass is the 30,000 survivors'
        (2.0, 100, 0.999, (50, 101)),
    ],
)
def test_top_p_over_a_large_vocabulary(scale, top_k, top_p, sizes):
    """top-p over 50,000 logits with ties and forbidden tokens equals its definition: sort all the
    survivors (ties by id), keep the shortest prefix whose mass is ≥ p."""
    rng = np.random.default_rng(7)
    z = rng.normal(scale=scale, size=50_000)
    z[::97] = z[5]  # ties, across any cut
    z[3::101] = -np.inf
    ids = np.lexsort((np.arange(z.shape[0]), -z))  # largest first, ties by id
    ids = ids if top_k is None else ids[:top_k]
    kept = np.exp(z[ids] - z[ids].max())
    cdf = np.cumsum(kept / kept.sum())
    nucleus = ids[: min(int(np.searchsorted(cdf, top_p)) + 1, len(ids))]
    assert sizes[0] <= len(nucleus) <= sizes[1]
    want = np.zeros_like(z)
    want[nucleus] = softmax(z[nucleus] / 0.7)
    assert_probs(distribution(z, 0.7, top_k=top_k, top_p=top_p), list(want), atol=1e-12)


# ---- an independent implementation: transformers' logits warpers --------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_distribution_matches_transformers_warpers_in_llama_cpp_order(seed):
    torch = pytest.importorskip("torch")
    gen = pytest.importorskip("transformers.generation.logits_process")
    rng = np.random.default_rng(seed)
    z = rng.normal(scale=3.0, size=64)
    top_k, top_p, temperature = (
        int(rng.integers(1, 64)),
        float(rng.uniform(0.05, 1.0)),
        float(rng.uniform(0.2, 3)),
    )
    warpers = gen.LogitsProcessorList(
        [gen.TopKLogitsWarper(top_k), gen.TopPLogitsWarper(top_p), gen.TemperatureLogitsWarper(temperature)]
    )
    scores = warpers(torch.zeros(1, 1, dtype=torch.long), torch.tensor(z[None], dtype=torch.float64))
    want = torch.softmax(scores, dim=-1)[0].numpy()
    assert_probs(distribution(z, temperature, top_k=top_k, top_p=top_p), list(want), atol=1e-9)


# ---- argument checks -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(temperature=-0.1), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(temperature=1.0, top_k=0), "top_k"),
        (dict(temperature=1.0, top_k=1.5), "top_k"),
        (dict(temperature=1.0, top_p=0.0), "top_p"),
        (dict(temperature=1.0, top_p=1.01), "top_p"),
        (dict(temperature=0.0, top_p=-1.0), "top_p"),  # checked even when greedy
    ],
)
def test_bad_arguments_are_user_errors(kwargs, needle):
    with pytest.raises(ToycardsError, match=needle):
        sample(Z4, **kwargs)


@pytest.mark.parametrize(
    "logits, needle",
    [
        (np.array([0.0, np.nan]), "nan at index 1"),
        (np.array([0.0, np.inf]), "inf at index 1"),
        (np.array([-np.inf, -np.inf]), "every logit"),
        (np.zeros((2, 3)), "shape"),
        (np.zeros(0), "shape"),
        (np.array(["a", "b"]), "dtype"),
    ],
)
def test_bad_logits_are_user_errors(logits, needle):
    with pytest.raises(ToycardsError, match=needle):
        sample(logits, 1.0)


# ---- scoring helpers for `eval` -----------------------------------------------------------------------


def test_log_softmax_matches_the_definition_and_survives_extremes():
    z = np.array([[0.3, -1.2, 2.0], [5.0, 5.0, 5.0]])
    want = np.log(np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True))
    assert np.max(np.abs(log_softmax(z) - want)) < 1e-12
    assert_probs(log_softmax(np.array([1e4, 1e4])), [-np.log(2)] * 2)
    got = log_softmax(np.array([-np.inf, 0.0]))
    assert got[0] == -np.inf and got[1] == 0.0
    assert np.isclose(softmax(np.array([0.0, np.log(3.0)]))[1], 0.75)


def test_token_logprobs_and_perplexity_by_hand():
    logits = np.log([[0.25, 0.75, 1e-9], [0.5, 0.25, 0.25]])
    lp = token_logprobs(logits, np.array([1, 2]))
    assert_probs(lp, [np.log(0.75 / (1 + 1e-9)), np.log(0.25)], atol=1e-9)
    assert np.isclose(perplexity(np.log([0.5, 0.25])), np.sqrt(8.0))


def test_uniform_logits_have_perplexity_equal_to_the_vocabulary_size():
    v = 1000
    lp = token_logprobs(np.zeros((7, v), dtype=np.float32), np.arange(7) * 100)
    assert np.isclose(perplexity(lp), v, rtol=1e-12)


def test_top_logprobs_by_hand():
    ids, lp = top_logprobs(np.log([[0.2, 0.5, 0.3], [0.4, 0.2, 0.4]]), 2)
    assert ids.tolist() == [[1, 2], [0, 2]]  # ties (0.4, 0.4) ordered by id
    assert_probs(lp.ravel(), list(np.log([0.5, 0.3, 0.4, 0.4])))
    ids, _ = top_logprobs(np.zeros((1, 3)), 10)
    assert ids.shape == (1, 3)


@pytest.mark.parametrize(
    "call, needle",
    [
        (lambda: token_logprobs(np.zeros((2, 3)), np.array([0, 3])), "id 3 at position 1"),
        (lambda: token_logprobs(np.zeros((2, 3)), np.array([0])), "targets must have shape"),
        (lambda: token_logprobs(np.zeros((2, 3)), np.array([0.0, 1.0])), "integer"),
        (lambda: token_logprobs(np.zeros(3), np.array([0])), "shape"),
        (lambda: top_logprobs(np.zeros((2, 3)), 0), "k must"),
        (lambda: perplexity(np.array([])), "non-empty"),
        (lambda: perplexity(np.array([0.5])), "≤ 0"),
    ],
)
def test_scoring_errors_are_user_errors(call, needle):
    with pytest.raises(ToycardsError, match=needle):
        call()
