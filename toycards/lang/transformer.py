"""Parse tree → IR nodes: the one lark Transformer.

Owns: `ToIR`, one method per grammar rule, which turns lark's tree into IR expressions,
types, declarations and statements, each with its span and its names in canonical spelling
(names.py), and each card line into a `Line` record; `span_of` (lark positions → `Span`); the
mistakes only seen here (assigning to a constant, a dimension that is not a whole number, a
name over `MAX_NAME` characters), collected in `ToIR.diags`.
Leaves out: the grammar (card.lark) and running the parser (parse.py); sorting the lines into
algorithms, declaration blocks, parameter groups and nested steps (assemble.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from lark import Token, Transformer, v_args

from toycards.errors import Diagnostic, Span
from toycards.lang import ir
from toycards.lang.names import canonical_name
from toycards.lang.reading import MAX_NAME


def span_of(meta_or_token: object, file: str) -> Span:
    """The Span of a lark node's meta or of a token; an empty or unplaced one gives line 0."""
    m = meta_or_token
    if getattr(m, "empty", False) or getattr(m, "line", None) is None:
        return Span(file, 0, 0, 0, 0, 0, 0)
    return Span(file, m.line, m.column, m.end_line, m.end_column, m.start_pos, m.end_pos)


@dataclass
class Line:
    """One line of a card, for the assembler (assemble.py).

    `kind` is "version", "header", "desc", "comment", "block", "decl" or "group", or for a step
    "stmt", "for_seq", "forall", "if", "else" or "end"; `data` holds what the line says, as
    the ToIR method for that line's rule puts it.
    """

    kind: str
    span: Span
    data: dict = field(default_factory=dict)


def _text(tok: Token) -> str:
    return str(tok)


def _comment(tok: Token | None) -> str:
    if tok is None:
        return ""
    s = str(tok)
    return (s[1:] if s.startswith("▷") else s[2:]).strip()


def _split_comment(children: list) -> tuple[list, str]:
    if children and isinstance(children[-1], Token) and children[-1].type == "COMMENT":
        return children[:-1], _comment(children[-1])
    return children, ""


@v_args(meta=True)
class ToIR(Transformer):
    """One Transformer from lark's tree to IR nodes; statements come out as `Line`s."""

    def __init__(self, file: str, text: str = "") -> None:
        super().__init__(visit_tokens=False)  # no method takes a token on its own
        self.file, self.text = file, text
        self.diags: list[Diagnostic] = []
        # lark wraps a `v_args` method anew each time it is looked up on the instance; bound once
        # here, a card's transform costs a plain call per node
        for rule in _RULES:
            setattr(self, rule, getattr(self, rule))

    def sp(self, meta: object) -> Span:
        return span_of(meta, self.file)

    def canon(self, tok: Token) -> str:
        """The canonical spelling of a name token; a name over MAX_NAME characters is a diagnostic."""
        if len(tok) > MAX_NAME:
            self.diags.append(
                Diagnostic(
                    span_of(tok, self.file),
                    f"a name of {len(tok)} characters (the limit is {MAX_NAME})",
                    "use a shorter name",
                )
            )
        name = canonical_name(tok)
        if bad := _not_in_names(str(tok), name):
            self.diags.append(
                Diagnostic(
                    span_of(tok, self.file),
                    f"the canonical (NFC) form of this name holds {bad}, which a name may not hold",
                    "write the name with letters whose NFC form is a letter, or in ASCII",
                )
            )
        return name

    # lines
    def start(self, meta, children):
        return children

    def version_line(self, meta, c):
        return Line("version", self.sp(meta), {"version": int(float(c[0]))})

    def header_line(self, meta, c):
        c, comment = _split_comment(list(c))
        c.pop(0)  # "Algorithm"
        number = _text(c.pop(0)) if c[0].type == "NUMBER" else ""
        out, name = self.canon(c[0]), self.canon(c[1])
        inputs: tuple = ()
        params: tuple = ()
        rest = c[2:]
        if rest and not isinstance(rest[0], Token):
            inputs, rest = rest[0], rest[1:]
        if rest and isinstance(rest[0], Token) and rest[0].type == "BAR":
            params = rest[1] if len(rest) > 1 else ()
        return Line(
            "header",
            self.sp(meta),
            {
                "number": number,
                "output": out,
                "name": name,
                "inputs": inputs,
                "params": params,
                "comment": comment,
            },
        )

    def desc_line(self, meta, c):
        return Line("desc", self.sp(meta), {"text": str(c[0])[2:-2].strip()})

    def comment_line(self, meta, c):
        return Line("comment", self.sp(meta), {"text": _comment(c[0])})

    def block_kw(self, meta, c):
        return str(c[0])

    def block_line(self, meta, c):
        c, comment = _split_comment(list(c))
        decl = c[1] if len(c) > 1 else None
        if decl is not None and comment:
            decl = _with(decl, comment=comment)
        return Line("block", self.sp(meta), {"block": c[0], "decl": decl, "comment": "" if decl else comment})

    def decl_line(self, meta, c):
        c, comment = _split_comment(list(c))
        return Line("decl", self.sp(meta), {"decl": _with(c[0], comment=comment)})

    def group_line(self, meta, c):
        c, comment = _split_comment(list(c))
        data = {"var": c[0].var, "bound": c[0].bound, "prefix": str(c[1])[1:-1], "comment": comment}
        return Line("group", self.sp(meta), data | {"cond": c[2] if len(c) > 2 else None})

    def group_cond(self, meta, c):
        return c[0]

    def step_line(self, meta, c):
        c, comment = _split_comment(list(c))
        if isinstance(c[0], Token) and c[0].type == "NUMBER":
            c = c[1:]
        kind, data = c[0]
        return Line(kind, self.sp(meta), {**data, "comment": comment})

    # declarations
    def names(self, meta, c):
        return tuple(self.canon(t) for t in c)

    def decl(self, meta, c):
        names, typ, rest = c[0], c[1], c[2:]
        value = binding = None
        for r in rest:
            if isinstance(r, ir.Binding):
                binding = r
            else:
                value = r
        return ir.Decl(names, typ, binding, value, span=self.sp(meta))

    def value(self, meta, c):
        return c[1]

    def bind_from(self, meta, c):
        default = c[-1] if c and isinstance(c[-1], _Default) else None
        alts = tuple(x for x in c if isinstance(x, tuple))
        return ir.Binding("from", alts, default.expr if default else None, span=self.sp(meta))

    def bind_derived(self, meta, c):
        return ir.Binding("derived", expr=c[0], span=self.sp(meta))

    def bind_default(self, meta, c):
        return ir.Binding("default", default=c[0].expr, span=self.sp(meta))

    def default(self, meta, c):
        return _Default(c[0])

    def alternatives(self, meta, c):
        return tuple(c)

    def source_tensor(self, meta, c):
        return ir.Source(str(c[0])[1:-1], transpose=len(c) > 1, span=self.sp(meta))

    def source_rows(self, meta, c):
        return ir.Source(str(c[0])[1:-1], rows=(c[1], c[2]), span=self.sp(meta))

    def source_const(self, meta, c):
        return ir.Source("", const=c[0], span=self.sp(meta))

    def parenthesized(self, e: ir.Expr) -> bool:
        """Whether the source wrote `(…)` right around e (the tree drops parentheses)."""
        start, end = e.span.start, e.span.end
        before, after = self.text[:start].rstrip(), self.text[end:].lstrip()
        return before.endswith("(") and after.startswith(")")

    def negative_number(self, meta, c):
        return "-" + str(c[-1])

    def signed_number(self, meta, c):
        return ("-" if len(c) > 1 else "") + str(c[-1])

    # types and dimensions
    def real_type(self, meta, c):
        return ir.TensorType("R", c[0] if c else (), span=self.sp(meta))

    def nat_type(self, meta, c):
        return ir.TensorType("N", c[0] if c else (), span=self.sp(meta))

    def int_type(self, meta, c):
        return ir.TensorType("Z", c[0] if c else (), span=self.sp(meta))

    def binary_type(self, meta, c):
        return ir.TensorType("B", c[-1] if len(c) > 1 else (), span=self.sp(meta))

    def prob_type(self, meta, c):
        return ir.TensorType("P", c[-1] if len(c) > 1 else (), span=self.sp(meta))

    def token_type(self, meta, c):
        return ir.TensorType("V", c[0], span=self.sp(meta))

    def index_type(self, meta, c):
        return ir.IndexType(c[0], span=self.sp(meta))

    def str_type(self, meta, c):
        return ir.StrType(span=self.sp(meta))

    def enum_type(self, meta, c):
        return ir.EnumType(tuple(str(t) for t in c), span=self.sp(meta))

    def dims(self, meta, c):
        return tuple(c)

    def dim_name(self, meta, c):
        return ir.DimName(self.canon(c[0]), span=self.sp(meta))

    def dim_num(self, meta, c):
        text = str(c[0])
        if not text.isdigit():
            self.diags.append(
                Diagnostic(
                    self.sp(meta), f"a dimension is a whole number, not {text}", "write e.g. ℝ^{3·d_e}"
                )
            )
            return ir.DimNum(0, span=self.sp(meta))
        return ir.DimNum(int(text), span=self.sp(meta))

    def _dim_op(op):  # noqa: N805 - a small factory used in the class body
        def method(self, meta, c):
            return ir.DimOp(op, c[0], c[-1], span=self.sp(meta))

        return method

    dim_add, dim_sub, dim_mul, dim_div = _dim_op("+"), _dim_op("-"), _dim_op("*"), _dim_op("/")

    # statements: each returns (line kind, data)
    def assign(self, meta, c):
        annot = c[2] if len(c) > 2 else None
        if isinstance(c[0], ir.Const):
            self.diags.append(
                Diagnostic(
                    c[0].span, f"{c[0].name} is a constant and cannot be assigned", "choose another name"
                )
            )
        return "stmt", {"stmt": ir.Assign(c[0], c[1], annot, span=self.sp(meta))}

    def return_stmt(self, meta, c):
        value, annot, name = c[0], (c[1] if len(c) > 1 else None), ""
        named = isinstance(value, ir.BinOp) and value.op == "=" and isinstance(value.left, ir.Name)
        if named and not self.parenthesized(value):  # `return (a = b)` returns the equation
            name, value = value.left.id, value.right
        return "stmt", {"stmt": ir.Return(value, name, annot, span=self.sp(meta))}

    def annot(self, meta, c):
        return c[0]

    def for_seq(self, meta, c):
        var, rest = self.canon(c[0]), [x for x in c[1:] if not (isinstance(x, Token) and x.type == "EQ")]
        second = rest[1] if len(rest) == 3 else None
        return "for_seq", {
            "var": var,
            "start": rest[0],
            "second": second,
            "stop": rest[-1],
            "span": self.sp(meta),
        }

    def forall_inline(self, meta, c):
        kind, data = c[1]
        return "stmt", {"stmt": ir.ForAll(c[0], (data["stmt"],), True, span=self.sp(meta))}

    def forall_block(self, meta, c):
        return "forall", {"ranges": c[0], "span": self.sp(meta)}

    def if_inline(self, meta, c):
        kind, data = c[1]
        return "stmt", {"stmt": ir.If(c[0], (data["stmt"],), (), True, span=self.sp(meta))}

    def if_block(self, meta, c):
        return "if", {"cond": c[0], "span": self.sp(meta)}

    def else_line(self, meta, c):
        return "else", {"span": self.sp(meta)}

    def end_line(self, meta, c):
        return "end", {"span": self.sp(meta)}

    def ranges(self, meta, c):
        return tuple(c)

    def range(self, meta, c):
        return ir.Range(self.canon(c[0]), c[1], span=self.sp(meta))

    def index_target(self, meta, c):
        return ir.Index(ir.Name(self.canon(c[0]), span=span_of(c[0], self.file)), c[1], span=self.sp(meta))

    # expressions
    def name(self, meta, c):
        n = self.canon(c[0])
        if n == "π":
            return ir.Const("π", span=self.sp(meta))
        return ir.Name(n, span=self.sp(meta))

    def number(self, meta, c):
        return ir.Num(str(c[0]), span=self.sp(meta))

    def infinity(self, meta, c):
        return ir.Const("∞", span=self.sp(meta))

    def string(self, meta, c):
        return ir.Str(str(c[0])[1:-1], span=self.sp(meta))

    def _bin(op):  # noqa: N805
        def method(self, meta, c):
            return ir.BinOp(op, c[0], c[-1], span=self.sp(meta))

        return method

    add, sub, dot, hadamard, div, pow = _bin("+"), _bin("-"), _bin("·"), _bin("⊙"), _bin("/"), _bin("^")
    or_, and_, mod = _bin("∨"), _bin("∧"), _bin("mod")

    def compare(self, meta, c):
        op = {"<=": "≤", ">=": "≥", "!=": "≠"}.get(str(c[1]), str(c[1]))
        return ir.BinOp(op, c[0], c[2], span=self.sp(meta))

    def not_(self, meta, c):
        return ir.UnOp("¬", c[0], span=self.sp(meta))

    def neg(self, meta, c):
        return ir.UnOp("-", c[0], span=self.sp(meta))

    def sqrt(self, meta, c):
        return ir.UnOp("√", c[0], span=self.sp(meta))

    def transpose(self, meta, c):
        return ir.Transpose(c[0], span=self.sp(meta))

    def index(self, meta, c):
        return ir.Index(c[0], c[1], span=self.sp(meta))

    def indices(self, meta, c):
        return tuple(c)

    def slice_all(self, meta, c):
        return ir.Slice(None, None, span=self.sp(meta))

    def slice_from(self, meta, c):
        return ir.Slice(c[0], None, span=self.sp(meta))

    def slice_to(self, meta, c):
        return ir.Slice(None, c[0], span=self.sp(meta))

    def slice(self, meta, c):
        return ir.Slice(c[0], c[1], span=self.sp(meta))

    def call(self, meta, c):
        func = self.canon(c[0])
        args, params, bar = c[1]
        params = tuple(p if self.parenthesized(p) else _mask_def(p) for p in params)
        return ir.Call(func, args, params, bar, span=self.sp(meta))

    def call_args(self, meta, c):
        args: tuple = ()
        params: tuple = ()
        bar = False
        for x in c:
            if isinstance(x, Token):
                bar = True
            elif bar:
                params = x
            else:
                args = x
        return args, params, bar

    def arglist(self, meta, c):
        return tuple(c)

    def sum(self, meta, c):
        c = [x for x in c if not (isinstance(x, Token) and x.type == "EQ")]
        return ir.Sum(self.canon(c[0]), c[1], c[2], c[3], span=self.sp(meta))

    def concat_cols(self, meta, c):
        return ir.Concat(tuple(c), "cols", span=self.sp(meta))

    def concat_rows(self, meta, c):
        return ir.Concat(tuple(c), "rows", span=self.sp(meta))

    def family_cols(self, meta, c):
        return ir.Concat(tuple(c), "cols", True, span=self.sp(meta))

    def family_rows(self, meta, c):
        return ir.Concat(tuple(c), "rows", True, span=self.sp(meta))

    def ceil(self, meta, c):
        return ir.Call("ceil", (c[0],), span=self.sp(meta))

    def indicator(self, meta, c):
        return ir.Indicator(c[0], span=self.sp(meta))


# the methods lark's `v_args` wrapped: the rules, and the helpers they call
_RULES = tuple(name for name, attr in vars(ToIR).items() if hasattr(attr, "visit_wrapper"))


class _Default:
    """The value after `default` in a binding, told apart from the alternatives by its type.

    A plain class rather than a dataclass: it is never compared, and it keeps import time down.
    """

    __slots__ = ("expr",)

    def __init__(self, expr: ir.Expr) -> None:
        self.expr = expr


def _with(node, **changes):
    return dataclasses.replace(node, **changes)


def _mask_def(e: ir.Expr) -> ir.Expr:
    """`Mask[t_z, t_x] = ⟦…⟧` among call parameters defines a mask by its entries."""
    if ir.is_mask_equation(e):
        return ir.MaskDef(e.left.base.id, tuple(i.id for i in e.left.indices), e.right, span=e.span)
    return e


def _not_in_names(written: str, canonical: str) -> str:
    """A character that canonical (NFC) form brought into a name and that the grammar's NAME does not
    take (a letter such as U+0F5C decomposes into a letter and a combining mark), as
    `'ྷ' (U+0FB7)`; "" when there is none. The printer writes the canonical form, which must read
    back as the same name."""
    for ch in set(canonical) - set(written):
        if not (ch.isalnum() or "\u0300" <= ch <= "\u036f"):
            return f"{ch!r} (U+{ord(ch):04X})"
    return ""
