"""Hostile card text never runs: the reader refuses it, and codegen could not be injected anyway.

A card may come from a downloaded GGUF file (its `toycards.card` key), so its text is untrusted.
Each case puts a payload that would create a canary file, behind a character of one hostile class
(C0 controls, a lone carriage return, DEL, C1 controls with NEL, the line and paragraph separators,
the bidirectional-text controls), into one place of the library's Llama card: a name, the
description, a step comment, a preamble comment, a string binding, the algorithm's name.

- **First wall** (tests a–b): every command that generates or runs code — `gen`, `check`, `fmt`,
  `run` and `eval` with `--card` and with the card embedded in a GGUF file, `toycards.load`,
  `toycards.parse` — refuses the card with one located diagnostic (the line and column of the
  hostile character), exit 1, and the canary is never created. Hypothesis draws thousands of
  cases through `parse`.
- **Second wall** (tests c–e): with the reader's check switched off, the same cards parse; the
  generated module, on both targets, passes `verify_source` and its syntax tree is the benign
  card's (the same card with the hostile characters replaced by `_`) up to the names of
  identifiers and the text of strings; it runs to the benign card's logits; the canary is never
  created. A tampered cached module is refused before it runs.
"""

from __future__ import annotations

import ast
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from gguf_factory import write_gguf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_user_cards import IDS, tokenizer_kv, write_model

import toycards
from toycards.cli import main
from toycards.codegen.verify import verify_source
from toycards.lang import reading

ROOT = Path(__file__).resolve().parents[2]
LLAMA_CARD = (ROOT / "toycards" / "library" / "cards" / "llama.card").read_text(encoding="utf-8")

# one representative or more of each class the reader refuses
HOSTILE = {
    "C0": ["\x01", "\x07", "\x08", "\x0b", "\x0c", "\x1b", "\x1c", "\x1f"],
    "lone CR": ["\r"],
    "DEL": ["\x7f"],
    "C1": ["\x80", "\x85", "\x9b", "\x9f"],
    "separators": ["\u2028", "\u2029"],
    "bidi": ["\u061c", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e"]
    + ["\u2066", "\u2067", "\u2068", "\u2069"],
}
ALL_HOSTILE = [ch for chars in HOSTILE.values() for ch in chars]


def payload(canary: Path, ch: str) -> str:
    """Text that, if a line ended at `ch` in generated Python, would create `canary`."""
    return f"a{ch}open('{canary}','w').close()#"


def place(where: str, text: str) -> str:
    """The Llama card with `text` put in one place (`text` holds no braces and no double quote)."""
    edits = {
        "name": ("X̃", "X_{" + text + "}"),
        "description": ("no biases */", f"no biases {text} */"),
        "step comment": ("Q ← W_q^l · X̃\n", f"Q ← W_q^l · X̃  ▷ {text}\n"),
        "preamble": ("▷ Llama (general", f"▷ {text}\n▷ Llama (general"),
        "string binding": ('from "output_norm.weight"', f'from "output_norm.weight{text}"'),
        "algorithm name": ("P ← Llama(x", "P ← Llama_{" + text + "}(x"),
    }
    old, new = edits[where]
    assert old in LLAMA_CARD, old
    return LLAMA_CARD.replace(old, new)


PLACES = ("name", "description", "step comment", "preamble", "string binding", "algorithm name")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("injection")
    return {"llama": write_model(root / "llama.gguf", "llama"), "root": root}


@pytest.fixture(autouse=True)
def private_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TOYCARDS_CACHE", str(tmp_path / "cache"))


def embedded(path: Path, card_text: str) -> Path:
    """A Llama-shaped GGUF (random weights) whose `toycards.card` is `card_text`."""
    from test_user_cards import HP, KEYS, llama_weights

    kv = {f"llama.{KEYS[n][0]}": v for n, v in HP.items()}
    kv |= {"general.name": "tiny", "toycards.card": card_text} | tokenizer_kv()
    return write_gguf(path, kv=kv, tensors=llama_weights(), arch="llama")


def located_at_hostile(err: toycards.ToycardsError, text: str) -> None:
    """The error is one diagnostic at the first hostile character of `text`."""
    at = min(i for i, ch in enumerate(text) if ch in ALL_HOSTILE)
    assert len(err.diagnostics) == 1, str(err)
    span = err.diagnostics[0].span
    line = text.count("\n", 0, at) + 1
    col = at - (text.rfind("\n", 0, at) + 1) + 1
    assert (span.line, span.col) == (line, col), (span, line, col)
    assert re.search(
        r"(control character|bidirectional-text control) U\+[0-9A-F]{4}", err.diagnostics[0].message
    )


# ── (a) the first wall, drawn by hypothesis ──────────────────────────────────────────────────
@settings(max_examples=2000, deadline=None, database=None, derandomize=True)
@given(
    where=st.sampled_from(PLACES),
    chars=st.lists(st.sampled_from(ALL_HOSTILE), min_size=1, max_size=3),
    filler=st.text(alphabet="abc ()=;'", max_size=6),
)
def test_hostile_text_is_refused_where_it_stands(where, chars, filler):
    text = place(where, filler + "".join(chars) + "import os")
    with pytest.raises(toycards.ToycardsError) as info:
        toycards.parse(text)
    located_at_hostile(info.value, text)


# ── (b) every command, every class ───────────────────────────────────────────────────────────
def cli(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_refused(result, canary: Path) -> None:
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert re.search(r"(control character|bidirectional-text control) U\+", result.output), result.output
    assert not canary.exists()


@pytest.mark.parametrize("cls", sorted(HOSTILE))
@pytest.mark.parametrize("where", PLACES)
def test_every_command_refuses_a_hostile_card(files, tmp_path, cls, where):
    canary = tmp_path / "canary"
    text = place(where, payload(canary, HOSTILE[cls][-1]))
    card = tmp_path / "hostile.card"
    card.write_text(text, encoding="utf-8", newline="")
    model = embedded(tmp_path / "embedded.gguf", text)
    for args in (
        ("check", card),
        ("fmt", card),
        ("gen", card, "--target", "numpy", "-o", tmp_path / "out.py"),
        ("gen", model, "--target", "torch", "-o", tmp_path / "out2.py"),
        ("run", files["llama"], "--card", card, "-p", "Hi", "-n", "2"),
        ("eval", files["llama"], "--card", card, "-p", "Hi there"),
        ("run", model, "-p", "Hi", "-n", "2"),
        ("eval", model, "-p", "Hi there", "--target", "torch"),
    ):
        assert_refused(cli(*args), canary)
    assert card.read_bytes() == text.encode("utf-8")  # fmt wrote nothing
    assert not (tmp_path / "out.py").exists() and not (tmp_path / "out2.py").exists()
    for target in ("numpy", "torch", "reference"):
        with pytest.raises(toycards.ToycardsError):
            toycards.load(model, target=target).logits(IDS)
        with pytest.raises(toycards.ToycardsError):
            toycards.load(text, weights=files["llama"], target=target)
    assert not canary.exists()


def test_windows_line_ends_are_not_control_characters(files):
    """A card saved with \\r\\n line ends reads as the same card."""
    assert toycards.parse(LLAMA_CARD.replace("\n", "\r\n")) == toycards.parse(LLAMA_CARD)


# ── (c)–(e) the second wall: codegen and verification alone ───────────────────────────────────
@pytest.fixture
def no_first_wall(monkeypatch):
    monkeypatch.setattr(reading, "CONTROL", re.compile(r"(?!x)x"))  # matches nothing


def shape_of(source: str) -> str:
    """The module's syntax tree with identifiers numbered in order of appearance and every string
    constant blanked: two modules with the same shape differ only in names and texts."""
    tree = ast.parse(source)
    names: dict[str, str] = {}

    def rename(name: str) -> str:
        return names.setdefault(name, f"n{len(names)}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            node.id = rename(node.id)
        elif isinstance(node, ast.arg):
            node.arg = rename(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            node.name = rename(node.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = ""
    return ast.dump(tree)


def benign(text: str) -> str:
    return "".join("_" if ch in ALL_HOSTILE else ch for ch in text)


@pytest.mark.parametrize("where", PLACES)
@pytest.mark.parametrize("ch", ["\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029", "\x1b", "\u202e"])
def test_codegen_alone_writes_the_benign_module(no_first_wall, tmp_path, where, ch):
    canary = tmp_path / "canary"
    text = place(where, payload(canary, ch))
    card = toycards.parse(text)
    for target in ("numpy", "torch"):
        source = toycards.generate_source(card, target)
        verify_source(source)
        assert shape_of(source) == shape_of(toycards.generate_source(toycards.parse(benign(text)), target))
    assert not canary.exists()


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    where=st.sampled_from(PLACES),
    text=st.text(
        alphabet=st.sampled_from([*ALL_HOSTILE, "a", " ", "'", "(", ")", "#", ";", "=", "\\"]), min_size=1
    ),
)
def test_codegen_alone_drawn(no_first_wall, where, text):
    card_text = place(where, "q" + text)
    try:
        card = toycards.parse(card_text)
    except toycards.ToycardsError:
        return  # not a card for another reason (a quote or a `#` where the grammar wants none)
    source = toycards.generate_source(card, "numpy")
    verify_source(source)
    assert shape_of(source) == shape_of(toycards.generate_source(toycards.parse(benign(card_text)), "numpy"))


@pytest.mark.parametrize("target", ["numpy", "torch"])
@pytest.mark.parametrize("where", ["name", "description", "step comment", "algorithm name"])
def test_codegen_alone_runs_the_benign_numbers(no_first_wall, files, tmp_path, where, target):
    canary = tmp_path / "canary"
    text = place(where, payload(canary, "\r") + payload(canary, "\u2028"))
    got = toycards.load(text, weights=files["llama"], target=target).logits(IDS)
    want = toycards.load(benign(text), weights=files["llama"], target=target).logits(IDS)
    np.testing.assert_array_equal(got, want)
    assert not canary.exists()


def test_a_hostile_string_binding_is_a_missing_tensor(no_first_wall, files, tmp_path):
    canary = tmp_path / "canary"
    text = place("string binding", payload(canary, "\r"))
    with pytest.raises(toycards.ToycardsError, match="output_norm.weight"):
        toycards.load(text, weights=files["llama"], target="numpy")
    assert not canary.exists()


def test_a_tampered_cached_module_is_refused(files, tmp_path):
    canary = tmp_path / "canary"
    want = toycards.load(files["llama"], target="numpy").logits(IDS)
    entries = list((tmp_path / "cache").glob("module-numpy-*.pickle"))
    assert len(entries) == 1
    source = pickle.loads(entries[0].read_bytes())
    entries[0].write_bytes(pickle.dumps(source + f"\nopen('{canary}', 'w').close()\n"))
    with pytest.raises(toycards.ToycardsError, match="generated code refused"):
        toycards.load(files["llama"], target="numpy")
    assert not canary.exists()
    entries[0].write_bytes(pickle.dumps(source))  # the cache as it was: the same numbers
    np.testing.assert_array_equal(toycards.load(files["llama"], target="numpy").logits(IDS), want)


@pytest.mark.parametrize(
    "line, refused",
    [
        ("import os", "imports 'import os'"),
        ("from toycards.engine import packing as ops", "imports"),
        ("x = __import__('os')", "the name `__import__`"),
        ("x = ().__class__", "the attribute `__class__`"),
        ("x = eval('1')", "calls the builtin `eval`"),
        ("x = getattr(ops, 'fast')", "calls the builtin `getattr`"),
        ("x = np.load('f.npy')", "`np.load`"),
        ("x = torch.load('f.pt')", "`torch.load`"),
        ("x = math.__dict__", "the attribute `__dict__`"),
        ("x = ops.fast.gi_frame", "the attribute `.gi_frame`"),
        ("with ops.fast:\n    pass", "a With node"),
        ("try:\n    pass\nexcept Exception:\n    pass", "a Try node"),
        ("x = b'bytes'", "a bytes constant"),
        ("def f(*a):\n    return a", "*args"),
        ("@ops.fast\ndef f():\n    return 1", "decorated"),
        ("class C(object):\n    pass", "a class on object"),
        ("x = [y for y in ()] if (z := 1) else 0", "a NamedExpr node"),
    ],
)
def test_verify_refuses_what_the_emitter_never_writes(line, refused):
    with pytest.raises(toycards.ToycardsError, match=re.escape(refused)):
        verify_source("import math\n" + line + "\n")


def test_every_library_module_verifies():
    """The rules admit everything the emitter writes for the library (the random cards' property
    tests run every module through them too, as load verifies each)."""
    from toycards.library import card_names, library_card

    for name in card_names():
        card = library_card(name)
        if name in ("prelude", "paper"):  # building blocks; the paper's card binds no tensors
            continue
        for target in ("numpy", "torch"):
            verify_source(toycards.generate_source(card, target))
