"""Property tests: on random well-typed model cards, the generated modules equal the interpreter.

tests/helpers/random_cards.py builds the cards (every construct of the language, each a small function).
For each card and each target (numpy, torch), with the interpreter's weights copied into the
generated module (`same_random_weights`), at each batch size 1, 2 and H (the card's number of
heads: a batch axis the same size as the head axis) with every row compared with the interpreter
on that sequence alone:

- (a) **full pass**: the logits of the batch equal the interpreter's;
- (b) **cached decoding**: a prefix, then one token at a time through one cache, equals the
  interpreter's cached decoding, which by definition is the full pass over every token so far
  (for a causal card that is the full pass over the whole sequence);
- (c) **last token alone** (`last=True`, what decoding asks for): the full pass's last row, without
  a cache and for a prefix through one.

The length is 1, H, d or k (head size) half the time, where a token axis meets a head or feature
axis, and 2…5 otherwise. Shapes must be equal, never broadcast: [B, ℓ, N_V] with B and ℓ as asked.

Tolerance: the interpreter computes in float64, the modules in float32; |Δ| ≤ 2e-5·max(1, max
|logit|) as in tests/lang/test_interpreter.py. A card that does not check clean is a generator bug.

Every construct is generated: a failure hypothesis finds is fixed where it lies (the language,
codegen, or the generator), and the card it shrank to becomes a focused test with hand-computed
values (tests/codegen/test_semantics_regressions.py), not an expected failure.

Examples: 250 per target (500 cards) when CI is set (derandomized, no example database, so CI runs the
same cards every time), 30 otherwise; RANDOM_CARDS_EXAMPLES overrides both. RANDOM_CARDS_WITHOUT
leaves constructs out (tests/helpers/random_constructs.py). Hypothesis draws a card many times with other ids and
both targets see the same draws, so the interpreter runs once per card and sequence (or prefix) and
each module is built once per card.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from random_cards import N_V, RandomCard, model_cards
from test_interpreter import HAS_TORCH, same_random_weights

from toycards.errors import ToycardsError
from toycards.models.load import load

pytestmark = pytest.mark.filterwarnings("ignore::toycards.runtime.model_base.CacheRecomputes")

settings.register_profile(
    "random-cards",
    max_examples=int(
        os.environ.get(
            "RANDOM_CARDS_EXAMPLES", 250 if os.environ.get("CI", "") not in ("", "0", "false") else 30
        )
    ),
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=False,
)
TARGETS = ("numpy", pytest.param("torch", marks=pytest.mark.skipif(not HAS_TORCH, reason="no torch")))


def assert_close(got: np.ndarray, want: np.ndarray, what: str, card: RandomCard) -> None:
    """Equal shapes and |Δ| ≤ 2e-5·max(1, max |want|), else a message with the worst entry and the card.
    `want` is [B, ℓ, N_V]: batch row, position, vocab id."""
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}\n\n{card.text}"
    diff = np.abs(np.asarray(got, np.float64) - want)
    bound = 2e-5 * max(1.0, float(np.abs(want).max()))
    if not (diff <= bound).all():  # NaN fails too
        b, t, v = np.unravel_index(np.nanargmax(np.where(np.isnan(diff), np.inf, diff)), diff.shape)
        raise AssertionError(
            f"{what}: max |Δ| = {diff[b, t, v]:.3g} > {bound:.2g} at batch row {b}, position {t}, vocab id "
            f"{v} (got {got[b, t, v]:.6g}, want {want[b, t, v]:.6g})\n\n{card.text}"
        )


@st.composite
def cases(draw):
    """A card, max(2, H) sequences of one length, and a prefill length for cached decoding."""
    card = draw(model_cards())
    s = card.sizes
    coincident = sorted(n for n in {1, s.H, s.d, s.k} if n <= (card.max_length or n))
    length = draw(st.one_of(st.integers(2, 5), st.sampled_from(coincident)), label="length")
    sequence = st.lists(st.integers(0, N_V - 1), min_size=length, max_size=length)
    ids = draw(st.lists(sequence, min_size=max(2, s.H), max_size=max(2, s.H)), label="ids")
    prefill = draw(st.integers(1, max(1, length - 1)), label="prefill")
    return card, np.asarray(ids), prefill


class Reference:
    """The interpreter's float64 logits [ℓ, N_V] of one sequence, each sequence (and prefix) run once."""

    def __init__(self, model) -> None:
        self.model, self.done = model, {}

    def full(self, ids: np.ndarray) -> np.ndarray:
        key = tuple(ids.tolist())
        if key not in self.done:
            self.done[key] = self.model.sequence_logits(ids)
        return self.done[key]

    def cached(self, ids: np.ndarray, prefill: int, causal: bool) -> np.ndarray:
        """Cached decoding: the full pass over the prefill, then each token's last row of the full
        pass over the tokens so far (for a causal card, the full pass over the whole sequence)."""
        if causal:
            return self.full(ids)
        rows = [self.full(ids[:prefill])] + [self.full(ids[: t + 1])[-1:] for t in range(prefill, len(ids))]
        return np.concatenate(rows)


@functools.cache
def reference_of(text: str) -> Reference:
    """The interpreter on a card, built once: both targets are run on the same cards and sequences."""
    try:
        return Reference(load(text, target="reference"))
    except ToycardsError as e:
        raise AssertionError(f"the generator made a card that does not check: {e}\n\n{text}") from e


@functools.lru_cache(maxsize=8)
def module_of(text: str, target: str):
    """The `target` module of a card with the interpreter's random weights, built once per card
    (hypothesis draws a card again with other ids, and replays it while shrinking)."""
    models = {"reference": reference_of(text).model, target: load(text, target=target)}
    same_random_weights(models)  # the same weights again for the interpreter (seeded by name)
    return models[target]


def decode(model, ids: np.ndarray, prefill: int) -> np.ndarray:
    """Logits [B, ℓ, N_V] of the batch `ids` [B, ℓ] fed through one cache: `prefill` tokens, then one
    at a time."""
    cache, parts = model.new_cache(), []
    for start, stop in [(0, prefill)] + [(t, t + 1) for t in range(prefill, ids.shape[1])]:
        parts.append(model._forward_numpy(ids[:, start:stop], cache))
        assert cache.length == stop
    return np.concatenate(parts, axis=-2)


def check_card(card: RandomCard, target: str, ids: np.ndarray, prefill: int) -> None:
    """Assertions (a), (b), (c) of the module docstring at batch sizes 1, 2 and H."""
    if currently_in_test_context():
        note(card.text)
        note(f"ids {ids.tolist()}, prefill {prefill}; features {sorted(card.features)}")
    ref, m = reference_of(card.text), module_of(card.text, target)
    for batch in sorted({1, 2, card.sizes.H}):
        x, at = ids[:batch], f"{target}, batch {batch}, length {ids.shape[1]}"
        want = np.stack([ref.full(row) for row in x])
        want_cached = np.stack([ref.cached(row, prefill, card.causal) for row in x])
        assert_close(m._forward_numpy(x, None), want, f"(a) {at}: full pass vs interpreter", card)
        assert_close(decode(m, x, prefill), want_cached, f"(b) {at}: cached decoding vs interpreter", card)
        last = m._forward_numpy(x, None, last=True)
        assert_close(last, want[:, -1:], f"(c) {at}: last token alone vs interpreter", card)
        cached_last = m._forward_numpy(x[:, :prefill], m.new_cache(), last=True)
        assert_close(
            cached_last, want_cached[:, prefill - 1 : prefill], f"(c) {at}: last of the prefix, cached", card
        )


@pytest.mark.parametrize("target", TARGETS)
@settings(settings.get_profile("random-cards"))
@given(case=cases())
def test_generated_modules_equal_the_interpreter_on_random_cards(target, case):
    card, ids, prefill = case
    check_card(card, target, ids, prefill)
