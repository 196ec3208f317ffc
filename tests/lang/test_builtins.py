"""The builtin registry (lang/builtins.py) is the one list of builtins, and every entry works.

Each entry is held to: both runtime op modules implement its `ops` name and agree with its
Python meaning on hand-picked values; a card calling it checks clean and generates code for
both targets whose values equal hand-computed ones; the card-language reference lists it.
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import numpy as np
import pytest
from card_functions import generated_function, targets

from toycards.checker.builtins import RULES
from toycards.lang.builtins import BUILTINS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "card-language.md"
X = [0.25, 1.5, 0.75, 2.0]


def _ops(target: str):
    return importlib.import_module(f"toycards.runtime.{target}.ops")


def test_every_rule_has_a_shape_rule_and_every_entry_a_known_rule():
    assert {b.rule for b in BUILTINS.values()} <= set(RULES)


@pytest.mark.parametrize("name", [n for n, b in BUILTINS.items() if b.rule == "elementwise"])
def test_elementwise_ops_agree_with_the_scalar_meaning(name):
    b = BUILTINS[name]
    want = [b.scalar(x) for x in X]
    for target, arr in targets():
        ops = _ops(target)
        got = np.asarray(getattr(ops, b.ops)(arr(X)), dtype=np.float64)
        np.testing.assert_allclose(got, want, rtol=2e-6, err_msg=f"ops.{b.ops}")


CARD = """Algorithm: y ← F(v | k)
Input: v ∈ ℝ^{n}
Output: y ∈ {out}
Hyperparameters: k ∈ ℕ
1  return y = {body}

"""

CASES = {  # builtin → (output type, body, hand-computed value for v = X, k = 2)
    "exp": ("ℝ^{n}", "exp(v)", [math.exp(x) for x in X]),
    "sigmoid": ("ℝ^{n}", "sigmoid(v)", [1 / (1 + math.exp(-x)) for x in X]),
    "abs": ("ℝ^{n}", "abs(−v)", X),
    "ceil": ("ℝ^{n}", "⌈v⌉", [1, 2, 1, 2]),
    "max": ("ℝ", "max(v)", 2.0),
    "min": ("ℝ", "min(v)", 0.25),
    "length": ("ℕ", "length(v)", 4),
    "rows": ("ℝ^{k}", "rows(v, 2, k)", [0.75, 2.0]),
    "topk": ("ℝ^{k}", "topk(v, k)", [4, 2]),  # 2.0 at index 4, then 1.5 at index 2
    "zeros": ("ℝ^{k}", "zeros(k) + rows(v, 2, k)", [0.75, 2.0]),
    "filled": ("ℝ^{n}", "filled(3, n) ⊙ v", [3 * x for x in X]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_card_calling_the_builtin_generates_the_right_values(name):
    out, body, want = CASES[name]
    text = CARD.replace("{out}", out).replace("{body}", body)
    for target, arr in targets():
        f = generated_function(text, target, call="F(X[:, t] | 2)")
        got = np.asarray(f(arr(X), 2), dtype=np.float64)
        np.testing.assert_allclose(got.reshape(np.shape(want)), want, rtol=2e-6, err_msg=target)


def test_every_builtin_has_a_generation_case_and_a_line_in_the_reference():
    elementwise = {n for n, b in BUILTINS.items() if b.rule == "elementwise"}
    bound = {n for n, b in BUILTINS.items() if b.rule == "present"}  # read when a file binds: below
    assert set(BUILTINS) - elementwise - bound <= set(CASES)
    docs = DOCS.read_text(encoding="utf-8")
    section = docs[docs.index("### Builtins") : docs.index("## Calls")]
    missing = [n for n in BUILTINS if f"`{n}" not in section and f" `{n}` " not in section]
    assert not missing, f"docs/card-language.md's builtin table lacks {missing}"


def test_topk_breaks_ties_towards_the_lower_index_on_both_targets():
    v = [1.0, 3.0, 3.0, 0.0, 3.0]
    for target, arr in targets():
        ops = _ops(target)
        assert np.asarray(ops.topk(arr(v), 3)).tolist() == [2, 3, 5], target


PRESENT = """Algorithm: y ← F(v | θ)
Input: v ∈ ℝ^{d}
Output: y ∈ ℝ^{d}
Hyperparameters:
  L ∈ ℕ from "t.block_count"
  d ∈ ℕ
  m ∈ {0,1}^{L} ≔ present("blk.{l-1}.extra.weight", L)
  q ∈ {0,1} ≔ present("last.weight")
Parameters:
  for l ∈ [L], in "blk.{l-1}.":
    w_l ∈ ℝ^{d} from "w.weight"
  for l ∈ [L], in "blk.{l-1}.", if m[l] = 1:
    u_l ∈ ℝ^{d} from "extra.weight"
1  y ← v
2  for l = 1, 2, …, L do
3    if m[l] ≠ 0 then y ← y ⊙ u_l
4  end
5  return y
"""


def test_present_reads_which_tensors_the_file_holds(tmp_path):
    """`present` is 1 exactly where the file stores the named tensor (per layer with a count); the
    conditional group then binds those tensors only; in steps, or without a file, it is refused."""
    from gguf_factory import write_gguf

    from toycards.checker import check
    from toycards.gguf.reader import open_gguf
    from toycards.lang.parse import parse
    from toycards.models.binding import bind, bind_values

    one = np.ones(4, np.float32)
    tensors = {"blk.0.w.weight": one, "blk.1.w.weight": one, "blk.2.w.weight": one, "blk.1.extra.weight": one}
    path = write_gguf(tmp_path / "p.gguf", {"t.block_count": 3}, tensors, arch="t")
    card = parse(PRESENT)
    assert check(card) == []
    bound = bind(card.main, open_gguf(path))
    assert not bound.problems, bound.problems
    assert bound.hyper["m"] == (0, 1, 0) and bound.hyper["q"] == 0
    assert {p.tensor for p in bound.params} == set(tensors)
    assert "bind the card to a file" in str(bind_values(card.main, {"L": 3, "d": 4}).problems[0].message)
    in_steps = parse(PRESENT.replace("1  y ← v", '1  y ← present("last.weight") · v'))
    assert any("not while it runs" in d.message for d in check(in_steps))
