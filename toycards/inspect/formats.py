"""Output formats of `toycards describe`: plain text, JSON, Markdown, LaTeX, HTML and SVG.

Owns: `render_described(card, fmt)` for fmt in `FORMATS`, and `to_json(card)` (the JSON
object: header, problems, bound hyperparameters and parameters, card text and IR, and the file's
metadata, tensors and quant map from inspect/listing.py `reports_json`). The card
part of Markdown and LaTeX comes from the card renderers in `toycards/render/` when they
exist (`render_markdown`, `render_latex`), else from the card text in a code block. The header
is rendered here. LaTeX is a complete document in the preamble that `toycards render` writes
(render/latex.py `document`); HTML is the report page of inspect/report.py (header, card,
diagram, memory, FLOPs, quant map, tokenizer, chat templates, tensors and metadata), and SVG
the card's diagram alone (render/diagram.py).
The text format is read on a terminal: each of its header values, notices and problems is one
terminal-safe line (render/escape.py), and the card text is terminal-safe too. It lists the
first `SHOWN_PROBLEMS` problems and a count of the rest (`problem_lines`), and the start of the
chat template with a count of what is left out (`template_excerpt`), unless asked for all.
The documents (JSON, Markdown, LaTeX, HTML) list every problem. Given a `cost`
(inspect/cost.py, `describe --flops`), the text format adds its rows to the header and the JSON
its object under "cost"; given a `memory` report (inspect/memory.py, `describe --memory`),
the JSON has it under "memory".
Leaves out: the rich terminal view (cli/), the card text itself (lang/printer.py).

The Markdown header of the repository's example file (examples/make_example.py):

>>> from toycards.inspect.describe import describe
>>> md = render_described(describe("examples/tiny-llama.gguf"), "markdown")
>>> print(md[: md.index("## Card")])
# tiny-llama.gguf
<BLANKLINE>
| | |
|---|---|
| file | tiny-llama.gguf (307.4 kB, GGUF v3) |
| name | toycards tiny llama (random weights) |
| architecture | llama |
| card | library card toycards/library/cards/llama.card |
| parameters | 139,584 (139.6k) in 20 tensors |
| tensor types | F16 ×15, F32 ×5 |
| context length | 256 |
| RoPE | NORM: rotates adjacent pairs |
| tokenizer | gpt2 (pre gpt-2), 1,024 tokens, 767 merges |
| special tokens | bos 1023 '<\\|endoftext\\|>', eos 1023 '<\\|endoftext\\|>' |
| chat template | none |
| file_type | 1 (F16) |
<BLANKLINE>
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path

from toycards.errors import Diagnostic
from toycards.inspect.describe import DescribedCard
from toycards.lang import ir
from toycards.lang.printer import render_card
from toycards.render.escape import terminal_safe

FORMATS = ("card", "text", "json", "markdown", "latex", "html", "svg")
# A card bound to the wrong file has a problem per tensor (hundreds): a terminal gets the first
# ones and a count (`describe --all` lists them all), and a few more than this never as a count.
SHOWN_PROBLEMS = 10
# How much of a chat template a terminal gets (`describe --show-template`: all of it).
TEMPLATE_LINES, TEMPLATE_CHARS = 12, 800
# the card renderers of render/ (module, function), used when present
CARD_RENDERERS = {
    "markdown": ("toycards.render.markdown", "render_markdown"),
    "latex": ("toycards.render.latex", "render_latex"),
    "svg": ("toycards.render.diagram", "render_svg"),
}


def problem_line(d: Diagnostic) -> str:
    """`error: message (card line 22)`: one line per problem, the card line when there is one."""
    where = f" (card {d.span.file}:{d.span.line})" if d.span.line > 0 else ""
    return f"{d.severity}: {d.message}{where}"


def problem_lines(card: DescribedCard, every: bool = False) -> list[tuple[str, str]]:
    """(severity, line) for the problems a terminal is shown: errors first, then warnings; past
    `SHOWN_PROBLEMS` (and unless `every`), the first ones and a line counting the rest."""
    problems = sorted(card.problems, key=lambda d: d.severity != "error")
    if every or len(problems) <= SHOWN_PROBLEMS + 2:
        return [(d.severity, problem_line(d)) for d in problems]
    rest = problems[SHOWN_PROBLEMS:]
    counts = [(sum(d.severity == kind for d in rest), kind) for kind in ("error", "warning")]
    what = ", ".join(f"{n} {kind}{'s' * (n != 1)}" for n, kind in counts if n)
    more = f"… and {len(rest)} more ({what}); --all lists every one"
    return [(d.severity, problem_line(d)) for d in problems[:SHOWN_PROBLEMS]] + [("note", more)]


def template_excerpt(template: str, whole: bool = False) -> tuple[str, int]:
    """(the start of a chat template that a terminal is shown, how many characters are left out):
    at most `TEMPLATE_LINES` lines and `TEMPLATE_CHARS` characters, unless `whole`.

    >>> shown, left_out = template_excerpt("{{ m }}\\n" * 20)  # 20 lines, 160 characters
    >>> shown.count("\\n") + 1, left_out
    (12, 65)
    """
    if whole:
        return template, 0
    lines = template.split("\n")[:TEMPLATE_LINES]
    shown = "\n".join(lines)[:TEMPLATE_CHARS]
    return shown, len(template) - len(shown)


def template_heading(template: str, left_out: int) -> str:
    """The line before a chat template shown on a terminal."""
    if not left_out:
        return f"chat template ({len(template):,} characters):"
    return (
        f"chat template (the first {len(template) - left_out:,} of {len(template):,} characters;"
        " --show-template shows it all):"
    )


def _card_renderer(fmt: str):
    module, func = CARD_RENDERERS[fmt]
    try:
        return getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError):
        return None


# ── JSON ────────────────────────────────────────────────────────────────────────────────
def _jsonable(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def to_json(card: DescribedCard, cost=None, memory=None) -> dict:
    """Everything describe knows, as a JSON-ready dict."""
    bound = card.bound
    hyper = {
        name: {"value": _jsonable(value), "source": bound.hyper_source.get(name)}
        for name, value in (bound.hyper.items() if bound else ())
    }
    tensors = card.header.tensors if card.header else {}
    params = [
        {"name": p.name, "layer": p.layer, "tensor": p.tensor, "constant": p.const, "shape": list(p.shape)}
        | ({"transposed": True} if p.transpose else {})
        | ({"rows": [p.rows[0] + 1, p.rows[1]]} if p.rows else {})
        | ({"type": tensors[p.tensor]["type"]} if p.tensor in tensors else {})
        for p in (bound.params if bound else ())
    ]
    problems = [
        {"severity": d.severity, "message": d.message, "hint": d.hint or None}
        | ({"card_line": f"{d.span.file}:{d.span.line}"} if d.span.line > 0 else {})
        for d in card.problems
    ]
    return {
        "file": card.header.path if card.header else card.file,
        "origin": card.origin,
        "card_path": card.card_path or None,
        "notice": card.notice or None,
        "header": _jsonable(dataclasses.asdict(card.header)) if card.header else None,
        "problems": problems,
        "hyperparameters": hyper,
        "parameters": params,
        "card": render_card(card),
        "ir": ir.to_json(card.as_card()),
        **_file_reports(card),
        **({"cost": cost.to_json()} if cost is not None else {}),
        **({"memory": memory.to_json()} if memory is not None else {}),
    }


def _file_reports(card: DescribedCard) -> dict:
    """`metadata`, `tensors` and `quant_map` of the described file (none for a card without one)."""
    if card.header is None:
        return {}
    from toycards.gguf.reader import open_gguf
    from toycards.inspect.listing import reports_json

    with open_gguf(card.header.path) as f:
        return reports_json(f)


# ── text formats ────────────────────────────────────────────────────────────────────────
def described_rows(card: DescribedCard) -> list[tuple[str, str]]:
    """The header rows with, after the architecture, which card was bound and from where."""
    table = card.header.rows() if card.header else []
    at = next((i + 1 for i, (label, _) in enumerate(table) if label == "architecture"), len(table))
    return table[:at] + [("card", card.card_label)] + table[at:]


def _text(card: DescribedCard, every_problem: bool = False, whole_template: bool = False, cost=None) -> str:
    line = lambda s: terminal_safe(s, newlines=False)  # noqa: E731
    rows = described_rows(card) + (cost.rows() if cost is not None else [])
    table = [(line(k), line(v)) for k, v in rows]  # keys too: general.* from the file
    width = max((len(k) for k, _ in table), default=0)
    out = [f"{k:>{width}}  {v}" for k, v in table]
    if card.notice:
        out += ["", f"notice: {line(card.notice)}"]
    problems = problem_lines(card, every_problem)
    out += [""] + [line(text) for _, text in problems] + ([""] if problems else [])
    template = card.header.chat_template if card.header else None
    if template is not None:
        shown, left_out = template_excerpt(template, whole_template)
        out += [template_heading(template, left_out), *_indented(terminal_safe(shown)), ""]
    return "\n".join(out) + "\n" + terminal_safe(render_card(card))


def _indented(text: str) -> list[str]:
    return ["  " + ln if ln else "" for ln in text.split("\n")]


def _markdown(card: DescribedCard) -> str:
    cell = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    out = [f"# {Path(card.header.path).name if card.header else card.file}", "", "| | |", "|---|---|"]
    out += [f"| {cell(k)} | {cell(v)} |" for k, v in described_rows(card)]
    if card.notice:
        out += ["", f"> {card.notice}"]
    if card.problems:
        out += ["", "## Problems", ""] + [f"- {problem_line(d)}" for d in card.problems]
    renderer = _card_renderer("markdown")
    body = renderer(card.as_card()) if renderer else f"```\n{render_card(card)}```"
    return "\n".join(out + ["", "## Card", "", body.rstrip("\n")]) + "\n"


_LATEX_SPECIAL = {c: "\\" + c for c in "&%$#_{}"} | {
    "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}",
    "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}", "×": r"$\times$",
    "θ": r"$\theta$", "…": r"\ldots{}", "→": r"$\to$",
}  # fmt: skip


def latex_escape(text: str) -> str:
    r"""Text for a LaTeX document that pdflatex reads: `50% of d_e` → `50\% of d\_e`, `F32 ×28` →
    `F32 $\times$28`; any other non-ASCII character as the card renderer writes it in prose
    (a Greek letter or a symbol in math, a letter with accents without them, else `?`)."""
    from toycards.render.latex import latex_prose

    return "".join(_LATEX_SPECIAL.get(c) or (c if c.isascii() else latex_prose(c)) for c in str(text))


def _latex(card: DescribedCard) -> str:
    from toycards.render.latex import document

    title = Path(card.header.path).name if card.header else card.file
    out = [rf"\section*{{{latex_escape(title)}}}", r"\begin{tabular}{@{}lp{0.7\linewidth}@{}}"]
    out += [f"{latex_escape(k)} & {latex_escape(v)} \\\\" for k, v in described_rows(card)]
    out.append(r"\end{tabular}")
    if card.problems:
        out += [r"\begin{itemize}"] + [f"\\item {latex_escape(problem_line(d))}" for d in card.problems]
        out.append(r"\end{itemize}")
    renderer = _card_renderer("latex")
    out.append(
        renderer(card.as_card()).rstrip("\n")
        if renderer
        else "\\begin{verbatim}\n" + render_card(card) + "\\end{verbatim}"
    )
    return document("\n".join(out) + "\n")


def _html(card: DescribedCard) -> str:
    """The report page of the file (inspect/report.py)."""
    from toycards.inspect.report import report_html

    return report_html(card)


def _svg(card: DescribedCard) -> str:
    """The bound card's diagrams (render/diagram.py): a loop's count shows the file's value."""
    renderer = _card_renderer("svg")
    if renderer is None:
        raise ValueError("this build has no diagram renderer")
    return renderer(card.as_card())


def render_described(
    card: DescribedCard,
    fmt: str = "card",
    every_problem: bool = False,
    whole_template: bool = False,
    cost=None,
    memory=None,
) -> str:
    """`card` in one of `FORMATS`; "card" is the plain card text (it parses and checks). For the
    text format, `every_problem` lists every problem and `whole_template` shows the whole chat
    template (else the first ones and a count: `problem_lines`, `template_excerpt`). A `cost`
    (inspect/cost.py) goes into the text and JSON formats, a `memory` report (inspect/memory.py,
    `describe --memory`) into the JSON."""
    if fmt == "json":
        return json.dumps(to_json(card, cost, memory), ensure_ascii=False, indent=1) + "\n"
    if fmt == "text":
        return _text(card, every_problem, whole_template, cost)
    renderers = {"card": render_card, "markdown": _markdown, "latex": _latex, "html": _html, "svg": _svg}
    if fmt not in renderers:
        raise ValueError(f"unknown format {fmt!r}")
    return renderers[fmt](card)
