"""Safe, unique Python identifiers for names that come from cards or GGUF metadata.

Owns: `Namespace`, which hands out identifiers that are valid ASCII Python names, not
keywords, not Python's builtins nor names the generated code relies on, never starting with `_`,
and unique within one scope; the same card name always gets the same identifier in a scope.
Card names reach generated code only through it (verify.py refuses any other builtin or
`_` name).
Leaves out: what the identifiers mean (emitter.py).

>>> ns = Namespace(reserved={"ops"})
>>> ns.name("γ_l^1"), ns.name("X̃"), ns.name("ℓ"), ns.name("lambda"), ns.name("__import__"), ns.name("ops")
('gamma_l_1', 'X_tilde', 'ell', 'lambda_', 'import_', 'ops_')
"""

from __future__ import annotations

import builtins
import keyword
import re
import unicodedata

from toycards.lang.names import ACCENTS, UNGREEK

_ACCENT_WORDS = {mark: "_" + ascii_form.strip(".~") or "_tilde" for ascii_form, mark in ACCENTS.items()}
_ACCENT_WORDS["\u0303"] = "_tilde"
_BUILTINS = set(dir(builtins)) | {
    "math",
    "np",
    "torch",
    "ops",
    "runtime",
    "self",
    "ctx",
    "cache",
    "last",
    "range",
    "len",
    "int",
    "float",
    "str",
    "TorchModel",
    "NumpyModel",
    "print",
    "list",
    "dict",
    "super",
}


def _ascii_identifier(name: str) -> str:
    out = []
    for ch in unicodedata.normalize("NFD", name):
        if ch in _ACCENT_WORDS:
            out.append(_ACCENT_WORDS[ch])
        elif ch in UNGREEK:
            out.append(UNGREEK[ch] if not out or out[-1].endswith("_") else "_" + UNGREEK[ch])
        elif ch.isascii() and (ch.isalnum() or ch == "_"):
            out.append(ch)
        else:
            out.append("_")
    ident = re.sub(r"_+", "_", "".join(out)).strip("_") or "v"
    if ident[0].isdigit():
        ident = "v" + ident
    return ident


class Namespace:
    """Identifiers for one scope (a module, a function)."""

    def __init__(self, reserved: set[str] | None = None, parent: Namespace | None = None) -> None:
        self.parent = parent
        self.reserved = set(reserved or ()) | _BUILTINS
        self.given: dict[str, str] = {}
        self.used: set[str] = set()

    def _taken(self, ident: str) -> bool:
        scope: Namespace | None = self
        while scope is not None:
            if ident in scope.used or ident in scope.reserved:
                return True
            scope = scope.parent
        return keyword.iskeyword(ident) or keyword.issoftkeyword(ident)

    def name(self, card_name: str) -> str:
        """The identifier for `card_name` in this scope (stable for repeated calls)."""
        if card_name in self.given:
            return self.given[card_name]
        base = _ascii_identifier(card_name)
        ident, n = base, 1
        while self._taken(ident):
            ident = f"{base}_" if n == 1 else f"{base}_{n}"
            n += 1
        self.given[card_name] = ident
        self.used.add(ident)
        return ident

    def fresh(self, hint: str) -> str:
        """A new identifier not tied to a card name."""
        ident, n = _ascii_identifier(hint), 1
        base = ident
        while self._taken(ident):
            n += 1
            ident = f"{base}_{n}"
        self.used.add(ident)
        return ident

    def child(self) -> Namespace:
        return Namespace(parent=self)
