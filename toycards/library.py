"""The card library: which card describes which GGUF architecture, and the prelude.

Owns: `ARCH_CARDS` (general.architecture → card file in toycards/cards/, a table: several
architectures may share a card), `library_card(arch)`, and `library_algorithms()` (the
prelude's algorithms by name, parsed once).
Leaves out: parsing (parse.py), binding to files (binding.py).
"""

from __future__ import annotations

import functools
from importlib import resources

from toycards import ir
from toycards.parse import parse_library_card

ARCH_CARDS: dict[str, str] = {
    "gpt2": "gpt2",
    "llama": "llama",
}


def card_names() -> list[str]:
    """Stems of every card shipped in toycards/cards/."""
    return sorted(
        p.name[:-5] for p in resources.files("toycards.cards").iterdir() if p.name.endswith(".card")
    )


@functools.cache
def library_card(name: str) -> ir.Card:
    return parse_library_card(name)


def card_for_arch(arch: str) -> ir.Card | None:
    name = ARCH_CARDS.get(arch)
    return library_card(name) if name else None


@functools.cache
def library_algorithms() -> dict[str, ir.Algorithm]:
    """Algorithms a card may call without defining them: the prelude's."""
    return {a.name: a for a in library_card("prelude").algorithms}
