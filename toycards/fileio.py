"""Writing the user's files safely: the whole new content or nothing, never a half-written file.

Owns: `write_atomic(path, data)`, used for every file toycards writes on a user's behalf
(formatted cards, generated modules, rendered documents) and for its own cache entries;
`atomic_output(path)`, the same guarantee for a writer that wants a path of its own to write
(a GGUF file from gguf.GGUFWriter, a training checkpoint); `rewrite_in_place(path, data)`, for a
file whose inode must stay (one with hard links); and the cleaning up of the temporary files
that a killed writer leaves behind. Every write error is one line naming the file.
Leaves out: deciding whether a file may be written (the CLI refuses to overwrite an input or a
read-only card; train refuses a checkpoint path that holds something else).

A temporary file is `.NAME.PID.XXXXXXXX.tmp` in NAME's folder: the writer's process id and 8 hex
digits. The writer holds an exclusive `flock` on it while it writes; the kernel drops the lock
when the process dies, however it dies. Before writing NAME, a writer removes the `.NAME.*.tmp`
files of that exact form, in that folder, owned by this user, whose process is gone and whose
lock is free: both tests, because a process id is reused (a live stranger keeps the file) and a
process in another PID namespace looks dead from here (its lock keeps the file).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from toycards.errors import ToycardsError

# Free space under this after an errno-less failed write (numpy's "N requested and M written"):
# call the disk full, since that is the likely cause and the exception does not say.
_LOW_SPACE = 1 << 20


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Replace a file's contents all at once (`atomic_output`): text as UTF-8.

    >>> import tempfile; folder = Path(tempfile.mkdtemp())
    >>> write_atomic(folder / "card.card", "algorithm"); (folder / "card.card").read_text()
    'algorithm'
    """
    with atomic_output(path) as part:
        part.write_bytes(_as_bytes(data))


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """A temporary path in `path`'s folder to write; on success it replaces `path` all at once
    (os.replace, after an fsync), on any failure it is removed and `path` is untouched. A file that
    was there keeps its permission bits (a new one gets the umask's); a symbolic link keeps pointing
    at the (rewritten) target. Stale temporary files of `path` are removed first (module docstring).

    >>> import tempfile; folder = Path(tempfile.mkdtemp())
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
    remove_stale_temporaries(target)
    lock, tmp = _new_temporary(target, path)
    try:
        yield tmp
        with open(tmp, "rb+") as f:  # the writer may have made a new file at `tmp`: sync that one
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as e:
        # the reason first: removing the temporary file frees the space a full disk lacked
        error = (
            ToycardsError(f"{path}: cannot write: {_reason(e, target.parent)}")
            if isinstance(e, OSError)
            else None
        )
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if error is not None:
            raise error from None
        raise
    finally:
        os.close(lock)


def rewrite_in_place(path: str | Path, data: str | bytes) -> None:
    """Overwrite `path`'s own inode (text as UTF-8), so that all its hard links see the new
    content and its owner, mode and extended attributes stay: for a file that `atomic_output`
    would split from its other names.

    Crash safety: the old content is first written whole to `NAME~` (through a temporary file,
    fsynced, then hard-linked to that name, which refuses an existing `NAME~`: it is not ours to
    overwrite); then the file is written from its start, truncated and fsynced, and `NAME~` is
    removed. A process killed, or a machine that loses power, while the file is being written
    leaves `NAME~` with the old content beside it. When the write fails (a full disk), the old
    content is written back and `NAME~` removed; if even that fails, the error names `NAME~`.

    >>> import tempfile; folder = Path(tempfile.mkdtemp()); (folder / "a.card").write_text("old")
    3
    >>> os.link(folder / "a.card", folder / "b.card"); rewrite_in_place(folder / "a.card", "new")
    >>> (folder / "b.card").read_text(), sorted(p.name for p in folder.iterdir())
    ('new', ['a.card', 'b.card'])
    """
    target = Path(os.path.realpath(path))
    try:
        old = target.read_bytes()
        mode = stat.S_IMODE(target.stat().st_mode)
    except OSError as e:
        raise ToycardsError(f"{path}: cannot read: {_reason(e, target.parent)}") from None
    backup = _write_backup(target, old, mode, path)
    try:
        _write_over(target, _as_bytes(data))
    except BaseException as e:
        _restore(target, old, backup, path, e)
        raise
    os.unlink(backup)


def _write_backup(target: Path, old: bytes, mode: int, path: str | Path) -> Path:
    """`NAME~` holding `old` with the file's permission bits, written and fsynced under a
    temporary name, then linked to `NAME~` (unlike os.replace, never over an existing file)."""
    backup = target.with_name(target.name + "~")
    remove_stale_temporaries(backup)
    lock, tmp = _new_temporary(backup, path)
    try:
        _write_over(tmp, old)
        os.chmod(tmp, mode)
        os.link(tmp, backup)
    except FileExistsError:
        raise ToycardsError(
            f"{path}: has other hard links, and {backup} (where the old content is kept while the "
            "file is rewritten in place) already exists; move it away first"
        ) from None
    except OSError as e:
        raise ToycardsError(f"{backup}: cannot write: {_reason(e, target.parent)}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        os.close(lock)
    _fsync_folder(target.parent)
    return backup


def _write_over(file: Path, data: bytes) -> None:
    """`data` over `file` from its start (the same inode), cut there, fsynced."""
    with open(file, "r+b") as f:
        f.write(data)
        f.truncate()
        f.flush()
        os.fsync(f.fileno())


def _restore(target: Path, old: bytes, backup: Path, path: str | Path, e: BaseException) -> None:
    """After a failed in-place write (`e`): the old content back and `NAME~` removed, and an
    OSError as one line; when the old content cannot be written back, one line naming `NAME~`."""
    try:
        _write_over(target, old)
    except OSError:
        why = _reason(e, target.parent) if isinstance(e, OSError) else type(e).__name__
        raise ToycardsError(f"{path}: cannot write: {why}; its old content is in {backup}") from None
    os.unlink(backup)
    if isinstance(e, OSError):
        raise ToycardsError(f"{path}: cannot write: {_reason(e, target.parent)}") from None


_HEX = 8  # hex digits after the process id


def _temporary_pattern(name: str) -> re.Pattern[str]:
    """The temporary files this module makes for a target called `name`, and nothing else:
    `.name.PID.XXXXXXXX.tmp` (PID in decimal, 8 lower-case hex digits).

    >>> bool(_temporary_pattern("m.gguf").fullmatch(".m.gguf.4242.00c0ffee.tmp"))
    True
    >>> [bool(_temporary_pattern("m.gguf").fullmatch(n)) for n in (".m.gguf.x.00c0ffee.tmp",
    ...  ".m.gguf.4242.c0ffee.tmp", ".n.gguf.4242.00c0ffee.tmp", ".m.gguf.4242.00c0ffee.tmp~")]
    [False, False, False, False]
    """
    return re.compile(rf"\.{re.escape(name)}\.([1-9][0-9]*)\.[0-9a-f]{{{_HEX}}}\.tmp")


def _new_temporary(target: Path, path: str | Path) -> tuple[int, Path]:
    """(a descriptor holding the lock, the path) of a new, empty temporary file for `target`."""
    pid = os.getpid()
    for _ in range(100):
        tmp = target.with_name(f".{target.name}.{pid}.{secrets.token_hex(_HEX // 2)}.tmp")
        try:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
        except FileExistsError:
            continue
        except OSError as e:
            raise ToycardsError(f"{path}: cannot write: {_reason(e, target.parent)}") from None
        fcntl.flock(fd, fcntl.LOCK_EX)  # a new file: no one else holds it, this does not wait
        return fd, tmp
    raise ToycardsError(f"{path}: cannot write: no free temporary name in {target.parent}")


def remove_stale_temporaries(target: str | Path) -> list[Path]:
    """Remove the temporary files a killed writer of `target` left in its folder (module
    docstring: the exact name form, this user's, the process gone and the lock free); the removed.
    Best effort: a folder that cannot be listed, or a file that went away meanwhile, is skipped."""
    target = Path(target)
    pattern, removed = _temporary_pattern(target.name), []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None or _alive(int(match.group(1))):
            continue
        with contextlib.suppress(OSError):
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and not _locked(entry.path):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (a zombie not yet reaped counts, as does another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, under another user
        return True
    return True


def _locked(file: str) -> bool:
    """Whether some process holds the flock a writer takes on its temporary file."""
    fd = os.open(file, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _reason(e: OSError, folder: Path) -> str:
    """An OSError as the text after "cannot write: ": its message, the errno's text when it has
    no message, else what it says; an errno-less one on a nearly full disk says so.

    >>> _reason(OSError(errno.EIO, "Input/output error"), Path("/"))
    'Input/output error'
    """
    text = e.strerror or (os.strerror(e.errno) if e.errno else "") or str(e) or type(e).__name__
    if e.errno is None:
        with contextlib.suppress(OSError):
            fs = os.statvfs(folder)
            free = fs.f_bavail * fs.f_frsize
            if free < _LOW_SPACE:
                text += f" ({os.strerror(errno.ENOSPC)}: {free} bytes free)"
    return text


def _fsync_folder(folder: Path) -> None:
    """Make a new name in `folder` durable (not possible on every file system: then skipped)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _as_bytes(data: str | bytes) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
