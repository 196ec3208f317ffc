"""toycards: neural-network architectures as readable, checkable, runnable algorithm cards.

Public API (see DESIGN.md): parse, check, describe, generate_source, load, load_tokenizer.
"""

from toycards.errors import ToycardsError
from toycards.parse import parse

__all__ = ["ToycardsError", "parse"]
__version__ = "0.1.0"
