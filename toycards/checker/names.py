"""Name resolution inside one algorithm: scopes, families and did-you-mean hints.

Owns: `Symbol` (what a name in the card refers to, as codegen sees it), `Entry` (what the
checker knows about a name: kind, shape, declaration), `Scope` (loop/map variables, locals,
declared names, families, enumeration options) and the semantics' resolution order: the exact
name first (loop/map variables, locals, inputs, output, hyperparameters, parameters, dimension
names); then a **family member**: a name whose subscript or superscript is a loop/map variable
in scope, a number, a dimension, or an expression in braces (`γ_l^1`, `e_1`, `e_ℓ`, `Y^H`,
`K^{⌈h·H_kv/H⌉}`) refers to the family with that index abstracted (`γ_•^1`, `e_•`, `Y^•`).
Also the hints for unknown names (difflib on Unicode and ASCII spellings, at most `HINT_BUDGET`
names compared per algorithm; `x^3` → `(x)^3`).
Leaves out: shapes (shapes.py) and the statements that create locals (steps.py).

>>> family_key("γ_l^1", "l"), family_key("W_qkv^l", "l"), family_key("e_t", "t")
('γ_•^1', 'W_qkv^•', 'e_•')
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from toycards.checker.dims import Dim
from toycards.checker.shapes import Shape
from toycards.lang import ir
from toycards.lang.names import ascii_name, join_name, split_name

FAMILY_MARK = "•"
HINT_BUDGET = 500_000  # names compared for did-you-mean hints in one algorithm, at most
_PLAIN = re.compile(r"^[^\W\d][\w\u0300-\u036f]*$")


@dataclass(frozen=True)
class Symbol:
    """What a name node refers to.

    kind: "input" "output" "hyper" "param" "local" "loopvar" "mapvar" "dim" "option"
    ("func"/"builtin" are used for callees). key: the declared name (`γ_l^1`, `e_t`, `W_e`);
    family_index: the expression that picks the member (`l`, `1`, `ℓ`, `⌈h·H_kv/H⌉`) for a
    family member, else None; decl: the declaring IR node (Decl, Assign, ForSeq, Range, …).
    """

    kind: str
    key: str
    family_index: ir.Expr | None = None
    decl: object = None


@dataclass
class Entry:
    """A name the checker knows: its kind, shape and declaration."""

    kind: str
    key: str
    shape: Shape | None
    decl: object = None
    family_var: str = ""  # the group/map variable a family's member name is written with
    bound: Dim | None = None  # range of a loop/map variable, or the size of a family
    per_iteration: tuple[str, ...] = ()  # the map variables a local assigned inside a map varies with
    where: int = 0  # line of the declaration, for hints


def family_key(name: str, var: str) -> str | None:
    """`γ_l^1` with index variable `l` → `γ_•^1`; None when `var` is neither sub- nor superscript."""
    base, sub, sup = split_name(name)
    if sup == var:
        return _key(base, sub, FAMILY_MARK)
    if sub == var:
        return _key(base, FAMILY_MARK, sup)
    return None


def _key(base: str, sub: str, sup: str) -> str:
    return base + (f"_{sub}" if sub else "") + (f"^{sup}" if sup else "")


@dataclass
class Found:
    entry: Entry
    index_text: str = ""  # the member index as written, for a family member


@dataclass
class Scope:
    declared: dict[str, Entry] = field(default_factory=dict)  # inputs, output, hypers, params, dims
    locals: dict[str, Entry] = field(default_factory=dict)
    families: dict[str, Entry] = field(default_factory=dict)
    options: dict[str, Entry] = field(default_factory=dict)
    vars: list[dict[str, Entry]] = field(default_factory=list)
    gone: dict[str, Entry] = field(default_factory=dict)  # per-iteration locals out of scope
    hint_budget: int = HINT_BUDGET  # candidates the did-you-mean hints may still compare
    spellings: dict[str, str] = field(default_factory=dict)  # name → ascii_name(name), as hints need them

    # loop and map variables
    def push(self, entries: dict[str, Entry]) -> None:
        self.vars.append(entries)

    def pop(self) -> None:
        self.vars.pop()

    def var(self, name: str) -> Entry | None:
        for frame in reversed(self.vars):
            if name in frame:
                return frame[name]
        return None

    def is_dim(self, name: str) -> bool:
        e = self.var(name) or self.locals.get(name) or self.declared.get(name)
        return e is not None and (e.kind in ("dim", "loopvar", "mapvar") or _is_natural(e))

    # lookup
    def lookup(self, name: str) -> Found | None:
        exact = self.var(name) or self.locals.get(name) or self.declared.get(name)
        if exact is not None:
            return Found(exact)
        base, sub, sup = split_name(name)
        for text, key in ((sup, _key(base, sub, FAMILY_MARK)), (sub, _key(base, FAMILY_MARK, sup))):
            if text and key in self.families and self.is_index(text):
                return Found(self.families[key], text)
        return None

    def is_index(self, text: str) -> bool:
        """Can this sub/superscript pick a family member (`l` in scope, `1`, `ℓ`, `{h+1}`)?"""
        if text.isdigit() or not _PLAIN.match(text):
            return True
        return self.var(text) is not None or self.is_dim(text)

    def unbound_member(self, name: str) -> tuple[Entry, str] | None:
        """A family member written with a variable that is not bound here (`γ_l^1` outside the loop)."""
        base, sub, sup = split_name(name)
        for text, key in ((sup, _key(base, sub, FAMILY_MARK)), (sub, _key(base, FAMILY_MARK, sup))):
            if text and key in self.families:
                return self.families[key], text
        return None

    # hints
    def candidates(self) -> list[str]:
        names = [n for frame in self.vars for n in frame]
        names += list(self.locals) + list(self.declared) + list(self.options)
        names += [e.key for e in self.families.values()]
        return names

    def n_candidates(self) -> int:
        """`len(self.candidates())`, without making the list."""
        n = sum(len(frame) for frame in self.vars)
        return n + len(self.locals) + len(self.declared) + len(self.options) + len(self.families)

    def hint_for(self, name: str, extra: list[str] | None = None) -> str:
        """`did you mean γ_l^2?`, or the `(x)^3` hint for a superscripted power.

        A did-you-mean hint compares `name` with every name in scope; the scope's `hint_budget`
        bounds those comparisons over all its hints, so that a card with an unknown name on each
        of its n steps is checked in time proportional to n: once the budget is spent, unknown
        names get no did-you-mean hint.
        """
        base, sub, sup = split_name(name)
        if sup.isdigit() and self.lookup(join_name(base, sub)) is not None:
            plain = join_name(base, sub)
            return f"`{name}` reads as one name; for a power write ({plain})^{sup}"
        if name in self.gone:
            return f"{name} is assigned inside a parallel map (line {self.gone[name].where}) and only exists there"
        extra = list(extra or ())
        n = self.n_candidates() + len(extra)
        if n > self.hint_budget:
            return ""
        self.hint_budget -= n
        match = did_you_mean(name, self.candidates() + extra, self.spelling)
        return f"did you mean {match}?" if match else ""

    def spelling(self, name: str) -> str:
        """`ascii_name(name)`, worked out once per name."""
        spelled = self.spellings.get(name)
        if spelled is None:
            spelled = self.spellings[name] = ascii_name(name)
        return spelled


def did_you_mean(name: str, candidates: list[str], spell: Callable[[str], str] = ascii_name) -> str:
    """The closest candidate by Unicode or ASCII spelling (`spell`: `ascii_name`, or a cache of
    it), or "": difflib's best match with a ratio of at least 0.6, ties to the later name in
    sorted order; of two candidates spelled alike in ASCII, the later one stands for both.

    >>> did_you_mean("γ_l^3", ["γ_l^1", "β_l^1", "x"]), did_you_mean("gamma_1", ["γ_1", "δ_1"])
    ('γ_l^1', 'γ_1')
    """
    pool = set(candidates)
    pool.discard(name)
    hit = _closest(name, pool)
    if hit:
        return hit
    word = ascii_name(name)
    spelled: dict[str, str] = {}
    for c in pool:
        s = spell(c)
        if _near(word, s) and c > spelled.get(s, ""):
            spelled[s] = c
    hit = _closest(word, spelled)
    return spelled[hit] if hit else ""


_CUTOFF = 0.6  # difflib ratio a name must reach to be suggested


def _closest(word: str, pool: Iterable[str]) -> str:
    hit = difflib.get_close_matches(word, [c for c in pool if _near(word, c)], n=1, cutoff=_CUTOFF)
    return hit[0] if hit else ""


def _near(a: str, b: str) -> bool:
    """difflib's first test of a candidate, `real_quick_ratio() >= cutoff`, which reads lengths
    only: a candidate that fails it is never a match, and leaving it out spares the slower tests."""
    total = len(a) + len(b)
    return not total or 2.0 * min(len(a), len(b)) / total >= _CUTOFF


def _is_natural(e: Entry) -> bool:
    """A hyperparameter in ℕ, or a local holding a whole number (`n ← length(x)`), is a dimension."""
    return e.kind in ("hyper", "local") and e.shape is not None and e.shape.field == "N" and not e.shape.dims
