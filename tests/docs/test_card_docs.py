"""docs/card-language.md shows what toycards actually does: every message of the error
catalogue is what toycards prints for the example card folded under it, every whole card shown
is in canonical form, and the worked example is `toycards/library/cards/gpt2.card` verbatim.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

from toycards.lang.parse import parse
from toycards.lang.printer import render_card

ROOT = Path(__file__).resolve().parents[2]


def first_difference(expected: str, actual: str) -> str:
    diff = difflib.unified_diff(expected.splitlines(), actual.splitlines(), "doc", "formatted", lineterm="")
    return "\n".join(list(diff)[:40])


def card_text(name: str) -> str:
    return (ROOT / "toycards" / "library" / "cards" / f"{name}.card").read_text(encoding="utf-8")


DOC = ROOT / "docs" / "card-language.md"
BLOCK = re.compile(r"^```\n(.*?)^```$", re.S | re.M)


def _doc_error_entries() -> list[tuple[str, str, str]]:
    """(message, printed error, card) for every `#### message` entry of the error catalogue."""
    text = DOC.read_text(encoding="utf-8")
    errors = text[text.index("\n## Errors") : text.index("\n## Known limitations")]
    out = []
    for chunk in errors.split("\n#### ")[1:]:
        heading = re.match(r"(`+) ?(.*?) ?\1\n", chunk)
        printed, card = BLOCK.findall(chunk)[:2]
        out.append((heading.group(2), printed.rstrip("\n"), card))
    return out


def _first_error(card_text: str):
    from toycards.checker import check_card
    from toycards.errors import ToycardsError

    try:
        card = parse(card_text)
    except ToycardsError as exc:
        return exc.diagnostics[0]
    diagnostics = check_card(card).diagnostics
    return diagnostics[0] if diagnostics else None


def test_docs_error_catalogue_is_long():
    assert len(_doc_error_entries()) >= 50


@pytest.mark.parametrize(
    "message,printed,card", [pytest.param(*e, id=e[0][:40]) for e in _doc_error_entries()]
)
def test_docs_error_catalogue_matches_toycards(message, printed, card):
    from toycards.errors import format_diagnostic

    diag = _first_error(card)
    assert diag is not None, f"the card documented for {message!r} reads and checks clean"
    assert (diag.message, format_diagnostic(diag, card)) == (message, printed)


def test_docs_cards_are_canonical():
    """Every card shown whole in the reference (`toycards 1` …) is in canonical form."""
    shown = [b for b in BLOCK.findall(DOC.read_text(encoding="utf-8")) if b.startswith("toycards 1\n")]
    assert len(shown) >= 3
    for block in shown:
        card = parse(block)
        assert block in (render_card(card), render_card(card, ascii=True)), first_difference(
            block, render_card(card)
        )


def test_docs_worked_example_is_the_gpt2_card():
    assert "```\n" + card_text("gpt2") + "```\n" in DOC.read_text(encoding="utf-8")
