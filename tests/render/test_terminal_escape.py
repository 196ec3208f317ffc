"""Text from a file never drives the terminal it is printed on.

A GGUF file's strings (`general.name`, other metadata keys and values, tensor names, its file
name) reach the terminal through `describe`, `list`, `diff` and error messages; each shows every
terminal control, C1 control, bidi override and line separator as a visible escape (`\\x1b`,
`\\u202e`), and rich never reads them as markup. JSON output keeps the exact string (json escapes
it). The oracle for one character's escape is Python's own `repr`.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from gguf_factory import V, llama_hparams, llama_inventory, typed, write_gguf

from toycards.render.escape import terminal_safe

# a window title, clear screen, red, rich markup, a right-to-left override and isolate, a C1 CSI
# and DEL (the header's one-line values turn whitespace such as \r and U+2028 into spaces)
EVIL = "evil\x1b]0;pwned\x07\x1b[2J\x1b[31m[red]red[/red] \u202eabc\u2066 \x9b2J\x7f"
EVIL_SHOWN = r"evil\x1b]0;pwned\x07\x1b[2J\x1b[31m[red]red[/red] \u202eabc\u2066 \x9b2J\x7f"
UNSAFE = (
    [chr(c) for c in range(0x20) if chr(c) not in "\t\n"]
    + [chr(0x7F)]
    + [chr(c) for c in range(0x80, 0xA0)]
    + [chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029)]
)
RAW = re.compile("[" + "".join(map(re.escape, UNSAFE)) + "]")


def assert_safe(text: str) -> None:
    """No raw control, C1, bidi override or separator; the hostile name shows as escapes."""
    assert not RAW.search(text), repr(RAW.search(text).group())


def cli(*args: str):
    """`toycards ARGS…` in process, rich's tables as wide as the hostile name."""
    from toycards.cli import main

    return CliRunner().invoke(main, list(args), catch_exceptions=False, env={"COLUMNS": "300"})


def hostile_model(path: Path, name: str = EVIL, nan_tensor: bool = False) -> Path:
    """A tiny Llama whose name, one metadata key and value, and one extra tensor's name are hostile."""
    rng = np.random.default_rng(0)
    inventory = dict(llama_inventory(n_layer=2, d_e=8, d_ff=16, n_vocab=32, n_head=2, n_head_kv=1))
    meta = {k.key: typed(k.value, k.vtype) for k in llama_hparams(2, 8, 16, 2, 1, n_ctx=64)}
    meta.pop("general.architecture")
    meta["general.name"] = typed(name, V.STRING)
    meta["general.note\x1b[5m"] = typed("one\x1b[2J\ntwo\u202e", V.STRING)
    arrays = {n: rng.normal(size=s).astype(np.float32) for n, s in inventory.items() if s is not None}
    arrays["blk.0.\x1b[31mevil\u202e.weight"] = np.full(4, np.nan if nan_tensor else 1.0, np.float32)
    return write_gguf(path, kv=meta, tensors=arrays)


# --- the function -------------------------------------------------------------------------------


@pytest.mark.parametrize("ch", UNSAFE + ["\n"], ids=lambda c: f"U+{ord(c):04X}")
def test_each_unsafe_character_is_spelled_as_python_spells_it(ch):
    assert terminal_safe(f"a{ch}b", newlines=False) == f"a{repr(ch)[1:-1]}b"
    assert terminal_safe(f"a{ch}b") == (f"a{ch}b" if ch == "\n" else f"a{repr(ch)[1:-1]}b")


def test_other_text_is_unchanged():
    text = "tab\there · ℝ^{d_e} é 名 \u00a0nbsp \u200dzwj 👩\u200d💻 \u05d0\u05d1 עברית [red]x[/red] \\x1b"
    assert terminal_safe(text) == text
    assert terminal_safe(EVIL) == EVIL_SHOWN
    assert terminal_safe("a\u2028b\rc\u2029") == r"a\u2028b\rc\u2029"
    assert terminal_safe("".join(chr(c) for c in range(0x20, 0x7F))) == "".join(
        chr(c) for c in range(0x20, 0x7F)
    )


# --- describe -------------------------------------------------------------------------------------


@pytest.fixture
def model(tmp_path):
    return hostile_model(tmp_path / "m.gguf")


@pytest.mark.parametrize("fmt", ["text", "terminal"])
def test_describe_for_a_terminal_shows_escapes(model, fmt):
    out = cli("describe", str(model), "--format", fmt)
    assert_safe(out.stdout + out.stderr)
    assert EVIL_SHOWN in out.stdout
    assert r"note\x1b[5m" in out.stdout and r"one\x1b[2J two\u202e" in out.stdout
    assert r"blk.0.\x1b[31mevil\u202e.weight" in out.stdout + out.stderr  # the unexpected tensor


def test_describe_default_output_is_the_text_format(model):
    out = cli("describe", str(model))
    assert_safe(out.stdout + out.stderr)
    assert EVIL_SHOWN in out.stdout


def test_rich_markup_in_a_name_is_shown_not_applied(model):
    out = cli("describe", str(model), "--format", "terminal")
    assert "[red]red[/red]" in out.stdout


@pytest.mark.parametrize("fmt", ["card", "markdown"])
def test_card_and_markdown_are_escaped_on_a_terminal(model, fmt, monkeypatch):
    from toycards.inspect.describe import describe
    from toycards.inspect.formats import render_described

    monkeypatch.setattr("toycards.cli.files.to_terminal", lambda stream: True)
    shown = cli("describe", str(model), "--format", fmt).stdout
    assert_safe(shown)
    assert shown == terminal_safe(render_described(describe(model), fmt))
    assert fmt == "card" or EVIL_SHOWN in shown


def test_json_keeps_the_exact_strings(model):
    out = cli("describe", str(model), "--format", "json")
    header = json.loads(out.stdout)["header"]
    assert header["general"]["general.name"] == EVIL
    assert "\x1b" not in out.stdout  # json writes \u001b


def test_tensor_report_shows_escapes(tmp_path):
    path = hostile_model(tmp_path / "nan.gguf", nan_tensor=True)
    out = cli("describe", str(path), "--format", "json", "--check-tensors")
    assert out.exit_code == 1
    assert_safe(out.stderr)
    assert r"\x1b[31mevil\u202e" in out.stderr


# --- list, diff, errors ---------------------------------------------------------------------------


def test_list_shows_escapes(tmp_path, monkeypatch):
    folder = tmp_path / "folder"
    folder.mkdir()
    hostile_model(folder / "m\x1b[2J.gguf")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    out = cli("list", "--dir", str(folder), "--no-caches")
    assert_safe(out.stdout)
    assert r"m\x1b[2J.gguf" in out.stdout
    assert json.loads(cli("list", "--dir", str(folder), "--no-caches", "--json").stdout)[0]["name"].endswith(
        "m\x1b[2J.gguf"
    )


def test_diff_shows_escapes(tmp_path):
    a = hostile_model(tmp_path / "a.gguf", name="plain")
    b = hostile_model(tmp_path / "b.gguf")
    out = cli("diff", str(a), str(b))
    assert out.exit_code == 1
    assert_safe(out.stdout)
    assert f"~ file name: plain → {EVIL_SHOWN}" in out.stdout
    changed = json.loads(cli("diff", str(a), str(b), "--format", "json").stdout)["changes"]
    assert {"name": "name", "old": "plain", "new": EVIL}.items() <= next(
        c for c in changed if c["name"] == "name"
    ).items()


def test_error_naming_a_hostile_file_shows_escapes(tmp_path):
    path = tmp_path / "bad\x1b]0;pwned\x07\u202e.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    out = cli("describe", str(path))
    assert out.exit_code == 1
    assert_safe(out.stderr)
    assert r"bad\x1b]0;pwned\x07\u202e.gguf" in out.stderr
    assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1


def test_diagnostics_of_a_hostile_card_file_name_show_escapes(tmp_path):
    path = tmp_path / "c\x1b[2J.card"
    path.write_text("Algorithm 1: Broken\nthis is not a card\n", encoding="utf-8")
    out = cli("check", str(path))
    assert out.exit_code == 1
    assert_safe(out.stdout + out.stderr)
    assert r"c\x1b[2J.card:" in out.stdout


def test_error_printer_escapes_a_message(capsys):
    from toycards.errors import ToycardsError
    from toycards.render.terminal import print_error

    for colour in (False, True):
        print_error(
            ToycardsError(f"m.gguf: unsupported architecture '{EVIL}'\nsecond line"), sys.stderr, colour
        )
        err = capsys.readouterr().err
        assert "\x1b]0;" not in err and "\x1b[2J" not in err and "\u202e" not in err and "\x9b" not in err
        assert r"\x1b]0;pwned" in err and r"\nsecond line" in err
