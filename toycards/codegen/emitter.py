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

from toycards.checker.tokenflow import CachePlan
from toycards.codegen.exprs import ExprEmitter
from toycards.codegen.module import Function
from toycards.codegen.namespace import Namespace
from toycards.codegen.scope import Scope, family_key
from toycards.codegen.steps import StepEmitter, calls_in
from toycards.codegen.values import HEAD_PICKING, Val
from toycards.errors import ToycardsError
from toycards.lang import ir
from toycards.lang.builtins import BUILTINS
from toycards.lang.options import defaults
from toycards.lang.printer import Renderer

# Prelude algorithms with a single-kernel equivalent per target (ops_<target>.<kernel>).
# A kernel in MAY_DECLINE returns None where it does not apply, and the steps run instead.
FAST_KERNELS = {
    "torch": {
        "softmax": "softmax", "layer_norm": "layer_norm", "rms_norm": "rms_norm", "SiLU": "silu",
        "GELU": "gelu", "GELU_tanh": "gelu_tanh", "attention": "attention", "rope_pairs": "rope_pairs",
        "rope_halves": "rope_halves", "MoE": "moe", "GQAttention": "gq_attention", "SwiGLU": "swiglu",
    },
    # MoE: the card's steps run every expert on every token, this only the chosen ones; GQAttention:
    # one C call where the kernels are built (its steps cost most of a decoding step in NumPy calls)
    "numpy": {"MoE": "moe", "GQAttention": "gq_attention"},
}  # fmt: skip
MAY_DECLINE = {"gq_attention", "swiglu"}


class Emitter:
    """Emits a whole module for one target."""

    def __init__(
        self, card: ir.Card, target: str, library: dict[str, ir.Algorithm], plan: CachePlan | None = None
    ) -> None:
        self.card, self.target, self.library = card, target, library
        self.plan = plan or CachePlan("no cache plan")  # token axes and context inputs (checker/tokenflow.py)
        self.algos = {**library, **{a.name: a for a in card.algorithms}}
        self.module_ns = Namespace(reserved={"CARD", "CARD_SHA256", "Model"})
        self.func_names: dict[str, str] = {}
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
                {c.func for c in calls_in(a.body) if c.func in self.algos and c.func not in BUILTINS}
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
        scope = Scope(algo, ns, is_main=is_main, windowed=set(self.plan.query_dims.get(algo.name, ())))
        ex = ExprEmitter(self, scope)
        body: list[str] = []
        args = self._prologue(scope, ex, body)
        keywords: list[str] = []
        if not is_main and algo.name in HEAD_PICKING and self.library.get(algo.name) == algo:
            keywords.append(
                "kv_index=None"
            )  # grouped-query attention: the heads of K and V each query head reads
        body += self._fast_path(algo, scope)
        if keywords:
            k, v = (scope.vals[algo.inputs[i]].code for i in HEAD_PICKING[algo.name])
            body += [
                "if kv_index is not None:  # the key/value head each query head reads (grouped-query attention)",
                f"    {k}, {v} = ops.take({k}, kv_index, -3), ops.take({v}, kv_index, -3)",
            ]
        n_prologue = len(body)
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
            self.func_names[algo.name], algo.name, header, algo.description, args, body, is_main, keywords
        )

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
        for name in (*algo.inputs, *algo.params):
            ident = ns.name(name)
            args.append(f"{ident}={ex.expr(optional[name]).code}" if name in optional else ident)
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
        """A one-kernel shortcut for a prelude algorithm, when the target has one (FAST_KERNELS).

        Only the library's own algorithm gets it (a card that redefines `softmax` keeps its
        steps), and tests/test_kernels.py (torch) and tests/test_kernels_numpy.py show each kernel
        equals the steps it replaces.
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
            if algo.name in HEAD_PICKING:
                args.append("kv_index")
        if kernel == "gq_attention":  # positions of the new tokens, and the cache when the steps extend one
            extended = {self.plan.extend.get(id(c), ()) for c in calls_in(algo.body)} - {()}
            if extended not in (set(), {(1, 2)}):  # the steps cache something else than K̂ and V
                return []
            ell = scope.dims[algo.input_decls[0].type.dims[-1].name]
            windowed = algo.input_decls[0].type.dims[-1].name in scope.windowed
            args.append(f"runtime.positions(ctx, {ell})" if windowed else f"ops.arange(1, {ell} + 1)")
            args.append("ctx" if extended else "None")
        tests = "tests/test_kernels.py" if self.target == "torch" else f"tests/test_kernels_{self.target}.py"
        if kernel in MAY_DECLINE:
            done = scope.ns.fresh("done")
            return [
                f"if ops.fast:  # one kernel for the steps below where it applies ({tests} ties the two)",
                f"    {done} = ops.{kernel}({', '.join(args)})",
                f"    if {done} is not None:",
                f"        return {done}",
            ]
        return [
            f"if ops.fast:  # one kernel for the steps below ({tests} ties the two)",
            f"    return ops.{kernel}({', '.join(args)})",
        ]

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
