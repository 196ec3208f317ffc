"""The card library: which card describes which GGUF architecture, and the prelude.

Owns: `ARCH_CARDS` (general.architecture → card file in toycards/library/cards/, a table: several
architectures may share a card), `library_card(name)` (parsed once, cached on disk between
processes), `library_algorithms()` (the prelude's algorithms by name) and `card_for_file(f)`,
the one rule for which card describes a GGUF file (the card embedded in it, else the library's
card for its architecture), used by describe, load, gen, run and eval alike.
Leaves out: parsing (lang/parse.py), binding to files (models/binding.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from toycards import cache
from toycards.lang import ir

PACKAGE = Path(__file__).parent
CARDS = PACKAGE / "cards"
LANG = PACKAGE.parent / "lang"  # the grammar, parser and IR sources key the on-disk cache


def parse_library_card(name: str) -> ir.Card:
    """Parse a shipped card by file stem, e.g. "prelude" (imports the parser, and lark, only here)."""
    from toycards.lang.parse import parse

    text = (CARDS / f"{name}.card").read_text(encoding="utf-8")
    return parse(text, file=f"toycards/library/cards/{name}.card")


ARCH_CARDS: dict[str, str] = {
    "gpt2": "gpt2",
    "llama": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "starcoder2": "starcoder2",
}


def card_names() -> list[str]:
    """Stems of every card shipped in toycards/library/cards/."""
    return sorted(p.stem for p in CARDS.glob("*.card"))


@functools.cache
def library_card(name: str) -> ir.Card:
    """A library card, parsed once per process and cached on disk between processes.

    The on-disk cache (toycards/cache.py) is keyed by the card text, the toycards version and
    every source of the card language (lang/: grammar, parser, IR), so an edited card, or a
    changed parser or IR, is parsed afresh.
    """
    from toycards.version import __version__

    text = (CARDS / f"{name}.card").read_text(encoding="utf-8")
    sources = [p.read_text(encoding="utf-8") for p in sorted(LANG.glob("*.py")) + [LANG / "card.lark"]]
    path = cache.cache_file(name, cache.cache_key(__version__, *sources, text))
    card = cache.load(path)
    if isinstance(card, ir.Card) and card.source == text:
        return card
    card = parse_library_card(name)
    cache.store(path, card)
    return card


def card_for_arch(arch: str) -> ir.Card | None:
    name = ARCH_CARDS.get(arch)
    return library_card(name) if name else None


@functools.cache
def library_algorithms() -> dict[str, ir.Algorithm]:
    """Algorithms a card may call without defining them: the prelude's."""
    return {a.name: a for a in library_card("prelude").algorithms}


@dataclass(frozen=True)
class CardChoice:
    """Which card describes a file: `card` with its `origin` ("embedded" or "library"), or no
    card (None) and the `reason`, one line naming the file's architecture."""

    card: ir.Card | None
    origin: str = ""
    reason: str = ""


def card_for_file(f) -> CardChoice:
    """The card for an open GGUF file: the card embedded under `toycards.card`, else the library
    card for `general.architecture`, else none and why."""
    from toycards.gguf.facts import ARCH_NAMES, CARD_KEY

    embedded = f.get(CARD_KEY)
    if isinstance(embedded, str) and embedded.strip():
        from toycards.lang.parse import parse  # only an embedded card needs the parser

        return CardChoice(parse(embedded, file=f"{f.path}:{CARD_KEY}"), "embedded")
    arch = f.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        return CardChoice(None, reason="the file has no general.architecture")
    if not f.tensors:
        return CardChoice(
            None,
            reason=f"the file holds no tensors (a vocabulary-only file of architecture {safe_text(arch)})",
        )
    if arch in ARCH_CARDS:
        return CardChoice(card_for_arch(arch), "library")
    member = next((m for m, name in ARCH_NAMES.items() if name == arch), None)
    known = f"gguf knows it as MODEL_ARCH.{member}" if member else "unknown to gguf too"
    return CardChoice(None, reason=f"no card for architecture {safe_text(arch)} in the library ({known})")


def safe_text(text: str) -> str:
    """Text from a file made safe for one line of a message or card comment, quoted: 'llama'."""
    text = "".join(c if c.isprintable() else "?" for c in text).replace("*/", "* /")
    return f"'{text[:60]}'"
