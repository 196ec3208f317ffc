"""Writing the user's files safely: the whole new content or nothing, never a half-written file.

Owns: `write_atomic(path, data)`, used for every file toycards writes on a user's behalf
(formatted cards, generated modules, rendered documents) and for its own cache entries, and
`atomic_output(path)`, the same guarantee for a writer that wants a path of its own to write
(a GGUF file from gguf.GGUFWriter, a training checkpoint).
Leaves out: deciding whether a file may be written (the CLI refuses to overwrite an input).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from toycards.errors import ToycardsError


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Replace a file's contents all at once (`atomic_output`): text as UTF-8.

    >>> folder = Path(tempfile.mkdtemp())
    >>> write_atomic(folder / "card.card", "algorithm"); (folder / "card.card").read_text()
    'algorithm'
    """
    with atomic_output(path) as part:
        part.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """A temporary path in `path`'s folder to write; on success it replaces `path` all at once
    (os.replace, after an fsync), on any failure it is removed and `path` is untouched. A file that
    was there keeps its permission bits (a new one gets the umask's); a symbolic link keeps pointing
    at the (rewritten) target.

    >>> folder = Path(tempfile.mkdtemp())
    >>> with atomic_output(folder / "out.bin") as part:
    ...     _ = part.write_bytes(b"all or nothing")
    >>> (folder / "out.bin").read_bytes(), [p.name for p in folder.iterdir()]
    (b'all or nothing', ['out.bin'])
    """
    target = Path(os.path.realpath(path))
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as e:
        raise ToycardsError(f"{path}: cannot write: {e.strerror}") from None
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise ToycardsError(f"{path}: cannot write: {e.strerror}") from None
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
