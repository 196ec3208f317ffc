"""Options that several commands share: `--card FILE`, and `--target` and `--device` for running a model.

Owns: the `--card` option (`describe`, `gen`, `run`, `eval`: bind this card to the GGUF file
instead of the file's own) and its check that the path names a file, before anything is read.
Leaves out: which card a file gets without `--card` (library.card_for_file).
"""

from __future__ import annotations

from pathlib import Path

import click

from toycards.errors import ToycardsError

card_option = click.option(
    "--card",
    "card",
    type=click.Path(),
    default=None,
    metavar="FILE",
    help="Bind this card to the GGUF file instead of its own (embedded, TOYCARDS_CARDS or library).",
)

run_target_option = click.option(  # run and eval (gen has no reference target: no code is generated)
    "--target",
    type=click.Choice(["numpy", "torch", "reference"]),
    default="numpy",
    show_default=True,
    help="reference: the interpreter running the card itself (slow; the definition).",
)


device_option = click.option(  # run and eval
    "--device",
    default=None,
    metavar="DEVICE",
    help="torch target: run there (cuda, cuda:1, mps …), every weight as float32 (no block kernels).",
)


def given_card(path: str | None) -> str | None:
    """`path` when it names a file; a one-line error when it does not exist or is a folder."""
    if path is None:
        return None
    p = Path(path)
    if not p.exists():
        raise ToycardsError(f"--card {path}: no such file")
    if not p.is_file():
        raise ToycardsError(f"--card {path}: is a directory, not a card file")
    return path
