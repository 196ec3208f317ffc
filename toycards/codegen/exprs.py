"""Expressions and assignments of one algorithm → code, under the layout of values.py.

Owns: names (locals, parameters, families, map variables), operators (`·` as matrix or
scalar product, `+ − ⊙ /`, powers, transposes, `b · 1^⊺` broadcasts), indexing (columns,
token-id lookups, affine element indices, row blocks), calls (prelude algorithms, builtins,
masks passed by definition, the KV cache around `attention`), and assignments inside
parallel maps (whole-family, column, element and guarded writes).
Leaves out: statement structure (emitter.py's StepEmitter).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from toycards.codegen.values import CACHED_ARGS, MapVar, Val
from toycards.errors import ToycardsError
from toycards.lang import ir

if TYPE_CHECKING:
    from toycards.codegen.emitter import Emitter, Scope

_ELEMENTWISE = {"exp", "log", "tanh", "erf", "sin", "cos", "sqrt", "abs", "sigmoid"}
_PY_FUNCS = {
    "exp": "math.exp",
    "log": "math.log",
    "tanh": "math.tanh",
    "sqrt": "math.sqrt",
    "sin": "math.sin",
    "cos": "math.cos",
    "abs": "abs",
    "ceil": "math.ceil",
    "erf": "math.erf",
}
_CMP = {"<": "<", "≤": "<=", "=": "==", "≠": "!=", "≥": ">=", ">": ">"}


def _fams(*vals: Val) -> frozenset[str]:
    out: frozenset[str] = frozenset()
    for v in vals:
        out |= v.fams
    return out


class ExprEmitter:
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
        from toycards.codegen.emitter import family_key

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
            code = idx if not offset else f"{_paren(idx)} {'+' if offset > 0 else '-'} {abs(offset)}"
            parts.append(("expr", code))
            pos = m.end()
        parts.append(("text", group.prefix[pos:] + src.tensor))
        rank = len(decl.type.dims) if isinstance(decl.type, ir.TensorType) else 0
        layout = "code" if src.transpose else "card"
        return Val(f"self.w[{_name_code(parts)}]", rank, layout=layout, param=True)

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
        var = next((v for v in s.maps if v in _free_names(expr)), None)
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
            return v.with_(code=f"-{_paren(v.code)}")
        if e.op == "√":
            return v.with_(code=f"math.sqrt({v.code})" if v.py else f"ops.sqrt({v.code})")
        return v.with_(code=f"not {_paren(v.code)}" if v.py else f"~{_paren(v.code)}", boolean=True)

    def binop(self, e: ir.BinOp) -> Val:
        a, b = self.expr(e.left), self.expr(e.right)
        if e.op in _CMP:
            return Val(
                f"{_paren(a.code)} {_CMP[e.op]} {_paren(b.code)}",
                0,
                py=a.py and b.py,
                fams=_fams(a, b),
                boolean=True,
            )
        if e.op in ("∧", "∨"):
            op = ("and" if e.op == "∧" else "or") if a.py and b.py else ("&" if e.op == "∧" else "|")
            return Val(
                f"{_paren(a.code)} {op} {_paren(b.code)}", 0, py=a.py and b.py, fams=_fams(a, b), boolean=True
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
            f"{_paren(ac)} {op} {_paren(bc)}",
            rank,
            py=a.py and b.py,
            layout=layout,
            fams=_fams(a, b),
            windowed=a.windowed or b.windowed,
        )

    def _align(self, a: Val, ac: str, b: Val, bc: str) -> tuple[str, str]:
        """Give a batch-shaped matrix without a head axis one, when combined with a per-head value."""
        blocks = {v for v in _fams(a, b) if v in self.scope.maps and self.scope.maps[v].kind == "block"}
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
            return Val(f"ops.sum_last({_paren(a.code)} * {_paren(b.code)})", 0, fams=_fams(a, b))
        fams, win = _fams(a, b), b.windowed
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
            return Val(f"{base.code}({', '.join(a.code for a in args)})", 0, fams=_fams(*args), boolean=True)
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
        if len(idx) == 1 and base.rank == 1:
            return self._element(base, base_name, idx[0])
        raise ToycardsError("this indexing pattern cannot be generated")

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
        return Val(f"ops.embed({rows}, {ids.code})", 1, fams=ids.fams, windowed=ids.windowed)

    def _element(self, base: Val, base_name: str | None, i: ir.Expr) -> Val:
        s = self.scope
        if base_name is not None and base.code == "x" and s.is_main:  # token ids at the mapped positions
            return Val("x", 0, fams=frozenset(v for v in _free_names(i) if v in s.maps), windowed=True)
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

        >>> # 2·i − 1 → "0:2 * n - 1:2";  2·i → "1:2 * n:2";  i + d/2 → "d // 2:d // 2 + n"
        """
        n = m.bound_code
        const = _int_literal(offset)
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
    def call(self, c: ir.Call) -> Val:
        if c.func in self.em.algos:
            return self.call_algorithm(c, self.em.algos[c.func])
        return self.builtin(c)

    def builtin(self, c: ir.Call) -> Val:
        f = c.func
        if f == "rows":
            return self.rows(c)
        args = [self.expr(a) for a in c.args]
        if f == "length":
            return Val(f"{args[0].code}.shape[-1]", 0, py=True)
        if f in _ELEMENTWISE or f == "ceil":
            a = args[0]
            if a.py:
                return Val(f"{_PY_FUNCS[f]}({a.code})", 0, py=True)
            name = "abs_" if f == "abs" else f
            return a.with_(code=f"ops.{name}({self.code_layout(a)})", layout="code")
        if f in ("max", "min") and len(args) == 1:
            return Val(f"ops.{f}_last({args[0].code})", 0, fams=args[0].fams)
        if f in ("max", "min") and len(args) == 2 and all(a.py for a in args):
            return Val(f"{f}({args[0].code}, {args[1].code})", 0, py=True)
        if f in ("max", "min") and len(args) == 2:
            a, b = args
            return self._elementwise(a, b, ",").with_(code=f"ops.{f}imum({a.code}, {b.code})")
        raise ToycardsError(f"unknown function {f}")

    def rows(self, c: ir.Call) -> Val:
        """`rows(A, i, k)`: the i-th block of k rows (card rows are the last code axis)."""
        if len(c.args) != 3:
            raise ToycardsError("rows(A, i, k) takes three arguments")
        a, block, k = self.expr(c.args[0]), c.args[1], self.expr(c.args[2]).code
        var = next((v for v in _free_names(block) if v in self.scope.maps), None)
        if var is None:
            i = self.expr(block).code
            if i.isdigit():
                lo = "" if i == "1" else (k if i == "2" else f"{int(i) - 1} * {k}")
                sl = f"{lo}:{k if i == '1' else f'{i} * {k}'}"
            else:
                sl = f"({i} - 1) * {k}:{_paren(i)} * {k}"
            if a.rank == 2 and a.layout == "card":
                return a.with_(code=f"{a.code}[{sl}]")
            return a.with_(code=f"{a.code}[..., {sl}]")
        heads = f"ops.split_rows({self.code_layout(a)}, {k})"
        if isinstance(block, ir.Name) and block.id == var:
            return Val(heads, a.rank, fams=a.fams | {var}, windowed=a.windowed)
        gathered = self._gather_member(heads, 2, _expr_text(block))
        return gathered.with_(fams=a.fams | {var}, windowed=a.windowed)

    def call_algorithm(self, c: ir.Call, callee: ir.Algorithm) -> Val:
        if len(c.args) != len(callee.inputs) or len(c.params) != len(callee.params):
            raise ToycardsError(
                f"{callee.name} takes {len(callee.inputs)} inputs and {len(callee.params)} parameters"
            )
        decls = {n: d for d in (*callee.input_decls, *callee.hyper_decls) for n in d.names}
        pnames = {n for d, _ in callee.all_params() for n in d.names}
        codes, fams, extra, win = [], frozenset(), 0, False
        kv_index = ""
        arg_vals: list[Val] = []
        cached = CACHED_ARGS.get(callee.name, ())
        for k, (name, arg) in enumerate(zip(callee.inputs, c.args, strict=True)):
            v = self.expr(arg)
            fams |= v.fams
            t = decls[name].type if name in decls else None
            declared_rank = len(t.dims) if isinstance(t, ir.TensorType) else 0
            extra = max(extra, v.rank - declared_rank)
            if (
                v.windowed
                and isinstance(t, ir.TensorType)
                and len(t.dims) == 2
                and isinstance(t.dims[1], ir.DimName)
                and k not in cached
            ):
                self.em.windowed.setdefault(callee.name, set()).add(t.dims[1].name)
                win = True
            elif v.windowed and extra > 0:
                win = True
            codes.append(self.code_layout(v))
            arg_vals.append(v)
        if cached:  # the cache keeps the (fewer) key/value heads; query heads pick from it afterwards
            k_ident, v_ident = (self.scope.ns.fresh(callee.inputs[i] + "_all") for i in cached)
            bases = [arg_vals[i].gather[0] if arg_vals[i].gather else codes[i] for i in cached]
            self.pre.append(f"{k_ident}, {v_ident} = runtime.extend(ctx, {bases[0]}, {bases[1]})")
            gathers = [arg_vals[i].gather for i in cached]
            shared = (  # K and V pick the same heads by the same rule: let `attention` do it
                gathers[0] is not None
                and gathers[1] is not None
                and gathers[0][3] == gathers[1][3]
                and gathers[0][2] == -3
            )
            for i, ident, g in zip(cached, (k_ident, v_ident), gathers, strict=True):
                codes[i] = ident if shared or not g else f"ops.take({ident}, {g[1]}, {g[2]})"
            if shared and self.em.library.get(callee.name) == callee:
                kv_index = f", kv_index={gathers[0][1]}"
        for name, p in zip(callee.params, c.params, strict=True):
            if isinstance(p, ir.MaskDef):
                codes.append(self.mask_function(p))
                continue
            v = self.expr(p)
            fams |= v.fams
            codes.append(
                v.code if name not in pnames or v.rank < 2 or v.layout == "card" else f"ops.mT({v.code})"
            )
        blocks = {m for m in fams if m in self.scope.maps and self.scope.maps[m].kind in ("block", "pending")}
        if blocks:  # per-head arguments beside shared ones: give the shared inputs a head axis
            for k, v in enumerate(arg_vals):
                if not (v.fams & blocks) and v.rank == 2 and not v.param and not v.py and k not in cached:
                    codes[k] = f"{codes[k]}[..., None, :, :]"
        out = callee.output_decls[0].type if callee.output_decls else None
        rank = (len(out.dims) if isinstance(out, ir.TensorType) and out.field != "V" else 0) + extra
        out_col = out.dims[1] if isinstance(out, ir.TensorType) and len(out.dims) == 2 else None
        if isinstance(out_col, ir.DimName) and out_col.name in self.em.windowed.get(callee.name, set()):
            win = True
        return Val(
            f"{self.em.func_names[callee.name]}({', '.join(codes)}, ctx=ctx{kv_index})",
            rank,
            fams=fams,
            windowed=win,
        )

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
        return f"lambda {', '.join(idents)}: {body.code}"

    # ── sums and concatenation ─────────────────────────────────────────────────────────
    def sum(self, e: ir.Sum) -> Val:
        s = self.scope
        n = self.expr(e.hi).code
        if not (isinstance(e.lo, ir.Num) and e.lo.text == "1"):
            raise ToycardsError("Σ is generated for sums from 1")
        s.maps[e.var] = MapVar(e.var, s.ns.fresh(e.var), n, False, "element")
        try:
            body = self.expr(e.body)
        finally:
            m = s.maps.pop(e.var)
        if m.used_as_value:
            raise ToycardsError(f"Σ over {e.var} may only use {e.var} as an index")
        return Val(f"ops.sum_last({body.code})", 0, fams=body.fams - {e.var})

    def concat(self, e: ir.Concat) -> Val:
        if e.ellipsis:
            first = e.items[0]
            if not isinstance(first, ir.Name):
                raise ToycardsError("a family range `[e_1, …, e_ℓ]` needs family members")
            from toycards.codegen.emitter import family_key

            fk = family_key(first.id, set())
            if fk is None or fk[0] not in self.scope.families:
                raise ToycardsError(f"{first.id} is not a member of a family defined by a parallel map")
            ident, rank, _, win = self.scope.families[fk[0]]
            if e.axis == "cols":
                return Val(ident, rank + 1, windowed=win)
            return Val(f"ops.merge_rows({ident})", rank, windowed=win)
        parts = [self.expr(x) for x in e.items]
        if e.axis == "rows":
            return Val(
                f"ops.cat_last([{', '.join(self.code_layout(p) for p in parts)}])",
                max(p.rank for p in parts),
                fams=_fams(*parts),
            )
        return Val(f"ops.stack_cols([{', '.join(p.code for p in parts)}])", 2, fams=_fams(*parts))

    # ── assignments ────────────────────────────────────────────────────────────────────
    def target_ident(self, t: ir.Expr) -> str:
        name = t.base.id if isinstance(t, ir.Index) else t.id
        return self.scope.ns.name(name)

    def target_read(self, t: ir.Expr) -> Val:
        name = t.base.id if isinstance(t, ir.Index) else t.id
        return self.name(name)

    def assign(self, s: ir.Assign, out: list[str]) -> None:
        if not isinstance(s.target, ir.Name):
            raise ToycardsError("element assignments belong inside a parallel map")
        name = s.target.id
        if name in self.scope.dims and not self.scope.vals.get(name):
            v = self.expr(s.value)
            out += self.take_pre()
            if v.code != self.scope.dims[name]:
                out.append(f"{self.scope.dims[name]} = {v.code}")
            return
        v = self.expr(s.value)
        ident = self.scope.ns.name(name)
        out += self.take_pre()
        out.append(f"{ident} = {self.code_layout(v)}")
        self.scope.vals[name] = Val(
            ident, v.rank, py=v.py, windowed=v.windowed, fams=v.fams, boolean=v.boolean
        )

    def assign_in_map(self, s: ir.Assign, out: list[str], maps: dict[str, MapVar]) -> None:
        from toycards.codegen.emitter import family_key

        t = s.target
        v = self.expr(s.value)
        pre = self.take_pre()
        if isinstance(t, ir.Name):
            fk = family_key(t.id, set(maps))
            if fk is None or fk[1] not in maps:
                raise ToycardsError(
                    f"inside a parallel map, assign to a family member (e.g. {t.id}_t) or a column"
                )
            key, var = fk
            m = maps[var]
            if m.kind == "pending":
                m.kind = {0: "element", 1: "column"}.get(v.rank, "block")
            base = re.match(r"^[^_^]+", t.id).group(0)
            ident = self.scope.ns.name(base if base not in self.scope.vals else key)
            out += [*pre, f"{ident} = {self.code_layout(v)}"]
            self.scope.families[key] = (ident, v.rank, var, v.windowed or (m.windowed and v.rank >= 1))
            return
        if isinstance(t, ir.Index) and isinstance(t.base, ir.Name):
            name = t.base.id
            idx = t.indices
            fk = family_key(name, set(maps))
            if fk is not None and fk[1] in maps and len(idx) == 2 and isinstance(idx[0], ir.Slice):
                key, var = fk  # `Q̂^h[:, t]`: column t of family member h (a matrix per member)
                if maps[var].kind == "pending":
                    maps[var].kind = "block"
                base = re.match(r"^[^_^]+", name).group(0)
                ident = self.scope.ns.name(base if base not in self.scope.vals else key)
                out += [*pre, f"{ident} = {self.code_layout(v)}"]
                win = v.windowed or any(maps[x].windowed for x in maps if x in v.fams)
                self.scope.families[key] = (ident, 2, var, win)
                return
            ident = self.scope.ns.name(name)
            if len(idx) == 2 and isinstance(idx[0], ir.Slice):
                out += [*pre, f"{ident} = {self.code_layout(v)}"]
                self.scope.vals[name] = Val(
                    ident,
                    2,
                    windowed=v.windowed or any(maps[x].windowed for x in maps if x in v.fams),
                    fams=v.fams - set(maps),
                )
                return
            if len(idx) == 1:
                self._element_write(name, ident, idx[0], v, pre, out)
                return
        raise ToycardsError("this assignment target cannot be generated")

    def _element_write(
        self, name: str, ident: str, i: ir.Expr, v: Val, pre: list[str], out: list[str]
    ) -> None:
        s = self.scope
        aff = affine(i, set(s.maps))
        if aff is None:
            raise ToycardsError("an element index must be affine in a map variable")
        var, scale, offset = aff
        m = s.maps[var]
        out += pre
        value = v.code
        if name not in s.vals:
            size = self._declared_size(name)
            value = s.ns.fresh(f"{ident}_part")  # computed once, used for the shape and the entries
            out.append(f"{value} = {v.code}")
            out.append(f"{ident} = ops.zeros_for({value}, {size})")
            s.vals[name] = Val(ident, 1, fams=v.fams - {var})
        out.append(f"{ident}[..., {self.affine_slice(m, scale, offset)}] = {value}")

    def _declared_size(self, name: str) -> str:
        for d in (*self.scope.algo.output_decls, *self.scope.algo.input_decls):
            if name in d.names and isinstance(d.type, ir.TensorType) and len(d.type.dims) == 1:
                return self.dim(d.type.dims[0])
        raise ToycardsError(f"declare {name} as an output vector so that its size is known")

    def ret(self, s: ir.Return, out: list[str]) -> None:
        value = s.value
        if self.scope.is_main:
            if not (isinstance(value, ir.Call) and value.func == "softmax" and len(value.args) == 1):
                raise ToycardsError("a model card returns `P = softmax(Z)`; the module returns the logits Z")
            value = value.args[0]
        v = self.expr(value)
        out += self.take_pre()
        out.append(f"return {self.code_layout(v)}")


# ── helpers ─────────────────────────────────────────────────────────────────────────────
def _paren(code: str) -> str:
    if re.fullmatch(r"[\w.]+(\[[^\[\]]*\])?|[\w.]+\([^()]*\)|-?\d+(\.\d*)?(e-?\d+)?", code):
        return code
    depth = 0
    for i, ch in enumerate(code):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0 and i < len(code) - 1:
            return f"({code})"
    return code


def _name_code(parts: list[tuple[str, str]]) -> str:
    """A tensor-name expression: a readable f-string for plain names, else literal concatenation."""
    if all(kind == "expr" or re.fullmatch(r"[\w.\-]*", text) for kind, text in parts):
        return 'f"' + "".join(text if kind == "text" else "{" + text + "}" for kind, text in parts) + '"'
    return " + ".join(repr(text) if kind == "text" else f"str({text})" for kind, text in parts if text)


def _int_literal(e: ir.Expr | None) -> int | None:
    """The value of `3` or `−3` written as a literal, else None."""
    if isinstance(e, ir.Num) and e.text.isdigit():
        return int(e.text)
    if isinstance(e, ir.UnOp) and e.op == "-" and isinstance(e.operand, ir.Num) and e.operand.text.isdigit():
        return -int(e.operand.text)
    return None


def _expr_text(e: ir.Expr) -> str:
    from toycards.lang.printer import Renderer

    return Renderer().expr(e)


def _free_names(e: object) -> set[str]:
    from toycards.codegen.emitter import _names

    return _names(e)


def affine(e: ir.Expr, names: set[str]) -> tuple[str, int, ir.Expr | None] | None:
    """`2·i − 1` → ("i", 2, Num(-1)); `i + d/2` → ("i", 1, d/2); `i` → ("i", 1, None)."""
    if isinstance(e, ir.Name) and e.id in names:
        return e.id, 1, None
    if (
        isinstance(e, ir.BinOp)
        and e.op == "·"
        and isinstance(e.left, ir.Num)
        and isinstance(e.right, ir.Name)
        and e.right.id in names
    ):
        return e.right.id, int(e.left.text), None
    if isinstance(e, ir.BinOp) and e.op in "+-":
        inner = affine(e.left, names)
        if inner is not None and inner[2] is None and not (_free_names(e.right) & names):
            off = e.right if e.op == "+" else ir.UnOp("-", e.right)
            return inner[0], inner[1], off
    return None


_EXPR_CACHE: dict[str, ir.Expr] = {}


def parse_expr(text: str) -> ir.Expr:
    """Parse an expression written in a name's braces, e.g. `⌈h·H_kv/H⌉`."""
    if text not in _EXPR_CACHE:
        from toycards.lang.parse import parse

        card = parse(f"Algorithm: a ← f(b)\n1  return a = {text}\n")
        _EXPR_CACHE[text] = card.algorithms[0].body[0].value
    return _EXPR_CACHE[text]
