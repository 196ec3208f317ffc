"""The card language: IR, names, grammar, parser, canonical printer, builtins, and the reference
interpreter (interpret/), the language's executable meaning.

Importing any module of the language loads the canonical printer too, so that `str(card)` is
always the card's canonical text (the IR cannot import its printer without an import cycle).
"""

from toycards.lang import printer  # noqa: F401 - installs ir.CANONICAL_PRINTER
