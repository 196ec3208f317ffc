"""Every tensor and every metadata key of a GGUF file, as gguf-dump lists them: `describe
--tensors` and `describe --metadata`.

Owns: `tensor_rows(f)` (name, type, ggml's `ne`, the card's shape, elements, bytes, file offset of
each tensor, in file order), `metadata_rows(f)` (each key with its type and value, arrays
summarised by their type, length and first items), their text, JSON and HTML views, and
`reports_text` / `reports_json` / `reports_html`, which put the requested reports of a file
together (the quant map's views are quantmap.py's).
Leaves out: parsing (gguf/reader.py: nothing is read here that the reader has not validated),
the command line (cli/files.py).

Shapes: `ne` is ggml's order, innermost dimension first, as gguf-dump and llama.cpp print it
(`4096, 32000` for an embedding); `shape` is the order the card and NumPy read, outermost first
(`32000 × 4096`). `offset` is where the tensor's data starts in the file: the start of the data
section plus the offset the tensor table holds (`relative_offset`).

Strings from the file reach a terminal only through render/escape.py's `terminal_safe`: keys,
names and values one line each, a chat template in full with its own lines. Long strings are
clipped in the text view (`MAX_STRING`), never in JSON; arrays are summarised in both (a
vocabulary has 150k entries), and only the items shown are decoded.

>>> from toycards.gguf.reader import open_gguf
>>> with open_gguf("examples/tiny-llama.gguf") as f:
...     print(tensors_text(f).splitlines()[3])
...     print(metadata_text(f).splitlines()[14])
     1  token_embd.weight         F16   64, 1024  1024 × 64     65536  131072   27552
    13  tokenizer.ggml.tokens                   array[string]  1024 items: ['!', '"', '#', '$', '%', …]
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass

from toycards.inspect.literals import number_expr
from toycards.lang import ir
from toycards.render.escape import terminal_safe

REPORTS = ("metadata", "tensors", "quant_map")  # the order in which they are printed together
MAX_STRING = 200  # characters of a string value the text view shows on its line
FIRST_ITEMS = {"string": 5, "number": 8, "array": 3}  # items of an array shown, by element kind
MAX_ITEM = 40  # characters of one string item of an array
CHAT_TEMPLATE = "tokenizer.chat_template"  # and tokenizer.chat_template.NAME: shown in full


@dataclass(frozen=True)
class TensorRow:
    """One tensor of the file."""

    index: int  # 1-based, in file order
    name: str
    type_name: str
    ne: tuple[int, ...]  # ggml's order, innermost first
    shape: tuple[int, ...]  # the card's and NumPy's order, outermost first
    n_elements: int
    n_bytes: int  # 0 for a type toycards does not know
    offset: int  # absolute file offset of the data
    relative_offset: int  # as the tensor table holds it: from the start of the data section


@dataclass(frozen=True)
class MetadataRow:
    """One key of the file with its value; an array's `value` holds only its first items."""

    index: int  # 1-based, in file order
    key: str
    type: str  # "uint32", "string", "array[string]", … (gguf/reader.py `value_type`)
    value: object
    length: int | None = None  # the number of items of an array


def tensor_rows(f) -> list[TensorRow]:
    """Every tensor of an open GGUFFile, in file order."""
    return [
        TensorRow(i, t.name, t.type_name, tuple(t.shape[::-1]), tuple(t.shape), t.n_elements, t.n_bytes,
                  t.offset, t.offset - f.data_offset)
        for i, t in enumerate(f.tensors.values(), 1)
    ]  # fmt: skip


def metadata_rows(f) -> list[MetadataRow]:
    """Every key of an open GGUFFile, in file order; arrays as their first items (decoding a
    string array only that far)."""
    rows = []
    for i, key in enumerate(f.metadata, 1):
        vtype = f.value_type(key)
        if not vtype.startswith("array"):
            rows.append(MetadataRow(i, key, vtype, f.metadata[key]))
            continue
        n, element = f.array_len(key), vtype[len("array[") : -1]
        if element == "string":
            shown = min(n, FIRST_ITEMS["string"])
            items = f.string_items(key, set(range(shown)))
            first: list = [items[j] for j in range(shown)]
        elif element == "array":  # arrays of arrays: ggml itself refuses them, and they are small
            first = _plain(f.metadata[key][: FIRST_ITEMS["array"]])
        else:
            first = f.array_items(key, FIRST_ITEMS["number"])
        rows.append(MetadataRow(i, key, vtype, first, n))
    return rows


def _plain(value: object) -> object:
    """NumPy values as Python ones."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def file_line(f) -> str:
    """`GGUF v3: 18 keys, 20 tensors, alignment 32, tensor data from byte 27552`."""
    return (
        f"GGUF v{f.version}: {len(f.metadata)} keys, {len(f.tensors)} tensors, alignment {f.alignment}, "
        f"tensor data from byte {f.data_offset}"
    )


# ── text ────────────────────────────────────────────────────────────────────────────────
def _line(text: str) -> str:
    return terminal_safe(text, newlines=False)


def _aligned(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    cell = lambda i, c: c.rjust(widths[i]) if i in right else c.ljust(widths[i])  # noqa: E731
    return ["  ".join(cell(i, c) for i, c in enumerate(r)).rstrip() for r in rows]


def tensors_text(f) -> str:
    """Every tensor, one terminal-safe line each, as gguf-dump lists them, with bytes and offsets."""
    rows = [["#", "name", "type", "ne", "shape", "elements", "bytes", "offset"]]
    table = tensor_rows(f)
    for t in table:
        ne, shape = ", ".join(map(str, t.ne)), " × ".join(map(str, t.shape))
        rows.append(
            [
                str(t.index),
                _line(t.name),
                _line(t.type_name),
                ne,
                shape,
                *map(str, (t.n_elements, t.n_bytes, t.offset)),
            ]
        )
    head = [
        file_line(f),
        "ne: ggml's order (innermost first, as gguf-dump prints it); shape: the card's and NumPy's order; "
        "offset: where the data starts in the file",
    ]
    n_elements, n_bytes = sum(t.n_elements for t in table), sum(t.n_bytes for t in table)
    total = f"{len(table)} tensors: {n_elements} elements, {n_bytes} bytes"
    body = ["    " + line for line in _aligned(rows, right={0, 5, 6, 7})] if table else []
    return "\n".join([*head, *body, total]) + "\n"


def value_text(row: MetadataRow) -> str:
    """A value on one terminal-safe line: strings quoted and clipped, arrays as `N items: [first, …]`."""
    if row.length is not None:
        more = ", …" if row.length > len(row.value) else ""
        items = ", ".join(_item_text(v, row.type) for v in row.value)
        return f"{row.length} items: [{items}{more}]"
    if isinstance(row.value, str):
        text = row.value
        clipped = text[:MAX_STRING]
        rest = f" … ({len(text)} characters; --format json has it whole)" if len(text) > MAX_STRING else ""
        return "'" + _line(clipped) + "'" + rest
    return _number_text(row.value, row.type == "float32")


def _item_text(value: object, vtype: str) -> str:
    if isinstance(value, str):
        clipped = value if len(value) <= MAX_ITEM else value[: MAX_ITEM - 1] + "…"
        return "'" + _line(clipped) + "'"
    if isinstance(value, list):
        return (
            "["
            + ", ".join(_item_text(v, vtype) for v in value[: FIRST_ITEMS["array"]])
            + (", …]" if len(value) > FIRST_ITEMS["array"] else "]")
        )
    return _number_text(value, vtype == "array[float32]")


def _number_text(value: object, float32: bool) -> str:
    """A number as describe writes it: a float32 with the fewest digits that read back to it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, int | float):
        return _line(str(value))
    e = number_expr(value, float32)
    return "-" + e.operand.text if isinstance(e, ir.UnOp) else e.text


def is_chat_template(key: str) -> bool:
    """`tokenizer.chat_template` and the named templates `tokenizer.chat_template.NAME`."""
    return key == CHAT_TEMPLATE or key.startswith(CHAT_TEMPLATE + ".")


def metadata_text(f) -> str:
    """Every key, one terminal-safe line each; a chat template in full below its line."""
    rows = metadata_rows(f)
    lines = _aligned(
        [["#", "key", "type", "value"]]
        + [
            [
                str(r.index),
                _line(r.key),
                r.type,
                f"{len(r.value):,} characters:" if _whole(r) else value_text(r),
            ]
            for r in rows
        ],
        right={0},
    )
    out = [file_line(f), "    " + lines[0]]
    for r, line in zip(rows, lines[1:]):
        out.append("    " + line)
        if _whole(r):
            out += ["        " + ln if ln else "" for ln in terminal_safe(r.value).split("\n")]
    return "\n".join(out) + "\n"


def _whole(row: MetadataRow) -> bool:
    return is_chat_template(row.key) and isinstance(row.value, str)


# ── JSON and HTML ───────────────────────────────────────────────────────────────────────
def tensors_json(f) -> list[dict]:
    """Every tensor as a dict: name, type, ne, shape, elements, bytes, offset, relative_offset."""
    return [
        {"name": t.name, "type": t.type_name, "ne": list(t.ne), "shape": list(t.shape),
         "elements": t.n_elements, "bytes": t.n_bytes, "offset": t.offset, "relative_offset": t.relative_offset}
        for t in tensor_rows(f)
    ]  # fmt: skip


def metadata_json(f) -> list[dict]:
    """Every key as a dict: key, type, and the value whole, or for an array its length and first items."""
    return [
        {"key": r.key, "type": r.type}
        | ({"length": r.length, "first": r.value} if r.length is not None else {"value": r.value})
        for r in metadata_rows(f)
    ]


def tensors_html(f) -> str:
    """The tensor list as an HTML `<table>` fragment, every name escaped."""
    e = html.escape
    head = ["#", "name", "type", "ne", "shape", "elements", "bytes", "offset"]
    out = [
        '<table class="toycards-tensors">',
        "<thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead>",
        "<tbody>",
    ]
    for t in tensor_rows(f):
        cells = (
            t.index,
            t.name,
            t.type_name,
            ", ".join(map(str, t.ne)),
            " × ".join(map(str, t.shape)),
            t.n_elements,
            t.n_bytes,
            t.offset,
        )
        out.append("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in cells) + "</tr>")
    return "\n".join([*out, "</tbody>", "</table>"])


def metadata_html(f) -> str:
    """The metadata as an HTML `<table>` fragment, every key and value escaped; a chat template in
    full in a `<pre>`."""
    e = html.escape
    out = [
        '<table class="toycards-metadata">',
        "<thead><tr><th>#</th><th>key</th><th>type</th><th>value</th></tr></thead>",
        "<tbody>",
    ]
    for r in metadata_rows(f):
        value = f"<pre>{e(r.value)}</pre>" if _whole(r) else e(_html_value(r))
        out.append(f"<tr><td>{r.index}</td><td>{e(r.key)}</td><td>{e(r.type)}</td><td>{value}</td></tr>")
    return "\n".join([*out, "</tbody>", "</table>"])


def _html_value(row: MetadataRow) -> str:
    if isinstance(row.value, str) and row.length is None:
        return row.value
    return value_text(row)


# ── the reports of one file together ────────────────────────────────────────────────────
def reports_json(f, which: Sequence[str] = REPORTS) -> dict:
    """The reports in `which` (of `REPORTS`) as JSON-ready values, by name."""
    from toycards.inspect.quantmap import quant_map, quant_map_json

    makers = {
        "metadata": metadata_json,
        "tensors": tensors_json,
        # roles in file order: gguf.constants' order would import `gguf`, which describe's JSON does not
        "quant_map": lambda f: quant_map_json(quant_map(f, order_roles=False)),
    }
    return {name: makers[name](f) for name in REPORTS if name in which}


def reports_text(f, which: Sequence[str]) -> str:
    """The reports in `which` as terminal-safe text, one after the other, in `REPORTS` order."""
    from toycards.inspect.quantmap import quant_map, quant_map_text

    makers = {
        "metadata": metadata_text,
        "tensors": tensors_text,
        "quant_map": lambda f: quant_map_text(quant_map(f)),
    }
    return "\n".join(makers[name](f) for name in REPORTS if name in which)


def reports_rich(f, which: Sequence[str]) -> list:
    """The reports in `which` as rich renderables for a terminal: the quant map in colour
    (quantmap.py `quant_map_rich`), the lists as their terminal-safe text."""
    from rich.text import Text

    from toycards.inspect.quantmap import quant_map, quant_map_rich

    out: list = []
    for name in (n for n in REPORTS if n in which):
        out += [Text("")] if out else []
        out += (
            quant_map_rich(quant_map(f))
            if name == "quant_map"
            else [Text(reports_text(f, [name]).rstrip("\n"))]
        )
    return out


def reports_html(f, which: Sequence[str], title: str) -> str:
    """The reports in `which` as a complete page (render/html.py `page`), under `title`."""
    from toycards.inspect.quantmap import quant_map, quant_map_html, role_table_html
    from toycards.render.html import page

    def quant(f) -> str:
        qm = quant_map(f)
        return quant_map_html(qm) + "\n" + role_table_html(qm)

    makers = {"metadata": metadata_html, "tensors": tensors_html, "quant_map": quant}
    headings = {"metadata": "Metadata", "tensors": "Tensors", "quant_map": "Quant map"}
    body = [f"<h1>{html.escape(title)}</h1>"]
    for name in (n for n in REPORTS if n in which):
        body += [f"<h2>{headings[name]}</h2>", makers[name](f)]
    return page(title, body)


def dumps(value: object) -> str:
    """JSON text as describe writes it."""
    return json.dumps(value, ensure_ascii=False, indent=1) + "\n"
