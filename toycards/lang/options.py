"""What a bare name passed at a call means when the caller does not define it.

Owns: `option_argument` — an enumeration option passed by name to the callee's enumeration
hyperparameter (`GQAttention(Q, K, V | H, H_kv, pairs, …)` gives `layout = pairs`). The checker,
the interpreter and codegen all ask this one function, so they cannot disagree.
Leaves out: names the caller defines (they come first; each stage resolves those itself).
"""

from __future__ import annotations

from toycards.lang.ir import Algorithm, EnumType, Name


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
