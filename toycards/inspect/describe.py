"""`toycards describe`: any GGUF file → the bound card that describes it.

Owns: `describe(path, card=None) -> DescribedCard`, which picks the card for the file (`card`
when given, else the card embedded under `toycards.card`, else `ARCH.card` from a folder of
TOYCARDS_CARDS, else the library card for `general.architecture`: library.card_for_file; else
a declaration-only card), binds it (models/binding.py), collects every mismatch by name (missing or
unexpected tensor, wrong shape, unreadable type, missing metadata key, implausible values),
and writes the concrete values into the card: `L ∈ ℕ = 30 from "{arch}.block_count"`.
Leaves out: the header facts (header.py), declaration-only cards (inventory.py), output
formats (formats.py), the command line (cli/).

A `DescribedCard` is an `ir.Card`: it checks, renders (`str(card)` is the `--format card`
text), generates code and loads like any other card, and it carries `header`, `problems`,
`origin` ("given", "embedded", "user", "library" or "declaration-only"), `card_path` (where
the card came from) and `notice`.

The repository's example file (examples/make_example.py: a 2-layer Llama, d_e = 64):

>>> from toycards.lang.printer import Renderer, decl_parts
>>> card = describe("examples/tiny-llama.gguf")
>>> decl_parts(Renderer(), card.main.hyper_decls[0])[:2]
('L ∈ ℕ = 2', 'from "{arch}.block_count"')
>>> card.header.n_params, card.origin, card.problems
(139584, 'library', ())
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from toycards.errors import Diagnostic, Span
from toycards.gguf.facts import CARD_KEY, INT_TENSOR_TYPES
from toycards.inspect.header import Header, human_count, human_size, read_header
from toycards.inspect.inventory import declaration_only_card, is_declaration_only
from toycards.inspect.literals import number_expr, round_float32
from toycards.lang import ir
from toycards.library import safe_text
from toycards.models.binding import Bound, EvalError, bind, eval_scalar

__all__ = ["DescribedCard", "describe"]


@dataclass(frozen=True, eq=False)
class DescribedCard(ir.Card):
    """A bound card plus what describe found out about the file.

    Compares and hashes as the plain card (`as_card()`), so that two descriptions with the
    same card are equal whatever their headers say.
    """

    header: Header | None = field(default=None, repr=False)
    problems: tuple[Diagnostic, ...] = ()
    origin: str = "library"  # "given" | "embedded" | "user" | "library" | "declaration-only"
    card_path: str = ""  # where the card came from: a card file, or FILE:toycards.card
    notice: str = ""  # one line for the user, e.g. why the card is declaration-only
    bound: Bound | None = field(default=None, repr=False)

    def as_card(self) -> ir.Card:
        """The same card as a plain `ir.Card` (for `ir.to_json` and comparisons)."""
        return ir.Card(self.algorithms, self.version, self.preamble, file=self.file, source=self.source)

    @property
    def errors(self) -> list[Diagnostic]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def declaration_only(self) -> bool:
        return self.origin == "declaration-only"

    @property
    def card_label(self) -> str:
        """Which card was bound and from where, e.g. `user card /cards/toyformer.card (TOYCARDS_CARDS)`."""
        return _one_line(_CARD_LABELS[self.origin].format(path=self.card_path))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ir.Card):
            return (self.algorithms, self.version, self.preamble) == (
                other.algorithms,
                other.version,
                other.preamble,
            )
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.as_card())


def _value_expr(value: object, typ: ir.Type, float32: bool) -> ir.Expr | None:
    """The `= value` of a bound hyperparameter, or None when the card cannot spell it."""
    if isinstance(typ, ir.EnumType):
        return ir.Name(str(value)) if str(value) in typ.options else None
    if isinstance(typ, ir.StrType):
        text = str(value)
        return ir.Str(text) if '"' not in text and text.isprintable() and len(text) <= 200 else None
    if isinstance(value, tuple) and isinstance(typ, ir.TensorType):  # per layer: `= [0, 0, 8, …]`
        items = [_value_expr(v, ir.TensorType(typ.field), float32) for v in value]
        return ir.Concat(tuple(items), "cols") if items and None not in items else None
    if hasattr(value, "item"):  # a NumPy scalar
        value = value.item()
    if isinstance(value, bool | int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return number_expr(value, float32)
    return None


# ── choosing the card ───────────────────────────────────────────────────────────────────
def _file_span(path: str) -> Span:
    return Span(path, 0, 0, 0, 0, 0, 0)


_CARD_LABELS = {
    "given": "given card {path}",
    "embedded": "the card embedded in the file ({path})",
    "user": "user card {path} (TOYCARDS_CARDS)",
    "library": "library card {path}",
    "declaration-only": "declaration-only (no steps)",
}


def _choose(f, given) -> tuple[ir.Card, str, str, str]:
    """(card, origin, path, notice) for an open file: the chosen card, else a declaration-only one."""
    from toycards.library import card_for_file

    choice = card_for_file(f, given)
    if choice.card is not None:
        return choice.card, choice.origin, choice.path, ""
    arch = f.get("general.architecture")
    card = declaration_only_card(f, arch if isinstance(arch, str) else None, choice.reason)
    notice = f"{Path(f.path).name}: {choice.reason}; showing a declaration-only card"
    return card, "declaration-only", "", notice


def _strip_values(card: ir.Card) -> tuple[ir.Card, dict[str, ir.Expr]]:
    """The card without `= value`s on its main algorithm (so binding reads the file), and them."""
    main, values, decls = card.main, {}, []
    for d in main.hyper_decls:
        if d.value is not None and d.binding is not None:
            values.update(dict.fromkeys(d.names, d.value))
            d = dataclasses.replace(d, value=None)
        decls.append(d)
    main = dataclasses.replace(main, hyper_decls=tuple(decls))
    return dataclasses.replace(card, algorithms=card.algorithms[:-1] + (main,)), values


def _tensor_problems(f, bound: Bound) -> list[Diagnostic]:
    span, out = _file_span(str(f.path)), []
    used = {p.tensor: p for p in bound.params if p.tensor}
    for name in bound.unused_tensors:
        out.append(
            Diagnostic(span, f"unexpected tensor '{name}': the card does not use it", severity="warning")
        )
    for name, p in used.items():
        info = f.tensors[name]
        if not info.known_type:
            out.append(
                Diagnostic(span, f"tensor '{name}' has type {info.type_name}, which toycards cannot read")
            )
        elif info.type_name in INT_TENSOR_TYPES and p.decl.type.field == "R":
            msg = f"tensor '{name}' holds integers ({info.type_name}); the card declares {p.name} real"
            out.append(Diagnostic(span, msg, severity="warning"))
    return out


def _value_problems(card: ir.Card, old: dict[str, ir.Expr], bound: Bound, path: str) -> list[Diagnostic]:
    """An embedded card's own `= value`s must agree with the file."""
    out, span = [], _file_span(path)
    for name, expr in old.items():
        try:
            said = eval_scalar(expr, bound.hyper, frozenset())
        except EvalError:
            continue
        if name in bound.hyper and not _same(said, bound.hyper[name]):
            msg = f"the card says {name} = {said!r} but the file gives {bound.hyper[name]!r} ({bound.hyper_source.get(name)})"
            out.append(Diagnostic(span, msg))
    return out


def _same(a: object, b: object) -> bool:
    """Equal, with floats compared as the float32 values GGUF stores."""
    if isinstance(a, float | int) and isinstance(b, float) and not isinstance(a, bool):
        return round_float32(a) == round_float32(b)
    return a == b


def _hparam_problems(f) -> list[Diagnostic]:
    from toycards.gguf.metadata import check_hparams

    return [Diagnostic(_file_span(str(f.path)), p, severity="warning") for p in check_hparams(f)]


# ── the bound card ──────────────────────────────────────────────────────────────────────
def _float32_key(f, source: str) -> bool:
    m = re.fullmatch(r'key "(.*)"', source or "")
    return bool(m) and m.group(1) in f.metadata and f.value_type(m.group(1)) == "float32"


def _bound_decls(d: ir.Decl, bound: Bound, f) -> list[ir.Decl]:
    """One declaration per name, each with its value and, for defaults, a note."""
    out = []
    for name in d.names:
        single = dataclasses.replace(d, names=(name,))
        if name in bound.hyper and single.value is None:
            source = bound.hyper_source.get(name, "")
            expr = _value_expr(bound.hyper[name], d.type, _float32_key(f, source))
            if expr is not None:
                single = dataclasses.replace(single, value=expr)
            if source == "default":
                note = "key absent: default"
                single = dataclasses.replace(single, comment=f"{note}; {d.comment}" if d.comment else note)
        out.append(single)
    return out


def _with_values(card: ir.Card, bound: Bound, f, preamble: tuple[str, ...]) -> ir.Card:
    main = card.main
    decls = tuple(x for d in main.hyper_decls for x in _bound_decls(d, bound, f))
    main = dataclasses.replace(main, hyper_decls=decls)
    return dataclasses.replace(card, algorithms=card.algorithms[:-1] + (main,), preamble=preamble)


def _preamble(header: Header, card: ir.Card, origin: str, path: str) -> tuple[str, ...]:
    name = header.general.get("general.name")
    what = f"{safe_text(str(name))}, " if name else ""
    types = ", ".join(f"{t} ×{n}" for t, n in header.tensor_types.items()) or "no tensors"
    source = {
        "library": "the library card",
        "embedded": f"the card embedded in the file ({CARD_KEY})",
        "user": f"the user card {path} (TOYCARDS_CARDS)",
        "given": f"the given card {path}",
    }
    lines = (
        f"toycards {card.version}: the version of the card language this card is written in.",
        f"Bound card of {Path(header.path).name} ({human_size(header.file_size)}), written by toycards describe:",
        f"{what}{human_count(header.n_params)} parameters; {types}.",
        f"Card: {source.get(origin, 'declaration-only (no steps)')}; values after `=` come from the file.",
    )
    return tuple(_one_line(s) for s in lines) + card.preamble


def _one_line(text: str) -> str:
    return "".join(c if c.isprintable() else " " for c in text)


def describe(path: str | os.PathLike, card: str | os.PathLike | None = None) -> DescribedCard:
    """The bound card of a GGUF file, with its header and every mismatch (see the module docstring).

    `card` is a card file to bind instead of the file's own (the `--card FILE` of the command line).
    Raises `ToycardsError` (one line, or a card's diagnostics) when the file is not a valid GGUF
    file, or when the chosen card does not parse; binding problems are reported in `problems`,
    not raised.
    """
    from toycards.gguf.reader import open_gguf

    with open_gguf(path) as f:
        header = read_header(f)
        card, origin, card_path, notice = _choose(f, card)
        plain, old_values = _strip_values(card)
        bound = bind(plain.main, f, str(f.path))
        problems = list(bound.problems) + _tensor_problems(f, bound)
        problems += _value_problems(plain, old_values, bound, str(f.path)) + _hparam_problems(f)
        described = _with_values(plain, bound, f, _preamble(header, card, origin, card_path))
    return DescribedCard(
        described.algorithms,
        described.version,
        described.preamble,
        file=str(path),
        source="",
        header=header,
        problems=tuple(problems),
        origin="declaration-only" if is_declaration_only(card) else origin,
        card_path=card_path,
        notice=notice,
        bound=bound,
    )


class _DescribeModule(sys.modules[__name__].__class__):
    """`toycards.describe` is both this module and the public function: calling it describes a file
    (importing the module makes it the package's `describe` attribute)."""

    def __call__(self, path: str | os.PathLike, card: str | os.PathLike | None = None) -> DescribedCard:
        return describe(path, card)


sys.modules[__name__].__class__ = _DescribeModule
