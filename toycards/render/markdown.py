"""IR → Markdown that reads well on GitHub: one section per algorithm box.

Owns: the Markdown layout: a heading with the algorithm's signature, its description, Input
and Output lines, tables of hyperparameters and parameters with their bindings (one table per
per-layer group, with the tensor-name prefix), and the numbered steps as a fenced block in
the card's own notation. Expressions, types and steps come from `lang/printer.py`, so the
Markdown shows exactly what the card says.
Leaves out: the card notation itself (lang/printer.py), other formats (sibling modules).

>>> from toycards.lang.parse import parse
>>> md = render_markdown(parse("Algorithm 1: e ← token_embedding(v | W_e)\\n"
...     "Input: v ∈ [N_V]\\nParameters: W_e ∈ ℝ^{d_e×N_V}\\n1 return e = W_e[:, v]\\n"))
>>> print(md.splitlines()[0])
## Algorithm 1: `e ← token_embedding(v | W_e)`
"""

from __future__ import annotations

from toycards.lang import ir
from toycards.lang.printer import Renderer, binding_text, decl_parts, signature_text, step_lines

_R = Renderer()


def render_markdown(card: ir.Card) -> str:
    """Markdown text of a whole card."""
    out: list[str] = []
    if card.preamble:
        out += [_inline(" ".join(card.preamble)), ""]
    for algo in card.algorithms:
        out += _algorithm(algo)
    return "\n".join(out).rstrip("\n") + "\n"


def _algorithm(a: ir.Algorithm) -> list[str]:
    number = f" {a.number}" if a.number else ""
    out = [f"## Algorithm{number}: {_code(signature_text(_R, a))}", ""]
    if a.description:
        out += [_inline(" ".join(a.description.split("\n"))), ""]
    for title, decls in (("Input", a.input_decls), ("Output", a.output_decls)):
        out += [f"**{title}:** " + "; ".join(_decl_inline(d) for d in decls) + "  "] if decls else []
    if a.input_decls or a.output_decls:
        out.append("")
    if a.hyper_decls:
        out += ["**Hyperparameters**", "", *_table(a.hyper_decls, "binding"), ""]
    if a.param_decls:
        out += ["**Parameters**", ""]
        out += _param_tables(a.param_decls)
    if a.state_decls:
        out += ["**State** (carried from one call to the next)", "", *_table(a.state_decls, "binding"), ""]
    if a.body:
        out += ["**Steps**", "", _fence("\n".join(step_lines(_R, a.body))), ""]
    return out


def _decl_inline(d: ir.Decl) -> str:
    text = _code(decl_parts(_R, d)[0])
    if d.binding is not None:
        text += " " + _code(binding_text(_R, d.binding))
    return text + (f" — {_inline(d.comment)}" if d.comment else "")


def _param_tables(items: tuple[ir.Decl | ir.ParamGroup, ...]) -> list[str]:
    """Consecutive top-level declarations share a table; each per-layer group gets its own."""
    out: list[str] = []
    run: list[ir.Decl] = []
    for item in (*items, None):
        if isinstance(item, ir.Decl):
            run.append(item)
            continue
        if run:
            out += [*_table(tuple(run), "source"), ""]
            run = []
        if isinstance(item, ir.ParamGroup):
            head = f"Per layer {_code(f'{item.var} ∈ [{_R.dim(item.bound)}]')}"
            head += f", tensor names under {_code(item.prefix)}" if item.prefix else ""
            note = f" — {_inline(item.comment)}" if item.comment else ""
            out += [f"{head}{note}:", "", *_table(item.decls, "source"), ""]
    return out


def _table(decls: tuple[ir.Decl, ...], what: str) -> list[str]:
    """| name | type | binding/source | note | with one row per declared name."""
    rows = [f"| name | type | {what} | note |", "|---|---|---|---|"]
    for d in decls:
        for name, binding in _per_name(d):
            value = f" = {_R.expr(d.value)}" if d.value is not None else ""
            cells = [_code(name), _code(_R.type(d.type) + value), _code(binding), _inline(d.comment)]
            rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return rows


def _per_name(d: ir.Decl) -> list[tuple[str, str]]:
    """`γ, β ∈ … from "a", "b"` → [(γ, from "a"), (β, from "b")]; otherwise the whole binding."""
    b = d.binding
    if b is not None and b.kind == "from" and len(b.sources) == len(d.names) > 1:
        single = [ir.Binding("from", (s,), b.default) for s in b.sources]
        return [(n, binding_text(_R, x)) for n, x in zip(d.names, single)]
    return [(n, binding_text(_R, b)) for n in d.names]


# ── Markdown escaping ───────────────────────────────────────────────────────────────────
def _code(text: str) -> str:
    """An inline code span that survives any backticks inside it; empty text stays empty."""
    if not text:
        return ""
    ticks = "`"
    while ticks in text:
        ticks += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _cell(text: str) -> str:
    """A table cell: `|` must be escaped even inside code spans (GitHub tables)."""
    return text.replace("|", "\\|")


_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]<>#|~"})


def _inline(text: str) -> str:
    """Prose (descriptions, comments) with Markdown's special characters escaped."""
    return text.translate(_SPECIAL)


def _fence(text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}text\n{text}\n{fence}"
