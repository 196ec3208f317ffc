"""Binding a card to concrete values: hyperparameters from GGUF metadata, parameters to tensors.

Owns: evaluating a card's hyperparameter bindings (metadata keys with `{arch}`, defaults,
derived `≔` values, values inferred from tensor shapes, concrete `= value`s of a bound card)
and its parameter bindings (tensor-name templates per layer, `^⊺`, `or` fallbacks, constant
fallbacks), with every mismatch reported as a diagnostic at the card line that declares it.
Leaves out: evaluating dimensions and scalar expressions (scalars.py, re-exported here), reading
GGUF bytes (gguf/), symbolic checking (checker/), rendering.

The Llama card bound to the repository's example file (examples/make_example.py: 2 layers,
d_e = 64, 1,024 tokens, the output matrix tied to the embedding):

>>> from toycards.gguf.reader import open_gguf
>>> from toycards.library import library_card
>>> with open_gguf("examples/tiny-llama.gguf") as f:
...     b = bind(library_card("llama").main, f)
>>> b.hyper["L"], b.hyper["d_h"], b.hyper_source["N_V"]
(2, 16, "inferred from 'token_embd.weight'")
>>> w_e = b.params[0]                  # W_e ∈ ℝ^{d_e×N_V} from "token_embd.weight"^⊺
>>> w_e.tensor, w_e.shape, w_e.stored_shape
('token_embd.weight', (64, 1024), (1024, 64))
>>> b.param_keys()["output.weight"].tensor, b.problems
('token_embd.weight', [])
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toycards.errors import Diagnostic
from toycards.lang import ir
from toycards.lang.per_layer import is_per_layer, layer_entries
from toycards.models.names import expand_template, present, reads_tensors
from toycards.models.scalars import EvalError, UnboundDim, eval_dim, eval_scalar, unit_axes

__all__ = [
    "Bound",
    "BoundParam",
    "EvalError",
    "bind",
    "bind_values",
    "eval_dim",
    "eval_scalar",
    "expand_template",
]

MAX_LAYERS = 4096  # layers of a parameter group bound without a file (random weights)


@dataclass(frozen=True)
class BoundParam:
    """One tensor of a bound card: card name, layer (1-based, or None) and where it comes from."""

    name: str  # card name as declared, e.g. "γ_l^1"
    layer: int | None  # value of the group variable, 1-based
    key: str  # the module's name for it: the first alternative's tensor name, e.g. "blk.0.attn_norm.weight"
    tensor: str | None  # the tensor actually present in the file (None: constant or random)
    transpose: bool
    const: str | None  # constant fill when no tensor is present
    shape: tuple[int, ...]  # card shape, concrete
    decl: ir.Decl = field(compare=False, repr=False)
    rows: tuple[int, int] | None = None  # rows start…stop (0-based, stop excluded) of a fused tensor

    @property
    def stored_shape(self) -> tuple[int, ...]:
        """NumPy shape of the tensor (of its rows, for a part of a fused one) as GGUF stores it."""
        return tuple(reversed(self.shape)) if self.transpose else self.shape

    def part(self, array):
        """The parameter's rows of the tensor `array` as the file holds it (all of it, unless the
        parameter is rows of a fused tensor), without the unit axes ggml lets a file add
        (`unit_axes`); a view, never a copy."""
        if self.rows is not None:
            return array[self.rows[0] : self.rows[1]]
        extra = array.ndim - len(self.stored_shape)
        return array.reshape(array.shape[extra:]) if extra > 0 else array


@dataclass
class Bound:
    """A card's main algorithm with concrete hyperparameters and parameter sources."""

    algorithm: ir.Algorithm
    arch: str
    hyper: dict[str, object]
    hyper_source: dict[
        str, str
    ]  # name → 'key "llama.block_count"', "default", "derived", "inferred from W_e", "value"
    params: list[BoundParam]
    problems: list[Diagnostic]
    unused_tensors: list[str] = field(default_factory=list)

    def param_keys(self) -> dict[str, BoundParam]:
        return {p.key: p for p in self.params}


# ── hyperparameters ─────────────────────────────────────────────────────────────────────
def _convert(value: object, typ: ir.Type, name: str) -> object:
    if isinstance(typ, ir.EnumType):
        if hasattr(value, "item"):  # a NumPy scalar
            value = value.item()
        if isinstance(value, int):  # a number names the option at that place, from 0 (false 0, true 1)
            if not 0 <= value < len(typ.options):
                raise EvalError(
                    f"{name} = {value} is past its options {{{', '.join(typ.options)}}} "
                    f"(a whole number picks the option at that place, from 0)"
                )
            return typ.options[value]
        s = str(value)
        if s not in typ.options:
            raise EvalError(f"{name} = {s!r} is not one of {{{', '.join(typ.options)}}}")
        return s
    if isinstance(typ, ir.StrType):
        return str(value)
    if isinstance(typ, ir.TensorType) and not typ.dims:
        if typ.field == "N":
            if isinstance(value, float) and not value.is_integer():
                raise EvalError(f"{name} = {value} is not a whole number")
            if isinstance(value, bool | str) or int(value) < 0:
                raise EvalError(f"{name} = {value!r} is not a natural number")
            return int(value)
        if typ.field in ("R", "Z"):
            if isinstance(value, bool | str):
                raise EvalError(f"{name} = {value!r} is not a number")
            if typ.field == "Z" and isinstance(value, float) and not value.is_integer():
                raise EvalError(f"{name} = {value} is not a whole number")
            return float(value) if typ.field == "R" else int(value)
    return value


def _convert_any(value: object, typ: ir.Type, name: str, values: dict) -> object:
    """`_convert` for one value; for a per-layer hyperparameter (`n_kv ∈ ℕ^{L}`), a tuple of L
    entries (lang/per_layer.py: an array of L, or one number for every layer)."""
    if not (isinstance(typ, ir.TensorType) and len(typ.dims) == 1):
        return _convert(value, typ, name)
    length = typ.dims[0].name if isinstance(typ.dims[0], ir.DimName) else "its length"
    try:
        entries = layer_entries(value, eval_dim(typ.dims[0], values), name, length)
    except ValueError as exc:
        raise EvalError(str(exc)) from None
    entry = ir.TensorType("N" if typ.field == "B" else typ.field)  # {0,1}: whole numbers 0 and 1
    out = tuple(_convert(v, entry, f"{name}[{i}]") for i, v in enumerate(entries, 1))
    if typ.field == "B" and any(v > 1 for v in out):
        raise EvalError(f"{name} = {list(out)} is not all 0 and 1")
    return out


def _enum_names(algo: ir.Algorithm) -> frozenset[str]:
    return frozenset(o for d in algo.hyper_decls if isinstance(d.type, ir.EnumType) for o in d.type.options)


def bind_hyperparameters(
    algo: ir.Algorithm,
    metadata,
    arch: str,
    tensor_shapes: dict[str, tuple[int, ...]],
    file: str = "",
    given: dict[str, object] | None = None,
):
    """Values of every hyperparameter, their sources, and problems (as diagnostics).

    `given` values (from the caller) take precedence over every binding, like a card's `= value`.
    """
    given = given or {}
    values: dict[str, object] = {}
    source: dict[str, str] = {}
    problems: list[Diagnostic] = []
    pending: list[tuple[str, ir.Decl]] = []
    enums = _enum_names(algo)
    for d in algo.hyper_decls:
        if not isinstance(d.type, ir.TensorType | ir.EnumType | ir.StrType) or (
            not is_per_layer(d) and isinstance(d.type, ir.TensorType) and d.type.dims
        ):
            continue  # masks and other tensor-valued hyperparameters are passed by callers, not bound
        for name in d.names:
            try:
                if name in given:
                    values[name], source[name] = _convert_any(given[name], d.type, name, values), "given"
                elif d.value is not None:
                    values[name], source[name] = (
                        _convert_any(eval_scalar(d.value, values, enums), d.type, name, values),
                        "value",
                    )
                elif d.binding is not None and d.binding.kind == "from":
                    _bind_from_metadata(name, d, metadata, arch, enums, values, source, problems)
                else:
                    pending.append((name, d))
            except EvalError as exc:
                problems.append(Diagnostic(d.span, str(exc)))
    _bind_pending(algo, pending, values, source, tensor_shapes, problems, enums, arch)
    return values, source, problems


def _bind_from_metadata(name, d, metadata, arch, enums, values, source, problems) -> None:
    keys = [expand_template(s.tensor, arch) for s in d.binding.sources[0] if s.tensor]
    for key in keys:
        if key in metadata:
            raw = metadata[key]
            if hasattr(raw, "__len__") and not isinstance(raw, str) and not is_per_layer(d):
                problems.append(
                    Diagnostic(
                        d.span,
                        f"metadata key '{key}' holds an array; {name} needs one value",
                        f"declare {name} per layer (`{name} ∈ ℕ^{{L}}`) and read {name}[l] in the layer loop",
                    )
                )
                return
            try:
                values[name], source[name] = _convert_any(raw, d.type, name, values), f'key "{key}"'
            except EvalError as exc:
                raise EvalError(f"metadata key '{key}': {exc}") from None
            return
    if d.binding.default is not None:
        values[name], source[name] = (
            _convert_any(eval_scalar(d.binding.default, values, enums), d.type, name, values),
            "default",
        )
        return
    problems.append(
        Diagnostic(
            d.span,
            f"metadata key {' or '.join(repr(k) for k in keys)} is missing and {name} has no default",
            "add `default …` to the card, or fix the file",
        )
    )


def _bind_pending(algo, pending, values, source, tensor_shapes, problems, enums, arch) -> None:
    """Derived and inferred hyperparameters, iterated until nothing changes."""
    why: dict[str, str] = {}  # the last reason a derived value could not be computed
    while pending:
        progress = False
        for name, d in list(pending):
            try:
                if d.binding is not None and d.binding.kind == "derived":
                    e = d.binding.expr
                    found = present(e, values, tensor_shapes, arch) if reads_tensors(e) else None
                    value = found if found is not None else eval_scalar(e, values, enums)
                    values[name], source[name] = _convert_any(value, d.type, name, values), "derived"
                else:
                    value, where = _infer(algo, name, values, tensor_shapes, arch)
                    values[name], source[name] = value, f"inferred from {where}"
            except EvalError as exc:
                why[name] = str(exc)
                continue
            pending.remove((name, d))
            progress = True
        if not progress:
            for name, d in pending:
                derived = d.binding is not None and d.binding.kind == "derived"
                reason = (
                    why[name]
                    if derived
                    else "no metadata key, no default, and no parameter shape to infer it from"
                )
                problems.append(Diagnostic(d.span, f"cannot determine {name}: {reason}"))
            return


def _infer(algo: ir.Algorithm, name: str, values, tensor_shapes, arch) -> tuple[int, str]:
    for decl, group in algo.all_params():
        typ = decl.type
        if not isinstance(typ, ir.TensorType) or not decl.binding or decl.binding.kind != "from":
            continue
        for axis, dim in enumerate(typ.dims):
            if isinstance(dim, ir.DimName) and dim.name == name:
                for i, _ in enumerate(decl.names):
                    for src in decl.binding.sources[min(i, len(decl.binding.sources) - 1)]:
                        tensor = _tensor_name(src, group, arch, 1)
                        if tensor in tensor_shapes:
                            shape = tensor_shapes[tensor][::-1] if src.transpose else tensor_shapes[tensor]
                            if axis < len(shape):
                                return int(shape[axis]), f"'{tensor}'"
    raise EvalError(f"{name} cannot be inferred")


def _tensor_name(src: ir.Source, group: ir.ParamGroup | None, arch: str | None, layer: int | None) -> str:
    """The tensor's name in the file (`arch` given) or in the generated module (`arch=None`)."""
    if group is None:
        return expand_template(src.tensor, arch)
    return expand_template(group.prefix, arch, group.var, layer) + expand_template(src.tensor, arch)


# ── parameters ──────────────────────────────────────────────────────────────────────────
def bind_parameters(
    algo: ir.Algorithm, values: dict, tensor_shapes: dict[str, tuple[int, ...]] | None, arch: str
):
    """Every parameter tensor (per layer) with its source; `tensor_shapes=None` binds without a file."""
    out: list[BoundParam] = []
    problems: list[Diagnostic] = []
    unbound = {n for d in algo.hyper_decls for n in d.names} - values.keys()
    for decl, group in algo.all_params():
        if _waits_on(decl, group, values, unbound):
            continue  # the hyperparameter's own problem says why: no echo per parameter
        if decl.binding is None or decl.binding.kind != "from":
            problems.append(
                Diagnostic(decl.span, f'parameter {", ".join(decl.names)} has no `from "tensor"` binding')
            )
            continue
        layers: list[int | None] = [None]
        if group is not None:
            try:
                layers = list(range(1, _layer_count(group, values, tensor_shapes) + 1))
                layers = [n for n in layers if _holds(group, n, values, _enum_names(algo))]
            except EvalError as exc:
                problems.append(Diagnostic(group.span, str(exc)))
                continue
        for layer in layers:
            for i, name in enumerate(decl.names):
                alts = decl.binding.sources[i] if i < len(decl.binding.sources) else ()
                p = _bind_one(decl, name, alts, group, layer, values, tensor_shapes, arch, problems)
                if p is not None:
                    out.append(p)
    if tensor_shapes is not None and not problems:  # a part that failed has said what is wrong
        problems += _uncovered_rows(out, tensor_shapes)
    return out, problems


def _holds(group: ir.ParamGroup, layer: int, values: dict, enums: frozenset[str]) -> bool:
    """Whether layer `layer` (from 1) holds the group's tensors: `, if n_kv[l] ≠ 0` (always, with
    no condition)."""
    if group.cond is None:
        return True
    try:
        return bool(eval_scalar(group.cond, {**values, group.var: layer}, enums))
    except EvalError as exc:
        raise EvalError(f"the group's condition in layer {layer}: {exc}") from None


def _layer_count(group: ir.ParamGroup, values: dict, tensor_shapes: dict | None) -> int:
    """The number of layers of a parameter group, refused before anything is allocated per layer
    when it cannot be right: more layers than the file has tensors, or than MAX_LAYERS without a file."""
    n = eval_dim(group.bound, values)
    limit = len(tensor_shapes) if tensor_shapes is not None else MAX_LAYERS
    if n > limit:
        has = (
            f"the file has only {limit} tensors"
            if tensor_shapes is not None
            else f"at most {limit} are built"
        )
        what = group.bound.name if isinstance(group.bound, ir.DimName) else "the layer count"
        raise EvalError(f"{what} = {n} layers, but {has}")
    return n


def _waits_on(decl: ir.Decl, group: ir.ParamGroup | None, values: dict, unbound: set[str]) -> bool:
    """Whether the parameter's shape (or its group's count) needs a hyperparameter left unbound."""
    dims = ((group.bound,) if group is not None else ()) + tuple(getattr(decl.type, "dims", ()))
    if group is not None and group.cond is not None:  # which layers hold it: `, if n_kv[l] ≠ 0`
        if any(isinstance(n, ir.Name) and n.id in unbound for n in ir.walk(group.cond)):
            return True
    try:
        for d in dims:
            eval_dim(d, values)
    except UnboundDim as exc:
        return exc.name in unbound
    except EvalError:
        pass  # reported where the shape is evaluated
    return False


def _bind_one(decl, name, alts, group, layer, values, tensor_shapes, arch, problems) -> BoundParam | None:
    try:
        shape = tuple(eval_dim(d, values) for d in decl.type.dims)
    except EvalError as exc:
        problems.append(Diagnostic(decl.span, f"shape of {name}: {exc}"))
        return None
    tensors = [s for s in alts if s.tensor]
    if not tensors:
        problems.append(Diagnostic(decl.span, f"parameter {name} names no tensor"))
        return None
    try:
        key = _tensor_name(tensors[0], group, None, layer)
        for src in tensors:
            _tensor_name(src, group, arch, layer)
    except EvalError as exc:
        problems.append(Diagnostic(decl.span, f"parameter {name}: {exc}"))
        return None
    for src in alts:
        if src.const:
            return BoundParam(name, layer, key, None, False, src.const, shape, decl)
        tensor = _tensor_name(src, group, arch, layer)
        if src.rows is not None and tensor_shapes is not None and tensor in tensor_shapes:
            return _bind_rows(decl, name, src, layer, key, tensor, shape, values, tensor_shapes, problems)
        if tensor_shapes is None or tensor in tensor_shapes:
            p = BoundParam(name, layer, key, tensor, src.transpose, None, shape, decl)
            if tensor_shapes is not None and unit_axes(tuple(tensor_shapes[tensor]), p.stored_shape) < 0:
                want = "×".join(map(str, p.stored_shape))
                got = "×".join(map(str, tensor_shapes[tensor]))
                where = f" (card {name} ∈ ℝ^{{{'×'.join(map(str, shape))}}}" + (
                    ", transposed)" if src.transpose else ")"
                )
                problems.append(
                    Diagnostic(
                        decl.span,
                        f"tensor '{tensor}' has shape [{got}], the card expects [{want}]{where}",
                        shapes=(got, want),
                    )
                )
            return p
    names = " or ".join(repr(_tensor_name(s, group, arch, layer)) for s in tensors)
    where = f", which layer {layer} holds by its group's condition" if group and group.cond else ""
    problems.append(
        Diagnostic(decl.span, f"tensor {names} is missing from the file (card parameter {name}{where})")
    )
    return None


def _bind_rows(
    decl, name, src, layer, key, tensor, shape, values, tensor_shapes, problems
) -> BoundParam | None:
    """`"attn_qkv.weight"[lo:hi]`: rows lo…hi of a fused tensor, which must hold them and whose
    other axes must be the parameter's."""
    try:
        lo, hi = (eval_dim(d, values) for d in src.rows)
    except EvalError as exc:
        problems.append(Diagnostic(src.span, f"rows of {tensor!r} for {name}: {exc}"))
        return None
    stored = tuple(tensor_shapes[tensor])
    part = (hi - lo + 1, *stored[1:])
    if not 1 <= lo <= hi <= stored[0] or part != shape:
        problems.append(
            Diagnostic(
                src.span,
                f"rows {lo}…{hi} of tensor '{tensor}' [{'×'.join(map(str, stored))}] are not the card's "
                f"{name} ∈ ℝ^{{{'×'.join(map(str, shape))}}}",
                "the rows must lie inside the tensor and number the parameter's first axis",
                shapes=("×".join(map(str, part)), "×".join(map(str, shape))),
            )
        )
        return None
    return BoundParam(name, layer, key, tensor, False, None, shape, decl, rows=(lo - 1, hi))


def _uncovered_rows(params: list[BoundParam], shapes: dict[str, tuple[int, ...]]) -> list[Diagnostic]:
    """A fused tensor the card takes in parts must be taken whole: rows no parameter reads would be
    weights the file holds and the card silently drops."""
    parts: dict[str, list[BoundParam]] = {}
    for p in params:
        if p.rows is not None:
            parts.setdefault(p.tensor, []).append(p)
    problems = []
    for tensor, ps in parts.items():
        covered = set().union(*(range(*p.rows) for p in ps))
        missing = sorted(set(range(shapes[tensor][0])) - covered)
        if missing:
            problems.append(
                Diagnostic(
                    ps[0].decl.span,
                    f"rows {missing[0] + 1}…{missing[-1] + 1} of tensor '{tensor}' are read by no parameter",
                    "the parts of a fused tensor must cover all its rows",
                )
            )
    return problems


def bind(algo: ir.Algorithm, gguf, file: str = "") -> Bound:
    """Bind a card's algorithm to an open GGUF file (`toycards.gguf.reader.GGUFFile`)."""
    arch = str(gguf.get("general.architecture", ""))
    shapes = {name: tuple(info.shape) for name, info in gguf.tensors.items()}
    values, source, problems = bind_hyperparameters(algo, gguf.metadata, arch, shapes, file)
    params, more = bind_parameters(algo, values, shapes, arch)
    used = {p.tensor for p in params if p.tensor}
    unused = [t for t in gguf.tensors if t not in used]
    return Bound(algo, arch, values, source, params, problems + more, unused)


def bind_values(algo: ir.Algorithm, values: dict[str, object] | None = None, arch: str = "") -> Bound:
    """Bind a card without a file: hyperparameters from the card's `= value`s and from `values`."""
    hyper, source, problems = bind_hyperparameters(algo, {}, arch, {}, "", given=values)
    params, more = bind_parameters(algo, hyper, None, arch)
    return Bound(algo, arch, hyper, source, params, problems + more)
