"""Reading a GGUF header stays light: no NumPy, `gguf`, lark or torch in a fresh process.

`toycards describe` and `toycards list` are the commands users run first, often in a fresh
shell; importing `gguf` (and NumPy with it) would cost more than the whole describe. The
tables they need from `gguf.constants` come from gguf/facts.py, which must agree
with the installed `gguf` package exactly: that package is the oracle here.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import gguf
import pytest

from toycards import cache
from toycards.gguf import facts as ggml_facts

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-llama.gguf"
HEAVY = ("numpy", "gguf", "lark", "jinja2", "torch", "rich")


def imported_modules(args: list[str], cache_dir: Path) -> tuple[set[str], str]:
    """Top-level modules a fresh `python -X importtime ARGS` imports, and its stdout."""
    env = {**os.environ, "TOYCARDS_CACHE": str(cache_dir), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    names = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return names, done.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["-m", "toycards", "describe", str(EXAMPLE), "--format", "json"],
        ["-m", "toycards", "describe", str(EXAMPLE), "--format", "card"],
        ["-m", "toycards", "list", "--dir", str(EXAMPLE.parent), "--no-caches", "--json"],
    ],
    ids=["describe-json", "describe-card", "list-json"],
)
def test_header_commands_import_nothing_heavy(args, tmp_path):
    first, out1 = imported_modules(args, tmp_path)  # fills the cache (parses the card, reads gguf)
    second, out2 = imported_modules(args, tmp_path)
    assert out1 == out2 and out1
    assert not second & set(HEAVY), sorted(second & set(HEAVY))


def test_numpy_target_runs_without_gguf_or_torch(tmp_path):
    """Loading a file on the NumPy target, its tokenizer included, and running it import neither
    `gguf` (its tables come from gguf/facts.py; ~7 MiB resident with yaml and sentencepiece) nor
    torch: the NumPy target's memory is the file's and NumPy's. The file's embedded card and its
    generated module come from the cache, so neither lark nor jinja2 either."""
    code = (
        "import numpy as np, toycards\n"
        f"m = toycards.load({str(EXAMPLE)!r}, target='numpy')\n"
        "ids = m.tokenizer.encode('hello world')\n"
        "print(int(m(np.array([ids]), m.new_cache(), last=True)[0, -1].argmax()) >= 0)\n"
    )
    imported_modules(["-c", code], tmp_path)  # fills the cache (the facts, the library cards)
    names, out = imported_modules(["-c", code], tmp_path)
    assert out.strip() == "True"
    # nor, once its module is in the cache, the code generator (jinja2) or the parser (lark)
    unwanted = names & {"gguf", "torch", "jinja2", "lark"}
    assert not unwanted, sorted(unwanted)


def test_generated_modules_are_cached_by_card_and_generator(tmp_path, monkeypatch):
    """`load`'s module source comes from the disk cache only for the same card IR, target and
    generator sources; each of those changed generates afresh (generate_source is the oracle)."""
    import dataclasses

    from toycards.codegen import generate_source
    from toycards.library import library_card
    from toycards.models import load as loading

    monkeypatch.setenv("TOYCARDS_CACHE", str(tmp_path))
    card = library_card("gpt2")
    first = loading.module_source(card, "numpy")
    assert first == generate_source(card, "numpy")
    assert len(list(tmp_path.glob("module-numpy-*.pickle"))) == 1
    calls = []
    real = generate_source

    def counted(c, target):
        calls.append(target)
        return real(c, target)

    monkeypatch.setattr("toycards.codegen.generate_source", counted)
    assert loading.module_source(card, "numpy") == first and calls == []  # a hit
    assert loading.module_source(card, "torch") == real(card, "torch") and calls == ["torch"]
    renamed = dataclasses.replace(
        card, algorithms=(*card.algorithms[:-1], dataclasses.replace(card.main, name="GPT2b"))
    )
    assert loading.module_source(renamed, "numpy") == real(renamed, "numpy") != first
    assert calls == ["torch", "numpy"]  # the card changed in code, not in its text: a new key
    copies = []
    for i, src in enumerate(loading.GENERATOR):
        copy = tmp_path / "gen" / f"{i}-{src.name}"
        copy.parent.mkdir(exist_ok=True)
        copy.write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
        copies.append(copy)
    monkeypatch.setattr(loading, "GENERATOR", tuple(copies))
    assert loading.module_source(card, "numpy") == first and calls == ["torch", "numpy"]  # same texts
    copies[0].write_text(copies[0].read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
    assert loading.module_source(card, "numpy") == first and calls == ["torch", "numpy", "numpy"]


def test_cache_off_still_works(tmp_path):
    args = ["-m", "toycards", "describe", str(EXAMPLE), "--format", "json"]
    off, out_off = imported_modules(args, tmp_path / "unused")
    env_off = {**os.environ, "TOYCARDS_CACHE": "off", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env_off, cwd=ROOT)
    assert done.returncode == 0 and done.stdout == out_off


def test_facts_match_the_gguf_package():
    assert ggml_facts.QUANT_SIZES == {int(t): tuple(s) for t, s in gguf.GGML_QUANT_SIZES.items()}
    assert ggml_facts.QUANT_NAMES == {int(t): t.name for t in gguf.GGMLQuantizationType}
    assert ggml_facts.VALUE_TYPE_NAMES == {int(t): t.name.lower() for t in gguf.GGUFValueType}
    assert all(getattr(ggml_facts.ValueType, t.name) == int(t) for t in gguf.GGUFValueType)
    assert ggml_facts.DEFAULT_ALIGNMENT == gguf.GGUF_DEFAULT_ALIGNMENT
    assert ggml_facts.FILE_TYPE_NAMES == {int(t): t.name for t in gguf.LlamaFileType}
    assert ggml_facts.ARCH_NAMES == {m.name: gguf.MODEL_ARCH_NAMES[m] for m in gguf.MODEL_ARCH}
    for group in ("General", "LLM", "Attention", "Rope", "Tokenizer", "Split"):
        theirs = {
            k: v for k, v in vars(getattr(gguf.Keys, group)).items() if isinstance(v, str) and k.isupper()
        }
        ours = getattr(ggml_facts.Keys, group)
        assert theirs and all(getattr(ours, k) == v for k, v in theirs.items())
    assert all(getattr(ggml_facts.TokenType, t.name) == int(t) for t in gguf.TokenType)
    assert ggml_facts.file_type_name(int(gguf.LlamaFileType.MOSTLY_Q4_K_M)) == "Q4_K_M"
    assert ggml_facts.file_type_name(10_000) is None


def test_facts_cache_is_keyed_by_the_gguf_package(tmp_path, monkeypatch):
    monkeypatch.setenv("TOYCARDS_CACHE", str(tmp_path))
    fresh = ggml_facts._load()
    files = list(tmp_path.glob("ggml-facts-*.pickle"))
    assert len(files) == 1 and cache.load(files[0]) == fresh
    # a damaged entry is read past and rewritten
    files[0].write_bytes(b"\x80\x05 not a pickle")
    assert ggml_facts._load() == fresh
    assert cache.load(files[0]) == fresh
    # an entry of another shape (an older toycards) is not trusted
    cache.store(files[0], {"quant_sizes": {}})
    assert ggml_facts._load() == fresh


def test_cache_store_never_leaves_partial_files(tmp_path):
    path = tmp_path / "sub" / "x-1.pickle"
    cache.store(path, {"a": 1})
    assert cache.load(path) == {"a": 1}
    with pytest.raises((pickle.PicklingError, AttributeError)):  # pickle refuses a lambda
        cache.store(path.with_name("y-1.pickle"), lambda: 0)
    assert sorted(p.name for p in path.parent.iterdir()) == ["x-1.pickle"]
