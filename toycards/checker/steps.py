"""Statements: assignments, loops, parallel maps, conditions and returns.

Owns: the scoping of the numbered steps (loop and map variables; locals; families defined in a
parallel map such as `for t ∈ [ℓ]: e_t ← …`; matrices defined column by column such as
`for t ∈ [ℓ]: X̃[:, t] ← …`; per-iteration temporaries of a map, which end with it), checked
`∷` annotations, re-assignment with a different shape, assignments to parameters or loop
variables, conditions that use more than hyperparameters and loop indices, and `return` (name
and shape against the header's output).
Leaves out: expressions (exprs.py) and declarations (bindings.py).
"""

from __future__ import annotations

from toycards.checker.context import Ctx
from toycards.checker.declarations import name_span
from toycards.checker.dims import Dim, DimError, expr_to_dim, from_ir, ir_dim_names, type_dim_names
from toycards.checker.exprs import ExprChecker
from toycards.checker.independence import check_independent
from toycards.checker.names import Entry, Symbol, family_key
from toycards.checker.shapes import NATURAL, Shape, compatible, shape_from_type
from toycards.lang import ir
from toycards.lang.names import split_name

_CONDITION_KINDS = {"hyper", "loopvar", "mapvar", "dim", "option"}


class StepChecker:
    def __init__(self, ctx: Ctx, ex: ExprChecker) -> None:
        self.ctx, self.ex = ctx, ex
        self.map_vars: list[str] = []
        self.returns = 0
        self._kinds = {
            ir.Assign: self.assign, ir.Return: self.ret, ir.ForSeq: self.for_seq, ir.ForAll: self.for_all,
            ir.If: self.if_, ir.Comment: lambda s: None,
        }  # fmt: skip

    def body(self, stmts: tuple[ir.Stmt, ...]) -> None:
        for s in stmts:
            try:
                self._kinds[type(s)](s)
            except RecursionError:
                self.ctx.error(
                    s.span, "this step is nested too deeply to check", "split it into several steps"
                )

    # ── assignments ──
    def assign(self, s: ir.Assign) -> None:
        value = self.ex.infer(s.value)
        if s.annot is not None:
            self.annotation(s.annot, value)
        if isinstance(s.target, ir.Index):
            self.assign_index(s, s.target, value)
        else:
            self.assign_name(s, s.target, value)

    def annotation(self, annot: ir.Type, value: Shape | None) -> None:
        declared = self.type_shape(annot)
        if declared is not None and value is not None and not compatible(declared, value, self.ctx.eq):
            self.ctx.error(
                annot.span,
                f"annotation ∷ {declared} does not match the inferred shape {value}",
                "fix the annotation or the expression",
                (declared, value),
            )

    def type_shape(self, t: ir.Type) -> Shape | None:
        """The shape of an annotation; None when it names an unknown dimension (reported)."""
        unknown = [n for n in type_dim_names(t) if not self.ctx.scope.is_dim(n.name)]
        for node in unknown:
            self.ctx.error(node.span, f"unknown dimension {node.name}", self.ctx.scope.hint_for(node.name))
        shape = shape_from_type(t, lambda d, msg: self.ctx.error(d.span, f"dimension {msg}"))
        return None if unknown else shape

    def map_var_of(self, name: str) -> str:
        """The map variable in scope that is `name`'s sub- or superscript (`e_t` → t), or ""."""
        _, sub, sup = split_name(name)
        for v in (sup, sub):
            e = self.ctx.scope.var(v) if v else None
            if e is not None and e.kind == "mapvar":
                return v
        return ""

    def assign_name(self, s: ir.Assign, t: ir.Name, value: Shape | None) -> None:
        scope = self.ctx.scope
        found = scope.lookup(t.id)
        var = self.map_var_of(t.id)
        if var and (found is None or found.entry.kind == "local" and found.index_text):
            return self.define(t, s, value, var)
        if found is None:
            self.length_alias(t.id, s.value)
            return self.define(t, s, value, "")
        e = found.entry
        self.ctx.info.symbols[id(t)] = Symbol(e.kind, e.key, None, e.decl)
        if e.kind in ("param", "hyper", "loopvar", "mapvar", "option"):
            self.ctx.error(
                t.span, f"cannot assign to the {_word(e.kind)} {t.id}", "use a new name for the result"
            )
        elif e.kind == "dim":
            if value is not None and not value.is_scalar():
                self.ctx.error(
                    t.span, f"{t.id} is a dimension; it cannot hold {value}", "use a new name", (value,)
                )
        else:
            self.reassign(t, e, value)

    def length_alias(self, name: str, value: ir.Expr) -> None:
        """`n ← length(x)` with x ∈ ℝ^{m} (or V^m, or ℝ^{d×m}): n is the dimension m."""
        if isinstance(value, ir.Call) and self.ctx.info.callees.get(id(value)) == "length" and value.args:
            arg = self.ctx.info.shapes.get(id(value.args[0]))
            if arg is not None and arg.dims and arg.dims[-1] is not None:
                self.ctx.eq.define(name, arg.dims[-1])

    def reassign(self, t: ir.Name, e: Entry, value: Shape | None) -> None:
        if e.shape is None:
            e.shape = value
        elif value is not None and not compatible(e.shape, value, self.ctx.eq):
            self.ctx.error(
                t.span,
                f"{t.id} was {e.shape} and is now assigned {value}",
                "use a new name for a value of another shape",
                (e.shape, value),
            )
        if value is not None:
            self.ctx.info.shapes[id(t)] = value

    def define(self, t: ir.Name, s: ir.Assign, shape: Shape | None, var: str) -> None:
        """A new local, or (var ≠ "") a family member defined inside a map over var."""
        scope = self.ctx.scope
        per_iteration = tuple(v for v in self.map_vars if v != var and v not in _index_vars(s.target))
        entry = Entry("local", t.id, shape, s, per_iteration=per_iteration, where=s.span.line)
        if var:
            key = family_key(t.id, var)
            old = scope.families.get(key)
            if old is not None:
                return self.redefine_member(t, old, shape, var)
            entry.family_var, entry.bound = var, scope.var(var).bound
            scope.families[key] = entry
            idx: ir.Expr | None = ir.Name(var, span=t.span)
            self.ctx.info.symbols[id(idx)] = Symbol("mapvar", var, None, scope.var(var).decl)
            self.ctx.info.shapes[id(idx)] = NATURAL
        else:
            scope.locals[t.id] = entry
            idx = None
        self.ctx.info.symbols[id(t)] = Symbol("local", t.id, idx, s)
        if shape is not None:
            self.ctx.info.shapes[id(t)] = shape

    def redefine_member(self, t: ir.Name, old: Entry, shape: Shape | None, var: str) -> None:
        idx = ir.Name(var, span=t.span)
        self.ctx.info.symbols[id(t)] = Symbol(old.kind, old.key, idx, old.decl)
        if old.kind != "local":
            self.ctx.error(
                t.span, f"cannot assign to the {_word(old.kind)} {t.id}", "use a new name for the result"
            )
        else:
            self.reassign(t, old, shape)

    def assign_index(self, s: ir.Assign, t: ir.Index, value: Shape | None) -> None:
        base = t.base
        found = self.ctx.scope.lookup(base.id)
        if found is not None and found.entry.kind in ("param", "hyper", "loopvar", "mapvar", "dim"):
            self.ex.infer(t)
            self.ctx.error(base.span, f"cannot assign to entries of the {_word(found.entry.kind)} {base.id}")
            return
        if found is not None:
            target = self.ex.infer(t)
            base_shape = found.entry.shape
            if base_shape is not None and base_shape.rank == 1:
                self.check_entry_range(t, base_shape.dims[0])
            if target is not None and value is not None and not compatible(target, value, self.ctx.eq):
                self.ctx.error(
                    s.span,
                    f"{self.ctx.text(t)} is {target} but the value is {value}",
                    shapes=(target, value),
                )
            return
        self.define_by_entries(s, t, value)

    def define_by_entries(self, s: ir.Assign, t: ir.Index, value: Shape | None) -> None:
        """`X̃[:, t] ← v` inside `for t ∈ [ℓ]` defines X̃ ∈ ℝ^{d×ℓ} when X̃ is new; an entry
        `y[2·i − 1] ← …` inside `for i ∈ [n]` defines y with a length left open (ℝ^{?})."""
        dims: list[Dim | None] = []
        free = list(value.dims) if value is not None else []
        valid, colons, unsized = True, 0, None
        for item in t.indices:
            if isinstance(item, ir.Slice) and item.lo is None and item.hi is None:
                colons += 1
                dims.append(free.pop(0) if free else None)
                continue
            v = self.ctx.scope.var(item.id) if isinstance(item, ir.Name) else None
            if v is not None and v.kind == "mapvar":
                self.ex.infer(item)
                dims.append(v.bound)
            elif not isinstance(item, ir.Slice) and self.uses_map_var(item):
                self.ex.scalar(item, "an index")
                dims.append(None)  # built entry by entry (`y[2·i − 1] ← …`): the length is not known here
                unsized = unsized or item
            else:
                valid = False
        if not valid or (value is not None and colons != value.rank):
            self.ctx.error(
                t.base.span,
                f"{t.base.id} is not defined before its entries are assigned",
                f"assign {t.base.id} first, or define it column by column in a map: "
                f"for t ∈ [ℓ]: {t.base.id}[:, t] ← …",
            )
            return
        shape = None if value is None else Shape(value.field, tuple(dims))
        declared = self.ctx.scope.declared.get(t.base.id)
        if (  # the output vector built entry by entry has the length its declaration gives
            shape is not None
            and len(t.indices) == 1
            and declared is not None
            and t.base.id == self.ctx.algo.output
            and declared.shape is not None
            and declared.shape.rank == 1
        ):
            shape = Shape(value.field, declared.shape.dims)
        elif unsized is not None:  # the interpreter sizes a new array by its Output type or its map ranges
            self.ctx.error(
                unsized.span,
                f"{t.base.id} is defined by its entries, but {self.ctx.text(unsized)} does not say how "
                f"many it has",
                f"declare {t.base.id} as the Output, index it by the map variable itself, or assign "
                f"{t.base.id} whole first",
            )
        self.define(t.base, s, shape, self.map_var_of(t.base.id))
        if shape is not None and shape.rank == 1 and shape.dims[0] is not None:
            self.check_entry_range(t, shape.dims[0])
        if value is not None:
            self.ctx.info.shapes[id(t)] = value

    def check_entry_range(self, t: ir.Index, length: Dim | None) -> None:
        """An entry write `y[a·i + b]` inside `for i ∈ [n]` reaches entries b + a and a·n + b:
        both must lie in 1 … length(y) wherever the checker can decide it."""
        (item,) = t.indices if len(t.indices) == 1 else (None,)
        if length is None or item is None or isinstance(item, ir.Slice):
            return
        scope = self.ctx.scope
        maps = {n.id: scope.var(n.id) for n in _names_in(item)}
        maps = {k: v for k, v in maps.items() if v is not None and v.kind == "mapvar" and v.bound is not None}
        if len(maps) != 1:
            return
        ((var, entry),) = maps.items()
        try:
            index = expr_to_dim(item, lambda n: n == var or scope.is_dim(n))
        except DimError:
            return
        if index is None or var not in index.names():
            return
        first, last = index.substitute({var: Dim.num(1)}), index.substitute({var: entry.bound})
        if not _increasing(index, var):
            first, last = last, first
        if _positive(Dim.num(1) - first) or _positive(last - length):
            reach = f"entry {first}" if _positive(Dim.num(1) - first) else f"entry {last}"
            self.ctx.error(
                item.span,
                f"{self.ctx.text(t)} for {var} ∈ [{entry.bound}] writes {reach}, outside "
                f"{t.base.id}'s entries 1 … {length}",
                f"give {t.base.id} its full size first (declare it as the output, or build it with one "
                "map), or change the index",
            )

    def uses_map_var(self, e: ir.Expr) -> bool:
        return any((v := self.ctx.scope.var(n.id)) is not None and v.kind == "mapvar" for n in _names_in(e))

    # ── loops and conditions ──
    def for_seq(self, s: ir.ForSeq) -> None:
        for e, what in (
            (s.start, "the first value"),
            (s.second, "the second value"),
            (s.stop, "the last value"),
        ):
            if e is not None:
                self.ex.scalar(e, f"{what} of the loop")
        self.shadow_check(s.var, s)
        self.ctx.scope.push(
            {s.var: Entry("loopvar", s.var, NATURAL, s, bound=self.ex.dim(s.stop), where=s.span.line)}
        )
        self.body(s.body)
        self.ctx.scope.pop()

    def shadow_check(self, var: str, node: object) -> None:
        scope = self.ctx.scope
        e = scope.var(var) or scope.locals.get(var) or scope.declared.get(var)
        if e is not None:
            self.ctx.error(
                name_span(self.ctx, node.span, var),
                f"the loop variable {var} hides the {_word(e.kind)} {var}",
                "use another letter",
            )

    def for_all(self, s: ir.ForAll) -> None:
        frame: dict[str, Entry] = {}
        for r in s.ranges:
            self.shadow_check(r.var, r)
            frame[r.var] = Entry("mapvar", r.var, NATURAL, r, bound=self.range_bound(r), where=r.span.line)
        scope = self.ctx.scope
        before = set(scope.locals)
        scope.push(frame)
        self.map_vars += list(frame)
        self.body(s.body)
        del self.map_vars[-len(frame) :]
        scope.pop()
        own = set()
        for name in set(scope.locals) - before:
            if set(scope.locals[name].per_iteration) & frame.keys():
                scope.gone[name] = scope.locals.pop(name)
                own.add(name)
        check_independent(self.ctx, s, own)

    def range_bound(self, r: ir.Range) -> Dim | None:
        bad = [n for n in ir_dim_names(r.bound) if not self.ctx.scope.is_dim(n.name)]
        for n in bad:
            self.ctx.error(n.span, f"unknown dimension {n.name}", self.ctx.scope.hint_for(n.name))
        try:
            return None if bad else from_ir(r.bound)
        except DimError as exc:
            self.ctx.error(r.bound.span, f"dimension {exc}")
            return None

    def if_(self, s: ir.If) -> None:
        self.condition(s.cond)
        self.body(s.then)
        self.body(s.orelse)

    def condition(self, cond: ir.Expr) -> None:
        self.ex.scalar(cond, "a condition")
        for node in _names_in(cond):
            sym = self.ctx.info.symbols.get(id(node))
            if sym is not None and sym.kind not in _CONDITION_KINDS:
                self.ctx.error(
                    node.span,
                    f"a condition may only use hyperparameters and loop indices; {node.id} is {_a(sym.kind)}",
                    "compute values with ⟦…⟧ (an indicator) instead of branching on them",
                )

    def ret(self, s: ir.Return) -> None:
        self.returns += 1
        value = self.ex.infer(s.value)
        if s.annot is not None:
            self.annotation(s.annot, value)
        algo, out = self.ctx.algo, self.ctx.info.signature.output
        if s.name and s.name != algo.output:
            self.ctx.error(
                name_span(self.ctx, s.span, s.name),
                f"returns {s.name} but the header's output is {algo.output}",
                f"write `return {algo.output} = …`",
            )
        if out is not None and value is not None and not compatible(out, value, self.ctx.eq):
            self.ctx.error(
                s.value.span,
                f"returns {value} but the output {algo.output} is declared {out}",
                shapes=(value, out),
            )


_WORDS = {
    "param": "parameter", "hyper": "hyperparameter", "local": "local value", "loopvar": "loop variable",
    "mapvar": "map variable", "dim": "dimension", "option": "option",
}  # fmt: skip


def _word(kind: str) -> str:
    return _WORDS.get(kind, kind)


def _a(kind: str) -> str:
    word = _word(kind)
    return ("an " if word[0] in "aeiou" else "a ") + word


def _index_vars(target: ir.Expr) -> set[str]:
    """Names used in the indices of an assignment target (`y[2·i − 1]` → {i})."""
    if isinstance(target, ir.Index):
        return {n.id for i in target.indices if not isinstance(i, ir.Slice) for n in _names_in(i)}
    return set()


def _positive(d: Dim) -> bool:
    """True when `d` is certainly > 0 for every positive value of its names (all terms positive)."""
    return bool(d.terms) and all(c > 0 and all(e > 0 for _, e in m) for m, c in d.terms.items())


def _increasing(index: Dim, var: str) -> bool:
    """True when the (affine) index grows with `var`: its coefficient of var is positive."""
    return all(c > 0 for m, c in index.terms.items() if any(n == var for n, _ in m))


def _names_in(e: ir.Expr) -> list[ir.Name]:
    return [n for n in ir.walk(e) if isinstance(n, ir.Name)]
