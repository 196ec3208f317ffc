"""Getting a card's text, and turning away what the grammar should never see.

Owns: reading a card from text or from a path (missing file, directory, unreadable, not UTF-8),
the input limits (`MAX_BYTES` per file, `MAX_NESTING` brackets deep on one line; `MAX_LINES`
lines and `MAX_LINE` characters a line, checked by `check_limits` for a card file and a card
given as text alike; `MAX_NAME`, `MAX_DEPTH` and `MAX_BLOCKS`, checked as the lines are read
and assembled), the precheck (binary data, empty input, runaway nesting) with its diagnostics,
and `diag_at`, the one-character diagnostic at an offset that the syntax errors use too.
Leaves out: the grammar and everything after it (parse.py); a byte-order mark or an invisible
character is left to the parser, whose error names it (syntax_errors.py).
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from toycards.errors import UNSAFE_CHARACTERS, Diagnostic, Span, ToycardsError

MAX_NESTING = 64  # brackets open at once on one line
MAX_BYTES = 8 * 1024 * 1024  # size of a card file

# Refused anywhere in a card: the unsafe characters (errors.UNSAFE_CHARACTERS) but tab and line
# feed, and a carriage return unless it ends a line. NUL has a message of its own (binary data).
CONTROL = re.compile(f"(?![\t\n\r])[{UNSAFE_CHARACTERS}]|\r(?!\n)")


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
    control = CONTROL.search(text)
    if control:
        raise ToycardsError.from_diagnostics([_control_diagnostic(text, file, control.start())], sources)
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


def _control_diagnostic(text: str, file: str, at: int) -> Diagnostic:
    """The diagnostic for the control character at `at`, named by code point and Unicode name.

    >>> _control_diagnostic("a ← b\x1b[2J", "f", 5).message
    'control character U+001B (ESCAPE) in a card'
    """
    ch = text[at]
    name = unicodedata.name(ch, "") or _C0_NAMES.get(ch, "")
    what = "bidirectional-text control" if ch in _BIDI_CONTROLS else "control character"
    hint = {
        "\r": "a carriage return may only end a line (as in \\r\\n); delete this one",
        "\u2028": "a card's lines end with a line feed; delete it",
        "\u2029": "a card's lines end with a line feed; delete it",
    }.get(ch, "cards are plain text: delete it (it can make a line read differently from what runs)")
    return diag_at(text, file, at, f"{what} U+{ord(ch):04X}{f' ({name})' if name else ''} in a card", hint)


_BIDI_CONTROLS = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_C0_NAMES = {  # unicodedata has no names for the C0 and C1 controls
    "\r": "CARRIAGE RETURN",
    "\x0b": "LINE TABULATION",
    "\x0c": "FORM FEED",
    "\x1b": "ESCAPE",
    "\x7f": "DELETE",
    "\x85": "NEXT LINE",
    "\x08": "BACKSPACE",
    "\x07": "BELL",
}


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


# ── size limits: what a card may hold, checked before the parser sees it ───────────────
MAX_LINES = 200_000  # lines of one card: a step is one line, so this bounds the steps too
MAX_LINE = 10_000  # characters on one line: no token crosses a line, so this bounds every token
MAX_NAME = 256  # characters of one name (checked as the lines are read: transformer.py)
MAX_DEPTH = 64  # IR nodes on one path down a line's statement or declaration (parse.py)
MAX_BLOCKS = 16  # `do … end` and `then … end` blocks open at once (assemble.py)
_LONG_LINE = re.compile(f"[^\\n]{{{MAX_LINE + 1}}}")
_SIZE_CHUNK = 1 << 16  # characters encoded at a time when a text's UTF-8 size is counted


def check_limits(text: str, file: str) -> None:
    """Refuse a card bigger than a card file may be: over `MAX_BYTES` of UTF-8, over `MAX_LINES`
    lines, or a line over `MAX_LINE` characters. The same limits hold for a card file and for a
    card given as text (a GGUF file's embedded card), so that reading either costs time and memory
    in proportion to its size: matching a name token takes memory for each of its characters.

    >>> check_limits("Algorithm: y ← f(x)\\n", "f.card")
    >>> try:
    ...     check_limits("x" * (MAX_LINE + 1), "f.card")
    ... except ToycardsError as e:
    ...     print(e.diagnostics[0].headline())
    f.card:1:10001: error: a line of 10001 characters (the limit is 10000)
    """
    size = utf8_size(text)
    if size > MAX_BYTES:
        raise ToycardsError(f"{file}: {size} bytes is too large for a card (limit {MAX_BYTES})")
    lines = text.count("\n") + (not text.endswith("\n"))
    if lines > MAX_LINES:
        raise ToycardsError(f"{file}: {lines} lines is too many for a card (limit {MAX_LINES})")
    long = _LONG_LINE.search(text)
    if long:
        end = text.find("\n", long.start())
        length = (len(text) if end < 0 else end) - long.start()
        message = f"a line of {length} characters (the limit is {MAX_LINE})"
        hint = f"split the step into several steps; a name holds at most {MAX_NAME} characters"
        raise ToycardsError.from_diagnostics(
            [diag_at(text, file, long.start() + MAX_LINE, message, hint)], {file: text}
        )


def utf8_size(text: str) -> int:
    """`len(text.encode())`, counted a chunk at a time rather than encoding all of `text` at once.

    >>> utf8_size("a ← b"), len("a ← b".encode())
    (7, 7)
    """
    if text.isascii():
        return len(text)
    return sum(
        len(text[i : i + _SIZE_CHUNK].encode("utf-8", "surrogatepass"))
        for i in range(0, len(text), _SIZE_CHUNK)
    )
