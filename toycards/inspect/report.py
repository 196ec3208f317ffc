"""The HTML report of a GGUF file: `toycards describe FILE --format html [-o report.html]`.

Owns: `report_html(card, contexts, layout) -> str`, one complete page that works offline (inline
CSS, no script, no external resource) with a sticky table of contents and, in the order of
`SECTIONS`: the summary (file, architecture, size, parameter count, the header table, the notice
and every problem), the bound card (render/html.py), its block diagram (render/diagram.py,
scrolled when wider than the page), the memory at each of `contexts` (inspect/memory.py), the
parameters and FLOPs (inspect/cost.py), the quant map (inspect/quantmap.py), the tokenizer, every
chat template in full, and every tensor and metadata key (inspect/listing.py) folded in
`<details>`. A section whose figures this file cannot give (no card with steps: no memory; a card
that does not check: no FLOPs) says why in one line instead.
Leaves out: the figures (the modules named above), the other formats (formats.py), the page
skeleton and the card's own style sheet (render/html.py `page`; `STYLE` here is added after it).

A GGUF file is someone else's text (docs/security.md). The fragments of the modules above escape
what they take from the file, and what is written here goes through `html.escape`; then the whole
page goes through render/escape.py's `terminal_safe`, so that a control or bidirectional-text
character from any of them shows as `\\u202e` rather than reordering what the page shows.

>>> from toycards.inspect.describe import describe
>>> page = report_html(describe("examples/tiny-llama.gguf"))
>>> [f'id="{key}"' in page for key, _ in SECTIONS].count(True) == len(SECTIONS)
True
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from toycards.errors import ToycardsError
from toycards.inspect.header import human_count, human_size
from toycards.render.escape import terminal_safe

SECTIONS = (
    ("summary", "Summary"),
    ("card", "Card"),
    ("diagram", "Diagram"),
    ("memory", "Memory"),
    ("cost", "Parameters and FLOPs"),
    ("quant-map", "Quant map"),
    ("tokenizer", "Tokenizer"),
    ("chat-template", "Chat template"),
    ("tensors", "Tensors"),
    ("metadata", "Metadata"),
)
# the contexts of the memory table, as `describe --memory --ctx` takes them; one a file cannot
# reach (past a learned-position model's positions) is left out
REPORT_CONTEXTS = ("2048", "8192", "max")

STYLE = """
:root { --ink: #1f2328; --muted: #59636e; --line: #d8dee4; --soft: #f6f8fa; --accent: #0969da; }
body { max-width: none; margin: 0; color: var(--ink); background: #fff;
  font: 15px/1.55 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
.layout { display: grid; grid-template-columns: 14rem minmax(0, 1fr); }
nav.toc { position: sticky; top: 0; align-self: start; height: 100vh; overflow-y: auto;
  box-sizing: border-box; padding: 1.5rem 0.75rem; background: var(--soft);
  border-right: 1px solid var(--line); font-size: 0.9rem; }
nav.toc .file { font-weight: 600; padding: 0 0.5rem 0.75rem; overflow-wrap: anywhere; }
nav.toc ol { list-style: none; margin: 0; padding: 0; }
nav.toc a { display: block; padding: 0.25rem 0.5rem; border-radius: 6px; color: var(--ink);
  text-decoration: none; }
nav.toc a:hover, nav.toc a:focus { background: #e6ebf1; color: var(--accent); }
main { box-sizing: border-box; max-width: 78rem; min-width: 0; padding: 2rem 3rem 5rem; }
main > header h1 { font-size: 1.8rem; margin: 0 0 0.2rem; overflow-wrap: anywhere; }
main > header p { color: var(--muted); margin: 0 0 1.5rem; }
section.part { margin: 0 0 3rem; scroll-margin-top: 1rem; }
section.part > h2 { font-size: 1.35rem; margin: 0 0 1rem; padding-bottom: 0.3rem;
  border-bottom: 1px solid var(--line); }
section.part h3 { font-size: 1.05rem; margin: 1.5rem 0 0.5rem; }
dl.facts { display: grid; grid-template-columns: repeat(auto-fill, minmax(12rem, 1fr)); gap: 0.75rem;
  margin: 0 0 1.5rem; }
dl.facts div { border: 1px solid var(--line); border-radius: 8px; padding: 0.6rem 0.9rem; }
dl.facts dt { color: var(--muted); font-size: 0.75rem; text-transform: uppercase; letter-spacing: 0.05em; }
dl.facts dd { margin: 0.1rem 0 0; font-size: 1.05rem; font-weight: 600; overflow-wrap: anywhere; }
dl.facts div.wide { grid-column: span 2; }
dl.facts div.wide dd { font-size: 0.9rem; font-weight: normal; }
.scroll { overflow-x: auto; max-width: 100%; }
section.part table { border-collapse: collapse; font-size: 0.88rem; font-variant-numeric: tabular-nums;
  margin: 0.5rem 0 1rem; }
section.part th, section.part td { padding: 0.3rem 0.7rem; border-bottom: 1px solid var(--line);
  text-align: left; vertical-align: top; }
section.part thead th, section.part tfoot th, section.part tfoot td { background: var(--soft); }
section.part tbody tr:hover { background: #f0f6ff; }
section.part td.num, section.part th.num { text-align: right; white-space: nowrap; }
table.toycards-tensors td:nth-child(1), table.toycards-tensors td:nth-child(n+6),
table.toycards-metadata td:nth-child(1), table.toycards-quantroles td:nth-child(n+2):not(:nth-child(3)),
table.toycards-quantroles tfoot th:nth-child(n+2) { text-align: right; white-space: nowrap; }
table.toycards-quantmap caption { caption-side: top; text-align: left; color: var(--muted);
  padding: 0.3rem 0; }
table.toycards-quantmap td { text-align: center; font-family: ui-monospace, Menlo, Consolas, monospace; }
table.toycards-metadata td:nth-child(4) { overflow-wrap: anywhere; }
table.toycards-metadata pre { white-space: pre-wrap; }
section.part tbody th { font-weight: normal; }
tr.group th { background: #eef2f6; font-weight: 600; }
table.memory tbody tr:not(.group) th { padding-left: 1.5rem; }
tr.total th, tr.total td { font-weight: 600; }
table.header th { white-space: nowrap; }
code, pre, .expr { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace;
  font-size: 0.85rem; }
pre { background: var(--soft); border: 1px solid var(--line); border-radius: 8px; padding: 0.8rem 1rem;
  overflow-x: auto; tab-size: 4; line-height: 1.45; }
.diagram-scroll { overflow-x: auto; border: 1px solid var(--line); border-radius: 8px; }
.diagram-scroll svg { display: block; }
details { border: 1px solid var(--line); border-radius: 8px; padding: 0 1rem; margin: 0.5rem 0; }
details > summary { cursor: pointer; font-weight: 600; padding: 0.6rem 0; }
details[open] > summary { border-bottom: 1px solid var(--line); margin-bottom: 0.5rem; }
.unavailable { color: var(--muted); font-style: italic; }
ul.notes { color: var(--muted); font-size: 0.9rem; padding-left: 1.2rem; }
span.severity { display: inline-block; border-radius: 4px; padding: 0 0.4rem; font-size: 0.8rem;
  font-weight: 600; }
span.severity.error { background: #ffebe9; color: #b00020; }
span.severity.warning { background: #fff8c5; color: #7a5300; }
span.severity.note { background: var(--soft); color: var(--muted); }
footer { color: var(--muted); font-size: 0.85rem; border-top: 1px solid var(--line); padding-top: 1rem; }
@media (max-width: 60rem) {
  .layout { display: block; }
  nav.toc { height: auto; z-index: 1; padding: 0.5rem; border-right: 0;
    border-bottom: 1px solid var(--line); }
  nav.toc .file { display: none; }
  nav.toc ol { display: flex; flex-wrap: wrap; gap: 0.1rem 0.3rem; }
  main { padding: 1rem; }
}
@media print { nav.toc { display: none; } .layout { display: block; } }
""".strip()


def _text(value: object) -> str:
    """Text for the page, HTML-escaped (its controls are spelled out with the whole page's).

    >>> _text('<b title="x">')
    '&lt;b title=&quot;x&quot;&gt;'
    """
    return html.escape(str(value))


def _unavailable(why: str) -> list[str]:
    return [f'<p class="unavailable">{_text(why)}</p>']


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int] = frozenset()) -> str:
    """A table of cells already in markup; the columns in `numeric` right-aligned."""
    cls = lambda i: ' class="num"' if i in numeric else ""  # noqa: E731
    out = ['<div class="scroll"><table class="data">', "<thead><tr>"]
    out.append("".join(f"<th{cls(i)}>{h}</th>" for i, h in enumerate(head)) + "</tr></thead><tbody>")
    out += ["<tr>" + "".join(f"<td{cls(i)}>{c}</td>" for i, c in enumerate(r)) + "</tr>" for r in rows]
    return "\n".join([*out, "</tbody></table></div>"])


# ── summary ─────────────────────────────────────────────────────────────────────────────
def _summary(card, qm) -> list[str]:
    """The facts at a glance, the whole header table, the notice and every problem."""
    h = card.header
    facts = [("architecture", h.architecture or "(missing)"), ("file size", human_size(h.file_size))]
    facts += [("parameters", human_count(h.n_params)), ("tensors", f"{h.n_tensors:,}")]
    if h.context_length is not None:
        facts.append(("context length", f"{h.context_length:,}"))
    if qm is not None and qm.bits_per_weight is not None:
        facts.append(("quant mix", f"{qm.mix.label}, {qm.bits_per_weight:.2f} bits/weight"))
    facts.append(("card", card.card_label))
    out = ['<dl class="facts">']
    for k, v in facts:
        box = '<div class="wide">' if k == "card" else "<div>"  # the card's path takes two boxes' width
        out.append(f"{box}<dt>{_text(k)}</dt><dd>{_text(v)}</dd></div>")
    out += ["</dl>", '<div class="scroll"><table class="header"><tbody>']
    out += [f"<tr><th>{_text(k)}</th><td>{_text(v)}</td></tr>" for k, v in h.rows()]
    out.append("</tbody></table></div>")
    if card.notice:
        out.append(f'<p class="notice">{_text(card.notice)}</p>')
    return out + _problems(card)


def _problems(card) -> list[str]:
    if not card.problems:
        return ["<p>The file matches its card: no problems.</p>"]
    problems = sorted(card.problems, key=lambda d: d.severity != "error")
    rows = [
        [
            f'<span class="severity {_text(d.severity)}">{_text(d.severity)}</span>',
            _text(d.message),
            _text(f"{d.span.file}:{d.span.line}") if d.span.line > 0 else "",
            _text(d.hint),
        ]
        for d in problems
    ]
    errors = sum(d.severity == "error" for d in problems)
    head = f"{len(problems)} problem{'s' * (len(problems) != 1)} ({errors} error{'s' * (errors != 1)})"
    return [f'<h3 id="problems">{head}</h3>', _table(["", "problem", "card line", "hint"], rows)]


# ── the card and its diagram ────────────────────────────────────────────────────────────
def _card(card) -> list[str]:
    from toycards.render.html import render_html

    return [render_html(card.as_card()).rstrip("\n")]


def _diagram(card, layout: str) -> list[str]:
    from toycards.render.diagram import svg_element

    if not any(a.body for a in card.algorithms):
        return _unavailable("The card has no steps to draw (a declaration-only card).")
    return ['<div class="diagram-scroll">', svg_element(card.as_card(), layout).rstrip("\n"), "</div>"]


# ── memory ──────────────────────────────────────────────────────────────────────────────
def report_contexts(card, contexts: Sequence[str] = REPORT_CONTEXTS) -> tuple[int, ...]:
    """The contexts of `contexts` (memory.py `parse_contexts` items: `2048`, `8k`, `max`) that the
    file can take, in order; those it cannot (past a learned-position model's positions, `max`
    without a context length) are left out."""
    from toycards.inspect.memory import parse_contexts

    out: set[int] = set()
    for item in contexts:
        try:
            out.update(parse_contexts(str(item), card))
        except ToycardsError:
            continue
    return tuple(sorted(out))


def _memory(card, contexts: Sequence[str]) -> list[str]:
    from toycards.inspect.llama_cpp_memory import LLAMA_CPP_UBATCH
    from toycards.inspect.memory import ROWS, memory_report

    ns = report_contexts(card, contexts)
    if not ns:
        return _unavailable(f"No context of {', '.join(map(str, contexts))} fits this file.")
    try:
        report = memory_report(card, ns)
    except ToycardsError as e:
        return _unavailable(f"Memory not known: {e.message}")
    kv = report.kv_types
    titles = {
        "toycards": f"toycards (numpy target, KV cache {kv['toycards']})",
        "llama.cpp": f"llama.cpp (KV cache {kv['llama.cpp']}, n_ubatch {LLAMA_CPP_UBATCH})",
    }
    head = ["<th></th>", *(f'<th class="num">ℓ = {c.context:,}</th>' for c in report.columns)]
    body = []
    for side, rows in ROWS.items():
        body.append(f'<tr class="group"><th colspan="{len(ns) + 1}">{_text(titles[side])}</th></tr>')
        for key, label in rows:
            values = [(c.toycards if side == "toycards" else c.llama_cpp).get(key) for c in report.columns]
            if key not in ("weights", "total") and all(v == 0 for v in values):
                continue  # nothing of this kind in the file (no state for a transformer)
            cells = "".join(_bytes_cell(v) for v in values)
            row = '<tr class="total">' if key == "total" else "<tr>"
            body.append(f"{row}<th>{_text(label)}</th>{cells}</tr>")
    out = [
        f"<p>A prefill of ℓ tokens, batch {report.batch}.</p>",
        '<div class="scroll"><table class="memory">',
    ]
    out += ["<thead><tr>", *head, "</tr></thead><tbody>", *body, "</tbody></table></div>"]
    return out + _memory_notes(report)


def _bytes_cell(n: int | None) -> str:
    if n is None:
        return '<td class="num" title="not applicable">—</td>'
    return f'<td class="num" title="{n:,} bytes">{human_size(n)}</td>'


def _memory_notes(report) -> list[str]:
    w = report.weights
    stored = ", ".join(
        f"{t} {human_size(b)} ({w.tensors[t]} tensors)"
        for t, b in sorted(w.stored.items(), key=lambda x: -x[1])
    )
    notes = [f"weights as stored: {human_size(w.total_stored)}: {stored}"]
    notes.append("llama.cpp: compute and output buffers left out (ggml's graph allocator sizes them)")
    notes += list(report.notes)
    out = ['<ul class="notes">', *(f"<li>{_text(n)}</li>" for n in notes), "</ul>"]
    formulas = [[_text(what), f'<span class="expr">{_text(f)}</span>'] for what, f in report.formulas]
    out += ["<details><summary>How each figure is computed (ℓ: tokens, B: batch)</summary>"]
    return out + [_table(["figure", "formula"], formulas), "</details>"]


# ── parameters and FLOPs ────────────────────────────────────────────────────────────────
def _cost(card) -> list[str]:
    from toycards.inspect.cost import described_cost

    try:
        cost = described_cost(card)
    except ToycardsError as e:
        return _unavailable(f"Parameters and FLOPs not known: {e.message}")
    rows = [
        (_text(k), f'<span class="expr">{_text(v)}</span>' if k.endswith(" =") else _text(v))
        for k, v in cost.rows()
        if k != "note"  # the notes follow as a list
    ]
    out = [_pairs(rows)]
    parts = [
        [
            _text(p["kind"]),
            _text(p["count"]),
            f'<span class="expr">{_text(p["each"])}</span>',
            _count(p["value"]),
        ]
        for p in cost.to_json()["parameters"]["parts"]
    ]
    if parts:
        out += ["<h3>Parameters by kind</h3>", _table(["kind", "count", "each", "parameters"], parts, {3})]
    notes = cost.all_notes()
    return out + ['<ul class="notes">', *(f"<li>{_text(n)}</li>" for n in notes), "</ul>"]


def _count(n: int | None) -> str:
    return "" if n is None else f"{n:,}"


# ── what the file holds ─────────────────────────────────────────────────────────────────
def _quant_map(qm) -> list[str]:
    from toycards.inspect.quantmap import quant_map_html, role_table_html

    out = []
    if qm.grid_roles:  # its caption names the mix
        out += ["<h3>By layer</h3>", f'<div class="scroll">{quant_map_html(qm)}</div>']
    else:
        out.append(f"<p>mix: {_text(qm.mix.label)} ({_text(qm.mix.note)})</p>")
    out += ["<h3>By role</h3>", f'<div class="scroll">{role_table_html(qm)}</div>']
    if qm.mix.differences:
        rows = [[_text(n), _text(a), _text(r)] for n, a, r in qm.mix.differences]
        head = f"{len(qm.mix.differences)} tensors differ from the {qm.mix.file_type} rule"
        out += [
            f"<details><summary>{_text(head)}</summary>",
            _table(["tensor", "type", "rule"], rows),
            "</details>",
        ]
    if qm.unknown:
        out += _unavailable(f"{len(qm.unknown)} tensor(s) of a type toycards does not know: not in the bits")
    return out


def _tokenizer(header) -> list[str]:
    tok = header.tokenizer
    if not tok:
        return _unavailable("The file has no tokenizer.")
    labels = (("model", "model"), ("pre", "pre-tokenizer"), ("vocab_size", "tokens"), ("merges", "merges"),
              ("scores", "scores"), ("add_bos", "adds BOS"), ("add_eos", "adds EOS"))  # fmt: skip
    rows = [(label, _text(f"{tok[k]:,}" if isinstance(tok[k], int) and not isinstance(tok[k], bool)
                          else str(tok[k]).lower())) for k, label in labels if k in tok]  # fmt: skip
    out = [_pairs([(_text(k), v) for k, v in rows])]
    special = tok.get("special", {})
    if special:
        cells = [
            [
                _text(name),
                _count(v["id"]),
                "" if v.get("text") is None else f"<code>{_text(repr(v['text']))}</code>",
            ]
            for name, v in special.items()
        ]
        out += ["<h3>Special tokens</h3>", _table(["role", "id", "text"], cells, {1})]
    return out


def _templates(templates: list[tuple[str, str]]) -> list[str]:
    """Every chat template of the file, whole; describe never renders one."""
    if not templates:
        return _unavailable("The file has no chat template.")
    out = []
    for key, text in templates:
        lines = text.count("\n") + 1
        out.append(f"<h3><code>{_text(key)}</code></h3>")
        out.append(f"<p>{len(text):,} characters, {lines:,} line{'s' * (lines != 1)}, shown as written.</p>")
        out.append(f'<pre class="template">{_text(text)}</pre>')
    return out


def _folded(summary: str, fragment: str) -> list[str]:
    return [
        f"<details><summary>{_text(summary)}</summary>",
        f'<div class="scroll">{fragment}</div>',
        "</details>",
    ]


def _pairs(rows: Sequence[tuple[str, str]]) -> str:
    """A two-column table of (label, value) cells already in markup."""
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<div class="scroll"><table class="header"><tbody>{body}</tbody></table></div>'


def _file_parts(path: str) -> dict:
    """What the report shows of the file itself, read in one opening."""
    from toycards.gguf.reader import open_gguf
    from toycards.inspect.listing import file_line, is_chat_template, metadata_html, tensors_html
    from toycards.inspect.quantmap import quant_map

    with open_gguf(path) as f:
        keys = [k for k in f.metadata if is_chat_template(k) and isinstance(f.metadata[k], str)]
        return {
            "quant_map": quant_map(f),
            "line": file_line(f),
            "tensors": (len(f.tensors), tensors_html(f)),
            "metadata": (len(f.metadata), metadata_html(f)),
            "templates": sorted(((k, f.metadata[k]) for k in keys), key=lambda kv: kv[0] != keys[0]),
        }


# ── the page ────────────────────────────────────────────────────────────────────────────
def report_html(card, contexts: Sequence[str] = REPORT_CONTEXTS, layout: str = "python") -> str:
    """The report of the file `card` (inspect/describe.py's DescribedCard) describes, as one
    complete page (see the module docstring); the memory table at `contexts` (`report_contexts`),
    the diagram placed by `layout` (render/diagram.py's engines)."""
    from toycards.render.html import page
    from toycards.version import __version__

    h = card.header
    title = Path(h.path).name if h else str(card.file)
    parts = _file_parts(h.path) if h else None
    qm = parts["quant_map"] if parts else None
    bodies = {"card": _card(card), "diagram": _diagram(card, layout), "cost": _cost(card)}
    if h is not None:
        n_tensors, tensors = parts["tensors"]
        n_keys, metadata = parts["metadata"]
        bodies |= {
            "summary": _summary(card, qm),
            "memory": _memory(card, contexts),
            "quant-map": _quant_map(qm),
            "tokenizer": _tokenizer(h),
            "chat-template": _templates(parts["templates"]),
            "tensors": [f"<p>{_text(parts['line'])}</p>", *_folded(f"All {n_tensors:,} tensors", tensors)],
            "metadata": _folded(f"All {n_keys:,} metadata keys", metadata),
        }
    shown = [(key, name) for key, name in SECTIONS if key in bodies]
    toc = [f'<li><a href="#{key}">{name}</a></li>' for key, name in shown]
    subtitle = f"GGUF v{h.version}, {human_size(h.file_size)}" if h else "a card without a file"
    body = [
        '<div class="layout">',
        f'<nav class="toc" aria-label="Contents"><div class="file">{_text(title)}</div><ol>',
        *toc,
        "</ol></nav>",
        "<main>",
        f"<header><h1>{_text(title)}</h1><p>{_text(subtitle)}: the report of toycards describe</p></header>",
    ]
    for key, name in shown:
        body += [f'<section class="part" id="{key}">', f"<h2>{name}</h2>", *bodies[key], "</section>"]
    body += [f"<footer>toycards {_text(__version__)}</footer>", "</main>", "</div>"]
    return terminal_safe(page(title, body, style=STYLE))  # the markup itself holds no control
