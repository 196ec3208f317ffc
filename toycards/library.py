"""The card library: which card describes which GGUF architecture, and the prelude.

Owns: `ARCH_CARDS` (general.architecture → card file in toycards/cards/, a table: several
architectures may share a card), `library_card(arch)`, and `library_algorithms()` (the
prelude's algorithms by name, parsed once).
Leaves out: parsing (parse.py), binding to files (binding.py).
"""

from __future__ import annotations

import functools
from pathlib import Path

from toycards import cache, ir

PACKAGE = Path(__file__).parent
CARDS = PACKAGE / "cards"
GRAMMAR = PACKAGE / "grammar" / "card.lark"


def parse_library_card(name: str) -> ir.Card:
    """Parse a shipped card (imports the parser, and lark, only when a card is not cached)."""
    from toycards.parse import parse_library_card as parse_card

    return parse_card(name)


ARCH_CARDS: dict[str, str] = {
    "gpt2": "gpt2",
    "llama": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "starcoder2": "starcoder2",
}


def card_names() -> list[str]:
    """Stems of every card shipped in toycards/cards/."""
    return sorted(p.stem for p in CARDS.glob("*.card"))


@functools.cache
def library_card(name: str) -> ir.Card:
    """A library card, parsed once per process and cached on disk between processes.

    The on-disk cache (toycards/cache.py) is keyed by the card text, the toycards version and
    the sources of the grammar, the parser and the IR classes, so an edited card, or a changed
    parser or IR, is parsed afresh.
    """
    from toycards import __version__

    text = (CARDS / f"{name}.card").read_text(encoding="utf-8")
    sources = [p.read_text(encoding="utf-8") for p in (GRAMMAR, PACKAGE / "parse.py", PACKAGE / "ir.py")]
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
