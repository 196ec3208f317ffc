"""The command line on bad input: every mistake is one clear diagnostic, never a traceback.

`tests/bad_cards/*.card` is a catalogue of broken cards; each goes through `toycards check` and
must print `file:line:col: error: <expected fragment>`, the source line with a caret under the
reported column, and (where the table says so) a hint, with exit status 1. A few inputs are
built here instead of stored (a 1 MB line, 500-deep nesting, a missing file, a folder).

Also: `fmt` (rewrites only what changes, atomically, keeps permissions and links, refuses to
drop comments, `--check`, `--stdout`, `--ascii`), `render` in every format, exit codes 2
(usage) and 3 (internal error, with TOYCARDS_DEBUG showing the traceback).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from toycards.cli import main
from toycards.lang.parse import parse
from toycards.lang.printer import render_card
from toycards.lang.reading import MAX_LINE, MAX_NAME
from toycards.render.json import parse_json

HERE = Path(__file__).resolve().parents[1]
BAD = HERE / "bad_cards"
LIBRARY = sorted((HERE.parent / "toycards" / "library" / "cards").glob("*.card"))

# file stem: (expected message fragment, line, col, has a hint)
CATALOGUE = {
    # syntax
    "missing_arrow": ("an assignment needs ← (ASCII <-) (found '=')", 5, 5, True),
    "unclosed_paren": ("unclosed bracket (found end of line)", 5, 17, True),
    "bad_type": ("a declaration needs a type after ∈ (found 'foo')", 2, 12, True),
    "dims_comma": ("dimensions are separated by × (ASCII x)", 2, 16, True),
    "header_malformed": ("the algorithm header is malformed", 1, 13, True),
    "loop_without_do": ("a loop needs `do` at the end of its line", 5, 18, True),
    "binding_unquoted": ("a binding names its tensor or metadata key in double quotes", 3, 31, True),
    "binding_default_missing": ("`default` needs a value", 3, 58, True),
    "cyrillic_a": ("unexpected character 'а' (CYRILLIC SMALL LETTER A)", 3, 14, True),
    "fullwidth_colon": ("unexpected character '：' (FULLWIDTH COLON)", 2, 6, True),
    "en_dash": ("unexpected character '–' (EN DASH)", 3, 16, True),
    "zero_width_space": ("unexpected character '\\u200b' (ZERO WIDTH SPACE)", 4, 13, True),
    "byte_order_mark": ("unexpected character '\\ufeff' (ZERO WIDTH NO-BREAK SPACE)", 1, 1, True),
    # structure
    "unclosed_do": ("this block is never closed", 6, 1, True),
    "stray_end": ("`end` without a matching `for … do` or `if … then`", 6, 1, False),
    "stray_else": ("`else` without a matching `if … then`", 6, 1, False),
    "decl_among_steps": ("a declaration among the steps", 6, 1, False),
    "version_unsupported": ("card language version 2 is not supported", 1, 1, True),
    "empty": ("empty card: no algorithm", 1, 1, True),
    "comment_only": ("no algorithm in this card", 1, 1, True),
    "binary_nul": ("binary data (NUL byte) in a card", 3, 15, True),
    "binary_garbage": ("not a UTF-8 text file (invalid byte at offset 0)", None, None, False),
    # names, shapes, calls (the checker)
    "unknown_name": ("unknown name z", 5, 18, False),
    "misspelt_name": ("unknown name hh", 6, 14, True),
    "power_hint": ("unknown name x^3", 4, 14, True),
    "unknown_function": ("unknown function frobnicate", 5, 14, False),
    "unbound_loop_var": ("unknown name t", 6, 19, False),
    "unknown_enum_option": ("unknown name cubic", 5, 16, False),
    "matmul_mismatch": ("ℝ^{n×d} · ℝ^{ℓ×d}: inner dimensions d and ℓ differ", 5, 14, False),
    "add_mismatch": ("ℝ^{n×ℓ} + ℝ^{d×ℓ}: dimension 1: n and d differ", 5, 14, False),
    "annotation_mismatch": ("annotation ∷ ℝ^{d×ℓ} does not match the inferred shape ℝ^{n×ℓ}", 5, 16, True),
    "call_arity": ("softmax takes 1 input (x), got 2", 6, 14, True),
    "non_divisible": ("dimension d_e/H = 30/7 is not a whole number", 7, 13, False),
    "duplicate_param": ("W is declared twice", 6, 3, True),
    "duplicate_algorithm": ("algorithm f is defined twice", 6, 16, True),
    "return_wrong_name": ("returns P but the header's output is y", 5, 10, True),
    "reassign_shape": ("h was ℝ^{n×ℓ} and is now assigned ℝ^{d×ℓ}", 6, 3, True),
    "bad_prefix_template": ("template {l+} in group prefix 'blk.{l+}.' is not an affine expression of l", 6, 3, True),
    "optional_not_last": ("optional hyperparameter c comes before a, which every call must pass", 1, 22, True),
    "optional_default_not_number": ("an optional hyperparameter's default is a number (`default 0`)", 6, 18, True),
    "optional_not_in_header": ("c has a default but the header does not take it", 6, 3, True),
    "optional_call_too_few": ("f takes 1 to 2 parameters (a, c), got 0", 12, 15, True),
    "rows_first_source": ("rows of 'attn_qkv.weight' as the first source: the first names the parameter's own tensor", 5, 21, True),
}  # fmt: skip


def run(*args: str, **kw):
    return CliRunner().invoke(main, list(args), **kw)


def assert_diagnostic(output: str, file: str, fragment: str, line: int | None, col: int | None, hint: bool):
    """`file:line:col: error: …fragment…`, then the source line, a caret under col, maybe a hint."""
    lines = output.splitlines()
    where = f"{file}:{line}:{col}: error: " if line is not None else f"{file}: error: "
    heads = [i for i, text in enumerate(lines) if text.startswith(where)]
    assert heads, f"no line starts with {where!r}:\n{output[:3000]}"
    i = heads[0]
    assert fragment in lines[i], f"{fragment!r} not in {lines[i][:300]!r}"
    assert len(lines[i]) < 400, f"the headline is {len(lines[i])} characters long"
    if line is not None:
        source, caret = lines[i + 1], lines[i + 2]
        assert source.startswith("  ") and caret.lstrip().startswith("^"), f"{source!r}\n{caret!r}"
        assert len(source) < 400 and len(caret) < 400
        if "…" not in source:  # a clipped long line shifts the caret
            assert caret.index("^") == col + 1, f"caret at {caret.index('^') - 1}, expected column {col}"
    block = lines[i + 1 : next((j for j in heads[1:]), len(lines))]
    if hint:
        assert any(b.startswith("  hint: ") for b in block[:4]), f"no hint:\n{output}"
    assert "Traceback" not in output


def test_catalogue_is_complete():
    stems = {p.stem for p in BAD.glob("*.card")}
    assert stems == set(CATALOGUE), (stems - set(CATALOGUE), set(CATALOGUE) - stems)
    assert len(CATALOGUE) >= 25


@pytest.mark.parametrize(
    "stem",
    sorted(CATALOGUE),
)
def test_bad_card(stem, monkeypatch):
    monkeypatch.chdir(BAD)
    fragment, line, col, hint = CATALOGUE[stem]
    result = run("check", f"{stem}.card")
    assert result.exit_code == 1, f"exit {result.exit_code}:\n{result.output}"
    assert_diagnostic(result.output, f"{stem}.card", fragment, line, col, hint)


# ── inputs built here ───────────────────────────────────────────────────────────────────
HEAD = "Algorithm: y ← f(x)\nInput: x ∈ ℝ\nOutput: y ∈ ℝ\n"


def test_a_one_megabyte_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prefix = "1 return y = "
    Path("long.card").write_text(HEAD + prefix + "x" * 1_000_000 + " )\n", encoding="utf-8")
    result = run("check", "long.card")
    assert result.exit_code == 1
    message = f"a line of {len(prefix) + 1_000_002} characters (the limit is {MAX_LINE})"
    assert_diagnostic(result.output, "long.card", message, 4, MAX_LINE + 1, True)
    assert len(result.output) < 2000


def test_a_long_name_is_refused_where_it_stands(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("name.card").write_text(HEAD + "1 return y = " + "x" * 1000 + "\n", encoding="utf-8")
    result = run("check", "name.card")
    assert result.exit_code == 1
    assert_diagnostic(
        result.output, "name.card", f"a name of 1000 characters (the limit is {MAX_NAME})", 4, 14, True
    )
    assert len(result.output) < 2000


def test_five_hundred_deep_nesting(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prefix = "1 return y = "
    Path("deep.card").write_text(HEAD + prefix + "(" * 500 + "x" + ")" * 500 + "\n", encoding="utf-8")
    result = run("check", "deep.card")
    assert result.exit_code == 1
    assert_diagnostic(result.output, "deep.card", "brackets nested 500 deep", 4, len(prefix) + 500, True)


def test_missing_file_and_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder.card").mkdir()
    result = run("check", "nowhere.card", "folder.card")
    assert result.exit_code == 1
    assert "nowhere.card: error: no such file" in result.output
    assert "folder.card: error: is a directory, not a card" in result.output
    assert "Traceback" not in result.output


def test_every_diagnostic_of_a_file_is_printed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("two.card").write_text(HEAD + "1 h ← z\n2 return y = w\n", encoding="utf-8")
    result = run("check", "two.card")
    assert "two.card:4:7: error: unknown name z" in result.output
    assert "two.card:5:14: error: unknown name w" in result.output


@pytest.mark.parametrize("path", LIBRARY, ids=[p.stem for p in LIBRARY])
def test_library_cards_check_clean(path):
    result = run("check", str(path))
    assert result.exit_code == 0, result.output
    assert "error" not in result.stdout


def test_check_reads_stdin():
    result = run("check", "-", input=HEAD + "1 return y = x +\n")
    assert result.exit_code == 1
    assert_diagnostic(result.output, "<stdin>", "unexpected end of line", 4, 17, True)
    assert run("check", "-", input=HEAD + "1 return y = x\n").exit_code == 0


def test_check_through_the_installed_entry_point(tmp_path):
    """`python -m toycards check` as a user runs it: exit status and output from a real process."""
    bad = tmp_path / "bad.card"
    bad.write_text(HEAD + "1 y = x\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "toycards", "check", str(bad)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1
    assert f"{bad}:4:5: error: an assignment needs ←" in proc.stdout
    assert "\x1b[" not in proc.stdout  # no colour into a pipe
    assert "Traceback" not in proc.stdout + proc.stderr


# ── exit codes ──────────────────────────────────────────────────────────────────────────
def test_usage_errors_exit_2():
    assert run("check").exit_code == 2
    assert run("render", str(LIBRARY[0]), "--format", "pdf").exit_code == 2
    assert run("no-such-command").exit_code == 2


def test_internal_errors_exit_3_without_a_traceback(monkeypatch, tmp_path):
    import toycards.lang.parse

    def broken(*args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(toycards.lang.parse, "parse", broken)
    monkeypatch.delenv("TOYCARDS_DEBUG", raising=False)
    result = run("render", str(LIBRARY[0]))
    assert result.exit_code == 3
    assert "toycards: internal error: KeyError: 'a bug'" in result.output
    assert "Traceback" not in result.output
    monkeypatch.setenv("TOYCARDS_DEBUG", "1")
    result = run("render", str(LIBRARY[0]))
    assert result.exit_code == 3 and "Traceback" in result.output


# ── fmt ─────────────────────────────────────────────────────────────────────────────────
MESSY = "Algorithm: y ← f(x)\nInput:   x ∈ ℝ   ▷ a note\nOutput: y ∈ ℝ\n7 return y   =  x·x\n"


def test_fmt_rewrites_atomically_keeping_mode_and_links(tmp_path):
    card = tmp_path / "m.card"
    card.write_text(MESSY, encoding="utf-8")
    card.chmod(0o640)
    link = tmp_path / "link.card"
    link.symlink_to(card)
    result = run("fmt", str(link))
    assert result.exit_code == 0, result.output
    assert link.is_symlink()
    assert card.read_text(encoding="utf-8") == render_card(parse(MESSY))
    assert stat.S_IMODE(card.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.card", "m.card"]  # no temp files left


def test_fmt_leaves_canonical_files_alone(tmp_path):
    card = tmp_path / "c.card"
    card.write_text(render_card(parse(MESSY)), encoding="utf-8")
    before = card.stat()
    result = run("fmt", str(card))
    assert result.exit_code == 0
    after = card.stat()
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)


def test_fmt_check_lists_what_would_change(tmp_path):
    messy, clean = tmp_path / "messy.card", tmp_path / "clean.card"
    messy.write_text(MESSY, encoding="utf-8")
    clean.write_text(render_card(parse(MESSY)), encoding="utf-8")
    result = run("fmt", "--check", str(messy), str(clean))
    assert result.exit_code == 1
    assert f"would reformat {messy}" in result.stdout and str(clean) not in result.stdout
    assert messy.read_text(encoding="utf-8") == MESSY
    assert run("fmt", "--check", str(clean)).exit_code == 0
    # the change itself, as a unified diff of the file against its canonical form
    assert f"--- {messy}\n+++ {messy} (formatted)\n" in result.stdout
    assert "\n-7 return y   =  x·x\n" in result.stdout
    assert "\n+1  return y = x · x\n" in result.stdout
    assert "\n-Input:   x ∈ ℝ   ▷ a note\n" in result.stdout


def test_fmt_diff_prints_only_the_diff_and_changes_nothing(tmp_path):
    messy = tmp_path / "messy.card"
    messy.write_text(MESSY, encoding="utf-8")
    result = run("fmt", "--diff", str(messy))
    assert result.exit_code == 1
    assert result.stdout.startswith(f"--- {messy}\n+++ {messy} (formatted)\n@@ ")
    assert "would reformat" not in result.stdout
    assert messy.read_text(encoding="utf-8") == MESSY


def test_fmt_stdout_and_ascii(tmp_path):
    card = tmp_path / "m.card"
    card.write_text(MESSY, encoding="utf-8")
    result = run("fmt", "--stdout", "--ascii", str(card))
    assert result.exit_code == 0
    assert result.stdout == render_card(parse(MESSY), ascii=True)
    assert "←" not in result.stdout and "return y = x * x" in result.stdout
    assert card.read_text(encoding="utf-8") == MESSY
    assert run("fmt", "-", input=MESSY).stdout == render_card(parse(MESSY))


def test_fmt_refuses_to_drop_a_comment(tmp_path):
    card = tmp_path / "h.card"
    text = "Algorithm: y ← f(x)  ▷ kept nowhere in the IR\nInput: x ∈ ℝ\nOutput: y ∈ ℝ\n1 return y = x\n"
    card.write_text(text, encoding="utf-8")
    result = run("fmt", str(card))
    assert result.exit_code == 1
    assert "h.card:1:1: error: a comment on the header line would be lost" in result.output
    assert card.read_text(encoding="utf-8") == text


def test_fmt_never_loses_a_file_when_writing_fails(tmp_path, monkeypatch):
    card = tmp_path / "m.card"
    card.write_text(MESSY, encoding="utf-8")

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    result = run("fmt", str(card))
    assert result.exit_code == 1
    assert "cannot write: No space left on device" in result.output
    assert card.read_text(encoding="utf-8") == MESSY
    assert [p.name for p in tmp_path.iterdir()] == ["m.card"]


def test_fmt_reports_syntax_errors_and_goes_on(tmp_path):
    bad, messy = tmp_path / "bad.card", tmp_path / "messy.card"
    bad.write_text(HEAD + "1 y = x\n", encoding="utf-8")
    messy.write_text(MESSY, encoding="utf-8")
    result = run("fmt", str(bad), str(messy))
    assert result.exit_code == 1
    assert f"{bad}:4:5: error: an assignment needs ←" in result.output
    assert messy.read_text(encoding="utf-8") == render_card(parse(MESSY))


# ── render ──────────────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize(
    "fmt,start", [("card", "toycards 1"), ("markdown", "▷") , ("latex", "\\documentclass"),
                  ("html", "<!DOCTYPE html>"), ("json", "{")],
)  # fmt: skip
def test_render_formats(fmt, start, tmp_path):
    path = (
        next(p for p in LIBRARY if p.stem == "gpt2") if any(p.stem == "gpt2" for p in LIBRARY) else LIBRARY[0]
    )
    result = run("render", str(path), "--format", fmt)
    assert result.exit_code == 0, result.output
    if fmt == "markdown":
        assert "## Algorithm" in result.stdout
    else:
        assert result.stdout.startswith(start)
    if fmt == "json":
        assert parse_json(result.stdout) == parse(path)
    if fmt == "card":
        assert result.stdout == render_card(parse(path))
    out = tmp_path / f"out.{fmt}"
    assert run("render", str(path), "--format", fmt, "-o", str(out)).exit_code == 0
    assert out.read_text(encoding="utf-8") == result.stdout


def test_render_a_bad_card_is_one_diagnostic(tmp_path):
    bad = tmp_path / "bad.card"
    bad.write_text(HEAD + "1 y = x\n", encoding="utf-8")
    result = run("render", str(bad), "--format", "html")
    assert result.exit_code == 1
    assert_diagnostic(result.output, str(bad), "an assignment needs ←", 4, 5, True)
    assert result.stdout == ""
