"""A model's GGUF file as the process maps it: read ahead into the page cache, watched for changes,
and the background threads that work on it.

Owns: `read_ahead` (the file into the OS's page cache as a model loads), `Background` and
`stopped_on_failure` (threads that stop when told, and those a failed load started, stopped and
joined), `file_view` (whether an array is a read-only view of a file's mapping) and `FileWatch`
(a model's file as it was when opened, and whether it has changed since), with `unchanged`, the
check a packing step makes before it reads a mapping.
Leaves out: what is packed and when (engine/packing.py), reading the file's header (gguf/reader.py).

A file changed under a loaded model: the weights read the file's pages through a memory mapping,
and a read past the end of a file truncated since then kills the process (SIGBUS), in a C kernel or
in NumPy alike. So the file's identity (device, inode, size, modification time in nanoseconds) is
recorded when it is opened (gguf/reader.py maps only a file that still has it), and compared with
the file as it is now (an open descriptor of the same inode: `FileWatch`) before each step that
reads the mapping here (a packing step of up to AHEAD_STEP_BYTES of weights) and before each
forward pass of the model. Once it differs, nothing packs from that file any more, and the model's
every later use raises one ToycardsError ("FILE: changed on disk while loaded; load it again").
What cannot be detected: a rewrite in place that keeps the size and the modification time (one
within the file system's timestamp granularity, or one that sets the time back), which the model
then reads as it finds it; and a truncation between a check and the reads after it (during one
packing step or one forward pass), which still ends the process. A file replaced by another (a new
file renamed over it, as downloads and atomic writers do) is not a change: the model keeps reading
the old inode, which stays whole while it is mapped.
"""

from __future__ import annotations

import atexit
import contextlib
import mmap
import os
import sys
import threading
import weakref

import numpy as np

from toycards.engine.ckernels import library
from toycards.errors import ToycardsError

READ_AHEAD_CHUNK = 128 << 10  # bytes a read-ahead request asks for (at most Linux's usual readahead)
READ_AHEAD_WINDOW = 64 << 20  # bytes of requests a read-ahead thread makes between looks at its stop flag


def read_ahead(path) -> threading.Thread | None:
    """Have the OS read the file at `path` (a model's, in file order: the vocabulary comes first) into
    its page cache, on a thread of its own (the requests block while the OS queues them), so that a
    file not cached yet comes in large reads while the loader goes on, rather than a page fault at a
    time in the first pass; nothing is mapped into the process (its memory does not grow), as
    llama.cpp's loader asks of its mapping. READ_AHEAD_CHUNK bytes a request (tc_read_ahead), one C
    call for each READ_AHEAD_WINDOW bytes, between which the thread stops where it was told to
    (`Background.stop`: a load that failed). Not where the weights would take more than half of the
    memory the system has available (they would push out what the pass needs), nor without the C
    kernels.

    The trade, for a file out of the page cache: the load itself takes longer (its own page faults
    queue behind the reads), and the first pass finds its pages read, so the first token comes
    sooner; a file cached already costs the requests alone. The requests are C calls because from
    a Python thread the interpreter's lock would hold them up behind the loader, which holds it
    while it runs Python, and little would be read by the load's end. `bench/vs_llama_cpp.py
    --shape llama-1b` prints the load time and the first token's wait."""
    lib = library()
    if lib is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # the loader says what is wrong with the file
        return None
    length = os.fstat(fd).st_size
    if length <= 0 or 2 * length > _available_memory():
        os.close(fd)
        return None

    def run(halt: threading.Event) -> None:
        try:
            for at in range(0, length, READ_AHEAD_WINDOW):
                if halt.is_set() or lib.tc_read_ahead(
                    fd, at, min(READ_AHEAD_WINDOW, length - at), READ_AHEAD_CHUNK
                ):
                    return
        finally:
            os.close(fd)

    thread = started(Background("toycards-read-ahead", run))
    if thread is None:
        os.close(fd)
    return thread


class Background(threading.Thread):
    """A daemon thread running `work(halt)`, which returns soon after `stop()` sets `halt`. Those still
    running when the interpreter exits are stopped and joined first (`_stop_running`): a daemon
    thread left inside a C call (a packing step, whose OpenMP threads the process is tearing down)
    can abort the exit of a script that loads a model and ends at once."""

    def __init__(self, name: str, work) -> None:
        super().__init__(name=name, daemon=True)
        self._work, self._halt = work, threading.Event()
        _running.add(self)

    def run(self) -> None:
        with contextlib.suppress(Exception):  # work done ahead of need: what fails is done when needed
            self._work(self._halt)

    def stop(self) -> None:
        self._halt.set()


_running: weakref.WeakSet = weakref.WeakSet()  # Background threads made (a finished one goes when dropped)


@atexit.register
def _stop_running() -> None:
    """At exit, before the interpreter finalizes: every Background thread told to stop and joined
    (each returns after its current step: a bounded C call)."""
    threads = [t for t in list(_running) if t.is_alive()]
    for thread in threads:
        thread.stop()
    for thread in threads:
        thread.join()


_scope = threading.local()  # the threads started under this thread's `stopped_on_failure`


@contextlib.contextmanager
def stopped_on_failure():
    """Every thread `pack_ahead` and `read_ahead` start in the block (on this thread), stopped and
    joined where the block raises: a load that fails leaves no thread reading its file.

    >>> with contextlib.suppress(ValueError), stopped_on_failure():
    ...     thread = started(Background("waits", lambda halt: halt.wait()))
    ...     raise ValueError
    >>> thread.is_alive()
    False
    """
    outer = getattr(_scope, "threads", None)
    _scope.threads = started = []
    try:
        yield
    except BaseException:
        for thread in started:
            thread.stop()
        for thread in started:
            thread.join()
        raise
    finally:
        _scope.threads = outer
        if outer is not None:
            outer.extend(started)


def started(thread: Background) -> Background | None:
    """`thread` started, or None where the system would start no more threads (the work it was to
    do ahead is then done when it is needed, or not at all)."""
    try:
        thread.start()
    except RuntimeError:  # can't start new thread
        return None
    if (started := getattr(_scope, "threads", None)) is not None:
        started.append(thread)
    return thread


def _available_memory() -> int:
    """Bytes of memory the system says are available (Linux's MemAvailable), or 0 where it says not."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            return next((int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:")), 0)
    except (OSError, ValueError):
        return 0


def file_view(blocks: np.ndarray) -> bool:
    """Whether `blocks` are a read-only view of a file's mapping, whose pages may be dropped from
    this process (read again, they map again from the file: nothing is lost); memory of any other
    kind may not (MADV_DONTNEED would zero writable private pages)."""
    if not sys.platform.startswith("linux") or blocks.flags.writeable or not hasattr(mmap, "MADV_DONTNEED"):
        return False
    base = blocks
    while base is not None:  # the ndarray over the whole file, then its mmap
        nxt = getattr(base, "base", None)
        if isinstance(nxt, mmap.mmap):
            return isinstance(base, np.ndarray)
        base = nxt
    return False


class FileWatch:
    """A file as it was when opened, to tell whether it has changed since (module docstring): its
    `identity` (st_dev, st_ino, st_size, st_mtime_ns, as gguf/reader.py records it) and an open
    descriptor of it, which keeps naming the same inode whatever is renamed over its path. Once
    `changed()`, always. `watch(mappings)`: the memory maps of the file whose views are checked
    before a packing step reads them.

    >>> import tempfile; path = tempfile.mkdtemp() + "/m.gguf"; _ = open(path, "wb").write(b"GGUF")
    >>> st = os.stat(path); watch = FileWatch(path, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    >>> watch.changed(), os.truncate(path, 2), watch.changed()
    (False, None, True)
    """

    def __init__(self, path: str, identity: tuple[int, int, int, int]) -> None:
        self.path, self.identity = str(path), tuple(identity)
        self._changed = False
        try:
            self._file = open(path, "rb", buffering=0)  # noqa: SIM115 - open while the model lives
        except OSError:  # gone already
            self._file, self._changed = None, True
            return
        weakref.finalize(self, self._file.close)
        self.changed()

    def changed(self) -> bool:
        if not self._changed:
            try:
                st = os.fstat(self._file.fileno())
                self._changed = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != self.identity
            except OSError:
                self._changed = True
        return self._changed

    def check(self) -> None:
        """A ToycardsError naming the file where it has changed."""
        if self.changed():
            raise ToycardsError(f"{self.path}: changed on disk while loaded; load it again")

    def watch(self, mappings) -> FileWatch:
        for m in mappings:
            _WATCHES[m] = self
        return self

    def __copy__(self) -> FileWatch:  # one watch a file: a copied model watches the same pages
        return self

    def __deepcopy__(self, memo) -> FileWatch:
        return self


_WATCHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # mmap.mmap → its file's FileWatch


def unchanged(arrays) -> None:
    """A ToycardsError (`FileWatch.check`) where one of `arrays` is a view of a file that has changed."""
    for array in arrays:
        base = array
        while base is not None and not isinstance(base, mmap.mmap):
            base = getattr(base, "base", None)
        if base is not None and (watch := _WATCHES.get(base)) is not None:
            watch.check()
