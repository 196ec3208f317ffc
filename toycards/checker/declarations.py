"""Declarations of one algorithm: what its names are, and its Signature.

Owns: registering inputs, outputs, hyperparameters, parameters (and per-layer families such as
`γ_l^1` in `for l ∈ [L], in "blk.{l-1}.":`), states (`State:`, sized by neither an input's token
count nor a binding) and the dimension names they declare implicitly;
the algorithm's `Signature` (what callers see); and the diagnostics for declarations: duplicates,
header names that are not declared (and declared inputs the header does not take), derived
hyperparameters (`d_h ≔ d_e / H`: a dimension expression, exact division, no cycles), and
hyperparameters that can be neither bound, passed, derived nor inferred from a shape.
Leaves out: the rules of `from …` bindings (bindings.py) and the steps (steps.py).
"""

from __future__ import annotations

import re
import unicodedata

from toycards.checker import bindings
from toycards.checker.context import Ctx, Signature
from toycards.checker.dims import Dim, DimError, expr_to_dim, ir_dim_names, type_dim_names
from toycards.checker.names import Entry, family_key
from toycards.checker.shapes import NATURAL, DimEq, Shape, shape_from_type
from toycards.errors import Span
from toycards.lang import ir
from toycards.lang.names import ascii_name
from toycards.lang.options import defaults

ALL_PARAMS = "θ"


def name_span(ctx: Ctx, span: Span, name: str, skip: int = 0) -> Span:
    """The span of `name` inside the one-line region `span` (Unicode or ASCII spelling),
    after skipping `skip` earlier occurrences."""
    src = ctx.card.source
    if not src or span.line <= 0:
        return span
    region = src[span.start : span.end]
    for spelling in (name, ascii_name(name)):
        for m in re.finditer(re.escape(spelling), region):
            after = region[m.end() : m.end() + 1]
            before = region[m.start() - 1 : m.start()] if m.start() else ""
            if _continues(after) or before.isalnum() or before in ("_", "^"):
                continue
            if skip:
                skip -= 1
            else:
                start = span.start + m.start()
                col = span.col + (start - span.start)
                return Span(
                    span.file, span.line, col, span.line, col + len(spelling), start, start + len(spelling)
                )
    return span


def _continues(ch: str) -> bool:
    return bool(ch) and (ch.isalnum() or ch in "_^~" or unicodedata.combining(ch) > 0)


def declare(ctx: Ctx) -> Signature:
    """Register every declaration of `ctx.algo` in `ctx.scope` and return its Signature."""
    d = _Declarer(ctx)
    d.run()
    return d.sig


class _Declarer:
    def __init__(self, ctx: Ctx) -> None:
        self.ctx, self.sig = ctx, Signature(ctx.algo)
        self.seen: dict[str, Span] = {}
        self.values: dict[str, int] = {}  # ℕ hyperparameters with a concrete value (bound card)

    def run(self) -> None:
        a = self.ctx.algo
        for decl in a.hyper_decls:
            self.hyper(decl)
        for item in a.param_decls:
            if isinstance(item, ir.ParamGroup):
                self.group(item)
            else:
                self.param(item, None)
        for decl in a.input_decls:
            self.value_decl(decl, "input")
        for decl in a.output_decls:
            self.value_decl(decl, "output")
        self.implicit_dims()
        for decl in a.state_decls:
            self.state(decl)
        self.derived()
        self.header()
        self.inferred()
        bindings.concrete(self.ctx, self.sig, self.values)

    # ── helpers ──
    def shape(self, t: ir.Type) -> Shape:
        return shape_from_type(t, lambda d, msg: self.ctx.error(d.span, f"dimension {msg}"))

    def dup(self, name: str, decl: object) -> bool:
        if name in self.seen:
            first = self.seen[name]
            span = name_span(self.ctx, decl.span, name)
            self.ctx.error(span, f"{name} is declared twice", f"first declared on line {first.line}")
            return True
        self.seen[name] = decl.span
        return False

    def register(self, name: str, entry: Entry) -> None:
        entry.where = entry.decl.span.line
        self.ctx.scope.declared.setdefault(name, entry)

    # ── declaration blocks ──
    def hyper(self, decl: ir.Decl) -> None:
        shape = self.shape(decl.type)
        bindings.hyper_binding(self.ctx, decl)
        for name in decl.names:
            if self.dup(name, decl):
                continue
            self.register(name, Entry("hyper", name, shape, decl))
            if shape.field == "N" and not shape.dims:
                self.sig.naturals.add(name)
        for option in shape.options:
            self.ctx.scope.options.setdefault(option, Entry("option", option, shape, decl))
        if decl.value is not None:
            bindings.hyper_value(self.ctx, decl, shape, self.values)

    def param(self, decl: ir.Decl, group: ir.ParamGroup | None) -> None:
        shape = self.shape(decl.type)
        bindings.param_binding(self.ctx, decl, shape)
        bound = bindings.dim_or_none(group.bound) if group else None
        for name in decl.names:
            if self.dup(name, decl):
                continue
            entry = Entry("param", name, shape, decl)
            key = family_key(name, group.var) if group else None
            if group is not None and key is None:
                self.ctx.error(
                    name_span(self.ctx, decl.span, name),
                    f"per-layer parameter {name} does not carry the group variable {group.var}",
                    f"write it as {name}^{group.var} or {name}_{group.var}",
                )
                key = family_key(f"{name}^{group.var}", group.var)  # so that uses of W^l still resolve
            if key is not None:
                entry.family_var, entry.bound, entry.where = group.var, bound, decl.span.line
                self.ctx.scope.families[key] = entry
            else:
                self.register(name, entry)

    def group(self, g: ir.ParamGroup) -> None:
        bindings.group_prefix(self.ctx, g)
        for decl in g.decls:
            self.param(decl, g)

    def value_decl(self, decl: ir.Decl, kind: str) -> None:
        shape = self.shape(decl.type)
        if decl.binding is not None:
            self.ctx.error(decl.binding.span, f"an {kind} takes no binding", "inputs and outputs are passed")
        for name in decl.names:
            if not self.dup(name, decl):
                self.register(name, Entry(kind, name, shape, decl))

    def state(self, decl: ir.Decl) -> None:
        """`State: h ∈ ℝ^{d×n}`: a value the algorithm carries from one call to the next. Its shape
        is fixed by the parameters and hyperparameters, never by a call's inputs (whose token count
        changes from call to call)."""
        shape = self.shape(decl.type)
        if decl.binding is not None or decl.value is not None:
            self.ctx.error(
                decl.binding.span if decl.binding is not None else decl.span,
                "a state takes no binding or value",
                "a state starts as zeros and then holds what the algorithm left in it",
            )
        a = self.ctx.algo
        fixed = {x.name for d, _ in a.all_params() for x in type_dim_names(d.type)} | self.sig.naturals
        tokens = (
            {  # the paper's column convention: a matrix input's columns are tokens, and token ids
                x.name
                for d in a.input_decls
                if isinstance(d.type, ir.TensorType) and (len(d.type.dims) == 2 or d.type.field == "V")
                for x in type_dim_names(ir.TensorType(d.type.field, d.type.dims[-1:]))
            }
            - fixed
        )
        for node in type_dim_names(decl.type):
            if not self.ctx.scope.is_dim(node.name):
                self.ctx.error(
                    node.span, f"unknown dimension {node.name}", self.ctx.scope.hint_for(node.name)
                )
            elif node.name in tokens:
                self.ctx.error(
                    node.span,
                    f"a state's size cannot be {node.name}, the number of tokens an input holds",
                    "a state keeps its shape from call to call, and each call brings other tokens: "
                    "size it by the features (d), parameters' dimensions or hyperparameters",
                )
        if not isinstance(decl.type, ir.TensorType) or decl.type.field != "R":
            self.ctx.error(decl.type.span, "a state is a real scalar, vector or matrix (ℝ, ℝ^{…})")
        for name in decl.names:
            if not self.dup(name, decl):
                self.register(name, Entry("state", name, shape, decl))

    # ── dimensions ──
    def implicit_dims(self) -> None:
        a, scope = self.ctx.algo, self.ctx.scope
        decls = [*a.input_decls, *a.output_decls, *(d for d, _ in a.all_params())]
        for decl in decls:
            for node in type_dim_names(decl.type):
                e = scope.declared.get(node.name)
                if e is None:
                    scope.declared[node.name] = Entry("dim", node.name, NATURAL, decl, where=decl.span.line)
                elif e.kind != "dim" and node.name not in self.sig.naturals:
                    self.ctx.error(
                        node.span, f"{node.name} is used as a dimension but is declared as {e.kind} {e.shape}"
                    )
        for item in a.param_decls:
            if isinstance(item, ir.ParamGroup):
                for node in ir_dim_names(item.bound):
                    if not scope.is_dim(node.name):
                        self.ctx.error(node.span, f"unknown dimension {node.name}", scope.hint_for(node.name))

    def derived(self) -> None:
        raw: dict[str, tuple[Dim, ir.Expr]] = {}
        for decl in self.ctx.algo.hyper_decls:
            b = decl.binding
            if b is None or b.kind != "derived" or not set(decl.names) <= self.sig.naturals:
                continue
            try:
                dim = expr_to_dim(b.expr, self.ctx.scope.is_dim)
            except DimError as exc:
                self.ctx.error(b.expr.span, f"dimension {exc}")
                continue
            if dim is None and self.per_layer_reduction(b.expr):
                continue  # a number of the file (`H_kv ≔ max(n_kv)`): a dimension of its own
            if dim is None:
                self.ctx.error(
                    b.expr.span,
                    f"{decl.names[0]} ∈ ℕ ≔ {self.ctx.text(b.expr)} is not a dimension expression",
                )
                continue
            raw.update({n: (dim, b.expr) for n in decl.names})
        defs = {n: d for n, (d, _) in raw.items()}
        for _ in range(len(defs) + 1):
            defs = {n: d.substitute(defs) for n, d in defs.items()}
        for n, d in defs.items():
            if n in d.names():
                self.ctx.error(raw[n][1].span, f"derived hyperparameter {n} depends on itself")
                defs = {k: v for k, v in defs.items() if k != n}
        self.sig.derived = {n: d for n, d in defs.items() if not (d.names() & defs.keys())}
        self.ctx.eq = DimEq(self.sig.derived)

    def per_layer_reduction(self, e: ir.Expr) -> bool:
        """`max(n_kv)`, `min(n_kv)` of a per-layer hyperparameter (`n_kv ∈ ℕ^{L}`): a whole number
        that no dimension expression can state, known once the file is read."""
        if not (isinstance(e, ir.Call) and e.func in ("max", "min") and len(e.args) == 1 and not e.params):
            return False
        arg = e.args[0]
        entry = self.ctx.scope.declared.get(arg.id) if isinstance(arg, ir.Name) else None
        return (
            entry is not None
            and entry.kind == "hyper"
            and entry.shape is not None
            and entry.shape.field == "N"
            and len(entry.shape.dims) == 1
        )

    # ── header, inference, concrete values ──
    def header(self) -> None:
        a, scope, sig = self.ctx.algo, self.ctx.scope, self.sig
        outs = [n for d in a.output_decls for n in d.names]
        if a.output in outs:
            sig.output = scope.declared[a.output].shape
        else:
            hint = f"Output declares {', '.join(outs)}" if outs else f"add `Output: {a.output} ∈ ℝ^{{…}}`"
            self.ctx.error(
                name_span(self.ctx, a.span, a.output),
                f"the header's output {a.output} is not declared under Output",
                hint,
            )
        for d in a.output_decls:
            for n in d.names:
                if n != a.output and a.output in outs:
                    self.ctx.error(
                        name_span(self.ctx, d.span, n),
                        f"Output declares {n} but the header returns {a.output}",
                    )
        args = _after_paren(self.ctx, a.span)
        listed: dict[str, int] = {}
        for n in (*a.inputs, *a.params):
            if n in listed:
                self.ctx.error(
                    name_span(self.ctx, args, n, skip=listed[n]), f"{n} appears twice in the header"
                )
            listed[n] = listed.get(n, 0) + 1
        ins = {n: d for d in a.input_decls for n in d.names}
        for n in a.inputs:
            if n not in ins:
                self.ctx.error(
                    name_span(self.ctx, args, n),
                    f"header input {n} is not declared under Input",
                    scope.hint_for(n),
                )
                scope.declared.setdefault(n, Entry("input", n, None, a, where=a.span.line))
            entry = scope.declared.get(n)
            sig.inputs.append((n, entry.shape if n in ins and entry is not None else None))
        for n, d in ins.items():
            if n not in a.inputs:
                self.ctx.error(
                    name_span(self.ctx, d.span, n), f"Input declares {n} but the header does not take it"
                )
        if a.params == (ALL_PARAMS,):
            sig.all_params = True
            return
        optional = defaults(a)
        for d in a.hyper_decls:
            for n in (n for n in d.names if n in optional and n not in a.params):
                self.ctx.error(
                    name_span(self.ctx, d.span, n),
                    f"{n} has a default but the header does not take it",
                    f"a default is what a call passes when it leaves {n} out: list {n} last after `|`, "
                    'or bind it (from "{arch}.…" default …)',
                )
        self._optional_vector_lengths(a, optional)
        for k, n in enumerate(a.params):
            e = scope.declared.get(n)
            if n in optional and any(m not in optional for m in a.params[k + 1 :]):
                later = next(m for m in a.params[k + 1 :] if m not in optional)
                self.ctx.error(
                    name_span(self.ctx, args, n),
                    f"optional hyperparameter {n} comes before {later}, which every call must pass",
                    "put the optional hyperparameters (`default …`) last in the header",
                )
            if e is not None and e.kind in ("param", "hyper"):
                sig.params.append((n, e.kind, e.shape))
                continue
            self.ctx.error(
                name_span(self.ctx, args, n),
                f"header parameter {n} is not declared under Parameters or Hyperparameters",
                scope.hint_for(n) if e is None else f"{n} is declared as {e.kind}",
            )
            sig.params.append((n, "param", None))

    def _optional_vector_lengths(self, a: ir.Algorithm, optional: dict) -> None:
        """An optional vector (`σ ∈ ℝ^{H} default −∞`) left out has the length the rest of the call
        gives: each of its dimensions is a header hyperparameter or a dimension of another input or
        parameter."""
        others = {n for n in a.params if n not in optional}
        for d in (*a.input_decls, *a.hyper_decls, *(d for d, _ in a.all_params())):
            if not set(d.names) & set(optional):
                others |= {x.name for x in type_dim_names(d.type)}
        for d in a.hyper_decls:
            lengths = {x.name for x in type_dim_names(d.type)}
            unknown = sorted(lengths - others) if set(d.names) & set(optional) else []
            if unknown:
                self.ctx.error(
                    d.span,
                    f"{', '.join(d.names)} may be left out, but nothing else in the call gives its "
                    f"length {', '.join(unknown)}",
                    "size an optional vector by a hyperparameter of the header or a dimension of an input",
                )

    def inferred(self) -> None:
        """Every unbound hyperparameter must come from a shape (N_V from W_e ∈ ℝ^{d_e×N_V}).

        Exception: an entry algorithm (`| θ`) with no `from` binding at all is an abstract card
        (the paper's Algorithms 8–10): its hyperparameters are given values by whoever binds it.
        """
        a = self.ctx.algo
        abstract = self.sig.all_params and not any(
            d.binding is not None and d.binding.kind == "from"
            for d in (*a.hyper_decls, *(p for p, _ in a.all_params()))
        )
        for decl in a.hyper_decls:
            if decl.binding is not None or decl.value is not None:
                continue
            for name in decl.names:
                if name in a.params:
                    continue
                where = self.find_axis(name)
                if where is not None:
                    self.ctx.info.inferred_hypers[name] = where
                elif not abstract:
                    self.ctx.error(
                        name_span(self.ctx, decl.span, name),
                        f"hyperparameter {name} has no binding and cannot be inferred",
                        'bind it (from "{arch}.…"), derive it (≔), pass it in the header, '
                        "or use it as a dimension of a parameter",
                    )

    def find_axis(self, name: str) -> tuple[str, int] | None:
        a = self.ctx.algo
        for decl in [*(d for d, _ in a.all_params()), *a.input_decls]:
            if isinstance(decl.type, ir.TensorType):
                for axis, d in enumerate(decl.type.dims):
                    if isinstance(d, ir.DimName) and d.name == name:
                        return decl.names[0], axis
        return None


def _after_paren(ctx: Ctx, span: Span) -> Span:
    """The header's span from its `(` on, so that searching for an input name skips the output."""
    i = ctx.card.source[span.start : span.end].find("(") if ctx.card.source and span.line > 0 else -1
    if i < 0:
        return span
    return Span(span.file, span.line, span.col + i, span.end_line, span.end_col, span.start + i, span.end)
