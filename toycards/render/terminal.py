"""Colour on a terminal: diagnostics in the compiler style and a highlighted card view.

Owns: `print_error` / `print_diagnostics` (headline `file:line:col: error: message` in bold with
the severity coloured, the source line, a caret in green, the hint in cyan; without colour, the
same characters as errors.format_diagnostic), `highlight_card` (keywords, names being assigned,
types, strings and comments of a card's text as rich `Text`) and `use_colour` (the decision: a
terminal, unless NO_COLOR; FORCE_COLOR forces it).
Every text printed here goes through render/escape.py's `terminal_safe` first (a file's name,
a message quoting a file's string, a card line), and into rich as `Text`, never as markup.
Leaves out: exit codes (cli/).
"""

from __future__ import annotations

import dataclasses
import os
from typing import IO

from rich.console import Console
from rich.text import Text

from toycards.errors import Diagnostic, ToycardsError, excerpt
from toycards.render.escape import terminal_safe, to_terminal

SEVERITY_STYLE = {"error": "bold red", "warning": "bold yellow", "note": "bold cyan"}


def use_colour(stream: IO[str]) -> bool:
    """Colour when writing to a terminal, unless NO_COLOR is set; FORCE_COLOR forces it."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return bool(getattr(stream, "isatty", lambda: False)())


def diagnostic_text(diag: Diagnostic, source: str | None = None) -> Text:
    """The coloured form of `format_diagnostic`: same characters, with styles; every part that
    can come from a file is terminal-safe."""
    out = Text()
    where = diag.headline()[: -len(f"{diag.severity}: {diag.message}")]
    out.append(terminal_safe(where, newlines=False), style="bold")
    out.append(f"{diag.severity}:", style=SEVERITY_STYLE.get(diag.severity, "bold"))
    out.append(f" {terminal_safe(diag.message, newlines=False)}", style="bold")
    if source is not None and diag.span.line > 0:
        text, caret = excerpt(source, diag.span)  # unsafe characters already spelled out
        if text or caret:
            out.append(f"\n  {text}\n")
            out.append(f"  {caret}", style="bold green")
    if diag.hint:
        out.append("\n  ")
        out.append("hint:", style="bold cyan")
        out.append(f" {terminal_safe(diag.hint, newlines=False)}")
    return out


MAX_MESSAGE = 300


def clipped(diag: Diagnostic) -> Diagnostic:
    """The diagnostic with an overlong message or hint shortened in the middle (a 1 MB name)."""

    def clip(text: str) -> str:
        return text if len(text) <= MAX_MESSAGE else f"{text[:200]}…{text[-80:]}"

    return dataclasses.replace(diag, message=clip(diag.message), hint=clip(diag.hint))


def print_diagnostics(
    diags: list[Diagnostic], sources: dict[str, str], stream: IO[str], colour: bool | None = None
) -> None:
    """Write each diagnostic (headline, source line, caret, hint) to `stream`."""
    diags = [clipped(d) for d in diags]
    colour = use_colour(stream) if colour is None else colour
    if not colour:
        for d in diags:
            stream.write(diagnostic_text(d, sources.get(d.span.file)).plain + "\n")
        return
    console = Console(file=stream, force_terminal=True, highlight=False, soft_wrap=True)
    for d in diags:
        console.print(diagnostic_text(d, sources.get(d.span.file)))


def print_error(err: ToycardsError, stream: IO[str], colour: bool | None = None) -> None:
    """A ToycardsError: its diagnostics with carets, or its one-line message."""
    if err.diagnostics:
        print_diagnostics(err.diagnostics, err.sources, stream, colour)
        return
    colour = use_colour(stream) if colour is None else colour
    message = terminal_safe(err.message, newlines=False)
    if not colour:
        stream.write(f"error: {message}\n")
        return
    line = Text()
    line.append("error:", style=SEVERITY_STYLE["error"])
    line.append(f" {message}", style="bold")
    Console(file=stream, force_terminal=True, highlight=False, soft_wrap=True).print(line)


_KEYWORDS = r"\b(Algorithm|Input|Output|Hyperparameters|Parameters|for|do|end|if|then|else|return|from|default|or|mod|toycards)\b"


def highlight_card(text: str) -> Text:
    """Card text with light syntax colouring (the characters are unchanged)."""
    out = Text(text)
    out.highlight_regex(_KEYWORDS, "bold")
    out.highlight_regex(r"(ℝ|ℕ|ℤ|𝕊|\{0,1\}|\(0,1\)|V)\^?(\{[^}\n]*\}|\S*)?(?=\s|$)", "cyan")
    out.highlight_regex(r"(?m)^\s*\d+\s+(?:for [^:\n]*: )?[^\s←]+(?= ←)", "bold blue")
    out.highlight_regex(r'"[^"\n]*"', "magenta")
    out.highlight_regex(r"/\*[^\n]*\*/", "italic")
    out.highlight_regex(r"(▷|\|>)[^\n]*", "dim green")
    return out


def print_card(text: str, stream: IO[str], colour: bool | None = None) -> None:
    """Card text, coloured and terminal-safe on a terminal, byte-for-byte otherwise."""
    colour = use_colour(stream) if colour is None else colour
    if colour or to_terminal(stream):
        text = terminal_safe(text)
    if not colour:
        stream.write(text)
        return
    Console(file=stream, force_terminal=True, highlight=False, soft_wrap=True).print(
        highlight_card(text), end=""
    )
