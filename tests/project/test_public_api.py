"""The public API (DESIGN.md) is the documented function whatever was imported before.

The README's Python example runs in fresh interpreters: as is, after importing each stage's
module first (the order that once replaced `toycards.parse` with the submodule), and after
importing every module of the package.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ["parse", "check", "describe", "generate_source", "load", "load_tokenizer", "save"]

README_EXAMPLE = textwrap.dedent(
    """
    import toycards
    card = toycards.parse("toycards/library/cards/llama.card")
    assert toycards.check(card) == []
    src = toycards.generate_source(card, target="numpy")
    model = toycards.load("examples/tiny-llama.gguf", target="numpy")
    logits = model.logits([1, 2, 3])
    assert logits.shape[0] == 3
    text = "".join(model.generate("Hello", max_tokens=4))
    assert toycards.describe("examples/tiny-llama.gguf").main.name == "Llama"
    assert toycards.load_tokenizer("examples/tiny-llama.gguf").encode("Hello")
    print("ok")
    """
)

EVERY_MODULE = textwrap.dedent(
    """
    import importlib, pkgutil, toycards
    for info in pkgutil.walk_packages(toycards.__path__, "toycards."):
        if info.name.endswith(("ops_torch", "model_torch", "models.train", "__main__")):
            continue  # the torch target (and training) is optional; __main__ runs the command line
        importlib.import_module(info.name)
    """
)


def _run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TOYCARDS_CACHE": "off"}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)


@pytest.mark.parametrize(
    "before",
    [
        "",
        "import toycards.lang.parse",
        "import toycards.checker.names, toycards.inspect.describe, toycards.models.load",
        "from toycards.lang import parse as p; from toycards import checker",
        EVERY_MODULE,
    ],
    ids=["plain", "parser-first", "stages-first", "from-imports", "every-module"],
)
def test_the_readme_example_runs_in_any_import_order(before):
    out = _run(before + "\n" + README_EXAMPLE)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def test_every_public_name_stays_the_function_after_importing_everything():
    names = ", ".join(repr(n) for n in PUBLIC)
    code = EVERY_MODULE + textwrap.dedent(
        f"""
        import inspect
        for name in [{names}]:
            value = getattr(toycards, name)
            assert inspect.isfunction(value) and value.__module__ == "toycards", (name, value)
        print("ok")
        """
    )
    out = _run(code)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_no_sub_package_or_module_bears_a_public_name():
    import pkgutil

    import toycards

    top = {info.name for info in pkgutil.iter_modules(toycards.__path__)}
    assert not top & set(PUBLIC + ["save"]), top & set(PUBLIC)


@pytest.mark.parametrize("enabled", [True, False])
def test_load_leaves_the_cycle_collector_as_it_found_it(enabled):
    """`load` pauses Python's cycle collector while it builds the model (see models/load.py) and
    leaves it as it was: on or off, after a model and after a refused file alike."""
    import gc

    import toycards

    example = Path(__file__).resolve().parents[2] / "examples" / "tiny-llama.gguf"
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        assert toycards.load(example).tokenizer is not None
        assert gc.isenabled() is enabled
        with pytest.raises(toycards.ToycardsError):
            toycards.load(example, target="tensorflow")
        assert gc.isenabled() is enabled
        with pytest.raises(toycards.ToycardsError):
            toycards.load(Path(__file__))  # not a card
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
