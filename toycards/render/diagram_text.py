"""Typesetting for diagrams: labels as runs of text with sub- and superscripts, their widths, and
the size of every node.

Owns: turning a label marked by diagram_graph.Marked (`γ_l^1`, `Σ_{i=1}^{d_e}`) or a shape
(`ℝ^{d_e×ℓ}`) into runs (text, level, style), a run list as a `<text>` of `<tspan>`s
(`text_svg`), escaping for XML (`xml`: quotes included, characters XML 1.0 cannot hold dropped),
the estimated width of text (the advance widths of DejaVu Sans, which the labels ask for first,
rounded up: an SVG writer has no font metrics), and `sizes(diagram)`, each node's box and the
stack of its parameters, which the layouts read.
Leaves out: colours and the drawing (diagram_svg.py), positions (diagram_layout.py).

>>> [r[:2] for r in name_runs("γ_l^1")]
[('γ', ''), ('l', 'sub'), ('1', 'sup')]
>>> [r[:2] for r in math_runs("ℝ^{d_e×ℓ}")]
[('ℝ', ''), ('d', 'sup'), ('e', 'supsub'), ('×ℓ', 'sup')]
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from toycards.lang.names import split_name
from toycards.render.diagram_graph import END_FUNC, END_NAME, FUNC, MARKS, NAME, Diagram, Node, plain

FONT = "'DejaVu Sans', 'Segoe UI', 'Helvetica Neue', Arial, sans-serif"
CODE = 12.5  # px: labels of nodes
SMALL = 10.5  # px: shapes on edges and parameters
# Advance widths in em of DejaVu Sans (which has every symbol the cards use), rounded up to a few
# classes; other fonts of the list are narrower. Combining accents take none, wide characters 1.
ADVANCE = {
    0.30: "ijlIJ'",
    0.34: " ,.·:;|/",
    0.41: "f()[]⌈⌉trℓ-",
    0.50: '_*⟦⟧"⊺',
    0.55: "cszε",
    0.62: "kvxyλγπτaeoθδLFPTY",
    0.64: "bdghnpqu0123456789ρμσβ{}∷√ΣES",
    0.70: "ABCKRVXZαΔ",
    0.79: "DGHNOQUℤ∧∨ℝℕ▷",
    0.84: "←×=+⊙−≤≥≠¬~^<>↓∞ω",
    0.88: "∈",
    1.00: "mwMW…",
}
_WIDTH = {c: w for w, chars in ADVANCE.items() for c in chars}
LINE = 17  # px between the lines of a node
PAD_X, PAD_Y = 10, 7
PILL_H, PILL_GAP, PILL_SPACE = 20, 4, 24  # a parameter's height, between two, before the step

TEXT, MUTED = "#1f2328", "#6a737d"  # the colour of labels, of shapes and notes

# level of a run → (size relative to the line, baseline shift in em; positive is down)
LEVELS = {
    "": (1.0, 0.0),
    "sub": (0.72, 0.28),
    "sup": (0.72, -0.42),
    "supsub": (0.6, -0.22),
    "subsup": (0.6, 0.02),
    "subsub": (0.6, 0.45),
    "supsup": (0.6, -0.62),
}
Run = tuple[str, str, str]  # (text, level, style: "" or "fn")

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_NAME = re.compile(r"[^\W\d_](?:[^\W_]|[\u0300-\u036f])*(?:_(?:[^\W_]|[\u0300-\u036f])+)?")
_GROUP = re.compile(r"\^\{([^{}]*)\}|\^((?:[^\W_]|[\u0300-\u036f])+)")


def xml(text: str) -> str:
    """Text for an XML document: escaped, quotes included, and without characters XML 1.0 cannot
    hold or the label marks.

    >>> xml('<script>"x" & \\'y\\'\\x07')
    '&lt;script&gt;&quot;x&quot; &amp; &#39;y&#39;'
    """
    text = _NOT_XML.sub("", plain(text))
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    ).replace("'", "&#39;")


# ── typesetting ─────────────────────────────────────────────────────────────────────────
def _child(level: str, kind: str) -> str:
    return kind if not level else (level + kind if level in ("sub", "sup") else level)


def name_runs(name: str, level: str = "", style: str = "") -> list[Run]:
    """A name as base, subscript and superscript runs."""
    base, sub, sup = split_name(name)
    runs = [(base, level, style)]
    if sub:
        runs.append((sub, _child(level, "sub"), style))
    if sup:
        runs.append((sup, _child(level, "sup"), style))
    return runs


def math_runs(text: str, level: str = "") -> list[Run]:
    """A type or shape as the card writes it (`ℝ^{H·d_h×ℓ}`, `V^ℓ`), exponents raised and names
    with subscripts typeset."""
    runs: list[Run] = []
    at = 0
    for m in _GROUP.finditer(text):
        runs += _names(text[at : m.start()], level)
        runs += _names(m.group(1) if m.group(1) is not None else m.group(2), _child(level, "sup"))
        at = m.end()
    return _merge(runs + _names(text[at:], level))


def _names(text: str, level: str) -> list[Run]:
    runs: list[Run] = []
    at = 0
    for m in _NAME.finditer(text):
        runs.append((text[at : m.start()], level, ""))
        runs += name_runs(m.group(0), level)
        at = m.end()
    return runs + [(text[at:], level, "")]


_TOKEN = re.compile(
    f"{NAME}([^{MARKS}]*){END_NAME}|{FUNC}([^{MARKS}]*){END_FUNC}|([_^])\\{{|\\}}"
    r"|\^((?:[^\W_]|[\u0300-\u036f])+)|[^_^{}" + MARKS + "]+|."
)


def marked_runs(text: str) -> list[Run]:
    """Runs of a label marked by diagram_graph.Marked: names typeset, function names in italics,
    `_{…}` and `^{…}` (a Σ's bounds) and `^2` lowered and raised.

    >>> [r[:2] for r in marked_runs(f"Σ_{{{NAME}i{END_NAME}=1}}^{{{NAME}d_e{END_NAME}}} x^2")]
    [('Σ', ''), ('i=1', 'sub'), ('d', 'sup'), ('e', 'supsub'), (' x', ''), ('2', 'sup')]
    """
    runs: list[Run] = []
    levels = [""]
    for m in _TOKEN.finditer(text):
        name, func, open_, power = m.group(1), m.group(2), m.group(3), m.group(4)
        if name is not None:
            runs += name_runs(name, levels[-1])
        elif func is not None:
            runs.append((func, levels[-1], "fn"))
        elif open_ is not None:
            levels.append(_child(levels[-1], "sub" if open_ == "_" else "sup"))
        elif m.group(0) == "}" and len(levels) > 1:
            levels.pop()
        elif power is not None:
            runs.append((power, _child(levels[-1], "sup"), ""))
        else:
            runs.append((plain(m.group(0)), levels[-1], ""))
    return _merge(runs)


def _merge(runs: list[Run]) -> list[Run]:
    out: list[Run] = []
    for r in runs:
        if not r[0]:
            continue
        if out and out[-1][1:] == r[1:]:
            out[-1] = (out[-1][0] + r[0], *r[1:])
        else:
            out.append(r)
    return out


def _em(text: str) -> float:
    return sum(
        _WIDTH.get(c)
        or (0.0 if unicodedata.combining(c) else 1.0 if unicodedata.east_asian_width(c) in "WF" else 0.72)
        for c in text
    )


def width(runs: list[Run], size: float, bold: bool = False) -> float:
    """The estimated width in px of runs set at `size` (bold: a tenth wider)."""
    return sum(_em(t) * size * LEVELS[level][0] for t, level, _ in runs) * (1.1 if bold else 1.0)


def plain_width(text: str, size: float) -> float:
    return width([(text, "", "")], size)


def text_svg(runs: list[Run], x: float, y: float, size: float, fill: str = TEXT, **attrs: str) -> str:
    """A `<text>` of runs at baseline (x, y): one `<tspan>` per run, shifted up or down."""
    lead = 0
    if runs and runs[0][1] == "":  # leading spaces (continuation lines) as an offset: SVG collapses them
        stripped = runs[0][0].lstrip(" ")
        lead = len(runs[0][0]) - len(stripped)
        runs = [(stripped, *runs[0][1:]), *runs[1:]]
    extra = "".join(f' {k.replace("_", "-")}="{xml(v)}"' for k, v in attrs.items())
    out = [
        f'<text x="{x + lead * _WIDTH[" "] * size:.1f}" y="{y:.1f}" font-size="{size:g}" fill="{fill}"{extra}>'
    ]
    rise = 0.0
    for text, level, style in runs:
        scale, shift = LEVELS[level]
        dy = shift * size - rise
        rise = shift * size
        italic = ' font-style="italic"' if style == "fn" else ""
        size_attr = f' font-size="{size * scale:.3g}"' if scale != 1 else ""
        dy_attr = f' dy="{dy:.2f}"' if abs(dy) > 1e-9 else ""
        out.append(f"<tspan{dy_attr}{size_attr}{italic}>{xml(text)}</tspan>")
    return "".join(out) + "</text>"


# ── sizes ───────────────────────────────────────────────────────────────────────────────
@dataclass
class Size:
    """A node's box and the stack of its parameters (left of it)."""

    w: float
    h: float
    pills: list[tuple[float, float]]

    @property
    def pills_w(self) -> float:
        return max((w for w, _ in self.pills), default=0.0)

    @property
    def pills_h(self) -> float:
        return sum(h for _, h in self.pills) + PILL_GAP * max(len(self.pills) - 1, 0)


def number_width(n: Node) -> float:
    return plain_width(str(n.number), SMALL) + 8 if n.number else 0.0


def _callee_runs(n: Node) -> list[Run]:
    return [(" · ".join(n.callees) + " ↓", "", "")]


def pill_runs(name: str, shape: str) -> tuple[list[Run], list[Run]]:
    return name_runs(name), math_runs(shape)


def _pill_size(name: str, shape: str) -> tuple[float, float]:
    name_r, shape_r = pill_runs(name, shape)
    return 16 + width(name_r, 12) + (6 + width(shape_r, SMALL) if shape else 0), PILL_H


def node_size(n: Node) -> Size:
    lines = [marked_runs(line) for line in n.lines]
    text_w = max((width(r, CODE) for r in lines), default=0.0)
    if n.kind in ("input", "state", "output"):
        w, h = text_w + 2 * 14, LINE + 12
    else:
        w = text_w + 2 * PAD_X + number_width(n)
        h = len(lines) * LINE + 2 * PAD_Y
        if n.kind == "call":
            w = max(w, width(_callee_runs(n), 12, bold=True) + 2 * PAD_X) + 6
            h += LINE + 6
    return Size(round(w, 1), float(h), [_pill_size(p.name, p.shape) for p in n.params])


def sizes(d: Diagram) -> dict[str, Size]:
    return {n.id: node_size(n) for n in d.nodes}


def cluster_head_width(head: str, count: str) -> float:
    return width(marked_runs(head), 12) + width(marked_runs(count), 14, bold=True) + 64
