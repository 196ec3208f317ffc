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


def pytest_collection_modifyitems(items):
    """Parametrised card (`name`) or oracle case (`case`, named after its card) × `target` tests of
    a known gap (tests/gaps.py) are strict expected failures: they still run, and pass only while
    the gap is open."""
    from gaps import gap

    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        card, target = params.get("name", params.get("case")), params.get("target")
        why = gap(card, target) if isinstance(card, str) and isinstance(target, str) else None
        if why:
            item.add_marker(pytest.mark.xfail(strict=True, reason=why))
