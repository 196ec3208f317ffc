"""The emitter: every decision about generated code, made from the card IR.

Owns: turning each algorithm of a card (and the prelude algorithms it calls) into Python
statements for one target ("torch" or "numpy"), one statement or short block per card step,
each preceded by the card line it implements; vectorising parallel maps (`for t ∈ [ℓ]`,
`for h ∈ [H]`, `for i ∈ [d/2]`, `for t_z ∈ …, t_x ∈ …`) into array operations; threading the
run-time context (token positions, KV cache) to where the card uses positions and attention.
Leaves out: text layout (templates/*.jinja), identifiers (namespace.py), running (runtime/).

The layout of arrays is described in values.py. An error in a card that the checker lets
through but codegen cannot express raises `ToycardsError` naming the card line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from toycards.codegen.exprs import ExprEmitter
from toycards.codegen.namespace import Namespace
from toycards.codegen.values import CACHED_ARGS, MapVar, Val
from toycards.errors import Diagnostic, ToycardsError
from toycards.lang import ir
from toycards.lang.printer import Renderer, _stmt_text

BUILTINS = {
    "length",
    "exp",
    "log",
    "tanh",
    "erf",
    "sin",
    "cos",
    "sqrt",
    "abs",
    "sigmoid",
    "max",
    "min",
    "ceil",
    "rows",
}


@dataclass
class Function:
    """One generated function (an algorithm of the card or of the prelude)."""

    name: str  # identifier
    card_name: str
    header: str  # the card's header line
    description: str
    args: list[str]
    body: list[str]
    is_main: bool = False
    keywords: list[str] = field(default_factory=list)  # extra keyword parameters, after ctx


@dataclass
class ModuleSpec:
    """Everything the templates lay out."""

    target: str
    class_name: str
    card_text: str
    card_sha256: str
    main: Function
    functions: list[Function]
    hyper: list[tuple[str, str]]  # (identifier, card name)
    logits_from_softmax: bool = True


@dataclass
class Scope:
    """Names visible while emitting one algorithm."""

    algo: ir.Algorithm
    ns: Namespace
    vals: dict[str, Val] = field(default_factory=dict)  # card name → value
    families: dict[str, tuple[str, str]] = field(default_factory=dict)  # family key → (card name, var)
    param_families: dict[str, tuple[ir.Decl, ir.ParamGroup, str]] = field(default_factory=dict)
    maps: dict[str, MapVar] = field(default_factory=dict)
    loops: dict[str, Val] = field(default_factory=dict)
    windowed: set[str] = field(default_factory=set)  # windowed dimension names
    dims: dict[str, str] = field(default_factory=dict)  # dimension name → code
    decl_types: dict[str, ir.Type] = field(default_factory=dict)
    enum_options: set[str] = field(default_factory=set)
    is_main: bool = False


def family_key(name: str, index_names: set[str]) -> tuple[str, str] | None:
    """`γ_l^1` with l an index → ("γ_•^1", "l"); `K^{⌈h·H_kv/H⌉}` → ("K^•", "⌈h·H_kv/H⌉")."""
    m = re.match(r"^([^_^]+)(?:_(\{[^{}]*\}|[^_^]+))?(?:\^(\{[^{}]*\}|[^_^]+))?$", name)
    if not m:
        return None
    base, sub, sup = m.group(1), m.group(2), m.group(3)
    candidates = [("sup", sup), ("sub", sub)]
    for test in (
        lambda p, i: i in index_names,
        lambda p, i: p.startswith("{"),
        lambda p, i: re.fullmatch(r"\d+|ℓ|[A-Z]\w*", i),
    ):
        for which, part in candidates:
            if part is None or not test(part, part.strip("{}")):
                continue
            key_sub = "•" if which == "sub" else sub
            key_sup = "•" if which == "sup" else sup
            key = base + (f"_{key_sub}" if key_sub else "") + (f"^{key_sup}" if key_sup else "")
            return key, part.strip("{}")
    return None


# Prelude algorithms with a single-kernel equivalent per target (ops_<target>.<kernel>).
FAST_KERNELS = {
    "torch": {
        "softmax": "softmax", "layer_norm": "layer_norm", "rms_norm": "rms_norm", "SiLU": "silu",
        "GELU": "gelu", "GELU_tanh": "gelu_tanh", "attention": "attention", "rope_pairs": "rope_pairs",
        "rope_halves": "rope_halves",
    },
}  # fmt: skip


class Emitter:
    """Emits a whole module for one target."""

    def __init__(self, card: ir.Card, target: str, library: dict[str, ir.Algorithm]) -> None:
        self.card, self.target, self.library = card, target, library
        self.algos = {**library, **{a.name: a for a in card.algorithms}}
        self.module_ns = Namespace(reserved={"CARD", "CARD_SHA256", "Model"})
        self.func_names: dict[str, str] = {}
        self.windowed: dict[str, set[str]] = {}
        self.emitted: dict[str, Function] = {}
        self.renderer = Renderer()

    # ── driver ─────────────────────────────────────────────────────────────────────────
    def emit(self, main: ir.Algorithm) -> tuple[Function, list[Function]]:
        order = self._call_order(main)
        for name in order:
            self.func_names[name] = self.module_ns.name(name)
        main_fn = self.emit_algorithm(main, is_main=True)
        funcs = [self.emit_algorithm(self.algos[n]) for n in order if n != main.name]
        return main_fn, funcs

    def _call_order(self, main: ir.Algorithm) -> list[str]:
        """Algorithms reachable from main, callers before callees (the call graph is a DAG)."""
        seen: dict[str, list[str]] = {}

        def visit(a: ir.Algorithm) -> None:
            if a.name in seen:
                return
            seen[a.name] = sorted(
                {c.func for c in _calls(a.body) if c.func in self.algos and c.func not in BUILTINS}
            )
            for callee in seen[a.name]:
                visit(self.algos[callee])

        visit(main)
        order: list[str] = []
        indeg = {n: 0 for n in seen}
        for callees in seen.values():
            for c in callees:
                indeg[c] += 1
        ready = [main.name]
        while ready:
            n = ready.pop(0)
            order.append(n)
            for c in seen[n]:
                indeg[c] -= 1
                if indeg[c] == 0:
                    ready.append(c)
        if len(order) != len(seen):
            raise ToycardsError(f"{main.name}: recursive calls cannot be generated")
        return order

    # ── algorithms ─────────────────────────────────────────────────────────────────────
    def emit_algorithm(self, algo: ir.Algorithm, is_main: bool = False) -> Function:
        ns = self.module_ns.child()
        scope = Scope(algo, ns, is_main=is_main, windowed=set(self.windowed.get(algo.name, set())))
        ex = ExprEmitter(self, scope)
        body: list[str] = []
        args = self._prologue(scope, ex, body)
        keywords: list[str] = []
        if not is_main and algo.name in CACHED_ARGS and self.library.get(algo.name) == algo:
            keywords.append(
                "kv_index=None"
            )  # grouped-query attention: the heads of K and V each query head reads
        body += self._fast_path(algo, scope)
        if keywords:
            k, v = (scope.vals[algo.inputs[i]].code for i in CACHED_ARGS[algo.name])
            body += [
                "if kv_index is not None:  # the key/value head each query head reads (grouped-query attention)",
                f"    {k}, {v} = ops.take({k}, kv_index, -3), ops.take({v}, kv_index, -3)",
            ]
        n_prologue = len(body)
        steps = StepEmitter(self, scope, ex)
        steps.block(algo.body, body, 0)
        body = _prune_prologue(body, n_prologue)
        header = (
            f"{algo.output} ← {algo.name}("
            + ", ".join(algo.inputs)
            + (" | " + ", ".join(algo.params) if algo.params else "")
            + ")"
        )
        return Function(
            self.func_names[algo.name], algo.name, header, algo.description, args, body, is_main, keywords
        )

    def _prologue(self, scope: Scope, ex: ExprEmitter, body: list[str]) -> list[str]:
        algo, ns = scope.algo, scope.ns
        for d in algo.hyper_decls:
            for n in d.names:
                scope.decl_types[n] = d.type
                if isinstance(d.type, ir.EnumType):
                    scope.enum_options |= set(d.type.options)
        if scope.is_main:
            return self._main_prologue(scope, body)
        args: list[str] = []
        pending: list[tuple[str, ir.Type, str]] = []
        decls = {n: d for d in (*algo.input_decls, *algo.hyper_decls) for n in d.names}
        pdecls = {n: (d, g) for d, g in algo.all_params() for n in d.names}
        for name in (*algo.inputs, *algo.params):
            ident = ns.name(name)
            args.append(ident)
            if name in pdecls:
                d, _ = pdecls[name]
                rank = len(d.type.dims) if isinstance(d.type, ir.TensorType) else 0
                scope.vals[name] = Val(ident, rank, layout="card", param=True)
                scope.decl_types[name] = d.type
                pending.append((ident, d.type, "card"))
            elif name in decls:
                d = decls[name]
                scope.decl_types[name] = d.type
                scope.vals[name] = self._input_val(scope, name, ident, d, body)
            elif name in self.algos or name == "θ":
                raise ToycardsError(f"{algo.name}: header parameter {name} is not declared")
            else:
                raise ToycardsError(f"{algo.name}: header name {name} is not declared")
        for name, v in scope.vals.items():
            if v.py and not v.enum:
                scope.dims.setdefault(name, v.code)
        for _ in range(3):  # dimensions known only through others (H·d_h) need a second pass
            for ident, t, layout in pending:
                self._bind_dims(scope, ident, t, layout, body)
        for d in algo.hyper_decls:
            if d.binding is not None and d.binding.kind == "derived":
                for name in d.names:
                    ident = ns.name(name)
                    value = ex.expr(d.binding.expr).code
                    natural = isinstance(d.type, ir.TensorType) and d.type.field == "N"
                    body.append(f"{ident} = {f'int({value})' if natural else value}")
                    scope.vals[name] = Val(ident, 0, py=True)
                    scope.dims[name] = ident
        return args

    def _fast_path(self, algo: ir.Algorithm, scope: Scope) -> list[str]:
        """A one-kernel shortcut for a prelude algorithm, when the target has one (torch).

        Only the library's own algorithm gets it (a card that redefines `softmax` keeps its
        steps), and tests/test_kernels.py shows each kernel equals the steps it replaces.
        """
        kernel = FAST_KERNELS.get(self.target, {}).get(algo.name)
        if kernel is None or self.library.get(algo.name) != algo:
            return []
        args = [scope.vals[n].code for n in (*algo.inputs, *algo.params)]
        if kernel == "attention":  # the mask is a function of positions: give it those
            mask = next(
                d for d in algo.hyper_decls if isinstance(d.type, ir.TensorType) and d.type.field == "B"
            )
            for dim in mask.type.dims:
                code = scope.dims[dim.name]
                args.append(
                    f"runtime.positions(ctx, {code})"
                    if dim.name in scope.windowed
                    else f"ops.arange(1, {code} + 1)"
                )
            if algo.name in CACHED_ARGS:
                args.append("kv_index")
        return [
            "if ops.fast:  # one kernel for the steps below (tests/test_kernels.py ties the two)",
            f"    return ops.{kernel}({', '.join(args)})",
        ]

    def _input_val(self, scope: Scope, name: str, ident: str, d: ir.Decl, body: list[str]) -> Val:
        t = d.type
        if isinstance(t, ir.TensorType) and t.field == "B" and len(t.dims) == 2:
            return Val(ident, 2, mask=True)
        if isinstance(t, ir.TensorType) and t.dims:
            self._bind_dims(scope, ident, t, "code", body)
            win = len(t.dims) == 2 and isinstance(t.dims[1], ir.DimName) and t.dims[1].name in scope.windowed
            return Val(ident, len(t.dims), windowed=win)
        if isinstance(t, ir.EnumType | ir.StrType):
            return Val(ident, 0, py=True, enum=True)
        if (
            isinstance(t, ir.TensorType)
            and t.field in ("N", "Z", "R")
            and name in {n for h in scope.algo.hyper_decls for n in h.names}
        ):
            return Val(ident, 0, py=True)
        return Val(ident, 0)

    def _bind_dims(self, scope: Scope, ident: str, t: ir.Type, layout: str, body: list[str]) -> None:
        """Give each dimension of a declared input/parameter a value from the array's shape."""
        if not isinstance(t, ir.TensorType) or not t.dims:
            return
        n = len(t.dims)
        hypers = {x for h in scope.algo.hyper_decls for x in h.names}
        for axis, dim in enumerate(t.dims):
            code_axis = axis - n if layout == "card" else -1 - axis
            solved = _solve_dim(dim, f"{ident}.shape[{code_axis}]", scope.dims)
            if solved is not None and solved[0] not in hypers:
                name, value = solved
                dim_ident = scope.ns.name(name)
                body.append(f"{dim_ident} = {value}")
                scope.dims[name] = dim_ident

    def _main_prologue(self, scope: Scope, body: list[str]) -> list[str]:
        algo, ns = scope.algo, scope.ns
        if len(algo.inputs) != 1:
            raise ToycardsError(
                f"{algo.name}, the card's last algorithm, is its entry point and must be a model taking one input,"
                " the token ids (`x ∈ V^ℓ`)"
            )
        x = algo.inputs[0]
        x_decl = next((d for d in algo.input_decls if x in d.names), None)
        if x_decl is None or not isinstance(x_decl.type, ir.TensorType) or x_decl.type.field != "V":
            raise ToycardsError(
                f"{algo.name}, the card's last algorithm, is its entry point and must be a model taking token ids"
                f" (`{x} ∈ V^ℓ`); put the model's algorithm last"
            )
        seq = x_decl.type.dims[0]
        seq_name = seq.name if isinstance(seq, ir.DimName) else "ℓ"
        scope.windowed.add(seq_name)
        scope.vals[x] = Val("x", 1, windowed=True)
        ns.given[x] = "x"
        ns.used.add("x")
        seq_ident = ns.name(seq_name)
        scope.dims[seq_name] = seq_ident
        body.append(f"{seq_ident} = x.shape[-1]")
        body.append(f"ctx = runtime.Context({seq_ident}, cache, ops)")
        for d in algo.hyper_decls:
            if isinstance(d.type, ir.TensorType) and d.type.dims:
                continue
            for n in d.names:
                ident = ns.name(n)
                scope.vals[n] = Val(ident, 0, py=True, enum=isinstance(d.type, ir.EnumType | ir.StrType))
                scope.dims[n] = ident
                body.append(f"{ident} = self.hp[{n!r}]")
        for d, g in algo.all_params():
            for n in d.names:
                scope.decl_types[n] = d.type
                rank = len(d.type.dims) if isinstance(d.type, ir.TensorType) else 0
                src = d.binding.sources[d.names.index(n)][0] if d.binding and d.binding.sources else None
                if src is None or not src.tensor:
                    raise ToycardsError(f"{algo.name}: parameter {n} needs a tensor binding to be generated")
                layout = "code" if src.transpose else "card"
                if g is None:
                    scope.vals[n] = Val(f"self.w[{src.tensor!r}]", rank, layout=layout, param=True)
                else:
                    key, var = family_key(n, {g.var}) or (None, None)
                    if key is None or var != g.var:
                        raise ToycardsError(
                            f"{algo.name}: per-layer parameter {n} must carry the group index {g.var}"
                        )
                    scope.param_families[key] = (d, g, n)
        return ["x", "cache"]


_LINE_BREAKS = re.compile("[\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def comment_safe(text: str) -> str:
    """Card text made safe to sit in a `#` comment: no character Python or an editor breaks lines at."""
    return _LINE_BREAKS.sub(" ", text)


def _prune_prologue(body: list[str], n: int) -> list[str]:
    """Drop prologue assignments (dimensions, hyperparameters) that no statement reads."""
    prologue, rest = body[:n], body[n:]
    changed = True
    while changed:
        changed = False
        for i, line in enumerate(prologue):
            m = re.match(r"^(\w+) = ", line)
            if m is None or m.group(1) == "ctx":
                continue
            used = re.compile(rf"(?<![\w.]){m.group(1)}(?!\w)")
            others = [o for o in prologue[:i] + prologue[i + 1 :] + rest if not o.lstrip().startswith("#")]
            if not any(
                used.search(o.split(" = ", 1)[1] if re.match(rf"^\s*{m.group(1)} = ", o) else o)
                for o in others
            ):
                del prologue[i]
                changed = True
                break
    return prologue + rest


def _solve_dim(dim: ir.Dim, value: str, known: dict[str, str]) -> tuple[str, str] | None:
    """The one unknown dimension name in `dim` = value, when it can be solved: `H·d_h` → d_h = value // H."""
    if isinstance(dim, ir.DimName):
        return None if dim.name in known else (dim.name, value)
    if not isinstance(dim, ir.DimOp):
        return None

    def code(d: ir.Dim) -> str | None:
        if isinstance(d, ir.DimNum):
            return str(d.value)
        if isinstance(d, ir.DimName):
            return known.get(d.name)
        left, right = code(d.left), code(d.right)
        if left is None or right is None:
            return None
        return f"({left} {dict(zip('+-*/', ['+', '-', '*', '//'], strict=True))[d.op]} {right})"

    left, right = code(dim.left), code(dim.right)
    if left is not None and right is None:
        inverse = {"*": f"{value} // {left}", "+": f"{value} - {left}", "-": f"{left} - {value}", "/": None}[
            dim.op
        ]
        return _solve_dim(dim.right, inverse, known) if inverse else None
    if right is not None and left is None:
        inverse = {
            "*": f"{value} // {right}",
            "+": f"{value} - {right}",
            "-": f"{value} + {right}",
            "/": f"{value} * {right}",
        }[dim.op]
        return _solve_dim(dim.left, f"({inverse})", known)
    return None


def _calls(body) -> list[ir.Call]:
    return [n for n in ir.walk(body) if isinstance(n, ir.Call)]


class StepEmitter:
    """Statements: one card step → one commented statement (or short block)."""

    def __init__(self, emitter: Emitter, scope: Scope, ex: ExprEmitter) -> None:
        self.em, self.scope, self.ex = emitter, scope, ex
        self.number = 0

    def note(self, s: ir.Stmt, text: str | None = None) -> str:
        r = self.em.renderer
        if text is None:
            line, annot = _stmt_text(r, s)
            if annot is not None:
                line += f"  ∷ {r.type(annot)}"
        else:
            line = text
        return f"# {self.number}  {comment_safe(line)}"

    def block(self, body: tuple[ir.Stmt, ...], out: list[str], depth: int) -> None:
        pad = "    " * depth
        for s in body:
            if isinstance(s, ir.Comment):
                out.append(f"{pad}# ▷ {comment_safe(s.text)}")
                continue
            self.number += 1
            try:
                self.stmt(s, out, pad, depth)
            except ToycardsError as exc:
                if exc.diagnostics:
                    raise
                raise ToycardsError.from_diagnostics(
                    [Diagnostic(s.span, f"cannot generate code: {exc.message}")],
                    {self.scope.algo.span.file: self.em.card.source},
                ) from None

    def stmt(self, s: ir.Stmt, out: list[str], pad: str, depth: int) -> None:
        if isinstance(s, ir.ForSeq):
            self._for_seq(s, out, pad, depth)
        elif isinstance(s, ir.ForAll):
            self._forall(s, out, pad, depth)
        elif isinstance(s, ir.If) and not s.inline:
            self._if_block(s, out, pad, depth)
        elif isinstance(s, ir.If):
            cond = self.ex.expr(s.cond)
            out.append(pad + self.note(s))
            if not cond.py:
                raise ToycardsError(
                    "an `if` outside a parallel map must test hyperparameters or loop indices"
                )
            inner: list[str] = []
            self.simple(s.then[0], inner)
            out.append(f"{pad}if {cond.code}:")
            out += [f"{pad}    {line}" for line in inner]
        else:
            out.append(pad + self.note(s))
            lines: list[str] = []
            self.simple(s, lines)
            out += [pad + line for line in lines]

    def _for_seq(self, s: ir.ForSeq, out, pad, depth) -> None:
        start, stop = self.ex.expr(s.start), self.ex.expr(s.stop)
        ident = self.scope.ns.name(s.var)
        out.append(
            pad
            + self.note(
                s, f"for {s.var} = {self.em.renderer.expr(s.start)}, …, {self.em.renderer.expr(s.stop)} do"
            )
        )
        out.append(f"{pad}for {ident} in range({start.code}, {stop.code} + 1):")
        self.scope.loops[s.var] = Val(ident, 0, py=True)
        before = len(out)
        self.block(s.body, out, depth + 1)
        if len(out) == before:
            out.append(f"{pad}    pass")
        self.number += 1  # `end`
        del self.scope.loops[s.var]

    def _if_block(self, s: ir.If, out, pad, depth) -> None:
        cond = self.ex.expr(s.cond)
        if not cond.py:
            raise ToycardsError("an `if` outside a parallel map must test hyperparameters or loop indices")
        out.append(pad + self.note(s, f"if {self.em.renderer.expr(s.cond)} then"))
        out.append(f"{pad}if {cond.code}:")
        before = len(out)
        self.block(s.then, out, depth + 1)
        if len(out) == before:
            out.append(f"{pad}    pass")
        if s.orelse:
            self.number += 1
            out.append(f"{pad}else:")
            self.block(s.orelse, out, depth + 1)
        self.number += 1  # `end`

    def _forall(self, s: ir.ForAll, out, pad, depth) -> None:
        merged_ends, number = 0, self.number
        while not s.inline and len(s.body) == 1 and isinstance(s.body[0], ir.ForAll):
            inner = s.body[0]  # `for t_z … do for t_x … do … end end` is one map over both
            s = ir.ForAll(s.ranges + inner.ranges, inner.body, inner.inline, s.comment, span=s.span)
            self.number += 1
            merged_ends += 1
        ranges = s.ranges
        maps = {}
        for r in ranges:
            bound = self.ex.dim(r.bound)
            win = isinstance(r.bound, ir.DimName) and r.bound.name in self.scope.windowed
            maps[r.var] = MapVar(r.var, self.scope.ns.name(r.var), bound, win)
        kinds = _map_kinds(s, set(maps))
        for v, k in kinds.items():
            maps[v].kind = k
        self.scope.maps.update(maps)
        head = out.append
        if s.inline:
            head(pad + self.note(s))
            lines: list[str] = []
            self._map_body(s.body[0], lines, maps)
            out += [pad + line for line in self._var_defs(maps) + lines]
        else:
            self.number, inner_number = number, self.number
            head(
                pad
                + self.note(
                    s,
                    "for "
                    + ", ".join(f"{r.var} ∈ [{self.em.renderer.dim(r.bound)}]" for r in ranges)
                    + " do",
                )
            )
            self.number = inner_number
            lines = []
            inner_pad = ""
            for st in s.body:
                self.number += 1
                lines.append(inner_pad + self.note(st))
                self._map_body(st, lines, maps)
            out += [pad + line for line in self._var_defs(maps) + lines]
            self.number += 1  # `end`
        self.number += merged_ends
        for v in maps:
            del self.scope.maps[v]

    def _var_defs(self, maps: dict[str, MapVar]) -> list[str]:
        out = []
        for m in maps.values():
            if not m.used_as_value:
                continue
            values = (
                f"runtime.positions(ctx, {m.bound_code})"
                if m.windowed
                else f"ops.arange(1, {m.bound_code} + 1)"
            )
            out.append(
                f"{m.ident} = ops.as_float(ops.index_vector({values}, {m.ndim_after}))  # {m.name} ∈ [{m.bound_code}]"
            )
        return out

    def _map_body(self, st: ir.Stmt, out: list[str], maps: dict[str, MapVar]) -> None:
        if isinstance(st, ir.If) and st.inline:
            target = st.then[0]
            if not isinstance(target, ir.Assign):
                raise ToycardsError("inside a parallel map, `if … then` must guard an assignment")
            cond = self.ex.expr(st.cond)
            value = self.ex.expr(target.value)
            old = self.ex.target_read(target.target)
            ident = self.ex.target_ident(target.target)
            if isinstance(st.cond, ir.UnOp) and st.cond.op == "¬":
                keep = self.ex.expr(st.cond.operand)
                out.append(f"{ident} = ops.where({keep.code}, {old.code}, {value.code})")
            else:
                out.append(f"{ident} = ops.where({cond.code}, {value.code}, {old.code})")
            return
        if isinstance(st, ir.Assign):
            self.ex.assign_in_map(st, out, maps)
            return
        raise ToycardsError("a parallel map may hold assignments and guarded assignments only")

    def simple(self, s: ir.Stmt, out: list[str]) -> None:
        if isinstance(s, ir.Assign):
            self.ex.assign(s, out)
        elif isinstance(s, ir.Return):
            self.ex.ret(s, out)
        else:
            raise ToycardsError(f"unsupported statement {type(s).__name__}")


def _map_kinds(s: ir.ForAll, names: set[str]) -> dict[str, str]:
    """How each map variable is laid out, read from the assignment targets of the map body."""
    kinds: dict[str, str] = {}
    body = [b.then[0] if isinstance(b, ir.If) else b for b in s.body]
    for st in body:
        t = st.target if isinstance(st, ir.Assign) else None
        if isinstance(t, ir.Index):
            idx = t.indices
            if (
                len(idx) == 2
                and isinstance(idx[0], ir.Slice)
                and isinstance(idx[1], ir.Name)
                and idx[1].id in names
            ):
                kinds.setdefault(idx[1].id, "column")
            elif len(idx) == 2 and all(isinstance(i, ir.Name) and i.id in names for i in idx):
                kinds.setdefault(idx[0].id, "element")
                kinds.setdefault(idx[1].id, "column")
            elif len(idx) == 1:
                for n in _names(idx[0]) & names:
                    kinds.setdefault(n, "element")
    for n in names:
        kinds.setdefault(n, "pending")
    return kinds


def _names(e: object) -> set[str]:
    return {n.id for n in ir.walk(e) if isinstance(n, ir.Name)}
