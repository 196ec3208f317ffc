"""Property tests: on random well-typed model cards, the generated modules equal the interpreter.

tests/random_cards.py builds the cards (every construct of the language, each a small function).
For each card and each target (numpy, torch), with the interpreter's weights copied into the
generated module (`same_random_weights`):

- (a) **full pass**: the logits of a sequence equal the interpreter's;
- (b) **cached decoding**: a prefix, then one token at a time through one cache, equals the
  interpreter's cached decoding, which by definition is the full pass over every token so far
  (for a causal card that is the full pass over the whole sequence);
- (c) **batch**: two sequences in one batch give each one's logits alone.

Tolerance: the interpreter computes in float64, the modules in float32; |Δ| ≤ 2e-5·max(1, max
|logit|) as in tests/test_interpreter.py. A card that does not check clean is a generator bug.

KNOWN_FAILING lists the constructs (features of random_cards.py) where a generated module is
known to disagree, each with the assertions that fail and why. A feature whose full pass fails
(or that codegen refuses, or the checker rejects) is not generated; one that fails only (b) or
(c) is generated and that assertion skipped. tests/known_cards/FEATURE.card is the card hypothesis
shrank each one to, with what it observed; `test_known_failure_still_fails` holds each of them
to its listed assertions as a strict xfail, so a fix shows up as an XPASS: then delete the
feature's line and its card, and the property test covers the construct again.

Examples: 250 per target (500 cards) when CI is set (derandomized, no example database, so CI runs the
same cards every time), 30 otherwise; RANDOM_CARDS_EXAMPLES overrides both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from random_cards import N_V, RandomCard, model_cards
from test_interpreter import HAS_TORCH, decode, same_random_weights

from toycards.checker import check
from toycards.lang.parse import parse
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


@dataclass(frozen=True)
class Known:
    fails: str  # the assertions that fail: "a" (the full pass, or the card is refused or rejected), "b", "c"
    why: str


KNOWN_FAILING: dict[str, Known] = {  # feature of random_cards.py → what fails; the card: known_cards/FEATURE.card
    # refused by codegen (`cannot generate code: …`) although the card checks clean
    "vector_reversed_index": Known("a", "y[i] ← v[n + 1 − i]: 'an element index must be affine in a map "
                                   "variable', but n + 1 − i is affine"),
    "map_if_else": Known("a", "if … else … end in a map over t: 'a parallel map may hold assignments and "
                         "guarded assignments only'"),
    "vector_if_else": Known("a", "if … else … end in a map over entries: 'a parallel map may hold …'"),
    # rejected by the checker
    # generated, with wrong numbers or an error at run time
    "per_head_param_rows": Known("c", "rows(W, h, k) · X in a map over h: the heads of W line up with the "
                                 "batch of X (B = H: mixed silently; else a broadcast error)"),
}  # fmt: skip


def excluded() -> frozenset[str]:
    """Features not to generate: those whose full pass fails."""
    return frozenset(f for f, k in KNOWN_FAILING.items() if "a" in k.fails)


def skipped(card: RandomCard) -> set[str]:
    """The assertions not to make on `card`: those its known-failing features fail."""
    return {a for f in card.features if f in KNOWN_FAILING for a in KNOWN_FAILING[f].fails}


# ── the models of a card ────────────────────────────────────────────────────────────────
def models_of(text: str, target: str) -> dict[str, object]:
    """The reference and `target` models of a card, sharing random weights."""
    models = {"reference": load(text, target="reference"), target: load(text, target=target)}
    same_random_weights(models)
    return models


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
    card = draw(model_cards(exclude=excluded()))
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
    skip: set[str] | None = None,
) -> None:
    """Assertions (a), (b), (c) of the module docstring, less those in `skip` (default: what
    KNOWN_FAILING says the card's features fail)."""
    if currently_in_test_context():  # the known cards below run outside hypothesis
        note(card.text)
        note(
            f"ids {first.tolist()}, second ids {second.tolist()}, prefill {prefill}; features {sorted(card.features)}"
        )
    diags = check(parse(card.text))
    assert diags == [], (
        f"the generator made a card that does not check: {[d.message for d in diags]}\n\n{card}"
    )
    models = models_of(card.text, target)
    ref, m = models["reference"], models[target]
    want = ref(first[None])[0]
    skip = skipped(card) if skip is None else skip
    alone = m._forward_numpy(first[None], None)[0]
    if "a" not in skip:
        assert_close(alone, want, f"(a) {target} full pass vs interpreter", card)
    if "b" not in skip:
        want_cached = want if card.causal else decode(ref, first, prefill).astype(np.float64)
        assert_close(
            decode(m, first, prefill), want_cached, f"(b) {target} cached decoding vs interpreter", card
        )
    if "c" not in skip:
        both = m._forward_numpy(np.stack([first, second]), None)
        assert_close(both[0], alone.astype(np.float64), f"(c) {target} batch row 0 vs alone", card)
        assert_close(
            both[1],
            m._forward_numpy(second[None], None)[0].astype(np.float64),
            f"(c) {target} batch row 1 vs alone",
            card,
        )


@pytest.mark.parametrize("target", TARGETS)
@settings(settings.get_profile("random-cards"))
@given(case=cases())
def test_generated_modules_equal_the_interpreter_on_random_cards(target, case):
    card, first, second, prefill = case
    check_card(card, target, first, second, prefill)


# ── the known failures, each on the card hypothesis shrank it to ────────────────────────
KNOWN_CARDS = Path(__file__).parent / "known_cards"


def known_card(feature: str) -> RandomCard:
    text = (KNOWN_CARDS / f"{feature}.card").read_text(encoding="utf-8")
    return RandomCard(text, frozenset({feature}), causal="▷ not causal" not in text)


def test_every_known_failure_has_its_shrunk_card():
    assert {p.stem for p in KNOWN_CARDS.glob("*.card")} == set(KNOWN_FAILING)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "feature",
    [pytest.param(f, marks=pytest.mark.xfail(strict=True, reason=k.why)) for f, k in KNOWN_FAILING.items()],
)
def test_known_failure_still_fails(feature, target):
    """Only the assertions KNOWN_FAILING names, on the shrunk card. When this passes (XPASS, an
    error under strict), the construct works: delete its line in KNOWN_FAILING and its card."""
    first, second = np.asarray([3, 1, 4, 1]), np.asarray([5, 9, 2, 6])
    check_card(
        known_card(feature), target, first, second, 2, skip=set("abc") - set(KNOWN_FAILING[feature].fails)
    )
