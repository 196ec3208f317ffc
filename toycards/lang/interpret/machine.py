"""Statements and calls, as the reference interpreter runs them: one step after another.

Owns: `Interpreter` — binding a call's inputs (copied), parameters and hyperparameters to the
callee's names and its dimensions to the sizes of what it gets; derived (`≔`) and bound
(`= value`) hyperparameters; assignments (a copy is stored; a name carrying a map variable,
`e_t`, stores a family member); entry writes (`S[t_z, t_x] ← −∞`, `X̃[:, t] ← …`, which also
create a new array of the declared or mapped size, its unwritten entries NaN); checked `∷`
annotations; `State:` names, zeros at the start of each call (a pass is a whole sequence);
sequential loops; parallel maps run as loops over their indices; `if … then … else … end`;
`return`.
Leaves out: expressions (exprs.py), the model and its weights (toycards/models/reference.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from toycards.lang import ir
from toycards.lang.interpret.exprs import Evaluator
from toycards.lang.interpret.frames import Frame, Var, dim_int, member_keys, solve
from toycards.lang.interpret.values import (
    ONES,
    Fault,
    Pick,
    Spread,
    copy,
    describe,
    is_array,
    shape_of,
    truth,
    whole,
    write,
)  # fmt: skip
from toycards.lang.options import defaults
from toycards.lang.outputs import returns_distribution

ALL_PARAMS = "θ"


@dataclass
class Returned:
    value: object


class Interpreter(Evaluator):
    """Runs the algorithms of one card; calls reach the card's algorithms, then the library's.

    `logits=True`: the entry algorithm's final `return P = softmax(Z)` returns Z (the logits), as
    the generated modules do; an entry algorithm whose output is no distribution (an encoder's
    `E ∈ ℝ^{d_e×ℓ}`) returns its output as ever. `rank_of(node)`: the checker's rank of an
    expression node, or None.
    """

    def __init__(
        self, card: ir.Card, library: dict[str, ir.Algorithm], logits: bool = False, rank_of=None
    ) -> None:
        super().__init__(card, library)
        if rank_of is not None:
            self.rank_of = rank_of
        self.home = {a.name: a for a in card.algorithms}
        self.logits = logits
        self._top: Frame | None = None
        self._steps = {
            ir.Assign: self.assign, ir.Return: self.ret, ir.ForSeq: self.for_seq, ir.ForAll: self.for_all,
            ir.If: self.if_, ir.Comment: lambda s, f: None,
        }  # fmt: skip

    # ── entry points ──
    def run(self, name: str, inputs: list, values: dict[str, object]) -> object:
        """Run algorithm `name` on `inputs` (header order) with hyperparameters and parameters by
        name (a per-layer parameter `γ_l^1` as {l: value} or a list for l = 1, 2, …)."""
        algo = self.home.get(name)
        if algo is None:
            raise Fault(f"the card has no algorithm {name}")
        if algo.params != (ALL_PARAMS,):  # called the way a card calls it, implicit map included
            blank = Frame(algo, self.home)
            optional = {n: self.eval(e, blank) for n, e in defaults(algo).items()}  # numbers
            values = {**optional, **values}  # an optional hyperparameter left out takes its default
            missing = [n for n in algo.params if n not in values]
            if missing or len(inputs) != len(algo.inputs):
                raise Fault(
                    f"{algo.name} takes {len(algo.inputs)} input(s) and values for {', '.join(algo.params)}"
                )
            types = _types(algo)
            args = [_convert(v, types.get(n), n) for n, v in zip(algo.inputs, inputs)]
            return self.mapped(algo, self.home, args, [values[n] for n in algo.params])
        # a conditional group's parameters are absent where its condition selects no layer (a dense
        # MLP's in a file with experts): the steps read them only where it holds
        params = {n for d, g in algo.all_params() if g is None or g.cond is None for n in d.names}
        missing = sorted(params - values.keys())
        if missing:
            raise Fault(f"{algo.name} needs values for its parameters {', '.join(missing)}")
        frame = self.bind(
            algo, self.home, inputs, {n: values[n] for n in _declared_params(algo) if n in values}
        )
        self._top = frame
        return self.body(frame)

    def invoke(self, algo: ir.Algorithm, home: dict, args: list, params: list) -> object:
        return self.body(self.bind(algo, home, args, dict(zip(algo.params, params))))

    def body(self, frame: Frame) -> object:
        self._start_state(frame)
        done = self.block(frame.algo.body, frame)
        if done is None:
            raise Fault(f"{frame.algo.name} ended without `return`")
        return done.value

    def _start_state(self, f: Frame) -> None:
        """Each `State:` name starts as zeros of its declared shape. The interpreter runs a whole
        sequence in one pass, so every state starts a call at its sequence's start; what a cache
        keeps between passes (the generated modules') must give the same numbers."""
        for d in f.algo.state_decls:
            shape = tuple(dim_int(x, lambda n: self.lookup(n, f)) for x in d.type.dims)
            for n in d.names:
                f.locals[n] = np.zeros(shape)

    # ── binding ──
    def bind(self, algo: ir.Algorithm, home: dict, inputs: list, named: dict[str, object]) -> Frame:
        if len(inputs) != len(algo.inputs):
            raise Fault(f"{algo.name} takes {len(algo.inputs)} input(s), got {len(inputs)}")
        f = Frame(algo, home, options=_options(algo))
        types = _types(algo)
        for n, v in zip(algo.inputs, inputs):
            f.declared[n] = _convert(v, types.get(n), n, copy_it=True)
            f.writable.add(n)
        groups = {n: g for d, g in algo.all_params() if g is not None for n in d.names}
        for n, v in named.items():
            if n in groups:
                key = _member_key(n, groups[n].var)
                f.families[key] = {int(l): _readonly(_convert(x, types.get(n), n)) for l, x in _layers(v)}
                f.readonly.add(key)
            else:
                f.declared[n] = _readonly(_convert(v, types.get(n), n))
                f.readonly.add(n)
        solve(self._shape_pairs(algo, f, groups), f.declared)
        self._own_values(algo, f)
        solve(self._shape_pairs(algo, f, groups), f.declared)
        self._fill_defaults(algo, f)
        return f

    def _fill_defaults(self, algo: ir.Algorithm, f: Frame) -> None:
        """An optional vector hyperparameter given a number, its default (`σ ∈ ℝ^{H} default −∞`):
        that number in every entry, once the length is known."""
        for d in (d for d in algo.hyper_decls if d.binding is not None and d.binding.kind == "default"):
            if not (isinstance(d.type, ir.TensorType) and d.type.dims):
                continue
            for n in (n for n in d.names if n in f.declared and not is_array(f.declared[n])):
                shape = tuple(dim_int(x, lambda name: self.lookup(name, f)) for x in d.type.dims)
                f.declared[n] = _readonly(np.full(shape, float(f.declared[n])))

    def _shape_pairs(self, algo: ir.Algorithm, f: Frame, groups: dict) -> list[tuple[ir.Dim, int]]:
        """(declared dimension, actual size) for every input, parameter and hyperparameter given."""
        pairs: list[tuple[ir.Dim, int]] = []
        for d in (*algo.input_decls, *algo.hyper_decls, *(d for d, _ in algo.all_params())):
            if not isinstance(d.type, ir.TensorType) or not d.type.dims:
                continue
            for n in d.names:
                if n in groups:
                    got = list(f.families.get(_member_key(n, groups[n].var), {}).values())
                else:
                    got = [f.declared[n]] if n in f.declared else []
                for v in got:
                    if not is_array(v):
                        continue  # a mask given by its entries has no stored shape
                    if v.ndim < len(d.type.dims):
                        raise Fault(f"{algo.name}: {n} ∈ {describe(v)} has fewer axes than declared")
                    pairs += zip(d.type.dims, v.shape)
        return pairs

    def _own_values(self, algo: ir.Algorithm, f: Frame) -> None:
        """Hyperparameters the card computes itself, `= value` (a bound card) and `≔ expr`, in
        declaration order, repeated while one needs another declared below it. A value given by
        the caller comes first; one that cannot be computed stays unbound (an error where used)."""
        todo = [(n, d) for d in algo.hyper_decls for n in d.names if n not in f.declared and _own_expr(d)]
        while todo:
            left = []
            for n, d in todo:
                try:
                    f.declared[n] = _convert(self.eval(_own_expr(d), f), d.type, n)
                    f.readonly.add(n)
                except Fault:
                    left.append((n, d))
            if len(left) == len(todo):
                return
            todo = left

    # ── statements ──
    def block(self, stmts: tuple[ir.Stmt, ...], f: Frame) -> Returned | None:
        for s in stmts:
            try:
                done = self._steps[type(s)](s, f)
            except Fault as exc:
                raise exc.at(s.span, f.algo.name) from None
            if done is not None:
                return done
        return None

    def assign(self, s: ir.Assign, f: Frame) -> None:
        value = self.eval(s.value, f)
        if value is ONES or isinstance(value, Spread):
            raise Fault(f"{describe(value)} takes its columns from the other side of + or −")
        self.annotation(s.annot, value, f)
        if isinstance(s.target, ir.Index):
            self.write_entries(s.target, value, f)
        else:
            self.store(s.target.id, copy(value), f)

    def annotation(self, annot: ir.Type | None, value: object, f: Frame) -> None:
        """`∷ ℝ^{d_e×ℓ}`: the value must have exactly that shape (checked when the sizes are known)."""
        if not isinstance(annot, ir.TensorType) or annot.field == "V":
            return
        try:
            want = tuple(dim_int(d, lambda n: self.lookup(n, f)) for d in annot.dims)
        except Fault:
            return  # a size this frame cannot name is the checker's to prove
        if shape_of(value) != want:
            raise Fault(f"the value is {describe(value)} but the annotation says {_shape_text(want)}")

    def store(self, name: str, value: object, f: Frame) -> None:
        """`name ← value`: a local, or a family member (`e_t` inside a map over t, `Y^1`)."""
        if f.var(name) is not None or name in f.readonly:
            raise Fault(f"cannot assign to {name}")
        if name in f.locals:
            f.locals[name] = value
            return
        var = f.map_var_of(name)
        if var:
            key = next(k for k, text in member_keys(name) if text == var)
            if key not in f.readonly:
                f.families.setdefault(key, {})[f.var(var).value] = value
                return
        member = f.member(name, lambda text: self.member_index(text, f))
        if member is not None and member[0] not in f.readonly:
            f.families[member[0]][member[1]] = value
            return
        f.locals[name] = value

    def write_entries(self, target: ir.Index, value: object, f: Frame) -> None:
        """`A[…] ← value` into A's own storage; a new A is made first (its entries NaN)."""
        name = target.base.id if isinstance(target.base, ir.Name) else ""
        if not name:
            raise Fault("only a named array can have its entries assigned")
        picks = [self.pick(i, f) for i in target.indices]
        arr = self.storage(name, f)
        if arr is None:
            arr = np.full(self.new_shape(name, target, picks, value, f), np.nan)
            self.store(name, arr, f)
            f.built.add(name)
        write(arr, picks, value, name)

    def storage(self, name: str, f: Frame) -> np.ndarray | None:
        """The array `name` holds, if it exists; parameters and hyperparameters are read-only."""
        if name in f.readonly or f.var(name) is not None:
            raise Fault(f"cannot assign to entries of {name}")
        if name in f.locals:
            arr = f.locals[name]
        elif name in f.writable:
            arr = f.declared[name]
        else:
            member = f.member(name, lambda text: self.member_index(text, f))
            if member is None:
                return None
            key, i = member
            if key in f.readonly:
                raise Fault(f"cannot assign to entries of the parameter {name}")
            if i not in f.families[key]:
                return None
            arr = f.families[key][i]
        if not is_array(arr):
            raise Fault(f"{name} is {describe(arr)}; it has no entries to assign")
        return arr

    def new_shape(self, name: str, target: ir.Index, picks: list[Pick], value: object, f: Frame) -> tuple:
        """The shape of an array defined by its entries: its declared type (an Output), else one
        axis per index — the value's axis for `:`, the range of the map variable for `t`."""
        declared = _types(f.algo).get(name)
        if isinstance(declared, ir.TensorType) and declared.dims:
            return tuple(dim_int(d, lambda n: self.lookup(n, f)) for d in declared.dims)
        free = list(shape_of(value))
        colons = sum(isinstance(i, ir.Slice) and i.lo is None and i.hi is None for i in target.indices)
        if len(free) > colons and free[:1] == [1]:
            free = free[1:]  # a row written into X[i, :]
        shape = []
        for item in target.indices:
            v = f.var(item.id) if isinstance(item, ir.Name) else None
            if isinstance(item, ir.Slice) and item.lo is None and item.hi is None and free:
                shape.append(free.pop(0))
            elif v is not None and v.is_map:
                shape.append(v.bound)
            else:
                raise Fault(
                    f"{name} is not defined before its entries are assigned, and its size is not "
                    f"known here (declare it as the Output, or index it by a map variable)"
                )
        return tuple(shape)

    def ret(self, s: ir.Return, f: Frame) -> Returned:
        value = s.value
        if self.logits and f is self._top and returns_distribution(f.algo):
            if not (isinstance(value, ir.Call) and value.func == "softmax" and len(value.args) == 1):
                raise Fault("a model card returns `P = softmax(Z)`; its logits are Z")
            value = value.args[0]
        out = self.eval(value, f)
        self.annotation(s.annot, out, f)
        return Returned(out)

    def for_seq(self, s: ir.ForSeq, f: Frame) -> Returned | None:
        """`for l = a, b, …, z do`: l = a, a + (b − a), … up to z (b, when written, sets the step)."""
        start, stop = whole(self.eval(s.start, f), "a loop start"), whole(self.eval(s.stop, f), "a loop end")
        step = 1 if s.second is None else whole(self.eval(s.second, f), "a loop's second value") - start
        if step <= 0:
            raise Fault(f"the loop counts from {start} by {step}: the second value must be larger")
        for value in range(start, stop + 1, step):
            f.vars.append({s.var: Var(value)})
            try:
                done = self.block(s.body, f)
            finally:
                f.vars.pop()
            if done is not None:
                return done
        return None

    def for_all(self, s: ir.ForAll, f: Frame) -> Returned | None:
        """A parallel map, run as nested loops over its indices in order (first index outermost).
        Its iterations are independent, so the order cannot change a correct card's values.
        A plain local first assigned inside the map ends with it."""
        bounds = [dim_int(r.bound, lambda n: self.lookup(n, f)) for r in s.ranges]
        before = set(f.locals)
        try:
            for at in itertools.product(*(range(1, b + 1) for b in bounds)):
                f.vars.append({r.var: Var(i, b, True) for r, i, b in zip(s.ranges, at, bounds)})
                try:
                    done = self.block(s.body, f)
                finally:
                    f.vars.pop()
                if done is not None:
                    return done
        finally:
            for n in set(f.locals) - before - f.built:
                del f.locals[n]
        return None

    def if_(self, s: ir.If, f: Frame) -> Returned | None:
        return self.block(s.then if truth(self.eval(s.cond, f)) else s.orelse, f)


# ── helpers ─────────────────────────────────────────────────────────────────────────────
def _shape_text(shape: tuple[int, ...]) -> str:
    return "ℝ^{" + "×".join(map(str, shape)) + "}" if shape else "ℝ"


def _types(algo: ir.Algorithm) -> dict[str, ir.Type]:
    decls = (*algo.input_decls, *algo.output_decls, *algo.hyper_decls, *(d for d, _ in algo.all_params()))
    return {n: d.type for d in decls for n in d.names}


def _options(algo: ir.Algorithm) -> frozenset[str]:
    return frozenset(o for d in algo.hyper_decls if isinstance(d.type, ir.EnumType) for o in d.type.options)


def _declared_params(algo: ir.Algorithm) -> list[str]:
    return [n for d in (*algo.hyper_decls, *(d for d, _ in algo.all_params())) for n in d.names]


def _own_expr(d: ir.Decl) -> ir.Expr | None:
    if d.value is not None:
        return d.value
    return d.binding.expr if d.binding is not None and d.binding.kind == "derived" else None


def _member_key(name: str, var: str) -> str:
    return next(k for k, text in member_keys(name) if text == var)


def _layers(v: object) -> list[tuple[int, object]]:
    return list(v.items()) if isinstance(v, dict) else list(enumerate(v, start=1))


def _convert(v: object, typ: ir.Type | None, name: str, copy_it: bool = False) -> object:
    """A given value in the interpreter's terms: reals as float64, ℕ and [n] as whole numbers,
    token sequences as integers, options as strings."""
    if isinstance(typ, ir.EnumType):
        if v not in typ.options:
            raise Fault(f"{name} = {v!r} is not one of {{{', '.join(typ.options)}}}")
        return str(v)
    if isinstance(v, list | tuple) or is_array(v):
        arr = np.array(v)
        if isinstance(typ, ir.TensorType) and typ.field == "V":
            return arr.astype(np.int64)
        return (
            arr.astype(np.float64)
            if arr.dtype.kind in "fc" or typ is None or typ.field in "RP"
            else arr.copy()
        )
    if isinstance(typ, ir.IndexType) or (
        isinstance(typ, ir.TensorType) and typ.field in "NZV" and not typ.dims
    ):
        return whole(v, name)
    return v


def _readonly(v: object) -> object:
    if is_array(v):
        v.setflags(write=False)
    return v
