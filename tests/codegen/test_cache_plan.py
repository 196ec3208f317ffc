"""The KV cache is derived from what each step reads, not from an algorithm's name.

Each card here is a tiny model with random weights, run by the interpreter (`target="reference"`,
the definition: its cached decoding is the full pass over every token so far) and by both
generated targets. For every card: the full pass equals the interpreter's, a prefix then
token-by-token decoding through one cache equals the interpreter's full pass, and a batch of
two sequences equals each alone.

- Cards the cache can follow (a card's own attention algorithm, a causal condition written as
  an entry write, a sliding window, rotary embedding on part of each head stacked with `[A; B]`)
  keep a real KV cache: `Model.RECOMPUTE` is empty, and cached decoding computes only the new
  tokens.
- Cards it cannot (a fixed token's column, a non-causal mask, the number of tokens ℓ, attention
  whose keys share the queries' length) say so once and recompute, exactly; the reason names
  the card line and the sub-expression.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from test_interpreter import TARGETS, checked_models, close_to_reference, decode
from test_models_oracle import ids_for

from toycards.runtime.model_base import CacheRecomputes

FRAME = """toycards 1
{algorithms}
Algorithm: P ← Net(x | θ)
/* token embedding, a few residual steps, unembedding */
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{{N_V×ℓ}}
Hyperparameters:
  L ∈ ℕ = 2  from "{{arch}}.block_count"
  d ∈ ℕ = 8  from "{{arch}}.width"
  N_V ∈ ℕ = 11
  k ∈ ℕ ≔ d / 2
Parameters:
  E ∈ ℝ^{{d×N_V}}  from "token_embd.weight"^⊺
  for l ∈ [L], in "blk.{{l-1}}.":
    A_l ∈ ℝ^{{d×d}}  from "a.weight"
    B_l ∈ ℝ^{{d×d}}  from "b.weight"
  U ∈ ℝ^{{N_V×d}}  from "output.weight"
1  ℓ ← length(x)
2  for t ∈ [ℓ]: e_t ← E[:, x[t]]
3  X ← [e_1, …, e_ℓ]
{steps}
   return P = softmax(U · X)
"""

OWN_ATTENTION = """
Algorithm: Ṽ ← Scores(Q, K, V | Mask)
/* attention written out in the card: scaled scores, masked, softmax over the context */
Input:
  Q ∈ ℝ^{n×ℓ_x}  ▷ queries
  K ∈ ℝ^{n×ℓ_z}  ▷ keys: the context
  V ∈ ℝ^{n×ℓ_z}
Output: Ṽ ∈ ℝ^{n×ℓ_x}
Hyperparameters: Mask ∈ {0,1}^{ℓ_z×ℓ_x}
1  S ← K^⊺ · Q / √n · 2
2  for t_z ∈ [ℓ_z], t_x ∈ [ℓ_x] do
3    if ¬Mask[t_z, t_x] then S[t_z, t_x] ← −∞
4  end
5  return Ṽ = V · softmax(S)
"""

SELF_CAUSAL = """
Algorithm: Ṽ ← Causal(Q, K, V)
/* attention that masks the future itself, by comparing positions */
Input:
  Q ∈ ℝ^{n×ℓ_x}
  K ∈ ℝ^{n×ℓ_z}
  V ∈ ℝ^{n×ℓ_z}
Output: Ṽ ∈ ℝ^{n×ℓ_x}
1  S ← K^⊺ · Q
2  for t_z ∈ [ℓ_z], t_x ∈ [ℓ_x] do
3    if t_z > t_x then S[t_z, t_x] ← −∞
4  end
5  return Ṽ = V · softmax(S)
"""

SAME_LENGTH = """
Algorithm: Ṽ ← Square(Q, K, V | Mask)
/* attention whose keys are declared with the queries' own length: no context to extend */
Input:
  Q ∈ ℝ^{n×ℓ}
  K ∈ ℝ^{n×ℓ}
  V ∈ ℝ^{n×ℓ}
Output: Ṽ ∈ ℝ^{n×ℓ}
Hyperparameters: Mask ∈ {0,1}^{ℓ×ℓ}
1  S ← K^⊺ · Q
2  for t_z ∈ [ℓ], t_x ∈ [ℓ] do
3    if ¬Mask[t_z, t_x] then S[t_z, t_x] ← −∞
4  end
5  return Ṽ = V · softmax(S)
"""


def layers(body: str) -> str:
    """Steps 4… : `body` (lines of one layer, may use l) inside `for l = 1, 2, …, L do … end`."""
    lines = [f"{4 + i}    {line}" for i, line in enumerate(body.strip().splitlines(), start=1)]
    return "\n".join(["4  for l = 1, 2, …, L do", *lines, f"{5 + len(lines)}  end"])


CACHED = {  # card → (algorithms, layer body)
    "own attention with a causal mask (case 6)": (
        OWN_ATTENTION,
        "X ← X + Scores(A_l · X, B_l · X, X | Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧)",
    ),
    "own attention with a sliding window": (
        OWN_ATTENTION,
        "X ← X + Scores(A_l · X, B_l · X, X | Mask[t_z, t_x] = ⟦t_x − 2 < t_z ∧ t_z ≤ t_x⟧)",
    ),
    "attention that masks by comparing positions": (SELF_CAUSAL, "X ← X + Causal(A_l · X, B_l · X, X)"),
    "rotary part of each head stacked on the rest (case 2)": (
        "",
        """Q ← A_l · X
for t ∈ [ℓ]: Q̃[:, t] ← Q[1:k, t] · cos(t)
Q̂ ← [Q̃; Q[k + 1:d, :]]
X ← X + attention(Q̂, Q̂, B_l · X | Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧)""",
    ),
}

RECOMPUTED = {  # card → (algorithms, layer body, the text the reason quotes)
    "a fixed token's column": ("", "X ← X + tanh(A_l · X[:, 1]) · 1^⊺", "X[:, 1]"),
    "a non-causal mask": (
        "",
        "X ← X + attention(A_l · X, B_l · X, X | Mask[t_z, t_x] = 1)",
        "Mask[t_z, t_x] = 1",
    ),
    "the number of tokens as a value": ("", "X ← X + tanh(A_l · X) / ℓ", "ℓ"),
    "keys with the queries' length": (
        SAME_LENGTH,
        "X ← X + Square(A_l · X, B_l · X, X | Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧)",
        "K^⊺ · Q",
    ),
}

NOT_CAUSAL = {"a non-causal mask", "the number of tokens as a value"}  # a token's logits see later tokens


def models(algorithms: str, body: str, target: str) -> dict[str, object]:
    return checked_models(FRAME.format(algorithms=algorithms, steps=layers(body)), target)


def assert_exact(m: dict[str, object], target: str, what: str, causal: bool) -> None:
    """Full pass, cached decoding and a batch of two, each equal to the interpreter's. The
    interpreter's cached decoding is its full pass over the tokens so far: for a causal card that
    is the final full pass at every position; for another, position t sees only tokens 1…t."""
    ids = np.asarray(ids_for(11, 7))
    want = m["reference"](ids)
    assert np.abs(want).max() > 0.3, "weights too small for a meaningful comparison"
    close_to_reference(m[target].logits(list(ids)), want, f"{what}, {target}, full pass")
    cached = decode(m["reference"], ids, 3)
    close_to_reference(decode(m[target], ids, 3), cached, f"{what}, {target}, cached")
    if causal:
        close_to_reference(cached, want, f"{what}, the interpreter's cache against its full pass")
    other = ids[::-1].copy()
    both = np.asarray(m[target]._forward_numpy(np.stack([ids, other]), None))
    close_to_reference(both[0], want, f"{what}, {target}, batch row 1")
    close_to_reference(both[1], m["reference"](other), f"{what}, {target}, batch row 2")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CACHED))
def test_the_cache_follows_cards_that_read_earlier_tokens_causally(name, target):
    algorithms, body = CACHED[name]
    m = models(algorithms, body, target)
    assert m[target].RECOMPUTE == "", m[target].RECOMPUTE
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheRecomputes)
        assert_exact(m, target, name, causal=True)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(RECOMPUTED))
def test_cards_the_cache_cannot_follow_recompute_exactly_and_say_why_once(name, target):
    algorithms, body, quoted = RECOMPUTED[name]
    m = models(algorithms, body, target)
    assert f"`{quoted}`" in m[target].RECOMPUTE, m[target].RECOMPUTE
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert_exact(m, target, name, causal=name not in NOT_CAUSAL)
    notes = [w for w in said if issubclass(w.category, CacheRecomputes)]
    assert len(notes) == 1 and quoted in str(notes[0].message), [str(w.message) for w in said]


def test_cached_decoding_of_a_context_reader_reads_only_the_new_tokens():
    """The cache is real for a card's own attention: a decode step's scores cover every token so
    far while its queries are the new token alone (the shapes the generated function sees)."""
    algorithms, body = CACHED["own attention with a causal mask (case 6)"]
    m = models(algorithms, body, "numpy")["numpy"]
    module = type(m).forward.__globals__  # the generated module's namespace
    seen = []
    original = module["Scores"]

    def spy(Q, K, V, *rest, **kw):
        seen.append((Q.shape[-2], K.shape[-2]))  # tokens (code rows) of the queries and of the keys
        return original(Q, K, V, *rest, **kw)

    module["Scores"] = spy
    try:
        decode(m, np.asarray(ids_for(11, 5)), 3)
    finally:
        module["Scores"] = original
    assert seen == [(3, 3), (3, 3), (1, 4), (1, 4), (1, 5), (1, 5)], seen
