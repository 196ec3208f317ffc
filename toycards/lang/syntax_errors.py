"""Friendly syntax errors: what lark could not parse, said in the card's own words.

Owns: `SYNTAX_EXAMPLES`, the table of known mistakes that lark's `match_examples` matches a
failing parser state against, and `syntax_diagnostic`, which turns lark's `UnexpectedInput`
into one `Diagnostic`: an unexpected character (with a hint for look-alikes, a byte-order mark,
invisible characters), a card that ends mid-line, a known mistake, an unclosed bracket, or
else the tokens the grammar expected, in card spelling.
Leaves out: building the parser (parse.py hands it in) and input the parser never sees
(reading.py).
"""

from __future__ import annotations

import unicodedata

import lark

from toycards.errors import Diagnostic, Span
from toycards.lang.reading import diag_at

# Each entry: (message, hint, examples that produce the same parser state).
SYNTAX_EXAMPLES: list[tuple[str, str, list[str]]] = [
    (
        "an assignment needs ← (ASCII <-)",
        "write `X ← expression`",
        ["Algorithm: a ← f(x)\nInput: x ∈ ℝ\n1 a = x\n", "Algorithm: a ← f(x)\nInput: x ∈ ℝ\n1 a := x\n"],
    ),
    (
        "a declaration needs a type after ∈",
        "e.g. `W ∈ ℝ^{d_out×d_in}`, `L ∈ ℕ`, `x ∈ V^ℓ`",
        ["Algorithm: a ← f(x)\nInput: x ∈\n", "Algorithm: a ← f(x)\nInput: x ∈ foo\n"],
    ),
    (
        "dimensions are separated by × (ASCII x)",
        "e.g. `ℝ^{d_e×ℓ}`; use · (ASCII *) to multiply dimensions",
        ["Algorithm: a ← f(x)\nInput: x ∈ ℝ^{d, e}\n", "Algorithm: a ← f(x)\nInput: x ∈ ℝ^{d e}\n"],
    ),
    (
        "unclosed bracket",
        "every ( [ { ⟦ needs its closing partner on the same line",
        [
            "Algorithm: a ← f(x)\nInput: x ∈ ℝ\n1 a ← (x + x\n",
            "Algorithm: a ← f(x)\nInput: x ∈ ℝ\n1 a ← x[1\n",
        ],
    ),
    (
        "the algorithm header is malformed",
        "write `Algorithm 1: OUT ← Name(inputs | parameters)`",
        ["Algorithm: f(x)\n", "Algorithm 1 a ← f(x)\n", "Algorithm: a ← f x\n"],
    ),
    (
        "a binding names its tensor or metadata key in double quotes",
        'e.g. `from "token_embd.weight"`, `from "{arch}.block_count"`',
        [
            "Algorithm: a ← f(x | W)\nInput: x ∈ ℝ\nParameters: W ∈ ℝ from token_embd.weight\n",
            "Algorithm: a ← f(x)\nInput: x ∈ ℝ\nHyperparameters: L ∈ ℕ from block_count\n",
        ],
    ),
    (
        "`default` needs a value",
        'e.g. `from "{arch}.attention.layer_norm_epsilon" default 1e-5`',
        ['Algorithm: a ← f(x)\nInput: x ∈ ℝ\nHyperparameters: ε ∈ ℝ from "k" default\n'],
    ),
    (
        "a loop needs `do` at the end of its line, or `:` and one statement",
        "`for l = 1, …, L do` … `end`, or `for t ∈ [ℓ]: X[:, t] ← …`",
        [
            "Algorithm: a ← f(x)\nInput: x ∈ ℝ\n1 for l = 1, …, L\n",
            "Algorithm: a ← f(x)\nInput: x ∈ ℝ\n1 for t ∈ [n]\n",
        ],
    ),
]


def syntax_diagnostic(
    exc: lark.exceptions.UnexpectedInput, text: str, file: str, parser: lark.Lark
) -> Diagnostic:
    """One diagnostic for lark's parse error `exc` in `text`; `parser` is the card parser that raised it."""
    offset = getattr(exc, "pos_in_stream", None) or 0
    if isinstance(exc, lark.exceptions.UnexpectedCharacters):
        ch = text[offset] if offset < len(text) else ""
        name = unicodedata.name(ch, f"U+{ord(ch):04X}") if ch else "end of file"
        hint = _lookalike_hint(ch)
        return diag_at(text, file, offset, f"unexpected character {ch!r} ({name})", hint)
    token = getattr(exc, "token", None)
    if token is not None and token.type == "$END":
        offset = len(text.rstrip())
        return diag_at(
            text, file, max(offset - 1, 0), "the card ends in the middle of a line", "finish the line"
        )
    message, hint = _explain(exc, token, text, offset, parser)
    diag = diag_at(text, file, offset, message, hint)
    if token is not None and getattr(token, "end_pos", None):
        diag = _under_token(diag, token)
    return diag


def _explain(
    exc: lark.exceptions.UnexpectedInput, token: lark.Token | None, text: str, offset: int, parser: lark.Lark
) -> tuple[str, str]:
    """Message and hint for an unexpected token: a known mistake if one matches, else what was expected."""
    found = (
        "end of line"
        if token is not None and token.type == "_NL"
        else repr(str(token))
        if token is not None
        else "input"
    )
    try:
        label = exc.match_examples(parser.parse, {m: ex for m, _, ex in SYNTAX_EXAMPLES}, use_accepts=True)
    except (TypeError, ValueError, AttributeError):  # lark cannot compare some parser states
        label = None
    at_line_end = token is not None and token.type == "_NL"
    if not label and at_line_end and _unclosed_bracket(text, offset) is not None:
        label = "unclosed bracket"  # the examples cannot list every place a bracket may open
    if label:
        hint = next(h for m, h, _ in SYNTAX_EXAMPLES if m == label)
        return f"{label} (found {found})", hint
    expected = getattr(exc, "expected", None) or getattr(exc, "accepts", set())
    return f"unexpected {found}", "expected " + _describe_expected(expected, parser)


def _under_token(diag: Diagnostic, token: lark.Token) -> Diagnostic:
    """`diag` widened to the offending token (at most 200 characters; an end of line is one)."""
    s = diag.span
    width = max(1, min(token.end_pos - token.start_pos, 200)) if token.type != "_NL" else 1
    return Diagnostic(
        Span(s.file, s.line, s.col, s.line, s.col + width, s.start, s.start + width),
        diag.message,
        diag.hint,
    )


_TOKEN_WORDS = {
    "NAME": "a name", "NUMBER": "a number", "INT": "a whole number", "STRING": 'a "string"',
    "_NL": "end of line", "EQ": "=", "CMP": "a comparison", "BAR": "|", "COMMENT": "▷ comment",
    "LPAR": "(", "RPAR": ")", "LSQB": "[", "RSQB": "]", "LBRACE": "{", "RBRACE": "}", "COMMA": ",",
    "COLON": ":", "SEMICOLON": ";", "CIRCUMFLEX": "^", "PLUS": "+", "SLASH": "/", "TRANSPOSE": "^⊺",
}  # fmt: skip


# ASCII spellings shown as their Unicode partner in "expected …" hints
_UNICODE_OF = {
    "-": "−", "<-": "←", ":=": "≔", "::": "∷", "in": "∈", "or": "∨", "and": "∧", "not": "¬",
    "...": "…", "*": "·", ".*": "⊙", "x": "×", "sqrt": "√", "[|": "⟦", "|]": "⟧", "inf": "∞",
    "R": "ℝ", "N": "ℕ", "Z": "ℤ", "S": "𝕊",
}  # fmt: skip


def _describe_expected(expected: set[str], parser: lark.Lark) -> str:
    """`a name, a number, (, −, √, Σ_{…}` from lark's terminal names (ASCII twins folded)."""
    terminals = {t.name: t for t in parser.terminals}
    words: set[str] = set()
    for name in expected:
        term = terminals.get(name)
        if name in _TOKEN_WORDS:
            words.add(_TOKEN_WORDS[name])
        elif name == "_SUM":
            words.add("Σ_{…}")
        elif term is not None and term.pattern.type == "str":
            words.add(_UNICODE_OF.get(term.pattern.value, term.pattern.value))
    ordered = sorted(words)
    return ", ".join(ordered[:12]) + (", …" if len(ordered) > 12 else "") if ordered else "something else"


_CLOSERS = {"(": ")", "[": "]", "{": "}", "⟦": "⟧", "⌈": "⌉"}


def _unclosed_bracket(text: str, offset: int) -> int | None:
    """Offset of the innermost bracket left open on the line that ends at `offset`, if any.

    >>> _unclosed_bracket('y ← f(x, "(" + [1', 17)
    15
    """
    start = text.rfind("\n", 0, offset) + 1
    stack: list[int] = []
    in_string = False
    for i in range(start, min(offset, len(text))):
        ch = text[i]
        if ch == '"':
            in_string = not in_string
        elif in_string:
            continue
        elif ch in _CLOSERS:
            stack.append(i)
        elif stack and ch == _CLOSERS[text[stack[-1]]]:
            stack.pop()
    return stack[-1] if stack else None


_LOOKALIKES = {
    "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "х": "x", "у": "y", "Α": "A", "Ε": "E",
    "−": "-", "–": "-", "—": "-", "’": "'", "“": '"', "”": '"', "：": ":", "，": ",", "∗": "·",
    "⋅": "·", "→": "←", "⇐": "←", "ϵ": "ε",
}  # fmt: skip


def _lookalike_hint(ch: str) -> str:
    if ch == "\ufeff":
        return "a byte-order mark: save the card as UTF-8 without BOM"
    if ch in _LOOKALIKES:
        return f"this looks like {_LOOKALIKES[ch]!r} but is a different character; retype it"
    if ch and unicodedata.category(ch) in ("Cf", "Cc", "Zs"):
        return "an invisible or control character; delete it"
    if ch and unicodedata.category(ch).startswith("L"):
        return "names use Latin or Greek letters (ASCII spellings: alpha, gamma, ell, …)"
    return "see docs/card-language.md for the tokens a card may use"
