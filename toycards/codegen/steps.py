"""Statements: each card step becomes one generated statement or short block.

Owns: `StepEmitter` (assignments, returns, sequential loops, conditionals, and parallel maps
`for t ∈ [ℓ]`, `for h ∈ [H]`, `for t_z ∈ …, t_x ∈ …` vectorised into array operations), each
statement preceded by the card line it implements; `map_kinds` (how a map variable indexes).
Leaves out: expressions (exprs.py), the algorithm prologue (emitter.py).
"""

from __future__ import annotations

import re

from toycards.codegen.assign import column_target
from toycards.codegen.exprs import ExprEmitter
from toycards.codegen.module import comment_safe
from toycards.codegen.scope import AFTER, Module, Scope, family_key, free_names, run_time_hypers
from toycards.codegen.values import MapVar, Val
from toycards.errors import Diagnostic, ToycardsError
from toycards.lang import ir
from toycards.lang.printer import stmt_text


def calls_in(body) -> list[ir.Call]:
    return [n for n in ir.walk(body) if isinstance(n, ir.Call)]


ONE_CALL_PRODUCTS = {"torch"}  # targets whose ops.linears computes products of one input in one call


def products_of_one_input(body, i: int) -> int:
    """How many steps from body[i] on are products `A ← W · X` of one and the same name X (at most
    three, each to its own name, none assigning X or reading an earlier one's result): computed
    together, they give what the steps give one after another."""
    x, seen, n = None, set(), 0
    for s in body[i : i + 3]:
        if not (
            isinstance(s, ir.Assign)
            and isinstance(s.target, ir.Name)
            and isinstance(s.value, ir.BinOp)
            and s.value.op == "·"
            and isinstance(s.value.right, ir.Name)
            and s.value.right.id == (x or s.value.right.id)
        ):
            break
        x, target = s.value.right.id, s.target.id
        if target == x or target in seen or free_names(s.value.left) & (seen | {target}):
            break
        seen.add(target)
        n += 1
    return max(n, 1)


class StepEmitter:
    """Statements: one card step → one commented statement (or short block)."""

    def __init__(self, emitter: Module, scope: Scope, ex: ExprEmitter) -> None:
        self.em, self.scope, self.ex = emitter, scope, ex
        self.number = 0
        # the entry point's names whose value follows from its hyperparameters alone (`_constant`)
        self.constants: set[str] = set()
        for name in run_time_hypers(emitter).get(scope.algo.name, ()):
            if name in scope.vals and scope.vals[name].py:
                scope.vals[name] = scope.vals[name].with_(py=False)
                scope.dims.pop(name, None)

    def note(self, s: ir.Stmt, text: str | None = None) -> str:
        r = self.em.renderer
        if text is None:
            line, annot = stmt_text(r, s)
            if annot is not None:
                line += f"  ∷ {r.type(annot)}"
        else:
            line = text
        return f"# {self.number}  {comment_safe(line)}"

    def block(self, body: tuple[ir.Stmt, ...], out: list[str], depth: int) -> None:
        pad = "    " * depth
        i = 0
        while i < len(body):
            s = body[i]
            if isinstance(s, ir.Comment):
                out.append(f"{pad}# ▷ {comment_safe(s.text)}")
                i += 1
                continue
            n = products_of_one_input(body, i) if self.em.target in ONE_CALL_PRODUCTS else 1
            if n > 1:
                self._products(body[i : i + n], out, pad, depth)
                i += n
                continue
            self._numbered(s, out, pad, depth)
            i += 1

    def _numbered(self, s: ir.Stmt, out: list[str], pad: str, depth: int) -> None:
        self.number += 1
        try:
            self.stmt(s, out, pad, depth)
        except ToycardsError as exc:
            if exc.diagnostics:
                raise
            raise ToycardsError.from_diagnostics(
                [Diagnostic(s.span, f"cannot generate code: {exc.message}")],
                self.em.sources(self.scope.algo),
            ) from None

    def _products(self, stmts, out: list[str], pad: str, depth: int) -> None:
        """Consecutive steps `A ← W_a · X`, `B ← W_b · X`, … (products_of_one_input) as one
        `A, B = ops.linears(X, W_a, W_b)` after their card lines, where each became a plain
        `ops.linear` of the same X; else each step as itself."""
        parts: list[list[str]] = []
        for s in stmts:
            lines: list[str] = []
            self._numbered(s, lines, pad, depth)
            parts.append(lines)
        product = re.compile(rf"{re.escape(pad)}(\w+) = ops\.linear\((\w+), (.+)\)")
        found = [product.fullmatch(lines[1]) if len(lines) == 2 else None for lines in parts]
        if not all(found) or len({m.group(2) for m in found}) != 1:
            out += [line for lines in parts for line in lines]
            return
        out += [lines[0] for lines in parts]  # the card lines
        targets, weights = ", ".join(m.group(1) for m in found), ", ".join(m.group(3) for m in found)
        out.append(f"{pad}{targets} = ops.linears({found[0].group(2)}, {weights})")

    def stmt(self, s: ir.Stmt, out: list[str], pad: str, depth: int) -> None:
        if isinstance(s, ir.ForSeq):
            self._for_seq(s, out, pad, depth)
        elif isinstance(s, ir.ForAll):
            self._forall(s, out, pad, depth)
        elif isinstance(s, ir.If) and not s.inline:
            self._if_block(s, out, pad, depth)
        elif isinstance(s, ir.If):
            cond = self.ex.expr(s.cond)
            out.append(pad + self.note(s))
            if not cond.py:
                raise ToycardsError(
                    "an `if` outside a parallel map must test hyperparameters or loop indices"
                )
            inner: list[str] = []
            self.simple(s.then[0], inner)
            out.append(f"{pad}if {cond.code}:")
            out += [f"{pad}    {line}" for line in inner]
        else:
            out.append(pad + self.note(s))
            lines: list[str] = []
            constant = self._constant(s, depth)
            self.simple(s, lines)
            made = re.fullmatch(r"(\w+) = (.+)", lines[0]) if constant and len(lines) == 1 else None
            if made and made.group(1) == self.scope.vals[s.target.id].code:
                lines = [f"{made.group(1)} = self.constant({self.number}, lambda: {made.group(2)})"]
                self.constants.add(s.target.id)  # (one line: no array written entry by entry, so a
                # later entry write to the name copies it first, never writing the kept value)
            out += [pad + line for line in lines]

    def _constant(self, s: ir.Stmt, depth: int) -> bool:
        """Whether step s of the entry point's top level gives a name a value that follows from the
        hyperparameters alone (and names given such values before it): `ρ ← ones(| n_r)`,
        `μ ← rotated_magnitude(| m, d_h, d_r)`. Such a step becomes `self.constant(step, make)`: made
        at the model's first pass and kept (runtime.model_base.ModelAPI.constant), where each pass made
        it anew; and a recorded decoding step may read it as its own (engine/torch/replay.py). Every other
        assignment takes its name out of that set."""
        for st in ir.walk(s):
            if isinstance(st, ir.Assign):
                self.constants.discard(_target_name(st.target))
        if not (
            self.scope.is_main and depth == 0 and isinstance(s, ir.Assign) and isinstance(s.target, ir.Name)
        ):
            return False
        hypers = {n for d in self.scope.algo.hyper_decls for n in d.names}
        return free_names(s.value) <= hypers | self.scope.enum_options | self.constants

    def _for_seq(self, s: ir.ForSeq, out, pad, depth) -> None:
        # the body runs again after its last step: whatever it shares anywhere is shared at its top
        for st in ir.walk(s.body):
            if isinstance(st, ir.Assign):
                self.scope.share(free_names(st.value) | free_names(st.target))
        columns = self._columns_written(s.body)
        start, stop = self.ex.expr(s.start), self.ex.expr(s.stop)
        ident = self.scope.ns.name(s.var)
        out.append(
            pad
            + self.note(
                s,
                f"for {s.var} = {self.em.renderer.expr(s.start)}, "
                + (f"{self.em.renderer.expr(s.second)}, " if s.second is not None else "")
                + f"…, {self.em.renderer.expr(s.stop)} do",
            )
        )
        step = ""
        if s.second is not None:  # `for l = 1, 3, …, L`: the step is the second value less the first
            second = self.ex.int_code(s.second)
            if second.isdigit() and start.code.isdigit():
                step = "" if int(second) - int(start.code) == 1 else f", {int(second) - int(start.code)}"
            else:
                step = f", {second} - {start.code}"
        for name in columns:  # made by its first column write (ops.put_col), then written in place
            col_ident = self.scope.ns.name(name)
            out.append(f"{pad}{col_ident} = None  # {comment_safe(name)}: written column by column below")
            self.scope.columns[name] = col_ident
        out.append(f"{pad}for {ident} in range({start.code}, {stop.code} + 1{step}):")
        self.scope.loops[s.var] = Val(ident, 0, py=True)
        before = len(out)
        self.block(s.body, out, depth + 1)
        if len(out) == before:
            out.append(f"{pad}    pass")
        self.number += 1  # `end`
        del self.scope.loops[s.var]
        for name in columns:
            self.scope.columns.pop(name, None)

    def _columns_written(self, body, assigned: set[str] | None = None) -> list[str]:
        """Names that a loop's body defines by writing their columns (`Y[:, t] ← …`) one at a time:
        in its steps, its `if`s and inner loops, not in a parallel map (which writes every column),
        and not after a step of the body gives the name a whole value (`Y ← X`)."""
        out: list[str] = []
        assigned = set() if assigned is None else assigned
        for st in body:
            if isinstance(st, ir.ForSeq):
                inner = self._columns_written(st.body, assigned)
            elif isinstance(st, ir.If):
                inner = self._columns_written(st.then, assigned) + self._columns_written(st.orelse, assigned)
            else:
                t = st.target if isinstance(st, ir.Assign) else None
                written = isinstance(t, ir.Index) and isinstance(t.base, ir.Name) and column_target(t)
                fresh = written and not self.scope.defines(t.base.id) and t.base.id not in assigned
                inner = [t.base.id] if fresh else []
                for a in ir.walk(st):
                    if isinstance(a, ir.Assign) and isinstance(a.target, ir.Name):
                        assigned.add(a.target.id)
            out += [n for n in inner if n not in out]
        return out

    def _if_block(self, s: ir.If, out, pad, depth) -> None:
        cond = self.ex.expr(s.cond)
        if not cond.py:
            raise ToycardsError("an `if` outside a parallel map must test hyperparameters or loop indices")
        out.append(pad + self.note(s, f"if {self.em.renderer.expr(s.cond)} then"))
        out.append(f"{pad}if {cond.code}:")
        before = len(out)
        self.block(s.then, out, depth + 1)
        if len(out) == before:
            out.append(f"{pad}    pass")
        if s.orelse:
            self.number += 1
            out.append(f"{pad}else:")
            self.block(s.orelse, out, depth + 1)
        self.number += 1  # `end`

    def _forall(self, s: ir.ForAll, out, pad, depth) -> None:
        merged_ends, number = 0, self.number
        while not s.inline and len(s.body) == 1 and isinstance(s.body[0], ir.ForAll):
            inner = s.body[0]  # `for t_z … do for t_x … do … end end` is one map over both
            s = ir.ForAll(s.ranges + inner.ranges, inner.body, inner.inline, s.comment, span=s.span)
            self.number += 1
            merged_ends += 1
        ranges = s.ranges
        maps = {}
        for r in ranges:
            bound = self.ex.dim(r.bound)
            win = isinstance(r.bound, ir.DimName) and r.bound.name in self.scope.windowed
            maps[r.var] = MapVar(r.var, self.scope.ns.name(r.var), bound, win, bound=r.bound)
        kinds = map_kinds(s, set(maps))
        for v, k in kinds.items():
            maps[v].kind = k
        self.scope.maps.update(maps)
        self._settle_kinds(s, maps)
        head = out.append
        if s.inline:
            head(pad + self.note(s))
            lines: list[str] = []
            self._map_body(s.body[0], lines, maps)
            out += [pad + line for line in self._var_defs(maps) + lines]
        else:
            self.number, inner_number = number, self.number
            head(
                pad
                + self.note(
                    s,
                    "for "
                    + ", ".join(f"{r.var} ∈ [{self.em.renderer.dim(r.bound)}]" for r in ranges)
                    + " do",
                )
            )
            self.number = inner_number
            lines = []
            inner_pad = ""
            for st in s.body:
                self.number += 1
                if isinstance(st, ir.If) and not st.inline:
                    lines.append(self.note(st, f"if {self.em.renderer.expr(st.cond)} then"))
                else:
                    lines.append(inner_pad + self.note(st))
                self._map_body(st, lines, maps, numbered=True)
            out += [pad + line for line in self._var_defs(maps) + lines]
            self.number += 1  # `end`
        self.number += merged_ends
        for v in maps:
            del self.scope.maps[v]

    def _settle_kinds(self, s: ir.ForAll, maps: dict[str, MapVar]) -> None:
        """Each variable's layout (scope.AFTER) is the largest rank it carries: a value it
        indexes (`k_t`, `X[:, t]`, `rows(Q, h, d_h)`) or a family member it defines
        (`μ_h ← …`, `Y^h ← …`). The body is emitted once for a look at those ranks, under the
        widest layout, so that every value in the real emission already has its final layout."""
        ranks = {v: {"element": 0, "column": 1, "block": 2}.get(m.kind, 0) for v, m in maps.items()}
        kinds = {v: m.kind for v, m in maps.items()}
        with self.ex.tentatively():
            for m in maps.values():
                m.kind = "pending"
            for st in s.body:
                a = next(iter(assignments((st,))), st)
                target = a.target if isinstance(a, ir.Assign) else None
                for v in maps:
                    ranks[v] = max(ranks[v], self.ex.indexed_rank(st, v))
                try:
                    self._map_body(st, [], maps)
                except ToycardsError:
                    break  # the real emission reports it
                for m in maps.values():  # every statement is looked at under the same layout
                    m.kind = "pending"
                key = family_key(target.id, set(maps)) if isinstance(target, ir.Name) else None
                if key is not None and key[0] in self.scope.families:
                    fam = self.scope.families[key[0]]
                    ranks[fam.var] = max(ranks[fam.var], fam.rank)
        for v, m in maps.items():
            widest = ("element", "column", "block")[min(ranks[v], 2)]
            m.kind = kinds[v] if kinds[v] != "pending" and AFTER[kinds[v]] >= AFTER[widest] else widest

    def _var_defs(self, maps: dict[str, MapVar]) -> list[str]:
        out = []
        for m in maps.values():
            if not m.used_as_value:
                continue
            values = (
                f"runtime.positions(ctx, {m.bound_code})"
                if m.windowed
                else f"ops.arange(1, {m.bound_code} + 1)"
            )
            out.append(
                f"{m.ident} = ops.as_float(ops.index_vector({values}, {m.ndim_after}))  # {comment_safe(m.name)} ∈ [{m.bound_code}]"
            )
        return out

    def _map_body(
        self, st: ir.Stmt, out: list[str], maps: dict[str, MapVar], guard: Val | None = None, numbered=False
    ) -> None:
        """One statement of a map's body. Under `guard` (a boolean array over the map's
        variables, the conditions of the enclosing `if`s) an assignment keeps the old entries
        where the guard is false (`ops.where`); a name an `if` defines for the first time is
        computed everywhere in its `then` branch, and the `else` branch, which must define it
        too, overwrites the entries where the condition is false."""
        if isinstance(st, ir.If):
            self._map_if(st, out, maps, guard, numbered and not st.inline)
            return
        if not isinstance(st, ir.Assign):
            raise ToycardsError("a parallel map may hold assignments and `if`s of assignments only")
        if guard is None or not self._defined(st.target):
            self.ex.assign_in_map(st, out, maps)
            return
        value = self.ex.expr(st.value)
        old = self.ex.target_read(st.target)
        out += self.ex.take_pre()
        kept = self.ex.written(st.target, guard), self.ex.written(st.target, value)  # as the array holds them
        out.append(f"{self._target_code(st.target, maps)} = ops.where({kept[0]}, {kept[1]}, {old.code})")

    def _target_code(self, target: ir.Expr, maps: dict[str, MapVar]) -> str:
        """The identifier an assignment in a map writes (`u_t`: the array of the family u)."""
        key = family_key(target.id, set(maps)) if isinstance(target, ir.Name) else None
        fam = self.scope.families.get(key[0]) if key is not None else None
        return fam.ident if fam is not None else self.ex.target_ident(target)

    def _map_if(
        self, st: ir.If, out: list[str], maps: dict[str, MapVar], guard: Val | None, numbered
    ) -> None:
        (a,) = st.then if st.inline else (None,)
        if guard is None and isinstance(a, ir.Assign) and self._defined(a.target):  # one line, one where
            negated = isinstance(st.cond, ir.UnOp) and st.cond.op == "¬"
            cond = self.ex.expr(st.cond.operand if negated else st.cond)
            value, old = self.ex.expr(a.value), self.ex.target_read(a.target)
            out += self.ex.take_pre()
            new = self.ex.written(a.target, value)  # as the array holds it
            picks = f"{old.code}, {new}" if negated else f"{new}, {old.code}"
            out.append(
                f"{self._target_code(a.target, maps)} = ops.where({self.ex.written(a.target, cond)}, {picks})"
            )
            return
        cond = self.ex.expr(st.cond)
        out += self.ex.take_pre()
        new = {_target_name(a.target) for a in assignments(st.then) if not self._defined(a.target)}
        other = {_target_name(a.target) for a in assignments(st.orelse) if not self._defined(a.target)}
        if st.orelse and new != other or not st.orelse and new:
            one = sorted(new ^ other if st.orelse else new)[0]
            raise ToycardsError(
                f"{one} is defined in one branch of this `if` only: inside a parallel map, define it "
                "before the `if` or in both branches"
            )
        c = self.scope.ns.fresh("cond")
        both = cond if guard is None else self.ex.conjunction(guard, cond)
        out.append(f"{c} = {both.code}")
        self._map_branch(st.then, out, maps, both.with_(code=c), numbered)
        if st.orelse:
            if numbered:
                self.number += 1
                out.append(f"# {self.number}  else")
            c_else = self.scope.ns.fresh("cond")
            negated = f"not {c}" if cond.py else f"ops.logical_not({c})"  # a Python bool, or an array
            otherwise = cond.with_(code=negated)
            both = otherwise if guard is None else self.ex.conjunction(guard, otherwise)
            out.append(f"{c_else} = {both.code}")
            self._map_branch(st.orelse, out, maps, both.with_(code=c_else), numbered)
        if numbered:
            self.number += 1  # `end`

    def _map_branch(self, body, out: list[str], maps: dict[str, MapVar], guard: Val, numbered) -> None:
        for b in body:
            if numbered:
                self.number += 1
                if isinstance(b, ir.If) and not b.inline:
                    out.append(self.note(b, f"if {self.em.renderer.expr(b.cond)} then"))
                else:
                    out.append(self.note(b))
            self._map_body(b, out, maps, guard, numbered)

    def _defined(self, target: ir.Expr) -> bool:
        try:
            with self.ex.tentatively():
                self.ex.target_read(target)
        except ToycardsError:
            return False
        return True

    def simple(self, s: ir.Stmt, out: list[str]) -> None:
        if isinstance(s, ir.Assign):
            self.ex.assign(s, out)
        elif isinstance(s, ir.Return):
            if self.scope.state is not None:  # what the next pass over the sequence starts from
                slot, names = self.scope.state
                out.append(f"runtime.keep(ctx, {slot}, {', '.join(names)})")
            self.ex.ret(s, out)
        else:
            raise ToycardsError(f"unsupported statement {type(s).__name__}")


def assignments(body) -> list[ir.Assign]:
    """The assignments of a map's body, those inside its `if`s included, in order."""
    out: list[ir.Assign] = []
    for st in body:
        if isinstance(st, ir.If):
            out += assignments(st.then) + assignments(st.orelse)
        elif isinstance(st, ir.Assign):
            out.append(st)
    return out


def _target_name(t: ir.Expr) -> str:
    return t.base.id if isinstance(t, ir.Index) and isinstance(t.base, ir.Name) else getattr(t, "id", "?")


def map_kinds(s: ir.ForAll, names: set[str]) -> dict[str, str]:
    """How each map variable is laid out, read from the assignment targets of the map body."""
    kinds: dict[str, str] = {}
    for st in assignments(s.body):
        t = st.target if isinstance(st, ir.Assign) else None
        if isinstance(t, ir.Index):
            idx = t.indices
            if (
                len(idx) == 2
                and isinstance(idx[0], ir.Slice)
                and isinstance(idx[1], ir.Name)
                and idx[1].id in names
            ):
                kinds.setdefault(idx[1].id, "column")
                member = family_key(t.base.id, names) if isinstance(t.base, ir.Name) else None
                if member is not None and member[1] in names:  # `Q̂^h[:, t]`: a matrix per head
                    kinds.setdefault(member[1], "block")
            elif len(idx) == 2 and not any(isinstance(i, ir.Slice) for i in idx):
                for n in free_names(idx[0]) & names:  # `S[t_z, t_x]`: rows the last code axis
                    kinds.setdefault(n, "element")
                for n in free_names(idx[1]) & names:
                    kinds.setdefault(n, "column")
            elif len(idx) == 1:
                for n in free_names(idx[0]) & names:
                    kinds.setdefault(n, "element")
    for n in names:
        kinds.setdefault(n, "pending")
    return kinds
