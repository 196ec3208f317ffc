"""Source spans, diagnostics and the one exception type users see.

Owns: `Span` (where in a file), `Diagnostic` (what is wrong there, with the shapes
involved and a hint), `ToycardsError` (one or more diagnostics, or a plain message for
non-card inputs such as a bad GGUF file) and the plain-text rendering of diagnostics
(`file:line:col: error: message`, the source line, a caret, the hint), and `visible`, which
spells a text's control and invisible characters as escapes so that a line from a card or a file
cannot drive the terminal it is printed on.
Leaves out: colour and terminal output (render/terminal.py), and deciding exit codes (cli/).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Span:
    """A region of a source text; lines and columns count from 1, `end_col` is exclusive."""

    file: str = "<card>"
    line: int = 1
    col: int = 1
    end_line: int = 1
    end_col: int = 2
    start: int = 0  # character offsets into the source text
    end: int = 1

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


NO_SPAN = Span("<none>", 0, 0, 0, 0, 0, 0)


@dataclass(frozen=True)
class Diagnostic:
    """One problem found in a card (or in a file bound to it)."""

    span: Span
    message: str
    hint: str = ""
    shapes: tuple[str, ...] = ()
    severity: str = "error"  # "error" | "warning" | "note"

    def headline(self) -> str:
        where = (
            f"{self.span}: "
            if self.span.line > 0
            else (f"{self.span.file}: " if self.span.file != "<none>" else "")
        )
        return f"{where}{self.severity}: {self.message}"


# What a terminal or an editor takes as a command, a line end or a change of direction: the C0
# controls, DEL, the C1 controls (the one-byte CSI and NEL among them), the line and paragraph
# separators, and the bidirectional-text marks, embeddings, overrides and isolates. Cards refuse
# them (lang/reading.py); everything printed or written into generated code spells them out.
UNSAFE_CHARACTERS = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[{UNSAFE_CHARACTERS}]")


def visible(text: str, keep: str = "") -> str:
    """`text` with every unsafe character (`UNSAFE_CHARACTERS`) but those in `keep` spelled as a
    Python escape, so that a line from a card or a file cannot drive the terminal it is printed
    on, nor end a line where the writer did not.

    >>> print(visible("name\\x1b]0;title\\x07 \\u202eabc\\tx"))
    name\\x1b]0;title\\x07 \\u202eabc\\tx
    >>> visible("a\\tb\\nc", keep="\\t\\n")
    'a\\tb\\nc'
    """
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _spelled(m.group()), text)


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _spelled(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def excerpt(source: str, span: Span, width: int = 160) -> tuple[str, str]:
    """Return the source line of `span` and a caret line under it, both clipped to `width`; an
    unsafe character (`visible`) shows as its escape, with the caret still under it.

    >>> excerpt("a ← b + c\\n", Span("f", 1, 5, 1, 10, 4, 9))
    ('a ← b + c', '    ^~~~~')
    >>> excerpt("a ← \\x1b[2J\\n", Span("f", 1, 5, 1, 6, 4, 5))
    ('a ← \\\\x1b[2J', '    ^~~~')
    """
    raw = _line(source, span)
    if raw is None:
        return "", ""
    raw = raw.removesuffix("\r").replace("\t", " ")
    if len(raw) > 4 * width:  # only a window around the span is ever shown
        left = max(0, min(span.col - 1 - width, len(raw) - 2 * width))
        raw = raw[left : left + 2 * width]
        span = Span(span.file, span.line, span.col - left, span.end_line, span.end_col - left, 0, 0)
    pieces = [visible(ch) for ch in raw]
    ends = [0]
    for piece in pieces:
        ends.append(ends[-1] + len(piece))
    text = "".join(pieces)
    start = ends[min(max(span.col - 1, 0), len(raw))]
    stop = ends[min(span.end_col - 1, len(raw))] if span.end_line == span.line else len(text)
    stop = max(stop, start + 1)
    if len(text) > width:  # keep the caret in view on very long lines
        left = max(0, min(start - width // 4, len(text) - width))
        text = ("…" if left else "") + text[left : left + width] + "…"
        shift = left - (1 if left else 0)
        start, stop = start - shift, min(stop - shift, len(text))
    caret = " " * start + "^" + "~" * max(0, stop - start - 1)
    return text, caret


def _line(source: str, span: Span) -> str | None:
    """The text of line `span.line` of `source` (only a line feed ends a line), or None.

    >>> _line("a\\nbc\\nd", Span("f", 2, 1, 2, 2, 2, 3)), _line("a", Span("f", 3, 1, 3, 2, 9, 9))
    ('bc', None)
    """
    starts = _line_starts(source)
    if not 1 <= span.line <= len(starts):
        return None
    end = starts[span.line] - 1 if span.line < len(starts) else len(source)
    return source[starts[span.line - 1] : end]


@functools.lru_cache(maxsize=4)
def _line_starts(source: str) -> list[int]:
    """Where each line of `source` starts: found once for a card however many diagnostics it has."""
    return [0, *(m.end() for m in re.finditer("\n", source))]


def format_diagnostic(diag: Diagnostic, source: str | None = None) -> str:
    """Plain-text form: headline, source line, caret, hint."""
    out = [diag.headline()]
    if source is not None and diag.span.line > 0:
        text, caret = excerpt(source, diag.span)
        if text or caret:
            out += [f"  {text}", f"  {caret}"]
    if diag.hint:
        out.append(f"  hint: {diag.hint}")
    return "\n".join(out)


@dataclass
class ToycardsError(Exception):
    """The only exception a user should ever see from toycards.

    Carries diagnostics with spans (card errors) or just a message (file errors).
    `sources` maps file names to their text so that carets can be drawn.
    """

    message: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def __str__(self) -> str:
        if not self.diagnostics:
            return self.message
        return "\n".join(format_diagnostic(d, self.sources.get(d.span.file)) for d in self.diagnostics)

    @classmethod
    def from_diagnostics(
        cls, diags: list[Diagnostic], sources: dict[str, str] | None = None
    ) -> ToycardsError:
        n = sum(d.severity == "error" for d in diags)
        return cls(f"{n} error{'s' * (n != 1)}", list(diags), dict(sources or {}))
