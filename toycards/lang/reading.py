"""Getting a card's text, and turning away what the grammar should never see.

Owns: reading a card from text or from a path (missing file, directory, unreadable, not UTF-8),
the input limits (`MAX_BYTES` per file, `MAX_NESTING` brackets deep on one line), the
precheck (binary data, empty input, runaway nesting) with its diagnostics, and `diag_at`,
the one-character diagnostic at an offset that the syntax errors use too.
Leaves out: the grammar and everything after it (parse.py); a byte-order mark or an invisible
character is left to the parser, whose error names it (syntax_errors.py).
"""

from __future__ import annotations

from pathlib import Path

from toycards.errors import Diagnostic, Span, ToycardsError

MAX_NESTING = 64  # brackets open at once on one line
MAX_BYTES = 8 * 1024 * 1024  # size of a card file


def read(text_or_path: str | Path, file: str | None) -> tuple[str, str]:
    """The card's text and the file name its diagnostics will show.

    A `Path`, or a one-line string ending in `.card`, is read from disk; any other string is
    the card itself:

    >>> read("Algorithm: y ← f(x)\\n", None)
    ('Algorithm: y ← f(x)\\n', '<card>')
    """
    if isinstance(text_or_path, Path) or ("\n" not in text_or_path and text_or_path.endswith(".card")):
        path = Path(text_or_path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ToycardsError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise ToycardsError(f"{path}: is a directory, not a card") from None
        except OSError as exc:
            raise ToycardsError(f"{path}: cannot read: {exc.strerror}") from None
        if len(data) > MAX_BYTES:
            raise ToycardsError(f"{path}: {len(data)} bytes is too large for a card (limit {MAX_BYTES})")
        try:
            return data.decode("utf-8"), file or str(path)
        except UnicodeDecodeError as exc:
            raise ToycardsError(
                f"{path}: not a UTF-8 text file (invalid byte at offset {exc.start})"
            ) from None
    return str(text_or_path), file or "<card>"


def precheck(text: str, file: str) -> None:
    """Reject what the grammar should never see: binary data, empty input, runaway nesting."""
    sources = {file: text}
    if "\x00" in text:
        at = text.index("\x00")
        raise ToycardsError.from_diagnostics(
            [diag_at(text, file, at, "binary data (NUL byte) in a card", "cards are UTF-8 text")], sources
        )
    if not text.strip():
        raise ToycardsError.from_diagnostics(
            [
                Diagnostic(
                    Span(file, 1, 1, 1, 2, 0, 0),
                    "empty card: no algorithm",
                    "a card starts with `Algorithm: OUT ← Name(inputs | parameters)`",
                )
            ],
            sources,
        )
    depth, at = deepest_nesting(text)
    if depth > MAX_NESTING:
        raise ToycardsError.from_diagnostics(
            [
                diag_at(
                    text,
                    file,
                    at,
                    f"brackets nested {depth} deep (the limit is {MAX_NESTING})",
                    "split the expression into several steps",
                )
            ],
            sources,
        )


def deepest_nesting(text: str) -> tuple[int, int]:
    """The most brackets open at once on one line, and the offset of the bracket that got there.

    Every line starts at depth 0, and a stray closer never takes the depth below zero:

    >>> deepest_nesting("f((a)[b]) ⟦(x)⟧\\n((((")
    (4, 19)
    """
    depth, deepest = 0, (0, 0)
    for i, ch in enumerate(text):
        if ch in "([{⟦":
            depth += 1
            if depth > deepest[0]:
                deepest = (depth, i)
        elif ch in ")]}⟧":
            depth = max(depth - 1, 0)
        elif ch == "\n":
            depth = 0
    return deepest


def diag_at(text: str, file: str, offset: int, message: str, hint: str = "") -> Diagnostic:
    """A diagnostic one character wide at `offset` of `text`.

    >>> diag_at("ab\\ncd", "f", 4, "here").span
    Span(file='f', line=2, col=2, end_line=2, end_col=3, start=4, end=5)
    """
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return Diagnostic(Span(file, line, col, line, col + 1, offset, offset + 1), message, hint)
