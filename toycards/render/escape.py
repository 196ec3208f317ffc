"""Text from a file or a card made safe to print on a terminal.

Owns: `terminal_safe(text, newlines=True)`, which spells as a visible escape every character
that can drive a terminal or reorder what it shows (errors.UNSAFE_CHARACTERS: the C0 controls
but tab, and newline where a newline is legitimate for the output, DEL, the C1 controls, the
bidirectional-text controls and the line and paragraph separators); and `to_terminal(stream)`,
whether an output goes to a terminal.
Leaves out: colour and layout (render/terminal.py), and the escaping of JSON, HTML and LaTeX
output, which their own writers do. Imports nothing heavy, so that every command can use it.

>>> print(terminal_safe("llama\\x1b]0;pwned\\x07\\x1b[2J \\u202eevil\\nnext"))
llama\\x1b]0;pwned\\x07\\x1b[2J \\u202eevil
next
>>> terminal_safe("a\\tb\\nc", newlines=False)
'a\\tb\\\\nc'
"""

from __future__ import annotations

from typing import IO

from toycards.errors import visible


def terminal_safe(text: str, newlines: bool = True) -> str:
    """`text` with every terminal control, bidi control and line separator spelled as an escape
    (`\\x1b`, `\\u202e`: errors.visible); tabs stay, and newlines unless `newlines=False` (a
    one-line field)."""
    return visible(text, keep="\t\n" if newlines else "\t")


def to_terminal(stream: IO[str]) -> bool:
    """Whether `stream` is a terminal (a pipe or a file gets formats such as Markdown as is)."""
    return bool(getattr(stream, "isatty", lambda: False)())
