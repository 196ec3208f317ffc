"""docs/train.md's walk-through runs as written: a card of our own (not in the library) is checked,
trained from the command line until its loss falls below 1 (from ln 1024 ≈ 6.93), described
(the embedded card comes back with its values and checks), run, evaluated and fine-tuned.

The ```card block is written to `tinylm.card`, the ```python block is executed, and every line of
every ```sh block is run as a `toycards` command, in that order, in a fresh folder that holds
this repository's `examples/`.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

import gguf
import pytest
from click.testing import CliRunner

import toycards
from toycards.cli import main

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "train.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)


def blocks(kind: str) -> list[str]:
    return [body for k, body in BLOCK.findall(DOC.read_text(encoding="utf-8")) if k == kind]


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_the_card_of_the_walk_through_is_canonical_and_not_in_the_library():
    from toycards.lang.printer import render_card
    from toycards.library import card_names

    (card,) = blocks("card")
    parsed = toycards.parse(card)
    assert render_card(parsed) == card, "the doc shows the card as `toycards fmt` writes it"
    assert toycards.check(parsed) == []
    assert parsed.main.name.lower() not in card_names()


def test_the_walk_through_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (card,) = blocks("card")
    (tmp_path / "tinylm.card").write_text(card, encoding="utf-8")
    (python,) = blocks("python")
    exec(compile(python, str(DOC), "exec"), {})  # noqa: S102 - the doc's own snippet
    outputs = {}
    for line in (ln for body in blocks("sh") for ln in body.splitlines() if ln.startswith("toycards ")):
        args = shlex.split(line)[1:]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, f"{line}\n{result.output}"
        outputs[args[0] + " " + args[1]] = result

    summary = outputs["train tinylm.card"].stderr.strip().splitlines()[-1]
    m = re.fullmatch(
        r"trained 100 steps: loss (\S+) → (\S+), held out (\S+); wrote tinylm.gguf \(\d+ KiB\)", summary
    )
    assert m, summary
    first, last, held = map(float, m.groups())
    assert first == pytest.approx(math.log(1024), abs=0.1) and last < 1.0 and held < 1.0, summary

    described = outputs["describe tinylm.gguf"].stdout
    assert "the card embedded in the file (toycards.card)" in described and "L ∈ ℕ = 2" in described
    embedded = toycards.parse(gguf.GGUFReader("tinylm.gguf").fields["toycards.card"].contents())
    assert toycards.check(embedded) == [] and embedded.main.name == "TinyLM"
    assert toycards.describe("tinylm.gguf").problems == ()
    assert outputs["run tinylm.gguf"].stdout.startswith("three four")
    scored = CliRunner().invoke(
        main, ["eval", "tinylm.gguf", "--prompt", "five six seven eight nine.", "--json"]
    )
    assert json.loads(scored.stdout)["perplexity"] < 3.0
    tuned = toycards.load("tinylm-2.gguf", target="numpy")
    assert tuned.hp["d_e"] == 32 and tuned.tokenizer.vocab_size == 1024
