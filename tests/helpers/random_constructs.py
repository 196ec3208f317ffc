"""The constructs of a random card (random_cards.py): each `construct(c, at) -> lines` draws its
variant from the draft `c` and returns unnumbered step lines that leave X a d×ℓ matrix. CONSTRUCTS
names them by feature; COINCIDENCES are those whose layouts meet the card's sizes; ENABLED are those
cards draw from (all, less what RANDOM_CARDS_WITHOUT names).
"""

from __future__ import annotations

import os

from hypothesis import strategies as st
from random_draft import (
    VECTOR_HELPERS,
    Construct,
    Draft,
    Place,
    activation,
    indent,
    scalar_helper,
    vector_algorithm,
    vector_helper,
)

# ── constructs ───────────────────────────────────────────────────────────────────────────
MLPS = {  # feature → form of the residual MLP
    "mlp": "plain", "mlp_bias": "bias", "mlp_gated": "gated", "prelude_SwiGLU": "swiglu",
    "mlp_transpose": "transpose", "hyper_arithmetic": "arith", "elementwise_divide": "divide",
    "mlp_hidden": "hidden",
}  # fmt: skip


def mlp(c: Draft, at: Place) -> list[str]:
    """A residual MLP, `X ← X + W · f(W · X + b · 1^⊺)`, with an element-wise f or another form."""
    form = c.pick(MLPS)
    if form == "swiglu":
        gate, up, down = c.weight(at), c.weight(at), c.weight(at)
        return [f"X ← X + SwiGLU(X | {gate}, {up}, {down})  ▷ mlp"]
    if form == "transpose":  # act(Xᵀ · W)ᵀ = act(Wᵀ · X)
        return [f"X ← X + {activation(c, f'X^⊺ · {c.weight(at)}')}^⊺  ▷ mlp on the transpose"]
    if form == "hidden":  # a hidden width, derived or given
        width = c.draw(
            st.sampled_from(["d_ff ∈ ℕ ≔ 2 · d", 'd_ff ∈ ℕ = 5  from "{arch}.feed_forward_length"'])
        )
        c.hyper("d_ff", width)
        up, down = c.weight(at, "d_ff×d"), c.weight(at, "d×d_ff")
        return [f"X ← X + {down} · {activation(c, f'{up} · X')}  ▷ mlp of width d_ff"]
    out, inner = c.weight(at), c.weight(at)
    if form == "gated":
        gate = c.weight(at)
        return [f"X ← X + {out} · ({activation(c, f'{inner} · X')} ⊙ sigmoid({gate} · X))  ▷ gated mlp"]
    if form == "arith":
        return [f"X ← X + {out} · {activation(c, f'{inner} · X / √d')} · (k / d) − X / (H + d)  ▷ mlp"]
    if form == "divide":
        return [f"X ← X + {out} · X / (1 + abs({inner} · X))  ▷ element-wise division"]
    arg = f"{inner} · X" + (f" + {c.bias(at)} · 1^⊺" if form == "bias" else "")
    return [f"X ← X + {out} · {activation(c, arg)}  ▷ mlp"]


def norm(c: Draft, at: Place) -> list[str]:
    """A normalisation per column: a map writing the columns of X̃, an implicit map, or X in place."""
    eps = c.hyper("ε", 'ε ∈ ℝ = 1e-5  from "{arch}.eps"')
    kind = c.pick({"norm_layer": "layer_norm", "norm_rms": "rms_norm"})
    tag = next(c.tags)
    gamma = c.param(at, "γ", "d", "norm", tag)
    args = (
        f"{gamma}, {c.param(at, 'β', 'd', 'shift', tag)}, {eps}"
        if kind == "layer_norm"
        else f"{gamma}, {eps}"
    )
    form = c.pick({"column_write": "map", "implicit_map": "implicit", "column_write_in_place": "in place"})
    if form == "in place":
        return [f"for t ∈ [ℓ]: X[:, t] ← {kind}(X[:, t] | {args})  ▷ norm in place"]
    xt = c.local("X̃")
    first = (
        f"for t ∈ [ℓ]: {xt}[:, t] ← {kind}(X[:, t] | {args})  ▷ norm"
        if form == "map"
        else f"{xt} ← {kind}(X | {args})  ▷ norm (implicit map)"
    )
    return [first, f"X ← X + tanh({c.weight(at)} · {xt})"]


def _split(c: Draft) -> tuple[str, str]:
    """A split point s of d rows and the first row after it: (s, s + 1) as card text."""
    return c.pick({"split_k": ("k", "k + 1"), "split_1": ("1", "2"), "split_2": ("2", "3")})


def row_slices(c: Draft, at: Place) -> list[str]:
    """Slices of rows stacked: `[X[s+1:d, :]; X[1:s, :]]` (of X, or of two parameters)."""
    s, s1 = _split(c)
    if c.flag("param_row_slices"):
        a, b = c.weight(at), c.weight(at)
        return [f"X ← X + tanh([{a}[1:{s}, :]; {b}[{s1}:d, :]] · X)  ▷ row slices of parameters"]
    m = c.local()
    return [f"{m} ← [X[{s1}:d, :]; X[1:{s}, :]]  ▷ row slices", f"X ← X + tanh({c.weight(at)} · {m})"]


def mapped_slices(c: Draft, at: Place) -> list[str]:
    """Slices of a mapped column stacked: `for t ∈ [ℓ]: M[:, t] ← [X[s+1:d, t]; X[1:s, t]]`."""
    s, s1 = _split(c)
    m = c.local()
    if c.flag("stack_const"):  # the column's first rows on a vector that is the same for every t
        rhs = f"[X[1:{s}, t]; {c.bias(at)}[{s1}:d]]"
    else:
        rhs = f"[X[{s1}:d, t]; X[1:{s}, t]]"
    return [
        f"for t ∈ [ℓ]: {m}[:, t] ← {rhs}  ▷ slices of a mapped column",
        f"X ← X + tanh({c.weight(at)} · {m})",
    ]


def concat_cols(c: Draft, at: Place) -> list[str]:
    """Two columns side by side, `[a, b] · c`, in a map building a token family."""
    u, w, mix = c.column(), c.weight(at), c.param(at, "c", "2", "mix")
    return [
        f"for t ∈ [ℓ]: {u}_t ← tanh([X[:, t], {w} · X[:, t]] · {mix})  ▷ [a, b]",
        f"X ← X + [{u}_1, …, {u}_ℓ]",
    ]


def heads(c: Draft, at: Place) -> list[str]:
    """A map over heads on `rows(M, h, k)`, gathered with `[Y^1; …; Y^H]`."""
    y = c.local("Y")
    if c.flag("per_head_param_rows"):  # a parameter's head block times the shared X
        lines = [f"for h ∈ [H]: {y}^h ← {activation(c, f'rows({c.weight(at)}, h, k) · X')}  ▷ heads"]
    else:
        m = c.local()
        lines = [
            f"{m} ← {c.weight(at)} · X  ▷ heads",
            f"for h ∈ [H]: {y}^h ← {activation(c, f'rows({m}, h, k)')}",
        ]
    if c.flag("heads_bias_rows"):  # each head's block of a bias vector
        z = c.local("Z")
        lines.append(f"for h ∈ [H]: {z}^h ← {y}^h + rows({c.bias(at)}, h, k) · 1^⊺")
        y = z
    if c.flag("heads_chain"):  # a family read member by member in another map
        z = c.local("Z")
        lines.append(f"for h ∈ [H]: {z}^h ← {y}^h ⊙ sigmoid({y}^h)")
        y = z
    if c.flag("heads_reversed"):
        z = c.local("Z")
        lines.append(f"for h ∈ [H]: {z}^h ← {y}^{{H + 1 − h}}")
        y = z
    if c.flag("sum_heads"):  # Σ over the members of a family
        return lines + [f"X ← X + Σ_{{h=1}}^{{H}} rows({c.weight(at)}, h, k)^⊺ · {y}^h"]
    return lines + [f"X ← X + [{y}^1; …; {y}^H]"]


def heads_tokens(c: Draft, at: Place) -> list[str]:
    """A 2-D map `for h ∈ [H], t ∈ [ℓ]` writing the columns of a head family."""
    y, k = c.local("Y"), c.sizes.k
    col = "rows(X, h, k)[:, t]"
    options: dict[str, object] = {
        "heads_tokens_builtin": None,
        "heads_tokens_rms": "rms",
        "heads_tokens_vector": "vec",
    }
    if k % 2 == 0:
        options["heads_tokens_rope"] = "rope"
    kind = c.pick(options)
    if kind == "rms":
        eps = c.hyper("ε", 'ε ∈ ℝ = 1e-5  from "{arch}.eps"')
        rhs = f"rms_norm({col} | {c.param(at, 'γ', 'k', 'norm')}, {eps})"
    elif kind == "vec":
        rhs = f"{vector_helper(c, k)}({col})"
    elif kind == "rope":
        rhs = f"{_rope(c)}({col}, t | θ, ρ)"
    else:
        rhs = activation(c, col)
    return [
        f"for h ∈ [H], t ∈ [ℓ]: {y}^h[:, t] ← {rhs}  ▷ heads × tokens",
        f"X ← X + tanh({c.weight(at)} · [{y}^1; …; {y}^H])",
    ]


def _rope(c: Draft) -> str:
    """RoPE of the prelude on one head (k even), with θ and the global ρ ∈ ℝ^{k/2}."""
    c.hyper("θ", 'θ ∈ ℝ = 10000  from "{arch}.rope.freq_base"')
    if "ρ ∈" not in "".join(c.globals):
        c.globals.append('ρ ∈ ℝ^{k/2}  from "rope_freqs.weight" or 1')
    return c.pick({"rope_pairs": "rope_pairs", "rope_halves": "rope_halves"})


def vector_call(c: Draft, at: Place) -> list[str]:
    """A vector algorithm of the card applied to a matrix (implicit map), per column, or per head."""
    d, k = c.sizes.d, c.sizes.k
    form = c.pick({"vector_implicit_map": "implicit", "vector_token_map": "tokens", "vector_head_map": "heads",
                   "vector_head_token_map": "heads × tokens"})  # fmt: skip
    m = c.local()
    if form == "implicit":
        f = vector_helper(c, d)
        lines = [f"{m} ← {f}({c.weight(at)} · X)  ▷ vector algorithm, implicit map"]
    elif form == "tokens":
        f = vector_helper(c, d)
        lines = [f"for t ∈ [ℓ]: {m}[:, t] ← {f}(X[:, t])  ▷ vector algorithm per token"]
    else:
        f, y = vector_helper(c, k), c.local("Y")
        lines = [
            f"for h ∈ [H]: {y}^h ← {f}(rows(X, h, k))  ▷ vector algorithm per head"
            if form == "heads"
            else f"for h ∈ [H], t ∈ [ℓ]: {y}^h[:, t] ← {f}(rows(X, h, k)[:, t])  ▷ vector algorithm per head, token",
            f"{m} ← [{y}^1; …; {y}^H]",
        ]
    return lines + [f"X ← X + tanh({c.weight(at)} · {m})"]


def helper_with_params(c: Draft, at: Place) -> list[str]:
    """An algorithm of the card taking parameters: per column (implicit map, map) or on the matrix."""
    form = c.pick({"helper_params_implicit_map": "implicit", "helper_params_token_map": "tokens",
                   "helper_params_matrix": "matrix"})  # fmt: skip
    w = c.weight(at)
    if form == "matrix":
        f = c.helper(
            "ffn",
            """
Algorithm: Y ← ffn(X | W_1, W_2)
/* a block written by the card: a matrix in, parameters, another algorithm inside */
Input: X ∈ ℝ^{m×n}
Output: Y ∈ ℝ^{m×n}
Parameters:
  W_1 ∈ ℝ^{f×m}
  W_2 ∈ ℝ^{m×f}
1  return Y = W_2 · GELU(W_1 · X)
""",
        )
        return [f"X ← X + {f}(X | {w}, {c.weight(at)})  ▷ a block of the card"]
    f = c.helper(
        "affine",
        """
Algorithm: y ← affine(v | W, b)
/* a vector algorithm with parameters */
Input: v ∈ ℝ^{n}
Output: y ∈ ℝ^{m}
Parameters:
  W ∈ ℝ^{m×n}
  b ∈ ℝ^{m}
1  return y = tanh(W · v + b)
""",
    )
    b = c.bias(at)
    if form == "implicit":
        return [f"X ← X + {f}(X | {w}, {b})  ▷ vector algorithm with parameters, implicit map"]
    u = c.column()
    return [
        f"for t ∈ [ℓ]: {u}_t ← {f}(X[:, t] | {w}, {b})  ▷ vector algorithm with parameters",
        f"X ← X + [{u}_1, …, {u}_ℓ]",
    ]


OWN_MHA = """
Algorithm: Ṽ ← mha(X | W_q, W_k, W_v, W_o, H{mask_param})
/* multi-head self-attention written by the card around the prelude's attention */
Input: X ∈ ℝ^{{d_e×ℓ}}
Output: Ṽ ∈ ℝ^{{d_e×ℓ}}
Hyperparameters:
  H ∈ ℕ
  d_h ∈ ℕ  ≔ d_e / H
{mask_decl}Parameters:
  W_q, W_k, W_v, W_o ∈ ℝ^{{d_e×d_e}}
1  Q ← W_q · X
2  K ← W_k · X
3  V ← W_v · X
4  for h ∈ [H]: Y^h ← attention(rows(Q, h, d_h), rows(K, h, d_h), rows(V, h, d_h) | {mask})
5  return Ṽ = W_o · [Y^1; …; Y^H]
"""


def own_mha(c: Draft, at: Place) -> list[str]:
    """Multi-head attention as an algorithm of the card, the mask its own or passed through it."""
    ws = ", ".join(c.weight(at) for _ in range(4))
    if c.pick({"own_mha_inner_mask": False, "own_mha_passed_mask": True}):
        c.helper(
            "mha_of",
            OWN_MHA.format(mask_param=", Mask", mask_decl="  Mask ∈ {0,1}^{ℓ×ℓ}\n", mask="Mask").replace(
                "mha(", "mha_of("
            ),
        )
        return [f"X ← X + mha_of(X | {ws}, H, {mask(c)})  ▷ attention of the card, mask passed"]
    c.helper("mha", OWN_MHA.format(mask_param="", mask_decl="", mask="Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧"))
    return [f"X ← X + mha(X | {ws}, H)  ▷ attention of the card"]


def scalar_call(c: Draft, at: Place) -> list[str]:
    """A scalar algorithm of the card applied element-wise to a matrix."""
    f = scalar_helper(c)
    return [f"X ← X + {c.weight(at)} · {f}({c.weight(at)} · X)  ▷ scalar algorithm, element-wise"]


OPTIONAL_HELPER = """
Algorithm: y ← capped(x | a, c)
/* a · x, soft-capped to (−c, c) unless its optional hyperparameter c is left at 0 */
Input: x ∈ ℝ
Output: y ∈ ℝ
Hyperparameters:
  a ∈ ℝ
  c ∈ ℝ  default 0
1  y ← a · x
2  if c > 0 then y ← c · tanh(y / c)
3  return y
"""


def optional_call(c: Draft, at: Place) -> list[str]:
    """An algorithm of the card with an optional hyperparameter, left out or passed."""
    f = c.helper("capped", OPTIONAL_HELPER)
    cap = c.pick({"optional_hyper_left_out": "", "optional_hyper_passed": ", 0.75"})
    return [f"X ← X + {f}({c.weight(at)} · X | 1.5{cap})  ▷ optional hyperparameter"]


def map_blocks(c: Draft, at: Place) -> list[str]:
    """Maps with a block body: several assignments, a guarded one, or if … else … end."""
    w = c.weight(at)
    kind = c.pick(
        {"map_block": "tokens", "head_map_block": "heads", "map_guard": "guard", "map_if_else": "if"}
    )
    if kind == "guard":
        return [f"for t ∈ [ℓ]: if t mod 2 = 0 then X[:, t] ← tanh({w} · X[:, t])  ▷ a guarded map"]
    if kind == "if":
        u = c.column()
        return [
            "for t ∈ [ℓ] do  ▷ if … else … end in a map",
            "  if t = 1 then", f"    {u}_t ← X[:, t]", "  else", f"    {u}_t ← tanh({w} · X[:, t])", "  end",
            "end",
            f"X ← X + [{u}_1, …, {u}_ℓ]",
        ]  # fmt: skip
    if kind == "tokens":
        u, v = c.column(), c.column()
        return [
            "for t ∈ [ℓ] do  ▷ a map with a block",
            f"  {u}_t ← tanh({w} · X[:, t])",
            f"  {v}_t ← {u}_t ⊙ X[:, t]",
            "end",
            f"X ← X + [{v}_1, …, {v}_ℓ]",
        ]
    m, y, z = c.local(), c.local("Y"), c.local("Z")
    return [
        f"{m} ← {w} · X  ▷ a head map with a block",
        "for h ∈ [H] do",
        f"  {y}^h ← tanh(rows({m}, h, k))",
        f"  {z}^h ← {y}^h ⊙ rows({m}, h, k)",
        "end",
        f"X ← X + [{z}^1; …; {z}^H]",
    ]


def entries_2d(c: Draft, at: Place) -> list[str]:
    """Entries written in a 2-D map over rows and tokens: `M[i, t] ← …`."""
    m = c.local()
    return [
        f"for i ∈ [d], t ∈ [ℓ]: {m}[i, t] ← X[i, t] · i / d  ▷ entries in a 2-D map",
        f"X ← X + tanh({m})",
    ]


def copy_then_write(c: Draft, at: Place) -> list[str]:
    """`M ← X`, then writes into M's columns, then X read beside M (assignment copies)."""
    m = c.local()
    if c.flag("main_entry_write"):
        write = f"for t ∈ [ℓ]: {m}[1, t] ← 0"
        return [f"{m} ← X  ▷ copy, then write", write, f"X ← X + tanh({c.weight(at)} · {m})"]
    write = f"for t ∈ [ℓ]: {m}[:, t] ← tanh({c.weight(at)} · {m}[:, t])"
    return [f"{m} ← X  ▷ copy, then write", write, f"X ← X + {m}"]


def token_scalars(c: Draft, at: Place) -> list[str]:
    """A scalar per token from entries of its column (`Σ_i X[i, t]^2`, `X[1, t]`), then used per token."""
    s, u = c.column(), c.column()
    if c.flag("fixed_row_mapped_entry"):
        first = f"for t ∈ [ℓ]: {s}_t ← (X[1, t] − X[d, t])^2  ▷ a scalar per token, ≥ 0 under √ below"
    else:
        first = f"for t ∈ [ℓ]: {s}_t ← Σ_{{i=1}}^{{d}} X[i, t]^2 / d  ▷ a scalar per token"
    return [first, f"for t ∈ [ℓ]: {u}_t ← X[:, t] / √({s}_t + 1)", f"X ← X + [{u}_1, …, {u}_ℓ]"]


def per_head_scalar(c: Draft, at: Place) -> list[str]:
    """A per-head value passed to a per-head call as a hyperparameter."""
    f = c.helper(
        "scaled",
        """
Algorithm: Y ← scaled(M | s)
/* a matrix through tanh, times a scalar given by the caller */
Input: M ∈ ℝ^{m×n}
Output: Y ∈ ℝ^{m×n}
Hyperparameters: s ∈ ℝ
1  return Y = tanh(M) · s
""",
    )
    y = c.local("Y")
    scale = c.pick({"per_head_index_scalar": "h / H", "per_head_param_scalar": None})
    scale = scale or f"{c.param(at, 'c', 'H', 'scale')}[h]"
    return [
        f"for h ∈ [H]: {y}^h ← {f}(rows(X, h, k) | {scale})  ▷ per-head scalar",
        f"X ← X + [{y}^1; …; {y}^H]",
    ]


MASKS = {  # feature → (Mask[t_z, t_x] = …, causal)
    "mask_causal": ("⟦t_z ≤ t_x⟧", True),
    "mask_window": ("⟦t_z ≤ t_x ∧ t_x − t_z < w⟧", True),
    "mask_window_lower": ("⟦t_x − w < t_z ∧ t_z ≤ t_x⟧", True),
    "mask_negated": ("⟦¬t_z > t_x⟧", True),
    "mask_parity": ("⟦t_z ≤ t_x ∧ (t_z mod 2 = 1 ∨ t_z = t_x)⟧", True),
    "mask_blocks": ("⟦t_z ≤ t_x ∧ ⌈t_z / 2⌉ = ⌈t_x / 2⌉⟧", True),
    "mask_full": ("1", False),
}


def mask(c: Draft) -> str:
    body, causal = c.pick(MASKS)
    if "w" in body:
        width = c.draw(st.sampled_from([2, 1, 3]))
        c.hyper("w", f'w ∈ ℕ = {width}  from "{{arch}}.attention.sliding_window"')
    c.causal &= causal
    return f"Mask[t_z, t_x] = {body}"


OWN_ATTENTION = """
Algorithm: Ṽ ← {name}(Q, K, V | Mask)
/* scaled dot-product attention on one head, written by the card{what} */
Input:
  Q ∈ ℝ^{{d_h×ℓ_x}}
  K ∈ ℝ^{{d_h×ℓ_z}}
  V ∈ ℝ^{{d_h×ℓ_z}}
Output: Ṽ ∈ ℝ^{{d_h×ℓ_x}}
Hyperparameters: Mask ∈ {{0,1}}^{{ℓ_z×ℓ_x}}
1  S ← K^⊺ · Q / √d_h
2  for t_z ∈ [ℓ_z], t_x ∈ [ℓ_x] do
{update}3    if ¬Mask[t_z, t_x] then S[t_z, t_x] ← −∞
4  end
5  return Ṽ = V · {softmax}(S)
"""


def attention_function(c: Draft) -> str:
    """`attention` of the prelude, or one the card writes (with a score update, its own softmax)."""
    if c.pick({"prelude_attention": False, "own_attention": True}) is False:
        return "attention"
    name, what, update, softmax = "att", "", "", "softmax"
    if c.flag("score_update"):
        name, what = "att_bias", " with a bias on the scores by distance"
        update = "3    S[t_z, t_x] ← S[t_z, t_x] − (t_x − t_z) / 4\n"
    if c.flag("own_softmax"):
        name, what, softmax = name + "_soft", what + ", its own softmax", "soft"
        c.helper("soft", vector_algorithm("soft", *VECTOR_HELPERS["vector_softmax"][1:3]))
    return c.helper(name, OWN_ATTENTION.format(name=name, what=what, update=update, softmax=softmax))


def attention(c: Draft, at: Place) -> list[str]:
    """Multi-head self-attention written out: projections, a map over heads, heads stacked."""
    f, k = attention_function(c), c.sizes.k
    gqa = c.sizes.H > 1 and c.flag("gqa")
    kv_rows = "H_kv·k" if gqa else "d"
    if gqa:
        h_kv = c.draw(st.sampled_from([n for n in range(1, c.sizes.H) if c.sizes.H % n == 0]))
        c.hyper("H_kv", f'H_kv ∈ ℕ = {h_kv}  from "{{arch}}.attention.head_count_kv"')
    q, kk, v = c.local("Q"), c.local("K"), c.local("V")
    lines = [
        f"{q} ← {c.weight(at)} · X  ▷ attention",
        f"{kk} ← {c.weight(at, f'{kv_rows}×d')} · X",
        f"{v} ← {c.weight(at, f'{kv_rows}×d')} · X",
    ]
    kv = "⌈h · H_kv / H⌉" if gqa else "h"
    qs, ks = f"rows({q}, h, k)", f"rows({kk}, {kv}, k)"
    if k % 2 == 0 and c.flag("rope"):
        rope = _rope(c)
        qh, kh = c.local("Q̂"), c.local("K̂")
        lines += [
            f"for h ∈ [H], t ∈ [ℓ]: {qh}^h[:, t] ← {rope}(rows({q}, h, k)[:, t], t | θ, ρ)",
            f"for j ∈ [{'H_kv' if gqa else 'H'}], t ∈ [ℓ]: {kh}^j[:, t] ← {rope}(rows({kk}, j, k)[:, t], t | θ, ρ)",
        ]
        qs, ks = f"{qh}^h", (f"{kh}^{{⌈h·H_kv/H⌉}}" if gqa else f"{kh}^h")
    y = c.local("Y")
    lines.append(f"for h ∈ [H]: {y}^h ← {f}({qs}, {ks}, rows({v}, {kv}, k) | {mask(c)})")
    return lines + [f"X ← X + {c.weight(at)} · [{y}^1; …; {y}^H]"]


def prelude_attention(c: Draft, at: Place) -> list[str]:
    """A multi-head attention algorithm of the prelude called with the card's parameters."""
    options = {"prelude_MHAttention_fused": "fused", "prelude_MHAttention": "mha", "prelude_Attention": "one"}
    if c.sizes.k % 2 == 0:  # RoPE needs an even head size
        options["prelude_GQAttention"] = "gqa"
    kind = c.pick(options)
    if kind == "fused":
        qkv, b_qkv = c.weight(at, "3·d×d"), c.bias(at, "3·d")
        o, b_o = c.weight(at), c.bias(at)
        return [
            f"X ← X + MHAttention_fused(X | {qkv}, {b_qkv}, {o}, {b_o}, H, {mask(c)})  ▷ prelude attention"
        ]
    if kind == "one":
        ws = ", ".join(f"{c.weight(at)}, {c.bias(at)}" for _ in range(3))
        return [f"X ← X + Attention(X, X | {ws}, {mask(c)})  ▷ prelude attention, one head"]
    if kind == "mha":
        ws = ", ".join(f"{c.weight(at)}, {c.bias(at)}" for _ in range(4))
        return [f"X ← X + MHAttention(X, X | {ws}, H, {mask(c)})  ▷ prelude attention"]
    h_kv = c.draw(st.sampled_from([n for n in range(1, c.sizes.H + 1) if c.sizes.H % n == 0]))
    c.hyper("H_kv", f'H_kv ∈ ℕ = {h_kv}  from "{{arch}}.attention.head_count_kv"')
    layout = _rope(c).replace("rope_", "")  # pairs or halves
    wq, wk, wv, wo = c.weight(at), c.weight(at, "H_kv·k×d"), c.weight(at, "H_kv·k×d"), c.weight(at)
    cap = c.pick({"prelude_GQAttention_no_cap": "", "prelude_GQAttention_soft_cap": ", 0.5"})  # optional c
    return [
        f"X ← X + {wo} · GQAttention({wq} · X, {wk} · X, {wv} · X | H, H_kv, {layout}, θ, ρ, {mask(c)}{cap})"
        "  ▷ prelude attention"
    ]


def length_value(c: Draft, at: Place) -> list[str]:
    """ℓ as a value: every column depends on the number of tokens (not causal)."""
    c.causal = False
    return [f"X ← X + tanh({c.weight(at)} · X) / ℓ  ▷ ℓ as a value"]


def basic_attention(c: Draft, at: Place) -> list[str]:
    """The prelude's Algorithm 3 per token: each token attends to all (not causal)."""
    c.causal = False
    u, ws = c.column(), ", ".join(f"{c.weight(at)}, {c.bias(at)}" for _ in range(3))
    return [
        f"for t ∈ [ℓ]: {u}_t ← basic_attention(X[:, t], X | {ws})  ▷ prelude basic attention",
        f"X ← X + [{u}_1, …, {u}_ℓ]",
    ]


def first_token_column(c: Draft, at: Place) -> list[str]:
    """The first token's column added to every column (causal: token 1 precedes every token)."""
    return ["X ← X + tanh(X[:, 1]) · 1^⊺  ▷ the first token's column"]


def sum_tokens(c: Draft, at: Place) -> list[str]:
    """Σ over the members of the token family e_•: every column sees every token (not causal)."""
    c.causal = False
    return ["X ← X + Σ_{u=1}^{ℓ} e_u · 1^⊺ / ℓ  ▷ mean of the embeddings of all tokens"]


# ── constructs whose layout meets a size of the card (run at batch H, lengths H, d, k) ───────
def multi_query_attention(c: Draft, at: Place) -> list[str]:
    """Multi-query attention written out: one key and one value (no head index) shared by every head."""
    f, k = attention_function(c), c.sizes.k
    q, kk, v = c.local("Q"), c.local("K"), c.local("V")
    lines = [
        f"{q} ← {c.weight(at)} · X  ▷ multi-query attention",
        f"{kk} ← {c.weight(at, 'k×d')} · X",
        f"{v} ← {c.weight(at, 'k×d')} · X",
    ]
    qs, ks = f"rows({q}, h, k)", kk
    if k % 2 == 0 and c.flag("mqa_rope"):
        rope = _rope(c)
        qh, kh = c.local("Q̂"), c.local("K̂")
        lines += [
            f"for h ∈ [H], t ∈ [ℓ]: {qh}^h[:, t] ← {rope}(rows({q}, h, k)[:, t], t | θ, ρ)",
            f"for t ∈ [ℓ]: {kh}[:, t] ← {rope}({kk}[:, t], t | θ, ρ)",
        ]
        qs, ks = f"{qh}^h", kh
    y = c.local("Y")
    lines.append(f"for h ∈ [H]: {y}^h ← {f}({qs}, {ks}, {v} | {mask(c)})")
    return lines + [f"X ← X + {c.weight(at)} · [{y}^1; …; {y}^H]"]


MIX = """
Algorithm: y ← mix(v, u)
/* v scaled by tanh(u) entry by entry, plus v */
Input: v, u ∈ ℝ^{n}
Output: y ∈ ℝ^{n}
1  return y = v ⊙ tanh(u) + v
"""
MEAN = """
Algorithm: y ← mean(v)
/* the mean of v's entries: one number per call */
Input: v ∈ ℝ^{n}
Output: y ∈ ℝ
1  return y = Σ_{i=1}^{n} v[i] / n
"""


def partial_arguments(c: Draft, at: Place) -> list[str]:
    """A call per head and token whose second argument carries one of the map's variables only
    (a vector per token, per head, or one per sequence) or a number per token: each call sees the
    head and token axes as its batch axes, and an argument lacking one of them is laid out for it."""
    y = c.local("Y")
    col = "rows(X, h, k)[:, t]"
    form = c.pick({"partial_per_token": "token", "partial_per_head": "head", "partial_per_sequence": "sequence",
                   "partial_number_per_token": "number"})  # fmt: skip
    lines = []
    if form == "number":
        rhs = f"{c.helper('mean', MEAN)}(tanh({c.weight(at, 'k×d')} · X[:, t])) · {col}"
    else:
        if form == "token":
            other = f"{c.weight(at, 'k×d')} · X[:, t]"
        elif form == "head":
            other = f"rows({c.bias(at)}, h, k)"
        else:  # the first token's column (causal), the same for every head and token
            other = c.local("u")
            lines.append(f"{other} ← {c.weight(at, 'k×d')} · X[:, 1]")
        rhs = f"{c.helper('mix', MIX)}({col}, {other})"
    return lines + [
        f"for h ∈ [H], t ∈ [ℓ]: {y}^h[:, t] ← {rhs}  ▷ an argument with some of the map's axes",
        f"X ← X + tanh({c.weight(at)} · [{y}^1; …; {y}^H])",
    ]


def token_matrix(c: Draft, at: Place) -> list[str]:
    """A matrix that sums over the tokens (`M ← X · X^⊺`, d×d; or X^⊺ · X, ℓ×ℓ) times one column
    of a token: every column sees every token (not causal)."""
    c.causal = False
    m, u = c.local(), c.column()
    kind = c.pick({"token_matrix_first": "X[:, 1]", "token_matrix_last": "X[:, ℓ]", "token_gram_first": None})
    if kind is None:  # ℓ×ℓ: its column 1 is every token's dot product with token 1
        return [
            f"{m} ← X^⊺ · X / d  ▷ a matrix over the tokens",
            f"{u} ← tanh(X · {m}[:, 1] / ℓ)",
            f"X ← X + {u} · 1^⊺",
        ]
    return [
        f"{m} ← X · X^⊺  ▷ a matrix over the tokens",
        f"{u} ← tanh({m} · {kind} / (d · ℓ))",
        f"X ← X + {u} · 1^⊺",
    ]


def head_slice_bounds(c: Draft, at: Place) -> list[str]:
    """Slice bounds written with a map variable: head h's rows `X[(h − 1)·k + 1 : h·k, t]`, or
    row pairs `X[2·i − 1 : 2·i, :]` gathered in a family over i."""
    options = {"slice_bounds_head_token": "X", "slice_bounds_head": "M", "slice_bounds_param": "W"}
    if c.sizes.d % 2 == 0:
        options["slice_bounds_pairs"] = "pairs"
    kind, y = c.pick(options), c.local("Y")
    rows = "(h − 1)·k + 1 : h·k"
    if kind == "pairs":
        return [
            f"for i ∈ [d/2]: {y}^i ← tanh(X[2·i − 1 : 2·i, :])  ▷ slice bounds by the map variable",
            f"X ← X + [{y}^1; …; {y}^{{d/2}}]",
        ]
    if kind == "X":
        lines = [f"for h ∈ [H], t ∈ [ℓ]: {y}^h[:, t] ← tanh(X[{rows}, t])  ▷ slice bounds by head"]
    elif kind == "W":
        lines = [f"for h ∈ [H]: {y}^h ← tanh({c.weight(at)}[{rows}, :] · X)  ▷ slice bounds by head"]
    else:
        m = c.local()
        lines = [
            f"{m} ← {c.weight(at)} · X  ▷ slice bounds by head",
            f"for h ∈ [H]: {y}^h ← tanh({m}[{rows}, :])",
        ]
    return lines + [f"X ← X + [{y}^1; …; {y}^H]"]


def map_ignoring_variable(c: Draft, at: Place) -> list[str]:
    """A column map whose body ignores its variable, `for j ∈ [ℓ]: O[:, j] ← β`: every column the
    same vector (of the first token, or a parameter; causal)."""
    o, b = c.local("O"), c.column()
    kind = c.pick(
        {"ignored_var_first": "first", "ignored_var_param": "param", "ignored_var_family": "family"}
    )
    if kind == "param":
        first = f"{b} ← tanh({c.bias(at)})  ▷ a column map ignoring its variable"
    else:
        first = f"{b} ← tanh({c.weight(at)} · X[:, 1])  ▷ a column map ignoring its variable"
    if kind == "family":
        u = c.column()
        return [first, f"for j ∈ [ℓ]: {u}_j ← {b}", f"X ← X + [{u}_1, …, {u}_ℓ]"]
    return [first, f"for j ∈ [ℓ]: {o}[:, j] ← {b}", f"X ← X + {o}"]


# ── decoder state, token offsets, running sums and filled values ─────────────────────────────
DECAYED_SUM = """
Algorithm: Y ← decayed_sum(X)
/* a running sum that halves at each token, carried as a State */
Input: X ∈ ℝ^{m×n}
Output: Y ∈ ℝ^{m×n}
State: s ∈ ℝ^{m}
1  for t = 1, …, n do
2    s ← s / 2 + X[:, t]
3    Y[:, t] ← tanh(s)
4  end
5  return Y
"""


def state(c: Draft, at: Place) -> list[str]:
    """An algorithm with a `State:` (the card's decaying sum, the prelude's causal convolution or
    selective scan), called on X: the cache keeps its state, so decoding never rereads a token."""
    kind = c.pick({"state_decay": "decay", "state_conv": "conv", "state_scan": "scan"})
    if kind == "decay":
        return [f"X ← X + {c.helper('decayed_sum', DECAYED_SUM)}(X) / 2  ▷ a State"]
    if kind == "conv":
        w, b = c.param(at, "w", "d×3", "weight"), c.bias(at)
        return [f"X ← X + tanh(causal_conv(X | {w}, {b}))  ▷ a State: a causal convolution"]
    a, d = c.param(at, "A", "d×2", "weight"), c.bias(at)
    wb, wc = c.weight(at, "2×d"), c.weight(at, "2×d")
    scan = f"selective_scan(X, sigmoid(X), {wb} · X, {wc} · X | −({a} ⊙ {a}), {d})"
    return [f"X ← X + tanh({scan})  ▷ a State: a scan"]


def offsets(c: Draft, at: Place) -> list[str]:
    """Earlier tokens read by an offset (in a map over a longer matrix, or in a sequential loop), a
    running sum Σ_{r=1}^{t}, and matrices of zeros or of one value: all causal."""
    kind = c.pick({"offset_map": "map", "offset_loop": "loop", "running_sum": "sum", "filled": "filled"})
    if kind == "filled":
        return ["X ← X + filled(0.5, d, ℓ) ⊙ tanh(X) + zeros(d, ℓ)  ▷ filled values"]
    m = c.local()
    if kind == "map":
        g = c.local()
        return [
            f"{m} ← [zeros(d), X]  ▷ a token offset: each column less the one before",
            f"for t ∈ [ℓ]: {g}[:, t] ← {m}[:, t + 1] − {m}[:, t]",
            f"X ← X + {g} / 2",
        ]
    if kind == "loop":
        return [
            f"{m} ← X  ▷ a token offset in a sequential loop",
            "for t = 2, …, ℓ do",
            f"  {m}[:, t] ← X[:, t] − X[:, t − 1] / 2",
            "end",
            f"X ← X + tanh({m})",
        ]
    return [  # kind == "sum"
        f"for t ∈ [ℓ]: {m}[:, t] ← Σ_{{r=1}}^{{t}} X[:, r] / 4  ▷ a running sum",
        f"X ← X + tanh({m})",
    ]


CONDITIONS = {  # feature → (condition, needs the layer loop)
    "cond_layer_parity": ("l mod 2 = 0", True),
    "cond_layer_first": ("l = 1", True),
    "cond_layer_after": ("l ≥ 2", True),
    "cond_hyper": ("H = {H}", False),
    "cond_hyper_compare": ("d > 4", False),
    "cond_enum": ("act = gelu", False),
    "cond_logic": ("l mod 2 = 1 ∧ ¬H = 3 ∨ d = 4", True),
}


def conditional(c: Draft, at: Place) -> list[str]:
    """`if … then … else … end` (or an inline `if … then stmt`) on l or on hyperparameters."""
    options = {f: cond for f, (cond, layer) in CONDITIONS.items() if at.layer or not layer}
    cond = c.pick(options).format(H=c.sizes.H if c.draw(st.booleans()) else c.sizes.H + 1)
    if cond.startswith("act"):
        value = c.draw(st.sampled_from(["gelu", "tanh"]))
        c.hyper("act", f'act ∈ {{gelu, tanh}} = {value}  from "{{arch}}.activation"')
    inner = Place(at.layer, at.depth + 1)
    then = construct(c, inner)
    if len(then) == 1 and not then[0].startswith(("for", "if")) and c.flag("cond_inline"):
        return [f"if {cond} then {then[0]}"]
    lines = [f"if {cond} then", *indent(then)]
    if c.draw(st.booleans()):
        lines += ["else", *indent(construct(c, inner))]
    return lines + ["end"]


CONSTRUCTS: dict[str, Construct] = {  # feature → construct; the first is the plainest
    "c_mlp": mlp,
    "c_norm": norm,
    "c_row_slices": row_slices,
    "c_mapped_slices": mapped_slices,
    "c_concat_cols": concat_cols,
    "c_heads": heads,
    "c_heads_tokens": heads_tokens,
    "c_attention": attention,
    "c_prelude_attention": prelude_attention,
    "c_vector_call": vector_call,
    "c_scalar_call": scalar_call,
    "c_optional_call": optional_call,
    "c_helper_with_params": helper_with_params,
    "c_own_mha": own_mha,
    "c_copy_then_write": copy_then_write,
    "c_map_blocks": map_blocks,
    "entries_2d": entries_2d,
    "c_token_scalars": token_scalars,
    "c_per_head_scalar": per_head_scalar,
    "const_token_column": first_token_column,
    "sum_tokens": sum_tokens,
    "length_value": length_value,
    "prelude_basic_attention": basic_attention,
    "c_multi_query_attention": multi_query_attention,
    "c_token_matrix": token_matrix,
    "c_slice_bounds": head_slice_bounds,
    "c_map_ignoring_variable": map_ignoring_variable,
    "c_partial_arguments": partial_arguments,
    "c_state": state,
    "c_offsets": offsets,
    "c_conditional": conditional,
}


COINCIDENCES = frozenset(
    {
        "c_multi_query_attention",
        "c_token_matrix",
        "c_slice_bounds",
        "c_map_ignoring_variable",
        "c_partial_arguments",
    }
)  # the constructs whose layouts meet the card's sizes (a batch of H sequences, ℓ = H, d or k)


def _enabled() -> set[str]:
    """Every construct but those RANDOM_CARDS_WITHOUT names (comma-separated features, or
    `coincidences` for COINCIDENCES), to run the others while one of them fails."""
    without: set[str] = set()
    for name in filter(None, os.environ.get("RANDOM_CARDS_WITHOUT", "").replace(" ", "").split(",")):
        if name != "coincidences" and name not in CONSTRUCTS:
            raise ValueError(f"RANDOM_CARDS_WITHOUT: {name!r} is not a construct of {sorted(CONSTRUCTS)}")
        without |= COINCIDENCES if name == "coincidences" else {name}
    return set(CONSTRUCTS) - without


ENABLED: set[str] = _enabled()  # the constructs a card draws from; a caller may narrow it too


def construct(c: Draft, at: Place) -> list[str]:
    options = {f: make for f, make in CONSTRUCTS.items() if f in ENABLED}
    if at.depth >= 1:
        options.pop("c_conditional", None)
    return c.pick(options)(c, at)
