"""Diagrams as SVG: the look, and the SVG text of laid-out diagrams.

Owns: `write_svg(diagrams, geometries)`: the legend, a panel per algorithm (its title,
description and callers, then its boxes, edges and labels), the colours per kind of node and
cluster, and the ids, classes and data attributes tests and tools read: each node is a
`<g class="node KIND">` with `id="DIAGRAM-NODE"` (a step or call also `data-step="N"`, the
card's step number; a call `data-calls`), each edge a `<g class="edge data">` (`skip` added for a
residual path) with `data-from`, `data-to`, `data-var` and `data-shape`, each cluster a
`<g class="cluster loop|map|then|else">` with `data-count`.
Leaves out: what is drawn (diagram_graph.py), where (diagram_layout.py), typesetting and sizes
(diagram_text.py).

Every text from the card goes through diagram_text.py's `xml` or `text_svg`, so that a hostile
card (from a GGUF file) cannot add markup; ids and attributes come only from numbers and
sanitised names.
"""

from __future__ import annotations

from toycards.render.diagram_graph import Diagram, Node, plain
from toycards.render.diagram_text import (
    CODE,
    FONT,
    LINE,
    MUTED,
    PAD_X,
    PAD_Y,
    SMALL,
    TEXT,
    marked_runs,
    math_runs,
    name_runs,
    number_width,
    pill_runs,
    plain_width,
    text_svg,
    width,
    xml,
)

# (fill, stroke) by kind of node and of cluster
COLOURS = {
    "input": ("#e6f4ea", "#2e7d32"),
    "state": ("#e0f2f1", "#00796b"),
    "param": ("#fff4d6", "#b7860b"),
    "step": ("#e8f0fe", "#3c64b1"),
    "call": ("#f3e8fd", "#7e57c2"),
    "output": ("#fce4ec", "#ad1457"),
    "loop": ("#f4f5f7", "#8a94a6"),
    "map": ("#f7f9fc", "#9fb3d1"),
    "then": ("#fffdf3", "#c9b458"),
    "else": ("#fffdf3", "#c9b458"),
}
EDGE, SKIP = "#4a4f57", "#e8590c"  # a data edge, a skip edge (residual path)

# ── writing ─────────────────────────────────────────────────────────────────────────────
MARGIN = 16
TITLE = 14
LEGEND_H = 34
_MARKERS = (
    "<defs>"
    + "".join(
        f'<marker id="tcd-arrow{suffix}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        f'markerHeight="7" orient="auto"><path d="M0,1 L9,5 L0,9 z" fill="{colour}"/></marker>'
        for suffix, colour in (("", EDGE), ("-skip", SKIP), ("-param", COLOURS["param"][1]))
    )
    + "</defs>"
)


def write_svg(diagrams: list[Diagram], geometries: list) -> str:
    """One `<svg>` element: the legend, then each diagram's panel below the one before."""
    panels, y, width_needed = [], MARGIN + LEGEND_H, _legend_width()
    for d, g in zip(diagrams, geometries):
        body, w, h = _panel(d, g)
        panels.append(f'<g transform="translate(0,{y:.1f})">{body}</g>')
        y += h + 24
        width_needed = max(width_needed, w)
    total_w, total_h = width_needed + 2 * MARGIN, y + MARGIN
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
        f'class="toycards-diagram" width="{total_w:.0f}" height="{total_h:.0f}" '
        f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" font-family="{xml(FONT)}">'
    )
    background = f'<rect class="background" width="{total_w:.0f}" height="{total_h:.0f}" fill="#ffffff"/>'
    return "\n".join([head, _MARKERS, background, _legend(), *panels, "</svg>"]) + "\n"


_LEGEND = (
    ("input", "input"),
    ("param", "parameter"),
    ("step", "step"),
    ("call", "call (↓ its diagram)"),
    ("output", "output"),
    ("loop", "loop × count"),
)


def _legend_width() -> float:
    return sum(32 + plain_width(label, 11) for _, label in _LEGEND) + 2 * 70


def _legend() -> str:
    out, x = ['<g class="legend">'], MARGIN
    for kind, label in _LEGEND:
        fill, stroke = COLOURS[kind]
        out.append(
            f'<rect x="{x}" y="{MARGIN}" width="20" height="14" rx="4" fill="{fill}" stroke="{stroke}"/>'
        )
        out.append(text_svg([(label, "", "")], x + 26, MARGIN + 11, 11, MUTED))
        x += 32 + plain_width(label, 11)
    for colour, dash, label, marker in (
        (EDGE, "", "data", ""),
        (SKIP, ' stroke-dasharray="5 3"', "skip", "-skip"),
    ):
        out.append(
            f'<path d="M{x:.1f},{MARGIN + 7} l34,0" stroke="{colour}" stroke-width="1.5" fill="none"{dash} '
            f'marker-end="url(#tcd-arrow{marker})"/>'
        )
        out.append(text_svg([(label, "", "")], x + 40, MARGIN + 11, 11, MUTED))
        x += 70
    return "".join(out) + "</g>"


def _panel(d: Diagram, g) -> tuple[str, float, float]:
    """A diagram's `<g>` (title, description, callers, then the drawing) and its width and height."""
    width_chars = max(int(max(g.width, 640) / (0.6 * 11)), 40)
    head = [text_svg(marked_runs(d.title), MARGIN, MARGIN + TITLE, TITLE, TEXT, font_weight="bold")]
    y = MARGIN + TITLE + 6
    for line in _wrap_prose(d.algorithm.description, width_chars):
        y += 15
        head.append(text_svg([(line, "", "")], MARGIN, y, 11, MUTED))
    if d.from_prelude or d.callers:
        y += 16
        head.append(_callers_line(d, MARGIN, y))
    y += 10
    drawing = [_cluster_svg(d, c, g) for c in sorted(d.clusters, key=lambda c: c.depth) if c.id in g.clusters]
    drawing += [_edge_svg(d, e, path) for e, path in zip(d.edges, g.paths)]
    drawing += [_node_svg(d, n, g) for n in d.nodes]
    drawing += _labels(d, g)
    body = (
        f'<g class="diagram" id="{d.anchor}" data-algorithm="{xml(d.algorithm.name)}" '
        f'data-layout="{g.engine}">'
        + "".join(head)
        + f'<g transform="translate(0,{y:.1f})">'
        + "".join(drawing)
        + "</g></g>"
    )
    right = max(
        [g.width, width(marked_runs(d.title), TITLE, bold=True) + 2 * MARGIN]
        + [x + width(math_runs(t), SMALL) + 16 for x, _, t in _label_spots(d, g)]
    )
    return body, right, y + g.height


def _wrap_prose(text: str, width_chars: int) -> list[str]:
    words, lines, line = " ".join(text.split()).split(" "), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width_chars:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    return [*lines, line] if line else lines


def _callers_line(d: Diagram, x: float, y: float) -> str:
    """`from the prelude; called by Llama, Gemma3`, each caller a link to its diagram."""
    lead = "from the prelude" if d.from_prelude else ""
    if d.callers:
        lead += ("; " if lead else "") + "called by "
    out = [text_svg([(lead, "", "")], x, y, 11, MUTED)]
    at = x + plain_width(lead, 11)
    for i, (name, target) in enumerate(d.callers):
        runs = name_runs(name) + ([(",", "", "")] if i < len(d.callers) - 1 else [])
        link = xml("#" + target)
        text = text_svg(runs, at, y, 11, COLOURS["call"][1], text_decoration="underline")
        out.append(f'<a href="{link}" xlink:href="{link}">{text}</a>')
        at += width(runs, 11) + plain_width(" ", 11)
    return "".join(out)


def _cluster_svg(d: Diagram, c, g) -> str:
    x, y, w, h = g.clusters[c.id]
    fill, stroke = COLOURS[c.kind]
    dash = "" if c.kind == "loop" else ' stroke-dasharray="6 3"'
    out = [
        f'<g class="cluster {c.kind}" id="{d.anchor}-{c.id}" data-count="{xml(plain(c.count))}">',
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="10" fill="{fill}" '
        f'stroke="{stroke}" stroke-width="1.2"{dash}/>',
        text_svg(marked_runs(c.head), g.heads.get(c.id, x + 12), y + 16, 12, MUTED),
    ]
    if c.count:
        runs = marked_runs(c.count)
        right = g.counts.get(c.id, x + w - 12)  # left of the lanes that come in from above
        out.append(text_svg(runs, right - width(runs, 14, True), y + 18, 14, stroke, font_weight="bold"))
    return "".join(out) + "</g>"


def _edge_svg(d: Diagram, e, path: str) -> str:
    cls = "edge data skip" if e.skip else "edge data"
    colour, marker = (SKIP, "-skip") if e.skip else (EDGE, "")
    dash = ' stroke-dasharray="5 3"' if e.skip else ""
    title = f"{e.var} ∈ {e.shape}" if e.shape else e.var
    return (
        f'<g class="{cls}" data-from="{d.anchor}-{e.src.id}" data-to="{d.anchor}-{e.dst.id}" '
        f'data-var="{xml(e.var)}" data-shape="{xml(e.shape)}"><title>{xml(title)}</title>'
        f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="{1.6 if e.skip else 1.3}"{dash} '
        f'marker-end="url(#tcd-arrow{marker})"/></g>'
    )


def _node_svg(d: Diagram, n: Node, g) -> str:
    x, y, w, h = g.boxes[n.id]
    fill, stroke = COLOURS[n.kind]
    attrs = f' data-step="{n.number}"' if n.number else ""
    if n.callees:
        attrs += f' data-calls="{xml(" ".join(n.callees))}"'
    out = [f'<g class="node {n.kind}" id="{d.anchor}-{n.id}"{attrs}><title>{xml(n.title)}</title>']
    rx = h / 2 if n.kind in ("input", "state", "output") else 6
    out.append(
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{rx:.1f}" fill="{fill}" '
        f'stroke="{stroke}" stroke-width="1.3"/>'
    )
    text_x, base = x + (14 if rx != 6 else PAD_X), y + PAD_Y + CODE * 0.85
    if n.kind in ("input", "state", "output"):
        base = y + h / 2 + CODE * 0.35
    if n.kind == "call":
        out.append(
            f'<rect x="{x + 3:.1f}" y="{y + 3:.1f}" width="{w - 6:.1f}" height="{h - 6:.1f}" rx="4" '
            f'fill="none" stroke="{stroke}" stroke-width="0.8" stroke-opacity="0.6"/>'
        )
        out.append(_callee_links(d, n, x + PAD_X + 3, base + 3, stroke))
        text_x, base = text_x + 3, base + LINE + 5
    if n.number:
        out.append(text_svg([(str(n.number), "", "")], text_x, base, SMALL, MUTED))
        text_x += number_width(n)
    for i, line in enumerate(n.lines):
        out.append(text_svg(marked_runs(line), text_x, base + i * LINE, CODE))
    out.append("</g>")
    for (px, py, pw, ph), p in zip(g.pills[n.id], n.params):
        out.append(_pill_svg(d, n, p, (px, py, pw, ph), (x, y + h / 2)))
    return "".join(out)


def _callee_links(d: Diagram, n: Node, x: float, y: float, colour: str) -> str:
    out = []
    for i, name in enumerate(n.callees):
        runs = [(name + " ↓", "", "")] if name in d.links else [(name, "", "")]
        text = text_svg(runs, x, y, 12, colour, font_weight="bold")
        if name in d.links:
            target = xml("#" + d.links[name])
            text = f'<a href="{target}" xlink:href="{target}">{text}</a>'
        out.append(text)
        x += width(runs, 12, bold=True) + (plain_width(" · ", 12) if i < len(n.callees) - 1 else 0)
    return "".join(out)


def _pill_svg(d: Diagram, n: Node, p, box, to: tuple[float, float]) -> str:
    x, y, w, h = box
    fill, stroke = COLOURS["param"]
    name_r, shape_r = pill_runs(p.name, p.shape)
    title = f"{p.name} ∈ {p.shape}" if p.shape else p.name
    sx, sy, tx, ty = x + w, y + h / 2, to[0], to[1] + (y + h / 2 - to[1]) * 0.25
    mx = (sx + tx) / 2
    out = [
        f'<g class="node param" data-name="{xml(p.name)}" data-for="{d.anchor}-{n.id}"><title>{xml(title)}</title>',
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{h / 2:.1f}" fill="{fill}" '
        f'stroke="{stroke}" stroke-width="1.1"/>',
        text_svg(name_r, x + 8, y + h / 2 + 4, 12),
    ]
    if p.shape:
        out.append(text_svg(shape_r, x + 14 + width(name_r, 12), y + h / 2 + 4, SMALL, MUTED))
    out.append(
        f'<path class="edge param" d="M{sx:.1f},{sy:.1f} C{mx:.1f},{sy:.1f} {mx:.1f},{ty:.1f} {tx:.1f},{ty:.1f}" '
        f'fill="none" stroke="{stroke}" stroke-width="1.1" marker-end="url(#tcd-arrow-param)"/>'
    )
    return "".join(out) + "</g>"


def _label_spots(d: Diagram, g) -> list[tuple[float, float, str]]:
    """(x, y, shape) of the label under each node that feeds another: the shape of its value."""
    out = []
    feeds = {}
    for e in d.edges:
        feeds.setdefault(e.src.id, e)
    for n in d.nodes:
        e = feeds.get(n.id)
        if e is None or n.kind in ("input", "state"):
            continue
        shape = n.shape or e.shape
        if shape:
            x, y, w, h = g.boxes[n.id]
            out.append((x + w / 2 + 5, y + h + 13, shape))
    return out


def _labels(d: Diagram, g) -> list[str]:
    out = []
    for x, y, shape in _label_spots(d, g):
        runs = math_runs(shape)
        out.append(
            f'<g class="shape"><rect x="{x - 2:.1f}" y="{y - 10:.1f}" width="{width(runs, SMALL) + 4:.1f}" '
            f'height="13" fill="#ffffff" fill-opacity="0.85"/>{text_svg(runs, x, y, SMALL, MUTED)}</g>'
        )
    return out
