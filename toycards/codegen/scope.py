"""What is visible while one algorithm is emitted, and the name questions every emitter asks.

Owns: `Scope` (card names → values, families such as `γ_l^1`, map and loop variables, dimension
codes), `Family` (how a family built in a map is stored), `AFTER` and `relayout` (where a map
variable's axis sits and moving it there), `family_key` (which part of a name is an index:
`γ_l^1` → ("γ_•^1", "l")) and `free_names` (the names an expression reads).
Leaves out: the values' layout (values.py), emitting code (emitter.py, steps.py, exprs.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from toycards.codegen.namespace import Namespace
from toycards.codegen.values import Checked, MapVar, Val
from toycards.lang import ir

if TYPE_CHECKING:
    from toycards.checker.tokenflow import CachePlan
    from toycards.lang.printer import Renderer

# Inside a parallel map every value that depends on a map variable holds that variable's axis at
# −1 − AFTER[kind]: an "element" variable indexes the last axis ([…, n]), a "column" variable the
# columns of a code-layout matrix ([…, n, d]: a scalar per column is […, n, 1]), a "block"
# variable the heads ([…, H, ℓ, d]: a scalar per head is […, H, 1, 1], a vector […, H, 1, d]).
AFTER = {"element": 0, "column": 1, "block": 2, "pending": 2}


class Module(Protocol):
    """What the statement and expression emitters ask of the module being emitted (the Emitter,
    codegen/emitter.py, which uses them: they never import it)."""

    card: ir.Card
    target: str
    library: dict[str, ir.Algorithm]
    plan: CachePlan
    checked: Checked
    renderer: Renderer
    module_ns: Namespace
    func_names: dict[int, str]

    def resolve(self, caller: ir.Algorithm, name: str) -> ir.Algorithm | None: ...

    def sources(self, algo: ir.Algorithm) -> dict[str, str]: ...


@dataclass(frozen=True)
class Family:
    """The members of a family built in a map (`e_t`, `Y^h`), stored as one array."""

    ident: str
    rank: int  # card rank of one member
    var: str  # the map variable that indexed it
    after: int  # code axes after the member axis (AFTER of the variable's kind when stored)


@dataclass
class Scope:
    """Names visible while emitting one algorithm."""

    algo: ir.Algorithm
    ns: Namespace
    vals: dict[str, Val] = field(default_factory=dict)  # card name → value
    families: dict[str, Family] = field(default_factory=dict)  # family key → its stored members
    param_families: dict[str, tuple[ir.Decl, ir.ParamGroup, str]] = field(default_factory=dict)
    maps: dict[str, MapVar] = field(default_factory=dict)
    loops: dict[str, Val] = field(default_factory=dict)
    windowed: set[str] = field(default_factory=set)  # windowed dimension names
    dims: dict[str, str] = field(default_factory=dict)  # dimension name → code
    decl_types: dict[str, ir.Type] = field(default_factory=dict)
    enum_options: set[str] = field(default_factory=set)
    is_main: bool = False
    # card names whose array this function created and nothing else refers to: an entry write
    # may change them in place; any other name is copied before its first entry write, so that
    # an assignment never aliases (`y ← x` then `y[i] ← …` leaves x as it was)
    owned: set[str] = field(default_factory=set)
    state: tuple[str, list[str]] | None = None  # the cache slot's identifier and the State's names
    columns: dict[str, str] = field(default_factory=dict)  # names a loop makes column by column → ident
    unbatched: set[str] = field(default_factory=set)  # names given `zeros(…)`/`filled(…)`: no batch axes

    def defines(self, name: str) -> bool:
        """The algorithm gives `name` a value (a local, input, parameter, dimension, loop or map
        variable, or one of its own enumeration options)."""
        return any(name in d for d in (self.vals, self.maps, self.loops, self.dims, self.enum_options))

    def share(self, names: set[str]) -> None:
        """`names` are now read by another value (which may be a view): no longer owned."""
        self.owned -= names


def run_time_hypers(emitter: object) -> dict[str, set[str]]:
    """Per algorithm, its hyperparameters that some caller gives a run-time value (an array, such
    as a scale per head `μ_h`): the callee must not treat them as Python numbers. Callers are
    emitted before their callees, so the set is complete when the callee is emitted."""
    if not hasattr(emitter, "run_time_hypers"):
        emitter.run_time_hypers = {}
    return emitter.run_time_hypers


def family_key(name: str, index_names: set[str]) -> tuple[str, str] | None:
    """`γ_l^1` with l an index → ("γ_•^1", "l"); `K^{⌈h·H_kv/H⌉}` → ("K^•", "⌈h·H_kv/H⌉")."""
    m = re.match(r"^([^_^]+)(?:_(\{[^{}]*\}|[^_^]+))?(?:\^(\{[^{}]*\}|[^_^]+))?$", name)
    if not m:
        return None
    base, sub, sup = m.group(1), m.group(2), m.group(3)
    candidates = [("sup", sup), ("sub", sub)]
    for test in (
        lambda p, i: i in index_names,
        lambda p, i: p.startswith("{"),
        lambda p, i: re.fullmatch(r"\d+|ℓ|[A-Z]\w*", i),
    ):
        for which, part in candidates:
            if part is None or not test(part, part.strip("{}")):
                continue
            key_sub = "•" if which == "sub" else sub
            key_sup = "•" if which == "sup" else sup
            key = base + (f"_{key_sub}" if key_sub else "") + (f"^{key_sup}" if key_sup else "")
            return key, part.strip("{}")
    return None


def free_names(e: object) -> set[str]:
    """The card names an expression reads (index variables included)."""
    return {n.id for n in ir.walk(e) if isinstance(n, ir.Name)}
