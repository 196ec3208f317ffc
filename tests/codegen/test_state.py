"""Decoder state (`State:` blocks), column writes in sequential loops, token offsets, running sums,
`zeros` and `filled`: what docs/card-language.md's "State" section promises.

Oracles: hand-written NumPy and torch loops for the recurrences themselves, and the reference
interpreter (float64) for whole models, which the generated modules must equal on both targets at
batch 1, 2 and 3, at lengths 1, 3 and 8, in a full pass, in cached decoding and for the last
token alone. A streaming card decodes with no `CacheRecomputes` warning and a cache whose size
does not grow with the context.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from card_functions import generated_function, model_frame
from test_interpreter import HAS_TORCH, checked_models, decode

from toycards.checker import check
from toycards.lang import ir
from toycards.lang.interpret import run
from toycards.lang.parse import parse
from toycards.lang.printer import render_card
from toycards.library import library_card
from toycards.runtime.context import KVCache
from toycards.runtime.model_base import CacheRecomputes

TARGETS = ("numpy", pytest.param("torch", marks=pytest.mark.skipif(not HAS_TORCH, reason="no torch")))

RUNNING = """
Algorithm: Y ← running_sum(X)
/* Each column is the sum of the columns so far */
Input: X ∈ ℝ^{d×ℓ}
Output: Y ∈ ℝ^{d×ℓ}
State: s ∈ ℝ^{d}
1  for t = 1, …, ℓ do
2    s ← s + X[:, t]
3    Y[:, t] ← s
4  end
5  return Y
"""

PREVIOUS = """
Algorithm: Y ← difference(X)
/* Each column less the one before it (zeros before the first) */
Input: X ∈ ℝ^{d×ℓ}
Output: Y ∈ ℝ^{d×ℓ}
State: p ∈ ℝ^{d}  ▷ the previous column
1  for t = 1, …, ℓ do
2    Y[:, t] ← X[:, t] − p
3    p ← X[:, t]
4  end
5  return Y
"""

# a local carried from token to token: under the cache it would restart, so the module rereads
NOT_STREAMING = """
Algorithm: Y ← leaky(X)
/* A running sum kept in a local, not a State */
Input: X ∈ ℝ^{d×ℓ}
Output: Y ∈ ℝ^{d×ℓ}
State: p ∈ ℝ^{d}
1  s ← zeros(d)
2  for t = 1, …, ℓ do
3    s ← s + X[:, t]
4    Y[:, t] ← s + p
5  end
6  return Y
"""

FRAME = model_frame(
    'd ∈ ℕ = 6  from "{arch}.width"',
    """
w ∈ ℝ^{d×4}  from "conv.weight"
b ∈ ℝ^{d}  from "conv.bias"
A ∈ ℝ^{d×3}  from "a.weight"
D ∈ ℝ^{d}  from "d.bias"
W_b ∈ ℝ^{3×d}  from "b.weight"
W_c ∈ ℝ^{3×d}  from "c.weight"
""",
)

MODELS = {  # name → (algorithms, steps)
    "conv": ("", "4  X ← X + causal_conv(X | w, b)"),
    "scan": ("", "4  X ← X + selective_scan(X, sigmoid(X), W_b · X, W_c · X | −(A ⊙ A), D)"),
    "conv then scan": (
        "",
        "4  V ← tanh(causal_conv(X | w, b))\n5  X ← X + selective_scan(V, sigmoid(X), W_b · V, W_c · X | −(A ⊙ A), D)",
    ),
    "state in a layer loop": (
        RUNNING + PREVIOUS,
        "4  for l = 1, …, 2 do\n5    X ← X + running_sum(X) / 4 − difference(X)\n6  end",
    ),
    "zeros and filled": (
        "",
        "4  X ← X + zeros(d, ℓ) + filled(2, d, ℓ) ⊙ X + [zeros(d), filled(1, d, ℓ)][:, 1:ℓ]",
    ),
    "columns into zeros": (
        "",
        "4  X̄ ← [zeros(d), zeros(d), X]\n5  Y ← zeros(d, ℓ)\n6  for t = 1, …, ℓ do\n"
        "7    Y[:, t] ← X̄[:, t : t + 2] · w[1:3, 1]\n8  end\n9  X ← X + Y",
    ),
    "an entry into zeros": ("", "4  v ← zeros(d)\n5  v[1] ← X[1, 1]\n6  X ← X + v · 1^⊺"),
    "running sum": ("", "4  for t ∈ [ℓ]: S[:, t] ← Σ_{r=1}^{t} X[:, r]\n5  X ← X + S / 4"),
    "offset in a loop": (
        "",
        "4  Y ← X\n5  for t = 2, …, ℓ do\n6    Y[:, t] ← X[:, t] − X[:, t − 1]\n7  end\n8  X ← X + Y",
    ),
    "offset in a map": (
        "",
        "4  X̄ ← [zeros(d), X]\n5  for t ∈ [ℓ]: G[:, t] ← X̄[:, t + 1] − X̄[:, t]\n6  X ← X + G",
    ),
}
STREAMING = {"conv", "scan", "conv then scan", "state in a layer loop"}


def model_text(name: str) -> str:
    algorithms, steps = MODELS[name]
    return FRAME.format(algorithms=algorithms, steps=steps)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_generated_modules_equal_the_interpreter_full_cached_batched(name, target):
    models = checked_models(model_text(name), target)
    ref, m = models["reference"], models[target]
    rng = np.random.default_rng(7)
    with warnings.catch_warnings():
        if name in STREAMING:
            warnings.simplefilter("error", CacheRecomputes)  # a streaming card never rereads
        else:
            warnings.simplefilter("ignore", CacheRecomputes)
        for batch in (1, 2, 3):
            for length in (1, 3, 8):
                ids = rng.integers(0, 11, (batch, length))
                want = np.stack([ref(row[None])[0] for row in ids])
                got = m._forward_numpy(ids, None)
                assert got.shape == want.shape
                np.testing.assert_allclose(got, want, atol=2e-5 * max(1, np.abs(want).max()), err_msg=name)
                last = m._forward_numpy(ids, None, last=True)
                np.testing.assert_allclose(last, want[:, -1:], atol=2e-5 * max(1, np.abs(want).max()))
                if length > 1:
                    for row, full in zip(ids, want, strict=True):  # every card here is causal
                        np.testing.assert_allclose(
                            decode(m, row, 2), full, atol=2e-5 * max(1, np.abs(full).max())
                        )
                    cache = m.new_cache()  # a whole batch through one cache, prefix then tokens
                    parts = [m._forward_numpy(ids[:, :2], cache)]
                    parts += [m._forward_numpy(ids[:, k : k + 1], cache) for k in range(2, length)]
                    np.testing.assert_allclose(
                        np.concatenate(parts, 1), want, atol=2e-5 * max(1, np.abs(want).max())
                    )


@pytest.mark.parametrize("target", TARGETS)
def test_a_recurrent_cache_holds_the_same_bytes_at_every_context_and_no_tokens(target):
    """A decoding step of a stateful card reads its state and the new token only: the cache keeps no
    key/value rows and no token ids, and the state's bytes are the same after 4 tokens and 40."""
    m = checked_models(model_text("conv then scan"), target)[target]
    ids = np.random.default_rng(3).integers(0, 11, (2, 40))
    held = {}
    cache = m.new_cache()
    for k in range(40):
        m._forward_numpy(ids[:, k : k + 1], cache, last=True)
        if k + 1 in (4, 40):
            assert cache.slots == [] and cache.ids is None
            held[k + 1] = sum(np.asarray(a).nbytes for state in cache.states for a in state)
    assert held[4] == held[40] > 0
    assert len(cache.states) == 2  # one per stateful call of a pass


def test_a_local_carried_across_tokens_makes_the_module_reread_and_stay_exact():
    text = FRAME.format(algorithms=NOT_STREAMING, steps="4  X ← X + leaky(X) / 4")
    models = checked_models(text, "numpy")
    ref, m = models["reference"], models["numpy"]
    ids = np.asarray([3, 1, 4, 1, 5])
    with pytest.warns(CacheRecomputes, match="s carries from one token to the next; declare it under State"):
        got = decode(m, ids, 2)
    np.testing.assert_allclose(got, ref(ids[None])[0], atol=1e-4)


def test_the_interpreter_computes_the_prelude_recurrences_as_written():
    card = library_card("prelude")
    rng = np.random.default_rng(0)
    d, k, n, length = 3, 4, 2, 6
    x, w, b = rng.standard_normal((d, length)), rng.standard_normal((d, k)), rng.standard_normal(d)
    padded = np.concatenate([np.zeros((d, k - 1)), x], 1)
    want = np.stack([(w * padded[:, t : t + k]).sum(1) + b for t in range(length)], 1)
    np.testing.assert_allclose(run(card, [x], {"w": w, "b": b}, algorithm="causal_conv"), want, atol=1e-12)
    a, dd = -np.exp(rng.standard_normal((d, n))), rng.standard_normal(d)
    delta = np.log1p(np.exp(rng.standard_normal((d, length))))
    bb, cc = rng.standard_normal((n, length)), rng.standard_normal((n, length))
    h, cols = np.zeros((d, n)), []
    for t in range(length):
        h = np.exp(delta[:, t : t + 1] * a) * h + np.outer(delta[:, t] * x[:, t], bb[:, t])
        cols.append(h @ cc[:, t] + dd * x[:, t])
    got = run(card, [x, delta, bb, cc], {"A": a, "D": dd}, algorithm="selective_scan")
    np.testing.assert_allclose(got, np.stack(cols, 1), atol=1e-12)


@pytest.mark.skipif(not HAS_TORCH, reason="no torch")
def test_training_backpropagates_through_the_state():
    """The gradients of the prelude's convolution, generated for torch, equal torch's own conv1d's."""
    import torch

    f = generated_function("", "torch", call="causal_conv(X | W[:, 1:4], W[:, 1])", name="causal_conv")
    rng = np.random.default_rng(1)
    x = torch.tensor(rng.standard_normal((2, 7, 5)), dtype=torch.float32, requires_grad=True)  # [B, ℓ, d]
    w = torch.tensor(rng.standard_normal((5, 4)), dtype=torch.float32, requires_grad=True)
    b = torch.tensor(rng.standard_normal(5), dtype=torch.float32, requires_grad=True)
    (f(x, w, b) ** 2).sum().backward()
    got = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    want_y = torch.nn.functional.conv1d(x.transpose(1, 2), w[:, None, :], b, padding=3, groups=5)[..., :7]
    (want_y**2).sum().backward()
    for g, t in zip(got, (x, w, b), strict=True):
        torch.testing.assert_close(g, t.grad, rtol=1e-5, atol=1e-5)


def test_a_state_block_round_trips_and_reads_in_ascii():
    card = ir.Card((library_card("prelude").algorithm("selective_scan"),))
    text = render_card(card)
    assert "State: h ∈ ℝ^{d×n}" in text and parse(text) == card
    ascii_text = render_card(card, ascii=True)
    assert "State: h in R^{d x n}" in ascii_text and parse(ascii_text) == card


@pytest.mark.parametrize(
    ("state", "message", "where"),
    [
        ("h ∈ ℝ^{d×ℓ}", "a state's size cannot be ℓ, the number of tokens an input holds", "ℓ}"),
        ('h ∈ ℝ^{d}  from "a.b"', "a state takes no binding or value", 'from "a.b"'),
        ("h ∈ ℝ^{q}", "unknown dimension q", "q}"),
    ],
)
def test_a_wrong_state_is_refused_where_it_is_wrong(state, message, where):
    text = (
        "toycards 1\n\nAlgorithm: Y ← f(X | w)\nInput: X ∈ ℝ^{d×ℓ}\nOutput: Y ∈ ℝ^{d×ℓ}\n"
        f"Parameters: w ∈ ℝ^{{d}}\nState: {state}\n1  return Y = X\n"
    )
    diags = check(parse(text))
    first = diags[0]
    assert first.message == message
    line = text.splitlines()[first.span.line - 1]
    assert line[first.span.col - 1 :].startswith(where)


def test_a_cache_with_state_keeps_all_its_tokens_or_none():
    cache = KVCache()
    cache.staged[0] = (np.ones(3),)
    cache.advance(5)
    assert cache.length == 5 and len(cache.states) == 1
    assert cache.can_keep(5) and cache.can_keep(0) and not cache.can_keep(3)
    with pytest.raises(ValueError, match="the model's state holds all 5"):
        cache.truncate(3)
    cache.staged[0] = (np.zeros(3),)  # a pass cut short: its states are dropped with it
    cache.truncate(5)
    np.testing.assert_array_equal(cache.states[0][0], np.ones(3))
    cache.truncate(0)
    assert cache.states == [] and cache.length == 0
