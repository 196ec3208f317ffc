"""Fuzzing: mutated library cards make `parse` and `check` raise ToycardsError, nothing else.

Seeds are the algorithm boxes of every card in `toycards/library/cards/` (each box is a card on its own;
boxes keep each case small and fast), in Unicode and in ASCII spelling. Each case applies one to
three random mutations: delete, insert or swap characters, insert a token of the grammar (or a
look-alike of one), duplicate, delete or swap lines, truncate. Then:

- `parse` either returns a card or raises ToycardsError with at least one diagnostic or message;
- a card that parses survives `check` (ToycardsError or a list of diagnostics) and the printer
  round trip `parse(render_card(card)) == card`.

Deterministic (a fixed seed per case); FUZZ_CASES scales the number of cases (default 2000,
more when CI is set).
"""

from __future__ import annotations

import os
import random
import re
import traceback
from pathlib import Path

import pytest

from toycards.checker import check
from toycards.errors import ToycardsError
from toycards.lang.parse import parse
from toycards.lang.printer import render_card

LIBRARY = sorted((Path(__file__).resolve().parents[2] / "toycards" / "library" / "cards").glob("*.card"))
CASES = int(os.environ.get("FUZZ_CASES", 6000 if os.environ.get("CI") else 2000))

TOKENS = [
    "←", "<-", "∈", " in ", "≔", ":=", "∷", "::", "▷", "|>", "·", "*", "⊙", ".*", "×", " x ", "−", "-",
    "√", "sqrt", "Σ_{", "sum_{", "⟦", "[|", "⟧", "|]", "≤", "<=", "≠", "!=", "¬", "not ", "∧", "∨",
    "…", "...", "^⊺", "^T", "^", "_", "∞", "inf", "π", "ℝ", "ℕ", "ℤ", "𝕊", "{0,1}", "(0,1)", "V^",
    "(", ")", "[", "]", "{", "}", "⌈", "⌉", ",", ";", ":", "|", "=", "+", "/", " mod ", '"', '""',
    "/*", "*/", "for ", " do", "end", "if ", " then ", "else", "return ", " from ", " default ",
    " or ", "Algorithm: ", "Algorithm 1: ", "Input: ", "Output: ", "Hyperparameters:", "Parameters:",
    "toycards 1\n", "toycards 2\n", "\n", "\n\n", "  ", "\t", "\r\n", "1e-5", "0", "12", "ℓ", "γ_l^1",
    "X̃", "e.hat", "x~", "_{l-1}", "^{⌈h·H/H_kv⌉}", '"blk.{l-1}."', '"{arch}.x"', "а", "：", "–",
    "\u200b", "\ufeff", "\u0303", "\x0c", "\x7f", "😀", "\\", "#", "$", "%",
]  # fmt: skip


def _boxes(text: str) -> list[str]:
    """Split a card into one card per algorithm box (version line and preamble on each)."""
    parts = re.split(r"(?m)^(?=Algorithm\b)", text)
    head, boxes = parts[0], parts[1:]
    return [head + box for box in boxes] or [text]


def _seeds() -> list[tuple[str, str]]:
    seeds = []
    for path in LIBRARY:
        text = path.read_text(encoding="utf-8")
        ascii_text = render_card(parse(text), ascii=True)
        for spelling, t in (("unicode", text), ("ascii", ascii_text)):
            seeds += [(f"{path.stem}[{i}]/{spelling}", box) for i, box in enumerate(_boxes(t))]
    return seeds


SEEDS = _seeds()


def _mutate(text: str, rng: random.Random) -> str:  # noqa: C901 - one branch per mutation
    kind = rng.randrange(9)
    n = len(text)
    at = rng.randrange(n + 1)
    lines = text.split("\n")
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    if kind == 0 and n:  # delete a few characters
        return text[:at] + text[at + rng.randint(1, 4) :]
    if kind == 1:  # insert a character (any plane, lookalikes, controls)
        ch = rng.choice([chr(rng.randrange(32, 0x3000)), rng.choice('()[]{}⟦⟧,;:|←∈^_·"▷ \n')])
        return text[:at] + ch + text[at:]
    if kind == 2 and n > 1:  # swap two neighbours
        at = min(at, n - 2)
        return text[:at] + text[at + 1] + text[at] + text[at + 2 :]
    if kind == 3:  # insert a token of the grammar
        return text[:at] + rng.choice(TOKENS) + text[at:]
    if kind == 4:  # duplicate a line
        return "\n".join(lines[: i + 1] + [lines[i]] + lines[i + 1 :])
    if kind == 5:  # delete a line
        return "\n".join(lines[:i] + lines[i + 1 :])
    if kind == 6:  # swap two lines
        lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines)
    if kind == 7:  # truncate
        return text[:at]
    # replace a word with a token
    words = list(re.finditer(r"[^\s()\[\],]+", text))
    if not words:
        return text
    w = rng.choice(words)
    return text[: w.start()] + rng.choice(TOKENS).strip() + text[w.end() :]


def _one_case(text: str) -> None:
    try:
        card = parse(text)
    except ToycardsError as e:
        assert e.diagnostics or e.message, "a ToycardsError that says nothing"
        str(e)  # formatting the diagnostics must not fail either
        return
    try:
        diagnostics = check(card)
    except ToycardsError as e:
        str(e)
    else:
        assert isinstance(diagnostics, list), f"check returned {type(diagnostics).__name__}"
        "\n".join(d.headline() for d in diagnostics)  # formatting them must not fail
    again = render_card(card)
    assert parse(again) == card, f"the formatter changed the card:\n{again}"


@pytest.mark.parametrize("name,seed", SEEDS, ids=[name for name, _ in SEEDS])
def test_mutated_cards_raise_only_toycards_errors(name, seed):
    per_seed = max(1, CASES // len(SEEDS))
    for case in range(per_seed):
        rng = random.Random(f"{name}:{case}")
        text = seed
        for _ in range(rng.randint(1, 3)):
            text = _mutate(text, rng)
        try:
            _one_case(text)
        except Exception as exc:  # noqa: BLE001 - the test reports any escape, with the input
            where = traceback.format_exception(exc)[-3:]
            pytest.fail(
                f"case {name}:{case}: {type(exc).__name__}: {exc}\n{''.join(where)}\n--- input ---\n{text}",
                pytrace=False,
            )


def test_seeds_cover_the_library():
    assert len(SEEDS) >= 2 * len(LIBRARY)
    for _, seed in SEEDS:
        parse(seed)  # every seed is a valid card before mutation


@pytest.mark.parametrize("letter", ["\u0f5c", "\u0f43", "\u0958"])  # Tibetan DZHA, GHA; Devanagari QA
def test_a_name_whose_nfc_form_is_no_name_is_refused_where_it_is_written(letter):
    """These letters are composition exclusions: NFC splits each into a letter and a combining mark
    the grammar's names do not take, so the printed card would not read back. Refused at the name."""
    text = LIBRARY[0].read_text(encoding="utf-8").replace("Algorithm: P ← ", f"Algorithm: P ← A{letter}", 1)
    with pytest.raises(ToycardsError, match=r"canonical \(NFC\) form of this name holds") as e:
        parse(text)
    assert e.value.diagnostics[0].span.line == next(
        i for i, line in enumerate(text.splitlines(), 1) if line.startswith("Algorithm: P ←")
    )
