"""What a call passes after its bar: bare option names, and the optional hyperparameters it leaves out.

Owns: `option_argument` — an enumeration option passed by name to the callee's enumeration
hyperparameter (`GQAttention(Q, K, V | H, H_kv, pairs, …)` gives `layout = pairs`); `call_params`
— a call's parameters followed by the defaults of the optional hyperparameters (`c ∈ ℝ default 0`)
it leaves out at the end. The checker, the interpreter and codegen all ask these functions, so
they cannot disagree.
Leaves out: names the caller defines (they come first; each stage resolves those itself).
"""

from __future__ import annotations

from toycards.lang.ir import Algorithm, Call, EnumType, Expr, Name


def option_argument(callee: Algorithm, param: str, arg: object) -> str | None:
    """The option a bare name passes to the callee's enumeration hyperparameter `param`, else None.

    `rope(x, t | pairs, θ, ρ)` with `layout ∈ {pairs, halves, none}`: the caller need not declare
    the enumeration itself. A name the caller does define comes first (the caller decides that).

    >>> from toycards.lang.ir import Decl
    >>> mode = Decl(("mode",), EnumType(("on", "off")))
    >>> a = Algorithm("f", "", "y", ("x",), ("mode",), "", (), (), (mode,), (), ())
    >>> option_argument(a, "mode", Name("on")), option_argument(a, "mode", Name("up"))
    ('on', None)
    """
    if not isinstance(arg, Name):
        return None
    for d in callee.hyper_decls:
        if param in d.names and isinstance(d.type, EnumType) and arg.id in d.type.options:
            return arg.id
    return None


def defaults(callee: Algorithm) -> dict[str, Expr]:
    """The callee's optional hyperparameters (`c ∈ ℝ default 0`), each with its default."""
    return {
        n: d.binding.default
        for d in callee.hyper_decls
        if d.binding is not None and d.binding.kind == "default" and d.binding.default is not None
        for n in d.names
    }


def call_params(callee: Algorithm, call: Call) -> tuple[Expr, ...]:
    """What `call` passes after its bar, in the callee's header order: what it writes, then the
    default of each optional hyperparameter it leaves out at the end. A call that leaves out one
    without a default gets only what it writes (the checker reports the count).

    >>> from toycards.lang.ir import Binding, Decl, Num, TensorType
    >>> cap = Decl(("c",), TensorType("R"), Binding("default", default=Num("0")))
    >>> a = Algorithm("f", "", "y", ("x",), ("α", "c"), "", (), (), (cap,), (), ())
    >>> call_params(a, Call("f", (Name("x"),), (Name("β"),)))
    (Name(id='β'), Num(text='0'))
    >>> call_params(a, Call("f", (Name("x"),), (Name("β"), Num("50"))))
    (Name(id='β'), Num(text='50'))
    """
    given = call.params
    missing = callee.params[len(given) :]
    fallback = defaults(callee)
    if not missing or any(n not in fallback for n in missing):
        return given
    return given + tuple(fallback[n] for n in missing)
