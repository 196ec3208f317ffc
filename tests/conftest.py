"""Shared pytest fixtures.

`oracle_files`: tiny Hugging Face models written to GGUF the llama.cpp way (`tests/oracle`),
built once per session; `oracle_files("llama", "Q8_0")` → `OracleFile` with `.path`,
`.expected_logits(ids)`, `.model`, `.config`. torch and transformers are imported only when a test
asks for it.

The suite multiplies prefill products in float32 (`TOYCARDS_PREFILL=float32`, also for the
subprocesses it starts), so that the oracle tests compare the card's exact arithmetic with
transformers to 1e-4; tests/engine/test_quant_kernels.py turns the shipped prefill (the int8 GEMM) back
on and holds it to its own references.

The tests live in one folder per package (tests/lang, tests/checker, tests/codegen, tests/engine,
…); what they share lives in tests/helpers and tests/oracle. Every test module imports a shared
module by its bare name (`from gguf_factory import …`, `from test_models_oracle import …`), so
each folder is put on `sys.path` here, before any test module is collected.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parent
sys.path[:0] = [str(d) for d in sorted(_TESTS.iterdir()) if d.name == "helpers" or any(d.glob("test_*.py"))]

os.environ["TOYCARDS_PREFILL"] = "float32"


@pytest.fixture(scope="session")
def oracle_files(tmp_path_factory):
    from oracle.cases import OracleFiles

    return OracleFiles(tmp_path_factory.mktemp("oracle"))
