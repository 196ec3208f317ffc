"""The card library: which card describes which GGUF architecture, and the prelude.

Owns: `ARCH_CARDS` (general.architecture → card file in toycards/library/cards/, a table: several
architectures may share a card), `library_card(name)` (parsed once, cached on disk between
processes), and `library_algorithms()` (the prelude's algorithms by name).
Leaves out: parsing (lang/parse.py), binding to files (models/binding.py).
"""

from __future__ import annotations

import functools
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
