"""What a card's entry algorithm gives: a distribution over the vocabulary, or its output as it is.

Owns: `returns_distribution`, the one rule the interpreter (logits), the code generators (what a
module returns) and the runtime (`ModelAPI.outputs_embeddings`: `embed` rather than `generate`) ask.
Leaves out: checking the output's shape (checker/), the runtime's use of it (runtime/model_base.py).
"""

from __future__ import annotations

from toycards.lang.ir import Algorithm, TensorType


def returns_distribution(algo: Algorithm) -> bool:
    """Whether `algo`'s output is declared a distribution, `P ∈ (0,1)^{…}`: a language model's
    `return P = softmax(Z)`, whose modules and interpreter give the logits Z. Any other output (an
    encoder's `E ∈ ℝ^{d_e×ℓ}`) is returned as the card computes it.

    >>> from toycards.library import library_card
    >>> returns_distribution(library_card("gpt2").main), returns_distribution(library_card("bert").main)
    (True, False)
    """
    decl = next((d for d in algo.output_decls if algo.output in d.names), None)
    return decl is not None and isinstance(decl.type, TensorType) and decl.type.field == "P"
