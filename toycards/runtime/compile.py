"""Compiling toycards' native code once per machine: the C kernels (quant_kernels.py) and the C++ glue
of the torch target (glue_cpp.py).

Owns: finding a compiler, naming the built file after everything that changes its bytes (the source,
the flags, the compiler's version and whatever the caller adds: the CPU, torch's version), building it
into the toycards cache under a lock (two processes, such as pytest's workers, build once between
them) and atomically (a reader never sees half a file), saying so on a terminal while it builds,
and keeping the compiler's last words.
Leaves out: loading what was built, and what to do without it (the callers fall back to slower code).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
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


HEADERS = ("structs.h",)  # what the sources beside them include (part of every build's name)


def shared_library(kind: str, cc: str, source: Path, attempts: list[list[str]], key: str, title: str) -> Path:
    """The shared library built from `source` by `cc` with the first of `attempts` (each a list of
    flags and libraries) that compiles, cached as `kind` under a name made from the source and the
    HEADERS beside it, the attempts, the compiler's version and `key`; BuildError when none compiles.
    While it compiles, a terminal's stderr says so, naming it as `title` (pipes and logs stay quiet)."""
    text = source.read_bytes() + b"".join(
        (source.parent / h).read_bytes() for h in HEADERS if (source.parent / h).exists()
    )
    digest = hashlib.sha256(text + repr(attempts).encode() + version(cc).encode() + key.encode()).hexdigest()
    where = cache.cache_file(kind, digest[:24])
    if where is None:  # cache off: a private folder for this process
        where = Path(tempfile.mkdtemp(prefix=f"toycards-{kind}-")) / "lib.pickle"
    target = where.with_suffix(".so")
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process building the same file: wait for it
        if target.exists():
            return target
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tell = bool(getattr(sys.stderr, "isatty", lambda: False)())  # None or a logger's stand-in: quiet
        if tell:
            print(
                f"toycards: building {title}, once for this machine ...", end="", file=sys.stderr, flush=True
            )
        for flags in attempts:
            done = subprocess.run([cc, str(source), "-o", str(tmp), *flags], capture_output=True, text=True)
            if done.returncode == 0:
                os.replace(tmp, target)
                if tell:
                    print(" done", file=sys.stderr, flush=True)
                return target
        tmp.unlink(missing_ok=True)
        if tell:
            print(" failed (the slower path runs instead)", file=sys.stderr, flush=True)
        raise BuildError(done.stderr[-2000:])
