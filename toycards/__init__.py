"""toycards: neural-network architectures as readable, checkable, runnable algorithm cards.

Public API (everything else is private by convention):

    card  = toycards.parse(text_or_path)                      # Card IR; str(card) is canonical text
    diags = toycards.check(card)                              # list of Diagnostic
    card  = toycards.describe("model.gguf")                  # bound card for that file
    src   = toycards.generate_source(card, target="torch")   # or "numpy"
    model = toycards.load("model.gguf", target="numpy")      # or a card (+ weights="model.gguf")
    tok   = toycards.load_tokenizer("vocab.gguf")

Imports are lazy so that `import toycards` stays cheap for command-line use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toycards.errors import Diagnostic, ToycardsError

__version__ = "0.1.0"
__all__ = [
    "Diagnostic",
    "ToycardsError",
    "check",
    "describe",
    "generate_source",
    "load",
    "load_tokenizer",
    "parse",
]

_LAZY = {
    "parse": ("toycards.parse", "parse"),
    "check": ("toycards.check", "check"),
    "describe": ("toycards.describe", "describe"),
    "generate_source": ("toycards.codegen", "generate_source"),
    "load": ("toycards.loader", "load"),
    "load_tokenizer": ("toycards.runtime.tokenizer", "load_tokenizer"),
}

if TYPE_CHECKING:
    from toycards.check import check
    from toycards.codegen import generate_source
    from toycards.describe import describe
    from toycards.loader import load
    from toycards.parse import parse
    from toycards.runtime.tokenizer import load_tokenizer


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'toycards' has no attribute {name!r}")
