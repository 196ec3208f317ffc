"""Expressions and assignments of one algorithm → code, under the layout of values.py.

Owns: `ExprEmitter`, which puts together names (locals, parameters, families, map variables,
each member laid out for the map that reads it) and operators (`·` as matrix or scalar
product, `+ − ⊙ /`, powers, transposes, `b · 1^⊺` broadcasts) with its mixins: indexing
(indexing.py), calls, Σ and concatenation (calls.py), assignments (assign.py).
Leaves out: statement structure (steps.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from toycards.codegen.assign import AssignEmitter
from toycards.codegen.axes import COL, ONE, Axes, canonical, relayout, rename_axes, spell
from toycards.codegen.calls import CallEmitter, is_exp
from toycards.codegen.code import (
    COMPARE,
    name_code,
    paren,
    parse_expr,
    union_fams,
)
from toycards.codegen.indexing import IndexEmitter
from toycards.codegen.scope import AFTER, Family, Module, Scope, family_key, free_names
from toycards.codegen.values import MapVar, Val
from toycards.errors import ToycardsError
from toycards.lang import ir


class ExprEmitter(CallEmitter, AssignEmitter, IndexEmitter):
    def __init__(self, emitter: Module, scope: Scope) -> None:
        self.em, self.scope = emitter, scope
        self.pre: list[str] = []

    def take_pre(self) -> list[str]:
        out, self.pre = self.pre, []
        return out

    @contextmanager
    def tentatively(self) -> Iterator[None]:
        """Emit for a look only (e.g. the rank of a map's values, to lay the map out before
        emitting it): every change to the scope, its identifiers and the pending lines is undone."""
        s, ns = self.scope, self.scope.ns
        saved = (dict(ns.given), set(ns.used), dict(s.vals), dict(s.families), set(s.owned), dict(s.dims))
        maps = {k: (m.kind, m.used_as_value) for k, m in s.maps.items()}
        pre = list(self.pre)
        try:
            yield
        finally:
            ns.given, ns.used, s.vals, s.families, s.owned, s.dims = saved
            for k, (kind, used) in maps.items():
                s.maps[k].kind, s.maps[k].used_as_value = kind, used
            self.pre = pre

    # ── dimensions ─────────────────────────────────────────────────────────────────────
    def dim(self, d: ir.Dim) -> str:
        if isinstance(d, ir.DimNum):
            return str(d.value)
        if isinstance(d, ir.DimName):
            if d.name in self.scope.dims:
                return self.scope.dims[d.name]
            if d.name in self.scope.vals and self.scope.vals[d.name].py:
                return self.scope.vals[d.name].code
            raise ToycardsError(f"dimension {d.name} has no value here")
        op = {"+": "+", "-": "-", "*": "*", "/": "//"}[d.op]
        return f"({self.dim(d.left)} {op} {self.dim(d.right)})"

    # ── names ──────────────────────────────────────────────────────────────────────────
    def name(self, n: str) -> Val:
        s = self.scope
        if n in s.maps:
            m = s.maps[n]
            m.used_as_value = True
            return Val(m.ident, 0, fams=frozenset({n}))
        if n in s.loops:
            return s.loops[n]
        if n in s.vals:
            return s.vals[n]
        if n in s.dims:
            return Val(s.dims[n], 0, py=True)
        if n in s.enum_options:
            return Val(repr(n), 0, py=True, enum=True)
        member = self.family_member(n)
        if member is not None:
            return member
        raise ToycardsError(f"{n} has no value here")

    def family_member(self, n: str) -> Val | None:
        s = self.scope
        index_names = set(s.maps) | set(s.loops)
        fk = family_key(n, index_names)
        if fk is None:
            return None
        key, index = fk
        if key in s.param_families:
            return self._param_member(key, index)
        if key in s.families:
            fam = s.families[key]
            if index in s.maps:  # the member of this iteration: the family's axis is the map's
                code = self.laid_out(fam.ident, fam.after, s.maps[index], fam.rank, n)
                return Val(code, fam.rank, fams=frozenset({index}))
            if index == fam.var:
                return Val(fam.ident, fam.rank)
            if not free_names(parse_expr(index)) & set(s.maps):
                return self._fixed_member(fam, index, n)
            return self._gather_member(fam, index)
        return None

    def _fixed_member(self, fam: Family, index: str, name: str) -> Val:
        """`e_1`, `Y^2`, `e_ℓ`, `v_l`: one member, picked by a number, a dimension or a loop index."""
        k = self.index_code(index)
        members = relayout(fam.ident, fam.after, fam.rank, fam.rank)  # […, n] + the member's axes
        sl = f"{int(k) - 1}:{k}" if k.isdigit() else f"{paren(k)} - 1:{paren(k)}"
        if fam.rank == 0:
            return Val(f"{paren(members)}[..., {sl}]", 0)
        pick = str(int(k) - 1) if k.isdigit() else f"{paren(k)} - 1"
        after = ", :" * fam.rank  # the member's own axes
        return Val(f"{paren(members)}[..., {pick}{after}]", fam.rank)

    def indexed_rank(self, e: object, var: str) -> int:
        """The largest rank of what `var` indexes in `e`: a family member (`k_t`: its rank), a
        column (`X[:, t]`: 1), a block of rows (`rows(Q, h, d_h)`, `Q[(h − 1)·d_h + 1 : h·d_h, :]`:
        laid out per head, 2)."""
        rank = 0
        for n in ir.walk(e):
            if isinstance(n, ir.Name) and var not in (n.id,):
                fk = family_key(n.id, {var})
                fam = self.scope.families.get(fk[0]) if fk is not None else None
                if fam is not None and var in free_names(parse_expr(fk[1])):
                    rank = max(rank, fam.rank)
            elif isinstance(n, ir.Index) and len(n.indices) == 2 and isinstance(n.indices[0], ir.Slice):
                rank = max(rank, 1 if var in free_names(n.indices[1]) else 0, self._rows_rank(n, var))
            elif isinstance(n, ir.Index):
                rank = max(rank, self._rows_rank(n, var))
            elif isinstance(n, ir.Call) and n.func == "rows" and len(n.args) == 3:
                rank = max(rank, 2 if var in free_names(n.args[1]) else 0)
        return rank

    def _rows_rank(self, n: ir.Index, var: str) -> int:
        """The rank of one value per var of rows whose bounds read var (`x[a(i) : b(i)]`: 1;
        `X[a(h) : b(h), :]`, or of a column picked by another map variable: 2)."""
        first = n.indices[0]
        if not (isinstance(first, ir.Slice) and var in free_names(first)):
            return 0
        rest = n.indices[1:]
        others = set(self.scope.maps) - {var}
        return 2 if any(isinstance(i, ir.Slice) or free_names(i) & others for i in rest) else 1

    def laid_out(self, code: str, have: int, m: MapVar, rank: int, what: str) -> str:
        """`code`, whose axis of m has `have` axes after it, laid out for m's kind (scope.AFTER)."""
        out = relayout(code, have, AFTER[m.kind], rank)
        if out is None:
            raise ToycardsError(
                f"{what} has {rank} axes of its own and cannot be laid out per {m.name} "
                f"(a {m.kind} of this map)"
            )
        return out

    def _param_member(self, key: str, index: str) -> Val:
        """`W_q^l` → `self.w[f"blk.{l - 1}.attn_q.weight"]`: the tensor name with the layer filled in."""
        decl, group, n = self.scope.param_families[key]
        src = decl.binding.sources[decl.names.index(n)][0]
        idx = self.index_code(index)
        parts: list[tuple[str, str]] = []  # ("text", literal) or ("expr", python)
        pos = 0
        for m in re.finditer(r"\{([^{}]*)\}", group.prefix):
            parts.append(("text", group.prefix[pos : m.start()]))
            inner = m.group(1).replace(" ", "").replace("−", "-")
            aff = re.fullmatch(rf"{re.escape(group.var)}([+-]\d+)?", inner)
            if aff is None:
                raise ToycardsError(
                    f"the group prefix may only use {{{group.var}}} plus or minus a number, not {{{m.group(1)}}}"
                )
            offset = int(aff.group(1) or 0)
            code = idx if not offset else f"{paren(idx)} {'+' if offset > 0 else '-'} {abs(offset)}"
            parts.append(("expr", code))
            pos = m.end()
        parts.append(("text", group.prefix[pos:] + src.tensor))
        rank = len(decl.type.dims) if isinstance(decl.type, ir.TensorType) else 0
        layout = "code" if src.transpose else "card"
        return Val(f"self.w[{name_code(parts)}]", rank, layout=layout, param=True)

    def index_code(self, index: str) -> str:
        if index in self.scope.loops:
            return self.scope.loops[index].code
        if re.fullmatch(r"\d+", index):
            return index
        return self.expr(parse_expr(index)).code

    def _gather_member(self, fam: Family, index: str) -> Val:
        """`K^{⌈h·H_kv/H⌉}` inside `for h ∈ [H]`: pick family members by a function of h."""
        s = self.scope
        expr = parse_expr(index)
        var = next((v for v in s.maps if v in free_names(expr)), None)
        if var is None:
            raise ToycardsError(f"family index {index} must depend on a map variable")
        m = s.maps[var]
        loop = s.ns.fresh(var)
        saved = s.loops.get(var)
        s.loops[var] = Val(loop, 0, py=True)
        del s.maps[var]
        try:
            code = self.expr(expr).code
        finally:
            s.maps[var] = m
            if saved is not None:
                s.loops[var] = saved
            else:
                s.loops.pop(var, None)
        stored = canonical(fam.rank, False, {fam.var: fam.after})  # the members' axis, by its name
        axis = stored.index(fam.var) - len(stored)
        index = f"[int({code}) - 1 for {loop} in range(1, {m.bound_code} + 1)]"
        picked = f"ops.take({fam.ident}, {index}, {axis})"
        return Val(
            self.laid_out(picked, fam.after, m, fam.rank, f"{fam.ident}'s member {index}"),
            fam.rank,
            fams=frozenset({var}),
            gather=(fam.ident, index, axis, expr),
        )

    # ── expressions ────────────────────────────────────────────────────────────────────
    def expr(self, e: ir.Expr) -> Val:
        """The value of `e`. A refusal that does not say where is located at `e`, the innermost
        expression being generated when it was raised: its caret is under that sub-expression."""
        try:
            v = self._expr(e)
        except ToycardsError as exc:
            span = getattr(e, "span", None)
            if exc.diagnostics or span is None or span.line <= 0:
                raise
            self.refuse(e, exc.message)
        self._typed(e, v)
        return v

    def _typed(self, e: ir.Expr, v: Val) -> None:
        """The axes of `v` are named from its rank (axes.py `canonical`): that rank must be the one
        the checker inferred for `e` (a row `A[i, :]` of ℝ^{1×n} is a vector marked as a row), else
        the layout would not be the card's and the expression is refused here, never computed."""
        checked = getattr(self.em, "checked", None)  # (None: an emitter made for an example)
        shape = checked.shape(self.scope.algo, e) if checked is not None else None
        if shape is None or v.py or v.mask or v.ones_row or not shape.numeric:
            return
        if len(shape.dims) == v.rank or (v.row and len(shape.dims) == 2):
            return
        self.refuse(
            e,
            f"this expression is {shape}, but its code would have {v.rank} axes of its own",
            "write it with one operation per step (a name for each part) so that each part has its own type",
        )

    def _expr(self, e: ir.Expr) -> Val:  # noqa: C901 - one case per node kind
        if isinstance(e, ir.Name):
            return self.name(e.id)
        if isinstance(e, ir.Num):
            text = e.text
            return Val(text if re.fullmatch(r"\d+", text) else repr(float(text)), 0, py=True)
        if isinstance(e, ir.Const):
            return Val("math.inf" if e.name == "∞" else "math.pi", 0, py=True)
        if isinstance(e, ir.Str):
            return Val(repr(e.value), 0, py=True, enum=True)
        if isinstance(e, ir.UnOp):
            return self.unop(e)
        if isinstance(e, ir.BinOp):
            return self.binop(e)
        if isinstance(e, ir.Transpose):
            if isinstance(e.operand, ir.Num) and e.operand.text == "1":
                return Val("1", 2, ones_row=True)
            v = self.expr(e.operand)
            if v.rank == 2:
                flipped = v.with_(layout="card" if v.layout == "code" else "code")
                checked = getattr(self.em, "checked", None)
                shape = checked.shape(self.scope.algo, e) if checked is not None else None
                if shape is None or len(shape.dims) != 1:
                    return flipped
                # a matrix of one row transposed is a vector (checker/shapes.py `transpose`): its
                # columns' axis, of size 1, is dropped
                after = self.after_of(v.fams)
                one_column = rename_axes(self.axes(flipped), {COL: ONE})
                return Val(
                    spell(v.code, one_column, canonical(1, False, after)), 1, param=v.param, fams=v.fams
                )
            if v.rank == 1:  # a vector becomes a row, and a row (`A[i, :]`) a vector again
                return v.with_(row=not v.row)
            return v
        if isinstance(e, ir.Index):
            return self.index(e)
        if isinstance(e, ir.Call):
            return self.call(e)
        if isinstance(e, ir.Indicator):
            c = self.expr(e.cond)
            return (
                Val(f"float({c.code})", 0, py=True)
                if c.py
                else Val(f"ops.as_float({c.code})", 0, fams=c.fams)
            )
        if isinstance(e, ir.Sum):
            return self.sum(e)
        if isinstance(e, ir.Concat):
            return self.concat(e)
        raise ToycardsError(f"{type(e).__name__} cannot be generated here")

    # ── named axes (axes.py) ───────────────────────────────────────────────────────────
    def after_of(self, fams: frozenset[str] | set[str]) -> dict[str, int]:
        """The map variables among `fams`, each with its kind's place (scope.AFTER)."""
        maps = self.scope.maps
        return {x: AFTER[maps[x].kind] for x in fams if x in maps}

    def axes(self, v: Val) -> Axes:
        """The named axes of `v`'s code after its batch axes (axes.py `canonical`)."""
        return canonical(v.rank, v.rank == 2 and v.layout == "card", self.after_of(v.fams))

    def spelled(self, v: Val, want: Axes, broadcast: bool = False) -> str:
        """`v`'s code laid out `want` (axes.py `spell`); a Python number as it is. With
        `broadcast` (an operand of an entry-by-entry operation), a value without batch axes gets
        no size-1 axes in front: broadcasting adds them."""
        if v.py or v.ones_row:
            return v.code
        return spell(v.code, self.axes(v), want, batched=not (broadcast and self.unbatched(v)))

    def code_layout(self, v: Val) -> str:
        """`v`'s code with a matrix's columns before its rows (a stored parameter transposed)."""
        return self.spelled(v, canonical(v.rank, False, self.after_of(v.fams))) if v.rank == 2 else v.code

    def unop(self, e: ir.UnOp) -> Val:
        v = self.expr(e.operand)
        if e.op == "-":
            return v.with_(code=f"-{paren(v.code)}")
        if e.op == "√":
            return v.with_(code=f"math.sqrt({v.code})" if v.py else f"ops.sqrt({v.code})")
        return v.with_(code=f"not {paren(v.code)}" if v.py else f"ops.logical_not({v.code})", boolean=True)

    def binop(self, e: ir.BinOp) -> Val:
        if e.op == "/" and isinstance(e.right, ir.Sum) and is_exp(e.left):
            b = self.expr(e.right)
            if b.exp_shift is not None:  # exp(a) / Σ exp(b) as exp(a − m) / Σ exp(b − m)
                scaled, shift = b.exp_shift
                lowered = self._elementwise(
                    self.expr(e.left.args[0]), b.with_(code=shift, exp_shift=None), "-"
                )
                top = lowered.with_(code=f"ops.exp({lowered.code})")
                return self._elementwise(top, b.with_(code=scaled, exp_shift=None), "/")
        a, b = self.expr(e.left), self.expr(e.right)
        if e.op in COMPARE:
            return Val(
                f"{paren(a.code)} {COMPARE[e.op]} {paren(b.code)}",
                0,
                py=a.py and b.py,
                fams=union_fams(a, b),
                boolean=True,
            )
        if e.op in ("∧", "∨"):
            op = ("and" if e.op == "∧" else "or") if a.py and b.py else ("&" if e.op == "∧" else "|")
            return Val(
                f"{paren(a.code)} {op} {paren(b.code)}",
                0,
                py=a.py and b.py,
                fams=union_fams(a, b),
                boolean=True,
            )
        if e.op == "·":
            return self.product(a, b)
        if e.op == "^":
            return self._elementwise(a, b, "**")
        if e.op == "mod":
            return self._elementwise(a, b, "%")
        op = {"+": "+", "-": "-", "⊙": "*", "/": "/"}[e.op]
        return self._elementwise(a, b, op)

    def _elementwise(self, a: Val, b: Val, op: str, call: str | None = None) -> Val:
        """`a op b` entry by entry, or `call(a, b)` when given: both operands laid out as the
        result, whose axes are those of the larger rank and of every map variable either carries
        (a size-1 axis for each one an operand lacks)."""
        if a.ones_row or b.ones_row:
            raise ToycardsError("`1^⊺` is only meaningful as `b · 1^⊺`")
        rank, fams = max(a.rank, b.rank), union_fams(a, b)
        want = canonical(rank, False, self.after_of(fams))
        ac, bc = self.spelled(a, want, True), self.spelled(b, want, True)
        return Val(
            f"{call}({ac}, {bc})" if call else f"{paren(ac)} {op} {paren(bc)}",
            rank,
            py=a.py and b.py,
            fams=fams,
        )

    def each_iteration(self, v: Val, variables: list[str]) -> str:
        """`v`'s code with an axis for each map variable in `variables`, at its kind's place
        (scope.AFTER): a value that does not depend on one (`for j ∈ [n]: O[:, j] ← β`) is
        copied n times along a new axis there (a size-1 axis holding that place is dropped first),
        so that a written member or column has every iteration's entries."""
        maps = self.scope.maps
        missing = sorted((x for x in variables if x not in v.fams), key=lambda x: AFTER[maps[x].kind])
        target = canonical(v.rank, False, self.after_of(v.fams | set(variables)))
        if v.py:  # a number: an axis for each variable, innermost last, then laid out by name
            code = v.code
            for x in missing:
                code = f"ops.copies({code}, {maps[x].bound_code}, {missing.index(x)})"
            return spell(code, tuple(reversed(missing)), target, batched=False)
        code = self.spelled(v, rename_axes(target, dict.fromkeys(missing)))
        for x in missing:  # innermost first: the axes after x's place are all there by then
            after = len(target) - 1 - target.index(x)
            code = f"ops.copies({code}, {maps[x].bound_code}, {after})"
        return code

    def made(self, code: str, have: Axes, rank: int, fams, like: Val | None = None) -> Val:
        """A value of `rank` carrying the map variables `fams` whose code is laid out `have`, laid
        out as every such value is (`canonical`); `like`'s other marks kept (a token id, a param)."""
        fams = frozenset(fams)
        batched = like is None or not self.unbatched(like)
        code = spell(code, have, canonical(rank, False, self.after_of(fams)), batched)
        if like is None:
            return Val(code, rank, fams=fams)
        return like.with_(code=code, rank=rank, fams=fams, layout="code", row=False)

    def split_blocks(self, v: Val, code: str, var: str, size: str) -> tuple[str, Axes]:
        """`ops.split_rows` of `code` (`v` with its rows last) into blocks of `size` rows, one per
        value of var, and the axes of the blocks: var's axis comes in just before the axis before
        the rows (a vector is one code row first: its blocks are […, H, 1, k])."""
        have = canonical(v.rank, False, self.after_of(v.fams))
        if len(have) < 2:
            code, have = f"{paren(code)}[..., None, :]", (ONE, *have)
        return f"ops.split_rows({code}, {size})", (*have[:-2], var, *have[-2:])

    def unbatched(self, v: Val) -> bool:
        """Whether `v` has no batch axes in front of its named ones: a stored parameter, or a map
        variable's own values."""
        return v.param or self._is_map_index(v)

    def conjunction(self, a: Val, b: Val) -> Val:
        """`a ∧ b` of two boolean arrays over a map's variables (the conditions of nested `if`s)."""
        return self._elementwise(a, b, "&")

    def _is_map_index(self, v: Val) -> bool:
        """The values of a map variable itself (`t`): laid out for its map, with no batch axes."""
        return len(v.fams) == 1 and any(m.ident == v.code for m in self.scope.maps.values())

    def product(self, a: Val, b: Val) -> Val:
        """The card's `·`: scalar multiple, matrix product, matrix–vector product or broadcast."""
        if b.ones_row:
            if a.rank != 1:
                raise ToycardsError("`· 1^⊺` broadcasts a vector; the left side is not a vector")
            return self._one_column(a, broadcast=True)  # one column of size 1: it broadcasts as all
        if a.rank == 0 or b.rank == 0:
            number, array = (a, b) if a.py else (b, a)
            if a.py != b.py and number.rank == 0 and number.code.isidentifier():  # `m · Q`: ops.scale,
                return self._elementwise(number, array, "*", call="ops.scale")  # which skips m = 1
            return self._elementwise(a, b, "*")
        fams = union_fams(a, b)
        if a.rank == 1 and a.row and b.rank == 1:  # a^⊺ · b: the sum of the entries' products
            want = canonical(1, False, self.after_of(fams))
            ac, bc = self.spelled(a, want, True), self.spelled(b, want, True)
            return Val(f"ops.sum_last({paren(ac)} * {paren(bc)})", 0, fams=fams)
        if a.rank == 2 and a.layout == "card" and a.param:
            return Val(
                f"ops.linear({self.code_layout(b) if b.rank == 2 else b.code}, {a.code})",
                b.rank,
                fams=fams,
            )
        if a.rank == 2 and b.rank == 2:
            return Val(self._matrix_product(a, b), 2, fams=fams)
        if b.row and not a.row:  # (m×1)·(1×n) = m×n: a times b^⊺, b as an n×1 matrix transposed
            row = self._one_column(b.with_(row=False))
            return Val(self._matrix_product(self._one_column(a), row.with_(layout="card")), 2, fams=fams)
        if a.rank == 2:  # A · v = A · (v as an n×1 matrix), that matrix's column
            return self._one_column_back(self._matrix_product(a, self._one_column(b)), fams)
        if a.row and b.rank == 2:  # a^⊺ · B = (B^⊺ · a)^⊺: a row
            flipped = b.with_(layout="card" if b.layout == "code" else "code")
            return self.product(flipped, a.with_(row=False)).with_(row=True)
        raise ToycardsError(
            "a vector on the left of `·` must be transposed (`a^⊺ · b`) or broadcast (`b · 1^⊺`)"
        )

    def _matrix_product(self, a: Val, b: Val) -> str:
        """A · B of two matrices: (A · B)ᵀ = Bᵀ · Aᵀ, both laid out as the product (columns before
        rows, a size-1 axis for each map variable only the other one carries)."""
        want = canonical(2, False, self.after_of(union_fams(a, b)))
        return f"ops.matmul({self.spelled(b, want)}, {self.spelled(a, want)})"

    def _one_column(self, v: Val, broadcast: bool = False) -> Val:
        """A vector as a matrix of one column (a matrix as it is): its columns' axis is one of
        size 1, the place holder already there (one per head: […, H, 1, n]) or a new one (with
        `broadcast`, none for a value without batch axes: `b · 1^⊺` of a stored b)."""
        if v.rank == 2:
            return v
        want = canonical(2, False, self.after_of(v.fams))
        return Val(
            self.spelled(v.with_(row=False), want, broadcast), 2, param=broadcast and v.param, fams=v.fams
        )

    def _one_column_back(self, code: str, fams: frozenset[str]) -> Val:
        """The vector a matrix of one column (`_one_column`) holds, laid out as a vector."""
        after = self.after_of(fams)
        one = rename_axes(canonical(2, False, after), {COL: ONE})
        return Val(spell(code, one, canonical(1, False, after)), 1, fams=fams)
