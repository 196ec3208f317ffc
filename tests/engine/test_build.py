"""engine/build.py: building native code once per machine, into the cache, and saying so.

A tiny C source stands in for the kernels: the built library must load and answer, a second call
must find the cached file without compiling, a source that does not compile must raise BuildError
with the compiler's words and leave nothing behind, and a terminal (only a terminal) must be told
while a build runs. Several sources make one library, named after the headers they include too.
"""

from __future__ import annotations

import ctypes
import io

import pytest

from toycards.engine import build

CC = build.compiler("cc", "gcc", "clang")
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


def built_seven(source, **kw):
    return build.shared_library("test-seven", CC, source, [["-shared", "-fPIC"]], "key", "seven", **kw)


def test_builds_once_and_caches(source, monkeypatch):
    built = built_seven(source)
    assert ctypes.CDLL(str(built)).seven() == 7
    version = build.version(CC)
    monkeypatch.setattr(build, "version", lambda cc: version)  # the version probe is a run too
    monkeypatch.setattr(build.subprocess, "run", lambda *a, **k: pytest.fail("compiled again"))
    assert built_seven(source) == built


def test_a_changed_source_is_a_new_file(source):
    first = built_seven(source)
    source.write_text("int seven(void) { return 8; }\n")
    assert built_seven(source) != first


def test_tells_a_terminal_and_only_a_terminal(source, monkeypatch):
    term = Terminal()
    monkeypatch.setattr(build.sys, "stderr", term)
    built_seven(source)
    assert term.getvalue() == "toycards: building seven, once for this machine ... done\n"
    built_seven(source)  # cached: nothing more to say
    assert term.getvalue().count("\n") == 1
    pipe = io.StringIO()
    monkeypatch.setattr(build.sys, "stderr", pipe)
    source.write_text("int seven(void) { return 9; }\n")
    built_seven(source)
    assert pipe.getvalue() == ""


def test_a_failed_build_raises_with_the_compilers_words(source, monkeypatch):
    term = Terminal()
    monkeypatch.setattr(build.sys, "stderr", term)
    source.write_text("int seven(void) { return }\n")
    with pytest.raises(build.BuildError, match="error"):
        built_seven(source)
    assert term.getvalue().endswith(" failed (the slower path runs instead)\n")
    cached = list((source.parent / "cache").rglob("*"))
    assert not [p for p in cached if p.suffix in (".so", ".tmp")]


def test_no_stderr_at_all_is_quiet(source, monkeypatch):
    monkeypatch.setattr(build.sys, "stderr", None)  # pythonw, or a daemon that closed it
    assert ctypes.CDLL(str(built_seven(source))).seven() == 7


def test_several_sources_build_one_library_named_after_their_headers(tmp_path, monkeypatch):
    """Sources compiled together into one library (each calling the other through the header they
    share), named after the headers they include too, followed from header to header: an edit to
    one builds afresh."""
    monkeypatch.setenv("TOYCARDS_CACHE", str(tmp_path / "cache"))
    (tmp_path / "parts.h").write_text('#include "value.h"\nint three(void);\nint four(void);\n')
    (tmp_path / "value.h").write_text("#define FOUR 4\n")
    (tmp_path / "three.c").write_text('#include "parts.h"\nint three(void) { return 3; }\n')
    (tmp_path / "seven.c").write_text(
        '#include "parts.h"\nint four(void) { return FOUR; }\nint seven(void) { return three() + four(); }\n'
    )
    sources = [tmp_path / "three.c", tmp_path / "seven.c"]

    def made():
        return build.shared_library("test-seven", CC, sources, [["-shared", "-fPIC"]], "key", "seven")

    first = made()
    assert ctypes.CDLL(str(first)).seven() == 7
    assert [p.name for p in build.inputs(sources)] == ["three.c", "seven.c", "parts.h", "value.h"]
    (tmp_path / "value.h").write_text("#define FOUR 5\n")
    second = made()
    assert second != first and ctypes.CDLL(str(second)).seven() == 8
