"""The renderings of a card: Markdown, LaTeX, HTML, JSON and the terminal's colours.

Oracles: hand-written expected fragments (how the paper typesets `γ_l^1`, `ℝ^{d_e×ℓ}`, `⊙`),
structural checks that do not trust our code (GitHub table columns, HTML tag balance through
the standard library's parser, LaTeX environment and brace balance, `pdflatex` when installed),
and the card text itself (every name, tensor and step must appear).
"""

from __future__ import annotations

import html
import io
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given, settings
from test_roundtrip_property import cards

from toycards.errors import Diagnostic, Span, ToycardsError, format_diagnostic
from toycards.lang import ir
from toycards.lang.parse import parse
from toycards.lang.printer import render_card
from toycards.render.html import render_html
from toycards.render.json import parse_json, render_json
from toycards.render.latex import latex_name, render_latex
from toycards.render.markdown import render_markdown
from toycards.render.terminal import diagnostic_text, highlight_card, print_card, print_diagnostics

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")
LIBRARY = sorted((Path(__file__).resolve().parents[2] / "toycards" / "library" / "cards").glob("*.card"))
# README: "500 examples each" when CI is set
RENDER_SETTINGS = settings(max_examples=500 if os.environ.get("CI") else 40, deadline=None)

# A card with every construct, and text that would break each format if left unescaped.
HOSTILE = parse(
    """toycards 1
▷ <script>alert(1)</script> & 50% of $d_e$ | pipes | `ticks` # \\ {braces} ~ ^
Algorithm 3: Y ← demo(X, Z | W_q, γ_l^1, Mask)
/* the <b>demo</b>: x_1 * y | z & 100% */
Input:
  X ∈ ℝ^{d_e×ℓ_x}  ▷ a | b <i>
  Z ∈ ℝ^{d_e×ℓ_z}
Output: Y ∈ ℝ^{d_e×ℓ_x}
Hyperparameters:
  L ∈ ℕ             from "{arch}.block_count"
  H ∈ ℕ = 4         from "{arch}.head_count" default 1  ▷ heads & more
  d_h ∈ ℕ           ≔ d_e / H
  mode ∈ {none, linear}  from "a|b`c" default none
  Mask ∈ {0,1}^{ℓ_z×ℓ_x}
Parameters:
  W_q ∈ ℝ^{d_e×d_e}  from "attn_q.weight"^⊺ or "q_%$#.weight"
  for l ∈ [L], in "blk.{l-1}.":
    γ_l^1, β_l^1 ∈ ℝ^{d_e}  from "attn_norm.weight", "attn_norm.bias" or 1  ▷ <norm>
 1  X̃ ← W_q · X ⊙ X + (X)^2 − √X / 2 ∷ ℝ^{d_e×ℓ_x}  ▷ uses ⊙, ^, √ & <, >
 2  for t ∈ [ℓ_x]: if t mod 2 = 0 then X̃[:, t] ← −X̃[:, t]
 3  S ← Z^⊺ · X̃ / √d_h + Σ_{i=1}^{H} ⟦i ≤ 2⟧ · 1e-5
 4  for l = 1, 2, …, L do
 5    if mode = linear ∧ ¬(l > 3) then
 6      X̃ ← layer_norm(X̃ | γ_l^1, β_l^1, 1e-5)
 7    else  ▷ "quoted" </td>
 8      X̃ ← [X̃[:, 1:2], X̃[:, 3:]] + [e_1, …, e_ℓ_x]
 9    end
10  end
11  for h ∈ [H] do
12    Y^h ← attention(rows(X̃, h, d_h), Z, Z | Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧)
13  end
14  return Y = [Y^1; …; Y^H] + ⌈∞⌉ · π · "x<y"
""",
    file="hostile.card",
)


def _cards():
    return [pytest.param(parse(p), id=p.stem) for p in LIBRARY] + [pytest.param(HOSTILE, id="hostile")]


# ── Markdown ────────────────────────────────────────────────────────────────────────────
def _table_rows(md: str) -> list[list[str]]:
    """Rows of the GitHub tables: cells split on unescaped `|`."""
    rows = []
    for line in md.splitlines():
        if line.startswith("| "):
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


@pytest.mark.parametrize("card", _cards())
def test_markdown_tables_and_steps(card):
    md = render_markdown(card)
    for row in _table_rows(md):
        assert len(row) == 4, f"a table row with {len(row)} cells: {row}"
    for a in card.algorithms:
        assert f"`{render_card(card).splitlines()[0]}`" not in md  # no version line in Markdown
        assert any(line.startswith("## Algorithm") and a.name in line for line in md.splitlines())
        for decl, _group in a.all_params():
            for name in decl.names:
                assert f"| `{name}` |" in md, f"parameter {name} has no table row"
            for group in decl.binding.sources if decl.binding else ():
                for s in group:
                    assert s.tensor.replace("|", "\\|") in md
    fences = re.findall(r"^(`{3,})text\n(.*?)^\1$", md, re.S | re.M)
    assert len(fences) == sum(bool(a.body) for a in card.algorithms)


def test_markdown_escapes_prose_and_cells():
    md = render_markdown(HOSTILE)
    assert "\\<script\\>" in md and "<script>" not in md.replace("\\<script\\>", "")
    assert '| `H` | `ℕ = 4` | `from "{arch}.head_count" default 1` | heads & more |' in md
    assert '``from "a\\|b`c" default none``' in md
    assert "Per layer `l ∈ [L]`, tensor names under `blk.{l-1}.`:" in md
    # one row per name when a declaration binds several names
    assert '| `γ_l^1` | `ℝ^{d_e}` | `from "attn_norm.weight"` | \\<norm\\> |' in md
    assert '| `β_l^1` | `ℝ^{d_e}` | `from "attn_norm.bias" or 1` | \\<norm\\> |' in md


# ── HTML ────────────────────────────────────────────────────────────────────────────────
class _TagBalance(HTMLParser):
    VOID = {"meta", "br", "hr", "img", "input", "link"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1:]}>"
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def _html_parse(page: str) -> _TagBalance:
    p = _TagBalance()
    p.feed(page)
    p.close()
    assert not p.stack, f"unclosed tags {p.stack}"
    return p


@pytest.mark.parametrize("card", _cards())
def test_html_is_balanced_and_escaped(card):
    page = render_html(card, standalone=True)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    p = _html_parse(page)
    allowed = {"html", "head", "meta", "title", "style", "body", "section", "h2", "p", "b", "table",
               "tr", "th", "td", "var", "sub", "sup", "i", "code", "span"}  # fmt: skip
    assert set(p.tags) <= allowed, set(p.tags) - allowed
    assert "\ue000" not in page and "\ue001" not in page


def test_html_names_and_hostile_text():
    page = render_html(HOSTILE, standalone=True)
    p = _html_parse(page)
    assert "script" not in p.tags
    text = "".join(p.text)
    assert "<script>alert(1)</script>" in text  # shown as text, not markup
    assert '"quoted" </td>' in text
    assert "<var>γ</var><sub>l</sub><sup>1</sup>" in page
    assert "<var>W</var><sub>q</sub>" in page
    assert "<i>layer_norm</i>(" in page
    assert "ℝ<sup><var>d</var><sub>e</sub>×<var>ℓ</var><sub>x</sub></sup>" in page
    fragment = render_html(HOSTILE)
    assert "<html" not in fragment and fragment.startswith("<p")


# ── LaTeX ───────────────────────────────────────────────────────────────────────────────
def _assert_balanced_latex(tex: str) -> None:
    envs = re.findall(r"\\(begin|end)\{(\w+)\}", tex)
    stack: list[str] = []
    for kind, env in envs:
        if kind == "begin":
            stack.append(env)
        else:
            assert stack and stack[-1] == env, f"\\end{{{env}}} closes {stack[-1:]}"
            stack.pop()
    assert not stack, f"unclosed environments {stack}"
    assert tex.count(r"\For{") == tex.count(r"\EndFor")
    assert tex.count(r"\If{") == tex.count(r"\EndIf")
    for n, line in enumerate(tex.splitlines(), 1):
        if line.startswith("%"):
            continue
        bare = re.sub(r"\\[{}$%&#_]", "", line)
        depth = 0
        for ch in bare:
            depth += {"{": 1, "}": -1}.get(ch, 0)
            assert depth >= 0, f"line {n}: a }} closes nothing: {line}"
        assert depth == 0, f"line {n}: unbalanced braces: {line}"
        assert bare.count("$") % 2 == 0, f"line {n}: odd number of $: {line}"
        assert all(ord(c) < 128 for c in line), f"line {n}: non-ASCII for pdflatex: {line}"


@pytest.mark.parametrize("card", _cards())
def test_latex_is_balanced(card):
    tex = render_latex(card, standalone=True)
    _assert_balanced_latex(tex)
    assert tex.count(r"\begin{algorithm}") == len(card.algorithms)


def test_latex_typesets_like_the_paper():
    tex = render_latex(HOSTILE)
    for fragment in [
        r"\renewcommand{\thealgorithm}{3}",
        r"\caption{$Y \leftarrow \mathrm{demo}(X, Z \mid W_{q}, \gamma_{l}^{1}, \mathrm{Mask})$}",
        r"\begin{algorithmic}[1]",
        r"\Statex \hspace*{\algorithmicindent}$X \in \mathbb{R}^{d_{e} \times \ell_{x}}$ \hfill {\small $\triangleright$ a \ensuremath{|} b \ensuremath{<}i\ensuremath{>}}",
        r"$\mathrm{mode} \in \{\mathrm{none}, \mathrm{linear}\}$",
        r"$d_{h} \in \mathbb{N}$ ${} \coloneqq d_{e} / H$",
        r"\texttt{attn\_q.weight}$^\top$ or \texttt{q\_\%\$\#.weight}",
        r"\For{$l = 1, 2, \dots, L$}",
        r"\If{$\mathrm{mode} = \mathrm{linear} \wedge \neg l > 3$}",
        r"\Else \Comment{\texttt{\char34}quoted\texttt{\char34} \ensuremath{<}/td\ensuremath{>}}",
        r"\EndIf",
        r"\State \textbf{for} $t \in [\ell_{x}]$: \textbf{if} $t \bmod 2 = 0$ \textbf{then} $\tilde{X}[:, t] \leftarrow -\tilde{X}[:, t]$",
        r"W_{q} \cdot  X \odot X",
        r"+ {X}^{2} - ",
        r"\sqrt{X} / 2",
        r"\Comment{$\in \mathbb{R}^{d_{e} \times \ell_{x}}$; uses ",
        r"{Z}^\top \cdot  \tilde{X} / \sqrt{d_{h}} + \sum_{i=1}^{H} [\![i \le 2]\!] \cdot  10^{-5}",
        r"\mathrm{layer\_norm}(\tilde{X} \mid \gamma_{l}^{1}, \beta_{l}^{1}, 10^{-5})",
        r"[e_{1}, \dots, e_{\ell_{x}}]",
        r"\mathrm{Mask}[t_{z}, t_{x}] = [\![t_{z} \le t_{x}]\!]",
        r"\State \Return $Y = [Y^{1}; \dots; Y^{H}] + \lceil \infty \rceil \cdot  \pi \cdot  \text{``x\ensuremath{<}y''}$",
        r"% <script>alert(1)</script>",
    ]:
        assert fragment in tex, fragment


@pytest.mark.parametrize(
    "name,expected",
    [("γ_l^1", r"\gamma_{l}^{1}"), ("d_e", r"d_{e}"), ("ℓ", r"\ell"), ("X̃", r"\tilde{X}"),
     ("ê", r"\hat{e}"), ("W_qkv^l", r"W_{\mathrm{qkv}}^{l}"), ("ℓ_max", r"\ell_{\mathrm{max}}"),
     ("K^{⌈h·H_kv/H⌉}", r"K^{\lceil h\cdot H_{\mathrm{kv}}/H\rceil}"), ("e_{ℓ_z}", r"e_{\ell_{z}}"),
     ("β1", r"{\beta}1"), ("Mask", r"\mathrm{Mask}"), ("θ_base", r"\theta_{\mathrm{base}}")],
)  # fmt: skip
def test_latex_names(name, expected):
    assert latex_name(name) == expected


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
@pytest.mark.parametrize("card", _cards())
def test_latex_compiles(card, tmp_path):
    (tmp_path / "card.tex").write_text(render_latex(card, standalone=True), encoding="utf-8")
    run = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "card.tex"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    errors = [line for line in run.stdout.splitlines() if line.startswith("!")]
    assert run.returncode == 0, errors or run.stdout[-2000:]


# ── JSON ────────────────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize("card", _cards())
def test_json_round_trip(card):
    text = render_json(card)
    assert json.loads(text)["node"] == "Card"
    assert parse_json(text) == card


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("{", "not valid JSON"),
        ('{"node": "Nonsense"}', "unknown node kind"),
        ('{"node": "Name", "id": "x"}', "holds a Name, not a Card"),
        ('{"node": "Card", "algorithms": [], "version": 9, "preamble": []}', "version 9"),
        ('{"node": "Card", "bogus": 1}', "not a toycards IR"),
        ("[1, 2]", "not a Card"),
    ],
)
def test_json_errors(text, fragment):
    with pytest.raises(ToycardsError, match=re.escape(fragment)):
        parse_json(text)


# ── renderers never crash on any card ───────────────────────────────────────────────────
@RENDER_SETTINGS
@given(cards)
def test_every_format_renders_generated_cards(card):
    _assert_balanced_latex(render_latex(card, standalone=True))
    _html_parse(render_html(card, standalone=True))
    for row in _table_rows(render_markdown(card)):
        assert len(row) == 4, row
    assert parse_json(render_json(card)) == card


# ── terminal ────────────────────────────────────────────────────────────────────────────
SOURCE = "Algorithm: y ← f(x)\nInput: x ∈ ℝ\n1 y ← x + z\n"
DIAG = Diagnostic(Span("t.card", 3, 11, 3, 12, 0, 0), "unknown name z", "did you mean x?")


def test_plain_diagnostics_match_the_plain_format():
    out = io.StringIO()
    print_diagnostics([DIAG], {"t.card": SOURCE}, out, colour=False)
    assert out.getvalue() == format_diagnostic(DIAG, SOURCE) + "\n"
    assert out.getvalue() == (
        "t.card:3:11: error: unknown name z\n  1 y ← x + z\n            ^\n  hint: did you mean x?\n"
    )


def test_coloured_diagnostics_have_the_same_characters():
    assert diagnostic_text(DIAG, SOURCE).plain == format_diagnostic(DIAG, SOURCE)
    out = io.StringIO()
    print_diagnostics([DIAG], {"t.card": SOURCE}, out, colour=True)
    coloured = out.getvalue()
    assert "\x1b[" in coloured
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == format_diagnostic(DIAG, SOURCE) + "\n"


def test_card_view_plain_is_byte_exact_and_coloured_only_adds_styles():
    text = render_card(HOSTILE)
    out = io.StringIO()
    print_card(text, out, colour=False)
    assert out.getvalue() == text
    assert highlight_card(text).plain == text
    out = io.StringIO()
    print_card(text, out, colour=True)
    assert re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue()) == text


def test_unescaped_ampersand_is_absent_from_html_text_nodes():
    page = render_html(HOSTILE, standalone=True)
    body = page[page.index("<body>") :]
    assert not re.search(r"&(?![a-zA-Z]+;|#x?[0-9a-fA-F]+;)", body), "a raw & in the page"
    assert html.unescape("&lt;script&gt;") in "".join(_html_parse(page).text)


def test_markdown_heading_per_algorithm_in_order():
    md = render_markdown(HOSTILE)
    assert md.splitlines()[2] == "## Algorithm 3: `Y ← demo(X, Z | W_q, γ_l^1, Mask)`"
    assert isinstance(parse_json(render_json(HOSTILE)).main, ir.Algorithm)
