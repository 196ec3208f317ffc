"""Reading small pieces of card syntax that live inside other tokens.

Owns: parsing the text of a family index written in braces (`K^{⌈h·H_kv/H⌉}` → an expression)
and of a group-prefix template (`"blk.{l-1}."` → the dimension `l − 1`) with the card grammar
itself, so that these pieces follow exactly the rules of the language.
Leaves out: deciding what the pieces mean (names.py, bindings.py).

>>> str(parse_dim_text("l-1")), parse_dim_text("l.5")
('l − 1', None)
"""

from __future__ import annotations

import dataclasses
import functools

from toycards.checker.dims import Dim, DimError, expr_to_dim
from toycards.errors import Span, ToycardsError
from toycards.lang import ir


def parse_dim_text(text: str) -> Dim | None:
    """A dimension expression written as text (`l-1`, `2·l`), or None when it is not one."""
    e = _parse_expr(text)
    try:
        return None if e is None else expr_to_dim(e, lambda name: True)
    except DimError:
        return None


@functools.lru_cache(maxsize=512)
def _parse_expr(text: str) -> ir.Expr | None:
    from toycards.lang.parse import parse

    if "\n" in text:
        return None
    try:
        card = parse(f"Algorithm: a ← f(x)\n1 a ← {text}\n")
    except ToycardsError:
        return None
    stmt = card.main.body[0]
    return stmt.value if isinstance(stmt, ir.Assign) and not stmt.comment else None


def parse_expr_text(text: str, span: Span) -> ir.Expr | None:
    """An expression written as text (a family index), every node placed at `span`."""
    e = _parse_expr(text)
    return None if e is None else _respan(e, span)


def _respan(node: object, span: Span) -> object:
    if not dataclasses.is_dataclass(node):
        if isinstance(node, tuple):
            return tuple(_respan(x, span) for x in node)
        return node
    changes = {
        f.name: _respan(getattr(node, f.name), span) for f in dataclasses.fields(node) if f.name != "span"
    }
    return dataclasses.replace(node, span=span, **changes)
