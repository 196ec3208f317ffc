"""The checker: names, signatures of calls, symbolic shapes and bindings of a card.

Owns: the public entry points `check_card(card, library=True) -> CheckResult` and
`check(card) -> list[Diagnostic]`, the order of the passes (declarations and signatures of every
algorithm, then derived hyperparameters, then the steps) and resolving calls: an algorithm of the
same card first, then the library prelude (`toycards/library/cards/prelude.card`), then a builtin.
Leaves out: checking against a GGUF file (describe), printing diagnostics (errors.py, cli).

Modules: dims.py (symbolic dimensions), shapes.py (shape rules), names.py (scopes, families,
did-you-mean), declarations.py (names and signatures), bindings.py (`from …` rules, concrete
values), exprs.py, calls.py (unification, implicit map), builtins.py, steps.py, context.py
(results), fragments.py (family indices and prefix templates written inside names/strings),
tokenflow.py and masks.py (the token axes and the KV cache plan that codegen reads).

>>> from toycards.lang.parse import parse
>>> card = parse('''Algorithm: y ← f(x | W)
... Input: x ∈ ℝ^{d×ℓ}
... Output: y ∈ ℝ^{n×ℓ}
... Parameters: W ∈ ℝ^{n×d}
... 1 return y = W · x^⊺
... ''')
>>> [d.message for d in check(card)]
['ℝ^{n×d} · ℝ^{ℓ×d}: inner dimensions d and ℓ differ']
"""

from __future__ import annotations

import functools

from toycards.checker.calls import call_chain_errors
from toycards.checker.context import AlgoInfo, CheckResult, Ctx, Signature
from toycards.checker.declarations import declare, name_span
from toycards.checker.dims import Dim, DimError, evaluate
from toycards.checker.exprs import ExprChecker
from toycards.checker.layer_conditions import check_layer_conditions
from toycards.checker.names import Scope, Symbol
from toycards.checker.shapes import Shape, compatible
from toycards.checker.steps import StepChecker
from toycards.errors import Diagnostic, ToycardsError
from toycards.lang import ir
from toycards.lang.scale import collector_paused

__all__ = [
    "AlgoInfo", "CheckResult", "Dim", "DimError", "Shape", "Signature", "Symbol", "check", "check_card",
    "check_prelude", "evaluate",
]  # fmt: skip


def check_prelude() -> CheckResult | None:
    """The library prelude checked once per process (its AlgoInfos serve codegen of callees);
    None when the prelude cannot be read."""
    lib = _prelude()
    return None if lib is None else _prelude_result(id(lib))


@functools.cache
def _prelude_result(_key: int) -> CheckResult:
    return check_card(_prelude())


def check(card: ir.Card) -> list[Diagnostic]:
    """All diagnostics for a card (empty when it checks clean)."""
    return check_card(card).diagnostics


@collector_paused()  # the IR holds no cycles for the collector to find (lang/scale.py)
def check_card(card: ir.Card, library: bool | ir.Card = True) -> CheckResult:
    """Check every algorithm of `card`; calls may use the prelude when `library` is True
    (or the given card, for tests)."""
    lib = _prelude() if library is True else (library or None)
    lib_sigs = _library_signatures(lib) if lib is not None else None
    diags: list[Diagnostic] = []
    first: dict[str, ir.Algorithm] = {}
    ctxs: list[Ctx] = []
    for a in card.algorithms:
        if a.name in first:
            diags.append(
                Diagnostic(
                    _algo_name_span(card, a),
                    f"algorithm {a.name} is defined twice",
                    f"first defined on line {first[a.name].span.line}",
                )
            )
            continue
        first[a.name] = a
        ctxs.append(_new_ctx(card, a))
    sigs = {c.algo.name: (c.algo, _declare(c)) for c in ctxs}

    def resolve(name: str) -> tuple[ir.Algorithm, Signature] | None:
        if name in sigs:
            return sigs[name]
        return lib_sigs(name) if lib_sigs is not None and lib is not card else None

    names = (lambda: [a.name for a in lib.algorithms]) if lib is not None else list
    infos: dict[str, AlgoInfo] = {}
    branching: dict[int, set[str]] = {}
    diags += call_chain_errors(card)
    for c in ctxs:
        c.resolve, c.library_names, c.branching = resolve, names, branching
        c.info.signature = sigs[c.algo.name][1]
        try:
            _check_body(c)
        except RecursionError:
            c.error(
                c.algo.span,
                f"{c.algo.name} is nested too deeply to check",
                "split long expressions into steps",
            )
        diags += c.diags
        infos[c.algo.name] = c.info
    diags.sort(key=lambda d: (d.span.line, d.span.col))
    return CheckResult(diags, infos)


def _declare(c: Ctx) -> Signature:
    try:
        return declare(c)
    except RecursionError:
        c.error(c.algo.span, f"the declarations of {c.algo.name} are nested too deeply to check")
        return Signature(c.algo)


def _new_ctx(card: ir.Card, a: ir.Algorithm) -> Ctx:
    return Ctx(card, a, Scope(), AlgoInfo(a, Signature(a)), resolve=lambda name: None)


def _check_body(c: Ctx) -> None:
    ex = ExprChecker(c)
    for decl in c.algo.hyper_decls:
        _hyper_exprs(c, ex, decl)
    steps = StepChecker(c, ex)
    steps.body(c.algo.body)
    _file_reads_in_steps(c)
    check_layer_conditions(c, ex)
    if steps.returns == 0 and c.algo.body:
        c.error(
            name_span(c, c.algo.span, c.algo.name),
            f"{c.algo.name} never returns its output {c.algo.output}",
            f"end with `return {c.algo.output} = …`",
        )
    scope = c.scope
    c.info.locals = {n: e.shape for n, e in {**scope.gone, **scope.locals}.items()}
    c.info.families = {k: (e.shape, e.bound) for k, e in scope.families.items()}
    c.info.derived = dict(c.info.signature.derived)


def _file_reads_in_steps(c: Ctx) -> None:
    """`present(…)` reads which tensors a file holds, once, when the file binds: it is a derived
    hyperparameter's value, never a step's."""
    for n in ir.walk(c.algo.body):
        if isinstance(n, ir.Call) and n.func == "present":
            c.error(
                n.span,
                "present(…) reads the file's tensor list when the card binds, not while it runs",
                'derive a hyperparameter from it: `m ∈ {0,1}^{L} ≔ present("blk.{l-1}.ffn_gate_inp.weight", L)`',
            )


def _hyper_exprs(c: Ctx, ex: ExprChecker, decl: ir.Decl) -> None:
    """Derived and default expressions of a hyperparameter: shapes, symbols, fit to the type."""
    declared = c.scope.declared.get(decl.names[0])
    b = decl.binding
    exprs = [e for e in (b and b.expr, b and b.default) if e is not None]
    for e in exprs:
        try:
            got = ex.infer(e)
        except RecursionError:
            c.error(e.span, "this expression is nested too deeply to check", "split it into several steps")
            continue
        if declared is not None and declared.shape is not None and got is not None:
            if e is b.default and declared.shape.rank == 1 and got.rank == 0 and got.numeric:
                continue  # a number fills every entry: `σ ∈ ℝ^{H} default −∞`, `n_kv ∈ ℕ^{L} … default 0`
            if not compatible(declared.shape, got, c.eq):
                c.error(
                    e.span,
                    f"{decl.names[0]} ∈ {declared.shape} cannot take {got}",
                    shapes=(declared.shape, got),
                )


def _algo_name_span(card: ir.Card, a: ir.Algorithm):
    ctx = _new_ctx(card, a)
    return name_span(ctx, a.span, a.name)


@functools.cache
def _prelude() -> ir.Card | None:
    from toycards.library import library_card

    try:
        return library_card("prelude")
    except (ToycardsError, FileNotFoundError, OSError):
        return None


_LIB_CACHE: dict[int, tuple[ir.Card, dict]] = {}


def _library_signatures(lib: ir.Card):
    """A lookup name → (algorithm, Signature) over a library card, computed once per card."""
    held = _LIB_CACHE.get(id(lib))
    if held is None or held[0] is not lib:
        held = (lib, {})
        _LIB_CACHE[id(lib)] = held
    cache = held[1]

    def lookup(name: str) -> tuple[ir.Algorithm, Signature] | None:
        if name not in cache:
            a = lib.algorithm(name)
            cache[name] = None if a is None else (a, _declare(_new_ctx(lib, a)))
        return cache[name]

    return lookup
