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
from doc_equivalences import ASCII_SPELLED, ASCII_STEPS, REFUSED, SAME
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
    "n_kv": (0, 1),  # per layer: a convolution block, then an attention block with H_kv = 1
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
