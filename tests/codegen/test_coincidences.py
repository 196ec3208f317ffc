"""Cards whose generated code is easy to get right by coincidence only: where an axis of size 1,
or one as long as another, lets a wrong layout run and give the right numbers.

Each case is a small model card, held to the interpreter (tests/lang/test_interpreter.py) on both
targets at every batch size that could hide a misplaced axis (1, 2 and H, the number of heads)
and every length that could (1, H and d), with shapes equal exactly:

- the full pass, each sequence of a batch against the interpreter's pass over it alone;
- cached decoding (`decode`: a prefix, then one token at a time), for one sequence and for the
  whole batch through one cache;
- `last=True` (the last token's logits alone), without a cache and for a prefix through one.

The cases, by kind:

- a key and value that every head shares (multi-query attention written out), and likewise an
  argument shared by the columns of an implicit map (`g(X, u)` for `g` of two vectors);
- a vector computed from a matrix that holds the tokens (`M ← X · X^⊺`, then `M · X[:, 1]`);
- slices whose bounds read a map or head variable (`X[(h − 1)·d_h + 1 : h·d_h, t]`, what
  `rows(X, h, d_h)` means);
- a map whose value leaves out its own variable (`for j ∈ [n]: O[:, j] ← β`);
- a number per call in a map whose variable reads a block of rows, its axis a head's (DeepSeek
  V3's group scores `σ[g, t] ← top_sum(B[(g − 1)·m + 1 : g·m, t] | 2)`), written into entries of a
  matrix or a vector, with an entry `Z[g, t]` beside it; a column of a head's block;
- what a builtin reads of a matrix (its number of columns, the largest entry of each column);
- a number per column beside a matrix (`⟦x[t] = 2⟧ · W · X[:, t]`: a matrix per column), and rows
  `W[i, :]` stacked into a matrix.

The slices that have no array layout are refused at the sub-expression, with a hint naming
`rows(X, h, d_h)`.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
from card_functions import model_frame
from test_interpreter import HAS_TORCH, checked_models, decode

from toycards.checker import check
from toycards.codegen import generate_source
from toycards.errors import ToycardsError
from toycards.lang.parse import parse

N_V = 11

FRAME = model_frame(
    """
H ∈ ℕ = 4  from "{arch}.heads"
d ∈ ℕ = 8  from "{arch}.width"
d_h ∈ ℕ ≔ d / H
""",
    """
W_q ∈ ℝ^{d×d}  from "q.weight"
W_k ∈ ℝ^{d_h×d}  from "k.weight"
W_v ∈ ℝ^{d_h×d}  from "v.weight"
W_o ∈ ℝ^{d×d}  from "o.weight"
b ∈ ℝ^{d}  from "b.weight"
""",
    "a residual layer whose steps 4… each hold one case",
)

MASK = "Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧"
HEAD = """
Algorithm: Y ← head(Q, K, V | Mask)
/* one attention head, written out (no library kernel stands in for it) */
Input:
  Q ∈ ℝ^{k×ℓ_x}
  K, V ∈ ℝ^{k×ℓ_z}
Output: Y ∈ ℝ^{k×ℓ_x}
Hyperparameters: Mask ∈ {0,1}^{ℓ_z×ℓ_x}
1  S ← K^⊺ · Q
2  for t_z ∈ [ℓ_z], t_x ∈ [ℓ_x]: if ¬Mask[t_z, t_x] then S[t_z, t_x] ← −∞
3  return Y = V · softmax(S)
"""

TWO_VECTORS = """
Algorithm: y ← g(v, u)
/* called with a matrix for v: once per column (an implicit map), u the same for each */
Input: v, u ∈ ℝ^{n}
Output: y ∈ ℝ^{n}
1  return y = v ⊙ u + v
"""
MATRIX_TIMES = """
Algorithm: y ← f(v, A)
/* called with a matrix for v: once per column (an implicit map), A the same for each */
Input:
  v ∈ ℝ^{n}
  A ∈ ℝ^{n×n}
Output: y ∈ ℝ^{n}
1  return y = tanh(A · v)
"""

TOTAL = """
Algorithm: y ← total(v | n)
/* a number per call: the sum of the first n entries of a vector */
Input: v ∈ ℝ^{m}
Output: y ∈ ℝ
Hyperparameters: n ∈ ℕ
1  return y = Σ_{i=1}^{n} v[i]
"""

CASES = {  # name → (the card's own algorithms, steps 4…)
    # ── a key and value shared by every head ──
    "one K and V for every head": (
        "",
        f"""4  Q ← W_q · X
5  K ← W_k · X
6  V ← W_v · X
7  for h ∈ [H]: Y^h ← attention(rows(Q, h, d_h), K, V | {MASK})
8  X ← X + W_o · [Y^1; …; Y^H]""",
    ),
    "K^h and V^h the same for every head": (
        "",
        f"""4  Q ← W_q · X
5  for h ∈ [H]: K^h ← W_k · X
6  for h ∈ [H]: V^h ← W_v · X
7  for h ∈ [H]: Y^h ← attention(rows(Q, h, d_h), K^h, V^h | {MASK})
8  X ← X + W_o · [Y^1; …; Y^H]""",
    ),
    "one K, a V per head": (
        "",
        f"""4  Q ← W_q · X
5  K ← W_k · X
6  for h ∈ [H]: V^h ← h · (W_v · X)
7  for h ∈ [H]: Y^h ← attention(rows(Q, h, d_h), K, V^h | {MASK})
8  X ← X + W_o · [Y^1; …; Y^H]""",
    ),
    "rows(K, 1, d_h) for every head": (
        "",
        f"""4  Q ← W_q · X
5  K ← W_o · X
6  for h ∈ [H]: Y^h ← attention(rows(Q, h, d_h), rows(K, 1, d_h), rows(K, 2, d_h) | {MASK})
7  X ← X + W_o · [Y^1; …; Y^H]""",
    ),
    "one K and V, the card's own head": (
        HEAD,
        f"""4  Q ← W_q · X
5  K ← W_k · X
6  V ← W_v · X
7  for h ∈ [H]: Y^h ← head(rows(Q, h, d_h), K, V | {MASK})
8  X ← X + W_o · [Y^1; …; Y^H]""",
    ),
    "a vector beside the columns of an implicit map": (
        TWO_VECTORS,
        """4  u ← W_q · X[:, 1]
5  X ← X + g(X, u)""",
    ),
    "a token matrix beside the columns of an implicit map": (
        MATRIX_TIMES,
        """4  M ← X · X^⊺ / 10
5  X ← X + f(X, M)""",
    ),
    "a vector beside an implicit map per head": (
        TWO_VECTORS,
        """4  u ← W_k · X[:, 1]
5  for h ∈ [H]: Y^h ← g(rows(X, h, d_h), u)
6  X ← X + [Y^1; …; Y^H]""",
    ),
    # ── a vector from a matrix that holds the tokens ──
    "token matrix times a column": (
        "",
        """4  M ← X · X^⊺
5  c ← M · X[:, 1]
6  X ← X + c · 1^⊺""",
    ),
    "a row times a token matrix": (
        "",
        """4  M ← X · X^⊺
5  r ← X[:, ℓ]^⊺ · M
6  X ← X + r^⊺ · 1^⊺ / 10""",
    ),
    "two columns' outer product": (
        "",
        """4  M ← X[:, ℓ] · X[:, 1]^⊺
5  X ← X + M · X""",
    ),
    "token matrix times each column": (
        "",
        """4  M ← X · X^⊺
5  for t ∈ [ℓ]: y_t ← M · X[:, t]
6  X ← X + [y_1, …, y_ℓ] / 10""",
    ),
    "a transposed parameter times a vector": (
        "",
        """4  p ← softmax(U · X[:, 1])
5  c ← E · p
6  X ← X + c · 1^⊺""",
    ),
    "token matrix times a vector per head": (
        "",
        """4  M ← X · X^⊺
5  for h ∈ [H]: z^h ← M · (W_q · X[:, 1] + h · b)
6  X ← X + (z^1 + z^H) · 1^⊺ / 10""",
    ),
    "the number of columns of a matrix": (
        "",
        """4  n ← length(X)
5  X ← X + (n · b) · 1^⊺ / 10""",
    ),
    "the number of columns of a transposed parameter": (
        "",
        """4  n ← length(E)
5  X ← X + (n · b) · 1^⊺ / 10""",
    ),
    "the largest entry of each column, per head": (
        "",
        """4  for h ∈ [H]: m^h ← max(rows(X, h, d_h))
5  X ← X + b · (m^1 + m^2)^⊺""",
    ),
    "a number per column times a matrix, then the column": (
        "",
        """4  for t ∈ [ℓ]: Y[:, t] ← X[:, t] + ⟦x[t] = 2⟧ · W_q · X[:, t]
5  X ← Y""",
    ),
    "an entry per column times a token matrix, then the column": (
        "",
        """4  M ← X · X^⊺ / 10
5  for t ∈ [ℓ]: Y[:, t] ← X[:, t] + X[1, t] · M · X[:, t]
6  X ← Y""",
    ),
    "rows picked one by one and stacked": (
        "",
        """4  X ← X + W_q[:, 1:2] · [W_q[2, :]; W_q[3, :]] · X""",
    ),
    "a row stacked on a block of rows": (
        "",
        """4  X ← X + W_q[:, 1:3] · [W_q[2, :]; W_q[3:4, :]] · X""",
    ),
    # ── slices whose bounds read a map or head variable ──
    "rows of a column by head bounds": (
        "",
        """4  Q ← W_q · X
5  for h ∈ [H], t ∈ [ℓ]: Q̂^h[:, t] ← tanh(Q[(h − 1)·d_h + 1 : h·d_h, t])
6  X ← X + [Q̂^1; …; Q̂^H]""",
    ),
    "a block of rows per head": (
        "",
        """4  Q ← W_q · X
5  for h ∈ [H]: Y^h ← tanh(Q[(h − 1)·d_h + 1 : h·d_h, :])
6  X ← X + [Y^1; …; Y^H]""",
    ),
    "a parameter's block per head": (
        "",
        """4  for h ∈ [H]: Y^h ← W_q[(h − 1)·d_h + 1 : h·d_h, :] · X
5  X ← X + tanh([Y^1; …; Y^H])""",
    ),
    "a vector's block per head": (
        "",
        """4  q ← W_q · X[:, ℓ]
5  for h ∈ [H]: z^h ← tanh(q[(h − 1)·d_h + 1 : h·d_h])
6  X ← X + [z^1; …; z^H] · 1^⊺""",
    ),
    "rows(q, h, d_h) of a vector": (
        "",
        """4  q ← W_q · X[:, ℓ]
5  for h ∈ [H]: z^h ← tanh(rows(q, h, d_h))
6  X ← X + [z^1; …; z^H] · 1^⊺""",
    ),
    "overlapping windows of a vector": (
        "",
        """4  q ← W_q · X[:, ℓ]
5  for i ∈ [H]: z_i ← q[i : i + 1]
6  s ← [z_1; …; z_H]^⊺ · [z_1; …; z_H]
7  X ← X + (s · b) · 1^⊺""",
    ),
    "a vector's entries by token position": (
        "",
        """4  for t ∈ [ℓ]: Y[:, t] ← W_q[:, 1:1] · (b[t : t] ⊙ X[1:1, t])
5  X ← X + Y""",
    ),
    "blocks from an offset": (
        "",
        """4  Q ← W_q · X
5  for h ∈ [H − 1], t ∈ [ℓ]: Q̂^h[:, t] ← Q[h·d_h + 1 : (h + 1)·d_h, t]
6  X ← X + W_k^⊺ · (Q̂^1 + Q̂^2)""",
    ),
    "a block of columns per head": (
        "",
        """4  for h ∈ [H]: Y^h ← W_q[1:d_h, (h − 1)·d_h + 1 : h·d_h]
5  for h ∈ [H]: Z^h ← Y^h · rows(X, h, d_h)
6  X ← X + [Z^1; …; Z^H]""",
    ),
    "slice bounds by a Σ index": (
        "",
        """4  Q ← W_q · X
5  S ← Σ_{i=1}^{H} Q[(i − 1)·d_h + 1 : i·d_h, :]
6  X ← X + W_k^⊺ · S""",
    ),
    "attention of a block by head bounds": (
        "",
        f"""4  Q ← W_q · X
5  K ← W_k · X
6  V ← W_v · X
7  for h ∈ [H]: Y^h ← attention(Q[(h − 1)·d_h + 1 : h·d_h, :], K, V | {MASK})
8  X ← X + W_o · [Y^1; …; Y^H]""",
    ),
    # ── a number per call in a map whose variable reads a block of rows (a head's axis) ──
    "a call's number per head and column": (  # DeepSeek V3's group scores: once […, H, ℓ, 1]
        TOTAL,
        """4  for g ∈ [H], t ∈ [ℓ]: σ[g, t] ← total(X[(g − 1)·d_h + 1 : g·d_h, t] | 2)
5  X ← X + W_o[:, 1:H] · σ""",
    ),
    "a call's number per head and column, plus an entry": (
        TOTAL,
        """4  Z ← W_o[1:H, :] · X
5  for g ∈ [H], t ∈ [ℓ]: σ[g, t] ← Z[g, t] + total(X[(g − 1)·d_h + 1 : g·d_h, t] | 2)
6  X ← X + W_o[:, 1:H] · σ""",
    ),
    "a call's number per head, entries of a vector": (
        TOTAL,
        """4  for h ∈ [H]: z[h] ← total(X[(h − 1)·d_h + 1 : h·d_h, 1] | 2)
5  X ← X + W_o[:, 1:H] · z · 1^⊺""",
    ),
    "a column of a head's block, per head": (  # once […, H, d_h]: the heads' axis among the tokens'
        "",
        """4  for h ∈ [H]: y^h ← tanh(rows(X, h, d_h)[:, 1])
5  X ← X + [y^1; …; y^H] · 1^⊺""",
    ),
    "a call's number per head of a column of its block": (
        TOTAL,
        """4  for h ∈ [H], t ∈ [ℓ]: σ[h, t] ← total(rows(X, h, d_h)[:, 1] | 2)
5  X ← X + W_o[:, 1:H] · σ""",
    ),
    # ── a call per head and column whose arguments carry some of the map's variables ──
    "a call per head and column, one argument per column only": (
        TWO_VECTORS,
        """4  for h ∈ [H], t ∈ [ℓ]: Z^h[:, t] ← g(rows(X, h, d_h)[:, t], W_k · X[:, t])
5  X ← X + [Z^1; …; Z^H]""",
    ),
    "a call per head and column, one argument per head only": (
        TWO_VECTORS,
        """4  for h ∈ [H], t ∈ [ℓ]: Z^h[:, t] ← g(rows(X, h, d_h)[:, t], rows(b, h, d_h))
5  X ← X + [Z^1; …; Z^H]""",
    ),
    "a call per head and column, a number per column": (
        TOTAL,
        """4  for h ∈ [H], t ∈ [ℓ]: Z^h[:, t] ← total(W_k · X[:, t] | 2) · rows(X, h, d_h)[:, t]
5  X ← X + [Z^1; …; Z^H]""",
    ),
    # ── a window of columns that moves with the map's variable: a matrix per column ──
    "a window of columns per column": (
        "",
        """4  X̄ ← [b, b, X]
5  for t ∈ [ℓ]: G[:, t] ← X̄[:, t : t + 2] · W_q[1:3, 1]
6  X ← X + G""",
    ),
    # ── a map whose value leaves out its variable ──
    "every column β, computed per sequence": (
        "",
        """4  β ← W_q · X[:, 1]
5  for j ∈ [ℓ]: O[:, j] ← β
6  X ← X + O""",
    ),
    "every column a parameter": (
        "",
        """4  for j ∈ [ℓ]: O[:, j] ← b
5  X ← X + O""",
    ),
    "every column computed in the map": (
        "",
        """4  for j ∈ [ℓ]: O[:, j] ← tanh(W_q · X[:, 1])
5  X ← X + O""",
    ),
    "every member β": (
        "",
        """4  β ← W_q · X[:, 1]
5  for t ∈ [ℓ]: c_t ← β
6  X ← X + [c_1, …, c_ℓ]""",
    ),
    "a head's columns all alike": (
        "",
        """4  q ← W_q · X[:, 1]
5  for h ∈ [H], t ∈ [ℓ]: Q̂^h[:, t] ← rows(q, h, d_h)
6  X ← X + [Q̂^1; …; Q̂^H]""",
    ),
    "every head alike": (
        "",
        """4  for h ∈ [H], t ∈ [ℓ]: Q̂^h[:, t] ← tanh(X[1:d_h, t])
5  X ← X + [Q̂^1; …; Q̂^H]""",
    ),
    # ── one token: a d×1 matrix transposed is 1×d, not a row (the interpreter once took it for one) ──
    "a matrix transposed twice": ("", "4  X ← X + (X^⊺)^⊺ / 2"),
    "the tokens' products with the last one": (
        "",
        "4  u ← X^⊺ · X[:, ℓ]\n5  X ← X + X · softmax(u) · 1^⊺ / 4",
    ),
}

SMALL = """toycards 1

Algorithm: P ← Net(x | θ)
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{{N_V×ℓ}}
Hyperparameters:
  d ∈ ℕ = 4  from "{{arch}}.embedding_length"
  H ∈ ℕ = {heads}  from "{{arch}}.attention.head_count"
  N_V ∈ ℕ = 11
  k ∈ ℕ ≔ d / H
Parameters:
  E ∈ ℝ^{{d×N_V}}  from "token_embd.weight"^⊺
  W_q ∈ ℝ^{{d×d}}  from "q.weight"
  W_o ∈ ℝ^{{d×d}}  from "o.weight"
  W_k ∈ ℝ^{{k×d}}  from "k.weight"
  W_v ∈ ℝ^{{k×d}}  from "v.weight"
  c_a ∈ ℝ^{{2}}  from "a.mix"
  U ∈ ℝ^{{N_V×d}}  from "output.weight"
1  ℓ ← length(x)
2  for t ∈ [ℓ]: e_t ← E[:, x[t]]
3  X ← [e_1, …, e_ℓ]
{steps}
   return P = softmax(U · X)
"""

# cards that random cards (tests/helpers/random_cards.py) found, shrunk: (H, steps 4…) in SMALL
FOUND = {
    "random: multi-query attention, two heads": (
        2,
        f"""4  Q ← W_q · X
5  K ← W_k · X
6  V ← W_v · X
7  for h ∈ [H]: Y^h ← attention(rows(Q, h, k), K, V | {MASK})
8  X ← X + W_o · [Y^1; …; Y^H]""",
    ),
    "random: multi-query attention, one head": (
        1,
        f"""4  Q ← W_q · X
5  K ← W_k · X
6  V ← W_v · X
7  for h ∈ [H]: Y^h ← attention(rows(Q, h, k), K, V | {MASK})
8  X ← X + W_o · [Y^1; …; Y^H]""",
    ),
    "random: a d×d matrix over the tokens times a column": (
        1,
        """4  M ← X · X^⊺
5  u ← tanh(M · X[:, 1] / (d · ℓ))
6  X ← X + u · 1^⊺""",
    ),
    "random: an ℓ×ℓ matrix's column": (
        1,
        """4  G ← X^⊺ · X / d
5  u ← tanh(X · G[:, 1] / ℓ)
6  X ← X + u · 1^⊺""",
    ),
    "random: rows of a column by head bounds": (
        2,
        """4  for h ∈ [H], t ∈ [ℓ]: Y^h[:, t] ← tanh(X[(h − 1)·k + 1 : h·k, t])
5  X ← X + [Y^1; …; Y^H]""",
    ),
    "random: a block of rows per head": (
        2,
        """4  for h ∈ [H]: Y^h ← tanh(X[(h − 1)·k + 1 : h·k, :])
5  X ← X + [Y^1; …; Y^H]""",
    ),
    "random: a parameter's block per head": (
        2,
        """4  for h ∈ [H]: Y^h ← tanh(W_q[(h − 1)·k + 1 : h·k, :] · X)
5  X ← X + [Y^1; …; Y^H]""",
    ),
    "random: row pairs": (
        2,
        """4  for i ∈ [d/2]: Y^i ← tanh(X[2·i − 1 : 2·i, :])
5  X ← X + [Y^1; …; Y^{d/2}]""",
    ),
    "random: every column β": (
        1,
        """4  β ← tanh(W_q · X[:, 1])
5  for j ∈ [ℓ]: O[:, j] ← β
6  X ← X + O""",
    ),
    "random: a matrix of each column times a vector": (
        1,
        """4  for t ∈ [ℓ]: u_t ← tanh([X[:, t], W_q · X[:, t]] · c_a)
5  X ← X + [u_1, …, u_ℓ]""",
    ),
}

TARGETS = ("numpy", pytest.param("torch", marks=pytest.mark.skipif(not HAS_TORCH, reason="no torch")))


def card_text(name: str) -> str:
    if name in FOUND:
        heads, steps = FOUND[name]
        return SMALL.format(heads=heads, steps=steps)
    algorithms, steps = CASES[name]
    return FRAME.format(algorithms=algorithms, steps=steps)


def token_ids(batch: int, length: int) -> np.ndarray:
    return np.random.default_rng(100 * batch + length).integers(0, N_V, (batch, length))


@functools.cache
def reference(name: str):
    """The interpreter's model of a case, with the weights every target's model gets too."""
    return checked_models(card_text(name), "numpy")["reference"]


@functools.cache
def wanted(name: str, batch: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """The interpreter's full pass over each sequence alone, and its cached decoding of each
    (prefix ⌈length/2⌉): [batch, length, N_V] each."""
    ref, ids = reference(name), token_ids(batch, length)
    full = np.stack([ref(ids[i][None])[0] for i in range(batch)])
    cached = np.stack([decode(ref, ids[i], prefill(length)) for i in range(batch)])
    return full, cached.astype(np.float64)


def prefill(length: int) -> int:
    return max(1, length // 2)


def decode_batch(model, ids: np.ndarray) -> np.ndarray:
    """`decode` for a batch: every sequence through one cache at once."""
    p, cache = prefill(ids.shape[1]), model.new_cache()
    parts = [model._forward_numpy(ids[:, :p], cache)]
    parts += [model._forward_numpy(ids[:, t : t + 1], cache) for t in range(p, ids.shape[1])]
    return np.concatenate(parts, axis=1)


def assert_same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal shapes, and |Δ| ≤ 2e-5·max(1, max |want|) (float32 against float64), else the worst."""
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    diff = np.abs(np.asarray(got, np.float64) - want)
    bound = 2e-5 * max(1.0, float(np.abs(want).max()))
    if not (diff <= bound).all():  # NaN fails too
        at = np.unravel_index(np.nanargmax(np.where(np.isnan(diff), np.inf, diff)), diff.shape)
        raise AssertionError(
            f"{what}: |Δ| = {diff[at]:.3g} > {bound:.2g} at {at} (got {got[at]}, want {want[at]})"
        )


@pytest.mark.filterwarnings("ignore::toycards.runtime.model_base.CacheRecomputes")
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", [*CASES, *FOUND])
def test_generated_module_equals_the_interpreter(name, target):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        models = checked_models(card_text(name), target)
    m = models[target]
    heads, width = m.hp["H"], m.hp["d"]
    for batch in sorted({1, 2, heads}):
        for length in sorted({1, heads, width}):
            ids, (full, cached) = token_ids(batch, length), wanted(name, batch, length)
            what = f"{name}, {target}, batch {batch}, length {length}"
            assert_same(m._forward_numpy(ids, None), full, f"{what}: full pass")
            assert_same(m._forward_numpy(ids, None, last=True), full[:, -1:], f"{what}: last token alone")
            if length == 1:
                continue
            assert_same(decode(m, ids[0], prefill(length))[None], cached[:1], f"{what}: cached decoding")
            assert_same(decode_batch(m, ids), cached, f"{what}: cached decoding of the batch")
            p = prefill(length)
            got = m._forward_numpy(ids[:, :p], m.new_cache(), last=True)
            assert_same(got, cached[:, p - 1 : p], f"{what}: last token of the prefix, cached")


REFUSED = {  # steps → (the text under the caret, a fragment of the message)
    """4  Q ← W_q · X
5  for h ∈ [H], t ∈ [ℓ]: Q̂^h[:, t] ← tanh(Q[1 : h·d_h, t])
6  X ← X + W_q · Q""": ("Q[1 : h·d_h, t]", "a different size for each h"),
    """4  for h ∈ [H]: Y^h ← W_q[(h − 1)·d_h + 1 : h·d_h, (h − 1)·d_h + 1 : h·d_h]
5  for h ∈ [H]: Z^h ← Y^h · rows(X, h, d_h)
6  X ← X + [Z^1; …; Z^H]""": ("W_q[(h − 1)·d_h + 1 : h·d_h, (h − 1)·d_h + 1 : h·d_h]", "both move with h"),
    """4  for h ∈ [H], t ∈ [ℓ]: Q̂^h[:, t] ← tanh(X[h + t : h + t + 1, t])
5  X ← X + W_q · X""": ("X[h + t : h + t + 1, t]", "moves with h and t at once"),
    """4  for t ∈ [ℓ]: y_t ← X[t : t + 1, t]
5  X ← X + W_q · X""": ("X[t : t + 1, t]", "a diagonal"),
    """4  for h ∈ [H]: z^h ← W_q[2, (h − 1)·d_h + 1 : h·d_h] · rows(X, h, d_h)
5  X ← X + W_q[:, 1:H] · [z^1; …; z^H]""": ("(h − 1)·d_h + 1 : h·d_h", "moves with h"),
}


@pytest.mark.parametrize("steps", list(REFUSED))
def test_slices_without_an_array_layout_are_refused_at_the_slice(steps):
    text = FRAME.format(algorithms="", steps=steps)
    assert check(parse(text)) == []  # the checker lets it through: codegen is what refuses it
    with pytest.raises(ToycardsError) as err:
        generate_source(parse(text), "numpy")
    under, fragment = REFUSED[steps]
    (d,) = err.value.diagnostics
    line = text.splitlines()[d.span.line - 1]
    assert line[d.span.col - 1 :].startswith(under), (line, d.span.col)
    assert fragment in d.message and "rows(X, h, d_h)" in d.hint, (d.message, d.hint)
