"""Where a training run starts: a SOURCE (a card, or a GGUF file to fine-tune) → model, card, tokenizer.

Owns: resolving SOURCE (a card file; the name of a TOYCARDS_CARDS or library card, `llama`; or
a `.gguf` file), checking the card, giving its hyperparameters their values (the card's own
`= value`s, then `--set NAME=VALUE`, with ASCII spellings such as `ell_max` or `epsilon`
accepted; `N_V` from the tokenizer when the card leaves it open), checking that the
tokenizer's vocabulary fits the card (at most N_V tokens), and building the torch model (random
weights drawn from the seed, or the GGUF file's weights). Every problem is one line, raised
before anything is written.
Leaves out: the training loop (train.py), writing files (save.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from toycards.errors import ToycardsError
from toycards.lang import ir
from toycards.models.save import card_with_values, default_arch, model_card

VOCAB = "N_V"  # the hyperparameter a card's vocabulary size goes by, filled from the tokenizer


@dataclass
class Start:
    """The model a run trains, the card (with a `= value` on each hyperparameter) it embeds,
    the tokenizer, the file whose `tokenizer.*` keys the output copies, and the architecture."""

    model: object  # a TorchModel
    card: ir.Card
    tokenizer: object
    tokenizer_path: str
    arch: str


def parse_sets(pairs: tuple[str, ...] | list[str]) -> dict[str, object]:
    """`("L=2", "epsilon=1e-5", "scaling=none")` → {"L": 2, "ε": 1e-05, "scaling": "none"}.

    >>> parse_sets(["L=2", "ell_max=64", "epsilon=1e-5"])
    {'L': 2, 'ℓ_max': 64, 'ε': 1e-05}
    """
    from toycards.lang.names import canonical_name

    out: dict[str, object] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name.strip() or not text.strip():
            raise ToycardsError(f"--set {pair}: expected NAME=VALUE, e.g. --set L=2")
        out[canonical_name(name.strip())] = _number(text.strip())
    return out


def _number(text: str) -> object:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _card_source(source: str) -> tuple[ir.Card, str]:
    """(card, architecture) for a card file or a card name (TOYCARDS_CARDS first, then the library)."""
    from toycards.library import (
        ARCH_CARDS,
        card_names,
        library_card,
        read_card_file,
        user_card_dirs,
        user_card_path,
    )

    path = Path(source)
    if path.is_file():
        card = read_card_file(path)
        return card, ARCH_CARDS.get(path.stem, "") or default_arch(card)
    if path.is_dir():
        raise ToycardsError(f"{source}: is a directory, not a card file")
    user = user_card_path(source, user_card_dirs())  # None for a name that is no file stem (a path)
    if user is not None:
        return read_card_file(user), source
    if source in card_names():
        card = library_card(source)
        arch = next((a for a, stem in ARCH_CARDS.items() if stem == source), "") or default_arch(card)
        return card, arch
    raise ToycardsError(
        f"{source}: no such card file, and no card of that name in TOYCARDS_CARDS or the library "
        f"({', '.join(card_names())})"
    )


def _checked(card: ir.Card, source: str) -> None:
    """The checker's first error as one line, with a count of the rest."""
    from toycards.checker import check

    errors = [d for d in check(card) if d.severity == "error"]
    if errors:
        more = f"; {len(errors) - 1} more" if len(errors) > 1 else ""
        raise ToycardsError(
            f"{errors[0].headline()}{more} (the card does not check: `toycards check {source}` shows why)"
        )


def _given_values(card: ir.Card, sets: dict[str, object], tokenizer) -> dict[str, object]:
    """`--set` values checked against the card's hyperparameters, and N_V from the tokenizer."""
    decls = {n: d for d in card.main.hyper_decls for n in d.names}
    for name in sets:
        if name not in decls:
            known = ", ".join(decls) or "none"
            raise ToycardsError(f"--set {name}: the card has no hyperparameter {name} (it has {known})")
        d = decls[name]
        if d.binding is not None and d.binding.kind == "derived":
            raise ToycardsError(f"--set {name}: {name} is derived (≔); set the values it is computed from")
    given = dict(sets)
    d = decls.get(VOCAB)
    if VOCAB not in given and d is not None and d.value is None and d.binding is None:
        given[VOCAB] = tokenizer.vocab_size
    return given


def _bound(card: ir.Card, given: dict[str, object], arch: str, source: str):
    from toycards.models.binding import bind_values

    bound = bind_values(card.main, given, arch)
    missing = [
        n
        for d in card.main.hyper_decls
        if not (isinstance(d.type, ir.TensorType) and d.type.dims)
        for n in d.names
        if n not in bound.hyper
    ]
    if missing:
        raise ToycardsError(
            f"{source}: no value for {', '.join(missing)}: give --set NAME=VALUE for each "
            "(or `= value` in the card)"
        )
    errors = [p for p in bound.problems if p.severity == "error"]
    if errors:
        raise ToycardsError(f"{source}: {errors[0].message}")
    return bound


def fits_vocabulary(hyper: dict[str, object], tokenizer, where: str) -> None:
    """A tokenizer fits a card when its token ids are all rows of the embedding (≤ N_V tokens)."""
    n_vocab = hyper.get(VOCAB)
    if isinstance(n_vocab, int) and tokenizer.vocab_size > n_vocab:
        raise ToycardsError(
            f"{where}: the vocabulary has {tokenizer.vocab_size} tokens but the card's N_V = {n_vocab}"
        )


def _tokenizer(path: str | None):
    from toycards.tokenizer.tokenizer import load_tokenizer

    if path is None:
        raise ToycardsError("training a card needs --tokenizer FILE.gguf (a GGUF file with a vocabulary)")
    if not Path(path).is_file():
        raise ToycardsError(f"--tokenizer {path}: no such file")
    if not str(path).endswith(".gguf"):
        raise ToycardsError(f"--tokenizer {path}: expected a .gguf file with a vocabulary")
    return load_tokenizer(path)


def start_from_card(source: str, sets: dict[str, object], tokenizer_path: str | None, seed: int) -> Start:
    """A card with random weights drawn from `seed`."""
    from toycards.models.load import load

    card, arch = _card_source(source)
    _checked(card, source)
    tokenizer = _tokenizer(tokenizer_path)
    given = _given_values(card, sets, tokenizer)
    bound = _bound(card, given, arch, source)
    fits_vocabulary(bound.hyper, tokenizer, f"--tokenizer {tokenizer_path}")
    valued = card_with_values(card, bound.hyper)
    model = load(valued, target="torch", seed=seed)
    model.tokenizer = tokenizer
    return Start(model, valued, tokenizer, str(tokenizer_path), arch)


def start_from_file(path: str) -> Start:
    """A GGUF file's weights, its card and its tokenizer."""
    from toycards.models.load import load

    if not Path(path).is_file():
        raise ToycardsError(f"{path}: no such file")
    model = load(path, target="torch", dequantize=True)  # float32 copies: quantized weights do not train
    if model.tokenizer is None:
        raise ToycardsError(
            f"{path}: the file carries no vocabulary (tokenizer.ggml.*), so no text to train on"
        )
    card = card_with_values(model_card(model), model.bound.hyper)
    _checked(card, path)
    return Start(model, card, model.tokenizer, os.fspath(path), model.bound.arch or default_arch(card))


def start(source: str, sets: dict[str, object], tokenizer_path: str | None, seed: int) -> Start:
    """The start of a run from SOURCE (see the module docstring)."""
    if source.endswith(".gguf"):
        if sets:
            raise ToycardsError("--set goes with a card; a GGUF file's hyperparameters come from the file")
        if tokenizer_path is not None:
            raise ToycardsError("--tokenizer goes with a card; a GGUF file brings its own vocabulary")
        return start_from_file(source)
    return start_from_card(source, sets, tokenizer_path, seed)
