"""Shared pytest fixtures.

`oracle_files`: tiny Hugging Face models written to GGUF the llama.cpp way (`tests/oracle`),
built once per session; `oracle_files("llama", "Q8_0")` → `OracleFile` with `.path`,
`.expected_logits(ids)`, `.model`, `.config`. torch and transformers are imported only when a test
asks for it.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def oracle_files(tmp_path_factory):
    from oracle.cases import OracleFiles

    return OracleFiles(tmp_path_factory.mktemp("oracle"))
