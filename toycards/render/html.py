"""IR → HTML: one boxed algorithm per section, everything escaped; a standalone page on request.

Owns: the page (inline CSS, no scripts, no external resources; `page`, which describe's HTML
uses too, with the style of its header table, notice and problems), headings, declaration tables
with bindings, the numbered steps with indentation, `∷` annotations and `▷` comments, and
names typeset with sub- and superscripts (`γ_l^1` → γ<sub>l</sub><sup>1</sup>).
Leaves out: the card notation (lang/printer.py supplies every expression and step row), the
diagram that `render_html(…, diagram=True)` adds (render/diagram.py, which escapes its own SVG).

Names are marked while lang/printer.py prints (private-use characters around each name), then the
whole text is HTML-escaped and the marks become markup, so no card text reaches the page
unescaped:

>>> _h(Html().expr(ir.BinOp("<", ir.Call("f", (ir.Name("γ_l^1"),)), ir.Str("<b>"))))
'<i>f</i>(<var>γ</var><sub>l</sub><sup>1</sup>) &lt; &quot;&lt;b&gt;&quot;'
"""

from __future__ import annotations

import html
import re

from toycards.lang import ir
from toycards.lang.names import split_name
from toycards.lang.printer import Renderer, decl_parts, header_text, step_rows

# Private-use marks: around a variable name, around a function name, around a superscript.
_OPEN, _CLOSE, _FN, _END_FN, _SUP, _END_SUP = (chr(0xE000 + i) for i in range(6))
_MARKS = "".join(chr(0xE000 + i) for i in range(6))
_MARKED = re.compile(f"{_OPEN}([^{_MARKS}]*){_CLOSE}")
_TAGS = {_FN: "<i>", _END_FN: "</i>", _SUP: "<sup>", _END_SUP: "</sup>"}


class Html(Renderer):
    """The card printer with names and dimension superscripts marked for markup."""

    def name(self, n: str) -> str:
        return f"{_OPEN}{n}{_CLOSE}"

    def func(self, n: str) -> str:
        return f"{_FN}{n}{_END_FN}"

    def dims(self, dims: tuple[ir.Dim, ...]) -> str:
        return _SUP + "×".join(self.dim(d) for d in dims) + _END_SUP

    def type(self, t: ir.Type) -> str:
        if isinstance(t, ir.TensorType) and t.field == "V":
            return "V" + self.dims(t.dims)
        return super().type(t)


def _name_markup(escaped: str) -> str:
    base, sub, sup = split_name(html.unescape(escaped))
    out = f"<var>{html.escape(base)}</var>"
    out += f"<sub>{html.escape(sub)}</sub>" if sub else ""
    return out + (f"<sup>{html.escape(sup)}</sup>" if sup else "")


def _markup(escaped: str) -> str:
    """Turn the marks in already-escaped text into markup; marks in the card's own text are dropped."""
    text = _MARKED.sub(lambda m: _name_markup(m.group(1)), escaped)
    for mark, tag in _TAGS.items():
        text = text.replace(mark, tag)
    return text.replace(_OPEN, "").replace(_CLOSE, "")


def _h(text: str) -> str:
    """Escape card text that may hold marked names."""
    return _markup(html.escape(text))


def _p(text: str) -> str:
    """Escape prose (comments, descriptions): no names are marked there."""
    return html.escape(text.translate({ord(m): None for m in _MARKS}))


_R = Html()

_CSS = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; line-height: 1.4; }
section.algorithm { border-top: 2px solid #222; border-bottom: 2px solid #222; margin: 2rem 0;
  padding: 0.5rem 0; }
h2 { font-size: 1.1rem; margin: 0 0 0.5rem; }
code, .steps td { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; }
var { font-style: italic; }
table { border-collapse: collapse; margin: 0.5rem 0; }
th, td { text-align: left; padding: 0.1rem 0.6rem; vertical-align: top; }
table.decls th { border-bottom: 1px solid #888; }
.steps td.n { color: #888; text-align: right; }
.steps td.annot { color: #555; }
.comment { color: #2a7a2a; }
.group td { font-style: italic; padding-top: 0.4rem; }
h1 { font-size: 1.4rem; }
table.header th { text-align: right; color: #555; font-weight: normal; }
.notice { color: #8a5a00; }
.problems .error { color: #b00020; }
.problems .warning { color: #8a5a00; }
section.diagram { overflow-x: auto; }
""".strip()


def render_html(
    card: ir.Card,
    standalone: bool = False,
    title: str | None = None,
    diagram: bool = False,
    layout: str = "python",
) -> str:
    """The card's sections; a complete page (with its style sheet) when `standalone`; with
    `diagram`, the inline SVG of render/diagram.py after them, placed by `layout` (its engine)."""
    body: list[str] = []
    if card.preamble:
        body.append(f'<p class="comment">{_p(" ".join(card.preamble))}</p>')
    for algo in card.algorithms:
        body += _algorithm(algo)
    if diagram:
        from toycards.render.diagram import diagram_html

        body.append(diagram_html(card, layout).rstrip("\n"))
    if not standalone:
        return "\n".join([*body, ""])
    return page(title or (card.main.name if card.algorithms else "card"), body)


def page(title: str, body: list[str], style: str = "") -> str:
    """A complete page of `body` (lines of markup) under `title` (plain text, escaped here), with
    the style sheet: what `toycards render` and `toycards describe --format html` write; `style`,
    more CSS of the page's own, in a second sheet after it (the describe report's layout)."""
    head = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        '<head><meta charset="utf-8">',
        f"<title>{_p(title)}</title>",
    ]
    head.append(f"<style>\n{_CSS}\n</style>")
    if style:
        head.append(f"<style>\n{style}\n</style>")
    head += ["</head>", "<body>"]
    return "\n".join([*head, *body, "</body>", "</html>", ""])


def _algorithm(a: ir.Algorithm) -> list[str]:
    out = [f'<section class="algorithm" id="{_p(_anchor(a.name))}">', f"<h2>{_h(header_text(_R, a))}</h2>"]
    if a.description:
        out.append(f"<p>{_p(' '.join(a.description.split(chr(10))))}</p>")
    for title, decls in (("Input", a.input_decls), ("Output", a.output_decls)):
        for d in decls:
            lhs, binding, _ = decl_parts(_R, d)
            extra = f" <code>{_h(binding)}</code>" if binding else ""
            note = f' <span class="comment">{_p(d.comment)}</span>' if d.comment else ""
            out.append(f"<p><b>{title}:</b> {_h(lhs)}{extra}{note}</p>")
    if a.hyper_decls:
        out += ["<p><b>Hyperparameters:</b></p>", *_decl_table(a.hyper_decls)]
    if a.param_decls:
        out += ["<p><b>Parameters:</b></p>", *_decl_table(a.param_decls)]
    if a.state_decls:
        out += ["<p><b>State:</b></p>", *_decl_table(a.state_decls)]
    out += _steps(a.body)
    out.append("</section>")
    return out


def _anchor(name: str) -> str:
    return "alg-" + re.sub(r"[^\w-]", "_", name)


def _decl_table(items: tuple[ir.Decl | ir.ParamGroup, ...]) -> list[str]:
    out = ['<table class="decls">', "<tr><th>declaration</th><th>binding</th><th>note</th></tr>"]
    for item in items:
        if isinstance(item, ir.ParamGroup):
            head = f"for {_R.name(item.var)} ∈ [{_R.dim(item.bound)}], in “{item.prefix}”:"
            note = f' <span class="comment">{_p(item.comment)}</span>' if item.comment else ""
            out.append(f'<tr class="group"><td colspan="3">{_h(head)}{note}</td></tr>')
            out += [_decl_row(d, indent=True) for d in item.decls]
        else:
            out.append(_decl_row(item))
    return [*out, "</table>"]


def _decl_row(d: ir.Decl, indent: bool = False) -> str:
    lhs, binding, _ = decl_parts(_R, d)
    style = ' style="padding-left: 2rem"' if indent else ""
    return (
        f"<tr><td{style}>{_h(lhs)}</td><td><code>{_h(binding)}</code></td>"
        f'<td class="comment">{_p(d.comment)}</td></tr>'
    )


def _steps(body: tuple[ir.Stmt, ...]) -> list[str]:
    rows: list = []
    step_rows(_R, body, 0, rows)
    out, n = ['<table class="steps">'], 0
    for numbered, pad, text, annot, comment in rows:
        n += numbered
        number = str(n) if numbered else ""
        indent = f' style="padding-left: {len(pad) * 0.6 + 0.6:.1f}rem"' if pad else ""
        cls = ' class="comment"' if not numbered else ""
        annot_text = f"∷ {_R.type(annot)}" if annot is not None else ""
        out.append(
            f'<tr><td class="n">{number}</td><td{indent}{cls}>{_h(text)}</td>'
            f'<td class="annot">{_h(annot_text)}</td><td class="comment">{_p(comment)}</td></tr>'
        )
    return [*out, "</table>"]
