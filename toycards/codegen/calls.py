"""Calls and collection expressions: builtins, algorithms of the card or prelude, Σ, concatenation.

Owns: `CallEmitter`, the part of `ExprEmitter` that emits a builtin call (laid out by its rule in
lang/builtins.py), a call of an algorithm (implicit maps over columns and heads, masks passed as
functions, the KV cache threaded to attention), `rows(A, i, k)`, Σ reductions and `[A; B]`,
`[a, b]`, `[e_1, …, e_ℓ]` concatenations.
Leaves out: names, operators and indexing (exprs.py), assignments (assign.py).
"""

from __future__ import annotations

from toycards.checker.bindings import dim_or_none
from toycards.codegen.axes import COL, ONE, ROW, canonical, relayout, rename_axes, spell
from toycards.codegen.code import expr_text, int_literal, paren, parse_expr, shifted, union_fams
from toycards.codegen.module import comment_safe
from toycards.codegen.scope import AFTER, Family, family_key, free_names, run_time_hypers
from toycards.codegen.values import HEAD_PICKING, WINDOW_READING, MapVar, Val
from toycards.errors import ToycardsError
from toycards.lang import ir
from toycards.lang.builtins import BUILTINS
from toycards.lang.masks import mask_window
from toycards.lang.options import call_params, option_argument


class CallEmitter:
    """Mixin of ExprEmitter: calls, Σ and concatenation."""

    def call(self, c: ir.Call) -> Val:
        callee = self.em.resolve(self.scope.algo, c.func)
        if callee is not None:
            return self.call_algorithm(c, callee)
        return self.builtin(c)

    def builtin(self, c: ir.Call) -> Val:
        """A call of a registry builtin, laid out by its rule (lang/builtins.py)."""
        b = BUILTINS[c.func]
        if b.rule == "rows":
            return self.rows(c)
        if b.rule in ("zeros", "filled"):  # sizes in code order: a card matrix m×n is [n, m]
            sizes = [self.int_code(a) for a in reversed(c.args[b.rule == "filled" :])]
            value = [self.expr(c.args[0]).code] if b.rule == "filled" else []
            return Val(f"ops.{b.ops}({', '.join(value + sizes)})", len(sizes))
        args = [self.expr(a) for a in c.args]
        if b.rule == "length":  # entries of a vector, columns of a matrix (in code layout, axis −2)
            axis = -2 if args[0].rank == 2 and args[0].layout == "code" else -1
            return Val(f"{paren(args[0].code)}.shape[{axis}]", 0, py=True)
        if b.rule in ("elementwise", "ceil"):
            a = args[0]
            if a.py and b.scalar_code:
                return Val(f"{b.scalar_code}({a.code})", 0, py=True)
            code = f"ops.as_float({a.code})" if a.py else self.code_layout(a)
            return a.with_(code=f"ops.{b.ops}({code})", layout="code" if not a.py else a.layout, py=False)
        if b.rule == "extreme" and len(args) == 1 and args[0].rank == 2:  # per column: a vector
            per_column = f"ops.{b.ops}({self.code_layout(args[0])})"  # the columns' axis now entries
            after = self.after_of(args[0].fams)
            have = rename_axes(canonical(2, False, after), {COL: ROW, ROW: ONE})
            return Val(spell(per_column, have, canonical(1, False, after)), 1, fams=args[0].fams)
        if b.rule == "extreme" and len(args) == 1:
            return Val(f"ops.{b.ops}({args[0].code})", 0, fams=args[0].fams)
        if b.rule == "extreme" and all(a.py for a in args):
            return Val(f"{b.scalar_code}({args[0].code}, {args[1].code})", 0, py=True)
        if b.rule == "extreme":
            x, y = args
            return self._elementwise(x, y, ",", call=f"ops.{b.ops_pair}")
        if b.rule == "topk":
            v, k = args
            return Val(f"ops.{b.ops}({self.code_layout(v)}, {self.int_code(c.args[1])})", v.rank, fams=v.fams)
        raise ToycardsError(f"cannot generate code for the builtin {c.func} (rule {b.rule})")

    def rows(self, c: ir.Call) -> Val:
        """`rows(A, i, k)`: the i-th block of k rows (card rows are the last code axis)."""
        if len(c.args) != 3:
            raise ToycardsError("rows(A, i, k) takes three arguments")
        a, block, k = self.expr(c.args[0]), c.args[1], self.int_code(c.args[2])
        var = next((v for v in free_names(block) if v in self.scope.maps), None)
        if var is None:
            i = self.int_code(block)
            if i.isdigit():
                lo = "" if i == "1" else (k if i == "2" else f"{int(i) - 1} * {k}")
                sl = f"{lo}:{k if i == '1' else f'{i} * {k}'}"
            else:
                sl = f"({i} - 1) * {k}:{paren(i)} * {k}"
            if a.rank == 2 and a.layout == "card":
                return a.with_(code=f"{a.code}[{sl}]")
            return a.with_(code=f"{a.code}[..., {sl}]")
        heads, have = self.split_blocks(a, self.code_layout(a), var, k)
        if isinstance(block, ir.Name) and block.id == var:
            # `for j ∈ [G]: rows(C, j, d)` of a C with more rows than G·d: only the first G blocks
            if not self._blocks_fill_rows(c, self.scope.maps[var]):
                heads = f"{heads}[..., :{self.scope.maps[var].bound_code}, :, :]"
            want = canonical(a.rank, False, self.after_of(a.fams | {var}))
            return Val(spell(heads, have, want), a.rank, fams=a.fams | {var})
        gathered = self._gather_member(Family(heads, a.rank, var, 2), expr_text(block))
        return gathered.with_(fams=a.fams | {var})

    def _blocks_fill_rows(self, c: ir.Call, m: MapVar) -> bool:
        """Whether the n blocks of `rows(A, j, k)` in a map `for j ∈ [n]` are all of A's rows
        (A ∈ ℝ^{n·k×…} as the checker inferred A, modulo derived hyperparameters), so that the map
        takes every block; True where a shape is not known."""
        rows = getattr(self.em.checked.shape(self.scope.algo, c.args[0]), "dims", ())
        n = dim_or_none(m.bound) if m.bound is not None else None
        k = self._dim_of(c.args[2])
        if not rows or None in (rows[0], n, k):
            return True
        return self.em.checked.same_dims(self.scope.algo, rows[0], n * k)

    def call_algorithm(self, c: ir.Call, callee: ir.Algorithm) -> Val:
        passed = call_params(callee, c)  # what it writes, then the defaults it leaves out
        if len(c.args) != len(callee.inputs) or len(passed) != len(callee.params):
            raise ToycardsError(
                f"{callee.name} takes {len(callee.inputs)} inputs and {len(callee.params)} parameters"
            )
        decls = {n: d for d in (*callee.input_decls, *callee.hyper_decls) for n in d.names}
        pnames = {n for d, _ in callee.all_params() for n in d.names}
        codes, fams, extra = [], frozenset(), 0
        implicit: dict[int, int] = {}  # position → the columns an argument is implicitly mapped over
        kv_index = ""
        arg_vals: list[Val] = []
        cached = self.em.plan.extend.get(id(c), ())  # its context inputs (checker/tokenflow.py)
        for name, arg in zip(callee.inputs, c.args, strict=True):
            v = self.expr(arg)
            fams |= v.fams
            t = decls[name].type if name in decls else None
            declared_rank = len(t.dims) if isinstance(t, ir.TensorType) else 0
            extra = max(extra, v.rank - declared_rank)
            implicit[len(codes)] = max(0, v.rank - declared_rank)
            codes.append(self.code_layout(v))
            arg_vals.append(v)
        if cached:
            kv_index = self._cached_keys_values(callee, c, cached, arg_vals, codes)
        given = list(enumerate(arg_vals))  # (position in codes, value) of the run-time arguments
        numbers_only = not callee.inputs  # every value passed is a Python number or an option
        for name, p in zip(callee.params, c.params):  # those it leaves out: the function's defaults
            if isinstance(p, ir.MaskDef):
                codes.append(self.mask_function(p))
                numbers_only = False
                continue
            option = option_argument(callee, name, p)
            if option is not None and not self.scope.defines(option):
                codes.append(repr(option))  # an option of the callee's enumeration
                continue
            v = self.expr(p)
            numbers_only = numbers_only and v.py
            if v.py and _natural(decls.get(name)):  # `ones(| d_h / 2)`: an ℕ in integer arithmetic
                v = v.with_(code=self.int_code(p))
            fams |= v.fams
            if name not in pnames and not (v.py or v.mask):  # a hyperparameter given a run-time value
                run_time_hypers(self.em).setdefault(callee.name, set()).add(name)
                given.append((len(codes), v))
            codes.append(
                v.code if name not in pnames or v.rank < 2 or v.layout == "card" else f"ops.mT({v.code})"
            )
        self._shared_arguments_mapped(given, codes, extra, fams, implicit)
        out = callee.output_decls[0].type if callee.output_decls else None
        rank = (len(out.dims) if isinstance(out, ir.TensorType) and out.field != "V" else 0) + extra
        code = f"{self.em.func_names[id(callee)]}({', '.join(codes)}, ctx=ctx{kv_index})"
        if numbers_only and rank == 0:  # a number computed from numbers only (`rope_magnitude(| …)`)
            return Val(code, 0, fams=fams, py=True)
        after = self.after_of(fams)
        if after or extra:  # the callee's result is laid out like its arguments: back to the map's layout
            # its leading axes the map variables, then the implicit columns (the first `extra` of
            # its own axes: an elementwise callee's number per entry has no size-1 axis of its own)
            have = (*self._mapped(fams), *canonical(rank, False, {}))
            code = spell(code, have, canonical(rank, False, after))
        return Val(code, rank, fams=fams)

    def _mapped(self, fams: frozenset) -> list[str]:
        """The map variables among `fams`, outermost first: the leading axes of a call per them."""
        maps = self.scope.maps
        return sorted((x for x in fams if x in maps), key=lambda x: -AFTER[maps[x].kind])

    def _shared_arguments_mapped(
        self, given: list[tuple[int, Val]], codes: list[str], extra: int, fams: frozenset, implicit: dict
    ) -> None:
        """A call per map variable (per head h, per column t, or both) sees the mapped axes as
        leading (batch) axes: each argument is laid out (axes.py) as the map variables, outermost
        first, then `extra` slots for implicitly mapped columns (an argument with more axes than
        its input declares: the callee runs once per column), then the input's own axes. An
        argument shared by every iteration gets size-1 axes for the variables it lacks (multi-query
        attention's one K for every head, a vector beside the columns of `X` in `g(X, u)`), and a
        number per head moves its axis there (`μ_h`, […, H, 1, 1] in the map, is […, H, 1]).
        `implicit`: how many implicitly mapped columns each input holds itself."""
        if not self.after_of(fams) and not extra:
            return
        slots = tuple(f"•{n}" for n in range(extra, 0, -1))  # the implicit columns, innermost last
        for k, v in given:
            if v.py or v.mask:
                continue
            after, n = self.after_of(v.fams), implicit.get(k, 0)
            have = self.axes(v) if codes[k] == v.code else canonical(v.rank, False, after)
            own = len(have) - max(1, v.rank) if v.rank else len(have) - 1  # where its own axes begin
            have = (*have[:own], *slots[len(slots) - n :], *have[own + n :])  # its columns are slots
            own_axes = canonical(v.rank - n, False, {}) if v.rank > n or not n else ()  # (each entry: no 1)
            want = (*self._mapped(fams), *slots, *own_axes)
            codes[k] = spell(codes[k], have, want, batched=not self.unbatched(v))

    def _cached_keys_values(
        self, callee: ir.Algorithm, c: ir.Call, cached, arg_vals: list[Val], codes: list[str]
    ) -> str:
        """Route the context arguments (keys, values) through the KV cache (codes[i] rewritten in
        place); the cache keeps the (fewer) key/value heads, and query heads pick from it afterwards.
        An array passed as both keys and values (DeepSeek's latent, `attention(q, C, C | …)`) is
        kept once. Returns the `kv_index=` keyword when the library's `attention` itself picks the
        heads."""
        bases = [arg_vals[i].gather[0] if arg_vals[i].gather else codes[i] for i in cached]
        kept = list(dict.fromkeys(bases))  # each array once, in order
        twice = {b for b in kept if bases.count(b) > 1 and b.isidentifier()}  # named after the array
        named = {
            b: self.scope.ns.fresh((b if b in twice else callee.inputs[cached[bases.index(b)]]) + "_all")
            for b in kept
        }
        idents = [named[b] for b in bases]
        targets = ", ".join(named.values()) + ("," if len(kept) == 1 else "")
        window = self._window_argument(callee, c)
        self.pre.append(f"{targets} = runtime.extend(ctx, {', '.join(kept)}{window})")
        gathers = [arg_vals[i].gather for i in cached]
        shared = (  # K and V pick the same heads by the same rule: let `attention` do it
            HEAD_PICKING.get(callee.name) == tuple(cached)
            and self.em.library.get(callee.name) == callee
            and all(g is not None and g[3] == gathers[0][3] and g[2] == -3 for g in gathers)
        )
        for i, ident, g in zip(cached, idents, gathers, strict=True):
            codes[i] = ident if shared or not g else f"ops.take({ident}, {g[1]}, {g[2]})"
        return f", kv_index={gathers[0][1]}" if shared else ""

    def _window_argument(self, callee: ir.Algorithm, c: ir.Call) -> str:
        """`, mask=M` or `, window=w` for `runtime.extend` where the library's `callee` reads its keys
        only through its mask (WINDOW_READING): a mask that states a window lets the cache drop the
        rows it leaves behind. Empty otherwise."""
        option = WINDOW_READING.get(callee.name)
        if option is None or self.em.library.get(callee.name) != callee or option not in callee.params:
            return ""
        at = callee.params.index(option)
        if at >= len(c.params):
            return ""
        given = c.params[at]
        if isinstance(given, ir.MaskDef):
            w = mask_window(given)
            return "" if w is None else f", window={self.expr(w).code}"
        v = self.expr(given)
        return f", mask={v.code}" if v.mask else ""

    def mask_function(self, m: ir.MaskDef) -> str:
        s = self.scope
        saved = dict(s.loops)
        idents = [s.ns.fresh(i) for i in m.indices]
        for i, ident in zip(m.indices, idents, strict=True):
            s.loops[i] = Val(ident, 0)
        try:
            body = self.expr(m.body.cond if isinstance(m.body, ir.Indicator) else m.body)
        finally:
            s.loops = saved
        function = f"lambda {', '.join(idents)}: {body.code}"
        window = mask_window(m)  # a sliding window its text states: a cache may drop older rows
        if window is None:
            return function
        return f"runtime.windowed({function}, {self.expr(window).code})"

    # ── sums and concatenation ─────────────────────────────────────────────────────────
    def sum(self, e: ir.Sum) -> Val:
        """`Σ_{i=lo}^{hi} body`: the terms as one array with i's axis laid out by the largest rank
        i indexes (an entry `x[i]`, a member `v_t`), summed over that axis; else (the terms are
        numbers, i picks a layer's parameters, or i's axis would meet a map's) a Python sum over
        i. A sum from lo ≠ 1 runs over i + lo − 1 for i = 1 … hi − lo + 1."""
        var, body = e.var, e.body
        running = self._running_sum(e)
        if running is not None:
            return running
        if free_names(e.hi) & set(self.scope.maps) or free_names(e.lo) & set(self.scope.maps):
            self.refuse(
                e,
                "a Σ whose bounds depend on a map variable cannot be generated in this form",
                "a running sum Σ_{r=1}^{t} f(r), f not reading t, generates; under the cache, carry the "
                "sum as a State (s ← s + x_t in a `for t = 1, …, ℓ do` loop) to decode in O(1) per token",
            )
        n = self.int_code(e.hi)
        if int_literal(e.lo) != 1:
            lo = int_literal(e.lo)
            body = shifted(
                body, var, ir.Num(str(lo - 1)) if lo is not None else ir.BinOp("-", e.lo, ir.Num("1"))
            )
            lo = self.int_code(e.lo)
            n = str(int(n) - int(lo) + 1) if n.isdigit() and lo.isdigit() else f"{paren(n)} - {paren(lo)} + 1"
        total = self._loop_sum(var, body, n, numbers_only=True)
        if total is None and not self._picks_layers(body, var):
            total = self._array_sum(var, body, n)
        if total is None:
            total = self._loop_sum(var, body, n, numbers_only=False)
        return total

    def _running_sum(self, e: ir.Sum) -> Val | None:
        """`Σ_{r=1}^{t} f(r)` inside a map over t, f not reading t: the running sums of f(t) along t's
        axis (f(t) is f's value at each t, as the map lays it out)."""
        t = e.hi.id if isinstance(e.hi, ir.Name) else None
        m = self.scope.maps.get(t)
        if m is None or int_literal(e.lo) != 1 or t in free_names(e.body):
            return None
        term = self.expr(renamed(e.body, e.var, t))
        if t not in term.fams:  # f(r) reads no r: t copies of it (t as a number, laid out like t)
            return None
        axes = self.axes(term)
        return term.with_(code=f"ops.cumsum({term.code}, {axes.index(t) - len(axes)})")

    def _picks_layers(self, body: ir.Expr, var: str) -> bool:
        """Whether `var` picks a layer's parameters (`A_l`): those are separate tensors."""
        for n in ir.walk(body):
            fk = family_key(n.id, {var}) if isinstance(n, ir.Name) else None
            if fk is not None and fk[0] in self.scope.param_families and var in free_names(parse_expr(fk[1])):
                return True
        return False

    def _array_sum(self, var: str, body: ir.Expr, n: str) -> Val | None:
        """The terms as one array, i's axis laid out by the largest rank it indexes, summed over
        it; None when that axis would be one a map's variable already holds."""
        s = self.scope
        m = s.maps[var] = MapVar(var, s.ns.fresh(var), n, False, "pending")
        try:
            with self.tentatively():
                try:
                    v = self.expr(body)
                except ToycardsError:
                    return None
                kind = ("element", "column", "block")[min(max(v.rank, self.indexed_rank(body, var)), 2)]
                m.kind = kind
                try:
                    v = self.expr(body)
                except ToycardsError:
                    return None
                if any(o in s.maps and o != var and s.maps[o].kind == kind for o in v.fams):
                    return None
            m.kind = kind
            v = self.expr(body)
            exponent = self.expr(body.args[0]) if is_exp(body) and var in v.fams else None
            axes = self.axes(v)
        finally:
            s.maps.pop(var)
        if var not in v.fams and not m.used_as_value:  # every term the same: n times the term
            return v.with_(code=f"{paren(n)} * {paren(v.code)}", py=v.py)
        if m.used_as_value:
            self.pre.append(
                f"{m.ident} = ops.as_float(ops.index_vector(ops.arange(1, {n} + 1), {AFTER[m.kind]}))"
                f"  # {comment_safe(var)} ∈ [{n}]"
            )
        fams = v.fams - {var}
        at = axes.index(var) - len(axes)  # the terms' axis of i, summed over (axes.py)
        if at == -1:  # […, n] → an array scalar […, 1]
            total, have = "ops.sum_last({})", (*axes[:-1], ONE)
        else:  # the axis is dropped
            total, have = f"ops.sum_axis({{}}, {at})", rename_axes(axes, {var: None})
        want = canonical(v.rank, False, self.after_of(fams))

        def reduce(code: str) -> str:
            return spell(total.format(code), have, want)

        out = Val(reduce(v.code), v.rank, fams=fams)
        if exponent is None:
            return out
        # Σ exp(b) = e^m · Σ exp(b − m), m the largest term's b: a quotient exp(a) / Σ exp(b)
        # (`binop`) divides exp(a − m) by Σ exp(b − m), which float32 holds where e^b overflows.
        b, top = s.ns.fresh("b"), s.ns.fresh("b_max")
        self.pre.append(f"{b} = {exponent.code}")
        self.pre.append(f"{top} = ops.max_keep({b}, {at})")
        scaled, shift = reduce(f"ops.exp({b} - {top})"), reduce(top) if at != -1 else top
        return out.with_(code=f"ops.exp({shift}) * {paren(scaled)}", exp_shift=(scaled, shift))

    def _loop_sum(self, var: str, body: ir.Expr, n: str, numbers_only: bool) -> Val | None:
        """`sum(term for k in range(1, n + 1))`, k a Python number in each term; with
        `numbers_only`, None unless every term is a Python number."""
        s = self.scope

        def term() -> Val:
            s.loops[var] = Val(s.ns.fresh(var), 0, py=True)
            try:
                return self.expr(body)
            finally:
                del s.loops[var]

        if numbers_only:
            with self.tentatively():
                try:
                    numbers = term().py
                except ToycardsError:  # e.g. a family member picked by k: not a number
                    numbers = False
            if not numbers:
                return None
        ident = s.ns.fresh(var)
        s.loops[var] = Val(ident, 0, py=True)
        try:
            v = self.expr(body)
        finally:
            del s.loops[var]
        return v.with_(code=f"sum({v.code} for {ident} in range(1, {n} + 1))", gather=None)

    def concat(self, e: ir.Concat) -> Val:
        if e.ellipsis:
            first = e.items[0]
            if not isinstance(first, ir.Name):
                raise ToycardsError("a family range `[e_1, …, e_ℓ]` needs family members")
            fk = family_key(first.id, set())
            if fk is None or fk[0] not in self.scope.families:
                raise ToycardsError(f"{first.id} is not a member of a family defined by a parallel map")
            fam = self.scope.families[fk[0]]
            if fam.rank < 2 and (e.axis == "cols" or fam.rank == 0):  # the members' axis is the new one:
                stored = canonical(fam.rank, False, {fam.var: fam.after})  # columns (or a vector's entries)
                new = COL if fam.rank else ROW
                return self.made(fam.ident, rename_axes(stored, {fam.var: new}), fam.rank + 1, ())
            if e.axis == "cols":
                return Val(relayout(fam.ident, fam.after, fam.rank, fam.rank), fam.rank + 1)
            blocks = relayout(fam.ident, fam.after, 2, fam.rank)  # […, H, ℓ, d], or […, H, 1, d]
            merged = canonical(fam.rank, False, {fam.var: 2})  # the members' rows one after another
            return self.made(f"ops.merge_rows({blocks})", rename_axes(merged, {fam.var: None}), fam.rank, ())
        parts = [self.expr(x) for x in e.items]
        if e.axis == "rows":  # a row `W[i, :]` stacks as a 1×n matrix: the transpose of one column
            parts = [self._one_column(p.with_(row=False)).with_(layout="card") if p.row else p for p in parts]
        fams, rank = union_fams(*parts), max(p.rank for p in parts)
        if all(p.py for p in parts):  # numbers side by side or stacked: a vector
            return Val(f"ops.as_float([{', '.join(p.code for p in parts)}])", 1)
        after = self.after_of(fams)
        codes = [self.spelled(p, canonical(p.rank, False, after), True) for p in parts]
        if e.axis == "rows" or min(p.rank for p in parts) == 0:  # by rows; a number is one entry
            return Val(f"ops.cat_last([{', '.join(codes)}])", max(rank, 1), fams=fams)
        if rank == 1:  # vectors side by side: the new axis is the columns' (the parts laid out without it)
            columns = rename_axes(canonical(2, False, after), {COL: None})
            codes = [self.spelled(p, columns, True) for p in parts]
            return Val(f"ops.stack_cols([{', '.join(codes)}])", 2, fams=fams)
        # a vector is one column: a 1-column matrix, laid out with every part's map variables
        columns = [self.spelled(self._one_column(p), canonical(2, False, after)) for p in parts]
        return Val(f"ops.cat_cols([{', '.join(columns)}])", 2, fams=fams)  # matrices side by side

    # ── assignments ────────────────────────────────────────────────────────────────────


def renamed(e: ir.Expr, var: str, to: str) -> ir.Expr:
    """`e` with the index variable `var` read as `to` (`X[:, r]` → `X[:, t]`), in family members too."""
    return shifted(e, var, ir.Num("0"), to)


def is_exp(e: ir.Expr) -> bool:
    """`exp(b)`, the builtin."""
    return isinstance(e, ir.Call) and e.func == "exp" and len(e.args) == 1 and not e.params


def _natural(d: ir.Decl | None) -> bool:
    """Whether a callee's hyperparameter is declared a natural number (`n ∈ ℕ`)."""
    return d is not None and isinstance(d.type, ir.TensorType) and d.type.field == "N" and not d.type.dims
