"""Cases where a card that checks clean once ran wrong, each written as a card and held to
hand-computed values on both targets (issue "Executable semantics").
"""

from __future__ import annotations

import numpy as np
from card_functions import generated_function, targets

from toycards.checker import check
from toycards.lang.parse import parse

ALIAS = """
Algorithm: z ← F(x)
/* y starts as a copy of x; writing y's entries must leave x as it was */
Input: x ∈ ℝ^{n}
Output: z ∈ ℝ^{n}
1  y ← x
2  for i ∈ [n]: y[i] ← 2 · x[i] + 1
3  return z = x + y
"""


def test_assignment_never_aliases_entry_writes_copy():
    x = [1.0, -2.0, 0.5]
    want = [a + (2 * a + 1) for a in x]  # z = x + (2x + 1), with x unchanged by step 2
    for target, arr in targets():
        xs = arr(x)
        got = np.asarray(generated_function(ALIAS, target)(xs), dtype=np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=target)
        np.testing.assert_array_equal(np.asarray(xs), x, err_msg=f"{target}: the caller's array changed")


ALIAS_BACK = """
Algorithm: z ← F(x)
/* w keeps the values y had before y's entries are rewritten */
Input: x ∈ ℝ^{n}
Output: z ∈ ℝ^{n}
1  y ← 2 · x
2  w ← y
3  for i ∈ [n]: y[i] ← 10 · x[i]
4  return z = w + y
"""


def test_a_name_assigned_from_a_written_vector_keeps_the_old_values():
    x = [1.0, 2.0, 3.0]
    want = [2 * a + 10 * a for a in x]
    for target, arr in targets():
        got = np.asarray(generated_function(ALIAS_BACK, target)(arr(x)), dtype=np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=target)


ALIAS_INPUT = """
Algorithm: z ← F(x)
/* writing entries of an input writes a copy: the caller's array is left alone */
Input: x ∈ ℝ^{n}
Output: z ∈ ℝ^{n}
1  for i ∈ [n]: x[i] ← 3 · x[i]
2  return z = x
"""


def test_entry_writes_to_an_input_leave_the_callers_array_alone():
    x = [1.0, 2.0]
    for target, arr in targets():
        xs = arr(x)
        got = np.asarray(generated_function(ALIAS_INPUT, target)(xs), dtype=np.float64)
        np.testing.assert_allclose(got, [3.0, 6.0], err_msg=target)
        np.testing.assert_array_equal(np.asarray(xs), x, err_msg=target)


PAST_THE_END = """toycards 1

Algorithm: r ← F(x)
Input: x ∈ ℝ^{d}
Output: r ∈ ℝ^{d}
1  for i ∈ [d/2]: y[i] ← x[i]
2  for i ∈ [d/2]: y[i + d/2] ← x[i]
3  for i ∈ [d]: r[i − 1] ← x[i]
4  return r = y
"""


def test_entry_writes_past_an_inferred_size_are_errors_at_the_index():
    diags = check(parse(PAST_THE_END))
    found = {(d.span.line, d.span.col, d.message) for d in diags if "outside" in d.message}
    assert found == {
        (7, 21, "y[i + d/2] for i ∈ [d/2] writes entry d, outside y's entries 1 … d/2"),
        (8, 19, "r[i − 1] for i ∈ [d] writes entry 0, outside r's entries 1 … d"),
    }


HALVES = """
Algorithm: r ← F(x)
/* the output built from two halves, entry by entry: its size is the declared d */
Input: x ∈ ℝ^{d}
Output: r ∈ ℝ^{d}
1  for i ∈ [d/2]: r[i] ← −x[i + d/2]
2  for i ∈ [d/2]: r[i + d/2] ← x[i]
3  return r
"""


def test_an_output_built_from_halves_has_its_declared_size():
    x = [1.0, 2.0, 3.0, 4.0]
    for target, arr in targets():
        got = np.asarray(generated_function(HALVES, target)(arr(x)), dtype=np.float64)
        np.testing.assert_allclose(got, [-3.0, -4.0, 1.0, 2.0], err_msg=target)


OFFSET_FIRST = """
Algorithm: r ← F(x)
/* an entry index written offset first, `d/2 + i`, as well as `i + d/2` */
Input: x ∈ ℝ^{d}
Output: r ∈ ℝ^{d}
1  for i ∈ [d/2]: r[d/2 + i] ← x[i]
2  for i ∈ [d/2]: r[i] ← x[d/2 + i]
3  return r
"""


def test_an_index_may_name_its_offset_first():
    x = [1.0, 2.0, 3.0, 4.0]
    for target, arr in targets():
        got = np.asarray(generated_function(OFFSET_FIRST, target)(arr(x)), dtype=np.float64)
        np.testing.assert_allclose(got, [3.0, 4.0, 1.0, 2.0], err_msg=target)


def test_a_sums_body_is_a_whole_product_and_ends_at_plus():
    """docs/card-language.md, precedence: Σ's body is a product; `+` ends it."""
    card = parse(
        "toycards 1\n\nAlgorithm: y ← f(a)\nInput: a ∈ ℝ^{n}\nOutput: y ∈ ℝ\n"
        "1  return y = Σ_{t=1}^{n} a[t] · a[t] / 2 + 1\n"
    )
    value = card.main.body[0].value
    assert value.op == "+" and value.right.text == "1"  # + 1 once, outside the sum
    assert value.left.body.op == "/"  # the body is the whole product a[t] · a[t] / 2


MAPPED_COLUMN_PARTS = """
Algorithm: Y ← F(X | k)
/* rows 2 … k + 1 of each column, scaled by that column's entry 3 (issue 9's case 3) */
Input: X ∈ ℝ^{d×ℓ}
Output: Y ∈ ℝ^{k×ℓ}
Hyperparameters: k ∈ ℕ
1  for t ∈ [ℓ]: Y[:, t] ← X[3, t] · X[2:k + 1, t]
2  return Y
"""


def test_rows_and_entries_of_a_mapped_column_generate():
    X = [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]  # card X ∈ ℝ^{4×2}, as columns
    want = [[3.0 * 2.0, 3.0 * 3.0], [7.0 * 6.0, 7.0 * 7.0]]  # per column t: X[3, t] · X[2:3, t]
    for target, arr in targets():
        f = generated_function(MAPPED_COLUMN_PARTS, target, call="F(X | 2)")
        got = np.asarray(f(arr(X), 2), dtype=np.float64)  # code layout: one row per column t
        np.testing.assert_allclose(got, want, err_msg=target)


FIRST_BLOCKS = """
Algorithm: Y ← F(X | G, k)
/* a map over the first G blocks of k rows of a matrix that holds more of them */
Input: X ∈ ℝ^{d×ℓ}
Output: Y ∈ ℝ^{G·k×ℓ}
Hyperparameters:
  G ∈ ℕ
  k ∈ ℕ
1  for j ∈ [G]: Z^j ← 2 · rows(X, j, k)  ∷ ℝ^{k×ℓ}
2  return Y = [Z^1; …; Z^G]
"""


def test_a_map_over_some_blocks_of_rows_takes_only_those():
    """`for j ∈ [G]: rows(X, j, k)` with X of more than G·k rows took every block (Qwen3-Next's
    queries, the first 2 of 8 blocks of its convolved q, k, v)."""
    X = np.arange(12.0).reshape(6, 2)  # card X ∈ ℝ^{6×2}: three blocks of 2 rows
    for target, array in targets():
        f = generated_function(FIRST_BLOCKS, target, call="F(X | 2, 2)")
        got = np.asarray(f(array(X.T.copy()), 2, 2))  # code layout [ℓ, G·k]
        np.testing.assert_allclose(got, 2 * X[:4].T, err_msg=target)


CORNER = """
Algorithm: Y ← F(X | k)
/* a block of rows and columns */
Input: X ∈ ℝ^{d×ℓ}
Output: Y ∈ ℝ^{k×2}
Hyperparameters: k ∈ ℕ
1  return Y = 2 · X[1:k, 1:2]
"""


def test_a_block_of_rows_and_columns_generates():
    """It was refused at the sub-expression; now it generates: rows 1…k of columns 1 and 2."""
    for target, array in targets():
        f = generated_function(CORNER, target, call="F(X | 2)")
        X = np.arange(12.0).reshape(4, 3)  # card X ∈ ℝ^{4×3}; code layout [ℓ, d] = X^⊺
        got = np.asarray(f(array(X.T.copy()), 2))  # code layout of Y ∈ ℝ^{2×2}: [columns, rows]
        np.testing.assert_allclose(got, 2 * X[:2, :2].T, err_msg=target)


COMPUTED_COLUMN = """
Algorithm: y ← F(v | W)
/* a column picked by an index computed from the data, counted from 1 like every card index */
Input: v ∈ ℝ^{n}
Output: y ∈ ℝ^{n}
Parameters: W ∈ ℝ^{n×n}
1  return y = W[:, ⌈v[1]⌉] + W[:, topk(v, 1)[1]]
"""


def test_a_column_picked_by_a_computed_index_counts_from_one():
    W = np.arange(1.0, 10.0).reshape(3, 3)  # card W: rows (1, 2, 3), (4, 5, 6), (7, 8, 9)
    v = [1.5, 0.0, 0.2]  # ⌈1.5⌉ = 2: column 2; the largest entry is entry 1: column 1
    for target, arr in targets():
        f = generated_function(COMPUTED_COLUMN, target, call="F(X[:, t] | W)")
        got = np.asarray(f(arr(v), arr(W)), dtype=np.float64)  # a parameter is stored as in the card
        np.testing.assert_allclose(got, W[:, 1] + W[:, 0], err_msg=target)


BRANCH_ON_A_RUN_TIME_VALUE = """toycards 1

Algorithm: y ← doubled_if(x | μ)
Input: x ∈ ℝ^{n}
Output: y ∈ ℝ^{n}
Hyperparameters: μ ∈ ℝ
1  y ← x
2  if μ > 0 then y ← 2 · x
3  return y

Algorithm: y ← F(x)
/* μ would differ from column to column: generated code runs an `if` once per call */
Input: x ∈ ℝ^{n}
Output: y ∈ ℝ^{n}
1  return y = doubled_if(x | x[1])
"""


def test_a_hyperparameter_the_callee_branches_on_cannot_take_a_run_time_value():
    (diag,) = check(parse(BRANCH_ON_A_RUN_TIME_VALUE))
    assert diag.message == (
        "doubled_if: its hyperparameter μ is tested by an `if` or a loop bound, and cannot take the "
        "run-time value x[1] (x is an input)"
    )
    assert (diag.span.line, diag.span.col) == (15, 30)  # under x[1]
    assert "input of doubled_if" in diag.hint and "⟦…⟧" in diag.hint


GRID = """
Algorithm: B ← F(a, b)
/* a matrix defined by its entries, one entry written again, then every entry updated */
Input:
  a ∈ ℝ^{m}
  b ∈ ℝ^{n}
Output: B ∈ ℝ^{m×n}
1  for i ∈ [m], j ∈ [n]: B[i, j] ← a[i] · b[j] + ⟦i ≤ j⟧
2  B[1, 2] ← 7
3  for i ∈ [m], j ∈ [n] do
4    B[i, j] ← B[i, j] − (j − i)
5  end
6  return B
"""


def test_matrix_entries_define_update_and_overwrite():
    a, b = [1.0, 2.0, 3.0], [10.0, 20.0]
    want = [[a[i] * b[j] + (i <= j) - (j - i) for j in range(2)] for i in range(3)]
    want[0][1] = 7.0 - 1  # entry (1, 2) set to 7, then updated like every other
    for target, arr in targets():
        f = generated_function(GRID, target, call="F(X[:, t], X[1:2, t])")
        got = np.asarray(f(arr(a), arr(b)), dtype=np.float64)  # code layout: [columns, rows]
        np.testing.assert_allclose(got.T, want, err_msg=target)


ENTRY_OUTSIDE_A_MAP = """
Algorithm: y ← F(x)
/* entries picked by a number or a hyperparameter, outside any map */
Input: x ∈ ℝ^{n}
Output: y ∈ ℝ^{n}
1  y ← 2 · x
2  y[1] ← y[2] + 1
3  y[n] ← x[1]
4  return y
"""


def test_an_entry_picked_by_a_number_is_written_outside_a_map():
    x = [1.0, 2.0, 3.0]
    for target, arr in targets():
        xs = arr(x)
        got = np.asarray(generated_function(ENTRY_OUTSIDE_A_MAP, target)(xs), dtype=np.float64)
        np.testing.assert_allclose(got, [5.0, 4.0, 1.0], err_msg=target)
        np.testing.assert_array_equal(np.asarray(xs), x, err_msg=target)


SUMS = """
Algorithm: y ← F(x)
/* Σ whose index is a value, of numbers only, from 2, and of a term without its index */
Input: x ∈ ℝ^{n}
Output: y ∈ ℝ^{4}
1  a ← Σ_{i=1}^{n} i · x[i]
2  b ← Σ_{k=1}^{n} (k − 1)^2
3  c ← Σ_{i=2}^{n} x[i − 1] · x[i]
4  return y = [a; b; c; Σ_{j=1}^{3} x[1]]
"""


def test_sums_whose_index_is_a_value_or_starts_later():
    x = [1.0, 2.0, 3.0, 4.0]
    want = [1 + 4 + 9 + 16, 0 + 1 + 4 + 9, 1 * 2 + 2 * 3 + 3 * 4, 3 * 1.0]
    for target, arr in targets():
        got = np.asarray(generated_function(SUMS, target, call="F(X[1:4, t])")(arr(x)), dtype=np.float64)
        np.testing.assert_allclose(got.reshape(-1), want, err_msg=target)


def test_slices_rows_and_numbers_side_by_side_count_from_one():
    """The interpreter's SLICES card (tests/lang/test_interpreter.py), through both code generators."""
    from test_interpreter import SLICES

    A = np.arange(1.0, 10.0).reshape(3, 3)  # card A ∈ ℝ^{3×3}: rows (1, 2, 3), (4, 5, 6), (7, 8, 9)
    text = SLICES.replace("toycards 1\n", "")
    for target, arr in targets():
        middle = generated_function(text, target, call="middle(X[:, t])", name="middle")
        assert np.asarray(middle(arr([10.0, 20.0, 30.0, 40.0, 50.0]))).tolist() == [20, 30, 40], target
        corner = generated_function(text, target, call="corner(W)[:, 1]", name="corner")
        got = np.asarray(corner(arr(A.T)), dtype=np.float64)  # code layout: one row per card column
        assert got.T.tolist() == [[4, 5], [7, 8]], target
        picks = generated_function(text, target, call="picks(W)[1:3]", name="picks")
        got = np.asarray(picks(arr(A.T)), dtype=np.float64).reshape(-1)
        assert got.tolist() == [3, 2, 7 * 2 + 8 * 5 + 9 * 8, 3], target


EXP_RATIO = """
Algorithm: α ← F(s)
/* the paper's softmax written out: exp over a Σ of exp */
Input: s ∈ ℝ^{n}
Output: α ∈ ℝ^{n}
1  for t ∈ [n]: α[t] ← exp(s[t]) / Σ_{u=1}^{n} exp(s[u])
2  return α
"""

EXP_RATIO_COLUMNS = """
Algorithm: y ← F(e, Z)
/* Algorithm 3's weights: the scores of the context tokens, exp over a Σ of exp */
Input:
  e ∈ ℝ^{d}
  Z ∈ ℝ^{d×T}
Output: y ∈ ℝ^{T}
1  for t ∈ [T]: α_t ← exp(e^⊺ · Z[:, t]) / Σ_{u=1}^{T} exp(e^⊺ · Z[:, u])
2  return y = [α_1; …; α_T]
"""


def _softmax64(s):
    s = np.asarray(s, np.float64)
    w = np.exp(s - s.max())
    return w / w.sum()


def test_exp_over_a_sum_of_exp_holds_scores_whose_exp_overflows_float32():
    """exp(100) overflows float32 (inf / inf = nan); the quotient is exp(s − m) / Σ exp(s − m)."""
    s = [100.0, 98.0, 10.0, -5.0]
    want = _softmax64(s)  # by hand: e^0, e^−2, … over their sum
    assert abs(want[0] - 1 / (1 + np.exp(-2) + np.exp(-90) + np.exp(-105))) < 1e-12
    for target, arr in targets():
        got = np.asarray(generated_function(EXP_RATIO, target)(arr(s)), dtype=np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-30, err_msg=target)
    e, z = np.array([10.0, -4.0]), np.array([[12.0, 1.0, -3.0], [2.0, 0.5, 1.0]])
    want = _softmax64(e @ z)  # scores 112, 8, −34
    for target, arr in targets():
        f = generated_function(EXP_RATIO_COLUMNS, target, call="F(X[:, t], X)")
        got = np.asarray(
            f(arr(e), arr(z.T)), dtype=np.float64
        )  # Z laid out as code keeps it: row t is Z[:, t]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-30, err_msg=target)


REVERSED = """
Algorithm: y ← F(v)
/* the entries backwards, plus the entries as they are */
Input: v ∈ ℝ^{n}
Output: y ∈ ℝ^{n}
1  for i ∈ [n]: y[i] ← v[n + 1 − i] · i + v[i]
2  return y
"""


def test_an_index_counting_down_reads_the_entries_backwards():
    v = [1.0, 2.0, 3.0, 5.0]
    want = [5 * 1 + 1, 3 * 2 + 2, 2 * 3 + 3, 1 * 4 + 5]  # y[i] = v[5 − i] · i + v[i]
    for target, arr in targets():
        got = np.asarray(generated_function(REVERSED, target)(arr(v)), dtype=np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=target)


IF_ELSE = """
Algorithm: y ← F(v)
/* even entries doubled, odd ones negated, and the odd ones past the third then halved */
Input: v ∈ ℝ^{n}
Output: y ∈ ℝ^{n}
1  for i ∈ [n] do
2    if i mod 2 = 0 then
3      y[i] ← 2 · v[i]
4    else
5      y[i] ← −v[i]
6      if i > 3 then
7        y[i] ← y[i] / 2
8      end
9    end
10 end
11 return y
"""


def test_if_else_inside_a_map_picks_each_entrys_branch():
    v = [1.0, 2.0, 5.0, 4.0, 7.0]
    want = [-1.0, 4.0, -5.0, 8.0, -3.5]  # i = 1 … 5: −v1, 2·v2, −v3, 2·v4, −v5 / 2
    for target, arr in targets():
        got = np.asarray(generated_function(IF_ELSE, target)(arr(v)), dtype=np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=target)


def test_a_name_one_branch_of_a_map_if_defines_is_refused_at_the_if():
    import pytest

    from toycards.errors import ToycardsError

    text = IF_ELSE.replace("5      y[i] ← −v[i]", "5      z[i] ← −v[i]").replace("y[i] / 2", "z[i] / 2")
    with pytest.raises(ToycardsError, match="defined in one branch"):
        generated_function(text, "numpy")


OPTIONAL = """
Algorithm: y ← F(x | a, c)
/* a · x, soft-capped to (−c, c) when c > 0 */
Input: x ∈ ℝ^{n}
Output: y ∈ ℝ^{n}
Hyperparameters:
  a ∈ ℝ
  c ∈ ℝ  default 0  ▷ 0: no cap
1  y ← a · x
2  if c > 0 then y ← c · tanh(y / c)
3  return y

Algorithm: z ← G(x)
Input: x ∈ ℝ^{n}
Output: z ∈ ℝ^{n}
1  return z = F(x | 2) + F(x | 2, 1)
"""


def test_an_optional_hyperparameter_left_out_takes_its_default():
    """`F(x | 2)` passes c = 0 (no cap), `F(x | 2, 1)` caps at 1: z = 2x + tanh(2x)."""
    from toycards.lang.interpret import run

    x = [0.25, -1.0, 3.0]
    want = [2 * a + np.tanh(2 * a) for a in x]
    card = parse("toycards 1\n" + OPTIONAL)
    assert check(card) == []
    np.testing.assert_allclose(np.asarray(run(card, [x], algorithm="G"), dtype=np.float64), want, rtol=1e-12)
    np.testing.assert_allclose(run(card, [x], {"a": 2.0}, algorithm="F"), [2 * a for a in x], rtol=1e-12)
    for target, arr in targets():
        g = generated_function(OPTIONAL, target, call="G(X[:, t])", name="G")
        np.testing.assert_allclose(np.asarray(g(arr(x)), dtype=np.float64), want, rtol=1e-6, err_msg=target)


OPTIONAL_VECTOR = """
Algorithm: y ← F(x | a, σ)
/* a · x plus exp(σ), entry by entry: nothing where σ is left out */
Input: x ∈ ℝ^{n}
Output: y ∈ ℝ^{n}
Hyperparameters:
  a ∈ ℝ
  σ ∈ ℝ^{n}  default −∞  ▷ one number per entry; left out, −∞ in every entry
1  for i ∈ [n]: y[i] ← a · x[i] + exp(σ[i])
2  return y

Algorithm: z ← G(x | s)
Input: x ∈ ℝ^{n}
Output: z ∈ ℝ^{n}
Parameters: s ∈ ℝ^{n}
1  return z = F(x | 2) + F(x | 2, s)
"""


def test_an_optional_vector_left_out_is_its_default_in_every_entry():
    """`F(x | 2)` fills σ with −∞ (exp gives 0), `F(x | 2, s)` passes s: z = 4x + exp(s), on the
    interpreter and both targets; a vector of the wrong length is refused, and so is one whose
    length nothing else in a call gives."""
    from toycards.lang.interpret import run

    x, s = [0.25, -1.0, 3.0], [0.0, 1.0, -2.0]
    want = [4 * a + np.exp(b) for a, b in zip(x, s)]
    card = parse("toycards 1\n" + OPTIONAL_VECTOR)
    assert check(card) == []
    interpreted = np.asarray(run(card, [x], {"s": np.asarray(s)}, algorithm="G"), dtype=np.float64)
    np.testing.assert_allclose(interpreted, want, rtol=1e-12)
    for target, arr in targets():
        g = generated_function(OPTIONAL_VECTOR, target, call="G(X[:, t] | W[:, 1])", name="G")
        np.testing.assert_allclose(np.asarray(g(arr(x), arr(s)), dtype=np.float64), interpreted, rtol=1e-6)
    short = OPTIONAL_VECTOR.replace("F(x | 2, s)", "F(x | 2, s[1:2])")
    assert [d.message for d in check(parse("toycards 1\n" + short))] == ["F: σ gets ℝ^{2}, expected ℝ^{n}"]
    unsized = OPTIONAL_VECTOR.replace("σ ∈ ℝ^{n}", "σ ∈ ℝ^{m}").replace("exp(σ[i])", "max(σ)")
    assert [d.message for d in check(parse("toycards 1\n" + unsized))] == [
        "σ may be left out, but nothing else in the call gives its length m"
    ]


OWN_SOFTMAX = """
Algorithm: y ← softmax(x)
/* the card's own softmax, twice as sharp as the prelude's */
Input: x ∈ ℝ^{n}
Output: y ∈ ℝ^{n}
1  m ← max(x)
2  z ← exp(2 · (x − m))
3  return y = z / Σ_{i=1}^{n} z[i]

Algorithm: z ← G(X)
/* the card's softmax of one column, and the prelude's attention, whose steps call the prelude's */
Input: X ∈ ℝ^{n×ℓ}
Output: z ∈ ℝ^{n×ℓ}
1  return z = softmax(X) + attention(X, X, X | Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧)
"""


def test_a_card_that_defines_a_prelude_name_keeps_the_prelude_inside_the_prelude():
    """The card's `softmax` serves the card's own calls; the prelude's `attention` still calls the
    prelude's softmax (as the interpreter resolves names): hand-computed for two columns."""
    x = np.array([[1.0, 0.5], [-1.0, 2.0]])  # n = 2 rows, ℓ = 2 columns
    sharp = np.exp(2 * (x - x.max(0))) / np.exp(2 * (x - x.max(0))).sum(0)
    scores = x.T @ x / np.sqrt(2)  # S[t_z, t_x], causal: column 1 attends to token 1 alone
    weights = np.zeros((2, 2))
    weights[0, 0] = 1.0
    weights[:, 1] = (
        np.exp(scores[:, 1] - scores[:, 1].max()) / np.exp(scores[:, 1] - scores[:, 1].max()).sum()
    )
    want = sharp + x @ weights
    for target, arr in targets():
        g = generated_function(OWN_SOFTMAX, target, call="G(X)[:, t]", name="G")
        got = np.asarray(g(arr(x.T.copy())), dtype=np.float64).T  # code layout is [ℓ, n]
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=target)


TOPK_AS_NUMBERS = """
Algorithm: y ← F(v | W)
Input: v ∈ ℝ^{n}
Output: y ∈ ℝ^{m}
Parameters: W ∈ ℝ^{m×2}
1  return y = W · topk(v, 2)
"""


def test_topk_indices_are_numbers_in_arithmetic_on_both_targets():
    """topk(v, 2) of (0.5, 2, −1, 3) is (4, 2); W · (4, 2) by hand."""
    w = [[1.0, 10.0], [2.0, 20.0]]
    for target, arr in targets():
        f = generated_function(TOPK_AS_NUMBERS, target, call="F(X[:, t] | W[:, 1:2])")
        got = np.asarray(f(arr([0.5, 2.0, -1.0, 3.0]), arr(w)), dtype=np.float64)
        np.testing.assert_allclose(got, [1 * 4 + 10 * 2, 2 * 4 + 20 * 2], err_msg=target)
