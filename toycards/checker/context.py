"""The checker's shared state and its results: `Ctx`, `AlgoInfo`, `CheckResult`, `Signature`.

Owns: what one algorithm's check accumulates (diagnostics, the shape of every expression node,
the symbol of every name node, the callee and dimension bindings of every call) and the
`Signature` of an algorithm as seen by its callers.
Leaves out: the rules themselves (bindings.py, exprs.py, calls.py, steps.py).

Results are keyed by `id(node)`; `AlgoInfo` keeps a reference to its algorithm so that the
nodes stay alive (and their ids stay valid) as long as the info does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from toycards.checker.dims import Dim
from toycards.checker.names import Scope, Symbol
from toycards.checker.shapes import DimEq, Shape
from toycards.errors import Diagnostic, Span
from toycards.lang import ir


@dataclass
class Signature:
    """An algorithm's interface: input and parameter shapes in header order, over its own dims."""

    algo: ir.Algorithm
    inputs: list[tuple[str, Shape | None]] = field(default_factory=list)
    params: list[tuple[str, str, Shape | None]] = field(default_factory=list)  # (name, kind, shape)
    output: Shape | None = None
    derived: dict[str, Dim] = field(default_factory=dict)  # ℕ hyperparameters defined by ≔
    naturals: set[str] = field(default_factory=set)  # ℕ hyperparameters (dimensions)
    all_params: bool = False  # the header says `| θ`: every parameter, not callable

    @functools.cached_property
    def eq(self) -> DimEq:
        """Equality of the callee's dimensions modulo its derived hyperparameters."""
        return DimEq(self.derived)


@dataclass
class AlgoInfo:
    """What the checker learned about one algorithm, for codegen and renderers."""

    algorithm: ir.Algorithm
    signature: Signature
    shapes: dict[int, Shape] = field(default_factory=dict)
    symbols: dict[int, Symbol] = field(default_factory=dict)
    callees: dict[int, ir.Algorithm | str] = field(default_factory=dict)
    dim_bindings: dict[int, dict[str, Dim]] = field(default_factory=dict)
    inferred_hypers: dict[str, tuple[str, int]] = field(default_factory=dict)  # name → (decl name, axis)
    locals: dict[str, Shape | None] = field(default_factory=dict)  # final shape of each local
    families: dict[str, tuple[Shape | None, Dim | None]] = field(default_factory=dict)  # key → (member, size)
    derived: dict[str, Dim] = field(default_factory=dict)

    def shape_of(self, node: object) -> Shape | None:
        return self.shapes.get(id(node))

    def symbol_of(self, node: ir.Name | ir.Call) -> Symbol | None:
        """What a name node refers to; for a call node, its callee (kind "func" or "builtin")."""
        return self.symbols.get(id(node))

    def callee_of(self, node: ir.Call) -> ir.Algorithm | str | None:
        return self.callees.get(id(node))

    def dim_bindings_of(self, node: ir.Call) -> dict[str, Dim]:
        return self.dim_bindings.get(id(node), {})


@dataclass
class CheckResult:
    diagnostics: list[Diagnostic]
    algorithms: dict[str, AlgoInfo]

    @property
    def ok(self) -> bool:
        return not any(d.severity == "error" for d in self.diagnostics)


Resolver = Callable[[str], "tuple[ir.Algorithm, Signature] | None"]


@dataclass
class Ctx:
    """One algorithm being checked."""

    card: ir.Card
    algo: ir.Algorithm
    scope: Scope
    info: AlgoInfo
    resolve: Resolver
    diags: list[Diagnostic] = field(default_factory=list)
    eq: DimEq = field(default_factory=DimEq)
    map_depth: int = 0
    library_names: Callable[[], list[str]] = list
    branching: dict[int, set[str]] = field(default_factory=dict)  # calls.py's, shared by a card's Ctxs

    def error(self, span: Span, message: str, hint: str = "", shapes: tuple = ()) -> None:
        self.diags.append(Diagnostic(span, message, hint, tuple(str(s) for s in shapes if s is not None)))

    def text(self, node: object) -> str:
        """The source text of a node, for messages (falls back to a short repr)."""
        span = getattr(node, "span", None)
        src = self.card.source
        if span is not None and src and 0 <= span.start < span.end <= len(src) and span.line > 0:
            return src[span.start : span.end]
        return getattr(node, "id", None) or type(node).__name__
