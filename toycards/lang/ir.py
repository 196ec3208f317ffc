"""The card IR: a closed set of frozen, hashable, printable node kinds.

Owns: the node classes for dimensions, types, expressions, statements, declarations,
bindings, algorithms and whole cards, plus `to_json`/`from_json`.
Leaves out: parsing (parse.py), checking (checker/), rendering (render/), codegen.

Every node carries a `span` that is excluded from equality and hashing, so that
`parse(render(card)) == card` compares meaning and layout-relevant content, not positions.
Names are stored in canonical Unicode spelling (`γ_l^1`, `ℓ`, `X̃`); the ASCII spelling is a
rendering choice. This module imports nothing from the package but `errors.Span` and
`scale.child_fields`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Union

from toycards.errors import NO_SPAN, Span
from toycards.lang.scale import child_fields

CARD_LANGUAGE_VERSION = 1


def _span() -> Span:
    return field(default=NO_SPAN, compare=False, hash=False, repr=False)


# ── dimensions ──────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class DimName:
    """A symbolic dimension, e.g. `d_e`, `ℓ`."""

    name: str
    span: Span = _span()


@dataclass(frozen=True)
class DimNum:
    value: int
    span: Span = _span()


@dataclass(frozen=True)
class DimOp:
    """Dimension arithmetic: op is one of `+ - * /` (`*` is the card's `·`)."""

    op: str
    left: Dim
    right: Dim
    span: Span = _span()


Dim = Union[DimName, DimNum, DimOp]


# ── types ───────────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class TensorType:
    """`ℝ^{a×b}`, `ℕ`, `ℤ`, `{0,1}^{…}`, `(0,1)^{…}`, `V^ℓ`.

    field: "R" reals, "N" naturals, "Z" integers, "B" binary {0,1}, "P" open interval (0,1),
    "V" token ids (a sequence over the vocabulary). `dims` is empty for a scalar.
    """

    field: str
    dims: tuple[Dim, ...] = ()
    span: Span = _span()


@dataclass(frozen=True)
class IndexType:
    """`[n]`: an integer index 1 … n (e.g. a token id `v ∈ [N_V]`)."""

    bound: Dim
    span: Span = _span()


@dataclass(frozen=True)
class EnumType:
    """`{none, linear, yarn}`: one of a few named choices (hyperparameters only)."""

    options: tuple[str, ...]
    span: Span = _span()


@dataclass(frozen=True)
class StrType:
    """`𝕊` (ASCII `S`): a string hyperparameter, e.g. a tokenizer model name."""

    span: Span = _span()


Type = Union[TensorType, IndexType, EnumType, StrType]


# ── expressions ─────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class Name:
    """A variable, parameter, hyperparameter, loop index or function name (`γ_l^1`)."""

    id: str
    span: Span = _span()


@dataclass(frozen=True)
class Num:
    """A numeric literal, kept as written (`1e-5`, `0.5`, `3`) so that rendering is exact."""

    text: str
    span: Span = _span()

    @property
    def value(self) -> float:
        return float(self.text)


@dataclass(frozen=True)
class Const:
    """A named constant: `∞`, `π`."""

    name: str
    span: Span = _span()


@dataclass(frozen=True)
class Str:
    """A string literal (in comparisons with enum hyperparameters)."""

    value: str
    span: Span = _span()


@dataclass(frozen=True)
class BinOp:
    """op: `+ - · ⊙ / ^` arithmetic, `< ≤ = ≠ ≥ >` comparison, `∧ ∨` logic."""

    op: str
    left: Expr
    right: Expr
    span: Span = _span()


@dataclass(frozen=True)
class UnOp:
    """op: `-` negation, `¬` not, `√` square root."""

    op: str
    operand: Expr
    span: Span = _span()


@dataclass(frozen=True)
class Transpose:
    """`A^⊺`. `1^⊺` (a row of ones, for broadcasting `b · 1^⊺`) is `Transpose(Num("1"))`."""

    operand: Expr
    span: Span = _span()


@dataclass(frozen=True)
class Slice:
    """`lo:hi` inside an index (1-based, inclusive, like the paper's `x[1:t]`); `:` alone is all."""

    lo: Expr | None
    hi: Expr | None
    span: Span = _span()


@dataclass(frozen=True)
class Index:
    """`A[i]`, `X[:, t]`, `W[a:b, :]`."""

    base: Expr
    indices: tuple[Expr | Slice, ...]
    span: Span = _span()


@dataclass(frozen=True)
class Call:
    """`f(args | params)`: inputs before the bar, parameters and hyperparameters after it."""

    func: str
    args: tuple[Expr, ...]
    params: tuple[Expr, ...] = ()
    has_bar: bool = False
    span: Span = _span()


@dataclass(frozen=True)
class MaskDef:
    """A mask passed by definition: `Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧`."""

    name: str
    indices: tuple[str, ...]
    body: Expr
    span: Span = _span()


@dataclass(frozen=True)
class Indicator:
    """`⟦cond⟧`: 1 where the condition holds, else 0."""

    cond: Expr
    span: Span = _span()


@dataclass(frozen=True)
class Sum:
    """`Σ_{i=lo}^{hi} body`."""

    var: str
    lo: Expr
    hi: Expr
    body: Expr
    span: Span = _span()


@dataclass(frozen=True)
class Concat:
    """`[a, b, c]` side by side (columns) or `[a; b; c]` stacked (rows).

    A family range `[e_1, …, e_ℓ]` is `Concat(items=(e_1, e_ℓ), axis="cols", ellipsis=True)`.
    """

    items: tuple[Expr, ...]
    axis: str  # "cols" | "rows"
    ellipsis: bool = False
    span: Span = _span()


Expr = Union[Name, Num, Const, Str, BinOp, UnOp, Transpose, Index, Call, MaskDef, Indicator, Sum, Concat]


# ── statements ──────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class Comment:
    """A whole-line `▷ …` comment among the steps."""

    text: str
    span: Span = _span()


@dataclass(frozen=True)
class Assign:
    """`target ← value ∷ annot ▷ comment`."""

    target: Expr  # Name or Index
    value: Expr
    annot: Type | None = None
    comment: str = ""
    span: Span = _span()


@dataclass(frozen=True)
class Return:
    """`return P = softmax(Z)` (name given) or `return expr`."""

    value: Expr
    name: str = ""
    annot: Type | None = None
    comment: str = ""
    span: Span = _span()


@dataclass(frozen=True)
class Range:
    """`v ∈ [n]` in a parallel map."""

    var: str
    bound: Dim
    span: Span = _span()


@dataclass(frozen=True)
class ForSeq:
    """`for l = 1, …, L do … end`: a sequential loop (`second` keeps an optional `2` as written)."""

    var: str
    start: Expr
    stop: Expr
    body: tuple[Stmt, ...]
    second: Expr | None = None
    comment: str = ""
    end_comment: str = ""
    span: Span = _span()


@dataclass(frozen=True)
class ForAll:
    """`for t ∈ [ℓ]: stmt` or `for h ∈ [H] do … end`: a parallel map, vectorised by codegen."""

    ranges: tuple[Range, ...]
    body: tuple[Stmt, ...]
    inline: bool = True
    comment: str = ""
    end_comment: str = ""
    span: Span = _span()


@dataclass(frozen=True)
class If:
    """`if cond then … else … end`, or inline `if cond then stmt`."""

    cond: Expr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...] = ()
    inline: bool = False
    comment: str = ""
    else_comment: str = ""
    end_comment: str = ""
    span: Span = _span()


Stmt = Union[Comment, Assign, Return, ForSeq, ForAll, If]


# ── declarations and bindings ───────────────────────────────────────────────────────────
@dataclass(frozen=True)
class Source:
    """Where a parameter's data comes from: a GGUF tensor name template, maybe transposed.

    `"token_embd.weight"^⊺` is `Source("token_embd.weight", transpose=True)`;
    a constant fallback `or 1` is `Source("", const="1")`; rows lo…hi (from 1, both included) of a
    fused tensor, `"attn_qkv.weight"[d_e+1:2·d_e]`, is `Source("attn_qkv.weight", rows=(lo, hi))`.
    """

    tensor: str = ""
    transpose: bool = False
    const: str = ""
    rows: tuple[Dim, Dim] | None = None
    span: Span = _span()


@dataclass(frozen=True)
class Binding:
    """How a declaration gets its value.

    kind "from":    `from "{arch}.block_count" default 1e-5` for a hyperparameter (metadata keys),
                    `from "attn_norm.weight", "attn_norm.bias"` for parameters (tensor names, one
                    list of alternatives per declared name, `or` between alternatives);
    kind "derived": `≔ d_e / H` (expr);
    kind "default": `default 0` (default) for an optional hyperparameter of a called algorithm,
                    the value a call that leaves it out passes (lang/options.py `call_params`).
    """

    kind: str
    sources: tuple[tuple[Source, ...], ...] = ()
    default: Expr | None = None
    expr: Expr | None = None
    span: Span = _span()


@dataclass(frozen=True)
class Decl:
    """`γ_l^1, β_l^1 ∈ ℝ^{d_e}  from "attn_norm.weight", "attn_norm.bias"  ▷ comment`."""

    names: tuple[str, ...]
    type: Type
    binding: Binding | None = None
    value: Expr | None = None  # concrete value in a bound card: `L ∈ ℕ = 30 from "…"`
    comment: str = ""
    span: Span = _span()


@dataclass(frozen=True)
class ParamGroup:
    """`for l ∈ [L], in "blk.{l-1}.":` followed by indented declarations (per-layer tensors)."""

    var: str
    bound: Dim
    prefix: str
    decls: tuple[Decl, ...]
    comment: str = ""
    span: Span = _span()
    cond: Expr | None = None  # `, if n_kv[l] ≠ 0`: the layers that hold the tensors (None: all)


@dataclass(frozen=True)
class Algorithm:
    """One algorithm box: header, description, declaration blocks and numbered steps."""

    name: str
    number: str  # as written after "Algorithm" ("10", "" when absent)
    output: str
    inputs: tuple[str, ...]
    params: tuple[str, ...]  # after the bar in the header; calls pass these in this order
    description: str
    input_decls: tuple[Decl, ...]
    output_decls: tuple[Decl, ...]
    hyper_decls: tuple[Decl, ...]
    param_decls: tuple[Decl | ParamGroup, ...]
    body: tuple[Stmt, ...]
    span: Span = _span()
    # what the algorithm carries from one call to the next (decoder state: a recurrence's h, a
    # convolution's window); each name starts a call as the same call site left it, zeros at first
    state_decls: tuple[Decl, ...] = ()

    def all_params(self) -> list[tuple[Decl, ParamGroup | None]]:
        """Every parameter declaration with the group (per-layer block) it sits in."""
        out: list[tuple[Decl, ParamGroup | None]] = []
        for item in self.param_decls:
            if isinstance(item, ParamGroup):
                out += [(d, item) for d in item.decls]
            else:
                out.append((item, None))
        return out


@dataclass(frozen=True)
class Card:
    """A card file: a version, optional leading comments, and one or more algorithms."""

    algorithms: tuple[Algorithm, ...]
    version: int = CARD_LANGUAGE_VERSION
    preamble: tuple[str, ...] = ()  # whole-line ▷ comments before the first algorithm
    file: str = field(default="<card>", compare=False, hash=False, repr=False)
    source: str = field(default="", compare=False, hash=False, repr=False)

    def algorithm(self, name: str) -> Algorithm | None:
        return next((a for a in self.algorithms if a.name == name), None)

    @property
    def main(self) -> Algorithm:
        """The card's entry point: the last algorithm in the file."""
        return self.algorithms[-1]

    def __str__(self) -> str:
        return CANONICAL_PRINTER[0](self)


# The canonical printer lives outside the IR (lang/printer.py, which imports this module): it
# puts itself here when it loads, and toycards/lang/__init__.py loads it with the IR.
CANONICAL_PRINTER: list = [repr]


# ── traversal and shared predicates ─────────────────────────────────────────────────────
def walk(node: object):
    """Every IR node in and below `node` (tuples of nodes included), depth first, iteratively.

    >>> [type(n).__name__ for n in walk(BinOp("+", Name("a"), Num("1")))]
    ['BinOp', 'Name', 'Num']
    """
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, tuple):
            stack.extend(reversed(n))
        elif (names := child_fields(type(n))) is not None:
            yield n
            stack.extend(reversed([getattr(n, name) for name in names]))


def is_mask_equation(e: object) -> bool:
    """`Mask[t_z, t_x] = …`: among call parameters (not parenthesised) this defines a mask."""
    return (
        isinstance(e, BinOp)
        and e.op == "="
        and isinstance(e.left, Index)
        and isinstance(e.left.base, Name)
        and all(isinstance(i, Name) for i in e.left.indices)
    )


# ── JSON ────────────────────────────────────────────────────────────────────────────────
NODE_TYPES = {
    cls.__name__: cls
    for cls in (
        DimName, DimNum, DimOp, TensorType, IndexType, EnumType, StrType, Name, Num, Const, Str,
        BinOp, UnOp, Transpose, Slice, Index, Call, MaskDef, Indicator, Sum, Concat, Comment,
        Assign, Return, Range, ForSeq, ForAll, If, Source, Binding, Decl, ParamGroup, Algorithm,
        Card,
    )
}  # fmt: skip


def to_json(node: object) -> object:
    """A JSON-ready structure: each node is `{"node": ClassName, field: value, …}` (spans omitted)."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        out: dict[str, object] = {"node": type(node).__name__}
        for f in dataclasses.fields(node):
            if f.name != "span" and f.compare:
                out[f.name] = to_json(getattr(node, f.name))
        return out
    if isinstance(node, tuple | list):
        return [to_json(x) for x in node]
    return node


def from_json(data: object) -> object:
    """Inverse of `to_json`."""
    if isinstance(data, dict):
        cls = NODE_TYPES[data["node"]]
        kwargs = {k: from_json(v) for k, v in data.items() if k != "node"}
        return cls(**kwargs)
    if isinstance(data, list):
        return tuple(from_json(x) for x in data)
    return data
