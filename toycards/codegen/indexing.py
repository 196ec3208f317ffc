"""Indexing → code: columns, token-id lookups, entries, slices and row blocks.

Owns: `IndexEmitter`, the part of `ExprEmitter` that emits `X[:, t]`, `W_e[:, x[t]]`, `X[i, t]`,
`e[i]` (affine in a map variable, a number or a hyperparameter), `W[a:b, :]`, `X[a:b, t]`, the
slices of affine entry indices, rows (or columns) whose bounds read a map variable
(`X[(h − 1)·d_h + 1 : h·d_h, t]`: a block per h, as `rows`; how many is the checker's), and
refusals at the sub-expression for what it cannot lay out.
Leaves out: names and operators (exprs.py), calls (calls.py), writes (assign.py).
"""

from __future__ import annotations

from toycards.checker.dims import Dim, DimError, expr_to_dim
from toycards.codegen.axes import COL, ONE, ROW, canonical, from_grid, rename_axes, spell
from toycards.codegen.code import (
    affine,
    dim_code,
    expr_text,
    int_literal,
    linear_in,
    paren,
    reversed_index,
    union_fams,
)
from toycards.codegen.module import comment_safe
from toycards.codegen.scope import AFTER, free_names
from toycards.codegen.values import MapVar, Val
from toycards.errors import ToycardsError
from toycards.lang import ir


class IndexEmitter:
    """Mixin of ExprEmitter: indexing."""

    def index(self, e: ir.Index) -> Val:
        base_name = e.base.id if isinstance(e.base, ir.Name) else None
        base = self.expr(e.base)
        idx = e.indices
        if base.mask:
            args = [self.expr(i) for i in idx]
            return Val(
                f"{base.code}({', '.join(a.code for a in args)})", 0, fams=union_fams(*args), boolean=True
            )
        if base.py and base.rank == 1:  # a per-layer hyperparameter, a Python tuple: `n_kv[l]`
            return self._per_layer_entry(e, base)
        full = [isinstance(i, ir.Slice) and i.lo is None and i.hi is None for i in idx]
        if len(idx) == 3:
            return self._matrix_of_stack(e, base, idx, full)
        if len(idx) == 2 and full[0] and not isinstance(idx[1], ir.Slice):
            return self._column(base, base_name, idx[1], e)
        if len(idx) == 2 and all(isinstance(i, ir.Name) and i.id in self.scope.maps for i in idx):
            row, col = (AFTER[self.scope.maps[i.id].kind] for i in idx)  # `X[g, t]`, g a block variable:
            code = from_grid(self.code_layout(base), row, col)  # […, n_g, ℓ, 1] like the map's other values
            return base.with_(code=code, rank=0, layout="code", fams=base.fams | {i.id for i in idx})
        if (
            len(idx) == 2
            and isinstance(idx[0], ir.Slice)
            and isinstance(idx[1], ir.Slice)
            and idx[1].lo is None
            and idx[1].hi is None
        ):
            if self._by_map(idx[0]):  # `X[(h − 1)·d_h + 1 : h·d_h, :]`: a block per h
                return self._rows_per(e, base, idx[0])
            lo, hi = self._slice_bounds(idx[0])
            if base.layout == "card":
                return base.with_(code=f"{base.code}[{lo}:{hi}]")
            return base.with_(code=f"{base.code}[..., {lo}:{hi}]")
        if len(idx) == 2 and isinstance(idx[0], ir.Slice) and not isinstance(idx[1], ir.Slice):
            col = self._column(base, base_name, idx[1], e)  # `X[a:b, t]`: rows a … b of column t
            if self._by_map(idx[0]):
                return self._rows_per(e, col, idx[0])
            lo, hi = self._slice_bounds(idx[0])
            return col.with_(code=f"{paren(col.code)}[..., {lo}:{hi}]")
        if len(idx) == 1 and base.rank == 1 and isinstance(idx[0], ir.Slice):  # `x[a:b]`
            if self._by_map(idx[0]):
                return self._rows_per(e, base, idx[0])
            lo, hi = self._slice_bounds(idx[0])
            return base.with_(code=f"{paren(base.code)}[..., {lo}:{hi}]")
        if len(idx) == 1 and base.rank == 1:
            return self._element(base, base_name, idx[0])
        if len(idx) == 2 and isinstance(idx[1], ir.Slice):
            return self._block(e, base)  # `X[a:b, c:d]`, `X[i, :]`, `X[i, c:d]`
        if len(idx) == 2 and not any(isinstance(i, ir.Slice) for i in idx):
            col = self._column(base, base_name, idx[1], e)  # `X[i, t]`: entry i of column t
            return self._element(col, None, idx[0])
        self.refuse(
            e,
            f"the indexing {expr_text(e)} cannot be generated",
            "index a matrix by a column (X[:, t]), rows of a column (X[a:b, t]), rows (X[a:b, :]) or "
            "one entry inside a map over both indices; a vector by one entry (v[i]) or a slice",
        )

    def _matrix_of_stack(self, e: ir.Index, base: Val, idx: tuple, full: list[bool]) -> Val:
        """`W[e, :, :]`: matrix e of a stored stack of matrices (a layer's experts, NumPy
        `[E, m, n]`), picked by a number, a hyperparameter or a sequential loop's index. The
        result is a stored matrix like any other parameter (card layout `(m, n)`)."""
        if not (base.param and base.rank == 3 and base.layout == "card" and full[1] and full[2]):
            self.refuse(
                e,
                f"the indexing {expr_text(e)} cannot be generated",
                "pick one matrix of a stored stack of matrices: W[e, :, :]",
            )
        var = idx[0].id if isinstance(idx[0], ir.Name) else None
        m = self.scope.maps.get(var)
        if m is not None and m.kind == "block" and self._stack_axis_is_map(e, m):
            # `W[h, :, :]` in a map over h ∈ [H] with W ∈ ℝ^{H×m×n}: the stack itself, its first axis
            # the map's block axis (…, H, ·, ·), so `W[h, :, :] · X^h` is one batched product per head
            return base.with_(rank=2, fams=base.fams | {var})
        if isinstance(idx[0], ir.Slice) or free_names(idx[0]) & set(self.scope.maps):
            self.refuse(
                e,
                f"the indexing {expr_text(e)} cannot be generated",
                "pick the matrix by a number, a hyperparameter or a sequential loop's index "
                "(for e = 1, …, E do), not by a parallel map's variable",
            )
        k = paren(self.int_code(idx[0]))
        pick = str(int(k) - 1) if k.isdigit() else f"{k} - 1"
        return base.with_(code=f"{base.code}[{pick}]", rank=2)

    def _stack_axis_is_map(self, e: ir.Index, m) -> bool:
        """Whether the stack `W` of `W[h, :, :]` holds exactly one matrix per value of the map's h."""
        shape = self.em.checked.shape(self.scope.algo, e.base)
        dims = getattr(shape, "dims", None)
        name = dims[0].as_name() if dims and len(dims) == 3 and dims[0] is not None else None
        return name is not None and self.scope.dims.get(name) == m.bound_code

    def _per_layer_entry(self, e: ir.Index, base: Val) -> Val:
        """`n_kv[l]` with l a loop index or a hyperparameter: entry l (from 1) of the tuple."""
        one = len(e.indices) == 1 and not isinstance(e.indices[0], ir.Slice)
        i = self.expr(e.indices[0]) if one else None
        if i is None or not i.py:
            self.refuse(
                e,
                "an entry of a per-layer hyperparameter is picked by a loop index or a hyperparameter",
                "write `n[l]` inside `for l = 1, …, L do`",
            )
        return Val(f"{base.code}[{i.code} - 1]", 0, py=True)

    def refuse(self, node: ir.Expr, message: str, hint: str = "") -> None:
        """Stop generating at `node`'s own span: the card line, caret under the sub-expression."""
        from toycards.errors import Diagnostic

        raise ToycardsError.from_diagnostics(
            [Diagnostic(node.span, f"cannot generate code: {message}", hint)],
            self.em.sources(self.scope.algo),
        )

    def _slice_bounds(self, s: ir.Slice) -> tuple[str, str]:
        if self._by_map(s):
            self.refuse(
                s,
                f"the slice {_slice_text(s)} moves with {' and '.join(sorted(self._by_map(s)))} here",
                "a block per h is generated of the rows of a matrix or column (rows(X, h, d_h) is "
                "X[(h − 1)·d_h + 1 : h·d_h, :]) or of its columns (X[a:b, (h − 1)·k + 1 : h·k]), not of "
                "one row's entries",
            )
        lo = self.expr(s.lo).code if s.lo is not None else ""
        lo = str(int(lo) - 1) if lo.isdigit() else f"{lo} - 1" if lo else ""
        hi = self.expr(s.hi).code if s.hi is not None else ""
        return ("" if lo == "0" else lo), hi

    def _block(self, e: ir.Index, base: Val) -> Val:
        """Rows and columns of a matrix that is not a sequence of tokens: `W[a:b, c:d]`, the row
        `W[i, :]` (a 1×n matrix), `W[i, c:d]`; a block per map variable when the rows' or the
        columns' bounds read one (`_rows_per`)."""
        rows, cols = e.indices
        if isinstance(rows, ir.Slice) and self._by_map(rows) and self._by_map(cols):
            self.refuse(
                e,
                f"rows and columns that both move with {' and '.join(sorted(self._by_map(rows)))} "
                "(a block on the diagonal) cannot be generated",
                "let the map variable bound the rows or the columns only: X[(h − 1)·d_h + 1 : h·d_h, c:d] "
                "(rows(X, h, d_h) when all columns) or X[a:b, (h − 1)·d_h + 1 : h·d_h]",
            )
        if isinstance(rows, ir.Slice) and self._by_map(rows):  # columns c … d, then a block per h
            c = ":".join(self._slice_bounds(cols))
            picked = f"{paren(self.code_layout(base))}[..., {c}, :]"
            return self._rows_per(e, base.with_(code=picked, layout="code"), rows)
        if isinstance(rows, ir.Slice) and self._by_map(cols):  # rows a … b, then a block of columns per h
            r = ":".join(self._slice_bounds(rows))
            by_cols = f"ops.mT({paren(self.code_layout(base))}[..., {r}])"  # [..., rows, columns]
            blocks = self._rows_per(e, base.with_(code=by_cols, layout="code"), cols, axis=1)
            return blocks.with_(code=f"ops.mT({blocks.code})")
        if isinstance(rows, ir.Slice):
            r = ":".join(self._slice_bounds(rows))
        elif free_names(rows) & set(self.scope.maps):
            self.refuse(e, f"the indexing {expr_text(e)} cannot be generated", "pick one row by a number")
        else:  # row i, ℝ^{1×n}: a transposed vector (`A[i, :] · c` is a number, as the checker says)
            k = paren(self.int_code(rows))
            c = ":".join(self._slice_bounds(cols))
            i = str(int(k) - 1) if k.isdigit() else f"{k} - 1"
            code = f"{base.code}[{i}, {c}]" if base.layout == "card" else f"{paren(base.code)}[..., {c}, {i}]"
            return base.with_(code=code, rank=1, row=True, layout="code")
        c = ":".join(self._slice_bounds(cols))
        if base.rank == 2 and base.layout == "card":
            return base.with_(code=f"{base.code}[{r}, {c}]")
        return base.with_(code=f"{paren(base.code)}[..., {c}, {r}]", layout="code")

    def _column(self, base: Val, base_name: str | None, i: ir.Expr, e: ir.Index) -> Val:
        """Column i of a matrix, as a vector laid out like any other (axes.py `canonical`): each
        branch names the axes of the code it writes (the columns' axis becomes the axis of the
        map variable that picks them) and `made` lays that out."""
        s = self.scope
        matrix = canonical(2, False, self.after_of(base.fams))  # base in code layout
        if isinstance(i, ir.Name) and i.id in s.maps:
            m, var = s.maps[i.id], i.id
            picked = rename_axes(matrix, {COL: var})  # its columns are var's values
            declared = s.decl_types.get(base_name or "")
            col = (
                declared.dims[1] if isinstance(declared, ir.TensorType) and len(declared.dims) == 2 else None
            )
            if m.windowed and self.em.plan.cached:  # the checker's shapes say whether base is per token
                every = id(e) not in self.em.plan.positional
            else:
                every = col is not None and self.dim(col) == m.bound_code
            if every or base.fams & set(s.maps):  # t runs over all of the columns
                return self.made(self.code_layout(base), picked, 1, base.fams | {var})
            if m.windowed:  # token positions into a matrix that is not per token (`W_p[:, t]`)
                index = f"runtime.positions(ctx, {m.bound_code}) - 1"
                return self.made(f"ops.take({self.code_layout(base)}, {index}, -2)", picked, 1, {var})
            cols = f"{paren(self.code_layout(base))}[..., :{m.bound_code}, :]"  # columns 1 … n
            return self.made(cols, picked, 1, base.fams | {var})
        rows = base.code if base.layout == "code" else f"ops.mT({base.code})"
        if self._is_token_id(i):  # token ids are 0-based in code: they pick rows as they are
            ids = self.expr(i.base)
            aff = affine(i.indices[0], set(s.maps)) if len(i.indices) == 1 else None
            if aff is not None and (aff[1], aff[2]) != (1, None):
                ids = ids.with_(code=f"{ids.code}[..., {self.affine_slice(s.maps[aff[0]], aff[1], aff[2])}]")
            fams = frozenset(v for v in free_names(i.indices[0]) if v in s.maps)
            if len(fams) == 1:  # one token per value of the variable: its axis, then the entries
                return self.made(f"ops.embed({rows}, {ids.code})", (*fams, ROW), 1, fams)
            return Val(f"ops.embed({rows}, {ids.code})", 1, fams=fams)
        aff = affine(i, set(s.maps))
        if aff is not None and aff[1] == 1 and aff[2] is not None and not base.fams & set(s.maps):
            m = s.maps[aff[0]]  # `X[:, t + c]`: columns 1 + c … n + c, one per value of t
            shifted_cols = f"ops.shift_cols({rows}, {self.int_code(aff[2])}, {m.bound_code})"
            return self.made(shifted_cols, (aff[0], ROW), 1, base.fams | {aff[0]})
        ids = self.expr(i)
        if ids.py:  # a column number (1-based, as cards count), not a token id (0-based in code)
            k = ids.code
            pick = str(int(k) - 1) if k.isdigit() else f"{paren(k)} - 1"
            if base.fams & set(s.maps):  # `rows(X, h, d_h)[:, 1]`: one column kept as a size-1 axis
                one = rename_axes(matrix, {COL: ONE})
                return self.made(f"{paren(rows)}[..., {pick}:{paren(k)}, :]", one, 1, base.fams)
            return Val(f"{paren(rows)}[..., {pick}, :]", 1)
        if not base.param or any(s.maps[v].kind == "element" for v in ids.fams if v in s.maps):
            self.refuse(
                i,
                f"a column picked by the computed index {expr_text(i)} cannot be generated here",
                "pick a token's column by a map variable (X[:, t]); a computed index (topk's) picks "
                "columns of a parameter",
            )
        picked = f"ops.embed({rows}, ops.index_of({ids.code}) - 1)"  # 1-based, like topk's
        return Val(f"{picked}[..., 0, :]", 1, fams=ids.fams)

    # ── rows whose bounds move with a map variable ──────────────────────────────────────
    def _by_map(self, s: ir.Slice) -> set[str]:
        """The map variables a slice's bounds read (`(h − 1)·d_h + 1 : h·d_h` → {h})."""
        return {v for b in (s.lo, s.hi) if b is not None for v in free_names(b) if v in self.scope.maps}

    def _rows_per(self, e: ir.Index, arr: Val, s: ir.Slice, axis: int = 0) -> Val:
        """`X[(h − 1)·d_h + 1 : h·d_h, :]`, `X[a(h) : b(h), t]`, `x[a(i) : b(i)]`: rows whose bounds
        read a map variable, one block per value of it (what `rows(X, h, d_h)` means), at the
        variable's axis. `arr` holds the rows on its last code axis (for columns `W[a:b, c(h):d(h)]`,
        `arr` is transposed and `axis` 1). The number of rows is the checker's b − a + 1 (of `e`'s
        card axis `axis`) and must not depend on the variable; `_rows_picked` takes them."""
        found = self._by_map(s)
        var = sorted(found)[0]
        hint = (
            f"a block of rows per {var} has one size for every {var}: rows(X, {var}, d_h) is the block "
            f"X[({var} − 1)·d_h + 1 : {var}·d_h, …]"
            if axis == 0
            else f"a window of columns that moves with {var}: read it in a `for {var} = 1, …, ℓ do` loop, "
            f"or keep the last k columns as a State (`W ← [W[:, 2:k], X[:, {var}]]`)"
        )
        if len(found) > 1:
            both = " and ".join(sorted(found))
            self.refuse(e, f"the slice {_slice_text(s)} moves with {both} at once", hint)
        width = self._slice_width(e, s, var, axis)
        if width is None:
            self.refuse(e, f"the slice {_slice_text(s)} has a different size for each {var}", hint)
        rank = 2 if arr.rank == 2 else 1
        if var in arr.fams:
            self.refuse(
                e,
                f"rows that move with {var} of a column that {var} picks too (a diagonal) cannot be generated",
                f"pick the rows by another map variable than the column's: X[(h − 1)·d_h + 1 : h·d_h, {var}] "
                f"is rows(X, h, d_h)[:, {var}]",
            )
        if not self._fits_per(var, arr, rank):
            what = "rows" if axis == 0 else "columns"
            self.refuse(e, f"the {what} {_slice_text(s)} of this value cannot be laid out per {var}", hint)
        try:
            w = dim_code(width, self._dim_name)
            picked = self._rows_picked(self.code_layout(arr), s, var, width, w)
        except ToycardsError as exc:
            if exc.diagnostics:
                raise
            self.refuse(e, exc.message, hint)
        blocks, have = self.split_blocks(arr.with_(rank=rank), picked, var, w)
        want = canonical(rank, False, self.after_of(arr.fams | {var}))
        return Val(spell(blocks, have, want), rank, fams=arr.fams | {var})

    def _fits_per(self, var: str, arr: Val, rank: int) -> bool:
        """Whether blocks of `arr`'s rows, one per value of var, have a layout (axes.py): no two
        map variables of theirs want one place (scope.AFTER)."""
        try:
            canonical(rank, False, self.after_of(arr.fams | {var}))
        except ToycardsError:
            return False
        return True

    def _rows_picked(self, code: str, s: ir.Slice, var: str, width: Dim, w: str) -> str:
        """The rows of every value of var, one block after another ([..., n·w]): for bounds
        `w·var + c` (blocks side by side) one slice, else those listed for each value."""
        m = self.scope.maps[var]
        lo = self._dim_of(s.lo) if s.lo is not None else Dim.num(1)
        line = linear_in(lo, var) if lo is not None else None
        if line is not None and line[0] == width and not m.windowed:
            first = dim_code(line[0] + line[1] - 1, self._dim_name)  # 0-based, var = 1
            n_rows = f"{paren(m.bound_code)} * {paren(w)}"
            stop = n_rows if first == "0" else f"{paren(first)} + {n_rows}"
            return f"{paren(code)}[..., {'' if first == '0' else first}:{stop}]"
        s_ = self.scope
        loop, k, ident = s_.ns.fresh(var), s_.ns.fresh("k"), s_.ns.fresh("rows")
        saved, s_.loops[var] = s_.loops.get(var), Val(loop, 0, py=True)
        del s_.maps[var]
        try:
            lo_code = self.int_code(s.lo) if s.lo is not None else "1"
        finally:
            s_.maps[var] = m
            if saved is None:
                del s_.loops[var]
            else:
                s_.loops[var] = saved
        if m.windowed:  # the tokens' positions (under the cache, the new tokens' own)
            values, lo_code = f"runtime.positions(ctx, {m.bound_code})", f"int({lo_code})"
        else:
            values = f"range(1, {m.bound_code} + 1)"
        self.pre.append(
            f"{ident} = [{paren(lo_code)} - 1 + {k} for {loop} in {values} for {k} in range({w})]"
            f"  # rows {comment_safe(_slice_text(s))} for each {comment_safe(var)}"
        )
        return f"ops.take({code}, {ident}, -1)"

    def _slice_width(self, e: ir.Index, s: ir.Slice, var: str, axis: int) -> Dim | None:
        """b − a + 1 for `a:b`, as the checker inferred it for `e` (from the bounds themselves for
        a node codegen made); None unless it is the same for every value of var."""
        shape = self.em.checked.shape(self.scope.algo, e)
        width = shape.dims[axis] if shape is not None and len(shape.dims) > axis else None
        if width is None:
            lo = self._dim_of(s.lo) if s.lo is not None else Dim.num(1)
            hi = self._dim_of(s.hi) if s.hi is not None else None
            width = hi - lo + 1 if lo is not None and hi is not None else None
        return None if width is None or var in width.names() else width

    def _dim_of(self, e: ir.Expr) -> Dim | None:
        """A slice bound as a symbolic dimension over the names it reads; None for other forms."""
        try:
            return expr_to_dim(e, lambda n: True)
        except DimError:
            return None

    def _dim_name(self, n: str) -> str:
        """The code of a name in a slice bound's dimension: a Python number."""
        s = self.scope
        v = s.loops.get(n) or (Val(s.dims[n], 0, py=True) if n in s.dims else s.vals.get(n))
        if v is None or not v.py:
            raise ToycardsError(f"the slice bound {n} must be a whole number known before the pass")
        return v.code

    def _is_token_id(self, i: ir.Expr) -> bool:
        """`x[t]` with x a sequence of token ids (`x ∈ V^ℓ`): an index the code holds 0-based."""
        if not (isinstance(i, ir.Index) and isinstance(i.base, ir.Name)):
            return False
        algo = self.scope.algo
        decl = next((d for d in (*algo.input_decls, *algo.hyper_decls) if i.base.id in d.names), None)
        t = decl.type if decl is not None else self.scope.decl_types.get(i.base.id)
        return isinstance(t, ir.TensorType) and t.field == "V"

    def _element(self, base: Val, base_name: str | None, i: ir.Expr) -> Val:
        s = self.scope
        token_ids = base_name is not None and self._is_token_id(ir.Index(ir.Name(base_name), (i,)))
        if token_ids:  # held 0-based in code; as a number, a token is counted from 1 like the card
            entry = self._element(base.with_(code=f"({base.code} + 1)"), None, i)
            return entry
        aff = affine(i, set(s.maps))
        vector = canonical(1, False, self.after_of(base.fams))
        if aff is None:
            one = rename_axes(vector, {ROW: ONE})  # one entry, kept as a size-1 axis
            if isinstance(i, ir.Num):
                k = int(i.text)
                return self.made(f"{base.code}[..., {k - 1}:{k}]", one, 0, base.fams, base)
            if not free_names(i) & set(s.maps):  # a hyperparameter or loop index: one entry
                k = self.int_code(i)
                return self.made(f"{base.code}[..., {paren(k)} - 1:{paren(k)}]", one, 0, base.fams, base)
            back = reversed_index(i, set(s.maps))
            if back is not None:  # `c − i`, i = 1 … n: entries c − 1 down to c − n, read backwards
                var, c = back
                m, last = s.maps[var], paren(self.int_code(c))
                code = f"ops.flip_last({base.code}[..., {last} - 1 - {paren(m.bound_code)}:{last} - 1])"
                return self.made(code, rename_axes(vector, {ROW: var}), 0, base.fams | {var}, base)
            raise ToycardsError("an element index must be affine in a map variable (e.g. 2·i − 1, i + d/2)")
        var, scale, offset = aff
        m = s.maps[var]
        code = f"{base.code}[..., {self.affine_slice(m, scale, offset)}]"
        if scale == 1 and offset is None:
            declared = s.decl_types.get(base_name or "")
            if (
                isinstance(declared, ir.TensorType)
                and len(declared.dims) == 1
                and self.dim(declared.dims[0]) == m.bound_code
            ):
                code = base.code
        return self.made(code, rename_axes(vector, {ROW: var}), 0, base.fams | {var}, base)

    def int_code(self, e: ir.Expr) -> str:
        """An index offset such as `d_h / 2` as integer arithmetic (`d_h // 2`)."""
        if isinstance(e, ir.BinOp) and e.op in ("+", "-", "·", "/"):
            op = {"+": "+", "-": "-", "·": "*", "/": "//"}[e.op]
            return f"({self.int_code(e.left)} {op} {self.int_code(e.right)})"
        if isinstance(e, ir.UnOp) and e.op == "-":
            return f"-{self.int_code(e.operand)}"
        v = self.expr(e)
        if not v.py:
            raise ToycardsError("an index offset must be a whole number of hyperparameters and dimensions")
        return v.code

    def affine_slice(self, m: MapVar, scale: int, offset: ir.Expr | None) -> str:
        """The slice of entries `scale·i + offset` for i = 1 … n (1-based card indices).

        >>> from toycards.codegen.exprs import ExprEmitter, Scope
        >>> from toycards.codegen.code import parse_expr
        >>> ex = ExprEmitter(emitter=None, scope=Scope(algo=None, ns=None, dims={"d": "d"}))
        >>> i = MapVar("i", "i", bound_code="n", windowed=False)
        >>> def entries(text):
        ...     _, scale, offset = affine(parse_expr(text), {"i"})
        ...     return ex.affine_slice(i, scale, offset)
        >>> entries("2·i − 1"), entries("2·i"), entries("i + 3")
        (':2 * n - 1:2', '1:2 * n:2', '3:n + 3')
        >>> entries("i + d/2")
        '(d // 2):(d // 2) + n'
        """
        n = m.bound_code
        const = int_literal(offset)
        if offset is None or const is not None:
            b = const or 0
            start = scale + b - 1
            stop = (
                str(scale * int(n) + b)
                if n.isdigit()
                else (f"{scale} * {n}" if scale != 1 else n)
                + (f" + {b}" if b > 0 else f" - {-b}" if b < 0 else "")
            )
        else:
            off = self.int_code(offset)
            start_code = off if scale == 1 else f"{off} + {scale - 1}"
            stop = f"{start_code} + {n}" if scale == 1 else f"{off} + {scale} * {n}"
            return f"{start_code}:{stop}" + (f":{scale}" if scale != 1 else "")
        return f"{start or ''}:{stop}" + (f":{scale}" if scale != 1 else "")


def _slice_text(s: ir.Slice) -> str:
    """`a:b` as the card writes it (either end may be left out)."""
    return ":".join(expr_text(b) if b is not None else "" for b in (s.lo, s.hi))
