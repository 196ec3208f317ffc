"""The reference interpreter: the card language's executable meaning.

It evaluates a checked card the way the paper's pseudocode reads, one step at a time, and is
the definition both generated targets are tested against. It is slow on purpose and should be
checked line by line against docs/card-language.md:

- **Orientation**: the card's own. A vector `ℝ^{n}` is a column, `X ∈ ℝ^{d×ℓ}` holds one
  column per token, `W ∈ ℝ^{d_out×d_in}` is applied as `W · X`; `b · 1^⊺` repeats the column b
  over the columns of the other side of `+`; `v^⊺` is a 1×n row and a row times a column is a
  number.
- **Indices** are 1-based and slices `a:b` include both ends; an index outside its axis is an
  error, never a wrap-around. Token ids are indices too: the card's vocabulary is 1…N_V.
- **Loops are loops**: `for l = 1, 2, …, L do` runs l = 1, 2, …, L in order (a second value b
  sets the step b − a); a parallel map (`for t ∈ [ℓ]:`, `for h ∈ [H], t ∈ [ℓ]:`) runs its body
  for each index in turn, first range outermost; its iterations are independent by the
  language's rule, so the order cannot change a correct card's value. A plain local first
  assigned inside a map ends with it; families and arrays built by entries outlive it.
- **Families**: inside a map over t, `e_t ← …` stores member t of the family `e_•`;
  `e_1`, `e_ℓ`, `K̂^{⌈h·H_kv/H⌉}` read a member by evaluating the index; `[e_1, …, e_ℓ]` puts
  the members side by side, `[Y^1; …; Y^H]` stacks them. Per-layer parameters `γ_l^1` are
  the family `γ_•^1` of the layers 1…L.
- **Entry writes**: `S[t_z, t_x] ← −∞` sets one entry in S's own storage; a new array defined
  by its entries (`X̃[:, t] ← …`, `y[2·i − 1] ← …`) gets its declared shape (an Output) or one
  axis per index (the value's for `:`, the map's range for a map variable); entries never
  written stay NaN, so reading one shows.
- **Masks** are indicator functions: `Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧` passes a mask whose entry
  (i, j) is the right-hand side evaluated with t_z = i, t_x = j where the call is written.
- **Σ** adds its terms in index order; **max**, **min**, **topk**, **rows** and every builtin
  of lang/builtins.py compute from the registry's `scalar` meaning, one entry at a time
  (primitives.py); never the runtime's fast kernels, never torch, never generated code.
- **Calls** bind the callee's inputs (copies), parameters and hyperparameters in header order,
  and its dimensions to the sizes it gets; an argument with more trailing axes than declared
  is mapped one column (or entry) at a time. An algorithm of the caller's own card comes
  first, then the library's (the prelude), then a builtin.
- **Values**: assignment copies, never aliases; parameters and hyperparameters are read-only.
  `∷` annotations are checked against the concrete shape whenever its sizes are known.
- **Precision**: float64 throughout, whatever the weights' type. The interpreter is the oracle
  of float32 code, so its own rounding must sit far below theirs (≈1e-16 relative vs ≈1e-7).

**KV cache** (toycards/models/reference.py): the simplest correct semantics. The cache holds the
token ids seen so far; decoding with it runs the card on all of them and returns the new
columns. Cached decoding therefore *is* the full pass over every token so far.

>>> from toycards.lang.parse import parse
>>> card = parse('''Algorithm: y ← f(x)
... Input: x ∈ ℝ^{n}
... Output: y ∈ ℝ^{k}
... 1 return y = x[2:3]
... ''')
>>> run(card, [[10.0, 20.0, 30.0, 40.0]]).tolist()
[20.0, 30.0]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from toycards.lang import ir
from toycards.lang.interpret.machine import Interpreter
from toycards.lang.interpret.values import Fault

__all__ = ["Fault", "Interpreter", "run"]


def run(
    card: ir.Card,
    inputs: Sequence[object],
    values: Mapping[str, object] | None = None,
    *,
    algorithm: str | None = None,
    library: Mapping[str, ir.Algorithm] | None = None,
    logits: bool = False,
) -> object:
    """The value of `algorithm` (default: the card's entry point, its last algorithm).

    `inputs` in header order; `values`: hyperparameters and parameters by card name (a
    per-layer parameter such as `γ_l^1` as {l: value} or a list for l = 1, 2, …); `library`:
    algorithms the card may call without defining them (`toycards.library.library_algorithms()`);
    `logits`: for a model card, return Z of its final `return P = softmax(Z)`.
    """
    interp = Interpreter(card, dict(library or {}), logits=logits)
    return interp.run(algorithm or card.main.name, list(inputs), dict(values or {}))
