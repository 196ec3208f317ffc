"""How a generated module's `Model.from_gguf` gets a GGUF file's weights, with the runtime
depending on nothing above it.

Owns: `set_binder(bind)`, which the package's public layer calls when `toycards` is imported (it
is, before any generated module: the module imports `toycards.runtime`), and `bind(model_class,
path, **options)`, which `ModelAPI.from_gguf` calls.
Leaves out: binding itself (models/load.py: the card's hyperparameters from the file's keys, its
tensors checked and read).
"""

from __future__ import annotations

from collections.abc import Callable

from toycards.errors import ToycardsError

_binder: Callable[..., object] | None = None


def set_binder(bind: Callable[..., object]) -> None:
    global _binder
    _binder = bind


def bind(model_class: type, path, **options: object) -> object:
    """`model_class` made with the weights of the GGUF file at `path` (set_binder's function)."""
    if _binder is None:
        raise ToycardsError("from_gguf needs the toycards package, which was not imported")
    return _binder(model_class, path, **options)
