"""Named axes (toycards/codegen/axes.py): `spell` lays an array out by the names of its axes.

The oracle is NumPy itself: an array whose named axes have distinct sizes, with batch axes in
front, is laid out by the spelled code, and the result must hold each entry where the names put
it, every axis the target names but the array lacks being of size 1. Layouts are drawn at random.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from toycards.codegen.axes import ONE, canonical, spell
from toycards.errors import ToycardsError
from toycards.runtime.numpy import ops

SIZES = {"R": 3, "C": 5, "h": 2, "t": 7, "i": 11}
BATCH = (4,)


def _run(code: str, x: np.ndarray) -> np.ndarray:
    return np.asarray(eval(code, {"ops": ops, "x": x}))  # noqa: S307 - code spell() wrote


def _expected(x: np.ndarray, have: tuple, want: tuple) -> np.ndarray:
    """x's entries by name, in want's order, a size-1 axis for each name x lacks."""
    named = [a for a in have if a != ONE]
    keep = x.reshape(x.shape[: len(BATCH)] + tuple(SIZES[a] for a in named))
    order = [a for a in want if a in named]
    moved = np.moveaxis(
        keep, [len(BATCH) + named.index(a) for a in order], range(len(BATCH), len(BATCH) + len(order))
    )
    return moved.reshape(BATCH + tuple(SIZES[a] if a in named else 1 for a in want))


def _layouts(rng: random.Random):
    """(have, want): want holds every named axis of have in the same order (or the last two of
    have swapped), with more axes and place holders around them."""
    names = rng.sample(sorted(SIZES), rng.randint(1, 3))
    have = list(names)
    for _ in range(rng.randint(0, 2)):
        have.insert(rng.randint(0, len(have)), ONE)
    extra = [a for a in SIZES if a not in names]
    want = list(names)
    if len(names) >= 2 and have[-1] != ONE and have[-2] != ONE and rng.random() < 0.3:
        want[-2], want[-1] = want[-1], want[-2]
    for a in rng.sample(extra, rng.randint(0, len(extra))) + [ONE] * rng.randint(0, 2):
        want.insert(rng.randint(0, len(want)), a)
    return tuple(have), tuple(want)


@pytest.mark.parametrize("seed", range(300))
def test_a_spelled_layout_holds_each_entry_where_its_names_say(seed):
    rng = random.Random(seed)
    have, want = _layouts(rng)
    x = np.random.default_rng(seed).standard_normal(BATCH + tuple(SIZES.get(a, 1) for a in have))
    got = _run(spell("x", have, want), x)
    np.testing.assert_array_equal(got, _expected(x, have, want), err_msg=f"{have} → {want}")


@pytest.mark.parametrize("seed", range(100))
def test_without_batch_axes_a_layout_broadcasts_like_the_batched_one(seed):
    """An array with no batch axes (a stored parameter) gets no size-1 axes in front: beside a
    batched array of the target layout, it broadcasts exactly as the fully spelled one."""
    rng = random.Random(seed)
    have, want = _layouts(rng)
    x = np.random.default_rng(seed).standard_normal(tuple(SIZES.get(a, 1) for a in have))
    full = _run(spell("x", have, want), x[None])[0]
    short = _run(spell("x", have, want, batched=False), x)
    assert short.ndim <= full.ndim
    target = np.zeros(BATCH + full.shape)
    np.testing.assert_array_equal(target + short, target + full)


def test_an_axis_the_target_lacks_is_refused():
    with pytest.raises(ToycardsError, match="without them"):
        spell("x", ("t", "R"), ("h", "R"))


def test_an_order_other_than_a_swap_of_the_last_two_is_refused():
    with pytest.raises(ToycardsError, match="order"):
        spell("x", ("h", "t", "R"), ("R", "t", "h"))


@pytest.mark.parametrize(
    "rank,after",
    [
        (r, dict(zip(vs, a)))
        for r in (0, 1, 2)
        for n in (0, 1, 2)
        for vs in [("h", "t")[:n]]
        for a in itertools.product((0, 1, 2), repeat=n)
        if len(set(a)) == n
    ],
)
def test_canonical_names_each_axis_once(rank, after):
    """Every map variable and own axis appears once; each variable sits at its kind's place from
    the end, or just before the value's own axes where those are more (scope.AFTER); two
    variables that would share a place are refused."""
    if len({max(a, rank) for a in after.values()}) < len(after):  # two variables, one place
        with pytest.raises(ToycardsError, match="share one axis"):
            canonical(rank, False, after)
        return
    axes = canonical(rank, False, after)
    own = {2: ("C", "R"), 1: ("R",), 0: ()}[rank]
    assert axes[len(axes) - rank :] == own
    for var, a in after.items():
        assert axes.count(var) == 1
        assert len(axes) - 1 - axes.index(var) == max(a, rank)
    assert all(a == ONE for a in axes if a not in (*own, *after))
