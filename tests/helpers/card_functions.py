"""Run one algorithm of a card through the code generators, for tests of single constructs.

`model_frame(hypers, params)` is a model card around a test's steps 4…, as a format string.
`generated_function(text, target, call)` puts the algorithm text before a minimal model that
calls it (a module is generated from a model; the model makes the algorithm part of it) and
returns the generated function. `targets()` yields (target, array constructor) for NumPy and,
when installed, torch.
"""

from __future__ import annotations

import numpy as np
import pytest

from toycards.checker import check
from toycards.codegen import generate_source
from toycards.lang.parse import parse

CALLER = """
Algorithm: P ← M(x | W)
/* a model that calls F, so that F is generated (the tests call F itself) */
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{N_V×ℓ}
Hyperparameters: N_V ∈ ℕ
Parameters: W ∈ ℝ^{N_V×N_V} from "token_embd.weight"
1  ℓ ← length(x)
2  for t ∈ [ℓ]: e_t ← W[:, x[t]]
3  X ← [e_1, …, e_ℓ]
4  for t ∈ [ℓ]: u_t ← CALL
5  return P = softmax(X)
"""


def model_frame(hypers: str, params: str, description: str = "") -> str:
    """A model card around steps 4… of a test, as a format string with `{algorithms}` (placed before
    the model) and `{steps}`: tokens embedded by E into X ∈ ℝ^{d×ℓ}, then the steps, then the
    logits U · X. `hypers` and `params` are declaration lines besides N_V, E and U."""
    about = f"/* {description} */\n" if description else ""
    lines = "\n".join(f"  {line}" for line in hypers.strip().splitlines() + ["N_V ∈ ℕ = 11"])
    weights = "\n".join(f"  {line}" for line in params.strip().splitlines())
    text = (
        "toycards 1\n{algorithms}\nAlgorithm: P ← Net(x | θ)\n" + about + "Input: x ∈ V^ℓ\n"
        "Output: P ∈ (0,1)^{N_V×ℓ}\nHyperparameters:\n" + lines + "\nParameters:\n"
        '  E ∈ ℝ^{d×N_V}  from "token_embd.weight"^⊺\n'
        + weights
        + '\n  U ∈ ℝ^{N_V×d}  from "output.weight"\n'
        "1  ℓ ← length(x)\n2  for t ∈ [ℓ]: e_t ← E[:, x[t]]\n3  X ← [e_1, …, e_ℓ]\n{steps}\n"
        "   return P = softmax(U · X)\n"
    )
    return (
        text.replace("{", "{{")
        .replace("}", "}}")
        .replace("{{algorithms}}", "{algorithms}")
        .replace("{{steps}}", "{steps}")
    )


def targets():
    yield "numpy", np.asarray
    torch = pytest.importorskip("torch")
    yield "torch", lambda a: torch.tensor(a, dtype=torch.float32)


def generated_function(text: str, target: str, call: str = "F(X[:, t])", name: str = "F"):
    """The generated function `name` of the algorithm(s) in `text` (which must check clean)."""
    card = parse("toycards 1\n\n" + text.strip() + "\n" + CALLER.replace("CALL", call))
    diags = check(card)
    assert diags == [], [d.message for d in diags]
    namespace: dict = {}
    exec(compile(generate_source(card, target), "<card>", "exec"), namespace)  # noqa: S102
    return namespace[name]
