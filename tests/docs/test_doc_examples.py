"""Every spelling docs/card-language.md shows generates, and runs like the reference interpreter.

Two sources of cards:

- **the page's own blocks**, read from the markdown (outside the error catalogue, which
  tests/docs/test_card_docs.py holds to its messages): a whole card (a block that starts with
  `toycards 1` or `Algorithm`), a run of steps, or a run of declarations; a block of other text
  (Python) is left out. A model card runs as
  it is, with the hyperparameters of VALUES; an algorithm that is not a model runs inside FRAME,
  whose steps call it on every column; steps run inside FRAME's layer loop; declarations take
  the place of FRAME's own declarations of the same names. A new block is tested without a
  change here.
- **the equivalences the prose states** (`rows(A, i, k)` is the slice `A[(i−1)·k+1 : i·k, :]`,
  `softmax` of a matrix is a map of softmax over its columns, `b · 1^⊺` repeats b, a Σ's body
  ends at the next `+`, the ASCII spelling of every token …), written out in SAME as two or more
  spellings of FRAME's steps, each with the words of the page that state it (which must still be
  there). The interpreter gives every spelling of a case the same numbers.

Each card is held to the interpreter (tests/lang/test_interpreter.py's tolerance) on both targets,
with shapes exactly equal: the full pass on batches of 1, 2 and H sequences of 1, H and d_e
tokens, and cached decoding (H tokens, one, then the rest) on batches of 1 and H against the
interpreter's own (its full pass, where no token reads a later one). A card whose
generated module decodes by running the whole sequence again (a `CacheRecomputes` warning) is
exact but slower; the page says so in the paragraph that shows the spelling. A spelling the
page says the code generators refuse (REFUSED) is refused at the sub-expression, with a hint
naming a spelling that works, and that spelling runs.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from test_interpreter import TARGETS, close_to_reference, same_random_weights
from test_models_oracle import with_values

from toycards.errors import ToycardsError
from toycards.lang import ir
from toycards.lang.parse import parse
from toycards.lang.printer import render_card
from toycards.library import library_algorithms
from toycards.models.load import load
from toycards.runtime.model_base import CacheRecomputes

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "card-language.md"
DOC = DOC_PATH.read_text(encoding="utf-8")

# the sizes every card runs at: H heads, d_e features, and sequences of 1, H and d_e tokens
VALUES: dict[str, int | float] = {
    "L": 2, "H": 3, "d_e": 6, "d_mlp": 4, "ℓ_max": 8, "E": 2, "N_V": 11,
    "ε": 1e-5, "θ_base": 10000.0,
}  # fmt: skip
H, D = VALUES["H"], VALUES["d_e"]
LENGTHS, BATCHES = (1, H, D), (1, 2, H)

# A model whose steps 4… are the spelling under test; its names are the ones the page uses.
FRAME = """toycards 1
{algorithms}
Algorithm: P ← Net(x | θ)
/* the frame of a spelling from docs/card-language.md: the steps after X are the spelling */
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{N_V×ℓ}
Hyperparameters:
  L ∈ ℕ       from "{arch}.block_count"
  H ∈ ℕ       from "{arch}.attention.head_count"
  d_e ∈ ℕ     from "{arch}.embedding_length"
  d_mlp ∈ ℕ   from "{arch}.feed_forward_length"
  ℓ_max ∈ ℕ   from "{arch}.context_length"
  E ∈ ℕ       from "{arch}.expert_count"
  ε ∈ ℝ       from "{arch}.attention.layer_norm_epsilon"
  θ_base ∈ ℝ  from "{arch}.rope.freq_base"
  N_V ∈ ℕ
  d_h ∈ ℕ     ≔ d_e / H
  k ∈ ℕ       ≔ d_e / 2
Parameters:
  W_e ∈ ℝ^{d_e×N_V}                 from "token_embd.weight"^⊺
  W_p ∈ ℝ^{d_e×ℓ_max}               from "position_embd.weight"^⊺
  W_q, W_k, W_v, W_o ∈ ℝ^{d_e×d_e}  from "q.weight", "k.weight", "v.weight", "o.weight"
  b_q, b_k, b_v, b_o ∈ ℝ^{d_e}      from "q.bias", "k.bias", "v.bias", "o.bias"
  W_s ∈ ℝ^{E×d_e×d_e}               from "stack.weight"
  γ, β ∈ ℝ^{d_e}                    from "output_norm.weight", "output_norm.bias"
  for l ∈ [L], in "blk.{l-1}.":
    γ_l^1, β_l^1 ∈ ℝ^{d_e}    from "attn_norm.weight", "attn_norm.bias"
    W_qkv^l ∈ ℝ^{3·d_e×d_e}   from "attn_qkv.weight"
    b_qkv^l ∈ ℝ^{3·d_e}       from "attn_qkv.bias"
    W_o^l ∈ ℝ^{d_e×d_e}       from "attn_output.weight"
    b_o^l ∈ ℝ^{d_e}           from "attn_output.bias"
    W_mlp1^l ∈ ℝ^{d_mlp×d_e}  from "ffn_up.weight"
    b_mlp1^l ∈ ℝ^{d_mlp}      from "ffn_up.bias"
    W_mlp2^l ∈ ℝ^{d_e×d_mlp}  from "ffn_down.weight"
    b_mlp2^l ∈ ℝ^{d_e}        from "ffn_down.bias"
  W_u ∈ ℝ^{N_V×d_e}                 from "output.weight"
1  ℓ ← length(x)
2  for t ∈ [ℓ]: e_t ← W_e[:, x[t]]
3  X ← [e_1, …, e_ℓ]
{steps}
   return P = softmax(W_u · X)
"""

# a run of steps from the page runs inside a layer, after the layer's normalisation
IN_A_LAYER = """4  for l = 1, 2, …, L do
5    for t ∈ [ℓ]: X̃[:, t] ← layer_norm(X[:, t] | γ_l^1, β_l^1, ε)
{steps}
   end"""


def framed(steps: str, algorithms: str = "") -> str:
    """FRAME with `steps` and the card's own `algorithms`."""
    text = FRAME.replace("{algorithms}", algorithms and "\n" + algorithms.strip() + "\n")
    return text.replace("{steps}", steps.strip("\n"))


@functools.cache
def bound(text: str) -> ir.Card:
    """The model card `text` with concrete hyperparameters: VALUES for each one it declares unbound."""
    return with_values(parse(text), VALUES)


# ── the page's blocks ─────────────────────────────────────────────────────────────────────
@dataclasses.dataclass(frozen=True)
class Block:
    line: int  # where the block starts on the page
    text: str
    before: str  # the page's text between the previous block and this one


def doc_blocks() -> list[Block]:
    """Every ``` block of the page outside the error catalogue but those tagged with a language
    (```python)."""
    errors = DOC.index("\n## Errors\n"), DOC.index("\n## Known limitations")
    out, last = [], 0
    for m in re.finditer(r"^```(\w*)\n(.*?)^```$", DOC, re.S | re.M):
        if not m.group(1) and not errors[0] < m.start() < errors[1]:
            out.append(Block(DOC.count("\n", 0, m.start()) + 1, m.group(2), DOC[last : m.start()]))
        last = m.end()
    return out


# a block title, a group header, or `names ∈ type`
DECLARATION = re.compile(
    r"\s*((Input|Output|Hyperparameters|Parameters|State):|for \w+ ∈ \[\w+\], in \"|(?!\s*for )[^←:]+ ∈ )"
)


def kind_of(block: Block) -> str:
    """What a block holds: a card, declarations, steps, or other text (Python, a shell)."""
    if block.text.startswith(("toycards 1\n", "Algorithm")):
        return "card"
    if DECLARATION.match(block.text):
        return "declarations"
    if re.search("←|<-", block.text):
        return "steps"
    return "other"


BLOCKS = [b for b in doc_blocks() if kind_of(b) != "other"]


def card_of_block(block: Block) -> str:
    """The model that runs `block`: see the module docstring."""
    kind = kind_of(block)
    if kind == "steps":
        body = "\n".join("     " + re.sub(r"^\s*\d+\s+", "", s) for s in block.text.splitlines() if s.strip())
        return framed(IN_A_LAYER.replace("{steps}", body))
    if kind == "declarations":
        return with_declarations(block.text)
    card = parse(block.text)
    if is_model(card.main):
        return block.text
    steps = caller(card.main)
    text = block.text.split("\n", 1)[1] if block.text.startswith("toycards 1\n") else block.text
    return framed(steps, text)


def is_model(algorithm: ir.Algorithm) -> bool:
    return any(isinstance(d.type, ir.TensorType) and d.type.field == "V" for d in algorithm.input_decls)


def caller(algorithm: ir.Algorithm) -> str:
    """FRAME steps that call `algorithm` and add its result to X: on each column when an input is a
    vector (`X[:, t]`) or a number (`X[1, t]`), on X when every input is a matrix. Its parameters get
    FRAME's matrices and vectors in turn, a real hyperparameter ε, a natural one H, a mask the causal
    one, an enumeration its first option; an optional hyperparameter is left out."""
    decls = {n: d for d in algorithm.input_decls + algorithm.hyper_decls for n in d.names}
    decls |= {n: d for d, _ in algorithm.all_params() for n in d.names}
    matrices, vectors = iter(["W_q", "W_k", "W_v", "W_o"]), iter(["γ", "β", "b_q", "b_k"])
    params: list[str] = []
    for d in (decls[name] for name in algorithm.params):
        if d.binding is not None and d.binding.kind == "default":
            continue
        if isinstance(d.type, ir.EnumType):
            params.append(d.type.options[0])
        elif isinstance(d.type, ir.TensorType) and d.type.field == "B":
            params.append("Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧")
        elif isinstance(d.type, ir.TensorType) and d.type.dims:
            params.append(next(matrices if len(d.type.dims) == 2 else vectors))
        else:
            params.append("ε" if d.type == ir.TensorType("R") else "H")
    ranks = [len(decls[n].type.dims) for n in algorithm.inputs]
    args = ", ".join("X" if r == 2 else "X[:, t]" if r == 1 else "X[1, t]" for r in ranks)
    call = f"{algorithm.name}({args} | {', '.join(params)})"
    if all(r == 2 for r in ranks):
        return f"4  X ← X + {call}"
    return f"4  for t ∈ [ℓ]: Y[:, t] ← {call}\n5  X ← X + Y"


def declared_names(line: str) -> set[str]:
    """The names a declaration line declares (`γ_l^1, β_l^1 ∈ ℝ^{d_e} …` → {γ_l^1, β_l^1}); none for
    a block title or a group header."""
    m = re.match(r"\s*(.+?) ∈ ", line)
    return {n.strip() for n in m.group(1).split(",")} if m and not m.group(1).startswith("for ") else set()


# what a run of declarations from the page runs: GPT-2's attention layer, which reads them
A_LAYER = IN_A_LAYER.replace(
    "{steps}",
    "6    X ← X + MHAttention_fused(X̃ | W_qkv^l, b_qkv^l, W_o^l, b_o^l, H, Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧)",
)


def with_declarations(fragment: str) -> str:
    """FRAME, with A_LAYER as its steps, and the declarations of `fragment` in place of its own of
    the same names: scalars among the hyperparameters, a name with the layer index (`γ_l^1`) in the
    layer group, the rest among the parameters."""
    lines = FRAME.replace("{steps}", A_LAYER).splitlines()
    for line in fragment.splitlines():
        names = declared_names(line)
        if not names:
            continue  # a block title or a group header: FRAME has both
        lines = [s for s in lines if not declared_names(s) & names]
        if re.search(r"∈ (ℕ|ℝ|\{)(?!\^)", line):
            at, indent = lines.index("Parameters:"), "  "
        elif any(re.search(r"(_l|\^l)\b", n) for n in names):
            at, indent = lines.index('  W_u ∈ ℝ^{N_V×d_e}                 from "output.weight"'), "    "
        else:
            at, indent = lines.index('  for l ∈ [L], in "blk.{l-1}.":'), "  "
        lines.insert(at, indent + line.strip())
    return "\n".join(lines + [""]).replace("{algorithms}", "")


# ── running a card ────────────────────────────────────────────────────────────────────────
# cached decoding: H tokens, one, then the rest
CHUNKS = ((0, H), (H, H + 1), (H + 1, D))


@functools.cache
def ids() -> np.ndarray:
    """H sequences of d_e token ids (0 … N_V − 1); shorter sequences are their beginnings."""
    return np.random.default_rng(7).integers(0, VALUES["N_V"], (H, D))


@functools.cache
def reference(text: str):
    """The interpreter's model of `text` (random weights, seed 0) and its float64 logits [H, T, N_V]
    on the first T tokens of ids(), for T in LENGTHS and the ends of CHUNKS."""
    ref = load(bound(text), target="reference")
    same_random_weights({"reference": ref})
    return ref, {T: ref(ids()[:, :T]) for T in sorted({*LENGTHS, *(stop for _, stop in CHUNKS)})}


def reference_decoded(text: str) -> np.ndarray:
    """The interpreter's cached decoding [H, d_e, N_V] in CHUNKS: each pass runs the card on the tokens
    so far and gives the new ones' logits (the full pass's, where no token reads a later one)."""
    _, full = reference(text)
    return np.concatenate([full[stop][:, start:stop] for start, stop in CHUNKS], axis=-2)


def generated(text: str, target: str):
    """The `target` model of `text` with the reference's weights; a code generator's refusal fails
    the test with its message."""
    ref, _ = reference(text)
    try:
        m = load(bound(text), target=target)
    except ToycardsError as exc:
        pytest.fail(f"{target} refuses a spelling the page shows:\n{exc}\n\n{render_card(bound(text))}")
    for name, w in ref.w.items():
        if target == "torch":
            import torch

            with torch.no_grad():
                m.w[name].copy_(torch.from_numpy(np.asarray(w, np.float32)))
        else:
            m.w[name] = np.asarray(w, np.float32)
    return m


PASSED: dict[tuple[str, str], bool] = {}  # (card, target) → whether decoding recomputes, once it ran right


def runs_like_the_interpreter(text: str, target: str, what: str) -> bool:
    """Hold `target`'s module of `text` to the interpreter: full pass on every batch and length,
    cached decoding on batches of 1 and H. Whether decoding recomputes the whole sequence."""
    if (text, target) in PASSED:  # a spelling that several cases show
        return PASSED[text, target]
    _, want = reference(text)
    decoded = reference_decoded(text)
    m = generated(text, target)
    for T in LENGTHS:
        for B in BATCHES:
            got = m._forward_numpy(ids()[:B, :T], None)
            assert got.shape == want[T][:B].shape, (
                f"{what}, {target}: batch {B}, {T} tokens: shape {got.shape}"
            )
            close(got, want[T][:B], f"{what}, {target}, batch {B}, {T} tokens")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", CacheRecomputes)
        for B in (1, H):
            cache, parts = m.new_cache(), []
            for start, stop in CHUNKS:
                parts.append(m._forward_numpy(ids()[:B, start:stop], cache))
            got = np.concatenate(parts, axis=-2)
            assert got.shape == decoded[:B].shape, f"{what}, {target}: cached, batch {B}: shape {got.shape}"
            close(got, decoded[:B], f"{what}, {target}, cached, batch {B}")
    recomputes = any(issubclass(w.category, CacheRecomputes) for w in said)
    assert recomputes == bool(m.RECOMPUTE), (recomputes, m.RECOMPUTE)
    PASSED[text, target] = recomputes
    return recomputes


def on_the_page(quote: str) -> re.Match | None:
    """Where the page says `quote`, whose spaces may be line breaks there."""
    return re.search(r"\s+".join(map(re.escape, quote.split())), DOC)


def close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """tests/lang/test_interpreter.py's tolerance, on logits [B, T, N_V] (the worst row counted in B·T)."""
    n = want.shape[-1]
    close_to_reference(got.reshape(-1, n), want.reshape(-1, n), what)


def paragraph_of(quote: str) -> str:
    """The paragraph (or table row, or list item) of the page that holds `quote`."""
    at = on_the_page(quote).start()
    start = max(DOC.rfind("\n\n", 0, at), DOC.rfind("\n|", 0, at), DOC.rfind("\n- ", 0, at))
    ends = [e for e in (DOC.find("\n\n", at), DOC.find("\n|", at), DOC.find("\n- ", at)) if e >= 0]
    return DOC[start : min(ends, default=len(DOC))]


RECOMPUTE_SAID = re.compile(r"recomput|CacheRecomputes|rereads|the\s+whole\s+sequence\s+again")


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


# ── the tests ─────────────────────────────────────────────────────────────────────────────
def spelled(spelling) -> str:
    """FRAME with a spelling's steps and algorithms (`ALGORITHM name`: the page's algorithm `name`)."""
    steps, algorithms = (spelling, "") if isinstance(spelling, str) else spelling
    if algorithms.startswith("ALGORITHM "):
        algorithms = the_pages_algorithm(algorithms.split()[1])
    return framed(steps, algorithms)


def the_pages_algorithm(name: str) -> str:
    """The block of the page that defines the algorithm `name`."""
    shown = [b.text for b in BLOCKS if kind_of(b) == "card" and parse(b.text).main.name == name]
    assert shown, f"the page no longer shows the algorithm {name}"
    return shown[0]


SPELLINGS = [(name, i) for name, case in SAME.items() for i in range(len(case.spellings))]


def test_the_page_has_examples_of_each_kind():
    kinds = [kind_of(b) for b in BLOCKS]
    assert kinds.count("card") >= 3 and "steps" in kinds and "declarations" in kinds, kinds


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("block", BLOCKS, ids=[f"line {b.line}" for b in BLOCKS])
def test_a_block_of_the_page_runs_like_the_interpreter(block, target):
    recomputes = runs_like_the_interpreter(card_of_block(block), target, f"docs line {block.line}")
    assert not recomputes or RECOMPUTE_SAID.search(block.before), (
        f"docs line {block.line}: decoding recomputes the whole sequence; the page should say so before the block"
    )


def test_the_ascii_spelling_of_every_token_is_the_same_card():
    assert parse(framed(ASCII_SPELLED)) == parse(framed(ASCII_STEPS))


def test_a_card_in_ascii_is_the_card_in_unicode():
    pairs = [(a, b) for a, b in zip(BLOCKS, BLOCKS[1:]) if "same card in ASCII" in b.before]
    assert pairs
    for unicode, ascii in pairs:
        assert parse(ascii.text) == parse(unicode.text), f"docs line {ascii.line}"


def library_named(block: Block) -> bool:
    """Whether `block` shows an algorithm that is not a model under a name the library has."""
    if kind_of(block) != "card":
        return False
    algorithm = parse(block.text).main
    return not is_model(algorithm) and algorithm.name in library_algorithms()


@pytest.mark.parametrize("block", [b for b in BLOCKS if library_named(b)], ids=lambda b: f"line {b.line}")
def test_an_algorithm_of_the_page_computes_the_librarys(block):
    """An algorithm the page shows under a library algorithm's name computes what the library's does."""
    algorithm = parse(block.text).main
    _, mine = reference(card_of_block(block))
    _, prelude = reference(framed(caller(algorithm)))
    for T in LENGTHS:
        np.testing.assert_allclose(
            mine[T], prelude[T], rtol=0, atol=1e-9 * max(1.0, float(np.abs(prelude[T]).max()))
        )


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name,i", SPELLINGS, ids=[f"{n} ({i + 1})" for n, i in SPELLINGS])
def test_a_spelling_runs_like_the_interpreter(name, i, target):
    case = SAME[name]
    recomputes = runs_like_the_interpreter(spelled(case.spellings[i]), target, f"{name}, spelling {i + 1}")
    assert not recomputes or RECOMPUTE_SAID.search(paragraph_of(case.doc)), (
        f"{name}: decoding recomputes the whole sequence; the page should say so next to {case.doc!r}"
    )


@pytest.mark.parametrize("name", SAME)
def test_the_spellings_compute_the_same(name):
    case = SAME[name]
    assert on_the_page(case.doc), f"{name}: the page no longer says {case.doc!r}"
    _, first = reference(spelled(case.spellings[0]))
    for n, spelling in enumerate(case.spellings[1:], 2):
        _, other = reference(spelled(spelling))
        for T in LENGTHS:
            bound = 1e-9 * max(1.0, float(np.abs(first[T]).max()))
            np.testing.assert_allclose(
                other[T], first[T], rtol=0, atol=bound, err_msg=f"{name}: spelling {n}, {T} tokens"
            )


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", REFUSED)
def test_a_refused_spelling_names_one_that_works(name, target):
    case = REFUSED[name]
    assert on_the_page(case.doc), f"{name}: the page no longer says {case.doc!r}"
    text = framed(case.steps)
    with pytest.raises(ToycardsError, match="cannot generate code") as caught:
        load(bound(text), target=target)
    diagnostic = caught.value.diagnostics[0]
    assert text[diagnostic.span.start : diagnostic.span.end] == case.at, str(caught.value)
    assert case.works in diagnostic.hint, str(caught.value)
    runs_like_the_interpreter(framed(case.instead), target, f"{name}: what the hint names")
