"""What a benchmark that imports numpy, torch and the oracle must do before it imports them.

BLAS and OpenMP read their thread counts once, when numpy and torch are first imported; the
Hugging Face hub must not be reached (no network, no model downloads); the repository and its
tests/ (the oracle that builds transformers models and writes their GGUF files) and tests/helpers
(the real model's fetch, the tiny files) must be importable.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def prepare(threads: int | None) -> None:
    """Pin the BLAS/OpenMP threads (unless `threads` is None: a module imported, not run), keep
    the hub offline, and put the repository and tests/ first on sys.path."""
    if threads is not None:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "helpers")]
