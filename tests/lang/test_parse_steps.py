"""Step lines may leave out their number; a map over two indices is still a step, and a
parameter group (`for l ∈ [L], in "blk.{l-1}.":`) is still a group."""

from __future__ import annotations

from toycards.lang import ir
from toycards.lang.parse import parse

CARD = """toycards 1

Algorithm: Y ← F(X | A_l)
/* an unnumbered map over two indices */
Input: X ∈ ℝ^{n×m}
Output: Y ∈ ℝ^{n×m}
Hyperparameters: L ∈ ℕ
Parameters:
  for l ∈ [L], in "blk.{l-1}.":
    A_l ∈ ℝ^{n} from "a.weight"
for i ∈ [n], t ∈ [m]: Y[i, t] ← X[i, t] · 2
return Y
"""


def test_an_unnumbered_two_index_map_is_a_step_and_a_group_is_a_group():
    algo = parse(CARD).main
    (group,) = algo.param_decls
    assert isinstance(group, ir.ParamGroup) and group.var == "l" and group.prefix == "blk.{l-1}."
    step = algo.body[0]
    assert isinstance(step, ir.ForAll) and [r.var for r in step.ranges] == ["i", "t"]
