"""Where the nodes, clusters and edges of a diagram go, in a layered layout in pure Python.

Owns: `python_layout(diagram, sizes)` → `Geometry` (node and parameter boxes, cluster boxes, one
SVG path per edge), and the geometry helpers diagram_dot.py shares. Both layouts read the same
graph and give the same kind of geometry, which diagram_svg.py draws: the SVG is ours either way,
so that ids, classes, colours and escaping never depend on the engine.
Leaves out: what is drawn (diagram_graph.py) and how (diagram_svg.py), Graphviz (diagram_dot.py),
the choice between the two (diagram.py).

The pure-Python layout is top to bottom, in rows:
- rows: inputs first; a step one row below the lowest step it reads; a loop or a branch is a
  barrier (what comes before it is above it, what comes after below), so that its box holds
  only its own steps; the two branches of an `if` start on the same row, side by side;
- across: a step's parameters stack on its left; the steps of a row keep the card's order and
  are pulled towards the steps they read and feed (the least-squares placement under the spacing,
  by pool-adjacent-violators, sweeping down and up);
- edges: between adjacent rows a curve; a longer edge runs in a lane beside what it passes, on
  the right for a skip edge (a residual path) and on the left for the others, each lane in the
  innermost box it enters; boxes are computed inside out, each around its steps and lanes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from toycards.render.diagram_graph import Branches, Cluster, Diagram, Edge, Node
from toycards.render.diagram_text import PILL_GAP, PILL_SPACE, Size

Box = tuple[float, float, float, float]  # x, y (top left), width, height
GAP_X, GAP_Y, MARGIN, LINE_H = 26.0, 44.0, 16.0, 17.0
CLUSTER_PAD, PAD_TOP, PAD_BOTTOM = 14.0, 36.0, 12.0
HEAD_BASELINE = 16.0  # a box's header text, below its top
LANE_GAP, SLOT, LABEL_ZONE = 16.0, 6.0, 18.0


@dataclass
class Geometry:
    boxes: dict[str, Box] = field(default_factory=dict)  # node id → its box
    pills: dict[str, list[Box]] = field(default_factory=dict)  # node id → its parameters' boxes
    clusters: dict[str, Box] = field(default_factory=dict)
    heads: dict[str, float] = field(default_factory=dict)  # cluster → x of its header text
    counts: dict[str, float] = field(default_factory=dict)  # cluster → right end of its count
    paths: list[str] = field(default_factory=list)  # per edge of the diagram: SVG path data
    width: float = 0.0
    height: float = 0.0
    engine: str = "python"


def python_layout(d: Diagram, sizes: dict, head_widths: dict | None = None) -> Geometry:
    """The geometry of `d` with node sizes `sizes` (diagram_text.sizes) and cluster header widths."""
    return _Layered(d, sizes, head_widths or {}).run()


def pill_boxes(box: Box, size: Size) -> list[Box]:
    """The parameters' boxes: stacked left of the node's box, right-aligned, centred on it."""
    x, y, w, h = box
    top = y + h / 2 - size.pills_h / 2
    out = []
    for pw, ph in size.pills:
        out.append((x - PILL_SPACE - pw, top, pw, ph))
        top += ph + PILL_GAP
    return out


def left_extent(size: Size) -> float:
    """How far a node and its parameters reach left of the node's centre."""
    return size.w / 2 + (size.pills_w + PILL_SPACE if size.pills else 0.0)


def rounded(points: list[tuple[float, float]], r: float = 6.0) -> str:
    """SVG path data through axis-parallel `points`, each corner rounded.

    >>> rounded([(0, 0), (0, 10), (20, 10)], 4)
    'M0.0,0.0 L0.0,6.0 Q0.0,10.0 4.0,10.0 L20.0,10.0'
    """
    pts = [p for i, p in enumerate(points) if i == 0 or p != points[i - 1]]
    out = [f"M{pts[0][0]:.1f},{pts[0][1]:.1f}"]
    for i in range(1, len(pts) - 1):
        (ax, ay), (bx, by), (cx, cy) = pts[i - 1], pts[i], pts[i + 1]
        k = min(r, (abs(bx - ax) + abs(by - ay)) / 2, (abs(cx - bx) + abs(cy - by)) / 2)
        p, q = _towards(pts[i], pts[i - 1], k), _towards(pts[i], pts[i + 1], k)
        out.append(f"L{p[0]:.1f},{p[1]:.1f} Q{bx:.1f},{by:.1f} {q[0]:.1f},{q[1]:.1f}")
    out.append(f"L{pts[-1][0]:.1f},{pts[-1][1]:.1f}")
    return " ".join(out)


def _towards(a: tuple[float, float], b: tuple[float, float], k: float) -> tuple[float, float]:
    dx, dy = b[0] - a[0], b[1] - a[1]
    n = (dx * dx + dy * dy) ** 0.5 or 1.0
    return a[0] + dx / n * k, a[1] + dy / n * k


def curve(sx: float, sy: float, tx: float, ty: float) -> str:
    """A curve leaving downwards from (sx, sy) and arriving downwards at (tx, ty)."""
    my = (sy + ty) / 2
    return f"M{sx:.1f},{sy:.1f} C{sx:.1f},{my:.1f} {tx:.1f},{my:.1f} {tx:.1f},{ty:.1f}"


def pav(desired: list[float], seps: list[float]) -> list[float]:
    """Positions closest (least squares) to `desired` with p[i+1] − p[i] ≥ seps[i]
    (pool-adjacent-violators on the positions less the running spacing).

    >>> pav([0, 0, 0], [10, 10])
    [-10.0, 0.0, 10.0]
    """
    offsets = [0.0]
    for s in seps:
        offsets.append(offsets[-1] + s)
    blocks: list[list[float]] = []  # [sum, count] of pooled positions
    for d, o in zip(desired, offsets):
        blocks.append([d - o, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    out: list[float] = []
    for s, c in blocks:
        out += [s / c] * int(c)
    return [q + o for q, o in zip(out, offsets)]


def children(items: list) -> list[Cluster]:
    """The clusters directly among `items` (a branch block gives its then and else)."""
    out: list[Cluster] = []
    for it in items:
        if isinstance(it, Cluster):
            out.append(it)
        elif isinstance(it, Branches):
            out += [it.then] + ([it.orelse] if it.orelse is not None else [])
    return out


def chain(c: Cluster | None) -> list[Cluster]:
    """`c` and the clusters around it, innermost first."""
    out = []
    while c is not None:
        out.append(c)
        c = c.parent
    return out


def lane_scope(e: Edge) -> Cluster | None:
    """The box a long edge's lane belongs to: for a skip edge (a residual path) the outermost box
    its target is in and its source is not, so that it stays inside the box it enters; for
    another, the innermost box around both ends, so that a value made before a loop comes in
    from the side."""
    src = {id(c) for c in chain(e.src.cluster)}
    scope = None
    for c in chain(e.dst.cluster):
        if id(c) in src:
            return c if scope is None or not e.skip else scope
        scope = c
    return scope if e.skip else None


class _Layered:
    """The pure-Python layout of one diagram (see the module docstring)."""

    def __init__(self, d: Diagram, sizes: dict[str, Size], heads: dict[str, float]) -> None:
        self.d, self.size, self.heads = d, sizes, heads
        self.row: dict[str, int] = {}
        self.preds: dict[str, list[Edge]] = defaultdict(list)
        self.succs: dict[str, list[Edge]] = defaultdict(list)
        for e in d.edges:
            self.preds[e.dst.id].append(e)
            self.succs[e.src.id].append(e)
        self.crows: dict[str, tuple[int, int]] = {}  # cluster → (first row, last row)
        self.alt: dict[int, Cluster] = {}  # id of a branch → the other branch
        self.x: dict[str, float] = {}  # node → centre
        self.span: dict[str, tuple[float, float]] = {}  # cluster → (left, right) of its box
        self.lane: dict[int, float] = {}  # index of a long edge → x of its lane
        self.right: dict[int, bool] = {}  # index of a long edge → whether its lane is on the right
        self.rows: list[list[Node]] = []

    def run(self) -> Geometry:
        self._place_rows()
        self._across()
        self._finish(None, self.d.items)
        return self._geometry()

    # ── rows ──
    def _place_rows(self) -> None:
        ends = [n for n in self.d.items if isinstance(n, Node) and n.kind in ("input", "state", "output")]
        for n in ends:
            self.row[n.id] = 0
        start = 1 if any(n.kind != "output" for n in ends) else 0
        last = self._place([it for it in self.d.items if not any(it is n for n in ends)], start)
        for n in ends:
            if n.kind == "output":
                self.row[n.id] = last
        self.rows = [[] for _ in range(max(self.row.values(), default=0) + 1)]
        for n in self.d.nodes:
            self.rows[self.row[n.id]].append(n)

    def _place(self, items: list, start: int) -> int:
        """Rows of `items` from `start` on; returns the first row after them."""
        seg = free = start
        for it in items:
            if isinstance(it, Node):
                r = max([seg] + [self.row[e.src.id] + 1 for e in self.preds[it.id] if e.src.id in self.row])
                self.row[it.id] = r
                free = max(free, r + 1)
                continue
            if isinstance(it, Branches) and it.orelse is not None:
                self.alt[id(it.then)], self.alt[id(it.orelse)] = it.orelse, it.then
            end = free
            for c in children([it]):
                last = max(self._place(c.items, free), free + 1)
                self.crows[c.id] = (free, last - 1)
                end = max(end, last)
            free = seg = end
        return free

    def _long(self, e: Edge) -> bool:
        return e.skip or self.row[e.dst.id] - self.row[e.src.id] > 1

    # ── across ──
    def _left(self, n: Node) -> float:
        return left_extent(self.size[n.id])

    def _right(self, n: Node) -> float:
        return self.size[n.id].w / 2

    def _seps(self, row: list[Node]) -> list[float]:
        out = []
        for a, b in zip(row, row[1:]):
            walls = {id(c) for c in chain(a.cluster)} ^ {id(c) for c in chain(b.cluster)}
            out.append(self._right(a) + GAP_X + self._left(b) + CLUSTER_PAD * len(walls))
        return out

    def _across(self) -> None:
        for row in self.rows:
            for n, x in zip(row, pav([0.0] * len(row), self._seps(row))):
                self.x[n.id] = x
        for sweep in range(8):
            down = sweep % 2 == 0
            for row in self.rows if down else reversed(self.rows):
                desired = []
                for n in row:
                    near = (
                        [e.src for e in self.preds[n.id] if not self._long(e)]
                        if down
                        else [e.dst for e in self.succs[n.id] if not self._long(e)]
                    )
                    desired.append(sum(self.x[m.id] for m in near) / len(near) if near else self.x[n.id])
                for n, x in zip(row, pav(desired, self._seps(row))):
                    self.x[n.id] = x

    # ── boxes and lanes, inside out ──
    def _finish(self, c: Cluster | None, items: list) -> None:
        for it in items:
            if isinstance(it, Cluster):
                self._finish(it, it.items)
            elif isinstance(it, Branches):
                self._finish(it.then, it.then.items)
                if it.orelse is not None:
                    self._finish(it.orelse, it.orelse.items)
                    self._separate(it.then, it.orelse)
        mine = [i for i, e in enumerate(self.d.edges) if self._long(e) and lane_scope(e) is c]
        for i in sorted(
            mine, key=lambda i: self.row[self.d.edges[i].dst.id] - self.row[self.d.edges[i].src.id]
        ):
            e = self.d.edges[i]  # a skip edge on the right; another on the side it comes from
            self.right[i] = e.skip or self.x[e.src.id] > self.x[e.dst.id]
            self.lane[i] = self._lane_x(i, c)
        if c is not None:
            self.span[c.id] = self._span(c)

    def _alternative(self, inner: Cluster | None, scope: Cluster | None) -> bool:
        """Whether something in `inner` sits in the other branch of an `if` than `scope`."""
        around = {id(c) for c in chain(scope)}
        return any(id(self.alt[id(c)]) in around for c in chain(inner) if id(c) in self.alt)

    def _lane_x(self, i: int, scope: Cluster | None) -> float:
        e = self.d.edges[i]
        lo, hi = self.row[e.src.id], self.row[e.dst.id]
        right = self.right[i]
        seen = [self.x[e.src.id] + (self._right(e.src) if right else -self._left(e.src))]
        seen.append(self.x[e.dst.id] + (self._right(e.dst) if right else -self._left(e.dst)))
        for row in self.rows[lo + 1 : hi]:
            for n in row:
                if not self._alternative(n.cluster, scope):
                    seen.append(self.x[n.id] + (self._right(n) if right else -self._left(n)))
        for c in self.d.clusters:
            first, last = self.crows.get(c.id, (0, -1))
            if c.id in self.span and first < hi and last > lo and not self._alternative(c, scope):
                seen.append(self.span[c.id][1 if right else 0])
        for j, x in self.lane.items():
            f = self.d.edges[j]
            if self.right[j] == right and self.row[f.src.id] < hi and lo < self.row[f.dst.id]:
                if not self._alternative(lane_scope(f), scope):
                    seen.append(x)
        return max(seen) + LANE_GAP if right else min(seen) - LANE_GAP

    def _inside(self, c: Cluster):
        """Node extents, child boxes and lanes inside `c`, as (left, right) pairs."""
        for n in self.d.nodes:
            if any(k is c for k in chain(n.cluster)):
                yield self.x[n.id] - self._left(n), self.x[n.id] + self._right(n)
        for k in children(c.items):
            if k.id in self.span:
                yield self.span[k.id]
        for j, x in self.lane.items():
            if any(k is c for k in chain(lane_scope(self.d.edges[j]))):
                yield x, x

    def _span(self, c: Cluster) -> tuple[float, float]:
        parts = list(self._inside(c))
        left = min((a for a, _ in parts), default=0.0) - CLUSTER_PAD
        right = max((b for _, b in parts), default=0.0) + CLUSTER_PAD
        return left, max(right, left + self.heads.get(c.id, 0.0))

    def _separate(self, then: Cluster, orelse: Cluster) -> None:
        """Move the else branch right of the then branch's box."""
        dx = self.span[then.id][1] + GAP_X - self.span[orelse.id][0]
        if dx <= 0:
            return
        self._shift(lambda k: any(c is orelse for c in chain(k)), dx)

    def _shift(self, inside, dx: float) -> None:
        for n in self.d.nodes:
            if inside(n.cluster):
                self.x[n.id] += dx
        for c in self.d.clusters:
            if c.id in self.span and inside(c):
                a, b = self.span[c.id]
                self.span[c.id] = (a + dx, b + dx)
        for j in self.lane:
            if inside(lane_scope(self.d.edges[j])):
                self.lane[j] += dx

    # ── geometry ──
    def _geometry(self) -> Geometry:
        left = [self.x[n.id] - self._left(n) for n in self.d.nodes] + [a for a, _ in self.span.values()]
        right = [self.x[n.id] + self._right(n) for n in self.d.nodes] + [b for _, b in self.span.values()]
        left += list(self.lane.values())
        right += list(self.lane.values())
        dx = MARGIN - min(left, default=0.0)
        self._shift(lambda k: True, dx)
        top, bottom, pads = self._ys()
        g = Geometry(width=max(right, default=0.0) + dx + MARGIN, engine="python")
        for n in self.d.nodes:
            s, r = self.size[n.id], self.row[n.id]
            row_h = bottom[r] - top[r]
            g.boxes[n.id] = (self.x[n.id] - s.w / 2, top[r] + (row_h - s.h) / 2, s.w, s.h)
            g.pills[n.id] = pill_boxes(g.boxes[n.id], s)
        for c in self.d.clusters:
            if c.id in self.span:
                (first, last), (a, b) = self.crows[c.id], self.span[c.id]
                y0 = top[first] - PAD_TOP * pads[0][first].get(c.depth, 1)
                y1 = bottom[last] + PAD_BOTTOM * pads[1][last].get(c.depth, 1)
                g.clusters[c.id] = (a, y0, b - a, y1 - y0)
                entering = [x for j, x in self.lane.items() if not self.right[j] and self._enters(j, c)]
                g.heads[c.id] = max([a + 12] + [x + 8 for x in entering])
                entering = [x for j, x in self.lane.items() if self.right[j] and self._enters(j, c)]
                g.counts[c.id] = min([b - 12] + [x - 8 for x in entering])
        g.paths = self._paths(g, top, bottom, pads)
        g.height = max((y + h for _, y, _, h in g.boxes.values()), default=0.0) + MARGIN + 20
        return g

    def _enters(self, j: int, c: Cluster) -> bool:
        """Whether long edge j runs into box c from above it (through its header)."""
        e = self.d.edges[j]
        first, last = self.crows[c.id]
        return self.row[e.src.id] < first <= self.row[e.dst.id] <= last

    def _ys(self):
        """Top and bottom of every row, and per row the padding level of each depth of box that
        starts (ends) there (the outermost box the highest)."""
        n = len(self.rows)
        starts: list[set[int]] = [set() for _ in range(n)]
        ends: list[set[int]] = [set() for _ in range(n)]
        for c in self.d.clusters:
            if c.id in self.crows:
                starts[self.crows[c.id][0]].add(c.depth)
                ends[self.crows[c.id][1]].add(c.depth)
        level = lambda depths: {d: len([k for k in depths if k >= d]) for d in depths}  # noqa: E731
        pads = ([level(s) for s in starts], [level(e) for e in ends])
        slots = [0] * n
        for i in self.lane:
            e = self.d.edges[i]
            slots[self.row[e.src.id]] += 1
            slots[self.row[e.dst.id] - 1] += 1
        top, bottom, y = [0.0] * n, [0.0] * n, MARGIN
        for r, row in enumerate(self.rows):
            y += PAD_TOP * len(starts[r])
            height = max((max(self.size[m.id].h, self.size[m.id].pills_h) for m in row), default=LINE_H)
            top[r], bottom[r] = y, y + height
            y += height + PAD_BOTTOM * len(ends[r]) + max(GAP_Y, LABEL_ZONE + 14 + SLOT * slots[r])
        return top, bottom, pads

    def _paths(self, g: Geometry, top, bottom, pads) -> list[str]:
        ports = self._ports(g)
        used_dep: dict[tuple[int, str, bool], int] = {}
        used_arr: dict[int, int] = defaultdict(int)
        out = []
        for i, e in enumerate(self.d.edges):
            sx, sy, sw, sh = g.boxes[e.src.id]
            start = (sx + sw / 2, sy + sh)
            tx, ty = ports[i]
            if i not in self.lane:
                out.append(curve(*start, tx, ty))
                continue
            r = self.row[e.src.id]
            key = (r, e.src.id, self.right[i])
            k = used_dep.setdefault(key, sum(1 for q in used_dep if q[0] == r))
            y1 = bottom[r] + PAD_BOTTOM * len(pads[1][r]) + LABEL_ZONE + SLOT * k
            r2 = self.row[e.dst.id]
            y2 = top[r2] - 8 - SLOT * used_arr[r2]
            used_arr[r2] += 1
            x = self.lane[i]
            out.append(rounded([start, (start[0], y1), (x, y1), (x, y2), (tx, y2), (tx, ty)]))
        return out

    def _ports(self, g: Geometry) -> dict[int, tuple[float, float]]:
        """Where each edge meets its target's top: spread in the order of where they come from."""
        into: dict[str, list[int]] = defaultdict(list)
        for i, e in enumerate(self.d.edges):
            into[e.dst.id].append(i)
        out = {}
        for node_id, edges in into.items():
            x, y, w, _ = g.boxes[node_id]

            def came_from(i: int) -> float:
                bx, _, bw, _ = g.boxes[self.d.edges[i].src.id]
                return self.lane.get(i, bx + bw / 2)

            edges.sort(key=came_from)
            step = min(14.0, w * 0.7 / max(len(edges) - 1, 1))
            for k, i in enumerate(edges):
                out[i] = (x + w / 2 + (k - (len(edges) - 1) / 2) * step, y)
        return out
