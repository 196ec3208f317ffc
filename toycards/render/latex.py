"""IR → LaTeX algorithm boxes typeset like the paper's (`algorithm` + `algpseudocode`).

Owns: the LaTeX spelling of names (`γ_l^1` → `\\gamma_{l}^{1}`, `X̃` → `\\tilde{X}`, `d_mlp` →
`d_{\\mathrm{mlp}}`), of types (`\\mathbb{R}^{d_{e} \\times \\ell}`), of expressions (`\\leftarrow`,
`\\cdot`, `\\odot`, `^\\top`, `\\sqrt{…}`, `\\sum_{i=1}^{n}`, `[\\![ … ]\\!]`), of steps (`\\State`,
`\\For{…}`/`\\EndFor`, `\\If`/`\\Else`/`\\EndIf`, `\\Return`, `\\Comment{…}`) and of prose (escaped
text, Unicode symbols as `\\ensuremath{…}`); a standalone document on request.
Leaves out: precedence and layout decisions, which it inherits from the card printer
(`lang/printer.py`), so the LaTeX box says exactly what the card says.

>>> latex_name("γ_l^1"), latex_name("W_qkv^l"), latex_name("X̃"), latex_name("ℓ_max")
('\\\\gamma_{l}^{1}', 'W_{\\\\mathrm{qkv}}^{l}', '\\\\tilde{X}', '\\\\ell_{\\\\mathrm{max}}')
"""

from __future__ import annotations

import re
import unicodedata

from toycards.lang import ir
from toycards.lang.names import split_name
from toycards.lang.printer import ATOM, POSTFIX, POWER, Renderer

_GREEK = {
    "α": "alpha", "β": "beta", "γ": "gamma", "δ": "delta", "ε": "varepsilon", "ϵ": "epsilon",
    "ζ": "zeta", "η": "eta", "θ": "theta", "ϑ": "vartheta", "ι": "iota", "κ": "kappa",
    "λ": "lambda", "μ": "mu", "ν": "nu", "ξ": "xi", "ο": "omicron", "π": "pi", "ρ": "rho",
    "σ": "sigma", "ς": "varsigma", "τ": "tau", "υ": "upsilon", "φ": "phi", "ϕ": "phi",
    "χ": "chi", "ψ": "psi", "ω": "omega", "Γ": "Gamma", "Δ": "Delta", "Θ": "Theta",
    "Λ": "Lambda", "Ξ": "Xi", "Π": "Pi", "Σ": "Sigma", "Υ": "Upsilon", "Φ": "Phi", "Ψ": "Psi",
    "Ω": "Omega", "ℓ": "ell",
}  # fmt: skip
_ACCENT = {"\u0303": "tilde", "\u0302": "hat", "\u0304": "bar", "\u0307": "dot", "\u0301": "acute"}
# Math symbols that may appear in names' braced indices and in comments.
_SYMBOLS = {
    "←": r"\leftarrow", "∈": r"\in", "≔": r"\coloneqq", "∷": "::", "▷": r"\triangleright",
    "·": r"\cdot", "⊙": r"\odot", "×": r"\times", "−": "-", "√": r"\surd", "Σ": r"\Sigma",
    "⟦": r"[\![", "⟧": r"]\!]", "≤": r"\le", "≥": r"\ge", "≠": r"\ne", "¬": r"\neg", "∧": r"\wedge",
    "∨": r"\vee", "…": r"\dots", "⊺": r"\top", "∞": r"\infty", "ℝ": r"\mathbb{R}",
    "ℕ": r"\mathbb{N}", "ℤ": r"\mathbb{Z}", "𝕊": r"\mathbb{S}", "⌈": r"\lceil", "⌉": r"\rceil",
    "→": r"\to", "≈": r"\approx", "±": r"\pm", "∑": r"\sum", "∏": r"\prod", "⊗": r"\otimes",
    "∘": r"\circ", "‖": r"\|", "⟨": r"\langle", "⟩": r"\rangle", "°": r"^\circ",
}  # fmt: skip
_TOKENS = {
    "←": r"\leftarrow", "∈": r"\in", "≔": r"\coloneqq", "∷": "::", "▷": r"\triangleright",
    "·": r"\cdot ", "⊙": r"\odot", "×": r"\times", "-": "-", "√": r"\sqrt", "Σ": r"\sum",
    "⟦": r"[\![", "⟧": r"]\!]", "≤": r"\le", "≥": r"\ge", "≠": r"\ne", "¬": r"\neg ",
    "∧": r"\wedge", "∨": r"\vee", "…": r"\dots", "⊺": r"\top", "∞": r"\infty", "π": r"\pi",
    "R": r"\mathbb{R}", "N": r"\mathbb{N}", "Z": r"\mathbb{Z}", "S": r"\mathbb{S}", "mod": r"\bmod",
}  # fmt: skip
_TEXT_ESCAPES = {
    "\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&", "#": r"\#",
    "_": r"\_", "%": r"\%", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
    "<": r"\ensuremath{<}", ">": r"\ensuremath{>}", "|": r"\ensuremath{|}", '"': r"\texttt{\char34}",
}  # fmt: skip
_RUN = re.compile(r"[A-Za-z0-9\u0370-\u03ff\u2113\u0300-\u036f]+")
_WORD = re.compile(r"[^\W\d_][\w\u0300-\u036f]*")


# ── names ───────────────────────────────────────────────────────────────────────────────
def _atoms(run: str) -> list[str]:
    """`X̃` → [`\\tilde{X}`]; `ℓ` → [`\\ell`]; `qkv` → [`q`, `k`, `v`]: one per letter."""
    atoms: list[str] = []
    for ch in unicodedata.normalize("NFD", run):
        if ch in _ACCENT and atoms:
            atoms[-1] = f"\\{_ACCENT[ch]}{{{atoms[-1]}}}"
        elif ch in _GREEK:
            atoms.append("\\" + _GREEK[ch])
        elif ch.isascii() and ch.isalnum():
            atoms.append(ch)
        else:
            atoms.append(_SYMBOLS.get(ch, rf"\text{{{_text(ch)}}}"))
    return atoms


def _run(run: str) -> str:
    """One run of letters: `qkv` → `\\mathrm{qkv}`, `γ` → `\\gamma`, `e1` → `e1`, `β1` → `{\\beta}1`."""
    atoms = _atoms(run)
    if len(atoms) == 1:
        return atoms[0]
    if all(len(a) == 1 and a.isascii() for a in atoms) and sum(a.isalpha() for a in atoms) > 1:
        return rf"\mathrm{{{''.join(atoms)}}}"
    return "".join(a if len(a) == 1 else "{" + a + "}" for a in atoms)


def _index(text: str) -> str:
    """A sub/superscript: a run (`l`, `qkv`) or an expression (`⌈h·H_kv/H⌉`, `l-1`)."""
    if _RUN.fullmatch(text):
        return _run(text)
    out = []
    for piece in re.split(r"([^\W\d_][\w\u0300-\u036f]*)", text):
        if _WORD.fullmatch(piece):
            out.append(latex_name(piece))
        else:
            out.append("".join(_SYMBOLS.get(c, c) + (" " if c in _SYMBOLS else "") for c in piece))
    return "".join(out).strip()


def latex_name(name: str) -> str:
    """A variable's name in math mode (see the module docstring)."""
    name = unicodedata.normalize("NFD", name)
    base, sub, sup = split_name(name)
    if base == name and "_" in name[1:]:  # `e_ℓ_x`: the subscript is itself subscripted
        head, rest = name.split("_", 1)
        return f"{latex_name(head)}_{{{latex_name(rest)}}}"
    if not _RUN.fullmatch(base):
        return rf"\mathrm{{{_text(name)}}}"
    out = _run(base)
    if sub:
        out += f"_{{{_index(sub)}}}"
    if sup:
        out += f"^{{{_index(sup)}}}"
    return out


def latex_func(name: str) -> str:
    """An algorithm's name: upright, underscores kept (`\\mathrm{layer\\_norm}`)."""
    return rf"\mathrm{{{_text(name)}}}"


# ── prose ───────────────────────────────────────────────────────────────────────────────
def _text(s: str) -> str:
    """Text-mode escaping of ASCII specials; other non-ASCII characters become math symbols."""
    out = []
    for ch in s:
        if ch in _TEXT_ESCAPES:
            out.append(_TEXT_ESCAPES[ch])
        elif ch.isascii():
            out.append(ch)
        elif ch in _GREEK or ch in _SYMBOLS:
            symbol = "\\" + _GREEK[ch] if ch in _GREEK else _SYMBOLS[ch]
            out.append(rf"\ensuremath{{{symbol}}}")
        elif unicodedata.category(ch) == "Mn":
            out.append("")  # accents: kept on names (latex_name), dropped in prose
        elif unicodedata.category(ch).startswith("L"):
            out.append(unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode() or "?")
        else:
            out.append("?")
    return "".join(out)


def latex_prose(s: str) -> str:
    """Text-mode LaTeX that pdflatex reads for any text, not only a card's (a header value of
    describe): ASCII specials escaped, Greek letters and symbols in math, accents dropped, any
    other character `?`.

    >>> print(latex_prose("Café 50% × θ 中"))
    Cafe 50\\% \\ensuremath{\\times} \\ensuremath{\\theta} ?
    """
    return _text(s)


def latex_text(s: str) -> str:
    """Prose (comments, descriptions): names with accents or Greek keep their math form."""
    pieces = re.split(r"([^\W\d_][\w\u0300-\u036f]*(?:[_^][\w\u0300-\u036f]+)*)", s)
    return "".join(
        rf"\ensuremath{{{latex_name(p)}}}" if i % 2 and not p.isascii() else _text(p)
        for i, p in enumerate(pieces)
    )


# ── expressions and types ───────────────────────────────────────────────────────────────
class Latex(Renderer):
    """The card printer in LaTeX math spelling."""

    def tok(self, t: str) -> str:
        return _TOKENS[t]

    def name(self, n: str) -> str:
        return latex_name(n)

    def func(self, n: str) -> str:
        return latex_func(n)

    def dims(self, dims: tuple[ir.Dim, ...]) -> str:
        return "^{" + r" \times ".join(self.dim(d) for d in dims) + "}"

    def type(self, t: ir.Type) -> str:
        if isinstance(t, ir.EnumType):
            return r"\{" + ", ".join(rf"\mathrm{{{_text(o)}}}" for o in t.options) + r"\}"
        if isinstance(t, ir.TensorType) and t.field in "BV":
            return (r"\{0,1\}" if t.field == "B" else "V") + (self.dims(t.dims) if t.dims else "")
        return super().type(t)

    def _expr(self, e: ir.Expr) -> tuple[str, int]:
        if isinstance(e, ir.Num):
            return _number(e.text), ATOM
        if isinstance(e, ir.Str):
            return rf"\text{{``{_text(e.value)}''}}", ATOM
        if isinstance(e, ir.UnOp) and e.op == "√":
            return rf"\sqrt{{{self.expr(e.operand)}}}", ATOM
        if isinstance(e, ir.Transpose):
            return f"{{{self.expr(e.operand, POSTFIX)}}}^\\top", POSTFIX
        if isinstance(e, ir.Call) and e.func == "ceil" and len(e.args) == 1 and not e.has_bar:
            return rf"\lceil {self.expr(e.args[0])} \rceil", ATOM
        return super()._expr(e)

    def _binop(self, e: ir.BinOp) -> tuple[str, int]:
        if e.op == "^":
            left = self.expr(e.left, POSTFIX)
            if isinstance(e.left, ir.Name) and split_name(e.left.id)[2]:
                left = f"({left})"  # (W^l)^{2}
            return f"{{{left}}}^{{{self.expr(e.right)}}}", POWER
        return super()._binop(e)

    def call(self, c: ir.Call) -> str:
        args = ", ".join(self.expr(a) for a in c.args)
        if not c.has_bar and not c.params:
            return f"{self.func(c.func)}({args})"
        params = ", ".join(self.expr(p) for p in c.params)
        return f"{self.func(c.func)}({args}{' ' if args else ''}\\mid{' ' if params else ''}{params})"


def _number(text: str) -> str:
    """`1e-5` → `10^{-5}`, `2.5e3` → `2.5 \\cdot 10^{3}`, `0.5` → `0.5`."""
    mantissa, _, exponent = text.lower().partition("e")
    if not exponent:
        return text
    power = f"10^{{{int(exponent)}}}"
    return power if mantissa == "1" else rf"{mantissa} \cdot {power}"


_R = Latex()

# ── the algorithm box ───────────────────────────────────────────────────────────────────
PREAMBLE = r"""\documentclass{article}
\usepackage[utf8]{inputenc}
\usepackage{amsmath,amssymb,mathtools}
\usepackage{algorithm}
\usepackage{algpseudocode}
\begin{document}
"""


def render_latex(card: ir.Card, standalone: bool = False) -> str:
    """LaTeX for the card's algorithm boxes; a complete document when `standalone`."""
    out = [f"% {_comment_line(c)}" for c in card.preamble]
    for algo in card.algorithms:
        out += _algorithm(algo)
    body = "\n".join(out) + "\n"
    return document(body) if standalone else body


def document(body: str) -> str:
    """`body` (LaTeX ending in a newline) as a complete document in the preamble cards are typeset
    with: what `toycards render` and `toycards describe --format latex` write."""
    return PREAMBLE + body + "\\end{document}\n"


def _comment_line(text: str) -> str:
    return text.replace("\n", " ")


def _signature(a: ir.Algorithm) -> str:
    inputs = ", ".join(_R.name(n) for n in a.inputs)
    params = ", ".join(_R.name(n) for n in a.params)
    sig = f"{inputs} \\mid {params}" if params else inputs
    return f"${_R.name(a.output)} \\leftarrow {_R.func(a.name)}({sig})$"


def _algorithm(a: ir.Algorithm) -> list[str]:
    out = ["\\begin{algorithm}[H]"]
    if a.number:
        out.append(f"\\renewcommand{{\\thealgorithm}}{{{_text(a.number)}}}")
    out += [f"\\caption{{{_signature(a)}}}", "\\begin{algorithmic}[1]"]
    out += [f"\\Statex \\textit{{{latex_text(d)}}}" for d in a.description.split("\n") if d]
    out += _block("Input", a.input_decls) + _block("Output", a.output_decls)
    out += _block("Hyperparameters", a.hyper_decls) + _block("Parameters", a.param_decls)
    out += _block("State", a.state_decls)
    out += _steps(a.body)
    return [*out, "\\end{algorithmic}", "\\end{algorithm}", ""]


def _block(title: str, items: tuple) -> list[str]:
    if not items:
        return []
    indent = "\\hspace*{\\algorithmicindent}"
    if len(items) == 1 and isinstance(items[0], ir.Decl):
        return [f"\\Statex \\textbf{{{title}:}} {_decl(items[0])}"]
    out = [f"\\Statex \\textbf{{{title}:}}"]
    for item in items:
        if isinstance(item, ir.ParamGroup):
            head = f"\\textbf{{for}} ${_R.name(item.var)} \\in [{_R.dim(item.bound)}]$, in \\texttt{{{_text(item.prefix)}}}:"
            out.append(f"\\Statex {indent}{head}{_note(item.comment)}")
            out += [f"\\Statex {indent}{indent}{_decl(d)}" for d in item.decls]
        else:
            out.append(f"\\Statex {indent}{_decl(item)}")
    return out


def _decl(d: ir.Decl) -> str:
    lhs = ", ".join(_R.name(n) for n in d.names) + f" \\in {_R.type(d.type)}"
    if d.value is not None:
        lhs += f" = {_R.expr(d.value)}"
    return f"${lhs}${_binding(d.binding)}{_note(d.comment)}"


def _binding(b: ir.Binding | None) -> str:
    if b is None:
        return ""
    if b.kind == "derived":
        return f" ${{}} \\coloneqq {_R.expr(b.expr)}$"
    if b.kind == "default":
        return f" \\quad{{\\small default ${_R.expr(b.default)}$}}"
    alts = [" or ".join(_source(s) for s in group) for group in b.sources]
    text = " \\quad{\\small from " + ", ".join(alts)
    if b.default is not None:
        text += f" default ${_R.expr(b.default)}$"
    return text + "}"


def _source(s: ir.Source) -> str:
    if s.const:
        return f"${_text(s.const)}$"
    if s.rows is not None:
        return f"\\texttt{{{_text(s.tensor)}}}$[{_R.dim(s.rows[0])}:{_R.dim(s.rows[1])}]$"
    return f"\\texttt{{{_text(s.tensor)}}}" + ("$^\\top$" if s.transpose else "")


def _note(comment: str) -> str:
    return f" \\hfill {{\\small $\\triangleright$ {latex_text(comment)}}}" if comment else ""


# ── steps ───────────────────────────────────────────────────────────────────────────────
def _steps(body: tuple[ir.Stmt, ...]) -> list[str]:
    out: list[str] = []
    for s in body:
        out += _step(s)
    return out


def _step(s: ir.Stmt) -> list[str]:
    if isinstance(s, ir.Comment):
        return [f"\\Statex $\\triangleright$ {latex_text(s.text)}"]
    if isinstance(s, ir.ForSeq):
        second = f"{_R.expr(s.second)}, " if s.second is not None else ""
        head = f"{_R.name(s.var)} = {_R.expr(s.start)}, {second}\\dots, {_R.expr(s.stop)}"
        return [
            f"\\For{{${head}$}}{_comment(None, s.comment)}",
            *_steps(s.body),
            "\\EndFor" + _comment(None, s.end_comment),
        ]
    if isinstance(s, ir.ForAll) and not s.inline:
        return [
            f"\\For{{${_ranges(s.ranges)}$}}{_comment(None, s.comment)}",
            *_steps(s.body),
            "\\EndFor" + _comment(None, s.end_comment),
        ]
    if isinstance(s, ir.If) and not s.inline:
        out = [f"\\If{{${_R.expr(s.cond)}$}}{_comment(None, s.comment)}", *_steps(s.then)]
        if s.orelse or s.else_comment:
            out += ["\\Else" + _comment(None, s.else_comment), *_steps(s.orelse)]
        return [*out, "\\EndIf" + _comment(None, s.end_comment)]
    text, annot = _simple(s)
    comment = s.comment or _inner_comment(s)
    return [f"\\State {text}{_comment(annot, comment)}"]


def _ranges(ranges: tuple[ir.Range, ...]) -> str:
    return ", ".join(f"{_R.name(r.var)} \\in [{_R.dim(r.bound)}]" for r in ranges)


def _simple(s: ir.Stmt) -> tuple[str, ir.Type | None]:
    """`$X \\leftarrow …$`, `\\Return $…$`, `\\textbf{for} $t \\in [\\ell]$: $…$`, and the annotation."""
    if isinstance(s, ir.Assign):
        return f"${_R.expr(s.target)} \\leftarrow {_R.expr(s.value)}$", s.annot
    if isinstance(s, ir.Return):
        value = f"{_R.name(s.name)} = {_R.expr(s.value)}" if s.name else _R.expr(s.value)
        return f"\\Return ${value}$", s.annot
    if isinstance(s, ir.ForAll):
        inner, annot = _simple(s.body[0])
        return f"\\textbf{{for}} ${_ranges(s.ranges)}$: {inner}", annot
    if isinstance(s, ir.If):
        inner, annot = _simple(s.then[0])
        return f"\\textbf{{if}} ${_R.expr(s.cond)}$ \\textbf{{then}} {inner}", annot
    raise TypeError(f"not a one-line statement: {s!r}")


def _inner_comment(s: ir.Stmt) -> str:
    inner = s.body[0] if isinstance(s, ir.ForAll) else s.then[0] if isinstance(s, ir.If) else None
    return getattr(inner, "comment", "") if inner is not None else ""


def _comment(annot: ir.Type | None, comment: str) -> str:
    parts = ([f"$\\in {_R.type(annot)}$"] if annot is not None else []) + (
        [latex_text(comment)] if comment else []
    )
    return f" \\Comment{{{'; '.join(parts)}}}" if parts else ""
