"""Compiling toycards' native code once per machine: the C kernels (engine/ckernels.py) and the C++ glue
of the torch target (engine/torch/native.py).

Owns: finding a compiler, naming the built file after everything that changes its bytes (the sources
and every file they include with `#include "…"`, the flags, the compiler's version and whatever the
caller adds: the CPU, torch's version), building it
into the toycards cache under a lock (two processes, such as pytest's workers, build once between
them), and handing out only a library that is whole: each is built to a temporary name, checked (a
shared library's magic number), synced and renamed, and then a record beside it (`NAME.so.json`: its
size and SHA-256, written atomically after it) vouches for it. A cached library is handed out only
when its size and checksum match its record; anything else (truncated by a full disk or a crash,
another file in its place, no record) is said on stderr in one line and rebuilt, because loading a
damaged library can crash the process (dlopen of a truncated ELF file faults on its missing pages).
It also says on a terminal that a build runs, and, on any stderr, once a process, that a build or a
load failed and the slower path runs instead (`fallback`).
Leaves out: loading what was built, and what to do without it (the callers fall back to slower code).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from toycards import cache


def compiler(*names: str) -> str | None:
    """The first of `names` (None entries skipped) on PATH, as a full path."""
    for name in names:
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def version(cc: str) -> str:
    return subprocess.run([cc, "--version"], capture_output=True, text=True).stdout


class BuildError(Exception):
    """The compiler refused (its last words are the message)."""


INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)  # `#include "name"`
RECORD_VERSION = 1  # the record's layout: {"version": 1, "size": bytes, "sha256": hex digest}
# the first bytes of a shared library: ELF, then Mach-O 64-bit (either byte order) and universal
MAGIC = (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xfe\xed\xfa\xcf", b"\xca\xfe\xba\xbe")
_said: set[str] = set()  # the titles `fallback` has spoken of in this process


def shared_library(
    kind: str,
    cc: str,
    sources: Path | Sequence[Path],
    attempts: list[list[str]],
    key: str,
    title: str,
    rebuild: bool = False,
) -> Path:
    """The shared library built from `sources` (one file, or several compiled into one library) by
    `cc` with the first of `attempts` (each a list of flags and libraries) that compiles, cached as
    `kind` under a name made from the sources and the files they include (`inputs`), the attempts,
    the compiler's version and `key`; BuildError when none compiles.
    A cached file is returned only when it matches its record (`damage`), else it is built again;
    `rebuild`: build again even so (the caller could not load the one that matched).
    While it compiles, a terminal's stderr says so, naming it as `title` (pipes and logs stay quiet)."""
    sources = [sources] if isinstance(sources, Path) else list(sources)
    text = b""
    for path in inputs(sources):  # each with its name and size: text moved to another file is another build
        data = path.read_bytes()
        text += b"%s\0%d\0%s" % (path.name.encode(), len(data), data)
    digest = hashlib.sha256(text + repr(attempts).encode() + version(cc).encode() + key.encode()).hexdigest()
    where = cache.cache_file(kind, digest[:24])
    if where is None:  # cache off: a private folder for this process
        where = Path(tempfile.mkdtemp(prefix=f"toycards-{kind}-")) / "lib.pickle"
    target = where.with_suffix(".so")
    if not rebuild and damage(target) is None:
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        lock = open(target.with_suffix(".lock"), "w")  # noqa: SIM115 - held until the build is done
    except OSError:  # a cache folder that cannot be written: build for this process alone
        target = Path(tempfile.mkdtemp(prefix=f"toycards-{kind}-")) / target.name
        lock = open(target.with_suffix(".lock"), "w")  # noqa: SIM115
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process building the same file: wait for it
        why = "it verified but did not load" if rebuild else damage(target)
        if why is None:  # built by the process we waited for
            return target
        if why:
            _say(f"toycards: the cached library {target} is damaged ({why}); rebuilding {title}")
        return _build(cc, sources, attempts, target, title)


def inputs(sources: Sequence[Path]) -> list[Path]:
    """The `sources` and every file they include with `#include "…"` that is there beside the file
    naming it, followed from file to file, each once, in the order met: what a build's name is made
    from. A source that cannot be read raises OSError; an include that is not there is left to the
    compiler (a system header, or an error it will report)."""
    met: list[Path] = []
    todo = list(sources)
    while todo:
        path = todo.pop(0)
        if path in met:
            continue
        met.append(path)
        included = (path.parent / name.decode() for name in INCLUDE.findall(path.read_bytes()))
        todo += [p for p in included if p.is_file()]
    return met


def record_path(target: Path) -> Path:
    """Where the record of the library at `target` lives: `NAME.so.json` beside it."""
    return target.with_name(target.name + ".json")


def damage(target: Path) -> str | None:
    """None where the library at `target` matches its record (its size and SHA-256); "" where neither
    is there (never built); else what is wrong, in a few words.

    >>> damage(Path(tempfile.mkdtemp()) / "never-built.so")
    ''
    """
    try:
        record = json.loads(record_path(target).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "it has no record of its size and checksum" if target.exists() else ""
    except (OSError, UnicodeDecodeError, ValueError):
        return "its record is unreadable"
    if not isinstance(record, dict) or record.get("version") != RECORD_VERSION:
        return "its record is not one this toycards writes"
    try:
        with open(target, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size != record.get("size"):
                return f"{size} bytes where {record.get('size')} were recorded"
            if _sha256(fh) != record.get("sha256"):
                return "its SHA-256 is not the recorded one"
    except FileNotFoundError:
        return "the library is missing, its record is not"
    except OSError as e:
        return f"it cannot be read: {e.strerror or e}"
    return None


def _build(cc: str, sources: list[Path], attempts: list[list[str]], target: Path, title: str) -> Path:
    """Compile into a temporary file beside `target` with the first of `attempts` that compiles, check
    and sync it, rename it to `target`, then write its record (under the caller's lock)."""
    for stale in target.parent.glob(f"{target.stem}.*.tmp"):  # a killed build's: every builder holds the lock
        stale.unlink(missing_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tell = _terminal()
    if tell:
        print(f"toycards: building {title}, once for this machine ...", end="", file=sys.stderr, flush=True)
    words = ""
    for flags in attempts:
        command = [cc, *map(str, sources), "-o", str(tmp), *flags]
        done = subprocess.run(command, capture_output=True, text=True)
        words = done.stderr[-2000:] or f"{cc} exited with status {done.returncode} and said nothing"
        if done.returncode == 0:
            try:
                size, sha256 = _checked(tmp)
            except (OSError, BuildError) as e:
                words = str(e)
                break
            os.replace(tmp, target)
            _write_record(target, size, sha256)
            if tell:
                print(" done", file=sys.stderr, flush=True)
            return target
    tmp.unlink(missing_ok=True)
    if tell:
        _said.add(title)
        print(" failed (the slower path runs instead)", file=sys.stderr, flush=True)
    else:
        fallback(title, f"it did not build: {_last_line(words)}")
    raise BuildError(words)


def _checked(tmp: Path) -> tuple[int, str]:
    """The size and SHA-256 of the library the compiler wrote at `tmp`, synced to the disk; BuildError
    where it is not a shared library (a full disk can leave a short file behind a zero exit)."""
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
        size = os.fstat(fh.fileno()).st_size
        if fh.read(4) not in MAGIC:
            raise BuildError(f"the compiler wrote no shared library ({size} bytes, no ELF or Mach-O magic)")
        fh.seek(0)
        return size, _sha256(fh)


def _write_record(target: Path, size: int, sha256: str) -> None:
    """The record of the library at `target`, written atomically; one that cannot be written costs the
    next process a rebuild (it finds no record)."""
    from toycards.errors import ToycardsError
    from toycards.fileio import write_atomic

    text = json.dumps({"version": RECORD_VERSION, "size": size, "sha256": sha256})
    with contextlib.suppress(OSError, ToycardsError):
        write_atomic(record_path(target), text + "\n")


def _sha256(fh) -> str:
    """The SHA-256 of the rest of an open binary file, as hex."""
    h = hashlib.sha256()
    while chunk := fh.read(1 << 20):
        h.update(chunk)
    return h.hexdigest()


def fallback(title: str, why: str) -> None:
    """Say on stderr, once a process for each `title`, that it is not used and why (one line)."""
    if title not in _said:
        _said.add(title)
        _say(f"toycards: {title} cannot be used ({why}); the slower path runs instead")


def _last_line(words: str) -> str:
    """The compiler's last line that says something (its summary or its last error), shortened."""
    lines = [line.strip() for line in words.splitlines() if line.strip()]
    return (lines[-1] if lines else words)[:200]


def _terminal() -> bool:
    return bool(getattr(sys.stderr, "isatty", lambda: False)())  # None or a logger's stand-in: quiet


def _say(line: str) -> None:
    if sys.stderr is not None:  # pythonw, or a daemon that closed it
        print(line, file=sys.stderr, flush=True)
