"""What one pass of a bound card keeps and allocates, read from the card itself: the arrays its KV
cache extends at each context-reading call, the decoder state of each stateful call, and the
largest values a prefill holds at once.

Owns: `footprint(card, hyper, n) -> Footprint` (and `footprints` for several n), a walk of the
entry point with its bound hyperparameters, every step and call in the order generated code runs
them (a sequential loop once per value, a parallel map once, vectorised, an `if` down the branch
its condition picks; where the condition reads run-time values, the larger side, with a note).
Each call the cache plan extends (checker/tokenflow.py) leaves, per execution, one `Kept` per
extended input: the elements per token of what `runtime.extend` is handed (for a member picked
from a family, such as `K̂^{⌈h·H_kv/H⌉}` inside a map over h, the whole family: the cache keeps
the key/value heads, not a copy per query head), with the card expression they come from and
the window its mask lets a query see. Each call of an algorithm with a `State:` block leaves one
`Kept` per state name. The activation peak is an estimate of what generated code holds: per
algorithm, every local assigned so far (a name keeps its value until the function returns; in a
sequential loop, those of the previous iteration) plus what the step's expression holds while it
is evaluated (operands, then the result; a call: its arguments, then the callee's own peak), a
value in a parallel map times the ranges of the map variables it reads, an algorithm the target
runs as one kernel (models/kernel_table.py) its result alone, and a mask such a kernel is given
as one array for the whole pass. Bytes per element are the targets' (float32, int64).
Leaves out: the runtime's growth rule and llama.cpp's (memory.py), the meaning of a card
(lang/interpret/, whose expressions evaluate the conditions and masks here), which arguments a
cache extends (checker/tokenflow.py).

>>> from toycards.inspect.describe import describe
>>> card = describe("examples/tiny-llama.gguf")
>>> fp = footprint(card, card.bound.hyper, 8)
>>> sorted({(k.kind, k.callee, k.name, str(k.elements), k.count_text) for k in fp.kept})
[('kv', 'attention', 'K', 'H_kv·d_h', 'L'), ('kv', 'attention', 'V', 'H_kv·d_h', 'L')]
>>> len(fp.kept), fp.kept[0].elements.value  # K and V of each of the 2 layers; H_kv·d_h = 2·16
(4, 32)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from toycards.checker.dims import Dim, DimError, evaluate, from_ir
from toycards.errors import ToycardsError
from toycards.inspect.stepfacts import (
    card_text,
    children,
    held_locals,
    is_view,
    kept_per_token,
    mask_window,
    names,
    options,
    per_token,
    reads_through_its_mask,
    target_name,
)
from toycards.lang import ir
from toycards.lang.interpret.exprs import Evaluator
from toycards.lang.interpret.frames import Frame, Var
from toycards.lang.interpret.values import truth

# bytes of one element of a value of each card field, as both targets compute (float32, int64)
FIELD_BYTES = {"R": 4, "P": 4, "N": 8, "Z": 8, "V": 8, "I": 8, "B": 1}
FLOATING = frozenset({"R", "P"})


@dataclass(frozen=True)
class Term:
    """A count with the card expression it comes from: `Term(64, Dim("H_kv·d_h"))`."""

    value: int
    dim: Dim

    def __str__(self) -> str:
        return str(self.dim)


@dataclass(frozen=True)
class Kept:
    """One array a pass leaves for the next, per sequence: `kind` "kv" (rows of `elements` per
    token, an input of a call the cache extends) or "state" (`elements` in all, a `State:` name)."""

    kind: str
    callee: str  # the algorithm called: `attention`, `selective_scan`
    name: str  # its input the cache extends (`K`), or its state (`h`)
    caller: str  # the algorithm that calls it: `GQAttention`
    elements: Term  # per token ("kv") or in all ("state"), in the entry point's names
    field: str  # the card field of its entries: "R" reals, …
    window: int | None = None  # "kv": the tokens its mask lets a query see (None: every earlier one)
    layer: int | None = None  # the iteration of the entry point's outermost loop it runs in
    pair: int = 0  # "kv": which extended input of the call (0: keys, 1: values, …)
    row: int = 0  # "kv": elements of one row of the kept array (its last axis: a head's d_h)
    call: int = 0  # "kv": which execution of a call the cache extends, in the order of a pass
    count_text: str = ""  # how the entry point's loops around the site write their count (`L`)
    runs: int = 1  # how often those loops run (L): a site in each of them runs that often
    drops: bool = False  # "kv": the runtime's cache drops the rows that window leaves behind

    @property
    def floating(self) -> bool:
        return self.field in FLOATING


@dataclass
class Footprint:
    """What `footprint` found: `kept` (per sequence), `activations` (bytes at the peak of a prefill of
    n tokens of one sequence: an estimate), `recompute` (why decoding reruns the sequence, "" when the
    cache follows the card) and `notes` (where the walk had to guess)."""

    kept: list[Kept] = field(default_factory=list)
    activations: int = 0
    recompute: str = ""
    notes: list[str] = field(default_factory=list)


def footprint(card: ir.Card, hyper: dict, n: int, target: str = "numpy", last: bool = True) -> Footprint:
    """What a prefill of `n` tokens of `card` (its entry point bound to `hyper`) keeps and allocates,
    on `target`; `last`: the steps after the cache plan's cut act on the last token alone, as
    generation runs a prompt. Raises ToycardsError when the card does not check."""
    return footprints(card, hyper, (n,), target, last)[0]


def footprints(card: ir.Card, hyper: dict, ns, target: str = "numpy", last: bool = True) -> list[Footprint]:
    """`footprint` for each prefill length of `ns`, the card checked once."""
    from toycards.checker import check_card, check_prelude
    from toycards.checker.tokenflow import cache_plan

    result = check_card(card)
    if not result.ok:
        first = next(d for d in result.diagnostics if d.severity == "error")
        raise ToycardsError(
            f"{card.file}: the card does not check ({first.message}), so its memory is unknown"
        )
    plan = cache_plan(card, result, check_prelude())
    return [_Walk(card, result, check_prelude(), plan, target).run(hyper, n, last) for n in ns]


@dataclass
class _Frame:
    """One call of one algorithm: its checker facts, its concrete values (an interpreter Frame),
    its names in the entry point's terms, and how many copies of it a vectorised map runs."""

    algo: ir.Algorithm
    info: object  # checker.context.AlgoInfo
    env: Frame
    to_entry: dict[str, Dim]
    token: frozenset[str]
    factor: int = 1  # elements of an implicitly mapped argument per element the callee declares
    maps: dict[str, tuple[int, Dim]] = field(default_factory=dict)  # map variable → (range, its dim)
    map_locals: set[str] = field(default_factory=set)  # the locals the maps around a step assign

    def ints(self) -> dict[str, int]:
        out = {k: v for k, v in self.env.declared.items() if isinstance(v, int) and not isinstance(v, bool)}
        out.update((v, n) for v, (n, _) in self.maps.items())
        return out


class _Evaluator(Evaluator):
    """The interpreter's expressions over hyperparameters and loop variables; no algorithm runs."""

    def invoke(self, algo, home, args, params):
        raise ToycardsError(f"{algo.name} is not run to size a card")


class _Walk:
    def __init__(self, card: ir.Card, result, prelude, plan, target: str) -> None:
        from toycards.library import library_algorithms
        from toycards.models.kernel_table import KERNELS

        self.card, self.result, self.prelude, self.plan = card, result, prelude, plan
        self.library = library_algorithms()
        self.kernels = set(KERNELS.get(target, {}))
        self.eval = _Evaluator(card, self.library)
        self.out = Footprint(recompute=plan.reason)
        self.layer: int | None = None
        self.loops: list[tuple[str, int]] = []  # the entry point's loops around the step: (stop text, count)
        self.held: dict[int, dict[int, frozenset[str]]] = {}  # held_locals of each algorithm walked
        self.calls = 0  # calls walked so far (the cache's slots go in this order)
        self.masks: dict[tuple[str, str], int] = {}  # the masks kernels hold through a pass (bytes)

    # ── the walk ──
    def run(self, hyper: dict, n: int, last: bool) -> Footprint:
        main = self.card.main
        token = self.plan.query_dims.get(main.name, frozenset())
        env = Frame(main, {}, declared=dict(hyper), options=options(main))
        for name in token:
            env.declared[name] = n
        fr = _Frame(main, self._info(main), env, {}, frozenset(token))
        cut = self.plan.last_cut[0] if last and self.plan.last_cut and self.plan.cached else None
        x = main.input_decls[0] if main.input_decls else None
        ids = n * FIELD_BYTES["V"] if x is not None else 0
        self.out.activations = ids + self._body(main.body, fr, top=True, cut=cut) + sum(self.masks.values())
        return self.out

    def _info(self, algo: ir.Algorithm):
        for source in (self.result, self.prelude):
            info = source.algorithms.get(algo.name) if source is not None else None
            if info is not None and info.algorithm is algo:
                return info
        raise ToycardsError(f"{algo.name} was not checked")

    def _body(self, body: tuple, fr: _Frame, top: bool = False, cut: int | None = None) -> int:
        """The peak bytes of the values `fr` makes while it runs `body` (its whole algorithm)."""
        live = self.held.get(id(fr.algo))
        if live is None:
            live = self.held[id(fr.algo)] = held_locals(fr.algo, self._info(fr.algo))
        peak = 0
        for i, s in enumerate(body):
            if cut is not None and i == cut + 1:
                for name in fr.token:  # the steps after the cut act on the last token alone
                    fr.env.declared[name] = 1
            peak = max(peak, self._stmt(s, fr, live, top))
        return peak

    def _stmt(self, s, fr: _Frame, live: dict, top: bool = False) -> int:
        if isinstance(s, ir.ForSeq):
            return self._loop(s, fr, live, top)
        if isinstance(s, ir.ForAll):
            return self._map(s, fr, live)
        if isinstance(s, ir.If):
            return self._branch(s, fr, live)
        if isinstance(s, ir.Assign | ir.Return):
            held = sum(self._local_bytes(name, fr) for name in live.get(id(s), ()))
            return held + self._expr(s.value, fr)[0]
        return 0

    def _loop(self, s: ir.ForSeq, fr: _Frame, live: dict, top: bool) -> int:
        start, stop = self._value(s.start, fr), self._value(s.stop, fr)
        second = self._value(s.second, fr) if s.second is not None else None
        step = second - start if isinstance(second, int) and isinstance(start, int) else 1
        over_tokens = bool(names(s.stop) & fr.token)
        if over_tokens or not isinstance(start, int) or not isinstance(stop, int) or step <= 0:
            return self._once(s.body, fr, live, s.var)  # over this pass's tokens: each step alike
        values = range(start, stop + 1, step)
        outer = top and not self.loops
        if top:
            self.loops.append((card_text(s.stop), len(values)))
        peak = 0
        try:
            for v in values:
                if outer:
                    self.layer = v
                fr.env.vars.append({s.var: Var(v)})
                try:
                    peak = max(peak, *(self._stmt(b, fr, live, top) for b in s.body), 0)
                finally:
                    fr.env.vars.pop()
        finally:
            if top:
                self.loops.pop()
            if outer:
                self.layer = None
        return peak

    def _once(self, body: tuple, fr: _Frame, live: dict, var: str) -> int:
        fr.env.vars.append({var: Var(1)})
        try:
            return max((self._stmt(b, fr, live) for b in body), default=0)
        finally:
            fr.env.vars.pop()

    def _map(self, s: ir.ForAll, fr: _Frame, live: dict) -> int:
        saved, saved_locals = dict(fr.maps), set(fr.map_locals)
        fr.map_locals |= {target_name(b) for b in ir.walk(s.body) if isinstance(b, ir.Assign)}
        frame = {}
        for r in s.ranges:
            dim = from_ir(r.bound)
            size = self._dim_value(dim, fr)
            fr.maps[r.var] = (size or 1, dim)
            frame[r.var] = Var(1, size, is_map=True)
        fr.env.vars.append(frame)
        try:
            return max((self._stmt(b, fr, live) for b in s.body), default=0)
        finally:
            fr.env.vars.pop()
            fr.maps, fr.map_locals = saved, saved_locals

    def _branch(self, s: ir.If, fr: _Frame, live: dict) -> int:
        try:
            taken = truth(self.eval.eval(s.cond, fr.env))
        except Exception:  # noqa: BLE001 - a condition on values computed at run time
            taken = None
        if taken is not None:
            return max((self._stmt(b, fr, live) for b in (s.then if taken else s.orelse)), default=0)
        kept = self.out.kept
        sides = []
        for branch in (s.then, s.orelse):
            self.out.kept = []
            peak = max((self._stmt(b, fr, live) for b in branch), default=0)
            sides.append((sum(k.elements.value for k in self.out.kept), peak, self.out.kept))
        self.out.kept = kept + max(sides, key=lambda t: t[0])[2]
        if sides[0][2] or sides[1][2]:
            self.out.notes.append(
                f"a branch on a value computed at run time: the larger side counted ({card_text(s.cond)})"
            )
        return max(sides[0][1], sides[1][1])

    # ── expressions ──
    def _expr(self, e, fr: _Frame) -> tuple[int, int]:
        """(peak bytes while `e` is evaluated, bytes of its result) of the values it makes."""
        if isinstance(e, ir.Name | ir.Num | ir.Const | ir.Str | ir.MaskDef) or e is None:
            return 0, 0
        if isinstance(e, ir.Call):
            return self._call_expr(e, fr)
        if isinstance(e, ir.Index) and all(is_view(i, fr.maps) for i in e.indices):
            return self._expr(e.base, fr)[0], 0  # a slice or a column: a view of its base
        if isinstance(e, ir.Sum):
            var = self._sum_range(e, fr)
            saved = dict(fr.maps)
            fr.maps[e.var] = var
            try:
                inner, _ = self._expr(e.body, fr)
            finally:
                fr.maps = saved
            res = self._bytes(e, fr)
            return max(inner, res), res
        peak = acc = 0
        for child in children(e):
            p, r = self._expr(child, fr)
            peak, acc = max(peak, acc + p), acc + r
        res = self._bytes(e, fr)
        return max(peak, acc + res), res

    def _call_expr(self, e: ir.Call, fr: _Frame) -> tuple[int, int]:
        peak = acc = 0
        for a in e.args:
            p, r = self._expr(a, fr)
            peak, acc = max(peak, acc + p), acc + r
        res = self._bytes(e, fr)
        callee = fr.info.callee_of(e)
        inner = self._call(e, callee, fr) if isinstance(callee, ir.Algorithm) else res
        return max(peak, acc + max(inner, res)), res

    def _call(self, e: ir.Call, callee: ir.Algorithm, fr: _Frame) -> int:
        """Walk one call of `callee`: what it keeps, and its peak (its result alone for a kernel)."""
        sub = self._callee_frame(e, callee, fr)
        self.calls += 1
        extended = self.plan.extend.get(id(e), ())
        for i, k in enumerate(extended):  # an array passed as keys and values is kept once (codegen's too)
            if e.args[k] not in [e.args[j] for j in extended[:i]]:
                self._keep_kv(e, k, callee, fr, sub)
        for d in callee.state_decls:
            self._keep_state(d, callee, sub, fr.algo.name)
        peak = self._body(callee.body, sub)
        if callee.name in self.kernels and self.library.get(callee.name) == callee:
            self._kernel_masks(e, callee, sub)
            return self._bytes(e, fr)
        return peak

    def _kernel_masks(self, e: ir.Call, callee: ir.Algorithm, sub: _Frame) -> None:
        """A kernel given a mask reads it as an array of its declared shape (Mask ∈ {0,1}^{ℓ×ℓ}: a
        byte an entry), made once per pass for every call with the same mask."""
        from toycards.lang.options import call_params

        types = {n: d.type for d in callee.hyper_decls for n in d.names}
        for name, p in zip(callee.params, call_params(callee, e), strict=False):
            t = types.get(name)
            if isinstance(t, ir.TensorType) and t.field == "B" and len(t.dims) == 2:
                n = self._elements(tuple(from_ir(d) for d in t.dims), sub)
                self.masks[(callee.name, card_text(p))] = n * FIELD_BYTES["B"] * sub.factor

    def _callee_frame(self, e: ir.Call, callee: ir.Algorithm, fr: _Frame) -> _Frame:
        from toycards.lang.options import call_params

        info = self._info(callee)
        ints = fr.ints()
        env = Frame(callee, {}, options=options(callee))
        to_entry = {}
        for name, dim in fr.info.dim_bindings_of(e).items():
            to_entry[name] = dim.substitute(fr.to_entry)
            try:
                env.declared[name] = evaluate(dim, ints)
            except (DimError, KeyError, ZeroDivisionError):
                continue
        for name, p in zip(callee.params, call_params(callee, e), strict=False):
            if name in env.declared:
                continue
            try:
                env.declared[name] = self.eval.eval(p, fr.env)
            except Exception:  # noqa: BLE001 - a value computed at run time (ρ̃): not needed to size
                continue
        token = self.plan.query_dims.get(callee.name, frozenset())
        sub = _Frame(callee, info, env, to_entry, frozenset(token))
        sub.factor = fr.factor * _mapped_over(self, e, callee, info, fr, sub)
        return sub

    # ── what a call keeps ──
    def _keep_kv(self, e: ir.Call, k: int, callee: ir.Algorithm, fr: _Frame, sub: _Frame) -> None:
        dim = kept_per_token(e.args[k], fr.info, fr.token, {v: d for v, (_, d) in fr.maps.items()})
        if dim is None:
            self.out.notes.append(f"{callee.name}'s {callee.inputs[k]}: its size per token is unknown")
            return
        shape = fr.info.shape_of(e.args[k])
        row = per_token(shape, fr.token)
        row = self._dim_value(row, fr) if row is not None else None
        window = mask_window(sub.env.declared)
        term, field_ = self._term(dim, fr), shape.field if shape else "R"
        kept = Kept("kv", callee.name, callee.inputs[k], fr.algo.name, term, field_, window, self.layer, k)
        kept = dataclasses.replace(kept, drops=window is not None and reads_through_its_mask(callee))
        kept = dataclasses.replace(kept, row=row or term.value)
        self._add(dataclasses.replace(kept, call=self.calls))

    def _keep_state(self, d: ir.Decl, callee: ir.Algorithm, sub: _Frame, caller: str) -> None:
        dims = d.type.dims if isinstance(d.type, ir.TensorType) else ()
        dim = Dim.num(1)
        for x in dims:
            dim = dim * from_ir(x)
        for _, (_, mdim) in sub.maps.items():
            dim = dim * mdim
        term = self._term(dim, sub)
        term = Term(term.value * sub.factor, term.dim)
        for name in d.names:
            field_ = d.type.field if isinstance(d.type, ir.TensorType) else "R"
            self._add(Kept("state", callee.name, name, caller, term, field_, None, self.layer))

    def _add(self, kept: Kept) -> None:
        count = " · ".join(text for text, _ in self.loops)
        runs = math.prod(n for _, n in self.loops)
        self.out.kept.append(dataclasses.replace(kept, count_text=count, runs=runs))

    def _term(self, dim: Dim, fr: _Frame) -> Term:
        value = evaluate(dim, fr.ints())
        return Term(value, dim.substitute(fr.to_entry))

    # ── sizes ──
    def _bytes(self, node, fr: _Frame) -> int:
        shape = fr.info.shape_of(node)
        if shape is None or not shape.dims or shape.field not in FIELD_BYTES:
            return 0
        n = self._elements(shape.dims, fr)
        return n * FIELD_BYTES[shape.field] * fr.factor * self._copies(node, fr)

    def _copies(self, node, fr: _Frame) -> int:
        """How many values like `node` a vectorised map makes at once: the ranges of the map
        variables it reads, all of them where it reads a local assigned in the map."""
        read = names(node)
        if read & fr.map_locals:
            return math.prod(m for m, _ in fr.maps.values())
        return math.prod(m for v, (m, _) in fr.maps.items() if v in read)

    def _elements(self, dims, fr: _Frame) -> int:
        ints = fr.ints()
        total = 1
        for d in dims:
            if d is None:
                continue
            try:
                total *= evaluate(d, ints)
            except (DimError, KeyError, ZeroDivisionError):
                return 0
        return total

    def _local_bytes(self, name: str, fr: _Frame) -> int:
        """Bytes of a local (or a family: its members side by side) of `fr`'s algorithm."""
        info = fr.info
        if name in info.families:
            member, size = info.families[name]
            if member is None or size is None:
                return 0
            n = self._elements((*member.dims, size), fr)
            return n * FIELD_BYTES.get(member.field, 0) * fr.factor
        shape = info.locals.get(name)
        if shape is None or not shape.dims:
            return 0
        return self._elements(shape.dims, fr) * FIELD_BYTES.get(shape.field, 0) * fr.factor

    def _dim_value(self, dim: Dim, fr: _Frame) -> int | None:
        try:
            return evaluate(dim, fr.ints())
        except (DimError, KeyError, ZeroDivisionError):
            return None

    def _sum_range(self, e: ir.Sum, fr: _Frame) -> tuple[int, Dim]:
        lo, hi = self._value(e.lo, fr), self._value(e.hi, fr)
        n = hi - lo + 1 if isinstance(lo, int) and isinstance(hi, int) else 1
        return max(n, 1), Dim.num(max(n, 1))

    def _value(self, e, fr: _Frame):
        try:
            v = self.eval.eval(e, fr.env)
        except Exception:  # noqa: BLE001 - a bound on this pass's tokens, or on run-time values
            return None
        return int(v) if isinstance(v, float) and v.is_integer() else v


def _mapped_over(walk: _Walk, e: ir.Call, callee: ir.Algorithm, info, fr: _Frame, sub: _Frame) -> int:
    """How many copies of the callee one vectorised call runs: an argument with more elements
    than the callee declares (`SiLU(W_gate · X)` for `SiLU(x ∈ ℝ)`), and the caller's maps."""
    best = 1
    decls = {n: d for d in callee.input_decls for n in d.names}
    for name, a in zip(callee.inputs, e.args, strict=False):
        shape = fr.info.shape_of(a)
        decl = decls.get(name)
        if shape is None or decl is None or not isinstance(decl.type, ir.TensorType):
            continue
        given = walk._elements(shape.dims, fr) * walk._copies(a, fr)
        declared = walk._elements(tuple(from_ir(d) for d in decl.type.dims), sub)
        if declared and given > declared:
            best = max(best, given // declared)
    return best
