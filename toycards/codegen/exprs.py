"""Expressions and assignments of one algorithm → code, under the layout of values.py.

Owns: names (locals, parameters, families, map variables), operators (`·` as matrix or
scalar product, `+ − ⊙ /`, powers, transposes, `b · 1^⊺` broadcasts), indexing (columns,
token-id lookups, affine element indices, row blocks), calls (prelude algorithms, builtins,
masks passed by definition, the KV cache around `attention`), and assignments inside
parallel maps (whole-family, column, element and guarded writes).
Leaves out: statement structure (steps.py).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from toycards.codegen.assign import AssignEmitter
from toycards.codegen.calls import CallEmitter
from toycards.codegen.code import (
    COMPARE,
    affine,
    expr_text,
    int_literal,
    name_code,
    paren,
    parse_expr,
    union_fams,
)
from toycards.codegen.scope import Scope, family_key, free_names
from toycards.codegen.values import MapVar, Val
from toycards.errors import ToycardsError
from toycards.lang import ir

if TYPE_CHECKING:
    from toycards.codegen.emitter import Emitter


class ExprEmitter(CallEmitter, AssignEmitter):
    def __init__(self, emitter: Emitter, scope: Scope) -> None:
        self.em, self.scope = emitter, scope
        self.pre: list[str] = []

    def take_pre(self) -> list[str]:
        out, self.pre = self.pre, []
        return out

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
            return Val(m.ident, 0, fams=frozenset({n}), windowed=m.windowed)
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
            ident, rank, var, win = s.families[key]
            if index == var or index in s.maps:
                return Val(
                    ident, rank, fams=frozenset({index}) if index in s.maps else frozenset(), windowed=win
                )
            return self._gather_member(ident, rank, index).with_(windowed=win)
        return None

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

    def _gather_member(self, ident: str, rank: int, index: str) -> Val:
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
        axis = -(rank + 1) if rank else -1
        index = f"[int({code}) - 1 for {loop} in range(1, {m.bound_code} + 1)]"
        return Val(
            f"ops.take({ident}, {index}, {axis})",
            rank,
            fams=frozenset({var}),
            windowed=rank == 1,
            gather=(ident, index, axis, expr),
        )

    # ── expressions ────────────────────────────────────────────────────────────────────
    def expr(self, e: ir.Expr) -> Val:  # noqa: C901 - one case per node kind
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
                return v.with_(layout="card" if v.layout == "code" else "code")
            if v.rank == 1:
                return v.with_(row=True)
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

    def code_layout(self, v: Val) -> str:
        return f"ops.mT({v.code})" if v.rank == 2 and v.layout == "card" else v.code

    def unop(self, e: ir.UnOp) -> Val:
        v = self.expr(e.operand)
        if e.op == "-":
            return v.with_(code=f"-{paren(v.code)}")
        if e.op == "√":
            return v.with_(code=f"math.sqrt({v.code})" if v.py else f"ops.sqrt({v.code})")
        return v.with_(code=f"not {paren(v.code)}" if v.py else f"~{paren(v.code)}", boolean=True)

    def binop(self, e: ir.BinOp) -> Val:
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
        if e.op == "/" and a.py and b.py and re.fullmatch(r"[\w.()]+", a.code + b.code) is None:
            pass
        return self._elementwise(a, b, op)

    def _elementwise(self, a: Val, b: Val, op: str) -> Val:
        if a.ones_row or b.ones_row:
            raise ToycardsError("`1^⊺` is only meaningful as `b · 1^⊺`")
        rank = max(a.rank, b.rank)
        layout = "code"
        ac, bc = (
            (self.code_layout(a) if b.rank == 2 else a.code),
            (self.code_layout(b) if a.rank == 2 else b.code),
        )
        if a.rank == 2 and b.rank == 2:
            ac, bc = self.code_layout(a), self.code_layout(b)
        elif a.rank == 2 and b.rank < 2:
            ac = self.code_layout(a)
        elif b.rank == 2 and a.rank < 2:
            bc = self.code_layout(b)
        ac, bc = self._align(a, ac, b, bc)
        return Val(
            f"{paren(ac)} {op} {paren(bc)}",
            rank,
            py=a.py and b.py,
            layout=layout,
            fams=union_fams(a, b),
            windowed=a.windowed or b.windowed,
        )

    def _align(self, a: Val, ac: str, b: Val, bc: str) -> tuple[str, str]:
        """Give a batch-shaped matrix without a head axis one, when combined with a per-head value."""
        blocks = {v for v in union_fams(a, b) if v in self.scope.maps and self.scope.maps[v].kind == "block"}
        if not blocks:
            return ac, bc
        if not a.fams & blocks and a.rank == 2 and not a.param and not a.py:
            ac = f"{ac}[..., None, :, :]"
        if not b.fams & blocks and b.rank == 2 and not b.param and not b.py:
            bc = f"{bc}[..., None, :, :]"
        return ac, bc

    def product(self, a: Val, b: Val) -> Val:
        """The card's `·`: scalar multiple, matrix product, matrix–vector product or broadcast."""
        if b.ones_row:
            if a.rank != 1:
                raise ToycardsError("`· 1^⊺` broadcasts a vector; the left side is not a vector")
            return a.with_(rank=2, layout="code")
        if a.rank == 0 or b.rank == 0:
            return self._elementwise(a, b, "*")
        if a.rank == 1 and a.row and b.rank == 1:
            return Val(f"ops.sum_last({paren(a.code)} * {paren(b.code)})", 0, fams=union_fams(a, b))
        fams, win = union_fams(a, b), b.windowed
        if a.rank == 2 and a.layout == "card" and a.param:
            return Val(
                f"ops.linear({self.code_layout(b) if b.rank == 2 else b.code}, {a.code})",
                b.rank,
                fams=fams,
                windowed=win,
            )
        if a.rank == 2:
            rhs = self.code_layout(b) if b.rank == 2 else b.code
            return Val(f"ops.matmul({rhs}, {self.code_layout(a)})", b.rank, fams=fams, windowed=win)
        raise ToycardsError(
            "a vector on the left of `·` must be transposed (`a^⊺ · b`) or broadcast (`b · 1^⊺`)"
        )

    # ── indexing ───────────────────────────────────────────────────────────────────────
    def index(self, e: ir.Index) -> Val:
        base_name = e.base.id if isinstance(e.base, ir.Name) else None
        base = self.expr(e.base)
        idx = e.indices
        if base.mask:
            args = [self.expr(i) for i in idx]
            return Val(
                f"{base.code}({', '.join(a.code for a in args)})", 0, fams=union_fams(*args), boolean=True
            )
        if len(idx) == 2 and isinstance(idx[0], ir.Slice) and idx[0].lo is None and idx[0].hi is None:
            return self._column(base, base_name, idx[1])
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
            col = self._column(base, base_name, idx[1])  # `X[a:b, t]`: rows a … b of column t
            lo, hi = self._slice_bounds(idx[0])
            return col.with_(code=f"{paren(col.code)}[..., {lo}:{hi}]")
        if len(idx) == 1 and base.rank == 1:
            return self._element(base, base_name, idx[0])
        if len(idx) == 2 and not any(isinstance(i, ir.Slice) for i in idx):
            col = self._column(base, base_name, idx[1])  # `X[i, t]`: entry i of column t
            return self._element(col, None, idx[0])
        self.refuse(
            e,
            f"the indexing {expr_text(e)} cannot be generated",
            "index a matrix by a column (X[:, t]), rows of a column (X[a:b, t]), rows (X[a:b, :]) or "
            "one entry inside a map over both indices; a vector by one entry (v[i]) or a slice",
        )

    def refuse(self, node: ir.Expr, message: str, hint: str = "") -> None:
        """Stop generating at `node`'s own span: the card line, caret under the sub-expression."""
        from toycards.errors import Diagnostic

        raise ToycardsError.from_diagnostics(
            [Diagnostic(node.span, f"cannot generate code: {message}", hint)],
            {self.scope.algo.span.file: self.em.card.source},
        )

    def _slice_bounds(self, s: ir.Slice) -> tuple[str, str]:
        lo = f"{self.expr(s.lo).code} - 1" if s.lo is not None else ""
        hi = self.expr(s.hi).code if s.hi is not None else ""
        return lo, hi

    def _column(self, base: Val, base_name: str | None, i: ir.Expr) -> Val:
        s = self.scope
        if isinstance(i, ir.Name) and i.id in s.maps:
            m = s.maps[i.id]
            declared = s.decl_types.get(base_name or "")
            col = (
                declared.dims[1] if isinstance(declared, ir.TensorType) and len(declared.dims) == 2 else None
            )
            if base.param and col is not None and self.dim(col) != m.bound_code:
                index = (
                    f"runtime.positions(ctx, {m.bound_code}) - 1"
                    if m.windowed
                    else f"ops.arange(0, {m.bound_code})"
                )
                return Val(
                    f"ops.take({self.code_layout(base)}, {index}, -2)",
                    1,
                    fams=base.fams | {i.id},
                    windowed=m.windowed,
                )
            return Val(
                self.code_layout(base), 1, fams=base.fams | {i.id}, windowed=base.windowed or m.windowed
            )
        ids = self.expr(i)
        rows = base.code if base.layout == "code" else f"ops.mT({base.code})"
        if ids.py and not base.param:  # column c of a run-time matrix: kept as a length-1 token axis
            c = paren(ids.code)
            return Val(f"{rows}[..., {c} - 1 : {c}, :]", 1, fams=base.fams)
        if ids.py:  # a column number (1-based, as cards count), not a token id (0-based in code)
            return Val(f"ops.embed({rows}, {paren(ids.code)} - 1)", 1)
        if not self._is_token_id(i):  # token ids are 0-based in code; any other index is not
            self.refuse(
                i,
                f"a column picked by the computed index {expr_text(i)} cannot be generated",
                "pick columns by a map variable (X[:, t]), a number, or a token id (W[:, x[t]])",
            )
        return Val(f"ops.embed({rows}, {ids.code})", 1, fams=ids.fams, windowed=ids.windowed)

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
        if base_name is not None and base.code == "x" and s.is_main:  # token ids at the mapped positions
            return Val("x", 0, fams=frozenset(v for v in free_names(i) if v in s.maps), windowed=True)
        aff = affine(i, set(s.maps))
        if aff is None:
            if isinstance(i, ir.Num):
                k = int(i.text)
                return Val(f"{base.code}[..., {k - 1}:{k}]", 0, fams=base.fams)
            raise ToycardsError("an element index must be affine in a map variable (e.g. 2·i − 1, i + d/2)")
        var, scale, offset = aff
        m = s.maps[var]
        if scale == 1 and offset is None:
            declared = s.decl_types.get(base_name or "")
            if (
                isinstance(declared, ir.TensorType)
                and len(declared.dims) == 1
                and self.dim(declared.dims[0]) == m.bound_code
            ):
                return base.with_(fams=base.fams | {var}, rank=0)
        return base.with_(
            code=f"{base.code}[..., {self.affine_slice(m, scale, offset)}]", fams=base.fams | {var}, rank=0
        )

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

        >>> from toycards.codegen.emitter import Scope
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
            stop = (f"{scale} * {n}" if scale != 1 else n) + (
                f" + {b}" if b > 0 else f" - {-b}" if b < 0 else ""
            )
        else:
            off = self.int_code(offset)
            start_code = off if scale == 1 else f"{off} + {scale - 1}"
            stop = f"{start_code} + {n}" if scale == 1 else f"{off} + {scale} * {n}"
            return f"{start_code}:{stop}" + (f":{scale}" if scale != 1 else "")
        return f"{start or ''}:{stop}" + (f":{scale}" if scale != 1 else "")

    # ── calls ──────────────────────────────────────────────────────────────────────────
