"""Calls: resolving the callee, checking arity, unifying shapes, the implicit per-column map.

Owns: `f(args | params)` against the callee's Signature: the number of inputs (before `|`) and
of parameters and hyperparameters (after `|`, in header order); unification of each argument
shape with the callee's declared type, binding the callee's dimension names to the caller's
dimensions (`d_e ↦ d_mlp`, solving `3·d_e` or `d_e/H` when one name is unknown); the implicit
map (an argument with more trailing axes than declared, e.g. `softmax(Z)` with softmax on a
vector, is mapped per column and the extra axes are carried to the result); mask parameters
passed by definition (`Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧`); builtins (builtins.py); chains of calls
between a card's algorithms, at most `MAX_CALL_DEPTH` long (`call_chain_errors`).
Leaves out: the callee's own body (it is checked where it is defined).
"""

from __future__ import annotations

from toycards.checker.builtins import BUILTINS, shape_of
from toycards.checker.context import Signature
from toycards.checker.dims import Dim, DimError, solve_for
from toycards.checker.names import Entry, Symbol, did_you_mean
from toycards.checker.shapes import NATURAL, Shape, ShapeError
from toycards.errors import Diagnostic, Span
from toycards.lang import ir
from toycards.lang.options import call_params, defaults, option_argument


class CallChecker:
    def __init__(self, ex) -> None:  # ex: exprs.ExprChecker
        self.ex, self.ctx = ex, ex.ctx

    def call(self, c: ir.Call) -> Shape | None:
        target = self.ctx.resolve(c.func)
        if target is None:
            if c.func in BUILTINS:
                return self.builtin(c)
            self.unknown(c)
            return None
        algo, sig = target
        self.ctx.info.callees[id(c)] = algo
        self.ctx.info.symbols[id(c)] = Symbol("func", algo.name, None, algo)
        if algo is self.ctx.algo:
            self.ctx.error(self.func_span(c), f"{c.func} calls itself", "cards have no recursion")
            return None
        if sig.all_params:
            self.ctx.error(self.func_span(c), f"{c.func} takes every parameter (θ) and cannot be called")
            return None
        return self.algorithm(c, sig)

    def func_span(self, c: ir.Call) -> Span:
        s, src = c.span, self.ctx.card.source
        n = len(c.func)
        if src and s.line > 0:
            end = src.find("(", s.start, s.end)
            n = end - s.start if end > 0 else n
        return Span(s.file, s.line, s.col, s.line, s.col + n, s.start, s.start + n)

    def unknown(self, c: ir.Call) -> None:
        for a in (*c.args, *c.params):
            if not isinstance(a, ir.MaskDef):
                self.ex.infer(a)
        names = list(BUILTINS) + [a.name for a in self.ctx.card.algorithms] + self.ctx.library_names()
        match = did_you_mean(c.func, names)
        self.ctx.error(
            self.func_span(c), f"unknown function {c.func}", f"did you mean {match}?" if match else ""
        )

    # ── builtins ──
    def builtin(self, c: ir.Call) -> Shape | None:
        b = BUILTINS[c.func]
        self.ctx.info.callees[id(c)] = c.func
        self.ctx.info.symbols[id(c)] = Symbol("builtin", c.func, None, b)
        shapes = [self.ex.infer(a) for a in c.args]
        if c.params:
            self.ctx.error(c.params[0].span, f"{c.func} takes no parameters after |")
            return None
        if len(c.args) not in b.arity:
            want = " or ".join(str(n) for n in b.arity)
            self.ctx.error(self.func_span(c), f"{c.func} takes {want} argument(s), got {len(c.args)}", b.doc)
            return None
        if any(s is None for s in shapes):
            return None
        dims = [self.ex.dim(a) if not s.dims else None for a, s in zip(c.args, shapes)]
        try:
            return shape_of(b, shapes, dims)
        except ShapeError as exc:
            self.ctx.error(c.span, f"{c.func}: {exc.message}", exc.hint or b.doc, tuple(shapes))
            return None

    # ── algorithms ──
    def algorithm(self, c: ir.Call, sig: Signature) -> Shape | None:
        args = [self.ex.infer(a) for a in c.args]
        passed = call_params(sig.algo, c)  # what it writes, then the defaults it leaves out
        params = [
            self.mask(p, sig.params[i] if i < len(sig.params) else None)
            if isinstance(p, ir.MaskDef)
            else self.option(p, sig, i) or self.ex.infer(p)
            for i, p in enumerate(passed)
        ]
        if not self.arity(c, sig, passed):
            return None
        self.fixed_hypers(c, sig, passed)
        u = _Unifier(self, c, sig)
        for p, (name, _, _) in zip(passed, sig.params):
            if name in sig.naturals and not isinstance(p, ir.MaskDef):
                d = self.ex.dim(p)
                if d is not None:
                    u.bindings[name] = d
        for a, (name, declared), actual in zip(c.args, sig.inputs, args):
            u.add(a, name, declared, actual, mapped=True)
        for i, (p, (name, _, declared), actual) in enumerate(zip(passed, sig.params, params)):
            if i >= len(c.params) and declared is not None and declared.rank:
                continue  # a default left out fills a vector (`σ ∈ ℝ^{H} default −∞`): no shape to unify
            u.add(p, name, declared, actual, mapped=False)
        u.solve()
        self.ctx.info.dim_bindings[id(c)] = u.final_bindings()
        if u.failed or sig.output is None or any(s is None for s in (*args, *params)):
            return None
        return u.result(sig.output)

    def option(self, p: ir.Expr, sig: Signature, i: int) -> Shape | None:
        """The declared shape when `p` is an option of the callee's enumeration parameter i that
        the caller does not define itself (`rope(x, t | pairs, θ, ρ)`)."""
        if i >= len(sig.params) or not isinstance(p, ir.Name) or self.ctx.scope.lookup(p.id) is not None:
            return None
        if p.id in self.ctx.scope.options or option_argument(sig.algo, sig.params[i][0], p) is None:
            return None
        self.ctx.info.symbols[id(p)] = Symbol("option", p.id, None, sig.algo)
        return sig.params[i][2]

    def fixed_hypers(self, c: ir.Call, sig: Signature, passed: tuple[ir.Expr, ...]) -> None:
        """A hyperparameter that the callee branches or loops on (`if μ > 0 then`, `for l = 1, …,
        n`), or that is a dimension, is one number for the whole call: it may not be given a
        run-time value, which may differ from column to column or head to head."""
        fixed = _branching_hypers(sig.algo, self.ctx.resolve, set(), self.ctx.branching) | sig.naturals
        for p, (name, _, _) in zip(passed, sig.params):
            if name not in fixed or isinstance(p, ir.MaskDef):
                continue
            for node in ir.walk(p):
                sym = self.ctx.info.symbols.get(id(node)) if isinstance(node, ir.Name) else None
                if sym is not None and sym.kind not in _FIXED_KINDS:
                    dim = name in sig.naturals
                    self.ctx.error(
                        p.span,
                        f"{c.func}: its hyperparameter {name} is "
                        f"{'a dimension' if dim else 'tested by an `if` or a loop bound'}, and cannot take "
                        f"the run-time value {self.ctx.text(p)} ({node.id} is {_A.get(sym.kind, sym.kind)})",
                        "pass a hyperparameter, a loop index or a number"
                        + (
                            ""
                            if dim
                            else f"; to vary {name} by value, make it an input of {c.func} "
                            "and select with ⟦…⟧ instead of branching"
                        ),
                    )
                    break

    def arity(self, c: ir.Call, sig: Signature, passed: tuple[ir.Expr, ...]) -> bool:
        a = sig.algo
        header = (
            f"{a.output} ← {a.name}({', '.join(a.inputs)}{' | ' if a.params else ''}{', '.join(a.params)})"
        )
        optional = defaults(a)
        ok = True
        for what, got, want in (("input", c.args, sig.inputs), ("parameter", passed, sig.params)):
            if len(got) != len(want):
                names = ", ".join(n for n, *_ in want) or "none"
                least = len(want) - sum(n in optional for n, *_ in want) if what == "parameter" else len(want)
                count = f"{least} to {len(want)}" if least < len(want) else str(len(want))
                self.ctx.error(
                    self.func_span(c),
                    f"{c.func} takes {count} {what}{'s' * (len(want) != 1)} ({names}), "
                    f"got {len(c.args) if what == 'input' else len(c.params)}",
                    f"the header is {header}"
                    + (
                        f"; {', '.join(n for n in a.params if n in optional)} may be left out"
                        if optional and what == "parameter"
                        else ""
                    ),
                )
                ok = False
        return ok

    def mask(self, m: ir.MaskDef, param: tuple[str, str, Shape | None] | None) -> Shape | None:
        name, _, declared = param if param is not None else (m.name, "", None)
        if m.name != name:
            self.ctx.error(m.span, f"a mask named {m.name} is passed where the callee expects {name}")
        if declared is not None and (declared.field != "B" or declared.rank != len(m.indices)):
            self.ctx.error(
                m.span,
                f"{name} ∈ {declared} cannot be defined entrywise by {m.name}[{', '.join(m.indices)}]",
                "a mask parameter is declared like Mask ∈ {0,1}^{ℓ_z×ℓ_x}, with one index per axis",
                (declared,),
            )
        self.ctx.scope.push({i: Entry("mapvar", i, NATURAL, m) for i in m.indices})
        try:
            self.ex.scalar(m.body, "a mask entry")
        finally:
            self.ctx.scope.pop()
        shape = Shape("B", tuple(None for _ in m.indices))
        self.ctx.info.shapes[id(m)] = shape
        return shape


MAX_CALL_DEPTH = 64  # algorithms of a card in a chain, each calling the next
_FIXED_KINDS = {"hyper", "loopvar", "dim", "option"}  # names whose value is one number per call
_A = {"input": "an input", "param": "a parameter", "local": "a local value", "mapvar": "a map variable"}


def _branching_hypers(algo: ir.Algorithm, resolve, seen: set[str], memo: dict[int, set[str]]) -> set[str]:
    """The hyperparameters of `algo` that an `if` outside a parallel map or a sequential loop's
    bounds read, directly or by passing them to such a hyperparameter of a callee.

    Worked out once per algorithm and card (`memo`, by the algorithm's id), so that the calls of a
    card are followed once each, however often they are called; a call back into an algorithm
    still being worked out (`seen`: recursion, which codegen refuses) adds nothing."""
    done = memo.get(id(algo))
    if done is not None:
        return done
    hypers = {n for d in algo.hyper_decls for n in d.names}
    names = lambda *es: {n.id for e in es if e is not None for n in ir.walk(e) if isinstance(n, ir.Name)}  # noqa: E731
    out: set[str] = set()
    seen = seen | {algo.name}

    def visit(body: tuple[ir.Stmt, ...], in_map: bool) -> None:
        for st in body:
            if isinstance(st, ir.If):
                out.update(set() if in_map else names(st.cond) & hypers)
                visit(st.then, in_map)
                visit(st.orelse, in_map)
            elif isinstance(st, ir.ForSeq):
                out.update(names(st.start, st.second, st.stop) & hypers)
                visit(st.body, in_map)
            elif isinstance(st, ir.ForAll):
                visit(st.body, True)

    visit(algo.body, False)
    for call in (n for n in ir.walk(algo.body) if isinstance(n, ir.Call)):
        target = resolve(call.func) if call.func not in seen else None
        if target is not None:
            inner = _branching_hypers(target[0], resolve, seen, memo) | target[1].naturals
            for p, (pname, _, _) in zip(call_params(target[0], call), target[1].params):
                if pname in inner and not isinstance(p, ir.MaskDef):
                    out.update(names(p) & hypers)
    memo[id(algo)] = out
    return out


def call_chain_errors(card: ir.Card) -> list[Diagnostic]:
    """An error at each algorithm that begins a chain of more than MAX_CALL_DEPTH of the card's
    algorithms, each calling the next: everything after the checker follows such a chain one
    level of Python's stack at a time. Worked out without recursing; a call back into an
    algorithm already on the chain (recursion, refused elsewhere) is not followed.
    """
    if len(card.algorithms) <= MAX_CALL_DEPTH:  # no chain can be longer
        return []
    algos = {a.name: a for a in card.algorithms}
    callees = {
        name: sorted({n.func for n in ir.walk(a.body) if isinstance(n, ir.Call) and n.func in algos})
        for name, a in algos.items()
    }
    depth: dict[str, int] = {}
    for root in algos:
        if root in depth:
            continue
        stack, on_chain = [(root, iter(callees[root]))], {root}
        while stack:
            name, todo = stack[-1]
            callee = next((c for c in todo if c not in depth and c not in on_chain), None)
            if callee is not None:
                stack.append((callee, iter(callees[callee])))
                on_chain.add(callee)
                continue
            stack.pop()
            on_chain.discard(name)
            depth[name] = 1 + max((depth.get(c, 0) for c in callees[name]), default=0)
    return [
        Diagnostic(
            algos[name].span,
            f"{name} begins a chain of {d} algorithms, each calling the next (the limit is {MAX_CALL_DEPTH})",
            "write some of the steps of the algorithms it calls into it",
        )
        for name, d in depth.items()
        if d == MAX_CALL_DEPTH + 1
    ]


class _Unifier:
    """Binds a callee's dimension names to a caller's dimensions, one call at a time."""

    def __init__(self, calls: CallChecker, c: ir.Call, sig: Signature) -> None:
        self.calls, self.ctx, self.c, self.sig = calls, calls.ctx, c, sig
        self.callee_eq = sig.eq
        self.bindings: dict[str, Dim] = {}
        self.pending: list[tuple[Dim, Dim, int]] = []  # (callee pattern, caller dim, argument number)
        self.args: list[tuple[ir.Expr, str, Shape, Shape]] = []
        self.extra: tuple[Dim | None, ...] | None = None
        self.failed = False
        self.reported: set[int] = set()

    def add(
        self, node: ir.Expr, name: str, declared: Shape | None, actual: Shape | None, mapped: bool
    ) -> None:
        if declared is None or actual is None:
            return
        k = len(self.args)
        self.args.append((node, name, declared, actual))
        if (
            not _fields_fit(declared, actual)
            or actual.rank < declared.rank
            or (not mapped and actual.rank != declared.rank)
        ):
            return self.mismatch(k)
        extra = actual.dims[declared.rank :]
        if extra:
            if self.extra is not None and (
                len(self.extra) != len(extra)
                or not all(self.ctx.eq.same(x, y) for x, y in zip(self.extra, extra))
            ):
                return self.mismatch(k, "the arguments are mapped over different trailing axes")
            self.extra = extra
        for pattern, dim in zip(declared.dims, actual.dims):
            if pattern is not None and dim is not None:
                self.pending.append((self.callee_eq.expand(pattern), dim, k))

    def solve(self) -> None:
        progress = True
        while progress and self.pending:
            progress, left = False, []
            for pattern, dim, k in self.pending:
                if pattern.names() <= self.bindings.keys():
                    progress = True
                    if not self.ctx.eq.same(self.expand(pattern), dim):
                        self.mismatch(k)
                    continue
                try:
                    sol = solve_for(pattern, dim, self.bindings)
                except DimError:
                    sol = None
                if sol is None:
                    left.append((pattern, dim, k))
                else:
                    self.bindings[sol[0]] = sol[1]
                    progress = True
            self.pending = left

    def expand(self, pattern: Dim) -> Dim | None:
        try:
            return pattern.substitute(self.bindings)
        except DimError:
            return None

    def mismatch(self, k: int, why: str = "") -> None:
        if k in self.reported:
            return
        self.reported.add(k)
        self.failed = True
        node, name, declared, actual = self.args[k]
        expected = declared.with_dims(tuple(self.show(d) for d in declared.dims))
        self.ctx.error(
            node.span,
            f"{self.c.func}: {name} gets {actual}, expected {expected}" + (f" ({why})" if why else ""),
            f"{self.sig.algo.name} declares {name} ∈ {declared}",
            (actual, expected),
        )

    def show(self, d: Dim | None) -> Dim | None:
        if d is None:
            return None
        x = self.callee_eq.expand(d)
        return self.expand(x) if x.names() <= self.bindings.keys() else d

    def final_bindings(self) -> dict[str, Dim]:
        out = dict(self.bindings)
        for n, d in self.sig.derived.items():
            if n not in out and d.names() <= self.bindings.keys():
                v = self.expand(d)
                if v is not None:
                    out[n] = v
        return out

    def result(self, out: Shape) -> Shape:
        dims = []
        for d in out.dims:
            x = self.callee_eq.expand(d) if d is not None else None
            dims.append(self.expand(x) if x is not None and x.names() <= self.bindings.keys() else None)
        return Shape(out.field, (*dims, *(self.extra or ())), out.bound, out.options)


def _fields_fit(declared: Shape, actual: Shape) -> bool:
    if declared.field in ("E", "S"):
        return actual.field in ("E", "S")
    if declared.field == "V" and declared.dims:
        return actual.field == "V"
    return actual.numeric or actual.field == "V"
