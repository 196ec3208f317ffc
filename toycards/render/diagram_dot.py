"""A diagram placed by Graphviz `dot`, through the `graphviz` package.

Owns: `dot_layout(diagram, sizes, heads)` → diagram_layout.Geometry: the graph handed to dot
(a fixed-size, label-less box per node, or a two-cell table when the step reads parameters: their
room on the left, the step on the right, where its edges attach; a cluster per loop and branch
with room for its header; invisible gates that keep a loop's steps between what comes before and
after it, as in the card), and reading back dot's JSON: node centres, cluster boxes and edge
splines, turned the right way up.
Leaves out: the pure-Python layout and the geometry helpers (diagram_layout.py), drawing
(diagram_svg.py), sizes (diagram_text.py). No text of the card reaches dot: its nodes are
named by number (`s12`, `in1`).
"""

from __future__ import annotations

import json
import shutil

from toycards.errors import ToycardsError
from toycards.render.diagram_graph import Cluster, Diagram, Node
from toycards.render.diagram_layout import MARGIN, Geometry, children, pill_boxes
from toycards.render.diagram_text import PILL_SPACE, Size

DPI = 72.0  # dot's points per inch; one point is one px of the SVG


def _inch(px: float) -> str:
    return f"{px / DPI:.3f}"


class _DotGraph:
    def __init__(self, d: Diagram, sizes: dict[str, Size], heads: dict[str, float]) -> None:
        import graphviz

        self.d, self.size, self.heads = d, sizes, heads
        self.g = graphviz.Digraph(
            graph_attr={
                "rankdir": "TB",
                "nodesep": "0.3",
                "ranksep": "0.55",
                "newrank": "true",
                "ordering": "out",
            },
            node_attr={"shape": "box", "fixedsize": "true", "label": ""},
        )
        self.gates = 0

    def build(self) -> None:
        ends = [n for n in self.d.items if isinstance(n, Node) and n.kind in ("input", "state", "output")]
        for rank, kinds in (("source", ("input", "state")), ("sink", ("output",))):
            with self.g.subgraph() as sub:
                sub.attr(rank=rank)
                for n in ends:
                    if n.kind in kinds:
                        self._node(sub, n)
        self._items(self.g, [it for it in self.d.items if not any(it is n for n in ends)])
        for i, e in enumerate(self.d.edges):
            self.g.edge(
                self._end(e.src, "s"), self._end(e.dst, "n"), id=f"e{i}", weight="1" if e.skip else "4"
            )

    def _node(self, graph, n: Node) -> None:
        """A box of the node's size; with parameters, a two-cell table whose left cell keeps
        their room and whose right cell (port `x`) is the node, where its edges attach."""
        s = self.size[n.id]
        if not s.pills:
            graph.node(n.id, width=_inch(s.w), height=_inch(s.h))
            return
        h = int(max(s.h, s.pills_h)) + 1
        label = (
            f'<<table border="0" cellborder="0" cellpadding="0" cellspacing="{int(PILL_SPACE)}"><tr>'
            f'<td fixedsize="true" width="{int(s.pills_w) + 1}" height="{h}"></td>'
            f'<td port="x" fixedsize="true" width="{int(s.w) + 1}" height="{h}"></td></tr></table>>'
        )
        graph.node(n.id, shape="plaintext", fixedsize="false", margin="0", label=label)

    def _end(self, n: Node, side: str) -> str:
        return f"{n.id}:x:{side}" if self.size[n.id].pills else f"{n.id}:{side}"

    def _items(self, graph, items: list) -> None:
        gate, pending = None, []
        for it in items:
            if isinstance(it, Node):
                self._node(graph, it)
                pending.append(it.id)
                if gate is not None:
                    self._invisible(gate, it.id)
                continue
            inside = [n.id for c in children([it]) for n in self.d.nodes if _within(n, c)]
            enter, leave = self._gate(graph), self._gate(graph)
            for src in pending + ([gate] if gate is not None else []):
                self._invisible(src, enter)
            for c in children([it]):
                self._cluster(graph, c)
            for n in inside:
                self._invisible(enter, n)
                self._invisible(n, leave)
            gate, pending = leave, []

    def _cluster(self, graph, c: Cluster) -> None:
        head = (
            '<<table border="0" cellpadding="0" cellspacing="0"><tr>'
            f'<td fixedsize="true" width="{int(self.heads.get(c.id, 40))}" height="20"></td></tr></table>>'
        )
        with graph.subgraph(name=f"cluster_{c.id}") as sub:
            sub.attr(label=head, labeljust="l", labelloc="t", margin="14")
            self._items(sub, c.items)

    def _gate(self, graph) -> str:
        self.gates += 1
        name = f"gate{self.gates}"
        graph.node(name, shape="point", width="0.01", height="0.01", style="invis")
        return name

    def _invisible(self, a: str, b: str) -> None:
        self.g.edge(a, b, style="invis", weight="0")


def _within(n: Node, c: Cluster) -> bool:
    k = n.cluster
    while k is not None:
        if k is c:
            return True
        k = k.parent
    return False


def dot_available() -> bool:
    """Whether the `graphviz` package is installed and `dot` is on PATH."""
    try:
        import graphviz  # noqa: F401
    except ImportError:
        return False
    return shutil.which("dot") is not None


def dot_layout(d: Diagram, sizes: dict[str, Size], heads: dict[str, float]) -> Geometry:
    """Run dot on the diagram's graph and read the geometry back."""
    import graphviz

    graph = _DotGraph(d, sizes, heads)
    graph.build()
    try:
        out = json.loads(graph.g.pipe(format="json", engine="dot"))
    except (graphviz.ExecutableNotFound, graphviz.CalledProcessError, OSError, ValueError) as e:
        raise ToycardsError(f"graphviz dot could not lay out {d.algorithm.name}: {e}") from None
    x0, y0, x1, y1 = (float(v) for v in out["bb"].split(","))

    def at(x: float, y: float) -> tuple[float, float]:
        return x - x0 + MARGIN, y1 - y + MARGIN

    g = Geometry(width=x1 - x0 + 2 * MARGIN, height=y1 - y0 + 2 * MARGIN, engine="dot")
    objects = out.get("objects", [])
    for obj in objects:
        name = obj.get("name", "")
        if name.startswith("cluster_") and "bb" in obj:
            a, b, c, e = (float(v) for v in obj["bb"].split(","))
            (left, top), (right, bottom) = at(a, e), at(c, b)
            g.clusters[name.removeprefix("cluster_")] = (left, top, right - left, bottom - top)
            g.heads[name.removeprefix("cluster_")] = left + 12
    by_name = {obj.get("name"): obj for obj in objects}
    for n in d.nodes:
        cx, cy = at(*(float(v) for v in by_name[n.id]["pos"].split(",")))
        s = sizes[n.id]
        if s.pills:  # the node is the table's right cell
            cx += (s.pills_w + PILL_SPACE) / 2
        g.boxes[n.id] = (cx - s.w / 2, cy - s.h / 2, s.w, s.h)
        g.pills[n.id] = pill_boxes(g.boxes[n.id], s)
    splines = {e.get("id"): e.get("pos", "") for e in out.get("edges", [])}
    g.paths = [_spline(splines.get(f"e{i}", ""), at) for i in range(len(d.edges))]
    return g


def _spline(pos: str, at) -> str:
    """SVG path data of a dot spline `e,x,y p0 p1 …` (cubic Bézier pieces, then the arrow's tip)."""
    tip, points = None, []
    for part in pos.split():
        fields = part.split(",")
        if len(fields) == 3:  # `e,x,y` (the arrow's tip) or `s,x,y`
            if fields[0] == "e":
                tip = at(float(fields[1]), float(fields[2]))
            continue
        points.append(at(float(fields[0]), float(fields[1])))
    if not points:
        return ""
    out = [f"M{points[0][0]:.1f},{points[0][1]:.1f}"]
    for i in range(1, len(points) - 2, 3):
        (ax, ay), (bx, by), (cx, cy) = points[i : i + 3]
        out.append(f"C{ax:.1f},{ay:.1f} {bx:.1f},{by:.1f} {cx:.1f},{cy:.1f}")
    if tip is not None:
        out.append(f"L{tip[0]:.1f},{tip[1]:.1f}")
    return " ".join(out)
