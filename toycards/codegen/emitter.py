"""The emitter: every decision about generated code, made from the card IR.

Owns: turning each algorithm of a card (and the prelude algorithms it calls) into Python
statements for one target ("torch" or "numpy"), one statement or short block per card step,
each preceded by the card line it implements; vectorising parallel maps (`for t ∈ [ℓ]`,
`for h ∈ [H]`, `for i ∈ [d/2]`, `for t_z ∈ …, t_x ∈ …`) into array operations; threading the
run-time context (token positions, KV cache) to where the card uses positions and attention, and
an algorithm's `State:` from the cache at its start to the cache at its `return`; which
algorithm a call runs (the card's own first, the library's inside the library).
Leaves out: text layout (templates/*.jinja), identifiers (namespace.py), running (runtime/).

The layout of arrays is described in values.py. An error in a card that the checker lets
through but codegen cannot express raises `ToycardsError` naming the card line.
"""

from __future__ import annotations

import re

from toycards.checker.tokenflow import CachePlan
from toycards.codegen.exprs import ExprEmitter
from toycards.codegen.module import Function, comment_safe
from toycards.codegen.namespace import Namespace
from toycards.codegen.scope import Scope, family_key, run_time_hypers
from toycards.codegen.steps import StepEmitter, calls_in
from toycards.codegen.values import HEAD_PICKING, Checked, Val
from toycards.errors import ToycardsError
from toycards.lang import ir
from toycards.lang.builtins import BUILTINS
from toycards.lang.options import defaults
from toycards.lang.per_layer import is_per_layer
from toycards.lang.printer import Renderer


class Emitter:
    """Emits a whole module for one target."""

    def __init__(
        self,
        card: ir.Card,
        target: str,
        library: dict[str, ir.Algorithm],
        plan: CachePlan | None = None,
        checked: Checked | None = None,
    ) -> None:
        self.card, self.target, self.library = card, target, library
        self.plan = plan or CachePlan("no cache plan")  # token axes and context inputs (checker/tokenflow.py)
        self.checked = checked or Checked()  # the checker's shape of each expression node
        self.own = {a.name: a for a in card.algorithms}
        self.module_ns = Namespace(reserved={"CARD", "CARD_SHA256", "Model"})
        self.func_names: dict[int, str] = {}  # id(algorithm) → its function's name
        self.renderer = Renderer()

    def sources(self, algo: ir.Algorithm) -> dict[str, str]:
        """The text `algo` was read from, by file name, for a refusal's caret context: the card's,
        or the prelude's for one of the library's algorithms."""
        if self.own.get(algo.name) is algo or self.library.get(algo.name) is not algo:
            return {algo.span.file: self.card.source}
        from toycards.library import library_card

        return {algo.span.file: library_card("prelude").source}

    def resolve(self, caller: ir.Algorithm, name: str) -> ir.Algorithm | None:
        """The algorithm a call of `name` in `caller` runs, as the interpreter finds it: one of the
        card's own first, then the library's; a library algorithm's calls stay in the library (the
        prelude's `attention` calls the prelude's `softmax`, even where the card has its own)."""
        if self.own.get(caller.name) is caller and name in self.own:
            return self.own[name]
        return self.library.get(name)

    # ── driver ─────────────────────────────────────────────────────────────────────────
    def emit(self, main: ir.Algorithm) -> tuple[Function, list[Function]]:
        order = self._call_order(main)
        named: set[str] = set()
        for algo in order:  # a library algorithm the card also defines gets a name of its own
            ns = self.module_ns
            self.func_names[id(algo)] = ns.fresh(algo.name) if algo.name in named else ns.name(algo.name)
            named.add(algo.name)
        main_fn = self.emit_algorithm(main, is_main=True)
        funcs = [self.emit_algorithm(a) for a in order if a is not main]
        return main_fn, funcs

    def _call_order(self, main: ir.Algorithm) -> list[ir.Algorithm]:
        """Algorithms reachable from main, callers before callees (the call graph is a DAG)."""
        seen: dict[int, list[ir.Algorithm]] = {}
        algos: dict[int, ir.Algorithm] = {}

        def visit(a: ir.Algorithm) -> None:
            if id(a) in seen:
                return
            algos[id(a)] = a
            names = sorted({c.func for c in calls_in(a.body) if c.func not in BUILTINS})
            callees = [self.resolve(a, n) for n in names]
            seen[id(a)] = [c for c in callees if c is not None]
            for callee in seen[id(a)]:
                visit(callee)

        visit(main)
        order: list[ir.Algorithm] = []
        indeg = dict.fromkeys(seen, 0)
        for callees in seen.values():
            for c in callees:
                indeg[id(c)] += 1
        ready = [main]
        while ready:
            a = ready.pop(0)
            order.append(a)
            for c in seen[id(a)]:
                indeg[id(c)] -= 1
                if indeg[id(c)] == 0:
                    ready.append(c)
        if len(order) != len(seen):
            raise ToycardsError(f"{main.name}: recursive calls cannot be generated")
        return order

    # ── algorithms ─────────────────────────────────────────────────────────────────────
    def emit_algorithm(self, algo: ir.Algorithm, is_main: bool = False) -> Function:
        ns = self.module_ns.child()
        scope = Scope(algo, ns, is_main=is_main, windowed=set(self.plan.query_dims.get(algo.name, ())))
        ex = ExprEmitter(self, scope)
        body: list[str] = []
        args = self._prologue(scope, ex, body)
        keywords: list[str] = []
        if not is_main and algo.name in HEAD_PICKING and self.library.get(algo.name) == algo:
            keywords.append(
                "kv_index=None"
            )  # grouped-query attention: the heads of K and V each query head reads
        if keywords:
            k, v = (scope.vals[algo.inputs[i]].code for i in HEAD_PICKING[algo.name])
            body += [
                "if kv_index is not None:  # the key/value head each query head reads (grouped-query attention)",
                f"    {k}, {v} = ops.take({k}, kv_index, -3), ops.take({v}, kv_index, -3)",
            ]
        n_prologue = len(body)
        body += self._state_prologue(scope, ex)
        for name in sorted(run_time_hypers(self).get(algo.name, ())):
            if name in scope.vals and scope.vals[name].py:  # (StepEmitter makes it a run-time value)
                v = scope.vals[name].code
                body.append(f"{v} = ops.run_time({v})  # {name}: an array at some calls, a number at others")
        steps = StepEmitter(self, scope, ex)
        cut = self.plan.last_cut if is_main else None
        if cut is None:
            steps.block(algo.body, body, 0)
        else:
            steps.block(algo.body[: cut[0] + 1], body, 0)
            at, live = len(body), dict(scope.vals)
            steps.block(algo.body[cut[0] + 1 :], body, 0)
            body[at:at] = self._last_only(scope, live, cut[1], body[at:])
        body = _prune_prologue(body, n_prologue)
        header = (
            f"{algo.output} ← {algo.name}("
            + ", ".join(algo.inputs)
            + (" | " + ", ".join(algo.params) if algo.params else "")
            + ")"
        )
        return Function(
            self.func_names[id(algo)], algo.name, header, algo.description, args, body, is_main, keywords
        )

    def _state_prologue(self, scope: Scope, ex: ExprEmitter) -> list[str]:
        """`State:` names, each as this call site left it in the cache, or zeros with the batch
        axes of the algorithm's first array input (its own axes dropped)."""
        algo = scope.algo
        if not algo.state_decls:
            return []
        arrays = [
            (scope.vals[n], len(d.type.dims))
            for d in algo.input_decls
            if isinstance(d.type, ir.TensorType) and d.type.dims
            for n in d.names
        ]
        ref = next(((v.code, rank) for v, rank in arrays if not v.mask), None)
        if ref is None:
            raise ToycardsError(
                f"{algo.name} has a State but no array input to take its batch axes from; "
                "give it the sequence it reads as an input"
            )
        slot = scope.ns.fresh("slot")
        lines = [f"{slot} = runtime.state_slot(ctx)  # the cache's slot for this call's State"]
        names = []
        for d in algo.state_decls:
            dims = [ex.dim(x) for x in reversed(d.type.dims)] or ["1"]  # code layout; a scalar is […, 1]
            for n in d.names:
                ident = scope.ns.name(n)
                zeros = f"ops.zeros_batch({ref[0]}, {ref[1]}, {', '.join(dims)})"
                lines.append(f"{ident} = runtime.recall(ctx, {slot}, {len(names)}, {zeros})")
                scope.vals[n] = Val(ident, len(d.type.dims))
                scope.decl_types[n] = d.type
                names.append(ident)
        scope.state = (slot, names)
        return lines

    def _last_only(
        self, scope: Scope, live: dict[str, Val], axes: dict[str, int], after: list[str]
    ) -> list[str]:
        """Lines that keep only the last token of each value live after the entry point's last
        context-reading step (the cache plan's `last_cut`), when the forward pass is asked for the
        last token's logits alone (`last`): every later step acts on each token alone, and the
        context keeps the last position alone too. No lines when a later line reads a token count or
        extends the cache, or a value is not a plain local array."""
        counts = [scope.dims[d] for d in scope.windowed if d in scope.dims]
        if not counts or any(
            re.search(rf"\b({'|'.join(map(re.escape, counts))})\b|\bruntime\.extend\b", line)
            for line in after
        ):
            return []
        cuts = []
        for name, axis in sorted(axes.items()):
            v = live.get(name)
            if v is None or v.param or v.py or v.layout != "code" or not v.code.isidentifier():
                return []
            if v.rank == 1 and axis == 0:
                cuts.append(f"    {v.code} = {v.code}[..., -1:]")
            elif v.rank == 2:
                cuts.append(
                    f"    {v.code} = {v.code}[..., -1:, :]"
                    if axis == 1
                    else f"    {v.code} = {v.code}[..., -1:]"
                )
            else:
                return []
        if not cuts:
            return []
        return [
            "if last:  # the last token's outputs alone: every step below acts on each token by itself",
            *cuts,
            "    ctx.keep_last()",
        ]

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
        optional = defaults(algo)
        vectors = {n: d.type for d in algo.hyper_decls if isinstance(d.type, ir.TensorType) for n in d.names}
        # optional vectors (`σ ∈ ℝ^{H} default −∞`): None in the signature, filled once the dimensions are known
        filled = [n for n in algo.params if n in optional and n in vectors and vectors[n].dims]
        for name in (*algo.inputs, *algo.params):
            ident = ns.name(name)
            default = ("None" if name in filled else ex.expr(optional[name]).code) if name in optional else ""
            args.append(f"{ident}={default}" if default else ident)
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
                if scope.vals[name].rank and not scope.vals[name].mask:  # H·d_h once H is known
                    pending.append((ident, d.type, "code"))
            elif self.resolve(algo, name) is not None or name == "θ":
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
        for name in filled:  # once the dimensions are known
            ident, value = ns.name(name), ex.expr(optional[name]).code
            sizes = ", ".join(ex.dim(x) for x in reversed(vectors[name].dims))
            body.append(
                f"{ident} = ops.filled({value}, {sizes}) if {ident} is None else {ident}"
                f"  # {comment_safe(name)} left out: {comment_safe(self.renderer.expr(optional[name]))} in every entry"
            )
        return args

    def _input_val(self, scope: Scope, name: str, ident: str, d: ir.Decl, body: list[str]) -> Val:
        t = d.type
        if isinstance(t, ir.TensorType) and t.field == "B" and len(t.dims) == 2:
            return Val(ident, 2, mask=True)
        if isinstance(t, ir.TensorType) and t.dims:
            self._bind_dims(scope, ident, t, "code", body)
            return Val(ident, len(t.dims))
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
        scope.vals[x] = Val("x", 1)
        ns.given[x] = "x"
        ns.used.add("x")
        seq_ident = ns.name(seq_name)
        scope.dims[seq_name] = seq_ident
        body.append(f"{seq_ident} = x.shape[-1]")
        body.append(f"ctx = runtime.Context({seq_ident}, cache, ops)")
        for d in algo.hyper_decls:
            per_layer = is_per_layer(d)
            if isinstance(d.type, ir.TensorType) and d.type.dims and not per_layer:
                continue
            for n in d.names:
                ident = ns.name(n)
                if per_layer:  # a Python tuple, one entry per layer: `n_kv[l]` is `n_kv[l - 1]`
                    scope.vals[n] = Val(ident, 1, py=True)
                    body.append(f"{ident} = self.hp[{n!r}]")
                    continue
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
