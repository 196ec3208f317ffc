"""Spelling of names: canonical Unicode ↔ ASCII.

Owns: turning a name as written (`gamma_l^1`, `X~`, `e.hat`, `ell_max`, `γ_{l}^{1}`) into its
canonical Unicode form (`γ_l^1`, `X̃`, `ê`, `ℓ_max`) and back (`ascii_name`), and splitting a
name into base, subscript and superscript for name resolution.
Leaves out: which names exist (checker/names.py).

>>> canonical_name("gamma_l^1"), ascii_name("γ_l^1")
('γ_l^1', 'gamma_l^1')
>>> canonical_name("X~"), canonical_name("e.hat"), ascii_name("ℓ_max")
('X̃', 'ê', 'ell_max')
"""

from __future__ import annotations

import re
import unicodedata

GREEK = {
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "zeta": "ζ", "eta": "η",
    "theta": "θ", "iota": "ι", "kappa": "κ", "lambda": "λ", "mu": "μ", "nu": "ν", "xi": "ξ",
    "pi": "π", "rho": "ρ", "tau": "τ", "upsilon": "υ", "phi": "φ", "chi": "χ", "psi": "ψ",
    "omega": "ω", "sigma": "σ", "omicron": "ο", "Gamma": "Γ", "Delta": "Δ", "Theta": "Θ", "Lambda": "Λ", "Xi": "Ξ", "Pi": "Π",
    "Phi": "Φ", "Psi": "Ψ", "Omega": "Ω", "ell": "ℓ",
}  # fmt: skip
UNGREEK = {v: k for k, v in GREEK.items()}
ACCENTS = {"~": "\u0303", ".hat": "\u0302", ".bar": "\u0304"}
UNACCENT = {v: k for k, v in ACCENTS.items()}

_SEGMENT = re.compile(r"[A-Za-z0-9]+")  # a Greek word counts only as a whole run: Phi3 stays Latin
_BRACED = re.compile(r"([_^])\{((?:[^\W_]|[\u0300-\u036f~])+)\}")


def canonical_name(text: object) -> str:
    """The canonical Unicode spelling of a name written in Unicode or ASCII."""
    s = str(text)
    s = _BRACED.sub(lambda m: m.group(1) + m.group(2), s)  # γ_{l} → γ_l when the braces hold one run
    for ascii_accent, mark in ACCENTS.items():
        s = s.replace(ascii_accent, mark)
    s = _SEGMENT.sub(lambda m: GREEK.get(m.group(0), m.group(0)), s)
    return unicodedata.normalize("NFC", s)


def ascii_name(name: str) -> str:
    """The ASCII spelling of a canonical name (inverse of `canonical_name`).

    A Greek letter becomes its word only when it stands alone in its run of letters (`γ_l`,
    `ℓ_max`); inside a run (`Wπ`, `αβ`) the word would read back as Latin letters, so the
    letter stays as it is.
    """
    chars = unicodedata.normalize("NFD", name)
    out = []
    for k, ch in enumerate(chars):
        if ch in UNACCENT:
            out.append(UNACCENT[ch])
        elif ch in UNGREEK and _alone(chars, k):
            out.append(UNGREEK[ch])
        else:
            out.append(ch)
    return "".join(out)


def _alone(chars: str, k: int) -> bool:
    def letter(i: int) -> bool:
        return 0 <= i < len(chars) and chars[i].isalnum()

    left = k - 1
    while left >= 0 and unicodedata.combining(chars[left]):
        left -= 1
    right = k + 1
    while right < len(chars) and unicodedata.combining(chars[right]):
        right += 1
    return not letter(left) and not letter(right)


_PARTS = re.compile(r"^(?P<base>[^_^]+)(?:_(?P<sub>\{[^{}]*\}|[^_^]+))?(?:\^(?P<sup>\{[^{}]*\}|[^_^]+))?$")


def split_name(name: str) -> tuple[str, str, str]:
    """Base, subscript and superscript of a name.

    >>> split_name("γ_l^1"), split_name("W_qkv^l"), split_name("d_e")
    (('γ', 'l', '1'), ('W', 'qkv', 'l'), ('d', 'e', ''))
    """
    m = _PARTS.match(name)
    if not m:
        return name, "", ""
    return m.group("base"), (m.group("sub") or "").strip("{}"), (m.group("sup") or "").strip("{}")


def join_name(base: str, sub: str = "", sup: str = "") -> str:
    def part(mark: str, s: str) -> str:
        if not s:
            return ""
        return f"{mark}{s}" if re.fullmatch(r"[\w\u0300-\u036f]+", s) else f"{mark}{{{s}}}"

    return base + part("_", sub) + part("^", sup)
