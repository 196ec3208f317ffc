"""IR → canonical card text (the formatter), in Unicode or ASCII spelling.

Owns: the canonical layout (version line, header, description, declaration blocks with
aligned bindings and comments, numbered steps with nesting, aligned `∷` annotations) and the
precedence-aware printing of expressions, types and dimensions.
Leaves out: Markdown/LaTeX/HTML/JSON (sibling modules), terminal colour (render/terminal.py).

`parse(render_card(card)) == card` and `render_card(parse(text))` is a fixed point.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from toycards.lang import ir
from toycards.lang.names import ascii_name
from toycards.lang.scale import collector_paused

UNICODE = {
    "←": "←", "∈": "∈", "≔": "≔", "∷": "∷", "▷": "▷", "·": "·", "⊙": "⊙", "×": "×", "-": "−",
    "√": "√", "Σ": "Σ", "⟦": "⟦", "⟧": "⟧", "≤": "≤", "≥": "≥", "≠": "≠", "¬": "¬", "∧": "∧",
    "∨": "∨", "…": "…", "⊺": "⊺", "∞": "∞", "π": "π", "R": "ℝ", "N": "ℕ", "Z": "ℤ", "S": "𝕊",
    "mod": "mod",
}  # fmt: skip
ASCII = {
    "←": "<-", "∈": "in", "≔": ":=", "∷": "::", "▷": "|>", "·": "*", "⊙": ".*", "×": " x ", "-": "-",
    "√": "sqrt", "Σ": "sum", "⟦": "[|", "⟧": "|]", "≤": "<=", "≥": ">=", "≠": "!=", "¬": "not ",
    "∧": "and", "∨": "or", "…": "...", "⊺": "T", "∞": "inf", "π": "pi", "R": "R", "N": "N",
    "Z": "Z", "S": "S", "mod": "mod",
}  # fmt: skip

# precedence levels, low → high (mirrors card.lark)
OR, AND, NOT, CMP, SUM, PROD, UNARY, POWER, POSTFIX, ATOM = range(1, 11)
_BINARY_LEVEL = {"∨": OR, "∧": AND, "+": SUM, "-": SUM, "·": PROD, "⊙": PROD, "/": PROD, "mod": PROD}
_CMP = {"<", "≤", "=", "≠", "≥", ">"}
_READS_AS_TRANSPOSE = re.compile(r"(⊺|T)(?![\w\u0300-\u036f])")  # `^T` is the transpose token


def display_width(text: str) -> int:
    """Columns a string takes in a terminal (combining accents take none)."""
    return sum(0 if unicodedata.combining(ch) else 1 for ch in text)


@dataclass
class Renderer:
    ascii: bool = False

    def tok(self, t: str) -> str:
        return (ASCII if self.ascii else UNICODE)[t]

    def name(self, n: str) -> str:
        return ascii_name(n) if self.ascii else n

    def func(self, n: str) -> str:
        """An algorithm or builtin name (other renderers typeset these apart from variables)."""
        return self.name(n)

    # dimensions and types
    def dim(self, d: ir.Dim, level: int = 0) -> str:
        if isinstance(d, ir.DimName):
            return self.name(d.name)
        if isinstance(d, ir.DimNum):
            return str(d.value)
        mine = 1 if d.op in "+-" else 2
        op = {"*": self.tok("·"), "-": self.tok("-"), "+": "+", "/": "/"}[d.op]
        text = f"{self.dim(d.left, mine)}{op}{self.dim(d.right, mine + 1)}"  # left-associative
        return f"({text})" if mine < level else text

    def dims(self, dims: tuple[ir.Dim, ...]) -> str:
        return "^{" + self.tok("×").join(self.dim(d) for d in dims) + "}"

    def type(self, t: ir.Type) -> str:
        if isinstance(t, ir.IndexType):
            return f"[{self.dim(t.bound)}]"
        if isinstance(t, ir.EnumType):
            return "{" + ", ".join(t.options) + "}"
        if isinstance(t, ir.StrType):
            return self.tok("S")
        base = {
            "R": self.tok("R"),
            "N": self.tok("N"),
            "Z": self.tok("Z"),
            "B": "{0,1}",
            "P": "(0,1)",
            "V": "V",
        }[t.field]
        if t.field == "V" and len(t.dims) == 1 and isinstance(t.dims[0], ir.DimName):
            return f"V^{self.dim(t.dims[0])}"
        return base + (self.dims(t.dims) if t.dims else "")

    # expressions
    def expr(self, e: ir.Expr, level: int = 0) -> str:
        text, mine = self._expr(e)
        return f"({text})" if mine < level else text

    def _expr(self, e: ir.Expr) -> tuple[str, int]:  # noqa: C901 - one case per node kind
        if isinstance(e, ir.Name):
            return self.name(e.id), ATOM
        if isinstance(e, ir.Num):
            return e.text, ATOM
        if isinstance(e, ir.Const):
            return self.tok(e.name), ATOM
        if isinstance(e, ir.Str):
            return f'"{e.value}"', ATOM
        if isinstance(e, ir.BinOp):
            return self._binop(e)
        if isinstance(e, ir.UnOp):
            if e.op == "√":
                inner = self.expr(e.operand, ATOM if self.ascii else UNARY)
                return self.tok("√") + (
                    inner if inner.startswith("(") or not self.ascii else f"({inner})"
                ), UNARY
            return self.tok(e.op) + self.expr(
                e.operand, NOT if e.op == "¬" else UNARY
            ), NOT if e.op == "¬" else UNARY
        if isinstance(e, ir.Transpose):
            return self.expr(e.operand, POSTFIX) + "^" + self.tok("⊺"), POSTFIX
        if isinstance(e, ir.Index):
            return self.expr(e.base, POSTFIX) + "[" + ", ".join(
                self.index_item(i) for i in e.indices
            ) + "]", POSTFIX
        if isinstance(e, ir.Call):
            return self.call(e), ATOM
        if isinstance(e, ir.MaskDef):
            idx = ", ".join(self.name(i) for i in e.indices)
            return f"{self.name(e.name)}[{idx}] = {self.expr(e.body, SUM)}", CMP
        if isinstance(e, ir.Indicator):
            return self.tok("⟦") + self.expr(e.cond) + self.tok("⟧"), ATOM
        if isinstance(e, ir.Sum):
            head = f"{self.tok('Σ')}_{{{self.name(e.var)}={self.expr(e.lo)}}}^{{{self.expr(e.hi)}}}"
            return f"{head} {self.expr(e.body, PROD)}", UNARY
        if isinstance(e, ir.Concat):
            sep = ", " if e.axis == "cols" else "; "
            items = [self.expr(x) for x in e.items]
            if e.ellipsis:
                items = [items[0], self.tok("…"), items[1]]
            return "[" + sep.join(items) + "]", ATOM
        raise TypeError(f"not an expression: {e!r}")

    def _binop(self, e: ir.BinOp) -> tuple[str, int]:
        if e.op in _CMP:
            op = e.op if e.op in "<=>" else self.tok(e.op)
            return f"{self.expr(e.left, SUM)} {op} {self.expr(e.right, SUM)}", CMP
        if e.op == "^":
            left = self.expr(e.left, POSTFIX)
            if isinstance(e.left, ir.Name | ir.Const):  # `x^2`, `pi^2` would read as one name
                left = f"({left})"
            right = self.expr(e.right, ATOM)
            if _READS_AS_TRANSPOSE.match(right):  # `(x)^(T)` is a power, `(x)^T` a transpose
                right = f"({right})"
            return f"{left}^{right}", POWER
        mine = _BINARY_LEVEL[e.op]
        op = self.tok(e.op) if e.op in UNICODE else e.op
        left = self.expr(e.left, mine)
        if mine >= PROD and _open_right(e.left) and not left.startswith("("):
            left = f"({left})"  # `(Σ_i a) · b`: a Σ's body would take in `· b`
        return f"{left} {op} {self.expr(e.right, mine + 1)}", mine

    def index_item(self, i: ir.Expr | ir.Slice) -> str:
        if isinstance(i, ir.Slice):
            lo = self.expr(i.lo) if i.lo is not None else ""
            hi = self.expr(i.hi) if i.hi is not None else ""
            return f"{lo}:{hi}"
        return self.expr(i)

    def call(self, c: ir.Call) -> str:
        if c.func == "ceil" and len(c.args) == 1 and not c.has_bar and not self.ascii:
            return f"⌈{self.expr(c.args[0])}⌉"
        args = ", ".join(self.expr(a) for a in c.args)
        if not c.has_bar and not c.params:
            return f"{self.func(c.func)}({args})"
        params = ", ".join(self.expr(p, SUM if ir.is_mask_equation(p) else 0) for p in c.params)
        return f"{self.func(c.func)}({args}{' ' if args else ''}|{' ' if params else ''}{params})"


def _open_right(e: ir.Expr) -> bool:
    """Whether e, printed bare, ends in a Σ whose body would take in a following product."""
    if isinstance(e, ir.Sum):
        return True
    if isinstance(e, ir.UnOp) and e.op in ("-", "√"):
        return _open_right(e.operand)
    if isinstance(e, ir.BinOp) and e.op in _BINARY_LEVEL and _BINARY_LEVEL[e.op] >= PROD:
        return _open_right(e.right)
    return False


@collector_paused()  # the IR holds no cycles for the collector to find (lang/scale.py)
def render_card(card: ir.Card, ascii: bool = False) -> str:
    """The canonical text of a card."""
    r = Renderer(ascii)
    out = [f"toycards {card.version}"]
    out += [f"{r.tok('▷')} {c}".rstrip() for c in card.preamble]
    for algo in card.algorithms:
        out.append("")
        out += _algorithm_lines(r, algo)
    return "\n".join(out) + "\n"


def _comment(r: Renderer, text: str) -> str:
    return f"{r.tok('▷')} {text}".rstrip() if text else ""


def signature_text(r: Renderer, a: ir.Algorithm) -> str:
    """`P ← GPT2(x | θ)`: the header without `Algorithm N:`."""
    inputs = ", ".join(r.name(n) for n in a.inputs)
    params = ", ".join(r.name(n) for n in a.params)
    sig = f"{inputs} | {params}" if params else inputs
    return f"{r.name(a.output)} {r.tok('←')} {r.func(a.name)}({sig})".replace("( | ", "(| ")


def header_text(r: Renderer, a: ir.Algorithm) -> str:
    """`Algorithm 10: P ← GPT2(x | θ)`."""
    number = f" {a.number}" if a.number else ""
    return f"Algorithm{number}: {signature_text(r, a)}"


def _algorithm_lines(r: Renderer, a: ir.Algorithm) -> list[str]:
    lines = [header_text(r, a)]
    lines += [f"/* {d} */" for d in a.description.split("\n")] if a.description else []
    for title, decls in (
        ("Input", a.input_decls),
        ("Output", a.output_decls),
        ("Hyperparameters", a.hyper_decls),
        ("Parameters", a.param_decls),
        ("State", a.state_decls),
    ):
        if decls:
            lines += _block_lines(r, title, decls)
    lines += step_lines(r, a.body)
    return lines


def decl_parts(r: Renderer, d: ir.Decl) -> tuple[str, str, str]:
    """(`names ∈ type = value`, binding, `▷ comment`) of a declaration."""
    lhs = ", ".join(r.name(n) for n in d.names) + f" {r.tok('∈')} {r.type(d.type)}"
    if d.value is not None:
        lhs += f" = {r.expr(d.value)}"
    return lhs, binding_text(r, d.binding), _comment(r, d.comment)


def source_text(r: Renderer, s: ir.Source) -> str:
    """`"name"`, `"name"^⊺`, `"name"[lo:hi]` or a constant fallback."""
    if s.const:
        return s.const
    if s.rows is not None:
        return f'"{s.tensor}"[{r.dim(s.rows[0])}:{r.dim(s.rows[1])}]'
    return f'"{s.tensor}"' + ("^" + r.tok("⊺") if s.transpose else "")


def binding_text(r: Renderer, b: ir.Binding | None) -> str:
    """`from "a" or "b", "c" default 1e-5`, `≔ d_e / H`, or "" when unbound."""
    if b is None:
        return ""
    if b.kind == "derived":
        return f"{r.tok('≔')} {r.expr(b.expr)}"
    if b.kind == "default":
        return f"default {r.expr(b.default)}"
    alts = [" or ".join(source_text(r, s) for s in group) for group in b.sources]
    text = "from " + ", ".join(alts)
    if b.default is not None:
        text += f" default {r.expr(b.default)}"
    return text


def _columns(rows: list[tuple[str, str, str, str]]) -> list[str]:
    """Lay out (indent, lhs, binding, comment) rows with aligned binding and comment columns."""
    w_lhs = max((display_width(i + l) for i, l, b, _ in rows if b), default=0)
    w_mid = max(
        (display_width(i + l) + (2 + display_width(b) if b else 0) for i, l, b, c in rows if c), default=0
    )
    out = []
    for indent, lhs, binding, comment in rows:
        text = indent + lhs
        if binding:
            text += " " * (w_lhs - display_width(text) + 2) + binding
        if comment:
            text += " " * max(w_mid - display_width(text) + 2, 2) + comment
        out.append(text)
    return out


def _block_lines(r: Renderer, title: str, decls: tuple) -> list[str]:
    if len(decls) == 1 and isinstance(decls[0], ir.Decl):
        lhs, b, c = decl_parts(r, decls[0])
        return _columns([(f"{title}: ", lhs, b, c)])
    rows: list[tuple[str, str, str, str]] = []
    heads: dict[int, str] = {}
    for d in decls:
        if isinstance(d, ir.ParamGroup):
            cond = f", if {r.expr(d.cond)}" if d.cond is not None else ""
            heads[len(rows)] = (
                f'  for {r.name(d.var)} {r.tok("∈")} [{r.dim(d.bound)}], in "{d.prefix}"{cond}:'
                + (f"  {_comment(r, d.comment)}" if d.comment else "")
            )
            rows += [("    ", *decl_parts(r, m)) for m in d.decls]
        else:
            rows.append(("  ", *decl_parts(r, d)))
    body = _columns(rows)
    out = [f"{title}:"]
    for i, line in enumerate(body):
        if i in heads:
            out.append(heads[i])
        out.append(line)
    return out


# ── steps ───────────────────────────────────────────────────────────────────────────────
def stmt_text(r: Renderer, s: ir.Stmt) -> tuple[str, ir.Type | None]:
    """One-line text of a simple or inline statement, and its annotation."""
    if isinstance(s, ir.Assign):
        target = r.expr(s.target)
        return f"{target} {r.tok('←')} {r.expr(s.value)}", s.annot
    if isinstance(s, ir.Return):
        unnamed_equation = (
            not s.name
            and isinstance(s.value, ir.BinOp)
            and s.value.op == "="
            and isinstance(s.value.left, ir.Name)
        )
        value = r.expr(s.value, SUM if s.name or unnamed_equation else 0)  # `return (a = b)` is not named
        return (f"return {r.name(s.name)} = {value}" if s.name else f"return {value}"), s.annot
    if isinstance(s, ir.ForAll):
        ranges = ", ".join(f"{r.name(x.var)} {r.tok('∈')} [{r.dim(x.bound)}]" for x in s.ranges)
        inner, annot = stmt_text(r, s.body[0])
        return f"for {ranges}: {inner}", annot
    if isinstance(s, ir.If):
        inner, annot = stmt_text(r, s.then[0])
        return f"if {r.expr(s.cond)} then {inner}", annot
    raise TypeError(f"not a one-line statement: {s!r}")


def _inner_comment(s: ir.Stmt) -> str:
    if isinstance(s, ir.ForAll | ir.If) and s.inline:
        inner = s.body[0] if isinstance(s, ir.ForAll) else s.then[0]
        return s.comment or _inner_comment(inner)
    return getattr(s, "comment", "")


def step_rows(r: Renderer, body: tuple[ir.Stmt, ...], depth: int, out: list) -> None:
    """Append rows (numbered?, indent, text, annotation, comment) for a block of steps to `out`."""
    pad = "  " * depth
    for s in body:
        if isinstance(s, ir.Comment):
            out.append((False, pad, f"{r.tok('▷')} {s.text}".rstrip(), None, ""))  # even when empty
        elif isinstance(s, ir.ForSeq):
            second = f"{r.expr(s.second)}, " if s.second is not None else ""
            head = f"for {r.name(s.var)} = {r.expr(s.start)}, {second}{r.tok('…')}, {r.expr(s.stop)} do"
            out.append((True, pad, head, None, s.comment))
            step_rows(r, s.body, depth + 1, out)
            out.append((True, pad, "end", None, s.end_comment))
        elif isinstance(s, ir.ForAll) and not s.inline:
            ranges = ", ".join(f"{r.name(x.var)} {r.tok('∈')} [{r.dim(x.bound)}]" for x in s.ranges)
            out.append((True, pad, f"for {ranges} do", None, s.comment))
            step_rows(r, s.body, depth + 1, out)
            out.append((True, pad, "end", None, s.end_comment))
        elif isinstance(s, ir.If) and not s.inline:
            out.append((True, pad, f"if {r.expr(s.cond)} then", None, s.comment))
            step_rows(r, s.then, depth + 1, out)
            if s.orelse or s.else_comment:  # an empty `else ▷ note` keeps its note
                out.append((True, pad, "else", None, s.else_comment))
                step_rows(r, s.orelse, depth + 1, out)
            out.append((True, pad, "end", None, s.end_comment))
        else:
            text, annot = stmt_text(r, s)
            out.append((True, pad, text, annot, _inner_comment(s)))


def step_lines(r: Renderer, body: tuple[ir.Stmt, ...]) -> list[str]:
    """The numbered, indented step lines with aligned `∷` annotations and `▷` comments."""
    rows: list = []
    step_rows(r, body, 0, rows)
    n_steps = sum(1 for numbered, *_ in rows if numbered)
    width = len(str(n_steps))
    annot_col = min(
        max((display_width(p + t) for numbered, p, t, a, _ in rows if a is not None), default=0), 72
    )
    lines, n = [], 0
    for numbered, pad, text, annot, comment in rows:
        if numbered:
            n += 1
            prefix = f"{n:>{width}}  "
        else:
            prefix = " " * (width + 2)
        line = prefix + pad + text
        if annot is not None:
            line += " " * max(annot_col - display_width(pad + text), 0) + f"  {r.tok('∷')} {r.type(annot)}"
        if comment:
            line += "  " + _comment(r, comment)
        lines.append(line)
    return lines


ir.CANONICAL_PRINTER[0] = render_card  # str(card) is the canonical text
