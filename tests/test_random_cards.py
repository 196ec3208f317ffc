"""Property tests: on random well-typed model cards, the generated modules equal the interpreter.

tests/random_cards.py builds the cards (every construct of the language, each a small function).
For each card and each target (numpy, torch), with the interpreter's weights copied into the
generated module (`same_random_weights`):

- (a) **full pass**: the logits of a sequence equal the interpreter's;
- (b) **cached decoding**: a prefix, then one token at a time through one cache, equals the
  interpreter's cached decoding, which by definition is the full pass over every token so far
  (for a causal card that is the full pass over the whole sequence);
- (c) **batch**: two sequences in one batch give each one's logits alone;
- (d) **last token alone** (`last=True`, what decoding asks for): the full pass's last row, without
  a cache and for a prefix through one.

Tolerance: the interpreter computes in float64, the modules in float32; |Δ| ≤ 2e-5·max(1, max
|logit|) as in tests/test_interpreter.py. A card that does not check clean is a generator bug.

Every construct is generated: a failure hypothesis finds is fixed where it lies (the language,
codegen, or the generator), and the card it shrank to becomes a focused test with hand-computed
values (tests/test_semantics_regressions.py), not an expected failure.

Examples: 250 per target (500 cards) when CI is set (derandomized, no example database, so CI runs the
same cards every time), 30 otherwise; RANDOM_CARDS_EXAMPLES overrides both.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from random_cards import N_V, RandomCard, model_cards
from test_interpreter import HAS_TORCH, checked_models, decode

from toycards.checker import check
from toycards.lang.parse import parse

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
    """|Δ| ≤ 2e-5·max(1, max |want|), else a message with the worst entry and the card."""
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}\n\n{card.text}"
    diff = np.abs(np.asarray(got, np.float64) - want)
    bound = 2e-5 * max(1.0, float(np.abs(want).max()))
    if not (diff <= bound).all():  # NaN fails too
        t, v = np.unravel_index(np.nanargmax(np.where(np.isnan(diff), np.inf, diff)), diff.shape)
        raise AssertionError(
            f"{what}: max |Δ| = {diff[t, v]:.3g} > {bound:.2g} at position {t}, vocab id {v} "
            f"(got {got[t, v]:.6g}, want {want[t, v]:.6g})\n\n{card.text}"
        )


@st.composite
def cases(draw):
    """A card, two sequences of one length, and a prefill length for cached decoding."""
    card = draw(model_cards())
    length = draw(st.integers(2, 5), label="length")
    ids = st.lists(st.integers(0, N_V - 1), min_size=length, max_size=length)
    first, second = draw(ids, label="ids"), draw(ids, label="second ids")
    prefill = draw(st.integers(1, length - 1), label="prefill")
    return card, np.asarray(first), np.asarray(second), prefill


def check_card(
    card: RandomCard,
    target: str,
    first: np.ndarray,
    second: np.ndarray,
    prefill: int,
) -> None:
    """Assertions (a), (b), (c), (d) of the module docstring."""
    if currently_in_test_context():
        note(card.text)
        note(
            f"ids {first.tolist()}, second ids {second.tolist()}, prefill {prefill}; features {sorted(card.features)}"
        )
    diags = check(parse(card.text))
    assert diags == [], (
        f"the generator made a card that does not check: {[d.message for d in diags]}\n\n{card}"
    )
    models = checked_models(card.text, target)
    ref, m = models["reference"], models[target]
    want = ref(first[None])[0]
    alone = m._forward_numpy(first[None], None)[0]
    assert_close(alone, want, f"(a) {target} full pass vs interpreter", card)
    want_cached = want if card.causal else decode(ref, first, prefill).astype(np.float64)
    assert_close(decode(m, first, prefill), want_cached, f"(b) {target} cached decoding vs interpreter", card)
    both = m._forward_numpy(np.stack([first, second]), None)
    assert_close(both[0], alone.astype(np.float64), f"(c) {target} batch row 0 vs alone", card)
    assert_close(
        both[1],
        m._forward_numpy(second[None], None)[0].astype(np.float64),
        f"(c) {target} batch row 1 vs alone",
        card,
    )
    last = m._forward_numpy(first[None], None, last=True)[0]
    assert_close(last, want[-1:], f"(d) {target} last token alone vs interpreter", card)
    cached_last = m._forward_numpy(first[None, :prefill], m.new_cache(), last=True)[0]
    assert_close(
        cached_last, want_cached[prefill - 1 : prefill], f"(d) {target} last of the prefix, cached", card
    )


@pytest.mark.parametrize("target", TARGETS)
@settings(settings.get_profile("random-cards"))
@given(case=cases())
def test_generated_modules_equal_the_interpreter_on_random_cards(target, case):
    card, first, second, prefill = case
    check_card(card, target, first, second, prefill)
