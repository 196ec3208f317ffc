"""Indexing → code: columns, token-id lookups, entries, slices and row blocks.

Owns: `IndexEmitter`, the part of `ExprEmitter` that emits `X[:, t]`, `W_e[:, x[t]]`, `X[i, t]`,
`e[i]` (affine in a map variable, a number or a hyperparameter), `W[a:b, :]`, `X[a:b, t]`, the
slices of affine entry indices, and refusals at the sub-expression for what it cannot lay out.
Leaves out: names and operators (exprs.py), calls (calls.py), writes (assign.py).
"""

from __future__ import annotations

from toycards.codegen.code import affine, expr_text, int_literal, paren, reversed_index, union_fams
from toycards.codegen.scope import free_names
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
        full = [isinstance(i, ir.Slice) and i.lo is None and i.hi is None for i in idx]
        if len(idx) == 3:
            return self._matrix_of_stack(e, base, idx, full)
        if len(idx) == 2 and full[0] and not isinstance(idx[1], ir.Slice):
            return self._per_block(self._column(base, base_name, idx[1], e), base, idx[1], e)
        if len(idx) == 2 and all(isinstance(i, ir.Name) and i.id in self.scope.maps for i in idx):
            return base.with_(
                code=self.code_layout(base), rank=0, layout="code", fams=base.fams | {i.id for i in idx}
            )
        if (
            len(idx) == 2
            and isinstance(idx[0], ir.Slice)
            and isinstance(idx[1], ir.Slice)
            and idx[1].lo is None
            and idx[1].hi is None
        ):
            lo, hi = self._slice_bounds(idx[0])
            if base.layout == "card":
                return base.with_(code=f"{base.code}[{lo}:{hi}]")
            return base.with_(code=f"{base.code}[..., {lo}:{hi}]")
        if len(idx) == 2 and isinstance(idx[0], ir.Slice) and not isinstance(idx[1], ir.Slice):
            col = self._column(base, base_name, idx[1], e)  # `X[a:b, t]`: rows a … b of column t
            col = self._per_block(col, base, idx[1], e)
            lo, hi = self._slice_bounds(idx[0])
            return col.with_(code=f"{paren(col.code)}[..., {lo}:{hi}]")
        if len(idx) == 1 and base.rank == 1 and isinstance(idx[0], ir.Slice):  # `x[a:b]`
            lo, hi = self._slice_bounds(idx[0])
            return base.with_(code=f"{paren(base.code)}[..., {lo}:{hi}]")
        if len(idx) == 1 and base.rank == 1:
            return self._element(base, base_name, idx[0])
        if len(idx) == 2 and isinstance(idx[1], ir.Slice):
            return self._block(e, base)  # `X[a:b, c:d]`, `X[i, :]`, `X[i, c:d]`
        if len(idx) == 2 and not any(isinstance(i, ir.Slice) for i in idx):
            col = self._column(base, base_name, idx[1], e)  # `X[i, t]`: entry i of column t
            entry = self._element(col, None, idx[0])
            t = idx[1].id if isinstance(idx[1], ir.Name) and idx[1].id in self.scope.maps else None
            if t is None or free_names(idx[0]) & set(self.scope.maps):
                return entry
            m = self.scope.maps[t]  # the column's axis of t is the one before the entries
            return entry.with_(code=self.laid_out(entry.code, 1, m, 0, expr_text(e)))
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

    def refuse(self, node: ir.Expr, message: str, hint: str = "") -> None:
        """Stop generating at `node`'s own span: the card line, caret under the sub-expression."""
        from toycards.errors import Diagnostic

        raise ToycardsError.from_diagnostics(
            [Diagnostic(node.span, f"cannot generate code: {message}", hint)],
            {self.scope.algo.span.file: self.em.card.source},
        )

    def _slice_bounds(self, s: ir.Slice) -> tuple[str, str]:
        lo = self.expr(s.lo).code if s.lo is not None else ""
        lo = str(int(lo) - 1) if lo.isdigit() else f"{lo} - 1" if lo else ""
        hi = self.expr(s.hi).code if s.hi is not None else ""
        return ("" if lo == "0" else lo), hi

    def _block(self, e: ir.Index, base: Val) -> Val:
        """Rows and columns of a matrix that is not a sequence of tokens: `W[a:b, c:d]`, the row
        `W[i, :]` (a 1×n matrix), `W[i, c:d]`."""
        rows, cols = e.indices
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
        s = self.scope
        if isinstance(i, ir.Name) and i.id in s.maps:
            m = s.maps[i.id]
            declared = s.decl_types.get(base_name or "")
            col = (
                declared.dims[1] if isinstance(declared, ir.TensorType) and len(declared.dims) == 2 else None
            )
            if m.windowed and self.em.plan.cached:  # the checker's shapes say whether base is per token
                every = id(e) not in self.em.plan.positional
            else:
                every = col is not None and self.dim(col) == m.bound_code
            if every or base.fams & set(s.maps):  # t runs over all of the columns
                return Val(self.code_layout(base), 1, fams=base.fams | {i.id})
            if m.windowed:  # token positions into a matrix that is not per token (`W_p[:, t]`)
                index = f"runtime.positions(ctx, {m.bound_code}) - 1"
                return Val(f"ops.take({self.code_layout(base)}, {index}, -2)", 1, fams={i.id})
            cols = f"{paren(self.code_layout(base))}[..., :{m.bound_code}, :]"  # columns 1 … n
            return Val(cols, 1, fams=base.fams | {i.id})
        rows = base.code if base.layout == "code" else f"ops.mT({base.code})"
        if self._is_token_id(i):  # token ids are 0-based in code: they pick rows as they are
            ids = self.expr(i.base)
            aff = affine(i.indices[0], set(s.maps)) if len(i.indices) == 1 else None
            if aff is not None and (aff[1], aff[2]) != (1, None):
                ids = ids.with_(code=f"{ids.code}[..., {self.affine_slice(s.maps[aff[0]], aff[1], aff[2])}]")
            fams = frozenset(v for v in free_names(i.indices[0]) if v in s.maps)
            return Val(f"ops.embed({rows}, {ids.code})", 1, fams=fams)
        ids = self.expr(i)
        if ids.py:  # a column number (1-based, as cards count), not a token id (0-based in code)
            k = ids.code
            pick = str(int(k) - 1) if k.isdigit() else f"{paren(k)} - 1"
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

    def _per_block(self, col: Val, base: Val, i: ir.Expr, e: ir.Index) -> Val:
        """A column that `_column` picked by a map variable sits on the tokens' axis (−2), with the
        entries after it. A "block" variable's axis is further out (the heads of `for h ∈ [H],
        t ∈ [ℓ]`: `Γ[:, h]` is head h's own vector), so a size-1 axis goes in between; without it the
        heads' columns broadcast against the tokens."""
        m = self.scope.maps.get(i.id) if isinstance(i, ir.Name) else None
        if m is None or m.kind != "block" or base.fams & set(self.scope.maps):
            return col
        return col.with_(code=self.laid_out(col.code, 1, m, 1, expr_text(e)))

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
        if aff is None:
            if isinstance(i, ir.Num):
                k = int(i.text)
                return Val(f"{base.code}[..., {k - 1}:{k}]", 0, fams=base.fams)
            if not free_names(i) & set(s.maps):  # a hyperparameter or loop index: one entry
                k = self.int_code(i)
                return Val(f"{base.code}[..., {paren(k)} - 1:{paren(k)}]", 0, fams=base.fams)
            back = reversed_index(i, set(s.maps))
            if back is not None:  # `c − i`, i = 1 … n: entries c − 1 down to c − n, read backwards
                var, c = back
                m, last = s.maps[var], paren(self.int_code(c))
                code = f"ops.flip_last({base.code}[..., {last} - 1 - {paren(m.bound_code)}:{last} - 1])"
                if not base.fams & set(s.maps):
                    code = self.laid_out(code, 0, m, 0, expr_text(i))
                return base.with_(code=code, fams=base.fams | {var}, rank=0)
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
        if not base.fams & set(s.maps):  # the entries' axis is the last: lay it out for m's kind
            code = self.laid_out(code, 0, m, 0, expr_text(i))
        return base.with_(code=code, fams=base.fams | {var}, rank=0)

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
