"""Which axes are the tokens of a pass, and whether a KV cache can follow the card exactly.

Owns: `cache_plan(card, result) -> CachePlan`: the checker's annotation that codegen reads to
thread the cache. It follows the token axis from the entry point's `x ∈ V^ℓ` through every
step and call, using the shapes the checker inferred:

- a **query** axis holds this pass's tokens (under the cache, only the new ones, at their
  absolute positions); a step may read a query axis only column by column (a map over it, or
  an array operation along it), never across it;
- a call whose output runs over one token dimension (`ℓ_x`) while an input runs over another
  (`K ∈ ℝ^{d×ℓ_z}`) reads that input as its **context**: the cache extends it with the columns
  of every earlier token, whatever the algorithm is called;
- a reduction over a context axis (`V · softmax(S)`, `Σ`, `max`) is causal, and so exact under
  the cache, only when the entries past the query's position are masked out: set to −∞ by a
  causal mask (`⟦t_z ≤ t_x⟧`, sliding windows included), then 0 after `exp`/`softmax`.

Anything else that reads across tokens (a fixed column `X[:, 1]`, `Σ` over the tokens, a
non-causal mask, the number `ℓ` used as a value) makes the plan "recompute": decoding then runs
the whole sequence again at each step, which is exact, and the plan says why (`reason`, at
`span`). An algorithm with a `State:` streams: its `for t = 1, …, ℓ do` loop over this pass's
tokens reads them one by one, exact under the cache when only state names carry from one token
to the next. Leaves out: generating code (codegen/) and running (runtime/context.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toycards.checker.context import AlgoInfo, CheckResult
from toycards.checker.last_token import last_cut
from toycards.checker.masks import after, causal_condition, is_mask, is_neg_inf, positive, unmasked_by
from toycards.errors import Span
from toycards.lang import ir
from toycards.lang.options import call_params

# Masked states of a value with a context axis: where its entries past the query position stand.
OPEN, NEG, ZERO = "open", "−∞", "0"  # unknown; −∞ there (masked scores); 0 there (weights)


@dataclass
class CachePlan:
    """How generated code keeps a KV cache for one card."""

    reason: str = ""  # empty: the cache is exact; else why decoding recomputes the sequence
    span: Span | None = None
    extend: dict[int, tuple[int, ...]] = field(default_factory=dict)  # id(call) → inputs the cache extends
    query_dims: dict[str, frozenset[str]] = field(default_factory=dict)  # algorithm → its token dimensions
    positional: set[int] = field(default_factory=set)  # id(index) of `W_p[:, t]`: a token's position picks
    # after which top-level step of the entry point every step acts on each token alone, and the
    # card axis of the token dimension of each value live there (None: no such step)
    last_cut: tuple[int, dict[str, int]] | None = None

    @property
    def cached(self) -> bool:
        return not self.reason

    def note(self, card: ir.Card) -> str:
        """The reason with where it is (`gpt2.card:12 `X[:, 1]`: …`); "" when the cache is exact."""
        if not self.reason:
            return ""
        span = self.span
        if span is None:
            return self.reason
        src = card.source or ""
        if span.file != card.main.span.file:
            from toycards.checker import _prelude

            lib = _prelude()
            src = lib.source if lib is not None and span.file == lib.main.span.file else ""
        text = src[span.start : span.end] if 0 <= span.start < span.end <= len(src) else ""
        return f"{span.file}:{span.line}" + (f" `{text}`" if text else "") + f": {self.reason}"


class Recompute(Exception):
    def __init__(self, node: object, message: str) -> None:
        super().__init__(message)
        self.span, self.message = getattr(node, "span", None), message


def cache_plan(card: ir.Card, result: CheckResult, prelude: CheckResult | None = None) -> CachePlan:
    """The cache plan of `card`'s entry point (checked as `result`; `prelude`: the library's)."""
    main = card.main
    x = main.input_decls[0] if main.input_decls else None
    seq = x.type.dims[0] if x is not None and isinstance(x.type, ir.TensorType) and x.type.dims else None
    if not isinstance(seq, ir.DimName) or main.name not in result.algorithms:
        return CachePlan("the entry point takes no token sequence")
    flow = _Flow(card, result, prelude)
    try:
        flow.algorithm(main, frozenset({seq.name}), frozenset(), frozenset(), {})
    except Recompute as r:
        return CachePlan(r.message, r.span, {}, {main.name: frozenset({seq.name})})
    plan = CachePlan("", None, flow.extend, flow.query_dims, flow.positional)
    plan.last_cut = last_cut(card, result, prelude, flow.extend, seq.name)
    return plan


class _Flow:
    def __init__(self, card: ir.Card, result: CheckResult, prelude: CheckResult | None) -> None:
        self.card, self.result, self.prelude = card, result, prelude
        self.own = {id(a) for a in card.algorithms}
        self.extend: dict[int, tuple[int, ...]] = {}
        self.query_dims: dict[str, frozenset[str]] = {}
        self.positional: set[int] = set()
        self.done: dict[tuple, str | None] = {}
        self.mask_site: ir.MaskDef | None = None  # the last mask written at a call, for messages

    def info(self, algo: ir.Algorithm) -> AlgoInfo:
        source = self.result if id(algo) in self.own else self.prelude
        if source is None or algo.name not in source.algorithms:
            raise Recompute(algo, f"{algo.name} was not checked")
        return source.algorithms[algo.name]

    def algorithm(self, algo, q: frozenset, c: frozenset, causal: frozenset, states: dict) -> str | None:
        """Follow `algo` with query dims q, context dims c, causal masks and input states; the
        output's masked state (None when it has no context axis)."""
        key = (algo.name, q, c, causal, tuple(sorted(states.items())))
        if key in self.done:
            return self.done[key]
        if self.query_dims.setdefault(algo.name, q) != q:
            raise Recompute(algo, f"{algo.name} is called both with and without this pass's tokens")
        self.done[key] = None  # recursion is refused by codegen; stop here
        frame = _Frame(self, algo, self.info(algo), q, c, causal, dict(states))
        frame.block(algo.body)
        self.done[key] = frame.returned
        return frame.returned


class _Frame:
    """One algorithm followed under one assignment of token axes."""

    def __init__(self, flow: _Flow, algo, info: AlgoInfo, q, c, causal, states) -> None:
        self.flow, self.algo, self.info = flow, algo, info
        self.q, self.c, self.causal, self.states = q, c, causal, states
        self.returned: str | None = None
        self.masks = {n for d in algo.hyper_decls for n in d.names if is_mask(d.type)}
        # an algorithm with a `State:` block streams: under the cache it sees this pass's tokens
        # alone, one after another in a `for t = 1, …, ℓ do` loop, and its state carries the rest
        self.state = {n for d in algo.state_decls for n in d.names}
        self.token_loops: list[ir.ForSeq] = []

    # ── axes ──
    def axes(self, node) -> tuple[str, ...]:
        """Per axis of node's value: "q" (this pass's tokens), "c" (context), or ""."""
        shape = self.info.shape_of(node)
        if shape is None:
            return ()
        out = []
        for d in shape.dims:
            n = d.as_name() if d is not None else None
            if n in self.q:
                out.append("q")
            elif n in self.c:
                out.append("c")
            elif d is not None and d.names() & (self.q | self.c):
                raise Recompute(node, f"an axis of size {d} mixes token positions")
            else:
                out.append("")
        if out.count("q") > 1:
            raise Recompute(node, "a token × token value needs every earlier token")
        return tuple(out)

    def token_var(self, e) -> str:
        """The kind of token axis ("q" or "c") e ranges over as a map or Σ variable, else ""."""
        if not isinstance(e, ir.Name):
            return ""
        sym = self.info.symbol_of(e)
        if sym is None or sym.kind not in ("mapvar", "loopvar"):
            return ""
        decl = sym.decl
        if isinstance(decl, ir.ForSeq):
            return "q" if decl in self.token_loops else ""
        bound = decl.bound if isinstance(decl, ir.Range) else decl.hi if isinstance(decl, ir.Sum) else None
        name = (
            bound.name if isinstance(bound, ir.DimName) else bound.id if isinstance(bound, ir.Name) else None
        )
        return "q" if name in self.q else "c" if name in self.c else ""

    # ── statements ──
    def block(self, stmts) -> None:
        for s in stmts:
            if isinstance(s, ir.Assign):
                self.assign(s)
            elif isinstance(s, ir.Return):
                self.returned = self.expr(s.value)
            elif isinstance(s, ir.ForSeq) and self.token_loop(s):
                self.token_loops.append(s)
                self.block(s.body)
                self.token_loops.pop()
            elif isinstance(s, ir.ForSeq):
                for e in (s.start, s.stop, s.second):
                    if e is not None:
                        self.expr(e)
                self.block(s.body)
            elif isinstance(s, ir.ForAll):
                if not self.masking(s):
                    self.block(s.body)
            elif isinstance(s, ir.If):
                self.expr(s.cond)
                self.block(s.then)
                self.block(s.orelse)

    def token_loop(self, s: ir.ForSeq) -> bool:
        """`for t = 1, …, ℓ do` over this pass's tokens in an algorithm with a state: under the cache
        it runs over the new tokens alone. Exact only when nothing but the state carries from one
        token to the next: every name the loop assigns, but a state or a column written at t, must be
        new in each turn (a local defined before the loop would restart with each pass)."""
        if (
            not self.state
            or _bound_name(s.stop) not in self.q
            and getattr(s.stop, "name", None) not in self.q
        ):
            return False
        if not (isinstance(s.start, ir.Num) and s.start.text == "1" and s.second is None):
            raise Recompute(s, "a loop over this pass's tokens must run t = 1, …, ℓ to stream")
        for a in (n for n in ir.walk(s.body) if isinstance(n, ir.Assign)):
            name = a.target.id if isinstance(a.target, ir.Name) else None
            if name is not None and name not in self.state and name in self.states:
                raise Recompute(
                    a.target, f"{name} carries from one token to the next; declare it under State"
                )
        return True

    def assign(self, s: ir.Assign) -> None:
        t = s.target
        if isinstance(t, ir.Name) and t.id in self.q and _is_length(s.value):
            return  # `ℓ ← length(x)`: names this pass's token count
        state = self.expr(s.value)
        if isinstance(t, ir.Index):
            self.indices(t, self.axes(t.base))
            self.states[_base_name(t)] = OPEN
        elif isinstance(t, ir.Name):
            self.states[t.id] = state

    def masking(self, s: ir.ForAll) -> bool:
        """`for t_z ∈ [ℓ_z], t_x ∈ [ℓ_x] do if ¬Mask[t_z, t_x] then S[t_z, t_x] ← −∞ end` with a causal
        Mask (or the condition `t_z > t_x`): S's entries past each query position become −∞."""
        if len(s.ranges) != 2 or len(s.body) != 1 or not isinstance(s.body[0], ir.If):
            return False
        z, x = (r.var for r in s.ranges)
        cond, then = s.body[0].cond, s.body[0].then
        if s.body[0].orelse or len(then) != 1 or not isinstance(then[0], ir.Assign):
            return False
        target, value = then[0].target, then[0].value
        if not (isinstance(target, ir.Index) and isinstance(target.base, ir.Name) and is_neg_inf(value)):
            return False
        if [getattr(i, "id", None) for i in target.indices] != [z, x]:
            return False
        if self.axes(target.base) != ("c", "q"):
            return False
        if not (unmasked_by(cond, z, x, self.causal) or after(cond, z, x)):
            raise Recompute(
                self.flow.mask_site or cond,
                "this mask is not causal: it must imply t_z ≤ t_x (such as ⟦t_z ≤ t_x⟧ or a sliding window)",
            )
        self.states[target.base.id] = NEG
        return True

    # ── expressions: each returns the masked state of a value with a context axis, else None ──
    def expr(self, e) -> str | None:  # noqa: C901 - one case per node kind
        if isinstance(e, ir.Name):
            return self.name(e)
        if isinstance(e, ir.Num | ir.Const | ir.Str) or e is None:
            return None
        if isinstance(e, ir.Indicator):
            return self.expr(e.cond)
        if isinstance(e, ir.UnOp):
            inner = self.expr(e.operand)
            return self.opened(e, inner)
        if isinstance(e, ir.Transpose):
            return self.expr(e.operand)
        if isinstance(e, ir.BinOp):
            return self.binop(e)
        if isinstance(e, ir.Index):
            return self.index(e)
        if isinstance(e, ir.Sum):
            return self.sum(e)
        if isinstance(e, ir.Concat):
            return self.concat(e)
        if isinstance(e, ir.Call):
            return self.call(e)
        if isinstance(e, ir.MaskDef):
            return None
        raise Recompute(e, f"{type(e).__name__} is not followed by the cache planner")

    def opened(self, e, *states) -> str | None:
        """The state of a result that keeps no mask: OPEN when it has a context axis."""
        return OPEN if "c" in self.axes(e) else None

    def name(self, e: ir.Name) -> str | None:
        if e.id in self.masks:
            return None  # a mask is a function of two positions, passed on or read entry by entry
        sym = self.info.symbol_of(e)
        if e.id in self.q and (sym is None or sym.kind in ("dim", "hyper", "local")):
            raise Recompute(e, f"{e.id}, the number of tokens, under the cache counts only the new ones")
        if sym is not None and sym.family_index is not None:
            fam = self.info.families.get(sym.key)
            size = fam[1] if fam is not None else None
            if size is not None and size.as_name() in self.q and not self.token_var(sym.family_index):
                raise Recompute(e, f"{e.id} reads one token's member of a family over the tokens")
        state = self.states.get(e.id)
        return state if state is not None and "c" in self.axes(e) else self.opened(e)

    def binop(self, e: ir.BinOp) -> str | None:
        a, b = self.expr(e.left), self.expr(e.right)
        la, lb = self.axes(e.left), self.axes(e.right)
        if e.op == "·" and len(la) == 2 and len(lb) >= 1:
            inner = la[1]
            if inner == "q":
                raise Recompute(e, "a product that sums over this pass's tokens needs every earlier token")
            if inner == "c":
                if a != ZERO and b != ZERO:
                    raise Recompute(e, "a product over the context is causal only with masked weights")
                return self.opened(e)
            return self.opened(e)
        if e.op in ("+", "−", "-") and {a, b} <= {NEG, None} and NEG in (a, b):
            return NEG if (a is None or b is None) else OPEN
        if e.op in ("·", "/", "⊙") and a in (NEG, ZERO) and b is None and positive(e.right):
            return a
        if e.op in ("·", "⊙") and b in (NEG, ZERO) and a is None and positive(e.left):
            return b
        if e.op in ("⊙", "·") and ZERO in (a, b) and NEG not in (a, b):
            return ZERO
        if e.op == "/" and a == ZERO and b is None:
            return ZERO
        return self.opened(e)

    def index(self, e: ir.Index) -> str | None:
        if isinstance(e.base, ir.Name) and e.base.id in self.masks:
            for i in e.indices:
                self.expr(i) if not isinstance(i, ir.Slice) else None
            return None
        base = self.expr(e.base)
        axes = self.axes(e.base)
        self.indices(e, axes)
        kept = [
            a for a, i in zip(axes, e.indices) if isinstance(i, ir.Slice) and i.lo is None and i.hi is None
        ]
        picked = [self.token_var(i) for i in e.indices if not isinstance(i, ir.Slice)]
        if base in (NEG, ZERO) and ("c" in kept or "c" in picked):
            return base  # whole token axes, or the entry at a map/Σ variable over them
        return self.opened(e)

    def indices(self, e: ir.Index, axes: tuple[str, ...]) -> None:
        for axis, i in zip(axes, e.indices):
            if isinstance(i, ir.Slice):
                for bound in (i.lo, i.hi):
                    self.expr(bound)
                if axis == "q" and (i.lo is not None or i.hi is not None):
                    raise Recompute(e, "slices the token axis, reading other tokens than a map's current one")
                continue
            self.expr(i)
            if axis == "q" and self.token_var(i) != "q":
                raise Recompute(e, "picks a token by a fixed or computed index, not a map's token variable")
            if axis == "" and self.token_var(i) == "q":  # not per token: the absolute position picks
                self.flow.positional.add(id(e))

    def sum(self, e: ir.Sum) -> str | None:
        self.expr(e.lo)
        over = _bound_name(e.hi)
        if over in self.q:
            raise Recompute(e, "a Σ over this pass's tokens needs every earlier token")
        if over not in self.c:
            self.expr(e.hi)
        body = self.expr(e.body)
        if over in self.c and body != ZERO:
            raise Recompute(e, "a Σ over the context is causal only over masked weights")
        return self.opened(e)

    def concat(self, e: ir.Concat) -> str | None:
        if e.ellipsis:
            first, last = e.items[0], e.items[-1]
            fam = self.info.symbol_of(first) if isinstance(first, ir.Name) else None
            size = None
            if fam is not None and fam.family_index is not None and fam.key in self.info.families:
                size = self.info.families[fam.key][1]
            if size is not None and size.as_name() in self.q:
                lo = getattr(self.info.symbol_of(first), "family_index", None)
                hi = getattr(self.info.symbol_of(last), "family_index", None)
                if not (
                    isinstance(lo, ir.Num) and lo.text == "1" and getattr(hi, "id", None) == size.as_name()
                ):
                    raise Recompute(e, "a part of a family over the tokens")
            self.axes(e)
            return self.opened(e)
        for item in e.items:
            self.expr(item)
        return self.opened(e)

    # ── calls ──
    def call(self, e: ir.Call) -> str | None:
        callee = self.info.callee_of(e)
        if not isinstance(callee, ir.Algorithm):
            return self.builtin(e, callee or e.func)
        arg_states = [self.expr(a) for a in e.args]
        for p in e.params:
            self.expr(p)
        binding = self.info.dim_bindings_of(e)
        token = {}
        for n, d in binding.items():
            kind = "q" if d.as_name() in self.q else "c" if d.as_name() in self.c else ""
            if not kind and d.names() & (self.q | self.c):
                raise Recompute(e, f"{callee.name}'s {n} is bound to {d}, which mixes token positions")
            if kind:
                token[n] = kind
        out = callee.output_decls[0].type if callee.output_decls else None
        out_col = _column_dim(out)
        q_new = {n for n, k in token.items() if k == "q"}
        c_new = {n for n, k in token.items() if k == "c"}
        extend = []
        if out_col in q_new:
            for k, (name, arg) in enumerate(zip(callee.inputs, e.args)):
                col = _column_dim(_decl_type(callee, name))
                if col in q_new and col != out_col:
                    if "q" not in self.axes(arg):
                        raise Recompute(
                            arg, f"{callee.name} reads {name} as its context, but it is not per token"
                        )
                    extend.append(k)
            for k in extend:
                c_new.add(_column_dim(_decl_type(callee, callee.inputs[k])))
            q_new = {out_col} | (q_new - c_new)
        if extend:
            self.flow.extend[id(e)] = tuple(extend)
        states = {}
        for k, (name, s) in enumerate(zip(callee.inputs, arg_states)):
            if s is not None and k not in extend:
                states[name] = s
        causal = frozenset(
            n
            for n, p in zip(callee.params, call_params(callee, e))
            if self.causal_mask(p) and is_mask(_decl_type(callee, n))
        )
        out_state = self.flow.algorithm(callee, frozenset(q_new), frozenset(c_new), causal, states)
        return out_state if "c" in self.axes(e) else None

    def causal_mask(self, p) -> bool:
        if isinstance(p, ir.MaskDef):
            self.flow.mask_site = p
            z, x = p.indices if len(p.indices) == 2 else (None, None)
            cond = p.body.cond if isinstance(p.body, ir.Indicator) else None
            return z is not None and cond is not None and causal_condition(cond, z, x)
        return isinstance(p, ir.Name) and p.id in self.causal

    def builtin(self, e: ir.Call, name: str) -> str | None:
        if name in ("zeros", "filled"):  # sizes: zeros(d, ℓ) is zeros per token, this pass's too
            if name == "filled":
                self.expr(e.args[0])
            return self.opened(e)
        states = [self.expr(a) for a in e.args]
        axes = self.axes(e.args[0]) if e.args else ()
        if name == "length":
            if "q" in axes:
                raise Recompute(e, "length of the token axis counts only the new tokens under the cache")
            return None
        if name == "exp" and states and states[0] == NEG:
            return ZERO
        if name in ("max", "min") and len(e.args) == 1:  # over the first axis: per column of a matrix
            reduced = axes[0] if axes else ""
            if reduced == "q":
                raise Recompute(e, f"{name} over this pass's tokens needs every earlier token")
            if reduced == "c" and not (name == "max" and states[0] == NEG):
                raise Recompute(e, f"{name} over the context is causal only over masked scores")
            return self.opened(e)
        if name == "topk" and axes and axes[0] in ("q", "c"):  # it ranks a vector, or each column
            raise Recompute(e, "topk along a token axis")
        if name == "rows" and axes and axes[0] in ("q", "c"):
            raise Recompute(e, "rows of a token axis")
        return self.opened(e)


# ── helpers on IR ──


def _is_length(e) -> bool:
    return isinstance(e, ir.Call) and e.func == "length"


def _base_name(t: ir.Index) -> str:
    b = t.base
    while isinstance(b, ir.Index):
        b = b.base
    return b.id if isinstance(b, ir.Name) else ""


def _bound_name(e) -> str | None:
    return e.id if isinstance(e, ir.Name) else None


def _column_dim(t) -> str | None:
    if isinstance(t, ir.TensorType) and len(t.dims) == 2 and isinstance(t.dims[1], ir.DimName):
        return t.dims[1].name
    return None


def _decl_type(algo: ir.Algorithm, name: str):
    for d in (*algo.input_decls, *algo.hyper_decls, *(d for d, _ in algo.all_params())):
        if name in d.names:
            return d.type
    return None
