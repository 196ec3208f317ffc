"""Random well-typed model cards, for property tests of the code generators against the interpreter.

`model_cards()` is a hypothesis strategy of `RandomCard`s: the canonical text of a card
that checks clean, the set of *features* (the constructs and variants it uses), whether it is
causal (whether column t of its logits depends only on tokens 1…t, so that cached decoding equals
the full pass over the whole sequence), its sizes d, H, k and the longest sequence it takes.

Every card has the same frame, the paper's Algorithm 10 without the details:

    Algorithm: P ← Net(x | θ)
    Input: x ∈ V^ℓ
    Output: P ∈ (0,1)^{N_V×ℓ}
    Hyperparameters: d, H, N_V, k ≔ d / H (head size), L and whatever the constructs need
    Parameters: E ∈ ℝ^{d×N_V} (token embedding), the constructs' own, U ∈ ℝ^{N_V×d} (unembedding)
    1  ℓ ← length(x)
    2  for t ∈ [ℓ]: e_t ← E[:, x[t]]
    3  X ← [e_1, …, e_ℓ]
       … constructs, each an update of X ∈ ℝ^{d×ℓ}, at the top or in `for l = 1, 2, …, L do`
       return P = softmax(U · X)

A *construct* is a small function `construct(c, at) -> lines` that draws its variant from the
draft `c` (which hands out fresh names, parameters and hyperparameters and records features),
and returns unnumbered step lines that leave X a d×ℓ matrix. `at.layer` says whether it sits in
the layer loop, where its parameters are per-layer (`W_a^l` from "blk.{l-1}.a.weight") and
conditions may use l. Helper algorithms (a vector algorithm applied to a matrix, an attention the
card writes itself, …) are added to the card before the model. Values stay small (residual
updates through tanh, weights ~ 1/fan_in), so float32 and float64 agree to ~1e-6.

Sizes are drawn to meet: d ∈ {4, 6, 8, 9} and H ∈ {2, 3, 4} dividing it with k = d / H ≥ 2, or
less often H = 1 (which meets nothing), so that H = k (d = 4, H = 2; d = 9, H = 3) and, in a test,
a batch of H sequences or a length of H, d or k lines an array's batch or token axis up with its
head or feature axis. Some constructs exist for exactly that (COINCIDENCES: a key shared by every
head, a d×d matrix summed over the tokens, slice bounds computed from the head, a column map whose
body ignores its variable). Others draw the decoder state and what reads earlier tokens: an
algorithm of the card with a `State:` (a decaying sum, a causal convolution, a selective scan),
token offsets in a map and in a sequential loop, running sums, and `zeros`/`filled` matrices.

Shrinking: every choice is a `sampled_from` whose first option is the plainest, and the number
of constructs and the layer loop shrink away, so a failing card shrinks to the one construct
that fails, at the top, with d = 4 and H = 2 unless the failure needs more.

ENABLED (random_constructs.py) is the set of constructs cards draw from: all of CONSTRUCTS, less those that the
environment variable RANDOM_CARDS_WITHOUT names (comma-separated features such as
`c_token_matrix`, or `coincidences` for all of COINCIDENCES).

Features name the constructs a card uses; a failing card prints them. The draft (random_draft.py)
hands out names and records features; the constructs are in random_constructs.py.
"""

from __future__ import annotations

from hypothesis import strategies as st
from random_constructs import construct
from random_draft import N_V, Draft, Place, RandomCard, Sizes, indent

from toycards.lang.parse import parse
from toycards.lang.printer import render_card

# ── the card ─────────────────────────────────────────────────────────────────────────────
EMBEDDINGS = {  # feature → column t of X (`{b}`: a global bias vector), uses ℓ_max, needs W_p
    "embed": ("E[:, x[t]]", False, False),
    "learned_positions": ("E[:, x[t]] + W_p[:, t]", True, True),
    "position_value": ("E[:, x[t]] + {b} · t / ℓ_max", True, False),
    "position_parity": ("E[:, x[t]] + {b} · (⟦t mod 2 = 0⟧ − ⌈t / 3⌉ / ℓ_max)", True, False),
    "token_id_value": ("E[:, x[t]] + {b} · x[t] / N_V", False, False),
    "prelude_embedding_calls": ("token_embedding(x[t] | E) + positional_embedding(t | W_p)", True, True),
}


def embedding(c: Draft) -> list[str]:
    """Steps 1–3: token columns, optionally plus learned positions or a value of the position."""
    column, uses_max, uses_wp = c.pick(EMBEDDINGS)
    if uses_max:
        c.hyper("ℓ_max", f'ℓ_max ∈ ℕ = {max(8, c.sizes.d)}  from "{{arch}}.context_length"')  # ℓ = d fits
        c.max_length = max(8, c.sizes.d) if uses_wp else None
    if uses_wp:
        c.globals.insert(0, 'W_p ∈ ℝ^{d×ℓ_max}  from "position_embd.weight"^⊺')
    if "{b}" in column:
        column = column.format(b=c.bias(Place(False)))
    return ["ℓ ← length(x)", f"for t ∈ [ℓ]: e_t ← {column}", "X ← [e_1, …, e_ℓ]  ∷ ℝ^{d×ℓ}"]


def body(c: Draft) -> list[str]:
    n = c.draw(st.integers(1, 3), label="constructs")
    if c.sizes.L == 0:
        return [line for _ in range(n) for line in construct(c, Place(False))]
    before = [line for _ in range(c.draw(st.integers(0, 1))) for line in construct(c, Place(False))]
    inside = [line for _ in range(n) for line in construct(c, Place(True))]
    return before + ["for l = 1, 2, …, L do", *indent(inside), "end"]


def number(lines: list[str]) -> list[str]:
    """Number every step (an unnumbered `for h ∈ [H], t ∈ [ℓ]: …` would read as a parameter group)."""
    return [f"{i}  {line}" for i, line in enumerate(lines, 1)]


def assemble(c: Draft, steps: list[str]) -> str:
    s = c.sizes
    hypers = [f'L ∈ ℕ = {s.L}  from "{{arch}}.block_count"'] * (s.L > 0) + [
        f'd ∈ ℕ = {s.d}  from "{{arch}}.embedding_length"',
        f'H ∈ ℕ = {s.H}  from "{{arch}}.attention.head_count"',
        f"N_V ∈ ℕ = {N_V}",
        "k ∈ ℕ ≔ d / H  ▷ head size",
        *c.hypers.values(),
    ]
    params = ['E ∈ ℝ^{d×N_V}  from "token_embd.weight"^⊺', *c.globals]
    if c.layer_params:
        params += ['for l ∈ [L], in "blk.{l-1}.":', *indent(c.layer_params)]
    params.append('U ∈ ℝ^{N_V×d}  from "output.weight"')
    main = [
        "Algorithm: P ← Net(x | θ)",
        "/* a random card: constructs of the language, each an update of X */",
        "Input: x ∈ V^ℓ",
        "Output: P ∈ (0,1)^{N_V×ℓ}",
        "Hyperparameters:",
        *indent(hypers),
        "Parameters:",
        *indent(params),
        *number(steps),
    ]
    return "toycards 1\n\n" + "".join(h + "\n\n" for h in c.helpers.values()) + "\n".join(main) + "\n"


@st.composite
def model_cards(draw) -> RandomCard:
    """A random model card that checks clean."""
    d = draw(st.sampled_from([4, 6, 8, 9]), label="d")  # H = k at d = 4, H = 2 and at d = 9, H = 3
    heads = [h for h in (2, 3, 4) if d % h == 0 and d // h >= 2]
    H = draw(st.sampled_from(heads * 2 + [1]), label="H")  # one head, which meets nothing, 1/5 to 1/3
    L = draw(st.sampled_from([0, 1, 2]), label="L")
    c = Draft(draw, Sizes(d, H, L))
    steps = embedding(c) + body(c) + ["return P = softmax(U · X)"]
    text = render_card(parse(assemble(c, steps)))
    return RandomCard(text, frozenset(c.features), c.causal, c.sizes, c.max_length)
