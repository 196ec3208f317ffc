"""The native kernel cache hands out only whole libraries, and says so when it cannot.

A cached library is loaded only when it matches the record beside it (its size and SHA-256,
engine/build.py): loading a truncated one used to kill every model command (SIGBUS, exit 135),
a foreign one was an internal error (exit 3, an undefined symbol), and a short one fell back to the
slow path for good without a word. Here the C kernels are built once, in a private cache
(TOYCARDS_CACHE, a folder of this module), and each test damages a copy of that cache and runs a
child process on it: it must rebuild with one line on stderr, load the rebuilt kernels and compute
the logits of the path without any native code (TOYCARDS_QUANT_KERNELS=off, gguf.quants
dequantizing); a foreign library whose record does not vouch for it must never be loaded at all
(its constructor would leave a mark). A tiny C source stands in for the kernels where the cache's
own rules are tested, and a build or load that fails must say so once and run the slower path.
"""

from __future__ import annotations

import ctypes
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from toycards.engine import build
from toycards.engine import ckernels as quant_kernels

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-llama.gguf"  # F16 matrices: the kernels read them in place
CC = quant_kernels.compiler()
pytestmark = pytest.mark.skipif(
    CC is None or os.environ.get("TOYCARDS_QUANT_KERNELS", "").lower() == "off",
    reason="no C compiler (or TOYCARDS_QUANT_KERNELS=off): no kernels to cache",
)
IDS = [5, 300, 17, 1000, 42, 7, 99, 512, 3, 640, 77, 250]  # more than FEW_FLOAT_TOKENS: dequantized tiles
FEW = [5, 300, 17]  # the few-token products, in place
DAMAGED = re.compile(r"toycards: the cached library (\S+) is damaged \((.+)\); rebuilding the C kernels")
# a shared library that is not the kernels, and says when it is loaded: its constructor runs at dlopen
FOREIGN = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void loaded(void) {
    const char *mark = getenv("TOYCARDS_TEST_LOADED");
    FILE *f = mark ? fopen(mark, "w") : NULL;
    if (f) { fputs("loaded\n", f); fclose(f); }
}
int tc_something_else(void) { return 1; }
"""
LOGITS = f"""
import json, sys
import toycards
from toycards.engine import ckernels as quant_kernels
model = toycards.load(sys.argv[1], target=sys.argv[2])
lib = quant_kernels.library()
print(json.dumps({{"kernels": lib and lib._name, "logits": model.logits({IDS}).tolist(),
                  "few": model.logits({FEW}).tolist()}}))
"""


def child(code: str, cache: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`python -c code args…` with the cache folder `cache` (the C++ glue off unless `env` says)."""
    full = {
        **os.environ,
        "TOYCARDS_CACHE": str(cache),
        "PYTHONPATH": str(ROOT),
        "TOYCARDS_GLUE_CPP": "off",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=full, cwd=ROOT, timeout=600
    )


def logits_of(cache: Path, target: str = "numpy", **env: str) -> tuple[dict, list[str]]:
    """The example's logits in a child on `cache`, and the lines it wrote on stderr."""
    done = child(LOGITS, cache, str(EXAMPLE), target, **env)
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    return json.loads(done.stdout.splitlines()[-1]), done.stderr.splitlines()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A cache folder with the C kernels built in it, by a child process: once for the module."""
    cache = tmp_path_factory.mktemp("native-cache")
    done = child("from toycards import engine; assert engine.library() is not None", cache)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == ""  # a build on a pipe says nothing
    return cache


@pytest.fixture(scope="module")
def oracle(tmp_path_factory) -> dict:
    """The example's logits without any native code: gguf.quants dequantizes, NumPy multiplies."""
    out, said = logits_of(tmp_path_factory.mktemp("no-kernels"), TOYCARDS_QUANT_KERNELS="off")
    assert out["kernels"] is None and said == []
    return out


@pytest.fixture
def cache(built, tmp_path) -> Path:
    """A copy of the built cache, this test's to damage."""
    return Path(shutil.copytree(built, tmp_path / "cache"))


def kernels_in(cache: Path) -> Path:
    (so,) = cache.glob("quant-kernels-*.so")
    return so


@pytest.fixture(scope="module")
def foreign(tmp_path_factory) -> Path:
    """A foreign shared library (FOREIGN), built with the same compiler."""
    folder = tmp_path_factory.mktemp("foreign")
    (folder / "foreign.c").write_text(FOREIGN)
    lib = folder / "foreign.so"
    subprocess.run([CC, "-shared", "-fPIC", str(folder / "foreign.c"), "-o", str(lib)], check=True)
    return lib


def loaded_mark(foreign: Path, tmp_path: Path) -> Path:
    """Where the foreign library's constructor writes; the mark shows up when it is dlopened."""
    mark = tmp_path / "loaded"
    code = f"import ctypes; ctypes.CDLL({str(foreign)!r})"
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TOYCARDS_TEST_LOADED": str(mark)})
    assert done.returncode == 0 and mark.read_text() == "loaded\n"  # the mark works
    mark.unlink()
    return mark


def write_record(so: Path, size: int, sha256: str) -> None:
    record = {"version": build.RECORD_VERSION, "size": size, "sha256": sha256}
    build.record_path(so).write_text(json.dumps(record))


def assert_same_logits(out: dict, oracle: dict) -> None:
    """float32 products of the F16 weights against gguf.quants and NumPy: rounding apart."""
    for key in ("logits", "few"):
        got, want = np.asarray(out[key]), np.asarray(oracle[key])
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err <= 1e-5, (key, err, np.unravel_index(np.abs(got - want).argmax(), got.shape))


def rebuilt_once(said: list[str], so: Path) -> str:
    """The one line on stderr saying that `so` was damaged and is being rebuilt; why it was."""
    assert len(said) == 1, said
    match = DAMAGED.fullmatch(said[0])
    assert match and match[1] == str(so), said
    assert build.damage(so) is None  # whole again, and its record says so
    return match[2]


# ── the C kernels, in a child process on a damaged copy of the cache ───────────────────


def test_a_whole_cache_loads_quietly(cache, oracle):
    """No damage: nothing on stderr, no rebuild (the same file), the kernels loaded; the C++ glue
    turned off stays off (the torch target then takes its Python glue)."""
    so = kernels_in(cache)
    before = so.stat()
    for target in ("numpy", "torch"):
        out, said = logits_of(cache, target)
        assert said == [] and out["kernels"] == str(so)
        assert_same_logits(out, oracle)
    after = so.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    done = child("from toycards import engine; print(engine.native())", cache)
    assert done.stdout.strip() == "None" and done.stderr == ""


def test_a_truncated_library_is_rebuilt(cache, oracle):
    """A library cut to half its size (a full disk, a crash before the data reached the disk):
    loading it faulted on its missing pages (SIGBUS, exit 135). It is rebuilt, said in one line,
    and the rebuilt kernels compute the logits."""
    so = kernels_in(cache)
    size = so.stat().st_size
    os.truncate(so, size // 2)
    out, said = logits_of(cache)
    assert rebuilt_once(said, so) == f"{size // 2} bytes where {size} were recorded"
    assert out["kernels"] == str(so)
    assert_same_logits(out, oracle)


def test_a_foreign_library_is_rebuilt_not_loaded(cache, oracle, foreign, tmp_path):
    """Another shared library in the kernels' place, its record left as it was: the CLI was an
    internal error (exit 3, undefined symbol: tc_dequant_rows). It is never loaded (its
    constructor leaves no mark), the kernels are rebuilt, and `toycards eval` scores the text as
    the path without native code does."""
    so = kernels_in(cache)
    mark = loaded_mark(foreign, tmp_path)
    shutil.copyfile(foreign, so)
    cli = "import runpy, sys; sys.argv[0] = 'toycards'; runpy.run_module('toycards', run_name='__main__')"
    args = ("eval", str(EXAMPLE), "-p", "hello world, once more", "--json", "--per-token")
    done = child(cli, cache, *args, TOYCARDS_TEST_LOADED=str(mark))
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert not mark.exists()
    assert "were recorded" in rebuilt_once(done.stderr.splitlines(), so)
    plain = child(cli, tmp_path / "other", *args, TOYCARDS_QUANT_KERNELS="off")
    got, want = (json.loads(d.stdout) for d in (done, plain))
    assert got["n_tokens"] == want["n_tokens"] > 1
    assert abs(got["mean_logprob"] - want["mean_logprob"]) <= 1e-4, (got, want)


def test_a_library_whose_checksum_is_not_recorded_is_never_loaded(cache, oracle, foreign, tmp_path):
    """A record of the right size but another SHA-256: the library is not loaded (no mark), it is
    rebuilt."""
    so = kernels_in(cache)
    mark = loaded_mark(foreign, tmp_path)
    shutil.copyfile(foreign, so)
    write_record(so, so.stat().st_size, "0" * 64)
    out, said = logits_of(cache, TOYCARDS_TEST_LOADED=str(mark))
    assert not mark.exists()
    assert rebuilt_once(said, so) == "its SHA-256 is not the recorded one"
    assert out["kernels"] == str(so)
    assert_same_logits(out, oracle)


def test_a_library_without_the_kernels_is_rebuilt_once(cache, oracle, foreign, tmp_path):
    """A library its record vouches for that lacks the kernels (ctypes: AttributeError) is loaded,
    found wanting, closed and rebuilt once; the rebuilt kernels load under the same name."""
    so = kernels_in(cache)
    mark = loaded_mark(foreign, tmp_path)
    shutil.copyfile(foreign, so)
    write_record(so, so.stat().st_size, hashlib.sha256(so.read_bytes()).hexdigest())
    out, said = logits_of(cache, TOYCARDS_TEST_LOADED=str(mark))
    assert mark.exists()  # it matched its record, so it was loaded
    assert rebuilt_once(said, so) == "it verified but did not load"
    assert out["kernels"] == str(so)
    assert_same_logits(out, oracle)


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_a_failed_build_is_said_once_and_the_slower_path_runs(tmp_path, oracle, target):
    """A compiler that fails (`false`): one line on stderr, no kernels, and the logits of the path
    without native code; on the torch target the C++ glue, left on, needs the kernels and stays
    quiet."""
    false = shutil.which("false")
    if false is None:
        pytest.skip("no `false` command")
    env = {"CC": false, "CXX": false, "TOYCARDS_GLUE_CPP": ""}
    out, said = logits_of(tmp_path / "cache", target, **env)
    why = f"it did not build: {false} exited with status 1 and said nothing"
    assert said == [f"toycards: the C kernels cannot be used ({why}); the slower path runs instead"]
    assert out["kernels"] is None
    assert_same_logits(out, oracle)


# ── loading what verified: one more build, then the slower path ─────────────────────────


def test_kernels_missing_twice_fall_back_with_one_line(foreign, monkeypatch):
    """A library that matches its record but lacks the kernels, built again and still lacking them:
    one line, no kernels (the weights are dequantized per use instead)."""
    asked = []

    def shared_library(*args):
        asked.append(args[-1])  # rebuild
        return foreign

    monkeypatch.setattr(quant_kernels.build, "shared_library", shared_library)
    monkeypatch.setattr(quant_kernels, "build_error", "")
    monkeypatch.setattr(build, "_said", set())
    monkeypatch.setattr(build.sys, "stderr", err := io.StringIO())
    assert quant_kernels._build() is None
    assert asked == [False, True]
    assert "undefined symbol: tc_gqa" in quant_kernels.build_error
    why = quant_kernels.build_error
    assert err.getvalue() == f"toycards: the C kernels cannot be used ({why}); the slower path runs instead\n"


def test_a_glue_that_does_not_import_is_rebuilt_once_then_left(foreign, monkeypatch):
    """The C++ glue's file that matches its record but is no Python module: built once more, then
    one line and no module (the Python glue runs)."""
    torch = pytest.importorskip("torch")
    from toycards.engine.torch import native as glue_cpp

    if glue_cpp._flags() is None or build.compiler("c++", "g++", "clang++") is None:
        pytest.skip("no C++ compiler or no Python.h: the glue is never built here")
    asked = []

    def shared_library(*args):
        asked.append(args[-1])  # rebuild
        return foreign

    monkeypatch.setattr(glue_cpp.ckernels, "library", lambda: ctypes.CDLL(None))  # not reached
    monkeypatch.setattr(glue_cpp.build, "shared_library", shared_library)
    monkeypatch.setattr(glue_cpp, "build_error", "")
    monkeypatch.setattr(build, "_said", set())
    monkeypatch.setattr(build.sys, "stderr", err := io.StringIO())
    assert glue_cpp._load() is None
    assert asked == [False, True]
    assert "PyInit_toycards_glue" in glue_cpp.build_error
    title = f"the C++ glue for torch {torch.__version__} (~20 s)"
    assert err.getvalue() == (
        f"toycards: {title} cannot be used ({glue_cpp.build_error}); the slower path runs instead\n"
    )


# ── the cache's rules, on a tiny library ───────────────────────────────────────────────


@pytest.fixture
def seven(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TOYCARDS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "_said", set())
    path = tmp_path / "seven.c"
    path.write_text("int seven(void) { return 7; }\n")
    return path


def built_seven(source: Path) -> Path:
    return build.shared_library("test-seven", CC, source, [["-shared", "-fPIC"]], "key", "seven")


def test_the_record_holds_the_size_and_checksum(seven):
    so = built_seven(seven)
    record = json.loads(build.record_path(so).read_text())
    data = so.read_bytes()
    assert record == {"version": 1, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert build.damage(so) is None
    assert not list(so.parent.glob("*.tmp"))


def _truncate(so: Path) -> str:
    size = so.stat().st_size
    os.truncate(so, 100)
    return f"100 bytes where {size} were recorded"


def _flip(so: Path) -> str:
    data = bytearray(so.read_bytes())
    data[len(data) // 2] ^= 0xFF
    so.write_bytes(bytes(data))
    return "its SHA-256 is not the recorded one"


def _no_record(so: Path) -> str:
    build.record_path(so).unlink()
    return "it has no record of its size and checksum"


def _bad_record(so: Path) -> str:
    build.record_path(so).write_text("{not json")
    return "its record is unreadable"


def _other_version(so: Path) -> str:
    record = json.loads(build.record_path(so).read_text())
    build.record_path(so).write_text(json.dumps({**record, "version": 99}))
    return "its record is not one this toycards writes"


def _gone(so: Path) -> str:
    so.unlink()
    return "the library is missing, its record is not"


@pytest.mark.parametrize("damage", [_truncate, _flip, _no_record, _bad_record, _other_version, _gone])
def test_each_damage_is_rebuilt_with_one_line(seven, monkeypatch, damage):
    so = built_seven(seven)
    why = damage(so)
    assert build.damage(so) == why
    monkeypatch.setattr(build.sys, "stderr", err := io.StringIO())  # not a terminal
    assert built_seven(seven) == so
    assert err.getvalue() == f"toycards: the cached library {so} is damaged ({why}); rebuilding seven\n"
    assert build.damage(so) is None
    assert ctypes.CDLL(str(so)).seven() == 7


def test_a_failed_build_is_said_once_a_process(seven, monkeypatch):
    monkeypatch.setattr(build.sys, "stderr", err := io.StringIO())
    seven.write_text("int seven(void) { return }\n")
    for _ in range(2):
        with pytest.raises(build.BuildError, match="error"):
            built_seven(seven)
    (line,) = err.getvalue().splitlines()
    assert line.startswith("toycards: seven cannot be used (it did not build: ")
    assert line.endswith("); the slower path runs instead")
    assert not [p for p in seven.parent.rglob("*") if p.suffix in (".so", ".tmp", ".json")]
