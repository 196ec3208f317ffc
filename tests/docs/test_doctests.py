"""Every docstring example in the package runs, and passes.

For each module that holds `>>>` examples, doctest must attempt exactly the examples that are
not marked `+SKIP` (so a module whose examples silently stopped being collected fails here) and
none may fail. The test oracles in tests/oracle/ are held to the same rule.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import toycards

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS


def _modules_with_examples() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(toycards.__path__, "toycards."):
        spec = importlib.util.find_spec(info.name)
        if spec and spec.origin and ">>>" in Path(spec.origin).read_text(encoding="utf-8"):
            names.append(info.name)
    oracle = sorted(p.stem for p in (ROOT / "tests" / "oracle").glob("*.py") if ">>>" in p.read_text())
    return names + [f"oracle.{m}" for m in oracle if m != "__init__"]


MODULES = _modules_with_examples()


def _expected(module) -> int:
    """Examples doctest should run: every one found, less those marked +SKIP."""
    finder = doctest.DocTestFinder()
    return sum(1 for test in finder.find(module) for ex in test.examples if not ex.options.get(doctest.SKIP))


def test_the_package_has_examples():
    assert len(MODULES) >= 15, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, monkeypatch):
    monkeypatch.chdir(ROOT)  # examples name repository files such as examples/tiny-llama.gguf
    if name in ("toycards.runtime.torch.ops", "toycards.runtime.torch.model", "toycards.models.train"):
        pytest.importorskip("torch")
    module = importlib.import_module(name)
    expected = _expected(module)
    result = doctest.testmod(module, optionflags=OPTIONS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} fail"
    assert result.attempted == expected, f"{name}: {result.attempted} examples ran, {expected} expected"
    if expected == 0:
        pytest.fail(f"{name} has `>>>` lines but no runnable example: mark fewer +SKIP or drop them")
