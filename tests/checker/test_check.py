"""Tests for the checker (toycards.check).

Oracles: hand-written cards with one planted mistake each, where the expected line and column
are computed from the card text itself (the position of the offending token), messages and
shapes written out by hand from the semantics, exact integer arithmetic for the symbolic
dimensions (hypothesis compares `evaluate` with Python's own arithmetic), and the library cards,
which must check clean. A small library card (MINI) stands in for the prelude so that these
tests do not depend on how the prelude's bodies are written.
"""

from __future__ import annotations

import ast
import dataclasses
import operator
import os
import re
from fractions import Fraction
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toycards.checker import Dim, DimError, check, check_card, evaluate
from toycards.checker.dims import from_ir, solve_for
from toycards.checker.shapes import DimEq, Shape
from toycards.errors import Diagnostic
from toycards.lang import ir
from toycards.lang.parse import parse
from toycards.library import parse_library_card

MINI = parse(
    """\
Algorithm: y ← softmax(x)
Input: x ∈ ℝ^{n}
Output: y ∈ (0,1)^{n}
1 z ← exp(x − max(x))
2 return y = z / Σ_{i=1}^{n} z[i]

Algorithm: ê ← layer_norm(e | γ, β, ε)
Input: e ∈ ℝ^{d_e}
Output: ê ∈ ℝ^{d_e}
Hyperparameters: ε ∈ ℝ
Parameters:
  γ, β ∈ ℝ^{d_e}
1 m ← Σ_{i=1}^{d_e} e[i] / d_e
2 v ← Σ_{i=1}^{d_e} (e[i] − m)^2 / d_e
3 return ê = (e − m) / √(v + ε) ⊙ γ + β

Algorithm: y ← GELU_tanh(x)
Input: x ∈ ℝ
Output: y ∈ ℝ
1 return y = 0.5 · x · (1 + tanh(√(2 / π) · (x + 0.044715 · (x)^3)))

Algorithm: Ṽ ← attention(Q, K, V | Mask)
Input:
  Q ∈ ℝ^{d_h×ℓ_x}
  K, V ∈ ℝ^{d_h×ℓ_z}
Output: Ṽ ∈ ℝ^{d_h×ℓ_x}
Hyperparameters: Mask ∈ {0,1}^{ℓ_z×ℓ_x}
1 S ← K^⊺ · Q / √d_h  ∷ ℝ^{ℓ_z×ℓ_x}
2 for t_z ∈ [ℓ_z], t_x ∈ [ℓ_x] do
3   if ¬Mask[t_z, t_x] then S[t_z, t_x] ← −∞
4 end
5 return Ṽ = V · softmax(S)

Algorithm: Ṽ ← MHAttention_fused(X | W_qkv, b_qkv, W_o, b_o, H, Mask)
Input: X ∈ ℝ^{d_e×ℓ}
Output: Ṽ ∈ ℝ^{d_e×ℓ}
Hyperparameters:
  H ∈ ℕ
  Mask ∈ {0,1}^{ℓ×ℓ}
  d_h ∈ ℕ ≔ d_e / H
Parameters:
  W_qkv ∈ ℝ^{3·d_e×d_e}
  b_qkv ∈ ℝ^{3·d_e}
  W_o ∈ ℝ^{d_e×d_e}
  b_o ∈ ℝ^{d_e}
1 A ← W_qkv · X + b_qkv · 1^⊺  ∷ ℝ^{3·d_e×ℓ}
2 for h ∈ [H] do
3   Q ← rows(A, h, d_h)
4   K ← rows(A, H + h, d_h)
5   V ← rows(A, 2·H + h, d_h)
6   Y^h ← attention(Q, K, V | Mask)  ∷ ℝ^{d_h×ℓ}
7 end
8 Y ← [Y^1; …; Y^H]  ∷ ℝ^{H·d_h×ℓ}
9 return Ṽ = W_o · Y + b_o · 1^⊺
""",
    file="mini.card",
)

BASE = """\
Algorithm: P ← Tiny(x | θ)
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{N_V×ℓ}
Hyperparameters:
  L ∈ ℕ      from "{arch}.block_count"
  H ∈ ℕ      from "{arch}.attention.head_count"
  d_e ∈ ℕ    from "{arch}.embedding_length"
  d_mlp ∈ ℕ  from "{arch}.feed_forward_length"
  ε ∈ ℝ      from "{arch}.attention.layer_norm_epsilon" default 1e-5
  scaling ∈ {none, linear}  from "{arch}.rope.scaling.type" default none
  N_V ∈ ℕ
Parameters:
  W_e ∈ ℝ^{d_e×N_V}  from "token_embd.weight"^⊺
  for l ∈ [L], in "blk.{l-1}.":
    γ_l^1, β_l^1 ∈ ℝ^{d_e}    from "attn_norm.weight", "attn_norm.bias"
    W_qkv^l ∈ ℝ^{3·d_e×d_e}   from "attn_qkv.weight"
    b_qkv^l ∈ ℝ^{3·d_e}       from "attn_qkv.bias"
    W_o^l ∈ ℝ^{d_e×d_e}       from "attn_output.weight"
    b_o^l ∈ ℝ^{d_e}           from "attn_output.bias"
    W_mlp1^l ∈ ℝ^{d_mlp×d_e}  from "ffn_up.weight"
    b_mlp1^l ∈ ℝ^{d_mlp}      from "ffn_up.bias"
    W_mlp2^l ∈ ℝ^{d_e×d_mlp}  from "ffn_down.weight"
  W_u ∈ ℝ^{N_V×d_e}  from "output.weight" or "token_embd.weight"
1 ℓ ← length(x)
2 for t ∈ [ℓ]: e_t ← W_e[:, x[t]]
3 X ← [e_1, …, e_ℓ]  ∷ ℝ^{d_e×ℓ}
4 for l = 1, 2, …, L do
5   for t ∈ [ℓ]: X̃[:, t] ← layer_norm(X[:, t] | γ_l^1, β_l^1, ε)
6   X ← X + MHAttention_fused(X̃ | W_qkv^l, b_qkv^l, W_o^l, b_o^l, H, Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧)
7   if scaling = linear then X ← X ⊙ X
8   X ← X + W_mlp2^l · GELU_tanh(W_mlp1^l · X + b_mlp1^l · 1^⊺)  ∷ ℝ^{d_e×ℓ}
9 end
10 Z ← W_u · X  ∷ ℝ^{N_V×ℓ}
11 return P = softmax(Z)
"""


def run(text: str, library: ir.Card | bool = MINI):
    card = parse(text, file="t.card")
    return card, check_card(card, library=library)


def diags(text: str, library: ir.Card | bool = MINI) -> list[Diagnostic]:
    return run(text, library)[1].diagnostics


def mutate(old: str, new: str, text: str = BASE) -> str:
    assert old in text, f"{old!r} is not in the card"
    return text.replace(old, new, 1)


def position(text: str, anchor: str, token: str) -> tuple[int, int]:
    """(line, column), 1-based, of `token` searched from the start of the line that holds the
    first occurrence of `anchor` (from the start of the card when it is not there)."""
    line_start = text.rfind("\n", 0, text.index(anchor)) + 1
    offset = text.find(token, line_start)
    offset = offset if offset >= 0 else text.index(token)
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def show(ds: list[Diagnostic]) -> str:
    return "\n".join(f"{d.span.line}:{d.span.col}: {d.message} (hint: {d.hint})" for d in ds) or "(none)"


def only(text: str, fragment: str, library: ir.Card | bool = MINI) -> Diagnostic:
    ds = diags(text, library)
    assert len(ds) == 1 and fragment in ds[0].message, (
        f"want one diagnostic with {fragment!r}, got:\n{show(ds)}"
    )
    return ds[0]


def assert_at(d: Diagnostic, text: str, anchor: str, token: str) -> None:
    want = position(text, anchor, token)
    assert (d.span.line, d.span.col) == want, f"{d.message}: at {d.span.line}:{d.span.col}, want {want}"


# ── symbolic dimensions ─────────────────────────────────────────────────────────────────
d_e, H, d_h, a, b = (Dim.name(n) for n in ("d_e", "H", "d_h", "a", "b"))


def test_normal_form_commutes_and_collects():
    assert 3 * d_e == d_e * 3 and str(d_e * 3) == "3·d_e"
    assert d_e + d_e == 2 * d_e and d_e - d_e == 0
    assert (a + b) * (a - b) == a * a - b * b
    assert hash(3 * d_e) == hash(d_e * 3)


def test_derived_hyperparameters_are_substituted():
    eq = DimEq({"d_h": d_e / H})
    assert eq.same(H * d_h, d_e) and not eq.same(d_h, d_e)
    assert (H * (d_e / H)) == d_e


def test_slice_length_prints_in_card_syntax():
    assert str(b - a + 1) == "b − a + 1"
    assert (b - a + 1).render(ascii=True) == "b - a + 1"
    assert str(d_h / 2) == "d_h/2" and str(3 * d_e / (2 * H)) == "3·d_e/(2·H)"
    assert str(-a) == "−a" and str(Dim.num(0)) == "0"


def test_constant_division_must_be_exact():
    assert Dim.num(6) / 3 == 2
    with pytest.raises(DimError, match="10/3 is not a whole number"):
        Dim.num(10) / 3


def test_symbolic_division_is_checked_on_evaluation():
    assert evaluate(d_e / H, {"d_e": 768, "H": 12}) == 64
    with pytest.raises(DimError, match=r"d_e/H = 10/3 is not a whole number"):
        evaluate(d_e / H, {"d_e": 10, "H": 3})
    cancelled = (d_e / H) * H  # the normal form is d_e, the division is still remembered
    assert cancelled == d_e
    with pytest.raises(DimError, match="10/3"):
        evaluate(cancelled, {"d_e": 10, "H": 3})
    with pytest.raises(DimError, match=re.escape("(a + 1)/2 = 5/2 is not a whole number")):
        evaluate((a + 1) / 2, {"a": 4})
    assert evaluate((a + 1) / 2, {"a": 5}) == 3


def test_evaluate_reports_missing_values_and_bad_divisors():
    with pytest.raises(DimError, match="no value for dimension H"):
        evaluate(d_e / H, {"d_e": 8})
    with pytest.raises(DimError, match="sum of dimensions"):
        d_e / (a + b)


def test_from_ir_and_solve_for():
    card = parse("Algorithm: y ← f(x)\nInput: x ∈ ℝ^{3·d_e×H·d_h×(a+1)/2}\n1 return x\n")
    got = [from_ir(d) for d in card.main.input_decls[0].type.dims]
    assert got == [3 * d_e, H * d_h, (a + 1) / 2]
    assert solve_for(3 * Dim.name("d"), 3 * d_e, {}) == ("d", d_e)
    assert solve_for(Dim.name("k") / Dim.name("n"), d_e, {"n": H}) == ("k", d_e * H)
    assert solve_for(Dim.name("k") * Dim.name("n"), d_e, {}) is None  # two unknowns


PROPERTY_EXAMPLES = 500 if os.environ.get("CI") else 150  # README: "500 examples each" in CI
_ops = st.sampled_from(["+", "-", "*"])
# a dimension divides by one term only (`a/(b+c)` is refused when written), so divisors are products
_divisors = st.sampled_from(["a", "b", "c", "2", "3", "4", "(a * b)", "(2 * c)", "(b * b)"])


@st.composite
def _expr(draw, depth=0):
    if depth > 3 or draw(st.booleans()):
        return draw(st.sampled_from(["a", "b", "c"])) if draw(st.booleans()) else str(draw(st.integers(0, 9)))
    if draw(st.integers(0, 2)) == 0:
        return f"({draw(_expr(depth + 1))} / {draw(_divisors)})"
    return f"({draw(_expr(depth + 1))} {draw(_ops)} {draw(_expr(depth + 1))})"


class _NotWhole(Exception):
    pass


def _exact(text: str, values: dict[str, int]) -> int | None:
    """The oracle: Python's exact rational arithmetic on the expression; None when some `/`
    (with the values filled in) leaves a remainder."""
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}

    def value(node: ast.expr) -> Fraction:
        if isinstance(node, ast.Constant):
            return Fraction(node.value)
        if isinstance(node, ast.Name):
            return Fraction(values[node.id])
        left, right = value(node.left), value(node.right)
        if isinstance(node.op, ast.Div):
            if (left / right).denominator != 1:
                raise _NotWhole
            return left / right
        return ops[type(node.op)](left, right)

    try:
        return int(value(ast.parse(text, mode="eval").body))
    except _NotWhole:
        return None


def _as_ir(node: ast.expr) -> ir.Dim:
    """The same expression as a card dimension (the checker's input)."""
    if isinstance(node, ast.Constant):
        return ir.DimNum(node.value)
    if isinstance(node, ast.Name):
        return ir.DimName(node.id)
    op = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}[type(node.op)]
    return ir.DimOp(op, _as_ir(node.left), _as_ir(node.right))


# Names are never 0: dimensions are sizes, and the normal form cancels `(a·b)/b` to `a` before
# values are known, so a zero divisor that cancels is not seen.
_values = st.integers(-20, 20).filter(bool)


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None)
@given(_expr(), _values, _values, _values)
def test_evaluate_agrees_with_exact_integer_arithmetic(text, va, vb, vc):
    """`+ − ·` as Python computes them; a `/` that divides is fine, one that does not is a
    DimError (when written with constants, or once values are filled in)."""
    values = {"a": va, "b": vb, "c": vc}
    expected = _exact(text, values)
    try:
        got = evaluate(from_ir(_as_ir(ast.parse(text, mode="eval").body)), values)
    except DimError as e:
        assert expected is None, f"{text} with {values}: DimError {e}, expected {expected}"
        assert "is not a whole number" in str(e)
    else:
        assert expected is not None, f"{text} with {values}: got {got}, but a division leaves a remainder"
        assert got == expected, f"{text} with {values}: got {got}, expected {expected}"


def test_exact_division_by_hand():
    """The rule of the property above on cases worked out by hand."""
    ex = lambda text: from_ir(_as_ir(ast.parse(text, mode="eval").body))  # noqa: E731
    assert evaluate(ex("(a * 6) / 4"), {"a": 2}) == 3  # 12/4
    with pytest.raises(DimError, match=re.escape("6·a/4 = 18/4 is not a whole number")):
        evaluate(ex("(a * 6) / 4"), {"a": 3})
    assert evaluate(ex("((a / b) * b)"), {"a": 12, "b": 4}) == 12
    with pytest.raises(DimError, match=re.escape("a/b = 12/5 is not a whole number")):
        evaluate(ex("((a / b) * b)"), {"a": 12, "b": 5})  # normal form a, the division remembered
    with pytest.raises(DimError, match=re.escape("7/2 is not a whole number")):
        ex("(3 + 4) / 2")  # constants: refused when written
    assert evaluate(ex("(3 + 5) / 2 + a / a"), {"a": 7}) == 5


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None)
@given(st.integers(1, 300), st.integers(1, 24))
def test_checker_refuses_exactly_the_divisions_that_leave_a_remainder(d_e, n_head):
    """`d_h ≔ d_e / H` in a bound card: an error iff H does not divide d_e (Python's `%`)."""
    card = parse(
        "Algorithm: y ← f(x)\nInput: x ∈ ℝ^{d_e}\nOutput: y ∈ ℝ^{d_h}\nHyperparameters:\n"
        f"  H ∈ ℕ = {n_head}\n  d_e ∈ ℕ = {d_e}\n  d_h ∈ ℕ ≔ d_e / H\n1 return y = x[1:d_h]\n"
    )
    messages = [d.message for d in check(card)]
    if d_e % n_head:
        assert messages == [f"dimension d_e/H = {d_e}/{n_head} is not a whole number"]
    else:
        assert messages == []


def test_shape_printing():
    ell = Dim.name("ℓ")
    assert str(Shape("R", (d_e, ell))) == "ℝ^{d_e×ℓ}"
    assert str(Shape("P", (Dim.name("N_V"), ell))) == "(0,1)^{N_V×ℓ}"
    assert Shape("R", (d_e, ell)).render(ascii=True) == "R^{d_e x ell}"
    assert str(Shape("I", bound=Dim.name("N_V"))) == "[N_V]" and str(Shape("N")) == "ℕ"
    assert str(Shape("R", (b - a + 1, d_e))) == "ℝ^{(b − a + 1)×d_e}"


# ── a valid card and what the checker learns about it ───────────────────────────────────
def test_base_card_checks_clean_and_reports_shapes_symbols_and_calls():
    card, result = run(BASE)
    assert result.diagnostics == [], show(result.diagnostics)
    info = result.algorithms["Tiny"]
    body = card.main.body
    assert info.inferred_hypers == {"N_V": ("W_e", 1)}
    assert str(info.shape_of(body[2].value)) == "ℝ^{d_e×ℓ}"  # [e_1, …, e_ℓ]
    assert str(info.shape_of(body[-1].value)) == "(0,1)^{N_V×ℓ}"  # softmax maps over columns
    loop = body[3]
    mha = loop.body[1].value.right
    assert info.callee_of(mha) is MINI.algorithm("MHAttention_fused")
    bindings = {k: str(v) for k, v in info.dim_bindings_of(mha).items()}
    assert bindings == {"H": "H", "d_e": "d_e", "ℓ": "ℓ", "d_h": "d_e/H"}
    norm = loop.body[0].body[0].value
    gamma = norm.params[0]
    sym = info.symbol_of(gamma)
    assert (sym.kind, sym.key, sym.family_index) == ("param", "γ_l^1", ir.Name("l"))
    assert info.symbol_of(body[0].target).kind == "dim"  # ℓ ← length(x)
    e_last = body[2].value.items[1]
    assert (info.symbol_of(e_last).kind, info.symbol_of(e_last).family_index) == ("local", ir.Name("ℓ"))
    assert info.callee_of(body[0].value) == "length"
    assert str(info.locals["X̃"]) == "ℝ^{d_e×ℓ}" and info.families["e_•"][1] == Dim.name("ℓ")
    option = loop.body[2].cond.right
    assert info.symbol_of(option).kind == "option"


def test_mini_library_checks_clean_and_family_stack_has_h_rows():
    result = check_card(MINI, library=False)
    assert result.diagnostics == [], show(result.diagnostics)
    info = result.algorithms["MHAttention_fused"]
    stack = MINI.algorithm("MHAttention_fused").body[2].value
    assert str(info.shape_of(stack)) == "ℝ^{H·d_h×ℓ}"


def test_check_uses_the_library_prelude_by_default():
    # BASE calls layer_norm, MHAttention_fused, GELU_tanh and softmax with the prelude's headers
    assert check(parse(BASE)) == []
    ds = check_card(parse(BASE), library=False).diagnostics
    assert {d.message for d in ds} == {
        f"unknown function {f}" for f in ("layer_norm", "MHAttention_fused", "GELU_tanh", "softmax")
    }


# ── one planted mistake per card: message, position, shapes, hint ─────────────────────
CASES = [
    # (id, old, new, message fragment, token inside `new` the span must start at)
    ("duplicate declaration", '"output.weight" or "token_embd.weight"\n',
     '"output.weight" or "token_embd.weight"\n  W_e ∈ ℝ^{d_e×N_V}  from "w"\n', "W_e is declared twice", "W_e"),
    ("unbound loop variable", "10 Z ← W_u · X", "10 Z ← W_u · X ⊙ b_o^l", "the index l is not bound here", "b_o^l"),
    ("return name", "11 return P = ", "11 return Q = ", "returns Q but the header's output is P", "Q"),
    ("input arity", "layer_norm(X[:, t] |", "layer_norm(X[:, t], X[:, t] |", "layer_norm takes 1 input (e), got 2", "layer_norm"),
    ("parameter arity", "β_l^1, ε)", "β_l^1)", "layer_norm takes 3 parameters (γ, β, ε), got 2", "layer_norm"),
    ("annotation", "3 X ← [e_1, …, e_ℓ]  ∷ ℝ^{d_e×ℓ}", "3 X ← [e_1, …, e_ℓ]  ∷ ℝ^{d_mlp×ℓ}",
     "annotation ∷ ℝ^{d_mlp×ℓ} does not match the inferred shape ℝ^{d_e×ℓ}", "ℝ^{d_mlp×ℓ}"),
    ("inner dimensions", "GELU_tanh(W_mlp1^l · X +", "GELU_tanh(X · W_mlp1^l +",
     "ℝ^{d_e×ℓ} · ℝ^{d_mlp×d_e}: inner dimensions ℓ and d_mlp differ", "X · W"),
    ("constant division", "W_u ∈ ℝ^{N_V×d_e}", "W_u ∈ ℝ^{N_V×10/3}", "10/3 is not a whole number", "10/3"),
    ("source count", 'γ_l^1, β_l^1 ∈ ℝ^{d_e}    from "attn_norm.weight", "attn_norm.bias"',
     'γ_l^1, β_l^1 ∈ ℝ^{d_e}    from "attn_norm.weight"', "2 names but 1 source", "from"),
    ("metadata template", '"{arch}.block_count"', '"{blk}.block_count"', "unknown template {blk} in metadata key", '"{blk}'),
    ("tensor template", '"ffn_up.bias"', '"ffn_up.{l}.bias"', "template {l} in tensor name", '"ffn_up'),
    ("prefix not affine", '"blk.{l-1}."', '"blk.{l·l}."', "is not an affine expression of l", "for l"),
    ("prefix other variable", '"blk.{l-1}."', '"blk.{k-1}."', "is not an affine expression of l", "for l"),
    ("transposed metadata key", '"{arch}.embedding_length"', '"{arch}.embedding_length"^⊺',
     "a hyperparameter is not a matrix", '"{arch}.emb'),
    ("transposed vector", '"attn_output.bias"', '"attn_output.bias"^⊺', "the transposed shape is not 2-D", '"attn_output'),
    ("default on a parameter", '"ffn_down.weight"', '"ffn_down.weight" default 1', "default on a parameter", "1"),
    ("hyperparameter not inferable", "  N_V ∈ ℕ\n", "  N_V ∈ ℕ\n  κ ∈ ℕ\n", "hyperparameter κ has no binding and cannot be inferred", "κ"),
    ("per-layer name without the variable", "    W_mlp2^l ∈", "    W_mlp2 ∈", "does not carry the group variable l", "W_mlp2"),
    ("unknown function", "GELU_tanh(W", "GELU_tahn(W", "unknown function GELU_tahn", "GELU_tahn"),
    ("unknown name, did you mean", "W_mlp2^l · GELU", "W_mpl2^l · GELU", "unknown name W_mpl2^l", "W_mpl2^l"),
    ("power needs brackets", "10 Z ← W_u · X", "10 Z ← W_u · X^2", "unknown name X^2", "X^2"),
    ("argument shape", "β_l^1, ε)", "b_mlp1^l, ε)", "layer_norm: β gets ℝ^{d_mlp}, expected ℝ^{d_e}", "b_mlp1^l"),
    ("condition on a value", "if scaling = linear then", "if X[1, 1] > 0 then", "a condition may only use hyperparameters", "X["),
    ("option typo", "if scaling = linear then", "if scaling = linaer then", "unknown name linaer", "linaer"),
    ("string not an option", "if scaling = linear then", 'if scaling = "yarn" then', "'yarn' is not one of {none, linear}", "scaling ="),
    ("redefinition with another shape", "10 Z ←", "10 X ← W_u · X\n10 Z ←", "X was ℝ^{d_e×ℓ} and is now assigned ℝ^{N_V×ℓ}", "X ←"),
    ("assignment to a parameter", "10 Z ←", "10 W_u ← W_u\n10 Z ←", "cannot assign to the parameter W_u", "W_u ←"),
    ("bias without broadcast", "+ b_mlp1^l · 1^⊺)", "+ b_mlp1^l)", "ℝ^{d_mlp×ℓ} + ℝ^{d_mlp}: 2-axis and 1-axis values", "W_mlp1^l · X +"),
    ("transpose of a scalar", "10 Z ←", "10 q ← ε^⊺\n10 Z ←", "^⊺ needs a vector or a matrix, got ℝ", "ε^⊺"),
    ("index count", "e_t ← W_e[:, x[t]]", "e_t ← W_e[x[t]]", "has 2 axes but is indexed with 1", "W_e["),
    ("mask name", "Mask[t_z, t_x] = ⟦", "M[t_z, t_x] = ⟦", "a mask named M is passed where the callee expects Mask", "M["),
    ("unknown dimension in an annotation", "∷ ℝ^{N_V×ℓ}", "∷ ℝ^{N_W×ℓ}", "unknown dimension N_W", "N_W"),
    ("family range of two families", "[e_1, …, e_ℓ]", "[e_1, …, W_e]", "needs two members of one family", "[e_1"),
    ("loop variable hides a name", "10 Z ←", "10 for d_e = 1, …, L do\n10 end\n10 Z ←", "the loop variable d_e hides the hyperparameter d_e", "d_e ="),
    ("dimension holding a matrix", "10 Z ←", "10 ℓ ← X\n10 Z ←", "ℓ is a dimension; it cannot hold ℝ^{d_e×ℓ}", "ℓ ←"),
]  # fmt: skip


@pytest.mark.parametrize("old,new,fragment,token", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_planted_mistake(old, new, fragment, token):
    text = mutate(old, new)
    d = only(text, fragment)
    assert_at(d, text, new, token)
    assert d.severity == "error" and d.span.file == "t.card"


def test_inner_dimension_message_carries_both_shapes():
    d = only(mutate("GELU_tanh(W_mlp1^l · X +", "GELU_tanh(X · W_mlp1^l +"), "inner dimensions")
    assert d.shapes == ("ℝ^{d_e×ℓ}", "ℝ^{d_mlp×d_e}")


def test_argument_mismatch_names_both_shapes_and_the_declaration():
    d = only(mutate("β_l^1, ε)", "b_mlp1^l, ε)"), "gets")
    assert d.shapes == ("ℝ^{d_mlp}", "ℝ^{d_e}") and d.hint == "layer_norm declares β ∈ ℝ^{d_e}"


@pytest.mark.parametrize(
    "old,new,hint",
    [
        ("W_mlp2^l · GELU", "W_mpl2^l · GELU", "did you mean W_mlp2^l?"),
        ("GELU_tanh(W", "GELU_tahn(W", "did you mean GELU_tanh?"),
        ("10 Z ← W_u · X", "10 Z ← W_u · X^2", "`X^2` reads as one name; for a power write (X)^2"),
        ("if scaling = linear then", "if scaling = linaer then", "did you mean linear?"),
        ("β_l^1, ε)", "β_l^1, epsilo)", "did you mean ε?"),  # matched on the ASCII spelling
    ],
)
def test_hints(old, new, hint):
    ds = diags(mutate(old, new))
    assert [d.hint for d in ds] == [hint], show(ds)


def test_all_mistakes_are_collected_not_just_the_first():
    text = mutate("GELU_tanh(W", "GELU_tahn(W", mutate("11 return P = ", "11 return Q = "))
    text = mutate("  N_V ∈ ℕ\n", "  N_V ∈ ℕ\n  κ ∈ ℕ\n", text)
    ds = diags(text)
    assert [d.message for d in ds] == [
        "hyperparameter κ has no binding and cannot be inferred",
        "unknown function GELU_tahn",
        "returns Q but the header's output is P",
    ], show(ds)


# ── declarations and headers ────────────────────────────────────────────────────────────
SUB = """\
Algorithm: y ← f(x | W, κ)
Input: x ∈ ℝ^{d}
Output: y ∈ ℝ^{n}
Hyperparameters: κ ∈ ℝ
Parameters: W ∈ ℝ^{n×d}
1 return y = W · x · κ
"""


@pytest.mark.parametrize(
    "old,new,fragment,token",
    [
        ("f(x | W, κ)", "f(x, z | W, κ)", "header input z is not declared under Input", "z"),
        ("f(x | W, κ)", "f(x | W, κ, U)", "header parameter U is not declared", "U"),
        ("f(x | W, κ)", "f(x | W, W, κ)", "W appears twice in the header", "W, κ"),
        (
            "Output: y ∈ ℝ^{n}",
            "Output: y ∈ ℝ^{n}\n  q ∈ ℝ^{n}",
            "Output declares q but the header returns y",
            "q",
        ),
        ("Hyperparameters: κ ∈ ℝ", "Hyperparameters: κ ∈ ℝ\n  μ ∈ ℝ", "hyperparameter μ has no binding", "μ"),
        ("1 return y = W · x · κ", "1 y ← W · x · κ", "f never returns its output y", "f("),
        ("1 return y = W · x · κ", "1 return y = f(x | W, κ)", "f calls itself", "f("),
        ("1 return y", "1 for i ∈ [7/2]: z_i ← κ\n2 return y", "7/2 is not a whole number", "7/2"),
        (
            "1 return y",
            "1 q ← x\n2 for t ∈ [d]: q[t] ← κ\n3 r[1] ← κ\n4 return y",
            "r is not defined before its entries",
            "r[",
        ),
    ],
)
def test_declaration_mistakes(old, new, fragment, token):
    text = mutate(old, new, SUB)
    d = only(text, fragment)
    assert_at(d, text, new, token)


def test_header_and_blocks_disagree():
    text = mutate("return y", "return q", mutate("y ← f", "q ← f", SUB))
    d = only(text, "the header's output q is not declared under Output")
    assert_at(d, text, "q ← f", "q")
    assert d.hint == "Output declares y"
    text = mutate("Input: x ∈ ℝ^{d}", "Input: z ∈ ℝ^{d}", SUB)
    ds = diags(text)
    assert [d.message for d in ds] == [
        "header input x is not declared under Input",
        "Input declares z but the header does not take it",
    ], show(ds)


def test_duplicate_algorithm():
    text = SUB + "\n" + SUB
    d = only(text, "algorithm f is defined twice")
    assert (d.span.line, d.span.col) == (8, 16)


def test_bound_card_values_must_divide():
    card = """\
Algorithm: y ← f(x | W)
Input: x ∈ ℝ^{d_e}
Output: y ∈ ℝ^{d_h}
Hyperparameters:
  d_e ∈ ℕ = 10 from "{arch}.embedding_length"
  H ∈ ℕ = 3 from "{arch}.attention.head_count"
  d_h ∈ ℕ ≔ d_e / H
Parameters: W ∈ ℝ^{d_h×d_e} from "w.weight"
1 return y = W · x
"""
    d = only(card, "d_e/H = 10/3 is not a whole number")
    assert_at(d, card, "≔ d_e / H", "d_e / H")
    assert diags(card.replace("= 10 ", "= 12 ")) == []


def test_derived_cycle_and_abstract_cards():
    cyc = SUB.replace("Hyperparameters: κ ∈ ℝ", "Hyperparameters:\n  κ ∈ ℝ\n  p ∈ ℕ ≔ q + 1\n  q ∈ ℕ ≔ p")
    assert any("depends on itself" in d.message for d in diags(cyc))
    # an entry algorithm (`| θ`) without any `from` is an abstract card: free hyperparameters are fine
    abstract = BASE.replace(' from "{arch}.block_count"', "").replace("  N_V ∈ ℕ\n", "  N_V ∈ ℕ\n  κ ∈ ℕ\n")
    free = (
        "\n".join(line.split(" from ")[0] if " from " in line else line for line in abstract.splitlines())
        + "\n"
    )
    assert diags(free) == [], show(diags(free))


# ── maps, families, scoping, masks ──────────────────────────────────────────────────────
MAPS = """\
Algorithm: Y ← g(X | W, H)
Input: X ∈ ℝ^{d×ℓ}
Output: Y ∈ ℝ^{H·k×ℓ}
Hyperparameters: H ∈ ℕ
Parameters: W ∈ ℝ^{H·k×d}
1 A ← W · X
2 for h ∈ [H] do
3   T ← rows(A, h, k)
4   for t ∈ [ℓ]: U^h[:, t] ← T[:, t] ⊙ T[:, t]
5 end
6 Y ← [U^1; …; U^H]  ∷ ℝ^{H·k×ℓ}
7 return Y
"""


def test_families_and_column_definitions_inside_maps():
    card, result = run(MAPS)
    assert result.diagnostics == [], show(result.diagnostics)
    info = result.algorithms["g"]
    assert str(info.families["U^•"][0]) == "ℝ^{k×ℓ}" and info.families["U^•"][1] == Dim.name("H")
    assert "T" in info.locals  # a per-iteration temporary, still reported for codegen


def test_vector_built_entry_by_entry_inside_a_map():
    text = """\
Algorithm: y ← swap(x)
Input: x ∈ ℝ^{n}
Output: y ∈ ℝ^{n}
1 for i ∈ [n/2] do
2   y[2·i − 1] ← x[2·i]
3   y[2·i] ← x[2·i − 1]
4 end
5 return y
"""
    card, result = run(text)
    assert result.diagnostics == [], show(result.diagnostics)
    # a local has no declared size: its entries alone do not say how many there are
    _, result = run(text.replace("y[", "w[").replace("return y", "return y = w"))
    assert [d.message for d in result.diagnostics] == [
        "w is defined by its entries, but 2·i − 1 does not say how many it has"
    ]


def test_a_local_whole_number_is_a_dimension():
    text = """\
Algorithm: y ← f(x)
Input: x ∈ ℝ^{m}
Output: y ∈ ℝ^{m}
1 n ← length(x)
2 for i ∈ [n]: z_i ← x[i]
3 return y = [z_1; …; z_n]
"""
    card, result = run(text)
    assert result.diagnostics == [], show(result.diagnostics)
    assert str(result.algorithms["f"].shape_of(card.main.body[2].value)) == "ℝ^{n}"


def test_map_temporary_is_not_visible_after_the_map():
    text = mutate("7 return Y", "7 S ← T\n8 return Y", MAPS)
    d = only(text, "unknown name T")
    assert d.hint == "T is assigned inside a parallel map (line 8) and only exists there"


def test_implicit_map_over_columns_and_elements():
    card, result = run(MAPS.replace("1 A ← W · X", "1 A ← GELU_tanh(W · X)  ∷ ℝ^{H·k×ℓ}"))
    assert result.diagnostics == []
    text = MAPS.replace("1 A ← W · X", "1 A ← attention(X, W, W | Mask[i, j] = 1)")
    assert any("attention: K gets ℝ^{H·k×d}" in d.message for d in diags(text)), show(diags(text))


def test_mask_definition_outside_a_call():
    card = parse(MAPS)
    stray = ir.MaskDef("M", ("i", "j"), ir.Num("1"))
    body = (ir.Assign(ir.Name("A"), stray), *card.main.body[1:])
    card = ir.Card((dataclasses.replace(card.main, body=body),))
    ds = check_card(card, library=MINI).diagnostics
    assert [d.message for d in ds] == ["a mask definition `Mask[…] = …` is only allowed as a call parameter"]


def test_slices_have_symbolic_lengths():
    text = """\
Algorithm: y ← f(W | a, b)
Input: W ∈ ℝ^{n×d}
Output: y ∈ ℝ^{d}
Hyperparameters:
  a, b ∈ ℕ
1 S ← W[a:b, :]
2 r ← W[1, :]
3 return y = W[1, :]^⊺
"""
    card, result = run(text)
    assert result.diagnostics == [], show(result.diagnostics)
    info, body = result.algorithms["f"], card.main.body
    assert str(info.shape_of(body[0].value)) == "ℝ^{(b − a + 1)×d}"
    assert str(info.shape_of(body[1].value)) == "ℝ^{1×d}"  # a row stays a row
    assert str(info.shape_of(body[2].value)) == "ℝ^{d}"  # and its transpose is a column


# ── robustness ──────────────────────────────────────────────────────────────────────────
def _deep_card(expr: ir.Expr) -> ir.Card:
    base = parse("Algorithm: y ← f(a)\nInput: a ∈ ℝ^{d}\nOutput: y ∈ ℝ^{d}\n1 return y = a\n")
    return ir.Card((dataclasses.replace(base.main, body=(ir.Return(expr, "y"),)),))


def test_ten_thousand_term_sum_checks_without_recursion_error():
    e: ir.Expr = ir.Name("a")
    for _ in range(10_000):
        e = ir.BinOp("+", e, ir.Name("a"))
    result = check_card(_deep_card(e), library=False)
    assert result.diagnostics == [] and str(result.algorithms["f"].shape_of(e)) == "ℝ^{d}"


def test_deep_unary_chain_gives_a_diagnostic():
    e: ir.Expr = ir.Name("a")
    for _ in range(10_000):
        e = ir.UnOp("-", e)
    ds = check_card(_deep_card(e), library=False).diagnostics
    assert [d.message for d in ds] == ["this step is nested too deeply to check"]


# ── the card library ────────────────────────────────────────────────────────────────────
LIBRARY = sorted(
    p.name[: -len(".card")]
    for p in resources.files("toycards.library.cards").iterdir()
    if p.name.endswith(".card")
)


@pytest.mark.parametrize("name", LIBRARY)
def test_library_card_checks_clean(name):
    card = parse_library_card(name)
    result = check_card(card)
    assert result.diagnostics == [], f"{name}.card:\n{show(result.diagnostics)}"
    for a in card.algorithms:
        info = result.algorithms[a.name]
        assert all(info.callee_of(c) is not None for c in _calls(a)), f"unresolved call in {a.name}"


def test_prelude_result_is_cached_and_clean():
    from toycards.checker import check_prelude

    first = check_prelude()
    assert first is check_prelude() and first.ok
    assert "softmax" in first.algorithms


def _calls(a: ir.Algorithm) -> list[ir.Call]:
    out, stack = [], [a.body]
    while stack:
        node = stack.pop()
        if isinstance(node, ir.Call):
            out.append(node)
        if isinstance(node, tuple):
            stack.extend(node)
        elif dataclasses.is_dataclass(node):
            stack.extend(getattr(node, f.name) for f in dataclasses.fields(node) if f.name != "span")
    return out


def test_fraction_coefficients_stay_exact():
    assert (d_h / 2).terms == {(("d_h", 1),): Fraction(1, 2)}
