"""Small helpers on generated code text and on the card expressions codegen inspects.

Owns: parenthesising code, identifiers of compound card names, integer literals, affine index
forms (`2·i + 1` in a map variable), parsing a small expression written inside a name
(`K^{⌈h·H_kv/H⌉}`), the comparison spellings, and the union of values' mapped axes.
Leaves out: emitting expressions (exprs.py) and statements (steps.py).
"""

from __future__ import annotations

import re

from toycards.codegen.scope import free_names
from toycards.codegen.values import Val
from toycards.lang import ir

COMPARE = {"<": "<", "≤": "<=", "=": "==", "≠": "!=", "≥": ">=", ">": ">"}


def union_fams(*vals: Val) -> frozenset[str]:
    out: frozenset[str] = frozenset()
    for v in vals:
        out |= v.fams
    return out


def paren(code: str) -> str:
    if re.fullmatch(r"[\w.]+(\[[^\[\]]*\])?|[\w.]+\([^()]*\)|-?\d+(\.\d*)?(e-?\d+)?|'[^'\\]*'", code):
        return code
    depth = 0
    for i, ch in enumerate(code):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0 and i < len(code) - 1:
            return f"({code})"
    return code


def name_code(parts: list[tuple[str, str]]) -> str:
    """A tensor-name expression: a readable f-string for plain names, else literal concatenation."""
    if all(kind == "expr" or re.fullmatch(r"[\w.\-]*", text) for kind, text in parts):
        return 'f"' + "".join(text if kind == "text" else "{" + text + "}" for kind, text in parts) + '"'
    return " + ".join(repr(text) if kind == "text" else f"str({text})" for kind, text in parts if text)


def int_literal(e: ir.Expr | None) -> int | None:
    """The value of `3` or `−3` written as a literal, else None."""
    if isinstance(e, ir.Num) and e.text.isdigit():
        return int(e.text)
    if isinstance(e, ir.UnOp) and e.op == "-" and isinstance(e.operand, ir.Num) and e.operand.text.isdigit():
        return -int(e.operand.text)
    return None


def expr_text(e: ir.Expr) -> str:
    from toycards.lang.printer import Renderer

    return Renderer().expr(e)


def affine(e: ir.Expr, names: set[str]) -> tuple[str, int, ir.Expr | None] | None:
    """`2·i − 1` → ("i", 2, Num(-1)); `i + d/2` and `d/2 + i` → ("i", 1, d/2); `i` → ("i", 1, None)."""
    if isinstance(e, ir.Name) and e.id in names:
        return e.id, 1, None
    if (
        isinstance(e, ir.BinOp)
        and e.op == "·"
        and isinstance(e.left, ir.Num)
        and isinstance(e.right, ir.Name)
        and e.right.id in names
    ):
        return e.right.id, int(e.left.text), None
    if isinstance(e, ir.BinOp) and e.op in "+-":
        inner = affine(e.left, names)
        if inner is not None and inner[2] is None and not (free_names(e.right) & names):
            off = e.right if e.op == "+" else ir.UnOp("-", e.right)
            return inner[0], inner[1], off
        inner = affine(e.right, names) if e.op == "+" else None  # `d + j` reads as `j + d`
        if inner is not None and inner[2] is None and not (free_names(e.left) & names):
            return inner[0], inner[1], e.left
    return None


_EXPR_CACHE: dict[str, ir.Expr] = {}


def parse_expr(text: str) -> ir.Expr:
    """Parse an expression written in a name's braces, e.g. `⌈h·H_kv/H⌉`."""
    if text not in _EXPR_CACHE:
        from toycards.lang.parse import parse

        card = parse(f"Algorithm: a ← f(b)\n1  return a = {text}\n")
        _EXPR_CACHE[text] = card.algorithms[0].body[0].value
    return _EXPR_CACHE[text]
