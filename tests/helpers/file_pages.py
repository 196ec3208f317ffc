"""Where a file's pages are, for the tests of memory-mapped weights: this process's mappings of it
(`file_ranges`, /proc/self/maps), how much of those is resident (`mapped_kib`, /proc/self/smaps),
and how much of the file the OS holds in its page cache (`cached_fraction`, mincore). Linux only."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os

import numpy as np


def file_ranges(path) -> list[tuple[int, int]]:
    """The address ranges of this process's mappings of the file at `path` (/proc/self/maps)."""
    ranges = []
    with open("/proc/self/maps", encoding="utf-8") as fh:
        for line in fh:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].strip() == str(path):
                start, end = fields[0].split("-")
                ranges.append((int(start, 16), int(end, 16)))
    return ranges


def mapped_kib(path) -> int:
    """Resident KiB of this process's mappings of the file at `path` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps", encoding="utf-8") as fh:
        for line in fh:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and fields[0][0] in "0123456789abcdef":
                inside = len(fields) >= 6 and fields[-1] == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1])
    return total


def cached_fraction(path) -> float:
    """The fraction of the file's pages in the OS's page cache (mincore on a mapping of it)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    size = os.stat(path).st_size
    pages = -(-size // mmap.PAGESIZE)
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        view = np.frombuffer(mapped, dtype=np.uint8)
        vec = (ctypes.c_ubyte * pages)()
        code = libc.mincore(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(size), vec)
        del view
    assert code == 0, os.strerror(ctypes.get_errno())
    return sum(v & 1 for v in vec) / pages
