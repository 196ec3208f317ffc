"""runtime/compile.py: building native code once per machine, into the cache, and saying so.

A tiny C source stands in for the kernels: the built library must load and answer, a second call
must find the cached file without compiling, a source that does not compile must raise BuildError
with the compiler's words and leave nothing behind, and a terminal (only a terminal) must be told
while a build runs.
"""

from __future__ import annotations

import ctypes
import io

import pytest

from toycards.runtime import compile

CC = compile.compiler("cc", "gcc", "clang")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def source(tmp_path, monkeypatch):
    monkeypatch.setenv("TOYCARDS_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "seven.c"
    path.write_text("int seven(void) { return 7; }\n")
    return path


def build(source, **kw):
    return compile.shared_library("test-seven", CC, source, [["-shared", "-fPIC"]], "key", "seven", **kw)


def test_builds_once_and_caches(source, monkeypatch):
    built = build(source)
    assert ctypes.CDLL(str(built)).seven() == 7
    version = compile.version(CC)
    monkeypatch.setattr(compile, "version", lambda cc: version)  # the version probe is a run too
    monkeypatch.setattr(compile.subprocess, "run", lambda *a, **k: pytest.fail("compiled again"))
    assert build(source) == built


def test_a_changed_source_is_a_new_file(source):
    first = build(source)
    source.write_text("int seven(void) { return 8; }\n")
    assert build(source) != first


def test_tells_a_terminal_and_only_a_terminal(source, monkeypatch):
    term = Terminal()
    monkeypatch.setattr(compile.sys, "stderr", term)
    build(source)
    assert term.getvalue() == "toycards: building seven, once for this machine ... done\n"
    build(source)  # cached: nothing more to say
    assert term.getvalue().count("\n") == 1
    pipe = io.StringIO()
    monkeypatch.setattr(compile.sys, "stderr", pipe)
    source.write_text("int seven(void) { return 9; }\n")
    build(source)
    assert pipe.getvalue() == ""


def test_a_failed_build_raises_with_the_compilers_words(source, monkeypatch):
    term = Terminal()
    monkeypatch.setattr(compile.sys, "stderr", term)
    source.write_text("int seven(void) { return }\n")
    with pytest.raises(compile.BuildError, match="error"):
        build(source)
    assert term.getvalue().endswith(" failed (the slower path runs instead)\n")
    cached = list((source.parent / "cache").rglob("*"))
    assert not [p for p in cached if p.suffix in (".so", ".tmp")]


def test_no_stderr_at_all_is_quiet(source, monkeypatch):
    monkeypatch.setattr(compile.sys, "stderr", None)  # pythonw, or a daemon that closed it
    assert ctypes.CDLL(str(build(source))).seven() == 7
