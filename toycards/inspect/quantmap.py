"""The quant map of a GGUF file: the ggml type of each tensor role in each layer, bits per weight,
and the llama.cpp mix (Q4_K_M, Q8_0, …) the types follow.

Owns: `quant_map(f) -> QuantMap` (the grid of roles × layers, per-role and whole-file bits per
weight, the `Mix` verdict) and its views: `quant_map_text` (plain, for a pipe), `quant_map_rich`
(the terminal: a colour per type, by its bits per weight), `quant_map_html` and `role_table_html`
(`<table>` fragments, every string from the file escaped) and `quant_map_json`.
Leaves out: which type llama.cpp gives a tensor (quantrule.py), reading the file (gguf/reader.py),
the command line (cli/files.py).

A role is a tensor name without its layer and without `.weight` (`blk.3.attn_q.weight` →
`attn_q` in layer 3, `blk.3.attn_q.bias` → `attn_q.bias`, `token_embd.weight` → `token_embd`).
The grid has a column for each role that is a matrix in some layer and a row for each run of
layers whose types are all the same (`4–5`); every role, matrices, vectors and tensors outside
the layers, is in the per-role table. Bits per weight are tensor bytes × 8 / elements; tensors of
a type toycards does not know count in neither.

The mix: from `general.file_type` when the file has it, checked against llama-quantize's rule for
that file type (quantrule.py); "custom" when a tensor's type differs from the rule, or "X-like"
when the types follow another file type's rule instead. A file without `general.file_type` is
"X-like" for the first rule its types follow, else "custom".

The repository's example file, written with its matrices in F16:

>>> from toycards.gguf.reader import open_gguf
>>> with open_gguf("examples/tiny-llama.gguf") as f:
...     qm = quant_map(f)
>>> qm.mix.label, round(qm.bits_per_weight, 2), qm.grid[0]["attn_q"], qm.grid[1]["ffn_norm"]
('F16', 16.04, 'F16', 'F32')
"""

from __future__ import annotations

import html
import re
from collections import Counter
from dataclasses import dataclass, field

from toycards.gguf.facts import QUANT_NAMES, QUANT_SIZES, Keys, file_type_name
from toycards.inspect.quantrule import CHECKED_FILE_TYPES, quantizable, rule_types
from toycards.render.escape import terminal_safe

# (fewest bits per weight, terminal style, HTML background): a type's colour follows its size,
# so that every ggml type has one and types of one size look alike
TYPE_COLOURS: tuple[tuple[float, str, str], ...] = (
    (32.0, "bright_black", "#e5e7eb"),  # F32, I32, F64, I64
    (16.0, "blue", "#dbeafe"),  # F16, BF16, I16
    (8.0, "green", "#dcfce7"),  # Q8_0, Q8_K, I8
    (6.0, "cyan", "#cffafe"),  # Q6_K, Q5_1
    (5.0, "yellow", "#fef9c3"),  # Q5_0, Q5_K, Q4_1
    (4.0, "magenta", "#fae8ff"),  # Q4_0, Q4_K, IQ4_NL, IQ4_XS, MXFP4
    (3.0, "red", "#fee2e2"),  # Q3_K, IQ3_S, IQ3_XXS
    (0.0, "bright_red", "#fecaca"),  # Q2_K, IQ2_*, IQ1_*, TQ*
)
TYPE_BITS: dict[str, float] = {QUANT_NAMES[t]: size * 8 / block for t, (block, size) in QUANT_SIZES.items()}
"""ggml type → bits per weight of its blocks: Q4_K → 4.5, Q6_K → 6.5625, F16 → 16."""
SHOWN_DIFFERENCES = 10  # tensors that break the rule, listed by name on a terminal
_LAYER = re.compile(r"(?P<pre>(?:[^.]+\.)*?)blk\.(?P<i>\d+)\.(?P<rest>.+)")


@dataclass(frozen=True)
class Mix:
    """Which llama.cpp file type the tensor types look like."""

    label: str  # "Q4_K_M" (general.file_type, followed), "Q4_K_M-like", "custom", "IQ2_XS" (not checked)
    file_type: str | None  # llama.cpp's name of general.file_type; None when the file lacks it
    rule: str | None  # the file type whose rule the types follow
    checked: bool  # False: no rule in the table for general.file_type, or no tensor it quantises
    note: str  # one line that says why
    differences: tuple[tuple[str, str, str], ...] = ()  # (tensor, its type, general.file_type's rule)


@dataclass(frozen=True)
class RoleStats:
    """The tensors of one role, all layers together."""

    role: str
    types: dict[str, int]  # ggml type → tensor count, most frequent first
    n_tensors: int
    n_elements: int  # of tensors of a known type
    n_bytes: int
    layered: bool  # in the layers (blk.N.), or outside them

    @property
    def bits_per_weight(self) -> float | None:
        return self.n_bytes * 8 / self.n_elements if self.n_elements else None


@dataclass(frozen=True)
class QuantMap:
    """The ggml types of a file by role and layer; see the module docstring."""

    path: str
    layers: tuple[int, ...]
    grid: dict[int, dict[str, str]]  # layer → role → ggml type
    grid_roles: tuple[str, ...]  # the grid's columns: roles that are a matrix in some layer
    outside: dict[str, str]  # role → type of the tensors outside the layers
    roles: tuple[RoleStats, ...]  # every role: outside the layers first, then the layers'
    n_elements: int
    n_bytes: int
    mix: Mix
    unknown: tuple[str, ...] = field(default=())  # tensors of a type toycards does not know

    @property
    def bits_per_weight(self) -> float | None:
        return self.n_bytes * 8 / self.n_elements if self.n_elements else None

    def runs(self) -> list[tuple[int, int]]:
        """(first, last) layer of each run of consecutive layers with the same types."""
        out: list[tuple[int, int]] = []
        for layer in self.layers:
            if out and out[-1][1] == layer - 1 and self.grid[layer] == self.grid[out[-1][0]]:
                out[-1] = (out[-1][0], layer)
            else:
                out.append((layer, layer))
        return out


def split_name(name: str) -> tuple[int | None, str]:
    """(layer, role) of a tensor name.

    >>> split_name("blk.12.ffn_down.weight"), split_name("output.weight"), split_name("v.blk.0.attn_q.bias")
    ((12, 'ffn_down'), (None, 'output'), (0, 'v.attn_q.bias'))
    """
    m = _LAYER.fullmatch(name)
    layer, role = (int(m["i"]), m["pre"] + m["rest"]) if m else (None, name)
    return layer, role.removesuffix(".weight")


def quant_map(f, order_roles: bool = True) -> QuantMap:
    """The quant map of an open GGUFFile; its roles in gguf.constants' order (`_role_order`), or with
    `order_roles=False` in the order of their first tensor in the file (which does not import `gguf`)."""
    arch = f.get(Keys.General.ARCHITECTURE)
    grid: dict[int, dict[str, str]] = {}
    outside: dict[str, str] = {}
    members: dict[str, list] = {}  # role → its tensors, in file order
    matrices: set[str] = set()
    for t in f.tensors.values():
        layer, role = split_name(t.name)
        members.setdefault(role, []).append(t)
        if layer is None:
            outside[role] = t.type_name
            continue
        grid.setdefault(layer, {})[role] = t.type_name
        if sum(d > 1 for d in t.shape) >= 2:
            matrices.add(role)
    order = list(members)
    if order_roles:
        order = _role_order(order, f.tensors, arch if isinstance(arch, str) else "")
    stats = [_role_stats(r, members[r], r not in outside) for r in order]
    known = [t for t in f.tensors.values() if t.known_type]
    return QuantMap(
        path=str(f.path),
        layers=tuple(sorted(grid)),
        grid=grid,
        grid_roles=tuple(r for r in order if r in matrices),
        outside=outside,
        roles=tuple(sorted(stats, key=lambda s: s.layered)),
        n_elements=sum(t.n_elements for t in known),
        n_bytes=sum(t.n_bytes for t in known),
        mix=mix(f),
        unknown=tuple(t.name for t in f.tensors.values() if not t.known_type),
    )


def _role_order(roles: list[str], tensors: dict, arch: str) -> list[str]:
    """Roles in gguf.constants' order of MODEL_TENSOR (attn_q, attn_k, attn_v, attn_output, …, ffn_gate,
    ffn_down, ffn_up), weights before biases; roles it does not know after, in file order."""
    from toycards.inspect.inventory import model_tensor

    first = {}
    for t in tensors.values():
        first.setdefault(split_name(t.name)[1], t.name)

    def key(role: str) -> tuple[int, bool, int]:
        known = model_tensor(first[role], arch or "llama")
        return (
            int(known) if known is not None else 1 << 30,
            not first[role].endswith(".weight"),
            roles.index(role),
        )

    return sorted(roles, key=key)


def _role_stats(role: str, tensors: list, layered: bool) -> RoleStats:
    counts = Counter(t.type_name for t in tensors)
    known = [t for t in tensors if t.known_type]
    return RoleStats(
        role=role,
        types=dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        n_tensors=len(tensors),
        n_elements=sum(t.n_elements for t in known),
        n_bytes=sum(t.n_bytes for t in known),
        layered=layered,
    )


# ── the mix ─────────────────────────────────────────────────────────────────────────────
def mix(f) -> Mix:
    """The llama.cpp file type the tensor types of `f` follow (see the module docstring)."""
    code = f.get(Keys.General.FILE_TYPE)
    named = file_type_name(code) if isinstance(code, int) and not isinstance(code, bool) else None
    if not any(quantizable(t.name, tuple(t.shape)) for t in f.tensors.values()):
        why = "no tensor that llama.cpp quantises, so no file type can be told from the types"
        return Mix(named or "none", named, None, False, why)
    if named is not None and named not in CHECKED_FILE_TYPES:
        why = f"general.file_type is {named}; toycards has no table of llama.cpp's rule for it (not checked)"
        return Mix(named, named, None, False, why)
    differences = _differences(f, named) if named else ()
    if named and not differences:
        follows = f"general.file_type {code}, and the types follow llama.cpp's {named} rule"
        return Mix(named, named, named, True, follows)
    other = next((ft for ft in CHECKED_FILE_TYPES if ft != named and not _differences(f, ft)), None)
    if named:
        said = f"general.file_type says {named}, but {len(differences)} tensor(s) differ from its rule"
        also = f"; the types follow llama.cpp's {other} rule" if other else ""
        return Mix(f"{other}-like" if other else "custom", named, other, True, said + also, differences)
    shown = repr(code) if len(repr(code)) <= 40 else repr(code)[:39] + "…"
    why = "no general.file_type" if code is None else f"general.file_type {shown} is not one llama.cpp names"
    if other:
        return Mix(f"{other}-like", None, other, True, f"{why}; the types follow llama.cpp's {other} rule")
    return Mix("custom", None, None, True, f"{why}, and the types follow none of llama.cpp's rules")


def _differences(f, file_type: str) -> tuple[tuple[str, str, str], ...]:
    """(tensor, its type, the rule's type) of each tensor whose type the rule does not give."""
    rule = rule_types(f, file_type) or {}
    return tuple(
        (t.name, t.type_name, rule[t.name][0]) for t in f.tensors.values() if t.type_name not in rule[t.name]
    )


# ── views ───────────────────────────────────────────────────────────────────────────────
def type_colour(type_name: str) -> tuple[str, str]:
    """(terminal style, HTML background) of a ggml type, by its bits per weight; none for an unknown type."""
    bits = TYPE_BITS.get(type_name)
    if bits is None:
        return "", ""
    return next((style, css) for least, style, css in TYPE_COLOURS if bits >= least)


def _runs_label(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}–{last}"


def _bits(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _types_text(types: dict[str, int]) -> str:
    return ", ".join(t if len(types) == 1 else f"{t} ×{n}" for t, n in types.items())


def summary_lines(qm: QuantMap) -> list[str]:
    """The lines above the tables: the mix, the bits per weight, the tensors off the rule."""
    out = [f"mix: {qm.mix.label} ({qm.mix.note})"]
    out.append(
        f"bits per weight: {_bits(qm.bits_per_weight)} ({qm.n_bytes:,} bytes of tensor data for "
        f"{qm.n_elements:,} weights)"
    )
    for name, actual, wanted in qm.mix.differences[:SHOWN_DIFFERENCES]:
        out.append(f"  {name} is {actual}; the {qm.mix.file_type} rule gives {wanted}")
    if len(qm.mix.differences) > SHOWN_DIFFERENCES:
        out.append(
            f"  … and {len(qm.mix.differences) - SHOWN_DIFFERENCES} more (--format json lists them all)"
        )
    if qm.unknown:
        out.append(f"{len(qm.unknown)} tensor(s) of a type toycards does not know are left out of the bits")
    return out


def grid_rows(qm: QuantMap) -> list[list[str]]:
    """The grid as text cells: a header, then one row per run of layers (`·`: no such tensor)."""
    rows = [["layers", *qm.grid_roles]]
    for first, last in qm.runs():
        rows.append([_runs_label(first, last), *(qm.grid[first].get(r, "·") for r in qm.grid_roles)])
    return rows


def role_rows(qm: QuantMap) -> list[list[str]]:
    """The per-role table as text cells, with a header and a last row for the whole file."""
    rows = [["role", "tensors", "types", "weights", "bytes", "bits/weight"]]
    for s in qm.roles:
        rows.append(
            [
                s.role,
                f"{s.n_tensors:,}",
                _types_text(s.types),
                f"{s.n_elements:,}",
                f"{s.n_bytes:,}",
                _bits(s.bits_per_weight),
            ]
        )
    n = sum(s.n_tensors for s in qm.roles)
    rows.append(["all", f"{n:,}", "", f"{qm.n_elements:,}", f"{qm.n_bytes:,}", _bits(qm.bits_per_weight)])
    return rows


def _aligned(rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    cell = lambda i, c: c.rjust(widths[i]) if i in right else c.ljust(widths[i])  # noqa: E731
    return ["  ".join(cell(i, c) for i, c in enumerate(r)).rstrip() for r in rows]


def quant_map_text(qm: QuantMap) -> str:
    """The quant map as plain, terminal-safe text: summary, grid, per-role table."""
    safe = lambda rows: [[terminal_safe(c, newlines=False) for c in r] for r in rows]  # noqa: E731
    lines = [f"quant map of {qm.path}", *summary_lines(qm)]
    out = [terminal_safe(line, newlines=False) for line in lines] + [""]
    if qm.grid_roles:
        out += [*_aligned(safe(grid_rows(qm))), ""]
    out += _aligned(safe(role_rows(qm)), right={1, 3, 4, 5})
    return "\n".join(out) + "\n"


def quant_map_rich(qm: QuantMap) -> list:
    """The quant map as rich renderables for a terminal: each type cell coloured by its bits
    per weight. Every string from the file goes in as terminal-safe `Text`, never as markup."""
    from rich.table import Table
    from rich.text import Text

    safe = lambda s, style="": Text(terminal_safe(s, newlines=False), style=style)  # noqa: E731
    typed = lambda t: safe(t, type_colour(t)[0])  # noqa: E731
    out: list = [safe(f"quant map of {qm.path}", "bold")]
    out += [safe(line, "bold" if i == 0 else "") for i, line in enumerate(summary_lines(qm))]
    if qm.grid_roles:
        grid = Table(box=None, pad_edge=False, header_style="bold cyan")
        for i, role in enumerate(("layers", *qm.grid_roles)):
            grid.add_column(safe(role), justify="right" if i == 0 else "left", no_wrap=True)
        for row in grid_rows(qm)[1:]:
            grid.add_row(safe(row[0], "bold"), *(typed(t) for t in row[1:]))
        out += [Text(""), grid]
    roles = Table(box=None, pad_edge=False, header_style="bold cyan")
    for i, head in enumerate(role_rows(qm)[0]):
        roles.add_column(head, justify="right" if i in (1, 3, 4, 5) else "left")
    for s in qm.roles:
        types = Text(", ").join(
            typed(t) if len(s.types) == 1 else typed(t) + Text(f" ×{n}") for t, n in s.types.items()
        )
        cells = (f"{s.n_tensors:,}", types, f"{s.n_elements:,}", f"{s.n_bytes:,}", _bits(s.bits_per_weight))
        roles.add_row(safe(s.role), *(c if isinstance(c, Text) else Text(c) for c in cells))
    roles.add_row(*(Text(c, style="bold") for c in role_rows(qm)[-1]))
    return [*out, Text(""), roles]


def _td(type_name: str) -> str:
    css = type_colour(type_name)[1]
    style = f' style="background:{css}"' if css else ""
    return f"<td{style}>{html.escape(type_name)}</td>"


def quant_map_html(qm: QuantMap) -> str:
    """The grid as an HTML `<table>` fragment: a caption with the mix and the bits per weight, a
    coloured cell per role and run of layers, a footer row with each role's bits per weight."""
    e = html.escape
    stats = {s.role: s for s in qm.roles}
    caption = f"{qm.mix.label}: {_bits(qm.bits_per_weight)} bits per weight ({qm.mix.note})"
    out = ['<table class="toycards-quantmap">', f"<caption>{e(caption)}</caption>"]
    out.append("<thead><tr>" + "".join(f"<th>{e(c)}</th>" for c in grid_rows(qm)[0]) + "</tr></thead>")
    out.append("<tbody>")
    for row in grid_rows(qm)[1:]:
        out.append(f"<tr><th>{e(row[0])}</th>" + "".join(_td(t) for t in row[1:]) + "</tr>")
    out.append("</tbody>")
    bits = "".join(f"<td>{_bits(stats[r].bits_per_weight)}</td>" for r in qm.grid_roles)
    out += [f"<tfoot><tr><th>bits/weight</th>{bits}</tr></tfoot>", "</table>"]
    return "\n".join(out)


def role_table_html(qm: QuantMap) -> str:
    """The per-role table as an HTML `<table>` fragment, each type coloured like the grid's."""
    e = html.escape
    head, *_, total = role_rows(qm)
    out = [
        '<table class="toycards-quantroles">',
        "<thead><tr>" + "".join(f"<th>{e(c)}</th>" for c in head) + "</tr></thead>",
    ]
    out.append("<tbody>")
    for s in qm.roles:
        types = ", ".join(
            f'<span style="background:{type_colour(t)[1] or "none"}">{e(t)}</span>'
            + (f" ×{n}" if len(s.types) > 1 else "")
            for t, n in s.types.items()
        )
        nums = (f"{s.n_tensors:,}", types, f"{s.n_elements:,}", f"{s.n_bytes:,}", _bits(s.bits_per_weight))
        out.append(f"<tr><th>{e(s.role)}</th>" + "".join(f"<td>{c}</td>" for c in nums) + "</tr>")
    out.append("</tbody>")
    out += ["<tfoot><tr>" + "".join(f"<th>{e(c)}</th>" for c in total) + "</tr></tfoot>", "</table>"]
    return "\n".join(out)


def quant_map_json(qm: QuantMap) -> dict:
    """The quant map as a JSON-ready dict: the mix, the bits, every role, the grid by role."""
    m = qm.mix
    return {
        "mix": {
            "label": m.label, "file_type": m.file_type, "rule": m.rule, "checked": m.checked, "note": m.note,
            "differences": [{"tensor": n, "type": a, "rule": r} for n, a, r in m.differences],
        },
        "bits_per_weight": qm.bits_per_weight,
        "bytes": qm.n_bytes,
        "elements": qm.n_elements,
        "layers": list(qm.layers),
        "grid": {role: [qm.grid[i].get(role) for i in qm.layers] for role in qm.grid_roles},
        "outside_layers": dict(qm.outside),
        "roles": [
            {"role": s.role, "layered": s.layered, "tensors": s.n_tensors, "types": s.types,
             "elements": s.n_elements, "bytes": s.n_bytes, "bits_per_weight": s.bits_per_weight}
            for s in qm.roles
        ],
        "unknown_type_tensors": list(qm.unknown),
    }  # fmt: skip
