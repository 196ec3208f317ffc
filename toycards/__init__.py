"""toycards: neural-network architectures as readable, checkable, runnable algorithm cards.

Public API (everything else is private by convention):

    card  = toycards.parse(text_or_path)                      # Card IR; str(card) is canonical text
    diags = toycards.check(card)                              # list of Diagnostic
    card  = toycards.describe("model.gguf")                  # bound card for that file
    src   = toycards.generate_source(card, target="torch")   # or "numpy"
    model = toycards.load("model.gguf", target="numpy")      # or "torch", "reference"; or a card
                                                             # torch: device="cuda" runs there
    tok   = toycards.load_tokenizer("vocab.gguf")
    path  = toycards.save(model, "out.gguf")                 # a GGUF file that embeds the card

Each public name is a function defined here, and no sub-package bears its name, so importing any
submodule can never replace it. The functions import their stage on first call, which keeps
`import toycards` cheap for command-line use.

The package follows the pipeline, one sub-package per stage (dependencies point up this list):

    errors.py, cache.py, version.py   diagnostics and the one exception type; the on-disk
                          cache; the version
    lang/        the card language: IR, names, grammar, parser, canonical printer, builtins,
                          the reference interpreter (the language's executable meaning)
    library/     the shipped cards, the architecture table, parsed cards cached on disk
    checker/     names, signatures, symbolic shapes and bindings of a card
    codegen/     IR → readable torch / NumPy module source (emitter + jinja2 template)
    gguf/        GGUF files: header validation, reader, ggml facts, dequantisation, metadata
    tokenizer/   byte-level BPE, SentencePiece, special tokens, chat templates
    runtime/     what generated modules run on: the KV cache (context.py), sampling, the model
                          base, and per target (numpy/, torch/) the ops and model class
    engine/      the kernels behind the runtime, used only through engine/__init__.py: weights
                          kept in their GGUF blocks, the C kernels and their build, packing,
                          the torch target's C++ glue and replayed steps (reads runtime's
                          context.py, nothing else of the runtime)
    models/      a card bound to a file: binding, loading (kernels put in place of prelude
                          algorithms: kernel_table.py), evaluation, training, saving
    inspect/     describe (header, inventory, formats), diff, discover (list)
    render/      Markdown, LaTeX, HTML, JSON and terminal views of a card
    serve/       an OpenAI-compatible HTTP server for one model (the `serve` extra)
    cli/         the click group and error policy, one module per family of commands
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toycards.errors import Diagnostic, ToycardsError
from toycards.version import __version__

if TYPE_CHECKING:
    from pathlib import Path

    from toycards.inspect.describe import DescribedCard
    from toycards.lang.ir import Card
    from toycards.runtime.model_base import ModelAPI
    from toycards.tokenizer.tokenizer import Tokenizer

__all__ = [
    "__version__",
    "Diagnostic",
    "ToycardsError",
    "check",
    "describe",
    "generate_source",
    "load",
    "load_tokenizer",
    "parse",
    "save",
]


def parse(text_or_path: str | Path, file: str | None = None) -> Card:
    """Parse card text, or the card file at a path, into its IR (`str(card)` is canonical text)."""
    from toycards.lang.parse import parse as _parse

    return _parse(text_or_path, file=file)


def check(card: Card) -> list[Diagnostic]:
    """Every diagnostic for a card: names, calls, shapes and bindings (empty when it checks clean)."""
    from toycards.checker import check as _check

    return _check(card)


def describe(path: str | Path, card: str | Path | None = None) -> DescribedCard:
    """The card of a GGUF file bound to its concrete hyperparameters, every tensor checked: a
    Card that also carries `.problems` (every mismatch), `.header` (the file's summary),
    `.origin` (given, embedded, user, library or declaration-only) and `.card_path`. `card`: a
    card file to bind instead of the file's own (embedded, else TOYCARDS_CARDS, else library)."""
    from toycards.inspect.describe import describe as _describe

    return _describe(path, card)


def generate_source(card: Card | str, target: str = "torch") -> str:
    """Python source of a readable module for the card: target "torch" or "numpy"."""
    from toycards.codegen import generate_source as _generate_source

    return _generate_source(card, target=target)


def load(
    source: Card | str | Path,
    weights: str | Path | None = None,
    target: str = "numpy",
    seed: int = 0,
    dequantize: bool = False,
    device: str | None = None,
) -> ModelAPI:
    """A runnable model: a GGUF file, or a card (object, text or path) with a GGUF's weights,
    or with random weights drawn from `seed` when no file is given. `target`: "numpy", "torch",
    or "reference" (the reference interpreter running the card: slow, float64, the definition).
    Quantized matrices stay in their GGUF blocks and F32 tensors memory-mapped;
    `dequantize=True` makes float32 copies of every weight instead (what training needs).
    `device` (torch target): "cuda", "cuda:1", "mps" …, every weight float32 there."""
    from toycards.models.load import load as _load

    return _load(source, weights=weights, target=target, seed=seed, dequantize=dequantize, device=device)


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer described by a GGUF file's metadata (vocabulary-only files included)."""
    from toycards.tokenizer.tokenizer import load_tokenizer as _load_tokenizer

    return _load_tokenizer(path)


def save(
    model: ModelAPI,
    path: str | Path,
    tokenizer: str | Path | None = None,
    arch: str | None = None,
    name: str | None = None,
    force: bool = False,
) -> Path:
    """Write a model from `load` (or `toycards train`) to a GGUF file in llama.cpp's conventions:
    its tensors under the names the card binds, its hyperparameters under the card's metadata
    keys, the tokenizer's keys (from `tokenizer`, a GGUF file; default: the model's own file),
    and the card with its values embedded under `toycards.card`. Written atomically; an existing
    `path` is refused unless `force=True`, and the model's own file always."""
    from toycards.models.save import save as _save

    return _save(model, path, tokenizer=tokenizer, arch=arch, name=name, force=force)


def _bind_generated(model_class: type, path: str | Path, dequantize: bool = False, device: str | None = None):
    """A generated module's `Model.from_gguf` (runtime/binder.py): its class with the file's weights,
    bound through the module's own card (`CARD`) for its target, as `load` binds a card."""
    from toycards.models.load import load as _load

    card = getattr(model_class, "CARD", None)
    if not model_class.TARGET or not isinstance(card, str):
        raise ToycardsError(
            f"{model_class.__name__}.from_gguf: only the Model class of a generated module has a card to bind"
        )
    return _load(
        card,
        weights=path,
        target=model_class.TARGET,
        dequantize=dequantize,
        device=device,
        model_class=model_class,
    )


def _plug_in() -> None:
    from toycards.runtime import binder

    binder.set_binder(_bind_generated)


_plug_in()
