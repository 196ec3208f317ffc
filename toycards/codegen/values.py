"""What the emitter knows about each generated expression, and the map variables it vectorises.

Owns: `Val` (code text plus the card facts that decide which array operation to emit: rank,
layout, whether it is a Python number, a mask function, or carries a mapped axis), `MapVar`
(a parallel-map variable and how its values are laid out) and `Checked` (the checker's shapes
of the card's nodes, which codegen reads rather than infers again).
Leaves out: producing code (emitter.py).

Layout convention of generated code: a card matrix `ℝ^{m×n}` computed at run time is an
array `[…, n, m]` ("code" layout: one row per token, features last); a matrix parameter is
kept as stored in GGUF, which is either the card's order `(m, n)` ("card" layout) or, for
`^⊺` bindings, already `[n, m]`. A vector is `[…, n]`; an array scalar is `[…, 1]`. The names
of a value's axes follow from its rank, layout and map variables (axes.py `canonical`); every
operation lays its operands out by those names (axes.py `spell`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from toycards.lang import ir

if TYPE_CHECKING:
    from toycards.checker.context import CheckResult
    from toycards.checker.dims import Dim
    from toycards.checker.shapes import Shape

# Prelude algorithms that pick the key/value head of each query head themselves (`kv_index=`), by
# the positions of their key and value inputs: the cache then keeps each key/value head once.
# Which arguments the cache extends is the checker's call (checker/tokenflow.py), not this table's.
HEAD_PICKING = {"attention": (1, 2)}
# Prelude algorithms that read their context inputs (keys, values) only through scores their mask
# (the option named here) sets to −∞ before the softmax, the values weighted by that softmax alone:
# where the mask states a sliding window (lang/masks.py), the cache may drop the rows it leaves behind.
WINDOW_READING = {"attention": "Mask"}


@dataclass(frozen=True)
class Val:
    code: str
    rank: int  # card rank: 0 scalar, 1 vector, 2 matrix
    py: bool = False  # a Python number (hyperparameters and their arithmetic)
    layout: str = "code"  # rank 2 only: "code" ([…, n, m]) or "card" ((m, n), a stored parameter)
    param: bool = False  # a parameter as stored (no batch axes)
    row: bool = False  # a transposed vector (only meaningful on the left of `·`)
    ones_row: bool = False  # `1^⊺`
    mask: bool = False  # a mask passed as a function of (t_z, t_x)
    fams: frozenset[str] = frozenset()  # map variables whose axis this value carries
    boolean: bool = False
    enum: bool = False  # an enumeration option or string
    gather: tuple | None = (
        None  # (family array, index list code, axis, index expression) this value picks from
    )
    exp_shift: tuple[str, str] | None = None  # a Σ of exp(b): (Σ exp(b − m), m), m the largest b

    def with_(self, **kw) -> Val:
        return replace(self, **kw)


@dataclass
class MapVar:
    """A variable of a parallel map `for v ∈ [n]`, vectorised into an array axis."""

    name: str  # card name
    ident: str  # identifier of its value array
    bound_code: str  # code for n
    windowed: bool  # its values are absolute token positions
    kind: str = ""  # "element" (axis −1), "column" (axis −2), "block" (axis −3)
    used_as_value: bool = False
    bound: ir.Dim | None = None  # the card's n, where the map has one

    @property
    def ndim_after(self) -> int:
        return {"element": 0, "column": 1, "block": 2}[self.kind]


@dataclass(frozen=True)
class Checked:
    """What the checker inferred for the card (and the library prelude its calls reach): the
    shape of every expression node, keyed by the node itself (checker/context.py)."""

    card: CheckResult | None = None
    prelude: CheckResult | None = None
    nodes: dict[int, set[int]] = field(default_factory=dict, compare=False, repr=False)  # per algorithm

    def shape(self, algo: ir.Algorithm, node: object) -> Shape | None:
        """The checker's shape of `node`, an expression of `algo`; None for a node codegen made
        (whose id may be that of a node the checker made for itself and let go)."""
        if id(algo) not in self.nodes:
            self.nodes[id(algo)] = {id(n) for n in ir.walk(algo.body)}
        if id(node) not in self.nodes[id(algo)]:
            return None
        for result in (self.card, self.prelude):
            info = result.algorithms.get(algo.name) if result is not None else None
            if info is not None and info.algorithm is algo:
                return info.shape_of(node)
        return None

    def same_dims(self, algo: ir.Algorithm, a: Dim, b: Dim) -> bool:
        """Whether dimensions a and b of `algo` are equal once its derived hyperparameters are
        substituted (`H · d_h` and `d_e` under `d_h ≔ d_e / H`); True where `algo` was not checked."""
        for result in (self.card, self.prelude):
            info = result.algorithms.get(algo.name) if result is not None else None
            if info is not None and info.algorithm is algo:
                return info.signature.eq.same(a, b)
        return True
