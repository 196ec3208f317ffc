"""Per-layer hyperparameters (`n_kv ∈ ℕ^{L} from …`) and parameter groups that exist in some layers
only (`for l ∈ [L], in "blk.{l-1}.", if n_kv[l] ≠ 0:`), as the checker sees them.

Oracles: a small hand-written card (TOY) that checks clean, and one planted mistake per test whose
expected line and column are computed from the card text (the offending token).
"""

from __future__ import annotations

from test_check import assert_at, diags, mutate, only, show

from toycards.lang.parse import parse
from toycards.lang.printer import render_card

TOY = """\
toycards 1

Algorithm: P ← Toy(x | θ)
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{N_V×ℓ}
Hyperparameters:
  L ∈ ℕ         from "{arch}.block_count"
  d_e ∈ ℕ       from "{arch}.embedding_length"
  n_kv ∈ ℕ^{L}  from "{arch}.attention.head_count_kv"
  H_kv ∈ ℕ      ≔ max(n_kv)
  N_V ∈ ℕ
Parameters:
  W_e ∈ ℝ^{d_e×N_V}  from "token_embd.weight"^⊺
  for l ∈ [L], in "blk.{l-1}.", if n_kv[l] = 0:
    W_c^l ∈ ℝ^{d_e×d_e}  from "conv.weight"
  for l ∈ [L], in "blk.{l-1}.", if n_kv[l] ≠ 0:
    W_a^l ∈ ℝ^{H_kv×d_e}  from "attn.weight"
1  for t ∈ [ℓ]: e_t ← W_e[:, x[t]]
2  X ← [e_1, …, e_ℓ]  ∷ ℝ^{d_e×ℓ}
3  for l = 1, 2, …, L do
4    if n_kv[l] = 0 then
5      X ← X + W_c^l · X
6    else
7      X ← X + W_a^l^⊺ · (W_a^l · X)
8    end
9  end
10 return P = softmax(W_e^⊺ · X)
"""


def test_the_toy_card_checks_clean():
    assert not diags(TOY, library=True), show(diags(TOY, library=True))


def test_a_member_read_outside_its_condition_is_located():
    text = mutate("9  end", "    X ← X + W_c^l · X\n9  end", TOY)
    d = only(text, "W_c^l exists only in the layers where n_kv[l] = 0", library=True)
    assert_at(d, text, "    X ← X + W_c^l · X\n9", "W_c^l")
    assert "else" in d.hint


def test_the_else_of_the_opposite_condition_counts():
    text = mutate("if n_kv[l] = 0 then", "if n_kv[l] ≠ 0 then", TOY)
    text = mutate("X ← X + W_c^l · X", "X ← X + W_a^l^⊺ · (W_a^l · X)", text)
    text = mutate("7      X ← X + W_a^l^⊺ · (W_a^l · X)", "7      X ← X + W_c^l · X", text)
    assert not diags(text, library=True), show(diags(text, library=True))


def test_a_conjunction_holds_where_each_side_does():
    """ERNIE 4.5 MoE's shared expert: a group whose condition is `c ∧ d_e > 0` is read inside
    `if d_e > 0` nested in `if c`; alone, the inner `if` is not enough."""
    text = mutate("if n_kv[l] ≠ 0:", "if n_kv[l] ≠ 0 ∧ d_e > 0:", TOY)
    nested = "      if d_e > 0 then\n        X ← X + W_a^l^⊺ · (W_a^l · X)\n      end"
    ok = mutate("      X ← X + W_a^l^⊺ · (W_a^l · X)", nested, text)
    assert not diags(ok, library=True), show(diags(ok, library=True))
    alone = mutate("      X ← X + W_c^l · X", "      X ← X + W_c^l · X\n" + nested, text)
    ds = diags(alone, library=True)
    assert any("W_a^l exists only in the layers where n_kv[l] ≠ 0 ∧ d_e > 0" in d.message for d in ds), show(ds)


def test_the_else_of_a_conjunction_is_its_negation():
    """ERNIE 4.5 MoE's dense blocks: the group `if ¬(c ∧ c')` is read in the `else` of `if c ∧ c'`."""
    text = mutate("if n_kv[l] = 0:", "if ¬(n_kv[l] ≠ 0 ∧ d_e > 0):", TOY)
    text = mutate("if n_kv[l] ≠ 0:", "if n_kv[l] ≠ 0 ∧ d_e > 0:", text)
    text = mutate("if n_kv[l] = 0 then", "if n_kv[l] ≠ 0 ∧ d_e > 0 then", text)
    text = mutate("X ← X + W_c^l · X", "X ← X + W_a^l^⊺ · (W_a^l · X)", text)
    text = mutate("7      X ← X + W_a^l^⊺ · (W_a^l · X)", "7      X ← X + W_c^l · X", text)
    assert not diags(text, library=True), show(diags(text, library=True))


def test_a_group_condition_reads_only_hyperparameters_and_its_variable():
    text = mutate('in "blk.{l-1}.", if n_kv[l] = 0:', 'in "blk.{l-1}.", if n_kv[l] = x:', TOY)
    ds = diags(text, library=True)
    assert any(
        "a group's condition may only use hyperparameters and l; x is not one" in d.message for d in ds
    ), show(ds)


def test_a_matrix_from_a_metadata_key_is_refused():
    text = mutate("n_kv ∈ ℕ^{L}  from", "n_kv ∈ ℝ^{L×L}  from", TOY)
    ds = diags(text, library=True)
    assert any("a metadata key holds one number or one array" in d.message for d in ds), show(ds)


def test_a_reduction_of_a_scalar_is_not_a_dimension():
    text = mutate("n_kv ∈ ℕ^{L}  from", "n_kv ∈ ℕ  from", TOY)
    ds = diags(text, library=True)
    assert any("H_kv ∈ ℕ ≔ max(n_kv) is not a dimension expression" in d.message for d in ds), show(ds)


def test_a_bound_value_has_one_entry_per_layer():
    text = mutate('L ∈ ℕ         from "{arch}.block_count"', 'L ∈ ℕ = 3     from "{arch}.block_count"', TOY)
    good = mutate("n_kv ∈ ℕ^{L}  from", "n_kv ∈ ℕ^{L} = [0, 8, 0]  from", text)
    assert not diags(good, library=True), show(diags(good, library=True))
    bad = mutate("n_kv ∈ ℕ^{L}  from", "n_kv ∈ ℕ^{L} = [0, 8]  from", text)
    d = only(bad, "n_kv ∈ ℕ^{L} has 2 entries, but L = 3", library=True)
    assert_at(d, bad, "= [0, 8]", "[0, 8]")


def test_the_condition_prints_back_and_reads_the_same():
    card = parse(TOY)
    assert 'for l ∈ [L], in "blk.{l-1}.", if n_kv[l] ≠ 0:' in str(card)
    assert parse(str(card)) == card
    ascii_text = render_card(card, ascii=True)
    assert "if n_kv[l] != 0:" in ascii_text
    assert parse(ascii_text) == card
