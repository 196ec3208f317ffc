"""Where a map puts its variable's axis is the emitter's choice, never part of the numbers.

A map's variable gets an axis at a place (scope.AFTER: an entry's, a column's or a block's),
chosen from the form of what the map writes. Every operation lays its operands out by the names
of their axes (codegen/axes.py), so another choice may refuse a card (two variables wanting one
place) but may not change a number. Here every map of one variable puts it at the widest place,
a block's, whatever its targets say, and each case of test_coincidences.py (a batch the size of
the heads, lengths equal to the heads and the width) must still give the interpreter's numbers:
full pass, last token, cached decoding alone and as a batch.
"""

from __future__ import annotations

import warnings

import pytest
from test_coincidences import CASES, card_text, test_generated_module_equals_the_interpreter

import toycards.codegen.steps as steps


@pytest.fixture
def blocks_everywhere(monkeypatch):
    """Every one-variable map laid out as a block; generated modules kept out of the disk cache,
    whose key does not know of this choice."""
    kinds = steps.map_kinds

    def widest(s, names):
        chosen = kinds(s, names)
        return {n: "block" for n in chosen} if len(chosen) == 1 else chosen

    monkeypatch.setattr(steps, "map_kinds", widest)
    monkeypatch.setenv("TOYCARDS_CACHE", "off")


@pytest.mark.filterwarnings("ignore::toycards.runtime.model_base.CacheRecomputes")
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_map_laid_out_elsewhere_gives_the_same_numbers(name, blocks_everywhere):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        test_generated_module_equals_the_interpreter(name, "numpy")


def test_the_columns_of_a_map_are_laid_out_elsewhere_here(monkeypatch):
    """The choice reaches the generated code: a map over the columns writes another layout."""
    from toycards.codegen import generate_source
    from toycards.lang.parse import parse

    card = parse(card_text("every column computed in the map"))
    default = generate_source(card, "numpy")
    monkeypatch.setattr(steps, "map_kinds", lambda s, names: dict.fromkeys(names, "block"))
    assert generate_source(card, "numpy") != default
