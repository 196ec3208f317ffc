"""Bindings: where a declaration's value comes from, and whether that is well formed.

Owns: the rules for `from …` sources (one source list per declared name; `{…}` templates: only
`{arch}` in metadata keys, none in tensor names, an affine expression of the group variable in a
group prefix such as `"blk.{l-1}."`; `^⊺` only on a parameter declared as a matrix; no default
on a parameter; a default uses only hyperparameters declared above it; no `≔` for a parameter), concrete values of a bound card (`L ∈ ℕ = 30`), and
exact division once values are concrete (`d_h ≔ d_e / H` with d_e = 10, H = 3 is an error).
Leaves out: registering the declared names (declarations.py) and GGUF files (describe).
"""

from __future__ import annotations

import re

from toycards.checker.context import Ctx, Signature
from toycards.checker.dims import Dim, DimError, evaluate, from_ir
from toycards.checker.fragments import parse_dim_text
from toycards.checker.shapes import Shape
from toycards.lang import ir
from toycards.lang.per_layer import is_per_layer

TEMPLATE = re.compile(r"\{([^{}]*)\}")


def hyper_binding(ctx: Ctx, decl: ir.Decl) -> None:
    """`from "{arch}.key" or "k2" default v` on a hyperparameter."""
    b = decl.binding
    if b is not None and b.kind == "default":
        optional_default(ctx, decl, b.default)
    if b is None or b.kind != "from":
        return
    source_count(ctx, decl, b)
    t = decl.type
    if isinstance(t, ir.TensorType) and (len(t.dims) > 1 or (t.dims and t.field not in ("N", "Z", "R", "B"))):
        ctx.error(
            t.span,
            f"{', '.join(decl.names)} ∈ {ctx.text(t)}: a metadata key holds one number or one array",
            "bind a per-layer vector (`n_kv ∈ ℕ^{L} from …`), one entry per layer",
        )
    for src in (s for alts in b.sources for s in alts):
        if src.rows is not None:
            ctx.error(
                src.span,
                f"rows of {src.tensor!r} on a hyperparameter: a metadata key has no rows",
                "rows lo…hi of a fused tensor bind a parameter",
            )
        if src.transpose:
            ctx.error(
                src.span,
                f"^⊺ on the metadata key {src.tensor!r}: a hyperparameter is not a matrix",
                "only a parameter's tensor can be transposed",
            )
        for m in TEMPLATE.finditer(src.tensor):
            if m.group(1) != "arch":
                ctx.error(
                    src.span,
                    f"unknown template {{{m.group(1)}}} in metadata key {src.tensor!r}",
                    "a metadata key may only use {arch} (general.architecture)",
                )
    if b.default is not None:
        default_names(ctx, decl, b.default)


def optional_default(ctx: Ctx, decl: ir.Decl, default: ir.Expr) -> None:
    """`c ∈ ℝ default 0`: an optional hyperparameter's default is one number (a call that leaves
    the hyperparameter out passes it as written); on a vector, `σ ∈ ℝ^{H} default −∞`, the number
    fills every entry. The header check (declarations.py) sees that only trailing hyperparameters
    of the header are optional."""
    t = decl.type
    if not (isinstance(t, ir.TensorType) and len(t.dims) <= 1 and t.field in ("R", "N", "Z")):
        ctx.error(
            decl.span,
            f"an optional hyperparameter is a number or a vector (ℝ, ℕ or ℤ), not {', '.join(decl.names)} ∈ …",
            "give an enumeration or matrix hyperparameter its value at every call",
        )
    value = default.operand if isinstance(default, ir.UnOp) and default.op == "-" else default
    if not isinstance(value, ir.Num | ir.Const):
        ctx.error(
            default.span,
            "an optional hyperparameter's default is a number (`default 0`)",
            "a call that leaves the hyperparameter out passes this value; compute others in the steps",
        )


def default_names(ctx: Ctx, decl: ir.Decl, default: ir.Expr) -> None:
    """A default is bound while the file is read, in declaration order: it may use numbers, the
    declaration's own options and hyperparameters declared above it (`d_h … default d_e / H`)."""
    options = decl.type.options if isinstance(decl.type, ir.EnumType) else ()
    for node in ir.walk(default):
        if not isinstance(node, ir.Name) or node.id in options:
            continue
        entry = ctx.scope.declared.get(node.id)
        if entry is None or entry.kind != "hyper":
            ctx.error(
                node.span,
                f"a default may only use numbers, options and hyperparameters declared above it, not {node.id}",
                "declare the hyperparameter it needs first, or derive the value with ≔",
            )


def hyper_value(ctx: Ctx, decl: ir.Decl, shape: Shape, values: dict[str, int]) -> None:
    """`L ∈ ℕ = 30` in a bound card: a whole number for ℕ, an option for an enumeration."""
    v = decl.value
    if len(shape.dims) == 1 and is_per_layer(decl):
        per_layer_value(ctx, decl, shape, values)
    elif shape.field == "N" and not shape.dims:
        if isinstance(v, ir.Num) and v.text.isdigit():
            values.update({n: int(v.text) for n in decl.names})
        else:
            ctx.error(v.span, f"{decl.names[0]} ∈ ℕ needs a whole number, got {ctx.text(v)}")
    elif shape.field == "E" and not (isinstance(v, ir.Name) and v.id in shape.options):
        ctx.error(v.span, f"{ctx.text(v)} is not one of {shape}")


def per_layer_value(ctx: Ctx, decl: ir.Decl, shape: Shape, values: dict[str, int]) -> None:
    """`n_kv ∈ ℕ^{L} = [0, 0, 8]` in a bound card: one number per layer, as many as the length says
    when the length has a value; a single number stands for every layer."""
    v = decl.value
    items = v.items if isinstance(v, ir.Concat) and v.axis == "cols" and not v.ellipsis else (v,)
    numbers = [i.operand if isinstance(i, ir.UnOp) and i.op == "-" else i for i in items]
    if not all(isinstance(i, ir.Num) for i in numbers):
        ctx.error(v.span, f"{decl.names[0]} ∈ {shape} needs numbers, one per layer: `= [0, 0, 8]`")
        return
    try:
        n = evaluate(from_ir(decl.type.dims[0]), values)
    except DimError:
        return  # the length has no value here: the binder checks the count
    if isinstance(v, ir.Concat) and len(items) != n:
        ctx.error(
            v.span,
            f"{decl.names[0]} ∈ {shape} has {len(items)} entries, but {ctx.text(decl.type.dims[0])} = {n}",
        )


def source_count(ctx: Ctx, decl: ir.Decl, b: ir.Binding) -> None:
    if len(b.sources) != len(decl.names):
        ctx.error(
            b.span,
            f"{len(decl.names)} name{'s' * (len(decl.names) != 1)} but "
            f"{len(b.sources)} source{'s' * (len(b.sources) != 1)}",
            'give one source per declared name, in order: γ, β ∈ ℝ^{d_e} from "norm.weight", "norm.bias"',
        )


def param_binding(ctx: Ctx, decl: ir.Decl, shape: Shape) -> None:
    """`from "attn_q.weight"^⊺ or 1` on a parameter."""
    b = decl.binding
    if decl.value is not None:
        ctx.error(decl.value.span, "a parameter takes its value from a tensor, not `= value`")
    if b is None:
        return
    if b.kind == "derived":
        ctx.error(b.span, "a parameter cannot be derived with ≔", 'bind it to a tensor: from "name"')
        return
    if b.kind == "default":
        ctx.error(
            b.span,
            "default on a parameter",
            "defaults are for hyperparameters; a missing tensor can fall back with `or 1`",
        )
        return
    source_count(ctx, decl, b)
    if b.default is not None:
        ctx.error(
            b.default.span,
            "default on a parameter",
            "defaults are for hyperparameters; a missing tensor can fall back with `or 1`",
        )
    for alts in b.sources:
        if alts and alts[0].rows is not None:
            ctx.error(
                alts[0].span,
                f"rows of {alts[0].tensor!r} as the first source: the first names the parameter's own tensor",
                'write the tensor of its own first, the fused one after: from "attn_q.weight" or '
                '"attn_qkv.weight"[1:d_e]',
            )
    for src in (s for alts in b.sources for s in alts):
        if src.rows is not None and shape.rank not in (1, 2):
            ctx.error(
                src.span,
                f"rows of {src.tensor!r} bound to {shape}: rows are taken from a vector or a matrix",
                "rows lo…hi of a fused tensor give a vector's entries or a matrix's rows",
                (shape,),
            )
        if src.transpose and shape.rank != 2:
            ctx.error(
                src.span,
                f"transposed tensor {src.tensor!r} bound to {shape}: the transposed shape is not 2-D",
                "^⊺ applies to matrices only",
                (shape,),
            )
        for m in TEMPLATE.finditer(src.tensor):
            ctx.error(
                src.span,
                f"template {{{m.group(1)}}} in tensor name {src.tensor!r}",
                'put the block index in the group prefix: for l ∈ [L], in "blk.{l-1}.":',
            )


def group_prefix(ctx: Ctx, g: ir.ParamGroup) -> None:
    """`for l ∈ [L], in "blk.{l-1}.":` — each template is an affine expression of l."""
    for m in TEMPLATE.finditer(g.prefix):
        dim = parse_dim_text(m.group(1))
        if dim is None or not dim.names() <= {g.var} or not _affine(dim):
            ctx.error(
                g.span,
                f"template {{{m.group(1)}}} in group prefix {g.prefix!r} is not an affine expression of {g.var}",
                f"write e.g. {{{g.var}-1}} (GGUF counts blocks from 0, loops from 1)",
            )


def concrete(ctx: Ctx, sig: Signature, values: dict[str, int]) -> None:
    """With concrete values (a bound card), every division must come out whole."""
    if not values:
        return
    values = dict(values)
    for decl in ctx.algo.hyper_decls:
        for n in decl.names:
            d = sig.derived.get(n)
            if d is None or not d.names() <= values.keys():
                continue
            try:
                v = evaluate(d, values)
            except DimError as exc:
                ctx.error(decl.binding.expr.span, f"dimension {exc}")
                continue
            if n in values and values[n] != v:
                ctx.error(decl.value.span, f"{n} = {values[n]} but {n} ≔ {ctx.text(decl.binding.expr)} = {v}")
            values[n] = v
    a, reported = ctx.algo, {d.message for d in ctx.diags}
    for decl in [*a.input_decls, *a.output_decls, *(d for d, _ in a.all_params())]:
        for node in getattr(decl.type, "dims", ()):
            d = dim_or_none(node)
            d = d.substitute(sig.derived) if d is not None else None
            if d is None or not d.names() <= values.keys():
                continue
            try:
                evaluate(d, values)
            except DimError as exc:
                if f"dimension {exc}" not in reported:
                    reported.add(f"dimension {exc}")
                    ctx.error(node.span, f"dimension {exc}")


def dim_or_none(d: ir.Dim) -> Dim | None:
    try:
        return from_ir(d)
    except DimError:
        return None


def _affine(d: Dim) -> bool:
    return all(
        sum(e for _, e in m) <= 1 and all(e > 0 for _, e in m) and c.denominator == 1
        for m, c in d.terms.items()
    )
