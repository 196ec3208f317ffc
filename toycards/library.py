"""The card library: which card describes which GGUF architecture, and the prelude.

Owns: `ARCH_CARDS` (general.architecture → card file in toycards/cards/, a table: several
architectures may share a card), `library_card(arch)`, and `library_algorithms()` (the
prelude's algorithms by name, parsed once).
Leaves out: parsing (parse.py), binding to files (binding.py).
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import tempfile
from importlib import resources
from pathlib import Path

from toycards import ir


def parse_library_card(name: str) -> ir.Card:
    """Parse a shipped card (imports the parser, and lark, only when a card is not cached)."""
    from toycards.parse import parse_library_card as parse_card

    return parse_card(name)


ARCH_CARDS: dict[str, str] = {
    "gpt2": "gpt2",
    "llama": "llama",
    "qwen2": "qwen2",
}


def card_names() -> list[str]:
    """Stems of every card shipped in toycards/cards/."""
    return sorted(
        p.name[:-5] for p in resources.files("toycards.cards").iterdir() if p.name.endswith(".card")
    )


@functools.cache
def library_card(name: str) -> ir.Card:
    """A library card, parsed once per process and cached on disk between processes.

    The on-disk cache (`$TOYCARDS_CACHE`, else `$XDG_CACHE_HOME/toycards`, else
    `~/.cache/toycards`; `TOYCARDS_CACHE=off` disables it) is keyed by the card text, the
    grammar and the toycards version, so an edited card or grammar is parsed afresh.
    """
    text = resources.files("toycards.cards").joinpath(f"{name}.card").read_text(encoding="utf-8")
    path = _cache_path(name, text)
    if path is not None:
        try:
            with open(path, "rb") as fh:
                card = pickle.load(fh)  # noqa: S301 - our own cache, in the user's own folder
            if isinstance(card, ir.Card) and card.source == text:
                return card
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, TypeError, ValueError):
            pass
    card = parse_library_card(name)
    if path is not None:
        _write_cache(path, card)
    return card


def _cache_path(name: str, text: str) -> Path | None:
    from toycards import __version__

    root = os.environ.get("TOYCARDS_CACHE")
    if root == "off":
        return None
    base = (
        Path(root) if root else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "toycards"
    )
    grammar = resources.files("toycards.grammar").joinpath("card.lark").read_text(encoding="utf-8")
    key = hashlib.sha256("\0".join((__version__, grammar, text)).encode()).hexdigest()[:24]
    return base / f"{name}-{key}.pickle"


def _write_cache(path: Path, card: ir.Card) -> None:
    """Best effort: a cache that cannot be written only costs the next process a parse."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(card, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        pass


def card_for_arch(arch: str) -> ir.Card | None:
    name = ARCH_CARDS.get(arch)
    return library_card(name) if name else None


@functools.cache
def library_algorithms() -> dict[str, ir.Algorithm]:
    """Algorithms a card may call without defining them: the prelude's."""
    return {a.name: a for a in library_card("prelude").algorithms}
