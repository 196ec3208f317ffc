"""`toycards diff`: what changed between two cards, or two GGUF files, as a reviewer reads it.

Owns: `diff_cards(a, b) -> CardDiff` over two IRs (algorithms paired by name, the entry
algorithms with each other whatever their names; hyperparameters compared by type, value
and binding; parameters added, removed, reshaped or rebound; steps aligned per algorithm with
difflib and summarised by the calls that changed, e.g. `Llama step 7: layer_norm → rms_norm`),
`read_side(path)` (a card file, a GGUF file through describe: one that starts with the GGUF magic
or is named *.gguf, or git's /dev/null) and
`diff_paths(a, b)`. Comments, descriptions and numbering are ignored, and numbers are compared
by value (`same_number`: 1e-5 = 1e-05 = 0.00001, 4 = 4.0, and a float32 value as a file holds it
= its shortest spelling); for two GGUF files the
file facts (tensor types, parameter count, tokenizer…) are compared too. A GGUF file is compared
through its own card (library.card_for_file); one that has none, compared with a card, is bound
to that card instead. A GGUF side's binding errors (missing tensor or key, wrong shape) are
changes too: `~ file mismatch in m.gguf: tensor 'x' is missing from the file (…)`.
The text report is read on a terminal: each of its lines is terminal-safe (render/escape.py).
Leaves out: the command line and git's calling convention (cli/), rendering cards (render/).

Qwen3 is Qwen2 with per-head q/k RMSNorm instead of q/k/v biases, and a head size of its own:

>>> from toycards.library import library_card
>>> d = diff_cards(library_card("qwen2"), library_card("qwen3"), "qwen2", "qwen3")
>>> print(d.text().splitlines()[0])
qwen2 → qwen3: 12 differences
>>> for change in d.changes[:7]:
...     print(change.line())
~ Qwen2 → Qwen3 hyperparameter d_h: binding ≔ d_e / H → from "{arch}.attention.key_length" default d_e / H
- Qwen2 → Qwen3 parameter b_q^l (in "blk.{l-1}."): b_q^l ∈ ℝ^{H·d_h} from "attn_q.bias"
- Qwen2 → Qwen3 parameter b_k^l (in "blk.{l-1}."): b_k^l ∈ ℝ^{H_kv·d_h} from "attn_k.bias"
- Qwen2 → Qwen3 parameter b_v^l (in "blk.{l-1}."): b_v^l ∈ ℝ^{H_kv·d_h} from "attn_v.bias"
+ Qwen2 → Qwen3 parameter γ_q^l (in "blk.{l-1}."): γ_q^l ∈ ℝ^{d_h} from "attn_q_norm.weight"
+ Qwen2 → Qwen3 parameter γ_k^l (in "blk.{l-1}."): γ_k^l ∈ ℝ^{d_h} from "attn_k_norm.weight"
~ Qwen2 → Qwen3 step 8: Q ← W_q^l · X̃ + b_q^l · 1^⊺ → Q ← W_q^l · X̃
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from toycards.errors import ToycardsError
from toycards.inspect.literals import number_expr, round_float32
from toycards.lang import ir
from toycards.lang.printer import Renderer, render_card, source_text
from toycards.render.escape import terminal_safe

_R = Renderer()
_STEP = re.compile(r"^ *(\d+)  ( *)(.*)$")
_CALL = re.compile(r"([^\W\d][\w\u0300-\u036f]*)\(")
_MARK = {"added": "+", "removed": "-", "changed": "~"}
NULL_DEVICE = "/dev/null"  # git passes it for the missing side of an added or deleted file


@dataclass(frozen=True)
class Change:
    """One difference. `section`: signature, input, output, hyperparameter, parameter, group,
    step, algorithm or file; `kind`: added, removed or changed."""

    section: str
    kind: str
    where: str  # the algorithm ("Llama", or "GPT2 → Llama"), or "file"
    name: str  # declaration name, "step 5 → 7", or the file fact
    old: str = ""
    new: str = ""
    what: str = ""  # the short summary of a change: "value 2 → 4", "layer_norm → rms_norm"

    def line(self) -> str:
        """`~ Llama step 5 → 7: layer_norm → rms_norm`, `+ Llama parameter ρ: ρ ∈ ℝ^{d_h/2} from …`."""
        label = self.name if self.section in ("step", "file") else f"{self.section} {self.name}".strip()
        head = f"{_MARK[self.kind]} {self.where} {label}"
        if self.kind == "changed":
            summary = self.what if self.section == "step" else self.what or f"{self.old} → {self.new}"
            return f"{head}: {summary}" if summary else f"{head}:"
        return f"{head}: {self.new or self.old}"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class CardDiff:
    a: str
    b: str
    changes: list[Change]

    @property
    def equal(self) -> bool:
        return not self.changes

    def __bool__(self) -> bool:
        return bool(self.changes)

    def text(self) -> str:
        """The review-friendly report, one terminal-safe line per fact; empty cards say so."""
        if not self.changes:
            out = [f"{self.a} and {self.b} describe the same card"]
        else:
            n = len(self.changes)
            out = [f"{self.a} → {self.b}: {n} difference{'s' * (n != 1)}"]
        for c in self.changes:
            out.append(c.line())
            if c.section == "step" and c.kind == "changed":
                out += [f"    - {c.old}", f"    + {c.new}"]
        return "".join(terminal_safe(line, newlines=False) + "\n" for line in out)

    def to_json(self) -> dict:
        return {"a": self.a, "b": self.b, "equal": self.equal, "changes": [c.to_json() for c in self.changes]}


# ── rendering parts of declarations ─────────────────────────────────────────────────────
def _binding_text(b: ir.Binding | None) -> str:
    if b is None:
        return ""
    if b.kind == "derived":
        return f"≔ {_R.expr(b.expr)}"
    if b.kind == "default":
        return f"default {_R.expr(b.default)}"
    alts = [" or ".join(source_text(_R, s) for s in group) for group in b.sources]
    default = f" default {_R.expr(b.default)}" if b.default is not None else ""
    return "from " + ", ".join(alts) + default


def _decl_text(d: ir.Decl) -> str:
    value = f" = {_R.expr(d.value)}" if d.value is not None else ""
    binding = _binding_text(d.binding)
    return f"{', '.join(d.names)} ∈ {_R.type(d.type)}{value}" + (f" {binding}" if binding else "")


def _single(d: ir.Decl, i: int) -> ir.Decl:
    """The i-th name of a shared declaration `γ, β ∈ ℝ^{d_e} from "a", "b"` on its own."""
    b = d.binding
    if b is not None and b.kind == "from" and len(b.sources) == len(d.names) > 1:
        b = dataclasses.replace(b, sources=(b.sources[i],))
    return dataclasses.replace(d, names=(d.names[i],), binding=b)


def _by_name(decls) -> dict[str, ir.Decl]:
    """One entry per declared name (a shared declaration `γ, β ∈ …` gives two)."""
    return {n: _single(d, i) for d in decls for i, n in enumerate(d.names)}


# ── numbers ─────────────────────────────────────────────────────────────────────────────
def _decimal(text: str):
    from decimal import Decimal, InvalidOperation

    try:
        x = Decimal(text)
    except InvalidOperation:
        return None
    return x if x.is_finite() else None


def same_number(a: str, b: str) -> bool:
    """Whether two numeric literals of a card bind to the same value: as decimals, exactly
    (1e-5 = 1e-05 = 0.00001; 4 = 4.0, an integer and a float compared as the values they are),
    or a float32 value written in full, as a file holds it, and its shortest spelling (the one
    describe writes, literals.number_expr): 9.999999747378752e-06 = 1e-05.

    >>> same_number("1e-5", "0.00001"), same_number("4", "4.0"), same_number("9.999999747378752e-06", "1e-5")
    (True, True, True)
    >>> same_number("1e-5", "1.00001e-5"), same_number("4", "4.0000001"), same_number("1e-5", "1e-6")
    (False, False, False)
    """
    x, y = _decimal(a), _decimal(b)
    if x is None or y is None:
        return a == b
    return x == y or _float32_spelling(x) == y or _float32_spelling(y) == x


def _float32_spelling(x):
    """The shortest spelling of `x` where `x` is a float32 value (else None), as a Decimal."""
    v = abs(float(x))
    if not math.isfinite(v) or v != round_float32(v):
        return None
    return _decimal(number_expr(v, float32=True).text).copy_sign(x)


def _number_key(text: str) -> str:
    """One spelling per decimal value (`1e-5`, `1e-05`, `0.00001` → `0.00001`) to align steps by."""
    x = _decimal(text)
    return text if x is None else format(x.normalize(), "f")


def same(x: object, y: object) -> bool:
    """IR nodes equal but for the spelling of their numbers (`same_number`); positions ignored."""
    if isinstance(x, ir.Num) and isinstance(y, ir.Num):
        return same_number(x.text, y.text)
    if isinstance(x, ir.Source) and isinstance(y, ir.Source) and x.const and y.const:
        return same_number(x.const, y.const) and same(
            dataclasses.replace(x, const=""), dataclasses.replace(y, const="")
        )
    if isinstance(x, tuple) and isinstance(y, tuple):
        return len(x) == len(y) and all(same(u, v) for u, v in zip(x, y))
    if dataclasses.is_dataclass(x) and not isinstance(x, type) and type(x) is type(y):
        fields = (f.name for f in dataclasses.fields(x) if f.compare)
        return all(same(getattr(x, f), getattr(y, f)) for f in fields)
    return x == y


def _numbers_as_keys(node):
    """`node` with each number spelt by `_number_key`, for aligning steps by what they compute."""
    if isinstance(node, ir.Num):
        return dataclasses.replace(node, text=_number_key(node.text))
    if isinstance(node, ir.Source) and node.const:
        return dataclasses.replace(node, const=_number_key(node.const))
    if isinstance(node, tuple):
        return tuple(_numbers_as_keys(n) for n in node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        fields = [f.name for f in dataclasses.fields(node) if f.compare and f.init]
        return dataclasses.replace(node, **{f: _numbers_as_keys(getattr(node, f)) for f in fields})
    return node


# ── declarations ────────────────────────────────────────────────────────────────────────
def _compare_decls(section: str, where: str, a: dict, b: dict, parts) -> list[Change]:
    """Removed and changed declarations in a's order, then added ones in b's order. `parts(x, y)`
    gives (label, x's part, y's part, how a part is shown) for the parts that are compared."""
    out = []
    for name, x in a.items():
        if name not in b:
            out.append(Change(section, "removed", where, name, old=_decl_text(x)))
            continue
        y = b[name]
        whats = [
            f"{label} {show(u) or '(no value)'} → {show(v) or '(no value)'}"
            for label, u, v, show in parts(x, y)
            if not same(u, v)
        ]
        if whats:
            out.append(
                Change(section, "changed", where, name, _decl_text(x), _decl_text(y), "; ".join(whats))
            )
    return out + [Change(section, "added", where, n, new=_decl_text(y)) for n, y in b.items() if n not in a]


def _value_text(e: ir.Expr | None) -> str:
    return _R.expr(e) if e is not None else ""


def _hyper_parts(x: ir.Decl, y: ir.Decl):
    return [("type", x.type, y.type, _R.type), ("value", x.value, y.value, _value_text),
            ("binding", x.binding, y.binding, _binding_text)]  # fmt: skip


def _param_parts(x: ir.Decl, y: ir.Decl):
    return [("shape", x.type, y.type, _R.type), ("binding", x.binding, y.binding, _binding_text)]


def _params(algo: ir.Algorithm) -> tuple[dict[str, ir.Decl], dict[str, str]]:
    """Parameters by name (per-layer ones with their group's tensor prefix), and the groups."""
    decls, groups = {}, {}
    for d, g in algo.all_params():
        for i, n in enumerate(d.names):
            decls[f'{n} (in "{g.prefix}")' if g else n] = _single(d, i)
    for item in algo.param_decls:
        if isinstance(item, ir.ParamGroup):
            groups[item.prefix] = f"for {item.var} ∈ [{_R.dim(item.bound)}]"
    return decls, groups


# ── steps ───────────────────────────────────────────────────────────────────────────────
def _strip(stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """Steps without comments (whole-line ones dropped, trailing ones emptied)."""
    out = []
    for s in stmts:
        if isinstance(s, ir.Comment):
            continue
        changes = {f: "" for f in ("comment", "end_comment", "else_comment") if hasattr(s, f)}
        for f in ("body", "then", "orelse"):
            if hasattr(s, f):
                changes[f] = _strip(getattr(s, f))
        out.append(dataclasses.replace(s, **changes))
    return tuple(out)


def step_lines(algo: ir.Algorithm) -> list[tuple[int, str]]:
    """(number, text) of each numbered step as the formatter prints it, comments left out."""
    bare = dataclasses.replace(
        algo, input_decls=(), output_decls=(), hyper_decls=(), param_decls=(), state_decls=(), description="",
        body=_strip(algo.body),
    )  # fmt: skip
    out = []
    for line in render_card(ir.Card((bare,))).splitlines():
        m = _STEP.match(line)
        if m:
            out.append((int(m[1]), m[2] + " ".join(m[3].split())))
    return out


def _calls_summary(old: str, new: str) -> str:
    a, b = _CALL.findall(old), _CALL.findall(new)
    gone, came = [f for f in dict.fromkeys(a) if f not in b], [f for f in dict.fromkeys(b) if f not in a]
    if gone and came:
        return f"{', '.join(gone)} → {', '.join(came)}"
    return f"no longer calls {', '.join(gone)}" if gone else (f"now calls {', '.join(came)}" if came else "")


def _steps(algo: ir.Algorithm) -> tuple[list[tuple[int, str]], list[str]]:
    """`step_lines(algo)`, and each step's text with its numbers spelt by value (what steps are
    aligned and compared by)."""
    return step_lines(algo), [t for _, t in step_lines(_numbers_as_keys(algo))]


def _compare_steps(where: str, x: ir.Algorithm, y: ir.Algorithm) -> list[Change]:
    """Steps aligned by what they compute (difflib over their text, numbers by value); inside a
    replaced run, steps are paired in order where they are alike (`_likeness`), the pairing with
    the most likeness in all, and the rest are removed or added."""
    out = []
    (a, a_keys), (b, b_keys) = _steps(x), _steps(y)
    sm = difflib.SequenceMatcher(None, a_keys, b_keys, autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            continue
        olds, news = a[i1:i2], b[j1:j2]
        i = j = 0
        for pi, pj in _pairing([t for _, t in olds], [t for _, t in news]) + [(len(olds), len(news))]:
            out += [Change("step", "removed", where, f"step {n}", old=t.strip()) for n, t in olds[i:pi]]
            out += [Change("step", "added", where, f"step {m}", new=t.strip()) for m, t in news[j:pj]]
            if pi < len(olds):
                (n, old), (m, new) = olds[pi], news[pj]
                label = f"step {n}" if n == m else f"step {n} → {m}"
                what = _calls_summary(old, new) or f"{old.strip()} → {new.strip()}"
                out.append(Change("step", "changed", where, label, old.strip(), new.strip(), what))
            i, j = pi + 1, pj + 1
    return out


def _pairing(olds: list[str], news: list[str]) -> list[tuple[int, int]]:
    """Index pairs (in order) of alike steps whose likeness adds up to the most."""
    n, m = len(olds), len(news)
    like = [[_likeness(o, w) for w in news] for o in olds]
    best = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            take = like[i][j] + best[i + 1][j + 1] if like[i][j] else 0.0
            best[i][j] = max(best[i + 1][j], best[i][j + 1], take)
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if like[i][j] and best[i][j] == like[i][j] + best[i + 1][j + 1]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif best[i][j] == best[i + 1][j]:
            i += 1
        else:
            j += 1
    return pairs


def _likeness(old: str, new: str) -> float:
    """How alike two steps are (0: not one step changed): the similarity of their text when it
    is 0.6 or more, or, for an update of the same name by calls (`X ← X + GELU_tanh(…)` and
    `X ← X + SwiGLU(…)`), whatever it is."""
    ratio = difflib.SequenceMatcher(None, old, new, autojunk=False).ratio()
    if ratio >= 0.6:
        return ratio
    target = old.split("←", 1)[0].strip()
    same = bool(target) and target == new.split("←", 1)[0].strip()
    return ratio if same and _CALL.findall(old) and _CALL.findall(new) else 0.0


# ── algorithms ──────────────────────────────────────────────────────────────────────────
def _signature(a: ir.Algorithm) -> str:
    params = f" | {', '.join(a.params)}" if a.params else ""
    return f"{a.output} ← {a.name}({', '.join(a.inputs)}{params})"


def _compare_algorithms(x: ir.Algorithm, y: ir.Algorithm) -> list[Change]:
    where = x.name if x.name == y.name else f"{x.name} → {y.name}"
    out = []
    if (x.output, x.inputs, x.params) != (y.output, y.inputs, y.params):
        out.append(Change("signature", "changed", where, "", _signature(x), _signature(y)))
    out += _compare_decls("input", where, _by_name(x.input_decls), _by_name(y.input_decls), _param_parts)
    out += _compare_decls("output", where, _by_name(x.output_decls), _by_name(y.output_decls), _param_parts)
    out += _compare_decls("state", where, _by_name(x.state_decls), _by_name(y.state_decls), _param_parts)
    out += _compare_decls(
        "hyperparameter", where, _by_name(x.hyper_decls), _by_name(y.hyper_decls), _hyper_parts
    )
    (pa, ga), (pb, gb) = _params(x), _params(y)
    for prefix in ga.keys() & gb.keys():
        if ga[prefix] != gb[prefix]:
            out.append(Change("group", "changed", where, f'"{prefix}"', ga[prefix], gb[prefix]))
    out += _compare_decls("parameter", where, pa, pb, _param_parts)
    return out + _compare_steps(where, x, y)


def _pairs(a: ir.Card, b: ir.Card) -> list[tuple[ir.Algorithm | None, ir.Algorithm | None]]:
    """Algorithm pairs: the entry points with each other, the rest by name."""
    rest_a, rest_b = list(a.algorithms), list(b.algorithms)
    pairs: list = [(rest_a.pop(), rest_b.pop())] if rest_a and rest_b else []
    unmatched = {y.name: y for y in rest_b}
    pairs += [(x, unmatched.pop(x.name, None)) for x in rest_a]
    return pairs + [(None, y) for y in unmatched.values()]


def diff_cards(a: ir.Card, b: ir.Card, a_name: str = "a", b_name: str = "b") -> CardDiff:
    """The semantic differences between two cards (see the module docstring)."""
    changes: list[Change] = []
    for x, y in _pairs(a, b):
        if x is None or y is None:
            kind, algo = ("added", y) if x is None else ("removed", x)
            text = f"{_signature(algo)} ({len(step_lines(algo))} steps)"
            changes.append(
                Change("algorithm", kind, algo.name, "", old=text if x else "", new=text if y else "")
            )
        else:
            changes += _compare_algorithms(x, y)
    changes += _file_changes(a, b)
    changes += _mismatches(a, a_name) + _mismatches(b, b_name)
    return CardDiff(a_name, b_name, changes)


# ── GGUF files ──────────────────────────────────────────────────────────────────────────
def _file_facts(card: ir.Card) -> dict[str, str] | None:
    header = getattr(card, "header", None)
    if header is None:
        return None
    tok = header.tokenizer
    return {
        "architecture": str(header.architecture),
        "name": str(header.general.get("general.name", "")),
        "parameters": f"{header.n_params:,}",
        "tensor types": ", ".join(f"{t} ×{n}" for t, n in header.tensor_types.items()),
        "context length": str(header.context_length),
        "RoPE": str(header.rope.get("type")),
        "tokenizer": f"{tok.get('model')} (pre {tok.get('pre')}), {tok.get('vocab_size')} tokens",
        "chat template": "present" if header.chat_template is not None else "none",
    }


def _file_changes(a: ir.Card, b: ir.Card) -> list[Change]:
    fa, fb = _file_facts(a), _file_facts(b)
    if fa is None or fb is None:
        return []
    return [Change("file", "changed", "file", k, fa[k], fb[k]) for k in fa if fa[k] != fb[k]]


def _mismatches(card: ir.Card, name: str) -> list[Change]:
    """The binding errors of a GGUF side (a described card), one change each."""
    errors = getattr(card, "errors", [])
    return [Change("file", "changed", "file", f"mismatch in {name}", what=d.message) for d in errors]


def _bound_to(side: ir.Card, path, other: ir.Card, other_path) -> ir.Card:
    """A GGUF side with no card of its own, opposite a card, is described with that card."""
    if getattr(side, "declaration_only", False) and other.algorithms and not hasattr(other, "header"):
        from toycards.inspect.describe import describe

        return describe(path, card=other_path)
    return side


def read_side(path: str | os.PathLike) -> ir.Card:
    """A card file, a GGUF file (its bound card, through describe), or /dev/null (no algorithms)."""
    from toycards.lang.parse import parse

    text = os.fspath(path)
    if text == NULL_DEVICE:
        return ir.Card(())
    p = Path(text)
    if not p.exists():
        raise ToycardsError(f"{text}: no such file")
    if not p.is_file():
        raise ToycardsError(f"{text}: not a file (a card or a GGUF file)")
    try:
        with open(p, "rb") as fh:
            magic = fh.read(4)
    except OSError as e:
        raise ToycardsError(f"{text}: cannot read: {e.strerror or e}") from None
    if magic == b"GGUF" or p.name.lower().endswith(".gguf"):  # the latter: the reader says what is wrong
        from toycards.inspect.describe import describe

        return describe(p)
    return parse(p)


def diff_paths(a: str | os.PathLike, b: str | os.PathLike, a_name: str = "", b_name: str = "") -> CardDiff:
    """`diff_cards` of two files, each a card or a GGUF file (see the module docstring)."""
    x, y = read_side(a), read_side(b)
    x, y = _bound_to(x, a, y, b), _bound_to(y, b, x, a)
    return diff_cards(x, y, a_name or os.fspath(a), b_name or os.fspath(b))
