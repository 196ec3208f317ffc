"""Card text → IR. The only module that imports lark.

Owns: loading `lang/card.lark`, turning lark's tree into IR nodes (one Transformer),
assembling the line-oriented parse into algorithms, parameter groups (by indentation) and
nested steps (by `do … end`), canonical spelling of names (ASCII → Unicode), and friendly
syntax errors (`match_examples` over a table of known mistakes).
Leaves out: name resolution and shapes (check/), rendering (render/).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import lark
from lark import Token, Transformer, v_args

from toycards.errors import Diagnostic, Span, ToycardsError
from toycards.lang import ir
from toycards.lang.names import canonical_name
from toycards.lang.reading import MAX_BYTES, MAX_NESTING, precheck, read

__all__ = ["MAX_BYTES", "MAX_NESTING", "parse", "span_of"]


@functools.cache
def _parser() -> lark.Lark:
    grammar = resources.files("toycards.lang").joinpath("card.lark").read_text(encoding="utf-8")
    return lark.Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=False, cache=True)


# ── public entry points ─────────────────────────────────────────────────────────────────
def parse(text_or_path: str | Path, file: str | None = None) -> ir.Card:
    """Parse a card from text or from a path; raises ToycardsError with diagnostics."""
    text, file = read(text_or_path, file)
    precheck(text, file)
    try:
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedInput as exc:
        from toycards.lang.syntax_errors import syntax_diagnostic  # only a card with a syntax error needs it

        diag = syntax_diagnostic(exc, text, file, _parser())
        raise ToycardsError.from_diagnostics([diag], {file: text}) from None
    to_ir = _ToIR(file, text)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 12000))  # lark's Transformer recurses once per tree level
    try:
        lines = to_ir.transform(tree)
    except (RecursionError, lark.exceptions.VisitError) as exc:
        if isinstance(exc, lark.exceptions.VisitError) and not isinstance(exc.orig_exc, RecursionError):
            raise
        raise ToycardsError(f"{file}: an expression is too long or too deeply nested to read") from None
    finally:
        sys.setrecursionlimit(limit)
    if to_ir.diags:
        raise ToycardsError.from_diagnostics(to_ir.diags, {file: text})
    card = _Assembler(file, text).assemble(lines)
    return ir.Card(card.algorithms, card.version, card.preamble, file=file, source=text)


def span_of(meta_or_token: object, file: str) -> Span:
    m = meta_or_token
    if getattr(m, "empty", False) or getattr(m, "line", None) is None:
        return Span(file, 0, 0, 0, 0, 0, 0)
    return Span(file, m.line, m.column, m.end_line, m.end_column, m.start_pos, m.end_pos)


# ── tree → IR pieces ────────────────────────────────────────────────────────────────────
@dataclass
class _Line:
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
class _ToIR(Transformer):
    """One Transformer from lark's tree to IR nodes; statements come out as `_Line`s."""

    def __init__(self, file: str, text: str = "") -> None:
        super().__init__()
        self.file, self.text = file, text
        self.diags: list[Diagnostic] = []

    def sp(self, meta: object) -> Span:
        return span_of(meta, self.file)

    # lines
    def start(self, meta, children):
        return children

    def version_line(self, meta, c):
        return _Line("version", self.sp(meta), {"version": int(float(c[0]))})

    def header_line(self, meta, c):
        c, comment = _split_comment(list(c))
        c.pop(0)  # "Algorithm"
        number = _text(c.pop(0)) if c[0].type == "NUMBER" else ""
        out, name = canonical_name(c[0]), canonical_name(c[1])
        inputs: tuple = ()
        params: tuple = ()
        rest = c[2:]
        if rest and not isinstance(rest[0], Token):
            inputs, rest = rest[0], rest[1:]
        if rest and isinstance(rest[0], Token) and rest[0].type == "BAR":
            params = rest[1] if len(rest) > 1 else ()
        return _Line(
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
        return _Line("desc", self.sp(meta), {"text": str(c[0])[2:-2].strip()})

    def comment_line(self, meta, c):
        return _Line("comment", self.sp(meta), {"text": _comment(c[0])})

    def block_kw(self, meta, c):
        return str(c[0])

    def block_line(self, meta, c):
        c, comment = _split_comment(list(c))
        decl = c[1] if len(c) > 1 else None
        if decl is not None and comment:
            decl = _with(decl, comment=comment)
        return _Line(
            "block", self.sp(meta), {"block": c[0], "decl": decl, "comment": "" if decl else comment}
        )

    def decl_line(self, meta, c):
        c, comment = _split_comment(list(c))
        return _Line("decl", self.sp(meta), {"decl": _with(c[0], comment=comment)})

    def group_line(self, meta, c):
        c, comment = _split_comment(list(c))
        return _Line(
            "group",
            self.sp(meta),
            {"var": canonical_name(c[0]), "bound": c[1], "prefix": str(c[2])[1:-1], "comment": comment},
        )

    def step_line(self, meta, c):
        c, comment = _split_comment(list(c))
        if isinstance(c[0], Token) and c[0].type == "NUMBER":
            c = c[1:]
        kind, data = c[0]
        return _Line(kind, self.sp(meta), {**data, "comment": comment})

    # declarations
    def names(self, meta, c):
        return tuple(canonical_name(t) for t in c)

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

    def default(self, meta, c):
        return _Default(c[0])

    def alternatives(self, meta, c):
        return tuple(c)

    def source_tensor(self, meta, c):
        return ir.Source(str(c[0])[1:-1], transpose=len(c) > 1, span=self.sp(meta))

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
        return ir.TensorType("N", (), span=self.sp(meta))

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
        return ir.DimName(canonical_name(c[0]), span=self.sp(meta))

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
        var, rest = canonical_name(c[0]), [x for x in c[1:] if not (isinstance(x, Token) and x.type == "EQ")]
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
        return ir.Range(canonical_name(c[0]), c[1], span=self.sp(meta))

    def index_target(self, meta, c):
        return ir.Index(
            ir.Name(canonical_name(c[0]), span=span_of(c[0], self.file)), c[1], span=self.sp(meta)
        )

    # expressions
    def name(self, meta, c):
        n = canonical_name(c[0])
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
        func = canonical_name(c[0])
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
        return ir.Sum(canonical_name(c[0]), c[1], c[2], c[3], span=self.sp(meta))

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


@dataclass(frozen=True)
class _Default:
    expr: ir.Expr


def _with(node, **changes):
    return dataclasses.replace(node, **changes)


def _mask_def(e: ir.Expr) -> ir.Expr:
    """`Mask[t_z, t_x] = ⟦…⟧` among call parameters defines a mask by its entries."""
    if ir.is_mask_equation(e):
        return ir.MaskDef(e.left.base.id, tuple(i.id for i in e.left.indices), e.right, span=e.span)
    return e


# ── lines → algorithms ──────────────────────────────────────────────────────────────────
_BLOCK_FIELDS = {
    "Input": "input_decls",
    "Output": "output_decls",
    "Hyperparameters": "hyper_decls",
    "Parameters": "param_decls",
}


class _Assembler:
    """Builds algorithms from the flat list of lines; reports misplaced lines."""

    def __init__(self, file: str, text: str) -> None:
        self.file, self.text = file, text
        self.diags: list[Diagnostic] = []

    def error(self, span: Span, message: str, hint: str = "") -> None:
        self.diags.append(Diagnostic(span, message, hint))

    def assemble(self, lines: list[_Line]) -> ir.Card:
        version, preamble, algos = ir.CARD_LANGUAGE_VERSION, [], []
        current: list[_Line] | None = None
        for i, line in enumerate(lines):
            if line.kind == "version":
                if i != 0:
                    self.error(line.span, "the version line must be the first line of the card")
                version = line.data["version"]
                if version != ir.CARD_LANGUAGE_VERSION:
                    self.error(
                        line.span,
                        f"card language version {version} is not supported",
                        f"this toycards reads version {ir.CARD_LANGUAGE_VERSION}",
                    )
            elif line.kind == "header":
                if line.data.get("comment"):
                    self.error(
                        line.span,
                        "a comment on the header line would be lost",
                        "put it in the /* description */ under the header",
                    )
                current = [line]
                algos.append(current)
            elif current is None:
                if line.kind == "comment":
                    preamble.append(line.data["text"])
                else:
                    self.error(
                        line.span,
                        "this line comes before any algorithm header",
                        "start with `Algorithm: OUT ← Name(inputs | parameters)`",
                    )
            else:
                current.append(line)
        if not algos and not self.diags:
            self.error(
                Span(self.file, 1, 1, 1, 2, 0, 1),
                "no algorithm in this card",
                "a card holds at least one `Algorithm: …` box",
            )
        built = [self.algorithm(a) for a in algos]
        if self.diags:
            raise ToycardsError.from_diagnostics(self.diags, {self.file: self.text})
        return ir.Card(tuple(built), version, tuple(preamble))

    def algorithm(self, lines: list[_Line]) -> ir.Algorithm:
        head = lines[0]
        blocks: dict[str, list] = {f: [] for f in _BLOCK_FIELDS.values()}
        desc: list[str] = []
        block: str | None = None
        group: tuple[_Line, list] | None = None
        steps: list[_Line] = []

        def close_group() -> None:
            nonlocal group
            if group is not None:
                g, members = group
                if not members:
                    self.error(
                        g.span,
                        "a parameter group with no declarations",
                        "indent the per-layer declarations under it",
                    )
                blocks["param_decls"].append(
                    ir.ParamGroup(
                        g.data["var"],
                        g.data["bound"],
                        g.data["prefix"],
                        tuple(members),
                        g.data["comment"],
                        span=g.span,
                    )
                )
                group = None

        for line in lines[1:]:
            k = line.kind
            if k == "desc":
                if (
                    block
                    or steps
                    or len(desc) != len([x for x in lines[1 : 1 + len(desc)] if x.kind == "desc"])
                ):
                    self.error(line.span, "a /* description */ belongs right under the algorithm header")
                desc.append(line.data["text"])
            elif k == "block":
                close_group()
                if steps:
                    self.error(
                        line.span,
                        f"the {line.data['block']} block comes after the steps",
                        "declaration blocks come before the numbered steps",
                    )
                block = _BLOCK_FIELDS[line.data["block"]]
                if line.data["comment"]:
                    self.error(
                        line.span,
                        "a comment here would be lost",
                        "put ▷ comments at the end of a declaration or step",
                    )
                if line.data["decl"] is not None:
                    blocks[block].append(line.data["decl"])
            elif k in ("decl", "group"):
                if steps or block is None:
                    self.error(
                        line.span,
                        "a declaration outside Input/Output/Hyperparameters/Parameters"
                        if not steps
                        else "a declaration among the steps",
                    )
                    continue
                if k == "group":
                    close_group()
                    if block != "param_decls":
                        self.error(
                            line.span,
                            'parameter groups (`for l ∈ [L], in "blk.{l-1}.":`) belong in the Parameters block',
                        )
                        continue
                    group = (line, [])
                elif group is not None and line.span.col > group[0].span.col:
                    group[1].append(line.data["decl"])
                else:
                    close_group()
                    blocks[block].append(line.data["decl"])
            elif k == "comment" and not steps:
                self.error(
                    line.span,
                    "a whole-line comment among declarations would be lost",
                    "put ▷ comments at the end of a declaration line",
                )
            else:
                close_group()
                steps.append(line)
        close_group()
        d = head.data
        return ir.Algorithm(
            d["name"], d["number"], d["output"], tuple(d["inputs"]), tuple(d["params"]), "\n".join(desc),
            *(tuple(blocks[f]) for f in _BLOCK_FIELDS.values()), self.steps(steps, head.span), span=head.span,
        )  # fmt: skip

    def steps(self, lines: list[_Line], head: Span) -> tuple[ir.Stmt, ...]:
        """Nest `do … end` and `if … else … end` blocks with a stack."""
        stack: list[tuple[_Line, list, list | None]] = [(None, [], None)]  # (opener, body, else-body)

        def current() -> list:
            _, body, orelse = stack[-1]
            return orelse if orelse is not None else body

        for line in lines:
            k, d = line.kind, line.data
            if k == "stmt":
                s = d["stmt"]
                current().append(_with(s, comment=d["comment"]) if d["comment"] else s)
            elif k == "comment":
                current().append(ir.Comment(d["text"], span=line.span))
            elif k in ("for_seq", "forall", "if"):
                stack.append((line, [], None))
            elif k == "else":
                opener, body, orelse = stack[-1]
                if opener is None or opener.kind != "if" or orelse is not None:
                    self.error(line.span, "`else` without a matching `if … then`")
                    continue
                stack[-1] = (opener, body, [])
                opener.data["else_comment"] = d["comment"]
            elif k == "end":
                if len(stack) == 1:
                    self.error(line.span, "`end` without a matching `for … do` or `if … then`")
                    continue
                opener, body, orelse = stack.pop()
                current().append(self._close(opener, body, orelse, d["comment"]))
        for opener, _body, _ in stack[1:]:
            self.error(opener.span, "this block is never closed", "add a line `end`")
        return tuple(
            stack[0][1]
        )  # no steps: a declaration-only algorithm (e.g. describe of an unknown architecture)

    @staticmethod
    def _close(opener: _Line, body: list, orelse: list | None, end_comment: str) -> ir.Stmt:
        d = opener.data
        if opener.kind == "for_seq":
            return ir.ForSeq(
                d["var"],
                d["start"],
                d["stop"],
                tuple(body),
                d["second"],
                d["comment"],
                end_comment,
                span=d["span"],
            )
        if opener.kind == "forall":
            return ir.ForAll(d["ranges"], tuple(body), False, d["comment"], end_comment, span=d["span"])
        return ir.If(
            d["cond"],
            tuple(body),
            tuple(orelse or ()),
            False,
            d["comment"],
            d.get("else_comment", ""),
            end_comment,
            span=d["span"],
        )
