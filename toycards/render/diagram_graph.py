"""The data-flow graph of one algorithm, read from the IR and the checker's results.

Owns: `Diagram` (one algorithm: its input, state and output nodes, one node per step, the
parameters each step reads, the data edges between them and the clusters that loops and
branches make), `build_diagrams(card)` (the card's algorithms, then every prelude algorithm they
call, directly or not, each once) and the marked text of labels (`Marked`: lang/printer.py's
notation with every name between private-use marks, which diagram_text.py typesets).
Leaves out: sizes (diagram_text.py), positions (diagram_layout.py) and SVG (diagram_svg.py).

What the graph shows, in the card's terms:
- a node per numbered step that computes something (an assignment, a `return`, an inline `for …:`
  or `if … then`); a step that calls an algorithm (of the card or of the prelude) is a *call*
  node, any other a *step* node; each carries the number the card prints before it;
- parameters as small nodes beside the step that reads them (one per step and parameter);
  hyperparameters, loop variables and dimensions are not drawn;
- an edge from the step that last defined a value to each step that reads it, labelled with the
  checker's shape of that value (`AlgoInfo.shape_of` at the use); after a branch or an inline
  `if`, every definition that may reach the use has an edge;
- a loop (`for l = 1, …, L do`) or a block map (`for h ∈ [H] do`) once, as a cluster with its
  count (`× L`); a value that enters a loop comes from the definition before it (the edge that
  carries it from one iteration to the next is left out: the count says it);
- an edge is a *skip* edge (a residual path) when its target is also reached from its source
  through other steps: `X ← X + W_o · Y` reads the X from before the attention.

The checker's results are used when the card checks; a card with errors still gets a diagram,
with the shapes the checker could not find left out and calls resolved by name (the card's own
algorithms, then the prelude's, as the checker resolves them).

>>> from toycards.lang.parse import parse
>>> card = parse('''Algorithm: y ← f(x | W)
... Input: x ∈ ℝ^{d}
... Output: y ∈ ℝ^{d}
... Parameters: W ∈ ℝ^{d×d}
... 1 h ← W · x
... 2 return y = h + x
... ''')
>>> d = build_diagrams(card)[0]
>>> [(n.kind, n.number) for n in d.nodes], [p.name for p in d.node("s1").params]
([('input', 0), ('step', 1), ('step', 2), ('output', 0)], ['W'])
>>> [(e.src.id, e.dst.id, e.shape, e.skip) for e in d.edges]
[('in1', 's1', 'ℝ^{d}', False), ('s1', 's2', 'ℝ^{d}', False), ('in1', 's2', 'ℝ^{d}', True), ('s2', 'out', '', False)]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from toycards.lang import ir
from toycards.lang.printer import Renderer, header_text, stmt_text

# Private-use marks around a variable name and around an algorithm or builtin name.
NAME, END_NAME, FUNC, END_FUNC = (chr(0xE100 + i) for i in range(4))
MARKS = NAME + END_NAME + FUNC + END_FUNC
_NO_MARKS = {ord(m): None for m in MARKS}
WRAP = 44  # characters of a step's text on one line of its node
VALUE_KINDS = frozenset({"input", "state", "local", "output"})


class Marked(Renderer):
    """The card printer with names marked for typesetting (sub- and superscripts)."""

    def name(self, n: str) -> str:
        return f"{NAME}{n.translate(_NO_MARKS)}{END_NAME}"

    def func(self, n: str) -> str:
        return f"{FUNC}{n.translate(_NO_MARKS)}{END_FUNC}"


MARKED = Marked()


def plain(text: str) -> str:
    """Marked text without its marks (for tooltips and attributes)."""
    return text.translate(_NO_MARKS)


@dataclass(eq=False)
class Param:
    """A parameter a step reads: its name as the step writes it, and its declared shape."""

    name: str
    shape: str


@dataclass(eq=False)
class Cluster:
    """A loop ("loop"), a block map ("map") or a branch ("then", "else") drawn as a box."""

    id: str
    kind: str
    head: str  # marked text: `for l = 1, 2, …, L`
    count: str = ""  # `× L`, `× L = 30` in a bound card; "" for a branch
    parent: Cluster | None = None
    items: list = field(default_factory=list)  # Node | Cluster | Branches, in the card's order
    depth: int = 0


@dataclass(eq=False)
class Branches:
    """An `if … then … else … end` block: its branches are laid out side by side."""

    then: Cluster
    orelse: Cluster | None


@dataclass(eq=False)
class Node:
    id: str
    kind: str  # "input" | "state" | "step" | "call" | "output"
    lines: list[str]  # marked text, one entry per line
    number: int = 0  # the step number the card prints (0 for inputs, state and output)
    callees: list[str] = field(default_factory=list)
    params: list[Param] = field(default_factory=list)
    shape: str = ""  # the shape of the value the node defines
    cluster: Cluster | None = None
    title: str = ""  # the whole card line, with its comment (a tooltip)
    order: int = 0


@dataclass(eq=False)
class Edge:
    src: Node
    dst: Node
    var: str
    shape: str
    skip: bool = False


@dataclass(eq=False)
class Diagram:
    algorithm: ir.Algorithm
    anchor: str  # the id of the diagram, `diagram-Llama`
    title: str  # marked: `Algorithm: P ← Llama(x | θ)`
    from_prelude: bool = False
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    clusters: list[Cluster] = field(default_factory=list)
    items: list = field(default_factory=list)  # the top level: Node | Cluster | Branches
    callers: list[tuple[str, str]] = field(default_factory=list)  # (name, anchor) of each caller
    links: dict[str, str] = field(default_factory=dict)  # callee name → anchor

    def node(self, node_id: str) -> Node:
        return next(n for n in self.nodes if n.id == node_id)


def anchor(name: str, taken: set[str]) -> str:
    """A unique, XML-safe id for an algorithm's diagram: `diagram-GQAttention`."""
    base = "diagram-" + (re.sub(r"[^A-Za-z0-9_-]", "_", name) or "_")
    out, n = base, 1
    while out in taken:
        n += 1
        out = f"{base}-{n}"
    taken.add(out)
    return out


# ── the card and the algorithms it calls ───────────────────────────────────────────────
def build_diagrams(card: ir.Card) -> list[Diagram]:
    """One diagram per algorithm of `card`, then one per prelude algorithm they call (each once,
    in the order of first call)."""
    infos, prelude_infos, prelude = _checked(card)
    todo = [(a, infos.get(a.name), False) for a in card.algorithms if card.algorithm(a.name) is a]
    names = {a.name for a, _, _ in todo}
    out: list[Diagram] = []
    taken: set[str] = set()
    i = 0
    while i < len(todo):
        algo, info, from_prelude = todo[i]
        d = _Builder(algo, info, lambda n: _resolve(n, card, prelude)).build()
        d.anchor, d.from_prelude = anchor(algo.name, taken), from_prelude
        out.append(d)
        for callee in dict.fromkeys(c for n in d.nodes for c in n.callees):
            if callee not in names and callee in prelude:
                names.add(callee)
                todo.append((prelude[callee], prelude_infos.get(callee), True))
        i += 1
    by_name = {d.algorithm.name: d for d in out}
    for d in out:
        d.links = {c: by_name[c].anchor for n in d.nodes for c in n.callees if c in by_name}
        for c in d.links:
            if (d.algorithm.name, d.anchor) not in by_name[c].callers:
                by_name[c].callers.append((d.algorithm.name, d.anchor))
    return out


def _checked(card: ir.Card):
    """The checker's AlgoInfo of every algorithm of the card and of the prelude (empty when a
    check cannot run), and the prelude's algorithms by name."""
    from toycards.checker import check_card, check_prelude
    from toycards.errors import ToycardsError

    try:
        infos = check_card(card).algorithms
    except (ToycardsError, RecursionError):
        infos = {}
    lib = check_prelude()
    prelude = {name: info.algorithm for name, info in lib.algorithms.items()} if lib else {}
    return infos, (lib.algorithms if lib else {}), prelude


def _resolve(name: str, card: ir.Card, prelude: dict[str, ir.Algorithm]) -> str | None:
    """The algorithm a call names, as the checker resolves it: the card's own, then the prelude's;
    None for a builtin."""
    return name if card.algorithm(name) is not None or name in prelude else None


class _Builder:
    """Walks one algorithm's steps, tracking which node last defined each value."""

    def __init__(self, algo: ir.Algorithm, info, resolve) -> None:
        self.algo, self.info, self.resolve = algo, info, resolve
        self.d = Diagram(algo, "", header_text(MARKED, algo))
        self.number = 0
        self.clusters = 0
        self.declared_params = {n for decl, _ in algo.all_params() for n in decl.names}
        self.hypers = {n: decl for decl in algo.hyper_decls for n in decl.names}

    def build(self) -> Diagram:
        defs: dict[str, list[Node]] = {}
        for kind, decls in (("input", self.algo.input_decls), ("state", self.algo.state_decls)):
            for decl in decls:
                for name in decl.names:
                    shape = self._type_text(decl.type)
                    node = self._node(f"{kind[:2]}{len(self.d.nodes) + 1}", kind, None)
                    node.lines, node.shape, node.title = [f"{MARKED.name(name)} ∈ {shape}"], shape, name
                    defs[name] = [node]
                    self.d.items.append(node)
        self._block(self.algo.body, None, defs, self.d.items)
        out = self._node("out", "output", None)
        out_type = next((d.type for d in self.algo.output_decls if self.algo.output in d.names), None)
        out.shape = self._type_text(out_type) if out_type is not None else ""
        out.lines = [MARKED.name(self.algo.output) + (f" ∈ {out.shape}" if out.shape else "")]
        out.title = self.algo.output
        self.d.items.append(out)
        for src in defs.get(self.algo.output, []):
            self.d.edges.append(Edge(src, out, self.algo.output, ""))
        _mark_skips(self.d)
        return self.d

    # ── structure ──
    def _node(self, node_id: str, kind: str, cluster: Cluster | None) -> Node:
        node = Node(node_id, kind, [], cluster=cluster, order=len(self.d.nodes))
        self.d.nodes.append(node)
        return node

    def _cluster(self, kind: str, head: str, count: str, parent: Cluster | None) -> Cluster:
        self.clusters += 1
        c = Cluster(f"c{self.clusters}", kind, head, count, parent, depth=parent.depth + 1 if parent else 1)
        self.d.clusters.append(c)
        return c

    def _block(self, body, cluster: Cluster | None, defs: dict[str, list[Node]], items: list) -> None:
        for s in body:
            if isinstance(s, ir.Comment):
                continue
            if isinstance(s, ir.ForSeq | ir.ForAll) and not (isinstance(s, ir.ForAll) and s.inline):
                self.number += 1
                c = self._loop_cluster(s, cluster)
                self._block(s.body, c, defs, c.items)
                self.number += 1  # `end`
                if c.items:
                    items.append(c)
            elif isinstance(s, ir.If) and not s.inline:
                self.number += 1
                items.append(self._branches(s, cluster, defs))
                self.number += 1  # `end`
            else:
                self.number += 1
                items.append(self._step(s, cluster, defs))

    def _loop_cluster(self, s: ir.ForSeq | ir.ForAll, parent: Cluster | None) -> Cluster:
        r = MARKED
        if isinstance(s, ir.ForSeq):
            second = f"{r.expr(s.second)}, " if s.second is not None else ""
            head = f"for {r.name(s.var)} = {r.expr(s.start)}, {second}…, {r.expr(s.stop)}"
            return self._cluster("loop", head, self._count(s), parent)
        ranges = ", ".join(f"{r.name(x.var)} ∈ [{r.dim(x.bound)}]" for x in s.ranges)
        count = " × ".join(r.dim(x.bound) for x in s.ranges)
        return self._cluster("map", f"for {ranges} (in parallel)", f"× {count}", parent)

    def _count(self, s: ir.ForSeq) -> str:
        """`× L` for a loop from 1 to L (`× L = 30` when the card is bound to a file)."""
        r = MARKED
        if not (isinstance(s.start, ir.Num) and s.start.text == "1"):
            return f"{r.expr(s.start)} … {r.expr(s.stop)}"
        text = f"× {r.expr(s.stop)}"
        decl = self.hypers.get(s.stop.id) if isinstance(s.stop, ir.Name) else None
        if decl is not None and decl.value is not None and len(decl.names) == 1:
            text += f" = {r.expr(decl.value)}"
        return text

    def _branches(self, s: ir.If, parent: Cluster | None, defs: dict[str, list[Node]]) -> Branches:
        then = self._cluster("then", f"if {MARKED.expr(s.cond)} then", "", parent)
        then_defs = dict(defs)
        self._block(s.then, then, then_defs, then.items)
        orelse, else_defs = None, dict(defs)
        if s.orelse or s.else_comment:
            self.number += 1  # `else`
            orelse = self._cluster("else", "else", "", parent)
            self._block(s.orelse, orelse, else_defs, orelse.items)
        for key in {**then_defs, **else_defs}:
            defs[key] = list(dict.fromkeys(then_defs.get(key, []) + else_defs.get(key, [])))
        return Branches(then, orelse if orelse is not None and orelse.items else None)

    # ── one step ──
    def _step(self, s: ir.Stmt, cluster: Cluster | None, defs: dict[str, list[Node]]) -> Node:
        node = self._node(f"s{self.number}", "step", cluster)
        node.number = self.number
        text, _ = stmt_text(MARKED, s)
        node.lines = wrap(text)
        comment = _comment(s)
        node.title = f"{self.number}  {plain(text)}" + (f"  ▷ {comment}" if comment else "")
        inner, conds = _innermost(s)
        reads = [inner.value, *conds] + ([inner.target] if isinstance(inner, ir.Assign) else [])
        calls = [c for c in ir.walk(tuple(reads)) if isinstance(c, ir.Call)]
        node.callees = list(dict.fromkeys(n for c in calls if (n := self._callee(c)) is not None))
        node.kind = "call" if node.callees else "step"
        whole = isinstance(s, ir.ForAll) and not conds  # `for t ∈ [ℓ]: X̃[:, t] ← …` sets every column
        self._reads(node, reads, inner, defs, whole)
        key = self._target_key(inner)
        if key is not None:
            node.shape = self._shape_text(self._target_shape(inner, key))
            defs[key] = [*defs.get(key, []), node] if conds else [node]
        return node

    def _callee(self, c: ir.Call) -> str | None:
        if self.info is not None:
            callee = self.info.callee_of(c)
            if isinstance(callee, ir.Algorithm):
                return callee.name
            if isinstance(callee, str):
                return None
        return self.resolve(c.func)

    def _reads(
        self, node: Node, exprs: list, inner: ir.Stmt, defs: dict[str, list[Node]], whole: bool
    ) -> None:
        target = inner.target if isinstance(inner, ir.Assign) else None
        seen: set[str] = set()
        for e in ir.walk(tuple(exprs)):
            if (
                not isinstance(e, ir.Name)
                or e is target
                or (isinstance(target, ir.Index) and e is target.base)
            ):
                continue
            kind, key = self._symbol(e)
            if kind == "param" and e.id not in seen:
                seen.add(e.id)
                node.params.append(Param(e.id, self._shape_text(self._shape(e))))
            elif kind in VALUE_KINDS and key not in seen:
                seen.add(key)
                for src in defs.get(key, []):
                    self.d.edges.append(Edge(src, node, key, self._shape_text(self._shape(e))))
        if isinstance(target, ir.Index) and isinstance(target.base, ir.Name) and not whole:
            key = self._symbol(target.base)[1]  # a partial update keeps the rest of the old value
            if key not in seen:
                for src in defs.get(key, []):
                    self.d.edges.append(Edge(src, node, key, src.shape))

    def _symbol(self, e: ir.Name) -> tuple[str, str]:
        sym = self.info.symbol_of(e) if self.info is not None else None
        if sym is not None:
            return sym.kind, sym.key
        if e.id in self.declared_params:
            return "param", e.id
        return ("hyper" if e.id in self.hypers else "local"), e.id

    def _target_key(self, inner: ir.Stmt) -> str | None:
        if isinstance(inner, ir.Return):
            return self.algo.output
        target = inner.target.base if isinstance(inner.target, ir.Index) else inner.target
        return self._symbol(target)[1] if isinstance(target, ir.Name) else None

    def _target_shape(self, inner: ir.Stmt, key: str):
        if self.info is None:
            return None
        if isinstance(inner, ir.Return):
            return self.info.shape_of(inner.value)
        target = inner.target.base if isinstance(inner.target, ir.Index) else inner.target
        return self.info.locals.get(key) or self.info.shape_of(target)

    def _shape(self, e: ir.Expr):
        return self.info.shape_of(e) if self.info is not None else None

    @staticmethod
    def _shape_text(shape) -> str:
        return "" if shape is None else shape.render()

    @staticmethod
    def _type_text(t: ir.Type) -> str:
        return plain(MARKED.type(t))


def _innermost(s: ir.Stmt) -> tuple[ir.Stmt, list[ir.Expr]]:
    """The assignment or return inside an inline `for …:` / `if … then`, and the conditions of
    the `if`s around it (none: its definition always happens)."""
    conds = []
    while isinstance(s, ir.ForAll | ir.If):
        if isinstance(s, ir.If):
            conds.append(s.cond)
        s = s.body[0] if isinstance(s, ir.ForAll) else s.then[0]
    return s, conds


def _comment(s: ir.Stmt) -> str:
    while isinstance(s, ir.ForAll | ir.If) and not getattr(s, "comment", ""):
        s = s.body[0] if isinstance(s, ir.ForAll) else s.then[0]
    return getattr(s, "comment", "")


def wrap(text: str, width: int = WRAP) -> list[str]:
    """Break a step's marked text at spaces into lines of at most `width` characters (a longer
    word stays whole); continuation lines are indented.

    >>> wrap("Y ← GQAttention(Q, K, V | H, H_kv, pairs, θ)", 24)
    ['Y ← GQAttention(Q, K, V', '    | H, H_kv, pairs, θ)']
    """
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        candidate = f"{line} {word}" if line.strip() else (line + word)
        if line.strip() and len(plain(candidate)) > width:
            lines.append(line)
            line = "    " + word
        else:
            line = candidate
    return [*lines, line]


def _mark_skips(d: Diagram) -> None:
    """Mark each data edge whose target its source also reaches through other steps (a residual
    path). Reachability as bit sets, in the card's order (every edge runs forward in it)."""
    index = {id(n): i for i, n in enumerate(d.nodes)}
    succ: list[set[int]] = [set() for _ in d.nodes]
    for e in d.edges:
        succ[index[id(e.src)]].add(index[id(e.dst)])
    reach = [0] * len(d.nodes)  # bit j of reach[i]: node j is reached from node i by an edge or more
    for i in range(len(d.nodes) - 1, -1, -1):
        for j in succ[i]:
            reach[i] |= (1 << j) | reach[j]
    for e in d.edges:
        i, j = index[id(e.src)], index[id(e.dst)]
        e.skip = any(reach[k] >> j & 1 for k in succ[i] if k != j)
