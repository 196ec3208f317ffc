"""What a command-line argument names: a model or a card, by path or by name.

Owns the one rule every command applies to its model and card arguments:

    1. an existing path is that file, always (a name never hides a file);
    2. a card name is `NAME.card` in the first folder of TOYCARDS_CARDS that has one, else the
       library's card NAME (`toycards cards` lists them);
    3. a model name is one that `toycards list` shows for a file of the model caches (Ollama
       `MODEL:TAG`, Hugging Face `ORG/REPO/FILE`, LM Studio `PUBLISHER/REPO/FILE`; found by
       inspect/discover.py, in the locations its variables choose);
    4. anything else is one line: no such file, where to see the names, and the close ones.

A model is a file that starts with the GGUF magic, whatever its name (Ollama's blobs have no
suffix); a file whose name ends in .gguf is taken for one too, so that a broken download says
what is wrong with it rather than failing to parse as a card.
`resolve_model` serves describe, run, eval, chat and serve; `resolve_card` check, render, fmt
and `--card`; `resolve_input` gen and diff, which take either.
Leaves out: reading what the files hold (lang/, gguf/), listing the names (`toycards list`,
`toycards cards`).
"""

from __future__ import annotations

import os
from pathlib import Path

from toycards.errors import ToycardsError


def is_model_file(path: str | Path) -> bool:
    """Whether a file is read as a GGUF model: it starts with the GGUF magic, or its name ends in .gguf."""
    from toycards.inspect.discover import has_gguf_magic

    return str(path).lower().endswith(".gguf") or has_gguf_magic(path)


def _exists(arg: str) -> bool:
    """Whether `arg` is an existing path; False also where the system refuses the name (too long)."""
    if not arg:
        raise ToycardsError("an empty argument names no file (give a path or a name)")
    return os.path.exists(arg)


def named_card(arg: str) -> Path | None:
    """The card file that the name `arg` stands for (rule 2), or None when `arg` is an existing
    path or no card's name."""
    from toycards.library import CARDS, card_names, user_card_dirs, user_card_path

    if _exists(arg):
        return None
    user = user_card_path(arg, user_card_dirs())
    if user is not None:
        return user
    return CARDS / f"{arg}.card" if arg in card_names() else None


def _named_model(arg: str) -> tuple[Path | None, list[str]]:
    """The file of the model name `arg` (rule 3), else None and the names close to it."""
    from toycards.inspect.discover import find_gguf_files, find_named, near_names

    found = find_gguf_files(dirs=[])  # the caches alone: a folder's files are named by their paths
    match = find_named(arg, found)
    return (Path(match.path), []) if match is not None else (None, near_names(arg, found))


def _near_cards(arg: str) -> list[str]:
    import difflib

    from toycards.library import card_names

    return difflib.get_close_matches(arg, card_names(), n=3, cutoff=0.6)


def _suggest(close: list[str]) -> str:
    return f"; did you mean {', '.join(close)}?" if close else ""


def _not_a_folder(path: Path, label: str, what: str) -> Path:
    if path.is_dir():
        raise ToycardsError(f"{label}: is a directory, not {what}")
    return path


def resolve_model(arg: str) -> Path:
    """The GGUF file a model argument names: a path, else a name `toycards list` shows.

    A file that is not GGUF is the reader's one-line error (`not a GGUF file (magic …)`), before
    anything else reads it."""
    path = Path(arg)
    if _exists(arg):
        _not_a_folder(path, arg, "a GGUF file")
        if not is_model_file(path):
            from toycards.gguf.reader import open_gguf

            open_gguf(path).close()  # raises the reader's message: empty, too short, its magic
        return path
    found, close = _named_model(arg)
    if found is None:
        raise ToycardsError(
            f"{arg}: no such file, and no model of that name (`toycards list` shows the names){_suggest(close)}"
        )
    return found


def resolve_card(arg: str, option: str = "") -> Path:
    """The card file a card argument names: a path, else a card name; `option` (`--card`) heads
    the message of one that names neither."""
    label = f"{option} {arg}" if option else arg
    if _exists(arg):
        return _not_a_folder(Path(arg), label, "a card file")
    path = named_card(arg)
    if path is None:
        raise ToycardsError(
            f"{label}: no such file, and no card of that name (`toycards cards` lists them)"
            f"{_suggest(_near_cards(arg))}"
        )
    return path


def resolve_input(arg: str) -> Path:
    """What gen and diff read: a path (a card, or a model: `is_model_file`), else a card name,
    else a model name."""
    if _exists(arg):
        return _not_a_folder(Path(arg), arg, "a card or a GGUF file")
    card = named_card(arg)
    if card is not None:
        return card
    found, close = _named_model(arg)
    if found is None:
        raise ToycardsError(
            f"{arg}: no such file, and no card or model of that name (`toycards cards` and"
            f" `toycards list` show them){_suggest(_near_cards(arg) + close)}"
        )
    return found
