"""Tests run again in a child process whose C kernels are built for another CPU (`-march`): what
a machine without AVX-512, or without F16C and AVX, runs; tests/engine/test_quant_kernels.py and
tests/engine/test_kernels_numpy.py hold those builds to the same tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_rebuilt(test_file: str, march: str, cache: Path, select: str) -> str:
    """Run the tests of `test_file` that `select` (pytest's -k) picks with the kernels built for
    `march` into the cache folder `cache`; one "." per test passed, "s" per test skipped (asserted
    to have exited 0), over all its progress lines."""
    here = Path(test_file).resolve()
    env = {**os.environ, "TOYCARDS_QUANT_MARCH": march, "TOYCARDS_CACHE": str(cache)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", str(here), "-k", select],
        capture_output=True, text=True, env=env, cwd=here.parents[1],
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    marks = []  # pytest's progress lines (72 marks each, then "[ nn%]"), up to its summary
    for line in done.stdout.splitlines():
        head = line.split("[")[0].strip()
        if not head or not set(head) <= set(".s"):
            break
        marks.append(head)
    return "".join(marks)
