"""What a card costs: its parameter count and the FLOPs of its matrix products, from its own text.

Owns: `card_cost(card, values, ctx)` and `described_cost(described, ctx)` → `Cost`:
- **parameters** from the Parameters declarations: embeddings (parameters the steps only look
  up, `W_e[:, x[t]]`), each layer loop's parameters times its count, the rest. Bound to a file,
  every tensor counts once (a tied output head is `token_embd.weight` again) and a constant
  fallback (`or 1`) counts nothing, so the total is the elements of the tensors the card uses;
  without a file each parameter is the first tensor its binding names.
- **FLOPs** of the steps' matrix products, read from the checker's shape of each operand: a
  product ℝ^{m×k} · ℝ^{k×n} costs 2·m·k·n (a matrix times a vector: n = 1; an outer product:
  k = 1); calls (the prelude's algorithms among them) are expanded with the call's dimensions;
  loops multiply (`for l = 1, …, L` by L, `for h ∈ [H]` by H, Σ by its range). Attention's
  K^⊺ · Q and V · softmax(S) run over every key, masked or not, as SDPA computes them.
  Elementwise operations, norms, softmax, RoPE and activations are not counted (`COUNTED`).
  The KV cache plan (checker/tokenflow.py) says which inputs the cache extends: their token axis
  is the context, so one polynomial gives a prefill of N tokens and a decoding step at context
  N; a card the cache cannot follow reruns the sequence at each step. The prelude's MoE_biased
  (which MoE calls) runs each token on its k chosen experts (`SPARSE_LOOPS`): its steps run all E
  and weight the others by 0, which every kernel skips.

Expressions are `checker.dims.Dim` polynomials over the card's hyperparameters and N, printed
by factored.py. Leaves out: binding files (describe.py), printing a whole description and
the command line (formats.py, cli/files.py).

>>> from toycards.library import library_card
>>> print(card_cost(library_card("llama")).prefill_text())
2·d_e·(L·(2·d_h·(H + H_kv) + 3·d_ff) + N_V)·N + 4·L·H·d_h·N²
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from toycards.checker.dims import Dim, DimError, evaluate, expr_to_dim, from_ir
from toycards.errors import ToycardsError
from toycards.inspect.factored import is_product, joined, render_factored
from toycards.inspect.layer_counts import LayerCounts
from toycards.lang import ir
from toycards.lang.scale import child_fields

__all__ = ["COUNTED", "DEFAULT_CTX", "Cost", "Part", "card_cost", "cost_text", "described_cost"]

DEFAULT_CTX = 2048  # N where neither --ctx nor a trained context length gives one
CONTEXT = "#context"  # the keys of an attention under the KV cache (no card name holds a `#`)
# (prelude algorithm, loop variable) → the hyperparameter counting the turns each token takes part in
SPARSE_LOOPS = {("MoE_biased", "e"): "k"}
COUNTED = (
    "matrix products, 2·m·k·n each (attention's K^⊺·Q and V·softmax(S) over every key, masked or not);"
    " not counted: elementwise operations, norms, softmax, RoPE, activations"
)
ZERO = Dim.num(0)


# ── FLOPs of the steps ──────────────────────────────────────────────────────────────────
class _Flops:
    """The matmul FLOPs of one pass: per algorithm, a polynomial in its own names and CONTEXT."""

    def __init__(self, card: ir.Card, counts: LayerCounts) -> None:
        from toycards.checker import check_card, check_prelude
        from toycards.checker.tokenflow import cache_plan

        self.result, self.prelude = check_card(card), check_prelude()
        if not self.result.ok:
            first = next(d for d in self.result.diagnostics if d.severity == "error")
            raise ToycardsError(f"{first.headline()} (the card does not check: `toycards check` shows why)")
        self.plan = cache_plan(card, self.result, self.prelude)
        self.own = {id(a) for a in card.algorithms}
        self.done: dict[int, Dim | None] = {}
        self.notes: dict[str, None] = {}  # in order, once each
        self.counts = counts  # layers a per-layer condition picks (`if n_kv[l] = 0`)

    def info(self, algo: ir.Algorithm):
        source = self.result if id(algo) in self.own else self.prelude
        info = source.algorithms.get(algo.name) if source is not None else None
        if info is None or info.algorithm is not algo:
            raise ToycardsError(f"{algo.name} was not checked; its FLOPs cannot be counted")
        return info

    def algorithm(self, algo: ir.Algorithm) -> Dim:
        if id(algo) not in self.done:
            self.done[id(algo)] = None  # the checker refuses a call chain that comes back (call_chain_errors)
            self.done[id(algo)] = _Steps(self, algo).block(algo.body)
        return self.done[id(algo)] or ZERO


class _Steps:
    """The FLOPs of one algorithm's steps, in its own names."""

    def __init__(self, flops: _Flops, algo: ir.Algorithm) -> None:
        self.flops, self.algo, self.info = flops, algo, flops.info(algo)
        self.library = id(algo) not in flops.own

    def block(self, stmts: Sequence[ir.Stmt]) -> Dim:
        return sum((self.stmt(s) for s in stmts), ZERO)

    def stmt(self, s: ir.Stmt) -> Dim:
        if isinstance(s, ir.Assign):
            return self.expr(s.value) + self.expr(s.target)
        if isinstance(s, ir.Return):
            return self.expr(s.value)
        if isinstance(s, ir.ForSeq):  # a branch on the loop variable runs in the turns it picks
            return self.flops.counts.loop(s, s.body, self.stmt, self.block, self.turns(s))
        if isinstance(s, ir.ForAll):
            return math.prod((from_ir(r.bound) for r in s.ranges), start=Dim.num(1)) * self.block(s.body)
        if isinstance(s, ir.If):
            then, orelse = self.block(s.then), self.block(s.orelse)
            if then != orelse:
                note = f"{self.algo.name}, line {s.span.line}: `if` counted as its first branch with products"
                self.flops.notes[note] = None
            return then if then != ZERO else orelse
        return ZERO

    def turns(self, s: ir.ForSeq) -> Dim:
        """How often `for v = a, (b,) …, z` runs its body."""
        sparse = SPARSE_LOOPS.get((self.algo.name, s.var)) if self.library else None
        if sparse is not None:
            note = (
                f"{self.algo.name}: each token runs its {sparse} chosen experts"
                " (the steps run all and weight the rest by 0)"
            )
            self.flops.notes[note] = None
            return Dim.name(sparse)
        start, stop = self.dim(s.start, s), self.dim(s.stop, s)
        step = self.dim(s.second, s) - start if s.second is not None else Dim.num(1)
        return (stop - start) / step + 1

    def dim(self, e: ir.Expr, loop: ir.ForSeq) -> Dim:
        d = expr_to_dim(e, lambda name: True)
        if d is None:
            raise ToycardsError(
                f"{self.algo.name}, line {loop.span.line}: the bounds of `for {loop.var}` are not "
                "dimensions, so its FLOPs cannot be counted"
            )
        return d

    def expr(self, e: object) -> Dim:
        if isinstance(e, tuple):
            return sum((self.expr(x) for x in e), ZERO)
        fields = child_fields(type(e))
        if fields is None or isinstance(e, ir.MaskDef):  # a mask is read entry by entry: no products
            return ZERO
        if isinstance(e, ir.Sum):
            lo, hi = (expr_to_dim(b, lambda name: True) for b in (e.lo, e.hi))
            turns = hi - lo + 1 if lo is not None and hi is not None else Dim.num(1)
            return self.expr(e.lo) + self.expr(e.hi) + turns * self.expr(e.body)
        inner = sum((self.expr(getattr(e, f)) for f in fields), ZERO)
        if isinstance(e, ir.BinOp) and e.op == "·":
            return inner + self.product(e)
        if isinstance(e, ir.Call) and isinstance(callee := self.info.callee_of(e), ir.Algorithm):
            return inner + self.call(e, callee)
        return inner

    def product(self, e: ir.BinOp) -> Dim:
        """2·m·k·n for ℝ^{m×k} · ℝ^{k×n}; nothing for a number times anything, or for `b · 1^⊺`
        (a broadcast)."""
        a, b = self.info.shape_of(e.left), self.info.shape_of(e.right)
        if a is None or b is None or not a.dims or not b.dims or None in (*a.dims, *b.dims):
            return ZERO
        m, k = (a.dims[0], Dim.num(1)) if a.rank == 1 else a.dims[:2]
        n = b.dims[1] if b.rank == 2 else Dim.num(1)
        return 2 * m * k * n

    def call(self, e: ir.Call, callee: ir.Algorithm) -> Dim:
        """The callee's FLOPs in this algorithm's names: its derived dimensions spelled out, then the
        call's; the token axis of an input that the KV cache extends is the context."""
        binding = dict(self.info.dim_bindings_of(e))
        for k in self.flops.plan.extend.get(id(e), ()):
            decl = next((d for d in callee.input_decls if callee.inputs[k] in d.names), None)
            dims = decl.type.dims if decl is not None and isinstance(decl.type, ir.TensorType) else ()
            if len(dims) == 2 and isinstance(dims[1], ir.DimName):
                binding[dims[1].name] = Dim.name(CONTEXT)
        derived = self.flops.info(callee).signature.derived
        return self.flops.algorithm(callee).substitute(derived).substitute(binding)


# ── parameters ──────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class Part:
    """Parameters of one kind: `count` × `each` (count 1 outside the layer loops)."""

    label: str  # "embeddings", "blocks" (one per layer loop), "other"
    each: Dim
    count: Dim = field(default_factory=lambda: Dim.num(1))
    value: int | None = None  # elements of its tensors, every turn together (None: not bound)


def _looked_up(algo: ir.Algorithm) -> set[str]:
    """Parameters outside the layer loops that the steps only index (`W_e[:, x[t]]`, `W_p[:, t]`)."""
    top = {n for d, g in algo.all_params() if g is None for n in d.names}
    bases = {id(n.base) for n in ir.walk(algo.body) if isinstance(n, ir.Index)}
    uses = [n for n in ir.walk(algo.body) if isinstance(n, ir.Name) and n.id in top]
    return {n.id for n in uses} - {n.id for n in uses if id(n) not in bases}


def _parts(algo: ir.Algorithm, bound, from_file: bool, counts: LayerCounts) -> tuple[list[Part], list[str]]:
    """The parameters by kind. With `bound` (models.binding.Bound), each tensor once and constants not
    at all (a declaration counts in the expression as its first layer's tensor does); else every name."""
    params = bound.params if bound is not None else []
    looked_up, seen, notes = _looked_up(algo), {}, []
    kinds: dict[object, list] = {}  # kind → [each, value, group]
    for decl, group in algo.all_params():
        kind = id(group) if group is not None else "embeddings" if decl.names[0] in looked_up else "other"
        entry = kinds.setdefault(kind, [ZERO, 0, group])
        dims = decl.type.dims if isinstance(decl.type, ir.TensorType) else ()
        size = math.prod((from_ir(d) for d in dims), start=Dim.num(1))
        for name in decl.names:
            mine = sorted((p for p in params if p.name == name), key=lambda p: p.layer or 0)
            counted = not mine
            for i, p in enumerate(mine):
                key = (p.tensor, p.rows)
                if p.tensor is None:
                    if i == 0:
                        notes.append(
                            f"{name} is the constant {p.const} (no {p.key} in the file): no parameters"
                        )
                elif key in seen:
                    if i == 0 and seen[key] != name:
                        notes.append(f"{name} is {p.tensor} again (tied to {seen[key]}): counted once")
                else:
                    seen[key] = name
                    entry[1] += math.prod(p.shape)
                    counted = counted or i == 0
            if counted:
                entry[0] = entry[0] + size
            alternatives = decl.binding.sources if decl.binding is not None else ()
            if not from_file and any(len(a) > 1 for a in alternatives) and mine:
                notes.append(
                    f"{name} counts as {mine[0].key}; a file may bind another of its tensors or a constant"
                )
    parts = [
        Part("blocks", each, counts.group(group), value if params else None)
        if group is not None
        else Part(kind, each, value=value if params else None)
        for kind, (each, value, group) in kinds.items()
    ]
    order = {"embeddings": 0, "blocks": 1, "other": 2}
    return sorted(parts, key=lambda p: order[p.label]), notes


# ── the cost of a card ──────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class Cost:
    """Parameters and matmul FLOPs of a card: expressions, and numbers where values are known.

    `flops` is one forward pass over the token dimension `tokens` with CONTEXT keys under the KV
    cache (None for a card without steps); `values` the whole-number hyperparameters known; `n`
    the prefill's tokens and the decoding step's context, printed as `symbol`."""

    card: str
    parts: tuple[Part, ...]
    flops: Dim | None
    tokens: str
    n: int
    values: dict[str, int]
    order: tuple[str, ...]  # the card's hyperparameters: the order names are printed in
    recompute: str = ""  # why decoding reruns the sequence ("": the KV cache follows the card)
    file_params: int | None = None  # elements of every tensor of the file
    notes: tuple[str, ...] = ()
    symbol: str = "N"

    def params(self) -> Dim:
        return sum((p.count * p.each for p in self.parts), ZERO)

    def prefill(self) -> Dim | None:
        """FLOPs of one pass over N tokens (of one call, for an entry point without tokens)."""
        n = Dim.name(self.symbol)
        return None if self.flops is None else self.flops.substitute({self.tokens: n, CONTEXT: n})

    def decode(self) -> Dim | None:
        """FLOPs of one new token at context N (N − 1 cached); of the whole sequence again where the
        cache cannot follow the card; None for an entry point without tokens."""
        if self.flops is None or not self.tokens:
            return None
        if self.recompute:
            return self.prefill()
        return self.flops.substitute({self.tokens: Dim.num(1), CONTEXT: Dim.name(self.symbol)})

    def prefill_text(self) -> str:
        p = self.prefill()
        return render_factored(p, self.order, self.symbol) if p is not None else ""

    def decode_text(self) -> str:
        p = self.decode()
        return render_factored(p, self.order, self.symbol) if p is not None else ""

    def params_text(self) -> str:
        """`embeddings + L·(one block) + the rest`."""
        out = []
        for p in self.parts:
            each = render_factored(p.each, self.order)
            count = render_factored(p.count, self.order)
            if each != "0":
                out.append(
                    each if count == "1" else f"{count}·{each}" if is_product(each) else f"{count}·({each})"
                )
        return joined(out or ["0"])

    def value(self, p: Dim | None) -> int | None:
        """The number `p` stands for, None where a value is missing."""
        try:
            return None if p is None else evaluate(p, {**self.values, self.symbol: self.n})
        except DimError:
            return None

    def param_total(self) -> int | None:
        if self.parts and all(p.value is not None for p in self.parts):
            return sum(p.value for p in self.parts)
        return self.value(self.params())

    def rows(self) -> list[tuple[str, str]]:
        """(label, text) rows for the header of the text and terminal views."""
        total, n = self.param_total(), f"{self.symbol} = {self.n:,}"
        rows = [("parameter count", _count(total, self._breakdown()) if total is not None else "")]
        rows.append(("parameter count =", self.params_text()))
        if self.flops is not None and not self.tokens:
            rows.append(("FLOPs of one call", _flop_count(self.value(self.prefill()))))
            rows.append(("FLOPs of one call =", self.prefill_text()))
            rows.append(("FLOPs count", COUNTED))
        elif self.flops is not None:
            rows.append((f"prefill FLOPs, {n}", _flop_count(self.value(self.prefill()))))
            rows.append(("prefill FLOPs =", self.prefill_text()))
            rows.append((f"decode-step FLOPs, {n}", _flop_count(self.value(self.decode()))))
            rows.append(("decode-step FLOPs =", self.decode_text()))
            rows.append(("FLOPs count", COUNTED))
        rows += [("note", note) for note in self.all_notes()]
        return [(k, v) for k, v in rows if v]

    def all_notes(self) -> list[str]:
        out, total = list(self.notes), self.param_total()
        if self.file_params is not None and total is not None and self.file_params != total:
            out.append(
                f"the file holds {self.file_params - total:,} more parameters"
                " in tensors the card does not use"
            )
        if self.flops is None:
            out.append("the card has no steps: no FLOPs")
        elif not self.tokens:
            out.append(f"{self.recompute or 'the entry point takes no token sequence'}: FLOPs of one call")
        elif self.recompute:
            out.append(f"decoding reruns the whole sequence: {self.recompute}")
        else:
            s = self.symbol
            out.append(
                f"prefill: {s} tokens, the logits of each;"
                f" decoding step: one new token at context {s} ({s} − 1 cached)"
            )
        names = self.params().names() | (self.flops.names() if self.flops is not None else set())
        missing = sorted(names - set(self.values) - {self.tokens, CONTEXT})
        if missing:
            out.append(f"no value for {', '.join(missing)}: numbers need --set NAME=VALUE for each")
        return out

    def _breakdown(self) -> str:
        """`embeddings 65,536, blocks 2 × 36,992, other 64`."""
        if any(p.value is None for p in self.parts):
            return ""
        out = []
        for p in self.parts:
            count = self.value(p.count)
            each = (
                f"{count} × {p.value // count:,}"
                if count and count != 1 and p.value % count == 0
                else f"{p.value:,}"
            )
            out.append(f"{p.label} {each}")
        return ", ".join(out)

    def to_json(self) -> dict:
        """The expressions (card syntax) and numbers, for `describe --format json`."""
        parts = [
            {
                "kind": p.label,
                "count": render_factored(p.count, self.order),
                "each": render_factored(p.each, self.order),
                "value": p.value,
            }
            for p in self.parts
        ]
        flops = {
            "N": self.n,
            "symbol": self.symbol,
            "prefill": self.value(self.prefill()),
            "prefill_expression": self.prefill_text(),
            "decode_step": self.value(self.decode()),
            "decode_step_expression": self.decode_text(),
            "kv_cache": not self.recompute,
            "counted": COUNTED,
        }
        return {
            "card": self.card,
            "parameters": {
                "total": self.param_total(),
                "file_total": self.file_params,
                "expression": self.params_text(),
                "parts": parts,
            },
            "flops": flops if self.flops is not None else None,
            "values": dict(self.values),
            "notes": self.all_notes(),
        }


def cost_text(cost: Cost) -> str:
    """The rows of `cost` as aligned lines headed by the card (`describe CARD --flops`)."""
    rows = [("card", cost.card), *cost.rows()]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:>{width}}  {v}" for k, v in rows) + "\n"


def _count(total: int, breakdown: str) -> str:
    from toycards.inspect.header import human_count

    return human_count(total) + (f": {breakdown}" if breakdown else "")


def _flop_count(n: int | None) -> str:
    """`77,332,480 (77.3 MFLOP)`; `?` where a value is missing (the notes say which)."""
    if n is None:
        return "? (see the notes)"
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n:,} ({n / scale:.1f} {unit}FLOP)"
    return f"{n} FLOP"


def card_cost(card: ir.Card, values: dict[str, object] | None = None, ctx: int | None = None) -> Cost:
    """The cost of a card without a file: values from its `= value`s and defaults, `values` over
    them (`--set`, canonical names: a hyperparameter, or a dimension its entry point's types name);
    N = `ctx`, else the trained context length, else DEFAULT_CTX. Raises ToycardsError when the card
    does not check or `values` names neither of its hyperparameters nor of its dimensions."""
    from toycards.checker.dims import type_dim_names
    from toycards.models.binding import bind_values

    main, values = card.main, dict(values or {})
    declared = {n: d for d in main.hyper_decls for n in d.names}
    decls = (*main.input_decls, *main.output_decls, *(d for d, _ in main.all_params()))
    tokens = {
        n.name
        for d in main.input_decls
        if getattr(d.type, "field", "") == "V"
        for n in type_dim_names(d.type)
    }
    dims = {n.name for d in decls for n in type_dim_names(d.type)} - declared.keys() - tokens  # ℓ: N
    for name in values:
        if name not in declared and name not in dims:
            known = ", ".join([*declared, *sorted(dims)]) or "none"
            raise ToycardsError(
                f"--set {name}: the card has no hyperparameter or dimension {name} (it has {known})"
            )
        if name in declared and getattr(declared[name].binding, "kind", "") == "derived":
            raise ToycardsError(f"--set {name}: {name} is derived (≔); set the values it is computed from")
    bound = bind_values(main, {k: v for k, v in values.items() if k in declared})
    names = {n for d, _ in main.all_params() for n in d.names}
    complete = not any(p.severity == "error" for p in bound.problems) and names <= {
        p.name for p in bound.params
    }
    free = {k: v for k, v in values.items() if k in dims}
    return _cost(card, bound if complete and not free else None, {**bound.hyper, **free}, ctx, None)


def described_cost(described, ctx: int | None = None) -> Cost:
    """The cost of a card bound to a GGUF file (describe.py's `DescribedCard`): every number from the
    file; N = `ctx`, else the file's trained context length, else DEFAULT_CTX."""
    bound, header = described.bound, described.header
    return _cost(described, bound, bound.hyper if bound else {}, ctx, header.n_params if header else None)


def _cost(card: ir.Card, bound, hyper: dict, ctx: int | None, file_params: int | None) -> Cost:
    main = card.main
    order = tuple(n for d in main.hyper_decls for n in d.names)
    counts = LayerCounts()
    parts, notes = _parts(main, bound, file_params is not None, counts)
    values = {k: v for k, v in hyper.items() if isinstance(v, int) and not isinstance(v, bool)}
    flops, recompute, tokens = None, "", ""
    if main.body:
        counter = _Flops(card, counts)
        flops, recompute = counter.algorithm(main), counter.plan.note(card)
        notes += list(counter.notes)
        x = main.input_decls[0].type if main.input_decls else None
        if isinstance(x, ir.TensorType) and x.field == "V" and x.dims and isinstance(x.dims[0], ir.DimName):
            tokens = x.dims[0].name  # `x ∈ V^ℓ`: the token sequence
    values |= counts.values(hyper)
    symbol = next(s for s in ("N", "N_ctx", "N_tokens") if s not in order)
    n = ctx or _trained_context(main, hyper) or DEFAULT_CTX
    return Cost(
        card.file, tuple(parts), flops, tokens, n, values, order, recompute, file_params, tuple(notes), symbol
    )


def _trained_context(main: ir.Algorithm, hyper: dict) -> int | None:
    from toycards.models.binding import Bound
    from toycards.runtime.context import context_length

    return context_length(Bound(main, "", hyper, {}, [], [])).trained
