"""Shared pytest fixtures.

`oracle_files`: tiny Hugging Face models written to GGUF the llama.cpp way (`tests/oracle`),
built once per session; `oracle_files("llama", "Q8_0")` → `OracleFile` with `.path`,
`.expected_logits(ids)`, `.model`, `.config`. torch and transformers are imported only when a test
asks for it.

The suite multiplies prefill products in float32 (`TOYCARDS_PREFILL=float32`, also for the
subprocesses it starts), so that the oracle tests compare the card's exact arithmetic with
transformers to 1e-4; tests/test_quant_kernels.py turns the shipped prefill (the int8 GEMM) back
on and holds it to its own references.
"""

from __future__ import annotations

import os

import pytest

os.environ["TOYCARDS_PREFILL"] = "float32"


@pytest.fixture(scope="session")
def oracle_files(tmp_path_factory):
    from oracle.cases import OracleFiles

    return OracleFiles(tmp_path_factory.mktemp("oracle"))
