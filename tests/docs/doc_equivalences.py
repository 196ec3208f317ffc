"""The equivalences docs/card-language.md states, as data for test_doc_examples.py: each `Same` is
a set of spellings the page says compute the same (each a card's steps, framed as that test frames
them), each `Refused` a spelling the page says is refused, with the sub-expression and the hint.
"""

from __future__ import annotations

import dataclasses


# ── the equivalences the page states ─────────────────────────────────────────────────────
@dataclasses.dataclass(frozen=True)
class Same:
    """Spellings of FRAME's steps that the page says compute the same thing."""

    doc: str  # the page's words that state it
    spellings: tuple[str, ...]  # steps, or (steps, the card's own algorithms)


ATTENTION = """
Algorithm: Ṽ ← att(Q, K, V)
/* one head's attention written out: the scores past the query's position are −∞ */
Input:
  Q ∈ ℝ^{d_h×ℓ_x}
  K ∈ ℝ^{d_h×ℓ_z}
  V ∈ ℝ^{d_h×ℓ_z}
Output: Ṽ ∈ ℝ^{d_h×ℓ_x}
1  S ← SCORES
2  for t_z ∈ [ℓ_z], t_x ∈ [ℓ_x]: if t_z > t_x then S[t_z, t_x] ← −∞
3  return Ṽ = V · softmax(S)
"""
HEADS_OF = "4  Q ← W_q · X\n5  K ← W_k · X\n6  for h ∈ [H]: Y^h ← {head}\n7  X ← X + [Y^1; …; Y^H]"
CALL_ATT = "att(rows(Q, h, d_h), rows(K, h, d_h), rows(X, h, d_h))"
CALL_ATTENTION = "attention(rows(Q, h, d_h), rows(K, h, d_h), rows(X, h, d_h) | {mask})"
CAUSAL = "Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧"


def attention_with(mask: str) -> str:
    """Steps whose H heads go through the prelude's `attention` with the mask argument `mask`."""
    return HEADS_OF.format(head=CALL_ATTENTION.format(mask=mask))


def own_attention(scores: str) -> tuple[str, str]:
    """The same heads through ATTENTION, the card's own, whose scores are `scores`."""
    return HEADS_OF.format(head=CALL_ATT), ATTENTION.replace("SCORES", scores)


COLUMN_ALGORITHM = """
Algorithm: y ← f(e)
/* a spelling applied to one column */
Input: e ∈ ℝ^{d_e}
Output: y ∈ ℝ^{d_e}
BODY
"""
ON_COLUMNS = "4  for t ∈ [ℓ]: Y[:, t] ← f(X[:, t])\n5  X ← X + Y"


def spread(entry: str) -> tuple[str, str]:
    """An algorithm that writes `y[i] ← entry` for each entry of a column, with the base θ_b."""
    algorithm = COLUMN_ALGORITHM.replace("f(e)", "f(e | θ_b)").replace("ℝ^{d_e}", "ℝ^{d_h}")
    body = f"Hyperparameters: θ_b ∈ ℝ\n1  for i ∈ [d_h]: y[i] ← {entry}\n2  return y"
    return ON_COLUMNS.replace("f(X[:, t])", "f(X[:, t] | θ_base)"), algorithm.replace("BODY", body)


def on_columns(body: str) -> tuple[str, str]:
    """The steps of an algorithm `f` on one column (`e`, d_e entries), called on every column."""
    return ON_COLUMNS, COLUMN_ALGORITHM.replace("BODY", body)


FUSED = "MHAttention_fused(X̃ | W_qkv^l, b_qkv^l, W_o^l, b_o^l, H, Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧)"
FUSED_STEPS = """5    Q ← rows(W_qkv^l, 1, d_e) · X̃ + rows(b_qkv^l, 1, d_e) · 1^⊺
6    K ← rows(W_qkv^l, 2, d_e) · X̃ + rows(b_qkv^l, 2, d_e) · 1^⊺
7    V ← rows(W_qkv^l, 3, d_e) · X̃ + rows(b_qkv^l, 3, d_e) · 1^⊺
8    for h ∈ [H]: Y^h ← attention(rows(Q, h, d_h), rows(K, h, d_h), rows(V, h, d_h) | Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧)
9    X ← X + W_o^l · [Y^1; …; Y^H] + b_o^l · 1^⊺"""
BUNDLE = (
    "MHAttention(X̃, X̃ | rows(W_qkv^l, 1, d_e), rows(b_qkv^l, 1, d_e), rows(W_qkv^l, 2, d_e), "
    "rows(b_qkv^l, 2, d_e), rows(W_qkv^l, 3, d_e), rows(b_qkv^l, 3, d_e), W_o^l, b_o^l, H, "
    "Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧)"
)


def each_layer(steps: str) -> str:
    """`steps` in a loop over the layers, after the layer's normalisation X̃."""
    return "4  for l = 1, …, L do\n5    X̃ ← layer_norm(X | γ_l^1, β_l^1, ε)\n" + steps + "\n   end"


# 2·H query heads of d_h rows (Q has 2·d_e rows) and two key/value heads: query head h reads ⌈h / H⌉
GQA_QKV = (
    "4  Q ← [W_q · X; W_k · X]\n5  K ← [rows(W_v, 1, d_h); rows(W_v, 2, d_h)] · X\n"
    "6  V ← [rows(W_o, 1, d_h); rows(W_o, 3, d_h)] · X"
)
GQA_OUT = "9  X ← X + rows(Y, 1, d_e) − rows(Y, 2, d_e)"


def grouped(key: str, keys: str = "") -> str:
    """GQA_QKV's heads by hand: query head h attends with `key` (after the steps `keys`) and value
    head ⌈h·2/(2·H)⌉."""
    head = f"attention(rows(Q, h, d_h), {key}, rows(V, ⌈h · 2 / (2 · H)⌉, d_h) | {CAUSAL})"
    steps = [GQA_QKV, keys, f"7  for h ∈ [2 · H]: Y^h ← {head}", "8  Y ← [Y^1; …; Y^{2·H}]", GQA_OUT]
    return "\n".join(s for s in steps if s)


ASCII_STEPS = """4  for l = 1, 2, …, L do
5    for t ∈ [ℓ]: X̃[:, t] ← layer_norm(X[:, t] | γ_l^1, β_l^1, ε)
6    if l mod 2 ≠ 0 ∧ ¬(l ≥ 3) ∨ l = 7 then X ← X + tanh(W_q^⊺ · X̃) ⊙ X / √(d_e)
7  end
8  P̃ ← W_p  ∷ ℝ^{d_e×ℓ_max}
9  for t ∈ [ℓ]: X[:, t] ← X[:, t] · ⟦x[t] ≤ 5⟧ + P̃[:, t] · π / ⌈d_e / 4⌉ + max(X[1, t], −∞) · b_q
10 for t ∈ [ℓ]: ê_t ← X[:, t] − Σ_{i=1}^{d_e} X[i, t] / d_e
11 X̄ ← [ê_1, …, ê_ℓ]
12 X ← X + X̄ ⊙ X̄ / 4 + θ_base / 10000 · X"""
ASCII_SPELLED = """4  for l = 1, 2, ..., L do
5    for t in [ell]: X~[:, t] <- layer_norm(X[:, t] | gamma_l^1, beta_l^1, epsilon)
6    if l mod 2 != 0 and not (l >= 3) or l = 7 then X <- X + tanh(W_q^T * X~) .* X / sqrt(d_e)
7  end
8  P~ <- W_p  :: R^{d_e x ell_max}
9  for t in [ell]: X[:, t] <- X[:, t] * [| x[t] <= 5 |] + P~[:, t] * pi / ceil(d_e / 4) + max(X[1, t], -inf) * b_q
10 for t in [ell]: e.hat_t <- X[:, t] - sum_{i=1}^{d_e} X[i, t] / d_e
11 X.bar <- [e.hat_1, ..., e.hat_ell]
12 X <- X + X.bar .* X.bar / 4 + theta_base / 10000 * X"""

SAME: dict[str, Same] = {
    # ── tokens and names
    "ASCII spelling of every token": Same(
        "Every symbol has an ASCII spelling; the two can be mixed freely.", (ASCII_STEPS, ASCII_SPELLED)
    ),
    "π is the constant": Same(
        "is the constant π", ("4  X ← π · X", "4  X ← pi · X", "4  X ← 3.141592653589793 · X")
    ),
    "a power of a name": Same(
        "Write a power of a name with parentheses: `(x)^3`",
        ("4  X ← X + (X)^3 / 10", "4  X ← X + X ⊙ X ⊙ X / 10"),
    ),
    "a power whose exponent is an expression": Same(
        "`(θ)^(2 · (i − 1) / d_h)`",
        (
            spread("e[i] / (θ_b)^(2 · (i − 1) / d_h)"),
            spread("e[i] · exp(−2 · (i − 1) / d_h · log(θ_b))"),
        ),
    ),
    "a power of an entry": Same(
        "A power of anything else needs none: `e[i]^2`",
        (
            on_columns("1  v ← Σ_{i=1}^{d_e} e[i]^2 / d_e\n2  return y = e / (1 + v)"),
            on_columns("1  v ← Σ_{i=1}^{d_e} e[i] · e[i] / d_e\n2  return y = e / (1 + v)"),
        ),
    ),
    "members gathered by rows": Same(
        "`[Y^1; …; Y^H]` gather the members in index order",
        (
            "4  for h ∈ [H]: Y^h ← tanh(rows(X, h, d_h))\n5  X ← X + [Y^1; …; Y^H]",
            "4  X ← X + tanh(X)",
        ),
    ),
    "members gathered as columns": Same(
        "`[e_1, …, e_ℓ]` and",
        ("4  for t ∈ [ℓ]: f_t ← tanh(X[:, t])\n5  X ← X + [f_1, …, f_ℓ]", "4  X ← X + tanh(X)"),
    ),
    "a member picked by an expression in braces": Same(
        "a member's index may be an expression in braces",
        (
            grouped("rows(K, ⌈h · 2 / (2 · H)⌉, d_h)"),
            grouped("K̂^{⌈h·2/(2·H)⌉}", "7  for j ∈ [2]: K̂^j ← rows(K, j, d_h)"),
            grouped("K.hat^{⌈h·2/(2·H)⌉}", "7  for j in [2]: K.hat^j <- rows(K, j, d_h)"),
        ),
    ),
    # ── types and dimensions
    "a stored stack, one matrix at a time": Same(
        "read one matrix at a time with `W[e, :, :]`",
        (
            "4  for e = 1, …, E do\n5    X ← X + tanh(W_s[e, :, :] · X)\n6  end",
            "4  X ← X + tanh(W_s[1, :, :] · X)\n5  X ← X + tanh(W_s[E, :, :] · X)",
        ),
    ),
    "dimensions equal as polynomials": Same(
        "are equal as polynomials",
        (
            "4  Q ← W_q · X + b_q · 1^⊺  ∷ ℝ^{H·d_h×ℓ}\n5  X ← X + Q",
            "4  Q ← W_q · X + b_q · 1^⊺  ∷ ℝ^{d_h·H×ℓ}\n5  X ← X + Q",
            "4  X ← X + W_q · X + b_q · 1^⊺",
        ),
    ),
    # ── precedence
    "¬ binds looser than a comparison": Same(
        "`¬a = b` means `¬(a = b)`",
        (
            "4  for t ∈ [ℓ]: X[:, t] ← X[:, t] · ⟦¬x[t] = 5⟧",
            "4  for t ∈ [ℓ]: X[:, t] ← X[:, t] · ⟦¬(x[t] = 5)⟧",
            "4  for t ∈ [ℓ]: X[:, t] ← X[:, t] · ⟦x[t] ≠ 5⟧",
        ),
    ),
    "· and / left-associative": Same(
        "`K^⊺ · Q / √d_h` is `(K^⊺ · Q) / √d_h`",
        (
            own_attention("K^⊺ · Q / √d_h"),
            own_attention("(K^⊺ · Q) / √d_h"),
            own_attention("K^⊺ · (Q / √d_h)"),
            attention_with(CAUSAL),
        ),
    ),
    "√ of a name and of a parenthesis": Same(
        "`√d_h`, `√(v + ε)`",
        (
            "4  X ← X / √d_h + √(d_h + ε) · X",
            "4  X ← X / sqrt(d_h) + sqrt(d_h + ε) · X",
            "4  X ← X / (d_h)^0.5 + (d_h + ε)^0.5 · X",
        ),
    ),
    "a Σ's body is a whole product": Same(
        "is the sum of `e[i] / d_e`",
        (
            on_columns("1  m ← Σ_{i=1}^{d_e} e[i] / d_e\n2  return y = e − m"),
            on_columns("1  m ← Σ_{i=1}^{d_e} (e[i] / d_e)\n2  return y = e − m"),
            on_columns("1  m ← (Σ_{i=1}^{d_e} e[i]) / d_e\n2  return y = e − m"),
        ),
    ),
    "a Σ's body ends at +": Same(
        "adds 1 once",
        (
            on_columns("1  s ← Σ_{i=1}^{d_e} e[i] + 1\n2  return y = e · s"),
            on_columns("1  s ← (Σ_{i=1}^{d_e} e[i]) + 1\n2  return y = e · s"),
            on_columns("1  s ← 1 + Σ_{i=1}^{d_e} e[i]\n2  return y = e · s"),
            on_columns("1  s ← Σ_{i=1}^{d_e} e[i] − (−1)\n2  return y = e · s"),
        ),
    ),
    "a Σ's body ends at a comparison": Same(
        "ends at the next `+`, `−` or comparison",
        (
            on_columns("1  s ← ⟦Σ_{i=1}^{d_e} e[i] > 0⟧\n2  return y = e · (s + 1)"),
            on_columns("1  s ← ⟦(Σ_{i=1}^{d_e} e[i]) > 0⟧\n2  return y = e · (s + 1)"),
        ),
    ),
    "a Σ of a parenthesised sum": Same(
        "to add it to every term",
        (
            on_columns("1  s ← Σ_{i=1}^{d_e} (e[i] + 1)\n2  return y = e · s"),
            on_columns("1  s ← Σ_{i=1}^{d_e} e[i] + d_e\n2  return y = e · s"),
        ),
    ),
    "a Σ of products over a family": Same(
        "`Σ_{t=1}^{T} α_t · v_t` is the sum of the products",
        (
            "4  for h ∈ [H]: v_h ← rows(X, h, d_h)\n5  for h ∈ [H]: α_h ← b_q[h]\n"
            "6  Y ← Σ_{h=1}^{H} α_h · v_h\n7  X ← X + W_q[:, 1:d_h] · Y",
            "4  for h ∈ [H]: v_h ← rows(X, h, d_h)\n5  for h ∈ [H]: α_h ← b_q[h]\n"
            "6  Y ← α_1 · v_1 + α_2 · v_2 + α_3 · v_3\n7  X ← X + W_q[:, 1:d_h] · Y",
        ),
    ),
    "a call, then a column": Same(
        "`rows(Q, h, d_h)[:, t]`",
        (
            "4  Q ← W_q · X\n5  for h ∈ [H], t ∈ [ℓ]: Y^h[:, t] ← tanh(rows(Q, h, d_h)[:, t])\n"
            "6  X ← X + [Y^1; …; Y^H]",
            "4  Q ← W_q · X\n5  for h ∈ [H], t ∈ [ℓ]: Y^h[:, t] ← tanh(rows(Q[:, t], h, d_h))\n"
            "6  X ← X + [Y^1; …; Y^H]",
            "4  Q ← W_q · X\n5  for h ∈ [H]: Y^h ← tanh(rows(Q, h, d_h))\n6  X ← X + [Y^1; …; Y^H]",
            "4  X ← X + tanh(W_q · X)",
        ),
    ),
    # ── operators
    "b · 1^⊺ repeats b": Same(
        "`b · 1^⊺` repeats b over the other operand's columns",
        (
            "4  X ← X + b_q · 1^⊺",
            "4  X ← b_q · 1^⊺ + X",
            "4  for t ∈ [ℓ]: X[:, t] ← X[:, t] + b_q",
        ),
    ),
    "division element-wise": Same(
        "`B` a scalar, or equal shapes (element-wise)",
        (
            "4  X ← X / (X ⊙ X + 1) + X / 2",
            "4  for t ∈ [ℓ]: X[:, t] ← X[:, t] / (X[:, t] ⊙ X[:, t] + 1) + X[:, t] / 2",
        ),
    ),
    "a transposed vector is a row": Same(
        "a vector(n) becomes a row 1×n",
        (
            "4  X ← X + b_k · (b_q^⊺ · X)",
            "4  for t ∈ [ℓ]: X[:, t] ← X[:, t] + (b_q^⊺ · X[:, t]) · b_k",
            "4  for t ∈ [ℓ]: X[:, t] ← X[:, t] + Σ_{i=1}^{d_e} b_q[i] · X[i, t] · b_k",
        ),
    ),
    "columns side by side": Same(
        "explicit columns side by side",
        (
            "4  C ← [W_q[:, 1], W_k[:, 2], b_q]\n5  X ← X + C · X[1:3, :]",
            "4  X ← X + W_q[:, 1] · X[1, :] + W_k[:, 2] · X[2, :] + b_q · X[3, :]",
        ),
    ),
    "blocks stacked by rows": Same(
        "explicit blocks stacked by rows",
        ("4  X ← X + [rows(X, 2, k); rows(X, 1, k)]", "4  X ← X + [X[k + 1 : d_e, :]; X[1 : k, :]]"),
    ),
    "a slice holds both ends": Same(
        "rows a…b inclusive (b−a+1 rows)",
        (
            "4  R ← [W_q[2:4, :]; W_k[4:6, :]] · X\n5  X ← X + W_o[:, 1:6] · R",
            "4  R ← [W_q[2, :]; W_q[3, :]; W_q[4, :]; W_k[4, :]; W_k[5, :]; W_k[6, :]] · X\n5  X ← X + W_o[:, 1:6] · R",
        ),
    ),
    "rows of a column": Same(
        "`X[a:b, t]` rows a … b of column t",
        (
            "4  for t ∈ [ℓ]: X[:, t] ← X[:, t] + [X[k + 1 : d_e, t]; X[1 : k, t]]",
            "4  X ← X + [X[k + 1 : d_e, :]; X[1 : k, :]]",
        ),
    ),
    "indices count from 1": Same(
        "`A[:, 2]` is A's second column",
        ("4  X ← X + W_q[:, 2] · 1^⊺", "4  for i ∈ [d_e]: c[i] ← W_q[i, 2]\n5  X ← X + c · 1^⊺"),
    ),
    "mod and ceiling of numbers": Same(
        "`A mod B`, `⌈x⌉` | scalars",
        (
            "4  for t ∈ [ℓ]: X[:, t] ← X[:, t] · (t mod 2) + ⌈t / 2⌉ · b_q",
            "4  for t ∈ [ℓ]: X[:, t] ← X[:, t] · ⟦t mod 2 = 1⟧ + ceil(t / 2) · b_q",
        ),
    ),
    # ── builtins
    "rows is a slice": Same(
        "`A[(i−1)·k+1 : i·k, :]` (head split)",
        (
            "4  X ← X + [rows(X, 2, k); rows(X, 1, k)]",
            "4  X ← X + [X[(2 − 1)·k + 1 : 2·k, :]; X[(1 − 1)·k + 1 : 1·k, :]]",
        ),
    ),
    "rows per head is a slice per head": Same(
        "`A[(i−1)·k+1 : i·k, :]` (head split)",
        (
            "4  Q ← W_q · X\n5  for h ∈ [H]: Y^h ← tanh(rows(Q, h, d_h))\n6  X ← X + [Y^1; …; Y^H]",
            "4  Q ← W_q · X\n5  for h ∈ [H]: Y^h ← tanh(Q[(h − 1)·d_h + 1 : h·d_h, :])\n6  X ← X + [Y^1; …; Y^H]",
            "4  Q ← W_q · X\n5  for h ∈ [H], t ∈ [ℓ]: Y^h[:, t] ← tanh(Q[(h − 1)·d_h + 1 : h·d_h, t])\n"
            "6  X ← X + [Y^1; …; Y^H]",
        ),
    ),
    "rows of a vector": Same(
        "on a vector, its i-th block of k entries",
        (
            "4  c ← [rows(b_q, 2, k); rows(b_q, 1, k)]\n5  X ← X + c · 1^⊺",
            "4  c ← [b_q[k + 1 : 2·k]; b_q[1 : k]]\n5  X ← X + c · 1^⊺",
        ),
    ),
    "max and min of each column": Same(
        "vector → scalar (per column of a matrix)",
        (
            "4  m ← max(X)\n5  n ← min(X)\n6  X ← X − b_q · m^⊺ + b_k · n^⊺",
            "4  for t ∈ [ℓ]: X[:, t] ← X[:, t] − max(X[:, t]) · b_q + min(X[:, t]) · b_k",
        ),
    ),
    "max and min of two numbers": Same(
        "`max(a, b)`, `min(a, b)` of two scalars",
        (
            "4  for t ∈ [ℓ]: X[:, t] ← X[:, t] · max(X[1, t], X[2, t]) + b_q · min(X[3, t], 0)",
            "4  for t ∈ [ℓ]: X[:, t] ← X[:, t] · (⟦X[1, t] ≥ X[2, t]⟧ · X[1, t] + ⟦X[1, t] < X[2, t]⟧ · X[2, t])"
            " + b_q · ⟦X[3, t] < 0⟧ · X[3, t]",
        ),
    ),
    "topk of each column": Same(
        "ties to the lower index; per column of a matrix",
        (
            "4  J ← topk(⌈2 · X⌉, 2)\n5  for t ∈ [ℓ]: X[:, t] ← X[:, t] + W_q[:, J[1, t]] − W_k[:, J[2, t]]",
            "4  for t ∈ [ℓ]: J[:, t] ← topk(⌈2 · X[:, t]⌉, 2)\n"
            "5  for t ∈ [ℓ]: X[:, t] ← X[:, t] + W_q[:, J[1, t]] − W_k[:, J[2, t]]",
        ),
    ),
    "element-wise builtins": Same(
        "`exp` `log` `tanh` `erf` `sin` `cos` `sqrt` `abs` `sigmoid`",
        (
            "4  X ← X + exp(X) / 10 + log(abs(X) + 1) + tanh(X) + erf(X) + sin(X) + cos(X) + sqrt(abs(X)) + sigmoid(X)",
            "4  for t ∈ [ℓ]: X[:, t] ← X[:, t] + exp(X[:, t]) / 10 + log(abs(X[:, t]) + 1) + tanh(X[:, t]) + "
            "erf(X[:, t]) + sin(X[:, t]) + cos(X[:, t]) + √(abs(X[:, t])) + sigmoid(X[:, t])",
        ),
    ),
    "ceil is ⌈⌉": Same("`ceil(x)`, written `⌈x⌉`", ("4  X ← X + ⌈2 · X⌉", "4  X ← X + ceil(2 · X)")),
    # ── calls
    "softmax of a matrix is softmax of each column": Same(
        "applies it per column",
        ("4  X ← X + softmax(W_q · X)", "4  for t ∈ [ℓ]: Y[:, t] ← softmax(W_q · X[:, t])\n5  X ← X + Y"),
    ),
    "an algorithm on a scalar maps over every entry": Same(
        "applies it element-wise",
        (
            "4  X ← X + GELU(W_q · X + b_q · 1^⊺)",
            "4  M ← W_q · X + b_q · 1^⊺\n5  for i ∈ [d_e], t ∈ [ℓ]: Y[i, t] ← GELU(M[i, t])\n6  X ← X + Y",
        ),
    ),
    "an algorithm on a vector maps over every column": Same(
        "the callee is applied to each column",
        (
            "4  X ← X + layer_norm(X | γ, β, ε)",
            "4  for t ∈ [ℓ]: X̃[:, t] ← layer_norm(X[:, t] | γ, β, ε)\n5  X ← X + X̃",
        ),
    ),
    "an optional hyperparameter left out": Same(
        "each one left out takes its default",
        (attention_with(CAUSAL), attention_with(CAUSAL + ", 0")),
    ),
    "a soft cap": Same(
        "soft-caps the scores to `c · tanh(s / c)` before the mask",
        (attention_with(CAUSAL + ", 2"), own_attention("2 · tanh(K^⊺ · Q / √d_h / 2)")),
    ),
    "a full mask": Same(
        "A full mask is `Mask[t_z, t_x] = 1`",
        (attention_with("Mask[t_z, t_x] = 1"), attention_with("Mask[t_z, t_x] = ⟦t_z ≤ t_x ∨ t_z > t_x⟧")),
    ),
    "a sliding window": Same(
        "a sliding window `⟦t_x − w < t_z ∧ t_z ≤ t_x⟧`",
        (
            attention_with("Mask[t_z, t_x] = ⟦t_x − 2 < t_z ∧ t_z ≤ t_x⟧"),
            attention_with("Mask[t_z, t_x] = ⟦t_z ≤ t_x ∧ t_z > t_x − 2⟧"),
        ),
    ),
    # ── statements
    "a loop's optional second value": Same(
        "(`2, ` is optional)",
        (
            "4  for l = 1, 2, …, L do\n5    X ← X + tanh(W_mlp2^l · GELU(W_mlp1^l · X + b_mlp1^l · 1^⊺))\n6  end",
            "4  for l = 1, …, L do\n5    X ← X + tanh(W_mlp2^l · GELU(W_mlp1^l · X + b_mlp1^l · 1^⊺))\n6  end",
            "4  X ← X + tanh(W_mlp2^1 · GELU(W_mlp1^1 · X + b_mlp1^1 · 1^⊺))\n"
            "5  X ← X + tanh(W_mlp2^2 · GELU(W_mlp1^2 · X + b_mlp1^2 · 1^⊺))",
        ),
    ),
    "a loop's step": Same(
        "a written second value sets the step",
        (
            "4  for i = 1, 3, …, d_e do\n5    X ← tanh(X) + b_q[i]\n6  end",
            "4  X ← tanh(X) + b_q[1]\n5  X ← tanh(X) + b_q[3]\n6  X ← tanh(X) + b_q[5]",
        ),
    ),
    "a map as a block": Same(
        "`for h ∈ [H] do` … `end`",
        (
            "4  for h ∈ [H] do\n5    μ_h ← b_q[h]\n6    Y^h ← μ_h · rows(X, h, d_h)\n7  end\n8  X ← X + [Y^1; …; Y^H]",
            "4  for h ∈ [H]: μ_h ← b_q[h]\n5  for h ∈ [H]: Y^h ← μ_h · rows(X, h, d_h)\n6  X ← X + [Y^1; …; Y^H]",
        ),
    ),
    "a condition on the loop index": Same(
        "`if l mod 6 ≠ 0 then` … `else` … `end`",
        (
            "4  for l = 1, …, L do\n5    if l mod 2 ≠ 0 then\n6      X ← X + tanh(W_o^l · X)\n7    else\n"
            "8      X ← X − tanh(W_o^l · X)\n9    end\n10 end",
            "4  X ← X + tanh(W_o^1 · X)\n5  X ← X − tanh(W_o^2 · X)",
        ),
    ),
    "entries written by affine indices": Same(
        "`y[2 · i − 1] ← …`",
        (
            on_columns(
                "1  for i ∈ [d_e / 2] do\n2    y[2 · i − 1] ← e[2 · i]\n3    y[2 · i] ← e[2 · i − 1]\n4  end\n5  return y"
            ),
            # the permutation that swaps 2i − 1 and 2i, by its entries
            "4  for i ∈ [d_e], j ∈ [d_e]: S[i, j] ← ⟦j = i + 1 − 2 · ((i + 1) mod 2)⟧\n5  X ← X + S · X",
        ),
    ),
    "a condition on an enumeration": Same(
        "an enumeration option is written as a bare name",
        (
            (
                "4  for t ∈ [ℓ]: Y[:, t] ← f(X[:, t] | doubled)\n5  X ← X + Y",
                COLUMN_ALGORITHM.replace("f(e)", "f(e | mode)").replace(
                    "BODY",
                    "Hyperparameters: mode ∈ {plain, doubled}\n1  y ← e\n2  if mode = doubled then y ← 2 · e\n3  return y",
                ),
            ),
            "4  X ← X + 2 · X",
        ),
    ),
    "indices counting down": Same(
        "indices counting down (`v[n + 1 − i]`)",
        (
            on_columns("1  for i ∈ [d_e]: y[i] ← e[d_e + 1 − i]\n2  return y"),
            "4  for i ∈ [d_e], j ∈ [d_e]: S[i, j] ← ⟦j = d_e + 1 − i⟧\n5  X ← X + S · X",
        ),
    ),
    "a condition inside a map": Same(
        "`if … else … end` inside maps",
        (
            "4  for h ∈ [H] do\n5    if h = 2 then\n6      Y^h ← −rows(X, h, d_h)\n7    else\n"
            "8      Y^h ← rows(X, h, d_h)\n9    end\n10 end\n11 X ← X + [Y^1; …; Y^H]",
            "4  for h ∈ [H]: Y^h ← (1 − 2 · ⟦h = 2⟧) · rows(X, h, d_h)\n5  X ← X + [Y^1; …; Y^H]",
        ),
    ),
    # ── meaning
    "assignment copies": Same(
        "`y ← x` then `y[i] ← …` leaves x alone",
        (
            on_columns("1  y ← e\n2  y[1] ← 0\n3  e[2] ← 0\n4  return y = e + y"),
            "4  for i ∈ [d_e]: c[i] ← 1 + ⟦i > 2⟧\n5  X ← X + c · 1^⊺ ⊙ X",
        ),
    ),
    "softmax written as a quotient": Same(
        "A quotient `exp(a) / Σ exp(b)`",
        (
            "4  Z ← 100 · W_q · X\n5  for t ∈ [ℓ]: Y[:, t] ← exp(Z[:, t]) / Σ_{i=1}^{d_e} exp(Z[i, t])\n6  X ← X + Y",
            "4  Z ← 100 · W_q · X\n5  X ← X + softmax(Z)",
        ),
    ),
    "the token embedding": Same(
        "the column of W_e for token v",
        ("4  for t ∈ [ℓ]: f_t ← token_embedding(x[t] | W_e)\n5  X ← X + [f_1, …, f_ℓ]", "4  X ← X + X"),
    ),
    # ── the prelude
    "fused attention is its steps": Same(
        "it splits `W_qkv` with `rows` into",
        (each_layer("6    X ← X + " + FUSED), each_layer(FUSED_STEPS), each_layer("6    X ← X + " + BUNDLE)),
    ),
    "grouped-query heads": Same(
        "query head h reads key/value head ⌈h·H_kv/H⌉",
        (
            f"{GQA_QKV}\n7  Y ← GQAttention(Q, K, V | 2 · H, 2, none, θ_base, ones(| 1), {CAUSAL})\n{GQA_OUT}",
            grouped("rows(K, ⌈h · 2 / (2 · H)⌉, d_h)"),
        ),
    ),
    "an enumeration option at a call": Same(
        "passes `layout = pairs` without the caller declaring the enumeration",
        (
            "4  for h ∈ [H], t ∈ [ℓ]: Y^h[:, t] ← rope(rows(X[:, t], h, d_h), t | pairs, θ_base, ones(| 1))\n"
            "5  X ← X + [Y^1; …; Y^H]",
            "4  for h ∈ [H], t ∈ [ℓ]: Y^h[:, t] ← rope_pairs(rows(X[:, t], h, d_h), t | θ_base, ones(| 1))\n"
            "5  X ← X + [Y^1; …; Y^H]",
        ),
    ),
    "RoPE on halves is RoPE on pairs of the halves' entries": Same(
        "NEOX-type models rotate entry i with entry i + d_h/2",
        (
            "4  for t ∈ [ℓ]: X[:, t] ← rope_halves(X[:, t], t | θ_base, ones(| k))",
            # S · x puts x[i] and x[i + k] side by side: (S · x)[2i − 1] = x[i], (S · x)[2i] = x[i + k]
            "4  for r ∈ [d_e], j ∈ [d_e]: S[r, j] ← ⟦2 · j = r + 1⟧ + ⟦2 · (j − k) = r⟧\n"
            "5  for t ∈ [ℓ]: X[:, t] ← S^⊺ · rope_pairs(S · X[:, t], t | θ_base, ones(| k))",
        ),
    ),
    "partial rotary": Same(
        "the first d_r entries of each head rotate",
        (
            "4  for t ∈ [ℓ]: X[:, t] ← rope_pairs(X[:, t], t | θ_base, ones(| 1))",
            "4  for t ∈ [ℓ]: X[:, t] ← [rope_pairs(X[1:2, t], t | θ_base, ones(| 1)); X[3 : d_e, t]]",
        ),
    ),
    "a score scale as a factor on Q": Same(
        "A score scale other than 1/√d_h is a factor on Q",
        (
            own_attention("K^⊺ · Q / 2"),
            HEADS_OF.format(
                head="attention(√d_h / 2 · rows(Q, h, d_h), rows(K, h, d_h), rows(X, h, d_h) | "
                + CAUSAL
                + ")"
            ),
        ),
    ),
    # ── a state, and the same without one
    "a running sum": Same(
        "The same sums and differences can be written without a state",
        (
            ("4  X ← X + running_sum(X)", "ALGORITHM running_sum"),
            "4  for t ∈ [ℓ]: S[:, t] ← Σ_{r=1}^{t} X[:, r]\n5  X ← X + S",
        ),
    ),
    "a difference of neighbouring tokens": Same(
        "The same sums and differences can be written without a state",
        (
            "4  X̄ ← [zeros(d_e), X]\n5  for t ∈ [ℓ]: G[:, t] ← X̄[:, t + 1] − X̄[:, t]\n6  X ← X + G",
            "4  Y ← X\n5  for t = 2, …, ℓ do\n6    Y[:, t] ← X[:, t] − X[:, t − 1]\n7  end\n8  X ← X + Y",
        ),
    ),
    "a window of columns": Same(
        "a window of columns in a map",
        (
            "4  X̄ ← [zeros(d_e), zeros(d_e), X]\n5  for t ∈ [ℓ]: G[:, t] ← X̄[:, t : t + 2] · W_q[1:3, 1]"
            "\n6  X ← X + G",
            "4  X̄ ← [zeros(d_e), zeros(d_e), X]\n"
            "5  for t ∈ [ℓ]: G[:, t] ← W_q[1, 1] · X̄[:, t] + W_q[2, 1] · X̄[:, t + 1] + W_q[3, 1] · X̄[:, t + 2]"
            "\n6  X ← X + G",
        ),
    ),
    # ── the cache: reads it follows, and reads that make decoding recompute
    "a causal condition written as an entry write": Same(
        "or `if t_z > t_x then S[t_z, t_x] ← −∞`", (own_attention("K^⊺ · Q / √d_h"), attention_with(CAUSAL))
    ),
    "a fixed column": Same("a fixed column `X[:, 1]`", ("4  X ← X + X[:, 1] · 1^⊺",)),
    "the number of tokens as a value": Same("the number ℓ as a value", ("4  X ← X · ℓ / 4",)),
    "a Σ over the tokens": Same("a Σ over the tokens", ("4  X ← X + Σ_{u=1}^{ℓ} e_u · 1^⊺ / ℓ",)),
    "keys with the queries' own length": Same(
        "keys declared with the queries' own length",
        (
            (
                HEADS_OF.format(head=CALL_ATT),
                ATTENTION.replace("SCORES", "K^⊺ · Q / √d_h").replace("ℓ_z", "ℓ_x"),
            ),
        ),
    ),
}


@dataclasses.dataclass(frozen=True)
class Refused:
    """A spelling the page says the code generators refuse."""

    doc: str  # the page's words that say so
    steps: str
    at: str  # the sub-expression the error points at
    works: str  # a spelling that works, which the hint names
    instead: str  # that spelling: steps that run


REFUSED: dict[str, Refused] = {
    "a stored stack's matrix picked per token": Refused(
        "picked per token by a parallel map's variable or a computed index it is refused",
        "4  for t ∈ [ℓ]: X[:, t] ← X[:, t] + W_s[x[t] mod 2 + 1, :, :] · X[:, t]",
        "W_s[x[t] mod 2 + 1, :, :]",
        "for e = 1, …, E do",
        "4  for e = 1, …, E do\n5    for t ∈ [ℓ]: X[:, t] ← X[:, t] + ⟦x[t] mod 2 + 1 = e⟧ · W_s[e, :, :] · X[:, t]\n6  end",
    ),
    "a stored stack's matrix picked by a map's variable": Refused(
        "picked per token by a parallel map's variable or a computed index it is refused",
        "4  for e ∈ [E]: Y_e ← W_s[e, :, :] · X\n5  X ← X + Y_1 + Y_2",
        "W_s[e, :, :]",
        "for e = 1, …, E do",
        "4  for e = 1, …, E do\n5    X ← X + W_s[e, :, :] · X\n6  end",
    ),
}
