"""The draft of a random card (random_cards.py): its sizes, the names, parameters and hyperparameters
it hands out, the features it records, and the element-wise and vector helper algorithms a construct
may add to the card.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import strategies as st

N_V = 11  # the vocabulary of every card


@dataclass(frozen=True)
class Sizes:
    """The concrete hyperparameters every card declares (tiny, so that the interpreter is quick)."""

    d: int  # width
    H: int  # heads; k = d / H is the head size
    L: int  # layers (0: no layer loop)

    @property
    def k(self) -> int:
        return self.d // self.H


@dataclass(frozen=True)
class RandomCard:
    text: str = field(repr=False)  # canonical card text (render_card of the parsed draft); tests print it
    features: frozenset[str]
    causal: bool  # column t of the logits depends on tokens 1…t only
    sizes: Sizes  # d, H and k, so that a test can choose lengths and batch sizes equal to them
    max_length: int | None  # ℓ_max where the card has learned positions (W_p ∈ ℝ^{d×ℓ_max}), else None

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Place:
    """Where a construct's lines go: in the layer loop (per-layer parameters, conditions on l)."""

    layer: bool
    depth: int = 0  # nesting of conditionals


class Draft:
    """A card under construction: names, declarations and helpers handed out to constructs."""

    LOCALS = [*"MRGJCDFTZBOA", *(a + "\u0303" for a in "MRGJCDFTZBOA")]  # matrices, head families (Y^h); M̃
    COLUMNS = [*"uvyzpqrsgj", *(a + "\u0303" for a in "uvyzpqrsgj")]  # token families (u_t), vectors; ũ
    TAGS = "abcdefghijkmnoqrstuvwxyz"  # parameter tags: W_a, b_a, … from "a.weight", …; no p (W_p)

    def __init__(self, draw, sizes: Sizes) -> None:
        self.draw, self.sizes = draw, sizes
        self.hypers: dict[str, str] = {}  # name → declaration
        self.globals: list[str] = []  # parameter declarations outside the layer group
        self.layer_params: list[str] = []  # declarations of the group `for l ∈ [L]`
        self.helpers: dict[str, str] = {}  # algorithm name → its text
        self.features: set[str] = set()
        self.causal = True
        self.max_length: int | None = None  # the longest sequence the card takes (learned positions)
        self.used: set[str] = set()
        self.tags = iter([*self.TAGS, *(a + b for a in self.TAGS for b in self.TAGS)])

    # ── choices ─────────────────────────────────────────────────────────────────────────
    def pick(self, options: dict[str, object]):
        """One of `options` (feature → value); records the feature."""
        feature = self.draw(st.sampled_from(list(options)))
        self.features.add(feature)
        return options[feature]

    def flag(self, feature: str) -> bool:
        """A yes/no choice of an optional variant; records it when yes."""
        if not self.draw(st.booleans()):
            return False
        self.features.add(feature)
        return True

    # ── names ───────────────────────────────────────────────────────────────────────────
    def local(self, preferred: str = "") -> str:
        """A fresh local name: `preferred` when free, else the next free letter."""
        for name in [preferred] * bool(preferred) + self.LOCALS:
            if name not in self.used:
                self.used.add(name)
                return name
        raise AssertionError("out of local names: the generator draws too many constructs")

    def column(self) -> str:
        """A fresh lower-case name for a vector or a token family (`u` for `u_t`)."""
        for name in self.COLUMNS:
            if name not in self.used:
                self.used.add(name)
                return name
        raise AssertionError("out of column names: the generator draws too many constructs")

    # ── declarations ────────────────────────────────────────────────────────────────────
    def hyper(self, name: str, declaration: str) -> str:
        self.hypers.setdefault(name, declaration)
        return name

    def param(self, at: Place, letter: str, shape: str, suffix: str, tag: str | None = None) -> str:
        """A parameter `letter_tag` (`letter_tag^l` in the layer loop) of shape `shape` bound to the
        tensor "tag.suffix"; returns the name to write in the steps."""
        tag = tag or next(self.tags)
        name = f"{letter}_{tag}"
        declaration = f'{name}{"^l" * at.layer} ∈ ℝ^{{{shape}}}  from "{tag}.{suffix}"'
        (self.layer_params if at.layer else self.globals).append(declaration)
        return name + "^l" * at.layer

    def weight(self, at: Place, shape: str = "d×d") -> str:
        return self.param(at, "W", shape, "weight")

    def bias(self, at: Place, size: str = "d") -> str:
        return self.param(at, "b", size, "bias")

    def helper(self, name: str, text: str) -> str:
        self.helpers.setdefault(name, text.strip("\n"))
        return name


Construct = Callable[[Draft, Place], list[str]]


def indent(lines: list[str], by: int = 1) -> list[str]:
    return ["  " * by + line for line in lines]


# ── element-wise functions ───────────────────────────────────────────────────────────────
ACTIVATIONS = {  # feature → the function applied to an argument `{}` (any real, values stay finite)
    "builtin_tanh": "tanh({})",
    "builtin_sigmoid": "sigmoid({})",
    "builtin_erf": "erf({})",
    "builtin_sin": "sin({})",
    "builtin_cos": "cos({})",
    "builtin_abs": "abs({})",
    "builtin_exp": "exp(−abs({}))",
    "builtin_log": "log(1 + exp({}))",
    "builtin_sqrt": "√(1 + ({})^2)",
    "prelude_GELU": "GELU({})",
    "prelude_GELU_tanh": "GELU_tanh({})",
    "prelude_SiLU": "SiLU({})",
    "prelude_ReLU": "ReLU({})",
}


def activation(c: Draft, arg: str) -> str:
    return c.pick(ACTIVATIONS).format(arg)


SCALAR_HELPERS = {  # feature → body of `y ← NAME(x)` with x ∈ ℝ, applied element-wise to a matrix
    "scalar_softsign": ("softsign", "x / (1 + abs(x))"),
    "scalar_gate": ("gate", "tanh(x) · sigmoid(x)"),
    "scalar_bump": ("bump", "exp(−(x)^2) − 0.5"),
    "scalar_wave": ("wave", "sin(x) + cos(x) − 1"),
    "scalar_max_pair": ("leaky", "max(x, 0.5 · x)"),
    "scalar_min_pair": ("clip", "min(x, 1) − max(−1, x)"),
}


def scalar_helper(c: Draft) -> str:
    name, body = c.pick(SCALAR_HELPERS)
    return c.helper(
        name,
        f"""
Algorithm: y ← {name}(x)
/* an element-wise function the card writes itself */
Input: x ∈ ℝ
Output: y ∈ ℝ
1  return y = {body}
""",
    )


# ── vector algorithms (applied to a matrix they act per column: an implicit map) ──────────
def vector_algorithm(name: str, what: str, steps: list[str]) -> str:
    body = "\n".join(f"{i}  {s}" for i, s in enumerate(steps, 1))
    return f"""
Algorithm: y ← {name}(v)
/* {what} */
Input: v ∈ ℝ^{{n}}
Output: y ∈ ℝ^{{n}}
{body}
"""


VECTOR_HELPERS: dict[str, tuple[str, str, list[str], bool]] = {
    # feature → (name, description, steps, needs an even length)
    "vector_center": ("center", "v minus its mean (Σ)", ["m ← Σ_{i=1}^{n} v[i] / n", "return y = v − m"], False),
    "vector_rms": (
        "unit", "v over its root mean square (Σ of squares)",
        ["r ← Σ_{i=1}^{n} v[i]^2 / n", "return y = v / √(r + 1)"], False,
    ),
    "vector_max": ("spread", "v shifted by its max and min", ["return y = v − max(v) + min(v)"], False),
    "vector_softmax": (
        "soft", "a softmax written out: exp, max and Σ",
        ["z ← exp(v − max(v))", "return y = z / Σ_{i=1}^{n} z[i]"], False,
    ),
    "vector_swap_pairs": (
        "swap", "entry writes in a map: each adjacent pair swapped, one sign flipped",
        ["for i ∈ [n/2] do", "  y[2 · i − 1] ← v[2 · i]", "  y[2 · i] ← −v[2 · i − 1]", "end", "return y"],
        True,
    ),
    "vector_copy_write": (
        "bent", "a copy written entry by entry, then read beside the original",
        ["y ← v", "for i ∈ [n]: y[i] ← tanh(v[i])", "return y = y + v"], False,
    ),
    "vector_copy_half": (
        "halve", "a copy whose first half is overwritten from the second, then read beside the original",
        ["y ← v", "for i ∈ [n/2]: y[i] ← v[i + n / 2]", "return y = y − v"], True,
    ),
    "vector_topk": (
        "top2", "the two largest entries kept (topk), the others zero",
        ["j ← topk(v, 2)", "for i ∈ [n]: y[i] ← v[i] · ⟦i = j[1] ∨ i = j[2]⟧", "return y"], False,
    ),
    "vector_swap_halves": (
        "halves", "entry writes at i and i + n/2 in one map: the halves swapped",
        ["for i ∈ [n/2] do", "  y[i] ← v[i + n / 2]", "  y[i + n / 2] ← v[i]", "end", "return y"], True,
    ),
    "vector_nested_call": (
        "twice", "a vector algorithm calling another one and the prelude",
        ["return y = center(softmax(v)) + spread(v)"], False,
    ),
    "vector_sum_from_2": (
        "tail", "Σ from 2: v minus the mean of its other entries",
        ["m ← Σ_{i=2}^{n} v[i] / n", "return y = v − m"], False,
    ),
    "vector_guard": (
        "negate_even", "a copy with a guarded entry write in a map: the even entries negated",
        ["y ← v", "for i ∈ [n]: if i mod 2 = 0 then y[i] ← −v[i]", "return y"], False,
    ),
    "vector_if_else": (
        "alternate", "if … else … end in a map over the entries",
        ["for i ∈ [n] do", "  if i mod 2 = 0 then", "    y[i] ← v[i]", "  else", "    y[i] ← −v[i]", "  end", "end",
         "return y"], False,
    ),
    "vector_reversed_index": (
        "flip", "the entries in reverse order (the index n + 1 − i)",
        ["for i ∈ [n]: y[i] ← v[n + 1 − i]", "return y"], False,
    ),
    "vector_fixed_entry_write": (
        "pin", "a copy with its first entry overwritten (an element write outside a map)",
        ["y ← v", "y[1] ← v[n]", "return y = y + v"], False,
    ),
    "vector_sum_index_value": (
        "ramp", "Σ that uses its variable as a value",
        ["return y = v + Σ_{i=1}^{n} v[i] · i / n"], False,
    ),
    "vector_concat_scalar": (
        "rotate", "[a; b] with a scalar b: the entries rotated by one",
        ["return y = [v[2:n]; v[1]]"], False,
    ),
}  # fmt: skip


def vector_helper(c: Draft, size: int) -> str:
    """A vector algorithm for vectors of `size` entries (`size` decides whether n/2 is whole)."""
    options = {f: v for f, v in VECTOR_HELPERS.items() if size % 2 == 0 or not v[3]}
    name, what, steps, _ = c.pick(options)
    if name == "twice":  # the algorithms it calls
        for f in ("vector_center", "vector_max"):
            c.helper(VECTOR_HELPERS[f][0], vector_algorithm(*VECTOR_HELPERS[f][:3]))
    return c.helper(name, vector_algorithm(name, what, steps))
