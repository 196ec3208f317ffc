"""Named axes: what each axis of a generated array holds, and one layout spelled as another.

Owns: the names of axes (`ROW`, `COL`, `ONE`, a map variable's own name), `canonical` (the
layout a value of a given rank, matrix layout and map variables has in generated code) and
`spell` (code that turns an array laid out one way into another by naming axes, never by
counting them: a size-1 axis goes in for each axis the target has and the array lacks, an axis
holding one entry is dropped, the last two axes swap where the names ask for it).
Also `relayout`, `as_grid` and `from_grid`: a map member, a grid of entries and its entries
read back, each spelled between two named layouts. Leaves out: which layout an operation asks
of its operands (exprs.py, calls.py, assign.py).

Every generated array is its batch axes (`...`, one per sequence or implicit map of a caller:
none for a stored parameter, a map variable's values or `zeros(…)`) followed by named axes:

- `ROW` ("R"): the card's rows: a vector's entries, a matrix's rows (features);
- `COL` ("C"): the card's columns (the tokens of X ∈ ℝ^{d×ℓ});
- a map variable's name (`h`, `t`): one entry per value of that variable (scope.MapVar);
- `ONE` ("1"): a size-1 axis that holds a place, broadcasting against any axis.

A card matrix computed at run time is (C, R); a parameter as GGUF stores it (R, C); a vector
(R,); an array scalar (1,). Inside a map, each variable's axis sits `AFTER[kind]` axes from the
end, or just before the value's own axes where those are more (scope.AFTER).
"""

from __future__ import annotations

from toycards.codegen.code import paren
from toycards.errors import ToycardsError

ROW, COL, ONE = "R", "C", "1"

Axes = tuple[str, ...]


def canonical(rank: int, card_layout: bool, after: dict[str, int]) -> Axes:
    """The axes of a value of `rank` (a matrix in card layout: (R, C)) that carries the map
    variables `after` (variable → its kind's scope.AFTER).

    >>> canonical(2, False, {}), canonical(1, False, {}), canonical(0, False, {})
    (('C', 'R'), ('R',), ('1',))
    >>> canonical(1, False, {"h": 2}), canonical(0, False, {"t": 1}), canonical(0, False, {"i": 0})
    (('h', '1', 'R'), ('t', '1'), ('i',))
    >>> canonical(2, False, {"t": 1}), canonical(1, False, {"h": 2, "t": 1}), canonical(0, False, {"t_z": 0, "t_x": 1})
    (('t', 'C', 'R'), ('h', 't', 'R'), ('t_x', 't_z'))
    """
    own = ((ROW, COL) if card_layout else (COL, ROW)) if rank == 2 else (ROW,) * rank
    width = max([max(1, rank)] + [1 + max(a, rank) for a in after.values()])
    axes = [ONE] * (width - rank) + list(own)
    for var, a in sorted(after.items(), key=lambda va: -va[1]):
        at = width - 1 - max(a, rank)
        if axes[at] != ONE:
            raise ToycardsError(f"the map variables {axes[at]} and {var} would share one axis")
        axes[at] = var
    return tuple(axes)


def rename_axes(axes: Axes, names: dict[str, str]) -> Axes:
    """`axes` with some of them called by other names (`None`: left out): the columns of a
    matrix become a map variable's values, a column of one entry a place holder.

    >>> rename_axes(("h", "C", "R"), {"C": "t"}), rename_axes(("t", "C", "R"), {"C": None})
    (('h', 't', 'R'), ('t', 'R'))
    """
    return tuple(names.get(a, a) for a in axes if names.get(a, a) is not None)


def spell(code: str, have: Axes, want: Axes, batched: bool = True) -> str:
    """`code`, an array laid out `have`, laid out `want` instead: axes matched by name from the
    innermost out; an axis of `want` that `have` lacks is a new size-1 axis (`None`), or the
    size-1 axis `ONE` already holding its place; a `ONE` that nothing asks for is dropped (`0`).
    An array without batch axes needs no size-1 axes in front. Where the names come in another
    order, the last two axes swap (`ops.mT`); any other order is refused, as is an axis of `have`
    that `want` lacks (a value of one map variable cannot stand for all of them).

    >>> spell("v", ("R",), ("C", "R")), spell("W", ("R",), ("C", "R"), batched=False)
    ('v[..., None, :]', 'W')
    >>> spell("s", ("t", "1"), ("t", "C", "R")), spell("y", ("1", "R"), ("R",))
    ('s[..., None, :]', 'y[..., 0, :]')
    >>> spell("q", ("h", "1", "R"), ("h", "t", "R")), spell("x", ("h", "1", "R"), ("h", "R"))
    ('q', 'x[..., 0, :]')
    >>> spell("W", ("R", "C"), ("C", "R")), spell("x", ("t", "R"), ("h", "t", "R"))
    ('ops.mT(W)', 'x[..., None, :, :]')
    >>> spell("s", ("g", "t", "1"), ("t", "g"))
    'ops.mT(s[..., 0])'

    """
    names = [a for a in have if a != ONE]
    order = [a for a in want if a in names]
    if set(names) - set(want):
        missing = ", ".join(sorted(set(names) - set(want)))
        raise ToycardsError(f"a value with the axes of {missing} cannot be laid out without them")
    if names != order:  # the place holders dropped, the last two axes swap
        if ONE in have:
            code, have = spell(code, have, tuple(names), batched), tuple(names)
        swapped = (*have[:-2], have[-1], have[-2]) if len(have) >= 2 else have
        if list(swapped) != order:
            raise ToycardsError(f"the axes {', '.join(have)} cannot be put in the order {', '.join(want)}")
        code, have = f"ops.mT({code})", swapped
    items: list[str] = []  # innermost first
    i, j = len(have) - 1, len(want) - 1
    while j >= 0:
        w = want[j]
        h = have[i] if i >= 0 else None
        if h == w:
            items.append(":")
            i, j = i - 1, j - 1
        elif h == ONE and w in have:  # a place holder where a named axis of `have` belongs further out
            items.append("0")
            i -= 1
        elif h == ONE:  # the size-1 axis broadcasts as w
            items.append(":")
            i, j = i - 1, j - 1
        else:
            items.append("None")
            j -= 1
    while i >= 0:
        if have[i] != ONE:  # (unreachable: every name of `have` is in `want`)
            raise ToycardsError(f"the axis {have[i]} has no place in {', '.join(want)}")
        items.append("0")
        i -= 1
    items.reverse()
    while items and items[0] == "None" and not batched:  # broadcasting puts them in front
        items.pop(0)
    while items and items[0] == ":":  # the ellipsis stands for axes left as they are
        items.pop(0)
    if not items:
        return code
    return f"{paren(code)}[..., {', '.join(items)}]"


def relayout(code: str, have: int, want: int, rank: int) -> str | None:
    """`code` with `have` axes after a mapped axis, laid out with `want` axes after it instead
    (axes.py: the named layouts of a value of `rank` with its variable at each place); None when a
    member of this rank does not fit in `want` axes.

    >>> relayout("mu", 0, 2, 0), relayout("e", 1, 2, 1), relayout("s", 1, 0, 0), relayout("Y", 2, 2, 2)
    ('mu[..., None, None]', 'e[..., None, :]', 's[..., 0]', 'Y')
    >>> relayout("e", 1, 0, 1) is None
    True
    """
    if rank > want:
        return None
    return spell(code, canonical(rank, False, {"•": have}), canonical(rank, False, {"•": want}))


def as_grid(code: str, row: int | None, col: int | None) -> str:
    """A number per (row variable, column variable) of a map, laid out with each variable's axis
    `row` and `col` axes from the end (scope.AFTER; None: the value does not vary with it), as the
    grid `[…, columns, rows]` that entries `S[i, t]` are written into (axes.py: a size-1 axis for
    a variable it does not vary with).

    >>> as_grid("s", 2, 1), as_grid("s", 1, 2), as_grid("s", 2, None), as_grid("s", None, 2)
    ('ops.mT(s[..., 0])', 's[..., 0]', 's[..., None, :, 0, 0]', 's[..., 0, :]')
    """
    after = {v: a for v, a in (("row", row), ("col", col)) if a is not None}
    grid = ("col" if col is not None else ONE, "row" if row is not None else ONE)
    return spell(code, canonical(0, False, after), grid)


def from_grid(code: str, row: int, col: int) -> str:
    """The inverse of `as_grid`: entries `X[i, t]` of a grid `[…, columns, rows]`, read in a map
    over both variables, laid out with the row variable's axis `row` and the column variable's
    `col` axes from the end (size-1 axes where neither is).

    >>> from_grid("X", 0, 1), from_grid("X", 2, 1), from_grid("X", 1, 2)
    ('X', 'ops.mT(X)[..., None]', 'X[..., None]')
    """
    return spell(code, ("col", "row"), canonical(0, False, {"row": row, "col": col}))
