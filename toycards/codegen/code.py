"""Small helpers on generated code text and on the card expressions codegen inspects.

Owns: parenthesising code, identifiers of compound card names, integer literals, affine index
forms (`2·i + 1` in a map variable), the checker's symbolic dimensions as integer code
(`dim_code`, `linear_in`), parsing a small expression written inside a name (`K^{⌈h·H_kv/H⌉}`),
the comparison spellings, and the union of values' mapped axes.
Leaves out: emitting expressions (exprs.py) and statements (steps.py).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from toycards.checker.dims import Dim
from toycards.codegen.scope import family_key, free_names
from toycards.codegen.values import Val
from toycards.lang import ir

COMPARE = {"<": "<", "≤": "<=", "=": "==", "≠": "!=", "≥": ">=", ">": ">"}


def union_fams(*vals: Val) -> frozenset[str]:
    out: frozenset[str] = frozenset()
    for v in vals:
        out |= v.fams
    return out


def paren(code: str) -> str:
    if re.fullmatch(r"[\w.]+(\[[^\[\]]*\])*|[\w.]+\([^()]*\)|-?\d+(\.\d*)?(e-?\d+)?|'[^'\\]*'", code):
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
    """`2·i − 1` → ("i", 2, Num(-1)); `i + d/2` and `d/2 + i` → ("i", 1, d/2); `i` → ("i", 1, None);
    `(i + 1) − 1` → ("i", 1, None). None unless the index is a·i + b with a ≥ 1 a whole number
    and b free of map variables."""
    if isinstance(e, ir.Name) and e.id in names:
        return e.id, 1, None
    if isinstance(e, ir.BinOp) and e.op == "·":
        for k, rest in ((e.left, e.right), (e.right, e.left)):
            inner = affine(rest, names) if int_literal(k) is not None and int_literal(k) > 0 else None
            if inner is not None:
                off = None if inner[2] is None else _fold("·", k, inner[2])
                return inner[0], int_literal(k) * inner[1], off
        return None
    if isinstance(e, ir.BinOp) and e.op in "+-":
        inner = affine(e.left, names)
        if inner is not None and not (free_names(e.right) & names):
            off = e.right if e.op == "+" else _fold("-", ir.Num("0"), e.right)
            return inner[0], inner[1], off if inner[2] is None else _fold("+", inner[2], off)
        inner = affine(e.right, names) if e.op == "+" else None  # `d + j` reads as `j + d`
        if inner is not None and not (free_names(e.left) & names):
            return inner[0], inner[1], e.left if inner[2] is None else _fold("+", e.left, inner[2])
    return None


def dim_code(d: Dim, name: Callable[[str], str]) -> str:
    """A symbolic dimension as integer arithmetic, each name as `name` writes it (every term of a
    dimension the checker accepted is a whole number).

    >>> from toycards.checker.dims import Dim
    >>> h, d_h = Dim.name("h"), Dim.name("d_h")
    >>> dim_code(h * d_h - d_h, str), dim_code(Dim.name("d") / Dim.name("H") + 1, str)
    ('d_h * h - d_h', 'd // H + 1')
    >>> dim_code(Dim.num(0), str), dim_code(3 * h / 2, str)
    ('0', '3 * h // 2')
    """
    out = ""
    for mono, c in sorted(d.terms.items(), key=lambda mc: (not mc[0], mc[1] < 0, mc[0])):
        up = [name(n) for n, e in mono for _ in range(e)]
        down = [name(n) for n, e in mono for _ in range(-e)]
        num = " * ".join(([str(abs(c.numerator))] if abs(c.numerator) != 1 or not up else []) + up)
        den = " * ".join(([str(c.denominator)] if c.denominator != 1 else []) + down)
        term = f"{num} // {paren(den) if ' ' in den else den}" if den else num
        out = (f"-{term}" if c < 0 else term) if not out else out + (" - " if c < 0 else " + ") + term
    return out or "0"


def linear_in(d: Dim, var: str) -> tuple[Dim, Dim] | None:
    """(a, b) with d = a·var + b and neither a nor b holding var, else None.

    >>> from toycards.checker.dims import Dim
    >>> h, d_h = Dim.name("h"), Dim.name("d_h")
    >>> [str(x) for x in linear_in((h - 1) * d_h + 1, "h")], linear_in(h * h, "h")
    (['d_h', '−d_h + 1'], None)
    """
    a = {}
    for mono, c in d.terms.items():
        power = dict(mono).get(var, 0)
        if power not in (0, 1):
            return None
        if power == 1:
            a[tuple(x for x in mono if x[0] != var)] = c
    slope = Dim(a)
    return slope, d - slope * Dim.name(var)


def reversed_index(e: ir.Expr, names: set[str]) -> tuple[str, ir.Expr] | None:
    """`c − i` → ("i", c), c free of map variables (`n + 1 − i` reads the entries backwards).

    >>> reversed_index(parse_expr("n + 1 − i"), {"i"})[0], reversed_index(parse_expr("i − 1"), {"i"})
    ('i', None)
    """
    if isinstance(e, ir.BinOp) and e.op in ("-", "−") and isinstance(e.right, ir.Name):
        if e.right.id in names and not (free_names(e.left) & names):
            return e.right.id, e.left
    return None


def _fold(op: str, a: ir.Expr, b: ir.Expr) -> ir.Expr | None:
    """a op b, as one literal when both are whole numbers (None for a zero offset)."""
    x, y = int_literal(a), int_literal(b)
    if x is not None and y is not None:
        v = {"+": x + y, "-": x - y, "·": x * y}[op]
        return None if v == 0 and op != "·" else (ir.Num(str(v)) if v >= 0 else ir.UnOp("-", ir.Num(str(-v))))
    if op == "-" and x == 0:
        return ir.UnOp("-", b)
    return ir.BinOp(op, a, b)


def shifted(e: ir.Expr, var: str, offset: ir.Expr, to: str | None = None) -> ir.Expr:
    """`e` with `var` read as `var + offset` (as `to + offset` when `to` is given; a zero offset
    is left out), in indices and in family members alike.

    >>> expr_text(shifted(parse_expr("x[i] · e_i"), "i", ir.Num("2")))
    'x[i + 2] · e_{i + 2}'
    >>> expr_text(shifted(parse_expr("X[:, r] · e_r"), "r", ir.Num("0"), "t"))
    'X[:, t] · e_{t}'
    """

    def visit(n: object) -> object:
        if isinstance(n, ir.Name):
            if n.id == var:
                name = ir.Name(to, span=n.span) if to is not None else n
                return name if int_literal(offset) == 0 else ir.BinOp("+", name, offset, span=n.span)
            fk = family_key(n.id, {var})
            if fk is not None and var in free_names(parse_expr(fk[1])):
                index = expr_text(shifted(parse_expr(fk[1]), var, offset, to))
                return ir.Name(fk[0].replace("•", "{" + index + "}"), span=n.span)
            return n
        if isinstance(n, tuple):
            return tuple(visit(x) for x in n)
        if dataclasses.is_dataclass(n) and not isinstance(n, type):
            if isinstance(n, ir.Sum) and n.var == var:
                return n  # an inner Σ over the same letter binds its own
            changes = {f.name: visit(getattr(n, f.name)) for f in dataclasses.fields(n) if f.name != "span"}
            return dataclasses.replace(n, **changes)
        return n

    return visit(e)


_EXPR_CACHE: dict[str, ir.Expr] = {}


def parse_expr(text: str) -> ir.Expr:
    """Parse an expression written in a name's braces, e.g. `⌈h·H_kv/H⌉`."""
    if text not in _EXPR_CACHE:
        from toycards.lang.parse import parse

        card = parse(f"Algorithm: a ← f(b)\n1  return a = {text}\n")
        _EXPR_CACHE[text] = card.algorithms[0].body[0].value
    return _EXPR_CACHE[text]
