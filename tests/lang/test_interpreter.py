"""The reference interpreter (toycards/lang/interpret/): the card language's executable meaning.

It is held to three independent things:

- **transformers**: every library model card's oracle case (tests/oracle/cases.py: GPT-2, Llama
  with GQA, Qwen2, Qwen3, StarCoder2, Granite, SmolLM3, Gemma, OLMo 2), run by `load(file, target="reference")`, gives
  transformers' logits (F32; |Δ| ≤ 1e-4 as in test_models_oracle.py);
- **hand-computed values** for each rule docs/card-language.md states: 1-based inclusive slices,
  `rows`, a mask by its entries, Σ, `topk`, families, loops and conditions, copy-on-assign;
- and it is the oracle of the **generated modules**: both targets equal it on every library
  card with random weights, full pass and cached decoding alike.

Tolerances. The interpreter computes in float64, the generated modules and transformers in
float32; on logits of a few units float32 rounding in another order gives |Δ| ≈ 1e-6, so
generated vs interpreter is held to 2e-5·max(1, max |logit|).

The constructs at the end (vectors of ones no tensor provides) are held to the interpreter on
both targets like the library cards.
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
from test_models_oracle import assert_logits_close, bound_library_card, ids_for

from toycards.checker import check
from toycards.errors import ToycardsError
from toycards.lang.interpret import Fault, run
from toycards.lang.parse import parse
from toycards.library import ARCH_CARDS, CARDS_BY_TENSOR, library_algorithms
from toycards.models.load import load

# every library card that describes an architecture, or a variant of one (llama_moe)
MODEL_CARDS = sorted(set(ARCH_CARDS.values()) | {card for v in CARDS_BY_TENSOR.values() for _, card in v})
ORACLE_CASES = ("gpt2", "llama", "qwen2", "qwen3", "starcoder2")  # one per model card
ORACLE_CASES += ("granite", "smollm3", "gemma", "olmo2", "gemma2", "gemma3")
ORACLE_CASES += ("olmoe", "qwen3moe", "qwen2moe", "mixtral")
CARD_OF_CASE = {"mixtral": "llama_moe"}  # a llama file with experts
ORACLE_CASES += ("phi3",)  # LongRoPE and partial rotary: tests/models/test_phi3.py
ORACLE_CASES += ("phi2", "stablelm", "phi2-fused", "phi3-split")
CARD_OF_CASE |= {"phi2-fused": "phi2", "phi3-split": "phi3"}  # the other q/k/v layout of a file
ORACLE_CASES += ("olmo3",)  # olmo2.card with OLMo 3's sliding window
CARD_OF_CASE["olmo3"] = "olmo2"
ORACLE_CASES += ("stablelm2-12b",)  # per-head q/k LayerNorms, parallel attention and MLP
CARD_OF_CASE["stablelm2-12b"] = "stablelm_parallel"  # a stablelm file with attn_q_norm
ORACLE_CASES += ("mamba",)  # selective state-space blocks: a state carried from token to token
ORACLE_CASES += ("mamba2",)  # Mamba-2: one decay per head, grouped B and C, a grouped gated RMSNorm
ORACLE_CASES += ("granitemoe", "arcee")  # granite with experts; an ungated ReLU² MLP
ORACLE_CASES += ("granitemoeshared",)  # granitemoe.card with its shared expert (ffn_*_shexp)
CARD_OF_CASE["granitemoeshared"] = "granitemoe"
ORACLE_CASES += ("exaone4", "exaone4-swa", "seed_oss")  # post-norms; 64 blocks with windows; q/k/v biases
ORACLE_CASES += ("ernie4_5",)  # unpermuted Q/K with adjacent-pair rope, head_dim ≠ d_e/H
ORACLE_CASES += ("deepseek2", "deepseek3")  # MLA; V3: sigmoid routing, selection bias, expert groups
CARD_OF_CASE["deepseek3"] = "deepseek2"  # a V3 file: general.architecture is deepseek2
ORACLE_CASES += ("apertus",)  # xIELU with per-block numbers read from metadata arrays (ℝ^{L})
ORACLE_CASES += ("ernie4_5-moe",)  # dense, then MoE_biased (softmax, selection bias) + a conditional shared expert
ORACLE_CASES += ("glm4moe",)  # a dense block, then MoE_biased (sigmoid, selection bias, scale) + shared expert
ORACLE_CASES += ("llama4",)  # chunked and NoPE blocks, q/k L2 norms, MoE_biased weighing the experts' inputs
ORACLE_CASES += ("gpt-oss",)  # attention with sinks, windows on alternate blocks, YaRN, clamped SwiGLU experts
ORACLE_CASES += ("hunyuan-dense",)  # RoPE on halves, then per-head q/k RMSNorm
ORACLE_CASES += ("granitehybrid", "granitehybrid-dense")  # Mamba-2 and attention blocks; experts or an MLP
CARD_OF_CASE["granitehybrid-dense"] = "granitehybrid"
ORACLE_CASES += ("falcon-h1",)  # attention and a Mamba-2 mixer side by side in every block
ORACLE_CASES += ("lfm2",)  # per-block head_count_kv: convolution blocks (a State) and attention blocks
ORACLE_CASES += ("jamba",)  # Mamba blocks (States) and attention blocks; dense and MoE blocks
ORACLE_CASES += ("qwen3next",)  # gated DeltaNet blocks (a window and a memory per head) and attention
ORACLE_CASES += ("nemotron_h",)  # Mamba-2 (States), attention and MLP blocks by two per-block keys
CARD_OF_CASE["exaone4-swa"] = "exaone4"
ORACLE_CASES += ("command-r", "command-r-plus", "cohere2")  # parallel block; q/k norms at 64 blocks; NoPE
CARD_OF_CASE["command-r-plus"] = "command-r"
ORACLE_CASES += ("bert",)  # an encoder: every token sees every other; the output is each token's embedding
ORACLE_CASES += ("nomic-bert",)  # an encoder with RoPE, one attn_qkv and a SwiGLU MLP
ORACLE_CASES += ("modern-bert",)  # an encoder with a symmetric sliding window on its local blocks
HAS_TORCH = importlib.util.find_spec("torch") is not None
TARGETS = ("numpy", pytest.param("torch", marks=pytest.mark.skipif(not HAS_TORCH, reason="no torch")))
T = 9  # tokens per sequence in the generated-vs-interpreter tests


def interp(text: str, inputs: list, values: dict | None = None, algorithm: str | None = None):
    """The interpreter's value of a small card that checks clean."""
    card = parse(text)
    assert check(card) == [], [d.message for d in check(card)]
    return run(card, inputs, values, algorithm=algorithm, library=library_algorithms())


def close_to_reference(got: np.ndarray, want: np.ndarray, what: str) -> None:
    bound = 2e-5 * max(1.0, float(np.abs(want).max()))
    assert_logits_close(np.asarray(got, np.float64), want, atol=bound, what=what)


# ── against transformers ────────────────────────────────────────────────────────────────
def test_every_model_card_has_an_oracle_case():
    from oracle.cases import CASES

    assert {CARD_OF_CASE.get(c, CASES[c][0]) for c in ORACLE_CASES} == set(MODEL_CARDS)


@pytest.fixture(scope="module")
def reference_of(oracle_files):
    loaded: dict[str, object] = {}

    def get(case: str):
        if case not in loaded:
            loaded[case] = load(oracle_files(case, "F32").path, target="reference")
        return loaded[case]

    return get


@pytest.mark.parametrize("length", [1, 6])
@pytest.mark.parametrize("case", ORACLE_CASES)
def test_interpreter_matches_transformers(oracle_files, reference_of, case, length):
    from oracle.hf_gguf import hf_logits

    f = oracle_files(case, "F32")
    ids = ids_for(f.config.vocab_size, length)
    got, want = reference_of(case).logits(ids), hf_logits(f.model, ids)
    assert got.dtype == np.float32 and got.shape == want.shape  # [length, N_V]; an encoder's [length, d_e]
    assert_logits_close(got, want, what=f"{case}: interpreter vs transformers")


def test_reference_is_a_target_of_load_and_named_in_its_error():
    with pytest.raises(ToycardsError, match="reference"):
        load(bound_library_card("llama"), target="jax")


# ── the generated modules against the interpreter ───────────────────────────────────────
def same_random_weights(models: dict[str, object], seed: int = 0) -> None:
    """One set of weights for every model, large enough for logits of a few units: vectors
    (norm scales, biases, RoPE divisors) ~ 1 + N(0, 0.1²), matrices ~ N(0, 1/fan_in)."""
    rng = np.random.default_rng(seed)
    names = sorted(models["reference"].w)
    for name in names:
        shape = models["reference"].w[name].shape
        w = (1 + 0.1 * rng.standard_normal(shape)) if len(shape) == 1 else rng.standard_normal(shape)
        w = (w / np.sqrt(shape[-1]) if len(shape) == 2 and "token_embd" not in name else w).astype(np.float32)
        for target, m in models.items():
            if target == "torch":
                import torch

                with torch.no_grad():
                    m.w[name].copy_(torch.from_numpy(w))
            else:
                m.w[name] = w


@pytest.fixture(scope="module")
def card_models():
    """`card_models(name)`: {target: model} for a library card with concrete hyperparameters,
    all with the same random weights."""
    made: dict[str, dict[str, object]] = {}

    def get(name: str) -> dict[str, object]:
        if name not in made:
            text = bound_library_card(name)
            targets = ["reference", "numpy"] + (["torch"] if HAS_TORCH else [])
            made[name] = {t: load(text, target=t) for t in targets}
            same_random_weights(made[name])
        return made[name]

    return get


@pytest.fixture(scope="module")
def full_pass(card_models):
    """The interpreter's float64 logits [T, N_V] of each library card on fixed ids."""
    done: dict[str, np.ndarray] = {}

    def get(name: str) -> np.ndarray:
        if name not in done:
            m = card_models(name)["reference"]
            done[name] = m(np.asarray(ids_for(m.hp["N_V"], T)))
            assert done[name].dtype == np.float64
            assert np.abs(done[name]).max() > 0.5, "weights too small for a meaningful comparison"
        return done[name]

    return get


def decode(model, ids: np.ndarray, prefill: int) -> np.ndarray:
    """Logits [T, N_V] of `ids` fed through one cache: `prefill` tokens, then one at a time."""
    cache, parts = model.new_cache(), []
    for start, stop in [(0, prefill)] + [(t, t + 1) for t in range(prefill, len(ids))]:
        parts.append(model._forward_numpy(ids[None, start:stop], cache)[0])
        assert cache.length == stop
    return np.concatenate(parts)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", MODEL_CARDS)
def test_generated_module_equals_interpreter(card_models, full_pass, name, target):
    m = card_models(name)[target]
    ids = ids_for(m.hp["N_V"], T)
    close_to_reference(m.logits(ids), full_pass(name), f"{name}: generated {target} vs interpreter")


# cards whose tokens read later ones (an encoder): a pass with the cache gives the full pass over the
# tokens so far, not over the whole sequence (tests/models/test_bert.py holds bert to that)
BIDIRECTIONAL = {"bert", "nomic-bert"}
BIDIRECTIONAL |= {"modern-bert"}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", [n for n in MODEL_CARDS if n not in BIDIRECTIONAL])
def test_generated_cached_decoding_equals_interpreter_full_pass(card_models, full_pass, name, target):
    m = card_models(name)[target]
    got = decode(m, np.asarray(ids_for(m.hp["N_V"], T)), prefill=3)
    close_to_reference(got, full_pass(name), f"{name}: generated {target}, cached, vs interpreter")


@pytest.mark.parametrize("name", ["gpt2", "qwen3"])
def test_interpreter_cached_decoding_equals_its_full_pass(card_models, full_pass, name):
    """The cache holds the ids so far; each pass reruns the card and returns the new columns."""
    m = card_models(name)["reference"]
    got = decode(m, np.asarray(ids_for(m.hp["N_V"], T)), prefill=2)
    assert_logits_close(got, full_pass(name), atol=1e-6, what=f"{name}: interpreter cached vs full")


def test_interpreter_generates_text_like_the_numpy_module(card_models):
    """`generate` needs a tokenizer: the example file's, with the interpreter behind it."""
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "tiny-llama.gguf"
    want = "".join(load(example, target="numpy").generate("Hello", max_tokens=4))
    assert "".join(load(example, target="reference").generate("Hello", max_tokens=4)) == want


# ── hand-computed semantics ─────────────────────────────────────────────────────────────
SLICES = """toycards 1

Algorithm: y ← middle(x)
Input: x ∈ ℝ^{n}
Output: y ∈ ℝ^{3}
1  return y = x[2:4]

Algorithm: B ← corner(A)
Input: A ∈ ℝ^{m×n}
Output: B ∈ ℝ^{2×2}
1  return B = A[2:3, 1:2]

Algorithm: y ← picks(A)
Input: A ∈ ℝ^{n×n}
Output: y ∈ ℝ^{4}
1  c ← A[:, 2]        ∷ ℝ^{n}
2  r ← A[3, :]        ∷ ℝ^{1×n}
3  return y = [A[1, 3], c[1], r · c, x_len(c)]

Algorithm: k ← x_len(v)
Input: v ∈ ℝ^{n}
Output: k ∈ ℕ
1  return k = length(v)
"""
A33 = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]


def test_indices_are_one_based_and_slices_inclusive():
    assert interp(SLICES, [[10.0, 20.0, 30.0, 40.0, 50.0]], algorithm="middle").tolist() == [20, 30, 40]
    assert interp(SLICES, [A33], algorithm="corner").tolist() == [[4, 5], [7, 8]]
    # A[1, 3] = 3; column 2 = (2, 5, 8); row 3 = (7, 8, 9) is a row, times the column: 14 + 40 + 72
    assert interp(SLICES, [A33], algorithm="picks").tolist() == [3, 2, 7 * 2 + 8 * 5 + 9 * 8, 3]


@pytest.mark.parametrize("bad", ["x[0]", "x[6]", "x[3:6]"])
def test_an_index_outside_its_axis_is_an_error_not_a_wrap_around(bad):
    text = f"Algorithm: y ← f(x)\nInput: x ∈ ℝ^{{n}}\nOutput: y ∈ ℝ\n1  return y = Σ_{{i=1}}^{{1}} {bad}\n"
    with pytest.raises(Fault, match="outside 1…5"):
        run(parse(text), [[1.0, 2.0, 3.0, 4.0, 5.0]])


def test_rows_is_the_ith_block_of_k_rows():
    text = """Algorithm: B ← second(A | k)
Input: A ∈ ℝ^{m×n}
Output: B ∈ ℝ^{k×n}
Hyperparameters: k ∈ ℕ
1  return B = rows(A, 2, k)

Algorithm: b ← third(v | k)
Input: v ∈ ℝ^{m}
Output: b ∈ ℝ^{k}
Hyperparameters: k ∈ ℕ
1  return b = rows(v, 3, k)
"""
    A = np.arange(1.0, 13.0).reshape(6, 2)  # rows (1, 2), (3, 4), …, (11, 12)
    assert interp(text, [A], {"k": 2}, algorithm="second").tolist() == [[5, 6], [7, 8]]
    assert interp(text, [np.arange(1.0, 7.0)], {"k": 2}, algorithm="third").tolist() == [5, 6]


MASKED = """toycards 1

Algorithm: S ← masked(A | Mask)
Input: A ∈ ℝ^{m×n}
Output: S ∈ ℝ^{m×n}
Hyperparameters: Mask ∈ {0,1}^{m×n}
1  S ← A
2  for i ∈ [m], j ∈ [n] do
3    if ¬Mask[i, j] then S[i, j] ← −∞
4  end
5  return S

Algorithm: S ← window(A | w)
Input: A ∈ ℝ^{m×n}
Output: S ∈ ℝ^{m×n}
Hyperparameters: w ∈ ℕ
1  return S = masked(A | Mask[t_z, t_x] = ⟦t_z ≤ t_x ∧ t_x − t_z < w⟧)
"""


def test_a_mask_is_its_indicator_evaluated_entry_by_entry():
    got = interp(MASKED, [np.zeros((4, 4))], {"w": 2}, algorithm="window")
    # entry (t_z, t_x) is kept iff t_z ≤ t_x < t_z + 2: the diagonal and the one above it
    kept = {(1, 1), (1, 2), (2, 2), (2, 3), (3, 3), (3, 4), (4, 4)}
    want = [[0.0 if (z, x) in kept else -math.inf for x in range(1, 5)] for z in range(1, 5)]
    assert got.tolist() == want


def test_sums_run_over_their_index_and_an_empty_sum_is_zero():
    text = """Algorithm: y ← sums(x)
Input: x ∈ ℝ^{n}
Output: y ∈ ℝ^{3}
1  a ← Σ_{i=2}^{4} x[i]^2
2  b ← Σ_{i=3}^{2} x[i]
3  c ← Σ_{i=1}^{n} (i · x[i])
4  return y = [a, b, c]
"""
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert interp(text, [x]).tolist() == [4 + 9 + 16, 0, 1 + 4 + 9 + 16 + 25]


def test_topk_and_max_per_column():
    text = """Algorithm: J ← best(V | k)
Input: V ∈ ℝ^{n×m}
Output: J ∈ ℤ^{k×m}
Hyperparameters: k ∈ ℕ
1  return J = topk(V, k)

Algorithm: j ← best1(v | k)
Input: v ∈ ℝ^{n}
Output: j ∈ ℤ^{k}
Hyperparameters: k ∈ ℕ
1  return j = topk(v, k)

Algorithm: u ← tops(V)
Input: V ∈ ℝ^{n×m}
Output: u ∈ ℝ^{m}
1  return u = max(V)
"""
    assert interp(text, [[1.0, 3.0, 3.0, 0.0, 3.0]], {"k": 3}, algorithm="best1").tolist() == [2, 3, 5]
    V = [[1.0, 5.0], [4.0, 2.0], [3.0, 3.0]]
    assert interp(text, [V], {"k": 2}, algorithm="best").tolist() == [[2, 1], [3, 3]]
    assert interp(text, [V], algorithm="tops").tolist() == [4, 5]


def test_assignment_copies_and_a_callee_gets_its_own_copy():
    text = """toycards 1

Algorithm: w ← zero_first(v)
Input: v ∈ ℝ^{n}
Output: w ∈ ℝ^{n}
1  v[1] ← 0
2  return w = v

Algorithm: z ← f(x)
Input: x ∈ ℝ^{n}
Output: z ∈ ℝ^{4}
1  y ← x
2  y[1] ← 100
3  u ← zero_first(x)
4  return z = [x[1], y[1], u[1], x[2]]
"""
    x = np.array([7.0, 8.0, 9.0])
    assert interp(text, [x]).tolist() == [7, 100, 0, 8]
    assert x.tolist() == [7, 8, 9]


def test_families_are_built_in_maps_and_gathered_in_order():
    text = """Algorithm: y ← f(x | H)
Input: x ∈ ℝ^{n}
Output: y ∈ ℝ^{n}
Hyperparameters:
  H ∈ ℕ
  k ∈ ℕ  ≔ n / H
1  for t ∈ [n]: e_t ← x[t] · t
2  E ← [e_1, …, e_n]
3  for h ∈ [H]: Y^h ← rows(E, h, k)
4  for h ∈ [H]: Z^h ← Y^{H + 1 − h}
5  return y = [Z^1; …; Z^H]
"""
    # e = (1·1, 2·2, …, 6·6); blocks of 2 in reversed order
    assert interp(text, [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]], {"H": 3}).tolist() == [25, 36, 9, 16, 1, 4]


def test_loops_run_in_order_with_conditions_on_their_index():
    text = """Algorithm: s ← f(x | L)
Input: x ∈ ℝ
Output: s ∈ ℝ
Hyperparameters: L ∈ ℕ
1  s ← x
2  for l = 1, 2, …, L do
3    if l mod 2 = 0 then
4      s ← s + l
5    else
6      s ← 10 · s − l
7    end
8  end
9  return s
"""
    # s = 1 → 10·1 − 1 = 9 → 9 + 2 = 11 → 110 − 3 = 107 → 107 + 4 = 111 → 1110 − 5 = 1105
    assert interp(text, [1.0], {"L": 5}) == 1105


def test_a_second_loop_value_sets_the_step():
    text = """Algorithm: s ← f(x | L)
Input: x ∈ ℝ
Output: s ∈ ℝ
Hyperparameters: L ∈ ℕ
1  s ← x
2  for l = 1, 3, …, L do
3    s ← s + l
4  end
5  return s
"""
    assert interp(text, [0.0], {"L": 8}) == 1 + 3 + 5 + 7


def test_column_convention_broadcast_and_implicit_map():
    text = """toycards 1

Algorithm: Y ← affine(X | W, b)
Input: X ∈ ℝ^{d×ℓ}
Output: Y ∈ ℝ^{m×ℓ}
Parameters:
  W ∈ ℝ^{m×d}
  b ∈ ℝ^{m}
1  return Y = ReLU(W · X + b · 1^⊺)

Algorithm: s ← total(v)
Input: v ∈ ℝ^{n}
Output: s ∈ ℝ
1  return s = Σ_{i=1}^{n} v[i]

Algorithm: s ← sums(X)
Input: X ∈ ℝ^{d×ℓ}
Output: s ∈ ℝ^{ℓ}
1  return s = total(X)
"""
    X = [[1.0, 2.0, 0.0], [0.0, 1.0, -1.0]]  # d = 2, ℓ = 3
    W, b = [[1.0, 1.0], [2.0, -1.0]], [0.0, -3.0]
    # W·X = [[1, 3, −1], [2, 3, 1]]; + b per column = [[1, 3, −1], [−1, 0, −2]]; ReLU
    assert interp(text, [X], {"W": W, "b": b}, algorithm="affine").tolist() == [[1, 3, 0], [0, 0, 0]]
    assert interp(text, [X], algorithm="sums").tolist() == [1, 3, -1]  # total per column


def test_entries_never_written_have_no_value():
    text = """Algorithm: y ← evens(x)
Input: x ∈ ℝ^{n}
Output: y ∈ ℝ^{n}
1  for i ∈ [n/2]: y[2 · i] ← x[2 · i − 1]
2  return y
"""
    got = interp(text, [[1.0, 2.0, 3.0, 4.0]])
    assert np.isnan(got[[0, 2]]).all() and got[[1, 3]].tolist() == [1, 3]


def test_given_hyperparameters_must_agree_with_the_shapes():
    text = """Algorithm: y ← f(x | W, d)
Input: x ∈ ℝ^{d}
Output: y ∈ ℝ^{d}
Hyperparameters: d ∈ ℕ
Parameters: W ∈ ℝ^{d×d}
1  return y = W · x
"""
    W = np.eye(3)
    assert interp(text, [[1.0, 2.0, 3.0]], {"W": W, "d": 3}).tolist() == [1, 2, 3]
    with pytest.raises(Fault, match="d is 4 here but the value has 3"):
        interp(text, [[1.0, 2.0, 3.0]], {"W": W, "d": 4})


def test_the_interpreter_computes_in_float64():
    text = "Algorithm: y ← f(x)\nInput: x ∈ ℝ^{n}\nOutput: y ∈ ℝ^{n}\n1  return y = x / 3\n"
    got = interp(text, [np.array([1.0], dtype=np.float32)])
    assert got.dtype == np.float64 and got[0] == 1 / 3


# ── constructs where a generated module disagrees with the interpreter ──────────────────
TINY = """toycards 1
{algorithms}
Algorithm: P ← Net(x | θ)
/* a residual stack whose steps 4… each test one construct */
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{{N_V×ℓ}}
Hyperparameters:
  L ∈ ℕ = 3  from "{{arch}}.block_count"
  d ∈ ℕ = 8  from "{{arch}}.width"
  N_V ∈ ℕ = 11
  k ∈ ℕ ≔ d / 2
Parameters:
  E ∈ ℝ^{{d×N_V}}  from "token_embd.weight"^⊺
  for l ∈ [L], in "blk.{{l-1}}.":
    A_l ∈ ℝ^{{d×d}}  from "a.weight"
    b_l ∈ ℝ^{{d}}    from "b.bias"
  U ∈ ℝ^{{N_V×d}}  from "output.weight"
1  ℓ ← length(x)
2  for t ∈ [ℓ]: e_t ← E[:, x[t]]
3  X ← [e_1, …, e_ℓ]
{steps}
   return P = softmax(U · X)
"""


def tiny_models(steps: str, target: str, algorithms: str = "") -> dict[str, object]:
    """The reference and `target` models of TINY with `steps` (and the card's own `algorithms`,
    which the steps may call), sharing random weights."""
    return checked_models(
        TINY.format(steps=steps, algorithms=algorithms and "\n" + algorithms.strip() + "\n"), target
    )


def checked_models(text: str, target: str) -> dict[str, object]:
    """The reference and `target` models of a card that checks clean, sharing random weights."""
    assert check(parse(text)) == [], [d.message for d in check(parse(text))]
    models = {t: load(text, target=t) for t in ("reference", target)}
    same_random_weights(models)
    return models


def test_the_tiny_card_itself_agrees_on_both_targets():
    """The frame of the cases below is sound: a plain residual layer loop agrees (cached too)."""
    steps = "4  for l = 1, 2, …, L do\n5    X ← X + tanh(A_l · X + b_l · 1^⊺)\n6  end"
    for target in ["numpy"] + (["torch"] if HAS_TORCH else []):
        m = tiny_models(steps, target)
        ids = np.asarray(ids_for(11, 7))
        want = m["reference"](ids)
        close_to_reference(m[target].logits(list(ids)), want, f"tiny card, {target}")
        close_to_reference(decode(m[target], ids, 3), want, f"tiny card, {target}, cached")


HEADS = """
Algorithm: Ṽ ← scaled_head(X | W_q, W_k, μ, Mask)
/* one attention head whose scores are scaled by e^μ / √(μ²): μ is a value per head of the caller */
Input: X ∈ ℝ^{d×ℓ}
Output: Ṽ ∈ ℝ^{k×ℓ}
Hyperparameters:
  μ ∈ ℝ
  Mask ∈ {0,1}^{ℓ×ℓ}
Parameters: W_q, W_k ∈ ℝ^{k×d}
1  S ← exp(μ) · (W_k · X)^⊺ · (W_q · X) / √(μ · μ)
2  for t_z ∈ [ℓ], t_x ∈ [ℓ]: if ¬Mask[t_z, t_x] then S[t_z, t_x] ← −∞
3  return Ṽ = W_q · X · softmax(S)

Algorithm: Ṽ ← alibi_head(X, μ | W_q, W_k, Mask)
/* one attention head with a linear bias of slope μ on the distance (ALiBi) */
Input:
  X ∈ ℝ^{d×ℓ}
  μ ∈ ℝ
Output: Ṽ ∈ ℝ^{k×ℓ}
Hyperparameters: Mask ∈ {0,1}^{ℓ×ℓ}
Parameters: W_q, W_k ∈ ℝ^{k×d}
1  S ← (W_k · X)^⊺ · (W_q · X) / √k
2  for t_z ∈ [ℓ], t_x ∈ [ℓ] do
3    S[t_z, t_x] ← S[t_z, t_x] − μ · (t_x − t_z)
4    if ¬Mask[t_z, t_x] then S[t_z, t_x] ← −∞
5  end
6  return Ṽ = W_q · X · softmax(S)

Algorithm: B ← outer(a, b)
/* a matrix defined by its entries */
Input:
  a ∈ ℝ^{m}
  b ∈ ℝ^{n}
Output: B ∈ ℝ^{m×n}
1  for i ∈ [m], j ∈ [n]: B[i, j] ← a[i] · b[j] + ⟦i ≤ j⟧
2  return B

Algorithm: y ← moments(x)
/* Σ whose index is a value, a Σ of numbers only, and a Σ from 2 */
Input: x ∈ ℝ^{n}
Output: y ∈ ℝ^{n}
1  a ← Σ_{i=1}^{n} i · x[i]
2  b ← Σ_{k=1}^{n} (k − 1)^2
3  c ← Σ_{i=2}^{4} x[i]^2
4  return y = x + a / b − c

Algorithm: y ← shifted(x, μ)
/* a vector moved by a scalar given as an input */
Input:
  x ∈ ℝ^{n}
  μ ∈ ℝ
Output: y ∈ ℝ^{n}
1  return y = x − μ / 2
"""

FIXED = {  # constructs that once disagreed, now held to the interpreter like the rest
    "loop step": "4  for l = 1, 3, …, L do\n5    X ← X + tanh(A_l · X)\n6  end",  # l = 1, 3
    "whole quotient": "4  X ← [rows(X, 2, d / 2); rows(X, 1, d / 2)]",  # d / 2 as a block size
    "constant column": "4  X ← X + A_1[:, 2] · 1^⊺",  # column 2 of a parameter, counted from 1
    # a scalar per head (`μ_h`, laid out […, H]) given to a call per head (heads on axis −3)
    "scalar per head into a per-head call": (
        "4  for l = 1, 2, …, L do\n"
        "5    for h ∈ [2]: μ_h ← b_l[h] + 1\n"
        "6    for h ∈ [2]: Y^h ← scaled_head(X | rows(A_l, h, k), rows(A_l, 3 − h, k), μ_h, "
        "Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧)\n"
        "7    X ← X + [Y^1; …; Y^2]\n"
        "8  end",
        HEADS,
    ),
    "scalar per head as an input, in one map with the call": (
        "4  for h ∈ [2] do\n5    μ_h ← b_1[h]\n6    Y^h ← shifted(rows(X, h, k), μ_h)\n7  end\n"
        "8  X ← X + [Y^1; …; Y^2]",
        HEADS,
    ),
    # entries of a matrix updated in a map over both its indices; a matrix made from its entries
    "ALiBi slope per head (entry updates)": (
        "4  for l = 1, 2, …, L do\n"
        "5    for h ∈ [2]: μ_h ← b_l[h] / 4\n"
        "6    for h ∈ [2]: Y^h ← alibi_head(X, μ_h | rows(A_l, h, k), rows(A_l, 3 − h, k), "
        "Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧)\n"
        "7    X ← X + [Y^1; …; Y^2]\n"
        "8  end",
        HEADS,
    ),
    "sum over a family": "4  X ← X + Σ_{u=1}^{ℓ} e_u · 1^⊺ / ℓ",  # over the members' axis, not d
    "sum over a family, from 2": "4  X ← X + Σ_{u=2}^{ℓ} e_u · 1^⊺ / ℓ",
    "sum of a term without its index": "4  X ← X + Σ_{u=1}^{3} b_1 · 1^⊺",  # 3 · b_1
    "sum whose index is a value": (
        "4  for t ∈ [ℓ]: X[:, t] ← moments(X[:, t])",
        HEADS,
    ),
    "basic attention per token (Algorithm 3)": (
        "4  for t ∈ [ℓ]: Y[:, t] ← basic_attention(X[:, t], X | A_1, b_1, A_2, b_2, A_3, b_3)\n5  X ← X + Y",
        "",
    ),
    # `[v_t; b]`: a column of a map stacked on a vector that is the same for every t
    "stack with a constant": "4  for t ∈ [ℓ]: X[:, t] ← [rows(X[:, t], 1, k); rows(b_1, 2, k)]",
    "a number stacked after a vector": "4  for t ∈ [ℓ]: X[:, t] ← [rows(X[:, t], 1, d − 1); X[1, t]]",
    "a number stacked before a vector": "4  c ← [1; rows(b_1, 1, d − 1)]\n5  X ← X + c · 1^⊺",
    "matrices side by side, a block of columns": (
        "4  W ← [A_1, A_2 · A_3[:, 2:3] · rows(A_3, 1, 2), b_1]\n5  X ← X + W · [X; X; rows(X, 1, 1)] / 2"
    ),
    # one token's column or member (under the cache, the module recomputes: tests/codegen/test_cache_plan.py)
    "constant token column": "4  X ← X + X[:, 1] · 1^⊺",
    "a family's member by number": "4  X ← X + e_1 · 1^⊺",
    "the last token's member": "4  X ← X + e_ℓ · 1^⊺ + X[:, ℓ] · 1^⊺",
    "members of a family per head, by number": ("4  for h ∈ [2]: Y^h ← rows(X, h, k)\n5  X ← X + [Y^2; Y^1]"),
    # a column of a parameter picked by a computed index (topk's, as in MoE routing)
    "columns picked by topk": (
        "4  J ← topk(X, 2)\n5  for t ∈ [ℓ]: X[:, t] ← X[:, t] + A_1[:, J[1, t]] − A_2[:, J[2, t]]"
    ),
    "outer product and a row times a matrix": "4  r ← A_1[2, :]\n5  X ← X + b_1 · (r · X) + b_2 · b_3^⊺ · X / d",
    "Σ over the layers": "4  X ← X + Σ_{l=1}^{L} tanh(A_l · X) / L",
    "nested Σ": "4  s ← Σ_{i=1}^{d} Σ_{j=1}^{i} A_1[i, j]\n5  X ← s · X",
    "max of each column": "4  m ← max(X)\n5  X ← X − rows(A_1, 1, 1)^⊺ · m^⊺",
    "token embedding per token (Algorithm 1)": (
        "4  for t ∈ [ℓ]: f_t ← token_embedding(x[t] | E)\n5  X ← X + [f_1, …, f_ℓ]"
    ),
    "a token id as a number": "4  for t ∈ [ℓ]: X[:, t] ← X[:, t] · ⟦x[t] = 5⟧ + X[:, t] · x[t] / 10",
    "multi-head attention (Algorithm 5)": (
        "4  X ← X + MHAttention(X, X | A_1, b_1, A_2, b_2, A_3, b_3, A_1, b_1, 2, Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧)"
    ),
    "matrix defined by its entries": ("4  X ← X + outer(b_1, b_2) · X / d", HEADS),
    "scalar per head in a map over heads and tokens": (
        "4  for h ∈ [2]: μ_h ← b_1[h]\n"
        "5  for h ∈ [2], t ∈ [ℓ]: Y^h[:, t] ← shifted(rows(X[:, t], h, k), μ_h · t)\n"
        "6  X ← X + [Y^1; …; Y^2]",
        HEADS,
    ),
    "scalar per token in a map over heads and tokens": (
        "4  for t ∈ [ℓ]: ν_t ← X[1, t]\n"
        "5  for h ∈ [2], t ∈ [ℓ]: Y^h[:, t] ← shifted(rows(X[:, t], h, k), ν_t + h)\n"
        "6  X ← X + [Y^1; …; Y^2]",
        HEADS,
    ),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("construct", sorted(FIXED))
def test_generated_module_agrees_on(construct, target):
    steps, algorithms = FIXED[construct] if isinstance(FIXED[construct], tuple) else (FIXED[construct], "")
    m = tiny_models(steps, target, algorithms)
    ids = ids_for(11, 7)
    close_to_reference(m[target].logits(ids), m["reference"](np.asarray(ids)), f"{construct}, {target}")
    batch = np.stack([np.asarray(ids), np.asarray(ids)[::-1]])  # two sequences at once
    want = np.stack([m["reference"](row) for row in batch])
    got = m[target]._forward_numpy(batch, None).reshape(want.shape)
    close_to_reference(got, want, f"{construct}, {target}, a batch of two")


# ── a vector of ones that no tensor provides ───────────────────────────────────────────────
# The RoPE divisors of a card without rope_freqs (gemma, olmo2) come from the prelude's `ones`;
# each case defines r in TINY's frame, and the last step adds it to every column.
ONES_CASES = {  # construct → steps defining r
    "ones(| k)": "4  r ← [ones(| k); ones(| k)]\n5",
    "ones(| d / 2)": "4  r ← [ones(| d / 2); ones(| d / 2)]\n5",
    "stacked scalars": "4  for i ∈ [d]: c_i ← 1\n5  r ← [c_1; …; c_d]\n6",
    "entries in the entry algorithm": "4  for i ∈ [d]: r[i] ← 1\n5",
    "the same column per token": "4  for t ∈ [ℓ]: g_t ← ones(| d)\n5  X ← X + [g_1, …, g_ℓ]\n6  r ← ones(| d)\n7",
}


@pytest.mark.parametrize("target", ["numpy"] + (["torch"] if HAS_TORCH else []))
@pytest.mark.parametrize("construct", ONES_CASES)
def test_a_vector_of_ones(construct, target):
    models = tiny_models(ONES_CASES[construct] + "  X ← X + r · 1^⊺", target)
    ids = ids_for(11, 5)
    close_to_reference(
        models[target].logits(ids), models["reference"](np.asarray(ids)), f"{construct}, {target}"
    )


# ── a value that follows from the hyperparameters alone: made once per model ───────────────
@pytest.mark.parametrize("target", ["numpy"] + (["torch"] if HAS_TORCH else []))
def test_a_constant_is_made_once_and_a_later_entry_write_writes_a_copy(target):
    """A step whose value follows from the hyperparameters alone (`r ← ones(| d)`) is made at the
    model's first pass and kept (ModelAPI.constant); a later step that writes one of its entries
    writes a copy: pass after pass, cached decoding included, the model agrees with the reference,
    and the kept value is still the one made."""
    steps = "4  r ← [ones(| d / 2); ones(| d / 2)]\n5  r[1] ← r[1] + 1\n6  X ← X + r · 1^⊺"
    models = tiny_models(steps, target)
    m, ids = models[target], np.asarray(ids_for(11, 6))
    want = models["reference"](ids)
    for n in range(3):
        close_to_reference(m.logits(list(ids)), want, f"pass {n + 1}, {target}")
    close_to_reference(decode(m, ids, 3), want, f"cached, {target}")
    assert list(m._constants) == [4]  # step 4 alone: step 5 writes an entry, step 6 reads X
    assert np.array_equal(np.asarray(m._constants[4]), np.ones(8))


# ── a stored stack of matrices (a layer's experts), one matrix at a time ─────────────────────
STACK = """toycards 1

Algorithm: P ← Net(x | θ)
/* token embeddings through each matrix of a stored stack in turn */
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{{N_V×ℓ}}
Hyperparameters:
  d ∈ ℕ = 8
  m ∈ ℕ = 3
  N_V ∈ ℕ = 11
Parameters:
  E ∈ ℝ^{{d×N_V}}  from "token_embd.weight"^⊺
  S ∈ ℝ^{{m×d×d}}  from "stack.weight"
  U ∈ ℝ^{{N_V×d}}  from "output.weight"
1  ℓ ← length(x)
2  for t ∈ [ℓ]: e_t ← E[:, x[t]]
3  X ← [e_1, …, e_ℓ]
{steps}
   return P = softmax(U · X)
"""


@pytest.mark.parametrize("target", ["numpy"] + (["torch"] if HAS_TORCH else []))
def test_a_matrix_of_a_stored_stack(target):
    """`S[e, :, :]` picked by a sequential loop's index and by a number, against the interpreter."""
    steps = "4  for e = 1, 2, …, m do\n5    X ← X + tanh(S[e, :, :] · X) / m\n6  end\n7  X ← S[2, :, :]^⊺ · X"
    models = checked_models(STACK.format(steps=steps), target)
    ids = ids_for(11, 6)
    want = models["reference"](np.asarray(ids))
    close_to_reference(models[target].logits(ids), want, f"a stored stack, {target}")
    close_to_reference(decode(models[target], np.asarray(ids), 2), want, f"a stored stack, {target}, cached")


def test_a_matrix_of_a_stored_stack_picked_per_token_is_refused_where_it_stands():
    from toycards.codegen import generate_source

    text = STACK.format(steps="4  for t ∈ [ℓ]: X[:, t] ← S[t, :, :] · X[:, t]")
    assert check(parse(text)) == []
    with pytest.raises(ToycardsError, match=r"cannot generate code: the indexing S\[t, :, :\]") as info:
        generate_source(parse(text), "numpy")
    assert "sequential loop" in str(info.value)


# ── a parameter's column per head: one scale (and offset) per head, as stablelm_parallel's q/k norms ──
HEAD_COLUMNS = """toycards 1

Algorithm: P ← Net(x | θ)
/* each head of every column normalised with its own column of Γ and B (stored one row per head) */
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{{N_V×ℓ}}
Hyperparameters:
  d ∈ ℕ = 8  from "{{arch}}.width"
  H ∈ ℕ = 2  from "{{arch}}.head_count"
  k ∈ ℕ ≔ d / H
  N_V ∈ ℕ = 11
Parameters:
  E ∈ ℝ^{{d×N_V}}  from "token_embd.weight"^⊺
  Γ, B ∈ ℝ^{{k×H}}  from "head_norm.weight"^⊺, "head_norm.bias"^⊺
  U ∈ ℝ^{{N_V×d}}  from "output.weight"
1  ℓ ← length(x)
2  for t ∈ [ℓ]: e_t ← E[:, x[t]]
3  X ← [e_1, …, e_ℓ]
{steps}
   return P = softmax(U · X)
"""
HEAD_COLUMN_STEPS = {
    "scale": "4  for h ∈ [H], t ∈ [ℓ]: Y^h[:, t] ← Γ[:, h] ⊙ rows(X, h, k)[:, t] + B[:, h]\n",
    "layer_norm": "4  for h ∈ [H], t ∈ [ℓ]: Y^h[:, t] ← layer_norm(rows(X, h, k)[:, t] | Γ[:, h], B[:, h], 1e-5)\n",
    "rms_norm": "4  for h ∈ [H], t ∈ [ℓ]: Y^h[:, t] ← rms_norm(rows(X[:, t], h, k) | Γ[:, h], 1e-5)\n",
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("construct", sorted(HEAD_COLUMN_STEPS))
def test_a_parameter_column_picked_by_the_head_of_a_map(construct, target):
    """`Γ[:, h]` in `for h ∈ [H], t ∈ [ℓ]` is head h's own vector, laid out along the heads' axis;
    it once went in as the whole matrix, which broadcast against the tokens' axis (silently, when
    ℓ = H). Two tokens (= H), seven, a batch and cached decoding, against the interpreter."""
    steps = HEAD_COLUMN_STEPS[construct] + "5  X ← X + [Y^1; …; Y^H]"
    models = checked_models(HEAD_COLUMNS.format(steps=steps), target)
    for n in (2, 7):
        ids = np.asarray(ids_for(11, n))
        want = models["reference"](ids)
        close_to_reference(models[target].logits(list(ids)), want, f"{construct}, {n} tokens, {target}")
        close_to_reference(decode(models[target], ids, 1), want, f"{construct}, {n} tokens, {target}, cached")
    batch = np.stack([ids, ids[::-1]])
    got = models[target]._forward_numpy(batch, None).reshape(2, *want.shape)
    close_to_reference(got[1], models["reference"](ids[::-1]), f"{construct}, {target}, a batch of two")


@pytest.mark.skipif(not HAS_TORCH, reason="no torch")
def test_a_tensor_named_like_a_model_attribute_loads_on_torch():
    """"w.weight" and "training.weight" are parts the torch model or any module has as attributes
    (`model.w`, `Module.training`): they load, and the model equals the interpreter."""
    steps = "4  X ← X + tanh(A_1 · X) + tanh(B · X) + tanh(T · X)"
    text = TINY.format(steps=steps, algorithms="").replace(
        '  U ∈ ℝ^{N_V×d}  from "output.weight"',
        '  B ∈ ℝ^{d×d}  from "w.weight"\n  T ∈ ℝ^{d×d}  from "training.weight"\n'
        '  U ∈ ℝ^{N_V×d}  from "output.weight"',
    )
    models = checked_models(text, "torch")
    ids = np.asarray(ids_for(11, 5))
    close_to_reference(models["torch"].logits(list(ids)), models["reference"](ids), "w.weight on torch")
    assert {"w~.weight", "training~.weight"} <= set(models["torch"].state_dict())
