"""Block diagrams (render/diagram.py): every library card draws, the drawing shows the card.

The oracle for which steps exist is the card's printed text (lang/printer.py numbers every line;
a numbered line that is not `for … do`, `if … then`, `else` or `end` is a step), read here with
a regular expression, not through the IR walk the diagram uses; the edges and residual paths of
llama.card are written out by hand from its steps. The pure-Python layout is the one every
machine has and is tested on every card; Graphviz dot's when `dot` is installed.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from cli_run import cli, one_error
from gguf_factory import write_gguf

from toycards.lang.parse import parse
from toycards.lang.printer import render_card
from toycards.library import library_algorithms
from toycards.render.diagram import diagram_html, render_svg
from toycards.render.diagram_dot import dot_available

SVG = "{http://www.w3.org/2000/svg}"
LIBRARY = sorted((Path(__file__).resolve().parents[2] / "toycards" / "library" / "cards").glob("*.card"))
BLOCK = re.compile(r"^(for .* do|if .* then|else|end)$")


def _classes(el: ET.Element) -> set[str]:
    return set(el.get("class", "").split())


def _diagrams(svg: str) -> dict[str, ET.Element]:
    root = ET.fromstring(svg.split("\n", 1)[1] if svg.startswith("<?xml") else svg)
    return {g.get("data-algorithm"): g for g in root.iter(f"{SVG}g") if "diagram" in _classes(g)}


def _steps(card_text: str) -> dict[str, dict[int, str]]:
    """Per algorithm of a printed card, its steps: number → text (block lines left out)."""
    out: dict[str, dict[int, str]] = {}
    current = None
    for line in card_text.splitlines():
        head = re.match(r"^Algorithm(?: \w+)?: \S+ ← ([^(]+)\(", line)
        if head:
            current = out.setdefault(head.group(1), {})
            continue
        m = re.match(r"^\s*(\d+)  (.*)$", line)
        if m and current is not None:
            text = re.split(r"\s+(?:∷|▷)\s", m.group(2).strip())[0].strip()
            if not BLOCK.match(text):
                current[int(m.group(1))] = text
    return out


def _nodes(g: ET.Element, *kinds: str) -> list[ET.Element]:
    return [n for n in g.iter(f"{SVG}g") if "node" in _classes(n) and _classes(n) & set(kinds)]


def _box(node: ET.Element) -> tuple[float, float, float, float]:
    r = node.find(f"{SVG}rect")
    return tuple(float(r.get(k)) for k in ("x", "y", "width", "height"))


def _overlap(a, b) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


ENGINES = [
    "python",
    pytest.param("dot", marks=pytest.mark.skipif(not dot_available(), reason="no Graphviz dot")),
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("path", LIBRARY, ids=[p.stem for p in LIBRARY])
def test_every_library_card_draws_its_steps(path, engine):
    card = parse(path)
    svg = render_svg(card, engine=engine)
    diagrams = _diagrams(svg)
    steps = _steps(render_card(card))
    callable_names = set(library_algorithms()) | {a.name for a in card.algorithms}
    for algo in card.algorithms:
        g = diagrams[algo.name]
        assert g.get("data-layout") == engine
        drawn = {int(n.get("data-step")): n for n in _nodes(g, "step", "call")}
        assert sorted(drawn) == sorted(steps[algo.name]), f"{algo.name}: steps drawn ≠ steps of the card"
        for number, text in steps[algo.name].items():
            calls = {name for name in callable_names if re.search(rf"(?<![\w]){re.escape(name)}\(", text)}
            assert ("call" in _classes(drawn[number])) == bool(calls), f"{algo.name} step {number}: {text}"
            if calls:
                assert set(drawn[number].get("data-calls").split()) == calls
        boxes = [_box(n) for n in _nodes(g, "input", "state", "param", "step", "call", "output")]
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                assert not _overlap(a, b), f"{algo.name}: boxes {a} and {b} overlap"
    for name, g in diagrams.items():  # every call links to a diagram that is drawn
        for link in g.iter(f"{SVG}a"):
            target = link.get("href").removeprefix("#")
            assert any(d.get("id") == target for d in diagrams.values()), f"{name}: dangling link {target}"


def _edges(g: ET.Element) -> set[tuple[str, str, str, bool]]:
    prefix = g.get("id") + "-"
    return {
        (e.get("data-from").removeprefix(prefix), e.get("data-to").removeprefix(prefix), e.get("data-var"),
         "skip" in _classes(e))
        for e in g.iter(f"{SVG}g")
        if "edge" in _classes(e)
    }  # fmt: skip


@pytest.mark.parametrize("engine", ENGINES)
def test_llama_edges_residuals_and_one_loop(engine):
    g = _diagrams(render_svg(parse(LIBRARY[[p.stem for p in LIBRARY].index("llama")]), engine))["Llama"]
    # llama.card, by hand: the value each step reads, from the step that last defined it
    want = {
        ("in1", "s1", "x"), ("in1", "s2", "x"), ("s2", "s3", "e_t"), ("s3", "s7", "X"), ("s3", "s12", "X"),
        ("s7", "s8", "X̃"), ("s7", "s9", "X̃"), ("s7", "s10", "X̃"), ("s4", "s11", "ρ̃"), ("s5", "s11", "m"),
        ("s8", "s11", "Q"), ("s9", "s11", "K"), ("s10", "s11", "V"), ("s11", "s12", "Y"), ("s12", "s13", "X"),
        ("s12", "s14", "X"), ("s13", "s14", "X̃"), ("s14", "s16", "X"), ("s16", "s17", "X"), ("s17", "s18", "Z"),
        ("s18", "out", "P"),
    }  # fmt: skip
    residuals = {("s3", "s12"), ("s12", "s14")}  # X ← X + …: the X from before the block
    assert _edges(g) == {(a, b, v, (a, b) in residuals) for a, b, v in want}
    shapes = {e.get("data-to"): e.get("data-shape") for e in g.iter(f"{SVG}g") if e.get("data-var") == "Y"}
    assert shapes == {f"{g.get('id')}-s12": "ℝ^{H·d_h×ℓ}"}  # the checker's shape of Y
    loops = [c for c in g.iter(f"{SVG}g") if _classes(c) >= {"cluster", "loop"}]
    assert len(loops) == 1 and loops[0].get("data-count") == "× L"
    assert "× L" in "".join(loops[0].itertext())
    box = _box(loops[0])
    inside = {int(n.get("data-step")) for n in _nodes(g, "step", "call") if _within(_box(n), box)}
    assert inside == set(range(7, 15)), "the loop's box holds exactly steps 7–14"
    params = {p.get("data-name") for p in _nodes(g, "param")}
    assert {"W_e", "γ_l^1", "W_q^l", "W_down^l", "W_u", "ρ"} <= params


def _within(a, b) -> bool:
    return b[0] <= a[0] and a[0] + a[2] <= b[0] + b[2] and b[1] <= a[1] and a[1] + a[3] <= b[1] + b[3]


def test_branches_side_by_side_and_a_bound_count():
    """gemma3's local/global attention: the two branches of its `if` on one row, in two boxes."""
    g = _diagrams(render_svg(parse(LIBRARY[[p.stem for p in LIBRARY].index("gemma3")]), "python"))["Gemma3"]
    then, orelse = (
        next(c for c in g.iter(f"{SVG}g") if _classes(c) >= {"cluster", kind}) for kind in ("then", "else")
    )
    a, b = _box(then), _box(orelse)
    assert a[1] == b[1] and a[0] + a[2] < b[0], "the branches sit side by side"
    assert {("s17", "s21", "Y", False), ("s19", "s21", "Y", False)} <= _edges(g)  # Y from either branch
    bound = parse(
        LIBRARY[[p.stem for p in LIBRARY].index("llama")].read_text().replace("L ∈ ℕ  ", "L ∈ ℕ = 16")
    )
    loop = next(
        c for c in _diagrams(render_svg(bound, "python"))["Llama"].iter(f"{SVG}g") if "loop" in _classes(c)
    )
    assert loop.get("data-count") == "× L = 16"


# A card as a GGUF file may carry it: every text of it is someone else's.
HOSTILE_CARD = """toycards 1
Algorithm: y ← Evil(x | θ)
/* <script>alert("d")</script> & 'quotes' */
Input: x ∈ ℝ^{d}  ▷ <script>alert(1)</script>
Output: y ∈ ℝ^{d}
Hyperparameters:
  d ∈ ℕ  from "{arch}.embedding_length"
  mode ∈ 𝕊  from "{arch}.mode" default "a"
Parameters:
  W ∈ ℝ^{d×d}  from "<script>.weight"
1  h ← W · x  ▷ "quoted" </title><script>alert(2)</script>
2  if mode = "</text><script>x</script>'" then h ← h + x
3  return y = h
"""


def test_a_hostile_card_from_a_gguf_file_comes_out_escaped(tmp_path):
    path = write_gguf(
        tmp_path / "evil.gguf",
        kv={"toycards.card": HOSTILE_CARD, "evil.embedding_length": 4},
        tensors={"<script>.weight": np.zeros((4, 4), np.float32)},
        arch="evil",
    )
    result = cli("describe", path, "--format", "svg")
    assert result.exit_code == 0, result.output
    root = ET.fromstring(result.stdout.split("\n", 1)[1])  # well-formed: every text escaped
    assert not [e for e in root.iter() if e.tag.split("}")[-1] in ("script", "foreignObject")]
    texts = "".join(root.itertext())
    assert "<script>alert(2)</script>" in texts and "</text><script>x</script>'" in texts  # as text
    assert "<script>alert" not in result.stdout  # the raw markup never appears
    page = cli("describe", path, "--format", "html").stdout
    assert "<svg" in page and "<script>" not in page


def test_render_and_describe_commands(tmp_path, monkeypatch):
    out = tmp_path / "llama.svg"
    result = cli("render", "llama", "--format", "svg", "--layout", "python", "-o", out)
    assert result.exit_code == 0, result.output
    diagrams = _diagrams(out.read_text(encoding="utf-8"))
    assert set(diagrams) >= {"Llama", "GQAttention", "rms_norm"}
    assert {g.get("data-layout") for g in diagrams.values()} == {"python"}
    monkeypatch.setattr("toycards.render.diagram_dot.dot_available", lambda: False)
    assert "needs Graphviz" in one_error(cli("render", "llama", "--format", "svg", "--layout", "dot"))
    page = cli("render", "llama", "--format", "html").stdout
    section = page[page.index('<section class="diagram"') :]
    assert section.count("<svg") == 1 and "Llama" in section
    assert diagram_html(parse(LIBRARY[0])).startswith('<section class="diagram" id="diagram">')
