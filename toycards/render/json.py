"""IR ↔ JSON text: the card as data, for tools that do not want to parse cards.

Owns: `render_json` (pretty JSON of `ir.to_json`, Unicode kept) and `parse_json`, its inverse,
which turns malformed input into `ToycardsError` rather than a KeyError or TypeError.
Leaves out: the node ↔ dict mapping itself (`ir.to_json` / `ir.from_json`).

Each node is an object with a `"node"` key naming its class; spans are not stored:

>>> from toycards.lang.ir import Name
>>> render_json(Name("γ_l^1"), indent=None)
'{"node": "Name", "id": "γ_l^1"}'
"""

from __future__ import annotations

import json

from toycards.errors import ToycardsError
from toycards.lang import ir


def render_json(node: object, indent: int | None = 2) -> str:
    """JSON text of a card (or any IR node); `parse_json` reads it back to an equal IR."""
    text = json.dumps(ir.to_json(node), ensure_ascii=False, indent=indent)
    return text + "\n" if indent is not None else text


def parse_json(text: str, file: str = "<json>") -> ir.Card:
    """A card from `render_json`'s output; raises ToycardsError naming what is wrong."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ToycardsError(f"{file}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    try:
        card = ir.from_json(data)
    except KeyError as exc:
        raise ToycardsError(f"{file}: not a toycards IR: unknown node kind or missing key {exc}") from None
    except (TypeError, AttributeError) as exc:
        raise ToycardsError(f"{file}: not a toycards IR: {exc}") from None
    if not isinstance(card, ir.Card):
        raise ToycardsError(f"{file}: the JSON holds a {type(card).__name__}, not a Card")
    if card.version != ir.CARD_LANGUAGE_VERSION:
        raise ToycardsError(
            f"{file}: card language version {card.version} is not supported "
            f"(this toycards reads version {ir.CARD_LANGUAGE_VERSION})"
        )
    return card
