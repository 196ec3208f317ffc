"""An enumeration hyperparameter takes one of its options by name at a call.

`GQAttention(Q, K, V | H, H_kv, pairs, θ, ρ, Mask…)` passes `layout = pairs` although the
caller declares no enumeration: the checker accepts it, the interpreter and both generated
targets pass the option, and a name the caller defines itself still means the caller's value.
"""

from __future__ import annotations

import numpy as np
from card_functions import generated_function, targets

from toycards.checker import check
from toycards.lang.interpret import run
from toycards.lang.parse import parse
from toycards.library import library_algorithms

PICK = """
Algorithm: y ← pick(x | mode)
/* a switch on an enumeration */
Input: x ∈ ℝ^{n}
Output: y ∈ ℝ^{n}
Hyperparameters: mode ∈ {double, same}
1  y ← x
2  if mode = double then y ← 2 · x
3  return y
"""

CALLER = """
Algorithm: y ← G(x)
/* passes both options by name */
Input: x ∈ ℝ^{n}
Output: y ∈ ℝ^{n}
1  return y = pick(x | double) + 10 · pick(x | same)
"""


def test_options_pass_by_name_on_every_target():
    card = parse("toycards 1\n" + PICK + CALLER)
    assert check(card) == []
    x = [1.0, -2.0]
    want = [2 * 1.0 + 10 * 1.0, 2 * -2.0 + 10 * -2.0]  # by hand: double, then ten times the same
    assert run(card, [x], algorithm="G", library=library_algorithms()).tolist() == want
    for target, array in targets():
        got = generated_function(PICK + CALLER, target, call="G(X[:, t])", name="G")(array(x))
        assert np.allclose(np.asarray(got), want), (target, got)


def test_a_name_that_is_no_option_is_still_unknown():
    card = parse("toycards 1\n" + PICK + CALLER.replace("pick(x | same)", "pick(x | triple)"))
    assert [d.message for d in check(card)] == ["unknown name triple"]


def test_a_name_the_caller_defines_is_the_callers_value():
    own = CALLER.replace("/* passes both options by name */", "/* its own `same` */").replace(
        "Output: y ∈ ℝ^{n}\n", "Output: y ∈ ℝ^{n}\nHyperparameters: same ∈ {same, double} = double\n"
    )
    card = parse("toycards 1\n" + PICK + own)
    assert check(card) == [], [d.message for d in check(card)]
    got = run(card, [[1.0]], {"same": "double"}, algorithm="G", library=library_algorithms())
    assert got.tolist() == [2.0 + 10 * 2.0]
