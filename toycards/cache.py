"""A small on-disk cache for data toycards derives from files that rarely change.

Owns: where cached files live (`$TOYCARDS_CACHE`, else `$XDG_CACHE_HOME/toycards`, else
`~/.cache/toycards`; `TOYCARDS_CACHE=off` turns the cache off), and reading and writing
them. Callers name an entry and give a key that changes whenever its inputs change
(library cards: the card text, grammar and version; ggml facts: the installed `gguf`
package), so a stale entry is never found, only left behind.
Leaves out: what is cached (library/: parsed cards; models/load.py: generated modules;
gguf/facts.py).

Everything here is best effort: a cache that cannot be read or written costs the next
process the work it would have saved, never an error.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path


def cache_key(*parts: str) -> str:
    """A short key for some texts: a SHA-256 prefix, so that no card can be written to find the
    entry of another (a checksum can be steered to collide)."""
    data = "\0".join(parts).encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()[:32]


def cache_file(name: str, key: str) -> Path | None:
    """Where entry `name` with `key` lives, or None when the cache is off."""
    root = os.environ.get("TOYCARDS_CACHE")
    if root == "off":
        return None
    base = (
        Path(root) if root else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "toycards"
    )
    return base / f"{name}-{key}.pickle"


def load(path: Path | None) -> object | None:
    """The object pickled at `path`, or None when there is none or it cannot be read."""
    if path is None:
        return None
    try:
        with open(path, "rb") as fh:
            return pickle.load(fh)  # noqa: S301 - our own cache, in the user's own folder
    except (
        OSError,
        pickle.UnpicklingError,
        EOFError,
        AttributeError,
        ImportError,
        IndexError,
        TypeError,
        ValueError,
    ):
        return None


def store(path: Path | None, obj: object) -> None:
    """Pickle `obj` to `path` atomically; a cache that cannot be written is skipped."""
    if path is None:
        return
    from toycards.errors import ToycardsError
    from toycards.fileio import write_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(path, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
    except (OSError, ToycardsError):
        pass
