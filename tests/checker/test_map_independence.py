"""A parallel map's iterations are independent, and the checker holds cards to it.

The interpreter runs a map's iterations in order and the generated code runs them at once as
array operations; both are the card's meaning only when no iteration reads what another
writes, and no two write the same entry. A card that breaks the rule is a checker error at
the read or the write (so it can never run to two different answers).
"""

from __future__ import annotations

import pytest

from toycards.checker import check
from toycards.lang.parse import parse

FRAME = """toycards 1

Algorithm: Y ← F(X | A)
/* one map over the columns of X */
Input: X ∈ ℝ^{d×ℓ}
Output: Y ∈ ℝ^{d×ℓ}
Parameters: A ∈ ℝ^{d×d}
1  Y ← X
2  {step}
3  return Y
"""

BROKEN = {  # step → (the text under the caret, a fragment of the message)
    "for t ∈ [ℓ]: Y[:, t] ← A · Y[:, t] + Y[:, 1]": ("Y[:, 1]", "another iteration writes"),
    "for t ∈ [ℓ]: Y[:, t] ← A · Y[:, t] + Y[:, ℓ]": ("Y[:, ℓ]", "another iteration writes"),
    "for t ∈ [ℓ]: Y[1, 1] ← X[1, t]": ("Y[1, 1]", "writes this same entry"),
}

SOUND = [
    "for t ∈ [ℓ]: Y[:, t] ← A · Y[:, t]",  # each column from itself
    "for t ∈ [ℓ]: Y[:, t] ← Y[:, t] + A · X[:, 1]",  # X is not written by the map
    "for t ∈ [ℓ], i ∈ [d]: Y[i, t] ← Y[i, t] · 2",  # an entry from itself
]


def diagnostics(step: str):
    text = FRAME.replace("{step}", step)
    return text, check(parse(text))


@pytest.mark.parametrize("step", sorted(BROKEN))
def test_a_map_that_depends_on_its_own_order_is_an_error_at_the_place(step):
    text, diags = diagnostics(step)
    under, fragment = BROKEN[step]
    assert len(diags) == 1, [d.message for d in diags]
    (d,) = diags
    line = text.splitlines()[d.span.line - 1]
    assert line[d.span.col - 1 :].startswith(under), (line, d.span.col)
    assert fragment in d.message and d.hint, (d.message, d.hint)


@pytest.mark.parametrize("step", SOUND)
def test_reading_the_entry_being_written_is_fine(step):
    _, diags = diagnostics(step)
    assert diags == [], [d.message for d in diags]


def test_a_family_member_of_another_iteration_is_an_error():
    text = FRAME.replace("{step}", "for t ∈ [ℓ]: e_t ← X[:, t] + e_1").replace(
        "3  return Y", "3  return Y = [e_1, …, e_ℓ]"
    )
    diags = check(parse(text))
    assert len(diags) == 1 and "e_1" in diags[0].message, [d.message for d in diags]
