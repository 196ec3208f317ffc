"""Card text → IR: the entry point `parse`, and the lark parser it runs.

Owns: `parse(text_or_path, file=None) -> ir.Card` and building the parser from
`lang/card.lark` (LALR, positions on every node, built once). `parse` runs the stages in
order: read, check the size limits and precheck (reading.py), parse, transform the tree
(transformer.py), refuse a line nested deeper than `MAX_DEPTH`, assemble the lines into
algorithms (assemble.py), with the cyclic garbage collector paused from the parse on
(scale.py); a syntax error becomes a friendly diagnostic (syntax_errors.py), a
tree too deep to transform a plain error. lark is imported only in toycards/lang/ (here,
transformer.py, syntax_errors.py).
Leaves out: name resolution and shapes (checker/), rendering (render/).
"""

from __future__ import annotations

import functools
import sys
from importlib import resources
from pathlib import Path

import lark

from toycards.errors import Diagnostic, Span, ToycardsError
from toycards.lang import ir
from toycards.lang.assemble import Assembler
from toycards.lang.reading import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_LINE,
    MAX_LINES,
    MAX_NAME,
    MAX_NESTING,
    check_limits,
    precheck,
    read,
)
from toycards.lang.scale import collector_paused, deeper_than
from toycards.lang.transformer import Line, ToIR, span_of

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_LINE", "MAX_LINES", "MAX_NAME", "MAX_NESTING", "parse", "span_of"]


@functools.cache
def _parser() -> lark.Lark:
    """The card grammar's LALR parser (lark also caches the built tables on disk)."""
    grammar = resources.files("toycards.lang").joinpath("card.lark").read_text(encoding="utf-8")
    return lark.Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=False, cache=True)


def parse(text_or_path: str | Path, file: str | None = None) -> ir.Card:
    """Parse a card from text or from a path; raises ToycardsError with diagnostics."""
    text, file = read(text_or_path, file)
    check_limits(text, file)
    precheck(text, file)
    with collector_paused():
        return _parse(text, file)


def _parse(text: str, file: str) -> ir.Card:
    try:
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedInput as exc:
        from toycards.lang.syntax_errors import syntax_diagnostic  # only a card with a syntax error needs it

        diag = syntax_diagnostic(exc, text, file, _parser())
        raise ToycardsError.from_diagnostics([diag], {file: text}) from None
    to_ir = ToIR(file, text)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 12000))  # lark's Transformer recurses once per tree level
    try:
        lines = to_ir.transform(tree)
    except (RecursionError, lark.exceptions.VisitError) as exc:
        if isinstance(exc, lark.exceptions.VisitError) and not isinstance(exc.orig_exc, RecursionError):
            raise
        raise ToycardsError(f"{file}: an expression is too long or too deeply nested to read") from None
    finally:
        sys.setrecursionlimit(limit)
    diags = to_ir.diags + _too_deep(lines)
    if diags:
        raise ToycardsError.from_diagnostics(diags, {file: text})
    card = Assembler(file, text).assemble(lines)
    return ir.Card(card.algorithms, card.version, card.preamble, file=file, source=text)


def _too_deep(lines: list[Line]) -> list[Diagnostic]:
    """A diagnostic for each line whose statement or declaration nests more than MAX_DEPTH IR
    nodes deep (a chain `a + b + … + z` is one level a term), at the node past the limit."""
    diags = []
    for line in lines:
        deep = deeper_than(tuple(line.data.values()), MAX_DEPTH)
        if deep is not None:
            span = getattr(deep, "span", None)
            diags.append(
                Diagnostic(
                    span if isinstance(span, Span) and span.line > 0 else line.span,
                    f"an expression nested more than {MAX_DEPTH} levels deep",
                    "split it into several steps (a chain a + b + … + z is one level a term)",
                )
            )
    return diags
