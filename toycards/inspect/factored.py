"""A dimension polynomial (`checker.dims.Dim`) printed factored, for people to read.

Owns: `render_factored`, which keeps the powers of one name (the tokens N) apart and takes out of
each part the name that most of its terms hold, again and again, so that a FLOP count reads
`2·d_e·(L·(2·d_h·(H + H_kv) + 3·d_ff) + N_V)·N + 4·L·H·d_h·N²` rather than as ten monomials;
`is_product` and `joined` for callers that put such texts together.
Leaves out: the polynomials themselves (checker/dims.py) and what they count (cost.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from toycards.checker.dims import Dim

_SUPERSCRIPTS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def render_factored(p: Dim, order: Sequence[str] = (), last: str = "") -> str:
    """A polynomial factored for reading: the powers of `last` (the tokens) apart, and in each part
    the name most terms hold taken out, again and again; names in `order`, then alphabetically.

    >>> L, d, n = Dim.name("L"), Dim.name("d_e"), Dim.name("N")
    >>> render_factored(6 * L * d * d * n + 2 * d * n + 4 * L * d * n * n, ["L", "d_e"], "N")
    '2·d_e·(3·L·d_e + 1)·N + 4·L·d_e·N²'
    """
    rank = {name: i for i, name in enumerate(order)}
    key = lambda name: (name == last, rank.get(name, len(rank)), name)  # noqa: E731
    powers: dict[int, dict] = {}
    for m, c in p.terms.items():
        powers.setdefault(dict(m).get(last, 0), {})[tuple((n, e) for n, e in m if n != last)] = c
    out = []
    for e in sorted(powers):
        text = _factored(powers[e], key)
        if e:
            tail = last + (str(e).translate(_SUPERSCRIPTS) if e != 1 else "")
            text = tail if text == "1" else f"{text}·{tail}" if is_product(text) else f"({text})·{tail}"
        out.append(text)
    return joined(out) if out else "0"


def is_product(text: str) -> bool:
    """No sum outside parentheses."""
    depth = 0
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and ch == " ":
            return False
    return True


def joined(parts: list[str]) -> str:
    out = parts[0]
    for part in parts[1:]:
        out += f" − {part[1:]}" if part.startswith("−") else f" + {part}"
    return out


def _factored(terms: dict, key) -> str:
    """`terms` as a product: the monomial they all share (a whole coefficient), then the rest's sum."""
    if len(terms) == 1:
        ((m, c),) = terms.items()
        return _monomial(m, c, key)
    common = dict(next(iter(terms)))
    for m in terms:
        exps = dict(m)
        common = {n: min(e, exps[n]) for n, e in common.items() if n in exps}
    coefs = list(terms.values())
    g = math.gcd(*(c.numerator for c in coefs)) if all(c.denominator == 1 for c in coefs) else 1
    if g == 1 and not common:
        return _sum(terms, key)
    rest = {
        tuple((n, e - common.get(n, 0)) for n, e in m if e != common.get(n, 0)): c / g
        for m, c in terms.items()
    }
    return f"{_monomial(tuple(common.items()), Fraction(g), key)}·({_sum(rest, key)})"


def _sum(terms: dict, key) -> str:
    """A sum, its terms grouped by the name most of them hold (each group factored again)."""
    counts: dict[str, int] = {}
    for m in terms:
        for n, e in m:
            counts[n] = counts.get(n, 0) + (e > 0)
    shared = [n for n, k in counts.items() if 1 < k < len(terms)]
    if not shared:
        ordered = sorted(terms.items(), key=lambda mc: sorted(key(n) for n, _ in mc[0]) or [(True,)])
        return joined([_monomial(m, c, key) for m, c in ordered])
    best = min(shared, key=lambda n: (-counts[n], key(n)))
    group = {m: c for m, c in terms.items() if dict(m).get(best, 0) > 0}
    return joined([_factored(group, key), _sum({m: c for m, c in terms.items() if m not in group}, key)])


def _monomial(m, c: Fraction, key) -> str:
    """`2·L·d_e`, `d_h/2`, `N_V`, `−3`."""
    power = lambda e: str(e).translate(_SUPERSCRIPTS) if e > 1 else ""  # noqa: E731
    ups = [n + power(e) for n, e in sorted(m, key=lambda ne: key(ne[0])) if e > 0]
    downs = [n + power(-e) for n, e in m if e < 0]
    text = "·".join(([str(abs(c.numerator))] if abs(c.numerator) != 1 or not ups else []) + ups)
    below = ([str(c.denominator)] if c.denominator != 1 else []) + downs
    if below:
        text += "/" + (below[0] if len(below) == 1 else "(" + "·".join(below) + ")")
    return ("−" if c < 0 else "") + text
