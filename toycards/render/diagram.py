"""Block diagrams of a card's algorithms, as SVG: `toycards render --format svg`, and inside the
HTML of `render` and `describe`.

Owns: the public entry points `render_svg(card)` (a standalone SVG document), `svg_element(card)`
(the `<svg>` element, for a page that embeds it) and `diagram_html(card)` (the section of a page
that holds it), and the choice of layout engine.
Leaves out: the graph (diagram_graph.py), the layouts (diagram_layout.py, diagram_dot.py) and
the typesetting (diagram_text.py) and the drawing (diagram_svg.py).

One diagram per algorithm of the card, in the card's order, then one per prelude algorithm they
call (directly or through each other), each once. A call is a box whose callee name links to
the callee's diagram further down the same SVG (`<a href="#diagram-NAME">`): an SVG has no
`<details>`, so a call is "expanded" by following its link; in a browser, where the HTML page
embeds the SVG, the link scrolls to it, and the callee's diagram links back to its callers.

Layout: a layered layout in pure Python (diagram_layout.py, the default: a straight main column,
residual paths in a lane of their own, the branches of an `if` side by side), or with
`engine="dot"` Graphviz `dot` through the `graphviz` package where the `dot` binary is on PATH
(diagram_dot.py; wider, with curved edges). Either way only the positions come from the engine: the SVG, its ids and classes and its escaping are
written here, so the output has the same structure whichever engine placed it.
"""

from __future__ import annotations

from toycards.errors import ToycardsError
from toycards.lang import ir
from toycards.render.diagram_graph import Diagram, build_diagrams

__all__ = ["Diagram", "build_diagrams", "diagram_html", "render_svg", "svg_element"]

ENGINES = ("python", "dot")


def svg_element(card: ir.Card, engine: str = "python") -> str:
    """The `<svg>` element with every diagram of `card` (see the module docstring)."""
    from toycards.render.diagram_svg import write_svg
    from toycards.render.diagram_text import cluster_head_width, sizes

    if engine not in ENGINES:
        raise ValueError(f"unknown layout engine {engine!r}")
    layout = _layout(engine)
    diagrams = build_diagrams(card)
    geometries = []
    for d in diagrams:
        heads = {c.id: cluster_head_width(c.head, c.count) for c in d.clusters}
        geometries.append(layout(d, sizes(d), heads))
    return write_svg(diagrams, geometries)


def _layout(engine: str):
    """The layout function of `engine`; dot only where Graphviz is installed (else one line)."""
    if engine == "python":
        from toycards.render.diagram_layout import python_layout

        return python_layout
    from toycards.render.diagram_dot import dot_available, dot_layout

    if not dot_available():
        raise ToycardsError(
            "the dot layout needs Graphviz: the `dot` program on PATH and the `graphviz` Python package"
            " (or use the built-in layout: --layout python)"
        )
    return dot_layout


def render_svg(card: ir.Card, engine: str = "python") -> str:
    """A standalone SVG document of `card`'s diagrams (what `toycards render --format svg` writes)."""
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + svg_element(card, engine)


def diagram_html(card: ir.Card, engine: str = "python") -> str:
    """A `<section class="diagram">` holding the inline SVG, for an HTML page."""
    return (
        f'<section class="diagram" id="diagram">\n<h2>Diagram</h2>\n{svg_element(card, engine)}</section>\n'
    )
