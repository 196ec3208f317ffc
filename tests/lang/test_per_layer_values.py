"""Per-layer hyperparameters and conditional parameter groups, bound and run: the reference
interpreter, the numpy and torch modules, and the binder's one-line refusals.

Oracle: a hand-computed model. The toy card's block l adds W_c^l · X where n_kv[l] = 0 and adds
H_kv · X (H_kv = max(n_kv)) elsewhere, so its logits are W_e^⊺ · (Π of the chosen maps) · e, computed
here with NumPy from the same tensors.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf_factory import V, typed, write_gguf

from toycards import generate_source
from toycards.errors import ToycardsError
from toycards.inspect.describe import describe
from toycards.lang.parse import parse
from toycards.models.load import load

CARD = parse("""\
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
1  for t ∈ [ℓ]: e_t ← W_e[:, x[t]]
2  X ← [e_1, …, e_ℓ]  ∷ ℝ^{d_e×ℓ}
3  for l = 1, 2, …, L do
4    if n_kv[l] = 0 then
5      X ← X + W_c^l · X
6    else
7      X ← X · (1 + H_kv)
8    end
9  end
10 return P = softmax(W_e^⊺ · X)
""")
D, N_V = 8, 16


def toy_file(path, n_kv, conv_layers):
    rng = np.random.default_rng(0)
    tensors = {"token_embd.weight": rng.standard_normal((N_V, D)).astype(np.float32)}
    for i in conv_layers:
        tensors[f"blk.{i}.conv.weight"] = (0.2 * rng.standard_normal((D, D))).astype(np.float32)
    kv = {"toy.block_count": typed(3, V.UINT32), "toy.embedding_length": typed(D, V.UINT32)}
    kv["toy.attention.head_count_kv"] = n_kv
    return write_gguf(path, kv=kv, tensors=tensors, arch="toy"), tensors


def by_hand(tensors, n_kv, ids):
    w_e = tensors["token_embd.weight"].astype(np.float64)
    x = w_e[ids].T
    for i, n in enumerate(n_kv):
        x = x + tensors[f"blk.{i}.conv.weight"] @ x if n == 0 else x * (1 + max(n_kv))
    return (w_e @ x).T


@pytest.mark.parametrize("target", ["reference", "numpy", "torch"])
def test_layers_follow_the_per_layer_array(tmp_path, target):
    path, tensors = toy_file(tmp_path / "toy.gguf", typed([0, 2, 0], V.ARRAY, V.UINT32), (0, 2))
    ids = [1, 5, 9, 3]
    got = np.asarray(load(CARD, weights=str(path), target=target).logits(ids))
    np.testing.assert_allclose(got, by_hand(tensors, [0, 2, 0], ids), rtol=1e-4, atol=1e-4)


def test_an_entry_is_a_python_list_lookup():
    for target in ("numpy", "torch"):
        src = generate_source(CARD, target)
        assert "n_kv = self.hp['n_kv']" in src and "if n_kv[l - 1] == 0:" in src, target


def test_a_single_number_stands_for_every_layer(tmp_path):
    """get_key_or_arr: a scalar head_count_kv of 0 makes every block take the first branch."""
    path, tensors = toy_file(tmp_path / "toy.gguf", typed(0, V.UINT32), (0, 1, 2))
    ids = [2, 7]
    np.testing.assert_allclose(
        load(CARD, weights=str(path)).logits(ids), by_hand(tensors, [0, 0, 0], ids), atol=1e-4
    )


def test_refusals_are_one_line(tmp_path):
    short, _ = toy_file(tmp_path / "short.gguf", typed([0, 2], V.ARRAY, V.UINT32), (0, 2))
    with pytest.raises(ToycardsError, match=r"n_kv has 2 entries, but L = 3 layers"):
        load(CARD, weights=str(short))
    missing, _ = toy_file(tmp_path / "missing.gguf", typed([0, 2, 0], V.ARRAY, V.UINT32), (0, 1))
    with pytest.raises(ToycardsError, match=r"tensor 'blk\.2\.conv\.weight' is missing .*layer 3 holds") as e:
        load(CARD, weights=str(missing))
    assert "\n" not in str(e.value).split(" (card")[0]


def test_describe_shows_the_array_and_reads_back(tmp_path):
    path, tensors = toy_file(tmp_path / "toy.gguf", typed([0, 2, 0], V.ARRAY, V.UINT32), (0, 2))
    card_path = tmp_path / "toy.card"
    card_path.write_text(str(CARD), encoding="utf-8")
    text = str(describe(str(path), card=str(card_path)))
    assert "n_kv ∈ ℕ^{L} = [0, 2, 0]" in text and "H_kv ∈ ℕ = 2" in text
    ids = [4, 4, 1]
    np.testing.assert_allclose(
        load(parse(text), weights=str(path)).logits(ids), by_hand(tensors, [0, 2, 0], ids), atol=1e-4
    )
