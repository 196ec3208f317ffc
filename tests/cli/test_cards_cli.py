"""Cards by name: `toycards cards`, and a card name wherever a card is taken (check, fmt, render,
diff, gen, `--card`).

The oracle for a name is the same command on the card's file in toycards/library/cards/, found
here by path; the listing is held to the files in that folder and to the library's table of
architectures.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_run import cli, one_error

from toycards.library import ARCH_CARDS, CARDS_BY_TENSOR

ROOT = Path(__file__).resolve().parents[2]
CARDS = ROOT / "toycards" / "library" / "cards"
EXAMPLE = ROOT / "examples" / "tiny-llama.gguf"


@pytest.fixture(autouse=True)
def no_user_cards(monkeypatch, tmp_path):
    """No TOYCARDS_CARDS unless a test sets one; the working folder an empty one of tmp_path."""
    monkeypatch.delenv("TOYCARDS_CARDS", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


# ── toycards cards ──────────────────────────────────────────────────────────────────────
def test_cards_lists_every_library_card_with_its_architectures_and_file():
    out = cli("cards", "--json")
    assert out.exit_code == 0, out.output
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert set(rows) == {p.stem for p in CARDS.glob("*.card")}
    assert all(Path(r["file"]) == CARDS / f"{n}.card" and r["source"] == "library" for n, r in rows.items())
    for arch, stem in ARCH_CARDS.items():
        assert {"architecture": arch, "with_tensor": ""} in rows[stem]["architectures"], stem
    for arch, variants in CARDS_BY_TENSOR.items():
        for tensor, stem in variants:
            assert rows[stem]["architectures"] == [{"architecture": arch, "with_tensor": tensor}]
    assert rows["prelude"]["architectures"] == [] and rows["paper"]["architectures"] == []
    assert sum(bool(r["architectures"]) for r in rows.values()) == len(rows) - 2  # all but prelude and paper


def test_cards_table_has_one_line_per_card():
    out = cli("cards")
    assert out.exit_code == 0
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["name", "architectures", "source", "file"]
    assert len(lines) == 1 + len(list(CARDS.glob("*.card")))
    moe = next(line for line in lines if line.startswith("llama_moe "))
    assert moe.split()[1:3] == ["llama", "(with"] and str(CARDS / "llama_moe.card") in moe


def test_cards_of_toycards_cards_come_first_and_a_name_means_them(tmp_path, monkeypatch):
    folder = tmp_path / "mine"
    folder.mkdir()
    edited = (CARDS / "gpt2.card").read_text(encoding="utf-8").replace("default 1e-5", "default 1e-6")
    (folder / "gpt2.card").write_text(edited, encoding="utf-8")
    monkeypatch.setenv("TOYCARDS_CARDS", str(folder))
    rows = json.loads(cli("cards", "--json").stdout)
    assert (rows[0]["name"], rows[0]["source"], rows[0]["file"]) == (
        "gpt2",
        "TOYCARDS_CARDS",
        str(folder / "gpt2.card"),
    )
    assert "default 1e-6" in cli("render", "gpt2").stdout


# ── a card name wherever a card is taken ────────────────────────────────────────────────
def test_check_and_render_by_name():
    out = cli("check", "llama", "gpt2")
    assert out.exit_code == 0 and "2 cards checked: no errors" in out.stderr
    for fmt in ("card", "json"):
        by_name = cli("render", "gpt2", "--format", fmt)
        assert (
            by_name.exit_code == 0
            and by_name.stdout == cli("render", CARDS / "gpt2.card", "--format", fmt).stdout
        )


def test_fmt_reads_a_library_card_by_name_but_never_rewrites_it():
    before = (CARDS / "llama.card").read_bytes()
    assert cli("fmt", "--check", "llama").exit_code == 0  # the library's cards are formatted
    assert cli("fmt", "--stdout", "llama").stdout == before.decode("utf-8")
    line = one_error(cli("fmt", "llama"))
    assert line.startswith("error: llama: names the card") and "fmt --check llama" in line
    assert (CARDS / "llama.card").read_bytes() == before


def test_render_never_writes_over_a_card_named_by_name(tmp_path):
    before = (CARDS / "gpt2.card").read_bytes()
    assert "is the input card" in one_error(cli("render", "gpt2", "-o", CARDS / "gpt2.card"))
    assert (CARDS / "gpt2.card").read_bytes() == before


def test_diff_by_name():
    by_name = cli("diff", "gpt2", "llama").stdout.splitlines()
    by_path = cli("diff", CARDS / "gpt2.card", CARDS / "llama.card").stdout.splitlines()
    assert by_name[0].startswith("gpt2 → llama: ") and by_name[1:] == by_path[1:]
    assert by_name[0].split(": ")[1] == by_path[0].split(": ")[1]  # "N differences"
    mine = shutil.copy(CARDS / "gpt2.card", "mine.card")
    assert cli("diff", "gpt2", mine).exit_code == 0


def test_gen_by_name():
    out = cli("gen", "llama", "--target", "numpy")
    assert out.exit_code == 0 and out.stdout == cli("gen", CARDS / "llama.card", "--target", "numpy").stdout


def test_card_option_by_name():
    by_name = cli("describe", EXAMPLE, "--card", "llama", "--format", "json")
    by_path = cli("describe", EXAMPLE, "--card", CARDS / "llama.card", "--format", "json")
    assert by_name.exit_code == 0 and json.loads(by_name.stdout) == json.loads(by_path.stdout)
    assert json.loads(by_name.stdout)["origin"] == "given"
    ran = cli("run", EXAMPLE, "--card", "llama", "-p", "Hello", "-n", "3")
    assert (
        ran.exit_code == 0
        and ran.stdout == cli("run", EXAMPLE, "--card", CARDS / "llama.card", "-p", "Hello", "-n", "3").stdout
    )
    scored = cli("eval", EXAMPLE, "--card", "llama", "-p", "Hello there", "--json")
    assert scored.exit_code == 0 and json.loads(scored.stdout)["n_tokens"] > 0
    assert cli("gen", EXAMPLE, "--card", "llama", "--target", "numpy").exit_code == 0


def test_a_path_wins_over_a_name(no_user_cards):
    (no_user_cards / "llama").write_text("toycards 1\nnot a card\n")
    out = cli("check", "llama")
    assert out.exit_code == 1 and "llama:2:" in out.stdout


@pytest.mark.parametrize(
    "args, head",
    [
        (["render", "lama"], "error: lama: no such file, and no card of that name"),
        (
            ["describe", EXAMPLE, "--card", "lama"],
            "error: --card lama: no such file, and no card of that name",
        ),
        (["fmt", "lama"], "error: lama: no such file, and no card of that name"),
    ],
)
def test_an_unknown_card_name_is_one_line_with_the_close_ones(args, head):
    line = one_error(cli(*args))
    assert line.startswith(head) and "`toycards cards`" in line and "did you mean llama" in line
