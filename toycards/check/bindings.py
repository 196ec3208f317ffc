"""Declarations and bindings of one algorithm: what its names are and where values come from.

Owns: registering inputs, outputs, hyperparameters, parameters (and per-layer families) and the
dimension names they declare implicitly; the algorithm's `Signature`; and the diagnostics for
declarations: duplicates, header names that are not declared, malformed bindings (source count
≠ name count, `{…}` templates other than `{arch}` in metadata keys and an affine expression of
the group variable in a group prefix, `^⊺` on a metadata key or on a parameter that is not a
matrix, a default on a parameter), derived hyperparameters (`d_h ≔ d_e / H`, exact division),
hyperparameters that can be neither bound nor inferred from a shape, and, in a bound card with
concrete values, dimensions that do not divide.
Leaves out: the steps (steps.py) and the expressions of derived real hyperparameters (exprs.py).
"""

from __future__ import annotations

import re
import unicodedata

from toycards import ir
from toycards.check.context import Ctx, Signature
from toycards.check.dims import Dim, DimError, evaluate, expr_to_dim, from_ir
from toycards.check.fragments import parse_dim_text
from toycards.check.names import Entry, family_key
from toycards.check.shapes import NATURAL, DimEq, Shape, shape_from_type
from toycards.errors import Span
from toycards.names import ascii_name

_TEMPLATE = re.compile(r"\{([^{}]*)\}")
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
        self.derived()
        self.header()
        self.inferred()
        self.concrete()

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
        self.hyper_binding(decl)
        for name in decl.names:
            if self.dup(name, decl):
                continue
            self.register(name, Entry("hyper", name, shape, decl))
            if shape.field == "N" and not shape.dims:
                self.sig.naturals.add(name)
        for option in shape.options:
            self.ctx.scope.options.setdefault(option, Entry("option", option, shape, decl))
        if decl.value is not None:
            self.hyper_value(decl, shape)

    def hyper_value(self, decl: ir.Decl, shape: Shape) -> None:
        v = decl.value
        if shape.field == "N" and not shape.dims:
            if isinstance(v, ir.Num) and v.text.isdigit():
                self.values.update({n: int(v.text) for n in decl.names})
            else:
                self.ctx.error(v.span, f"{decl.names[0]} ∈ ℕ needs a whole number, got {self.ctx.text(v)}")
        elif shape.field == "E" and not (isinstance(v, ir.Name) and v.id in shape.options):
            self.ctx.error(v.span, f"{self.ctx.text(v)} is not one of {shape}")

    def hyper_binding(self, decl: ir.Decl) -> None:
        b = decl.binding
        if b is None or b.kind != "from":
            return
        self.source_count(decl, b)
        for alts in b.sources:
            for src in alts:
                if src.transpose:
                    self.ctx.error(
                        src.span,
                        f"^⊺ on the metadata key {src.tensor!r}: a hyperparameter is not a matrix",
                        "only a parameter's tensor can be transposed",
                    )
                for m in _TEMPLATE.finditer(src.tensor):
                    if m.group(1) != "arch":
                        self.ctx.error(
                            src.span,
                            f"unknown template {{{m.group(1)}}} in metadata key {src.tensor!r}",
                            "a metadata key may only use {arch} (general.architecture)",
                        )
        if b.default is not None and not _is_literal(b.default):
            self.ctx.error(b.default.span, "a default must be a literal number or an option name")

    def source_count(self, decl: ir.Decl, b: ir.Binding) -> None:
        if len(b.sources) != len(decl.names):
            self.ctx.error(
                b.span,
                f"{len(decl.names)} name{'s' * (len(decl.names) != 1)} but "
                f"{len(b.sources)} source{'s' * (len(b.sources) != 1)}",
                'give one source per declared name, in order: γ, β ∈ ℝ^{d_e} from "norm.weight", "norm.bias"',
            )

    def param(self, decl: ir.Decl, group: ir.ParamGroup | None) -> None:
        shape = self.shape(decl.type)
        self.param_binding(decl, shape)
        bound = _dim_or_none(group.bound) if group else None
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

    def param_binding(self, decl: ir.Decl, shape: Shape) -> None:
        b = decl.binding
        if decl.value is not None:
            self.ctx.error(decl.value.span, "a parameter takes its value from a tensor, not `= value`")
        if b is None:
            return
        if b.kind == "derived":
            self.ctx.error(b.span, "a parameter cannot be derived with ≔", 'bind it to a tensor: from "name"')
            return
        self.source_count(decl, b)
        if b.default is not None:
            self.ctx.error(
                b.default.span,
                "default on a parameter",
                "defaults are for hyperparameters; a missing tensor can fall back with `or 1`",
            )
        for alts in b.sources:
            for src in alts:
                self.tensor_source(src, shape)

    def tensor_source(self, src: ir.Source, shape: Shape) -> None:
        if src.transpose and shape.rank != 2:
            self.ctx.error(
                src.span,
                f"transposed tensor {src.tensor!r} bound to {shape}: the transposed shape is not 2-D",
                "^⊺ applies to matrices only",
                (shape,),
            )
        for m in _TEMPLATE.finditer(src.tensor):
            self.ctx.error(
                src.span,
                f"template {{{m.group(1)}}} in tensor name {src.tensor!r}",
                'put the block index in the group prefix: for l ∈ [L], in "blk.{l-1}.":',
            )

    def group(self, g: ir.ParamGroup) -> None:
        for m in _TEMPLATE.finditer(g.prefix):
            dim = parse_dim_text(m.group(1))
            if dim is None or not dim.names() <= {g.var} or not _affine(dim):
                self.ctx.error(
                    g.span,
                    f"template {{{m.group(1)}}} in group prefix {g.prefix!r} is not an affine "
                    f"expression of {g.var}",
                    f"write e.g. {{{g.var}-1}} (GGUF counts blocks from 0, loops from 1)",
                )
        for decl in g.decls:
            self.param(decl, g)

    def value_decl(self, decl: ir.Decl, kind: str) -> None:
        shape = self.shape(decl.type)
        if decl.binding is not None:
            self.ctx.error(decl.binding.span, f"an {kind} takes no binding", "inputs and outputs are passed")
        for name in decl.names:
            if not self.dup(name, decl):
                self.register(name, Entry(kind, name, shape, decl))

    # ── dimensions ──
    def implicit_dims(self) -> None:
        a, scope = self.ctx.algo, self.ctx.scope
        decls = [*a.input_decls, *a.output_decls, *(d for d, _ in a.all_params())]
        for decl in decls:
            for node in _dim_names(decl.type):
                e = scope.declared.get(node.name)
                if e is None:
                    scope.declared[node.name] = Entry("dim", node.name, NATURAL, decl, where=decl.span.line)
                elif e.kind != "dim" and node.name not in self.sig.naturals:
                    self.ctx.error(
                        node.span, f"{node.name} is used as a dimension but is declared as {e.kind} {e.shape}"
                    )
        for item in a.param_decls:
            if isinstance(item, ir.ParamGroup):
                for node in _dim_names_of(item.bound):
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
            sig.inputs.append((n, scope.declared[n].shape if n in ins else None))
        for n, d in ins.items():
            if n not in a.inputs:
                self.ctx.error(
                    name_span(self.ctx, d.span, n), f"Input declares {n} but the header does not take it"
                )
        if a.params == (ALL_PARAMS,):
            sig.all_params = True
            return
        for n in a.params:
            e = scope.declared.get(n)
            if e is not None and e.kind in ("param", "hyper"):
                sig.params.append((n, e.kind, e.shape))
                continue
            self.ctx.error(
                name_span(self.ctx, args, n),
                f"header parameter {n} is not declared under Parameters or Hyperparameters",
                scope.hint_for(n) if e is None else f"{n} is declared as {e.kind}",
            )
            sig.params.append((n, "param", None))

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

    def concrete(self) -> None:
        """With concrete values (a bound card), every division must come out whole."""
        if not self.values:
            return
        values = dict(self.values)
        for decl in self.ctx.algo.hyper_decls:
            for n in decl.names:
                d = self.sig.derived.get(n)
                if d is None or not d.names() <= values.keys():
                    continue
                try:
                    v = evaluate(d, values)
                except DimError as exc:
                    self.ctx.error(decl.binding.expr.span, f"dimension {exc}")
                    continue
                if n in values and values[n] != v:
                    self.ctx.error(
                        decl.value.span,
                        f"{n} = {values[n]} but {n} ≔ {self.ctx.text(decl.binding.expr)} = {v}",
                    )
                values[n] = v
        a, reported = self.ctx.algo, {d.message for d in self.ctx.diags}
        for decl in [*a.input_decls, *a.output_decls, *(d for d, _ in a.all_params())]:
            for node in getattr(decl.type, "dims", ()):
                d = _dim_or_none(node)
                if d is not None and d.substitute(self.sig.derived).names() <= values.keys():
                    try:
                        evaluate(d.substitute(self.sig.derived), values)
                    except DimError as exc:
                        if f"dimension {exc}" not in reported:
                            reported.add(f"dimension {exc}")
                            self.ctx.error(node.span, f"dimension {exc}")


def _after_paren(ctx: Ctx, span: Span) -> Span:
    """The header's span from its `(` on, so that searching for an input name skips the output."""
    i = ctx.card.source[span.start : span.end].find("(") if ctx.card.source and span.line > 0 else -1
    if i < 0:
        return span
    return Span(span.file, span.line, span.col + i, span.end_line, span.end_col, span.start + i, span.end)


def _is_literal(e: ir.Expr) -> bool:
    if isinstance(e, ir.UnOp) and e.op == "-":
        e = e.operand
    return isinstance(e, ir.Num | ir.Name | ir.Str | ir.Const)


def _dim_or_none(d: ir.Dim) -> Dim | None:
    try:
        return from_ir(d)
    except DimError:
        return None


def _affine(d: Dim) -> bool:
    return all(
        sum(e for _, e in m) <= 1 and all(e > 0 for _, e in m) and c.denominator == 1
        for m, c in d.terms.items()
    )


def _dim_names_of(d: ir.Dim) -> list[ir.DimName]:
    if isinstance(d, ir.DimName):
        return [d]
    if isinstance(d, ir.DimOp):
        return _dim_names_of(d.left) + _dim_names_of(d.right)
    return []


def _dim_names(t: ir.Type) -> list[ir.DimName]:
    if isinstance(t, ir.TensorType):
        return [n for d in t.dims for n in _dim_names_of(d)]
    if isinstance(t, ir.IndexType):
        return _dim_names_of(t.bound)
    return []
