"""Scoring text with a model: per-token log-probabilities and perplexity (`toycards eval`).

Owns: `evaluate(model, text=None, ids=None, top_k=0)` → `Evaluation` (each predicted token
with its log-probability and, optionally, the model's top-k alternatives; the perplexity).
Non-finite logits (weights holding NaN or Inf) raise ToycardsError naming the position.
Leaves out: sampling (runtime/sampling.py), loading (load.py), printing (cli/).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from toycards.errors import ToycardsError
from toycards.runtime.model_base import require_finite
from toycards.runtime.sampling import perplexity, token_logprobs, top_logprobs


@dataclass
class TokenScore:
    position: int  # index of the predicted token in the sequence
    id: int
    piece: str
    logprob: float
    top: list[tuple[int, str, float]] = field(default_factory=list)  # (id, piece, logprob)


@dataclass
class Evaluation:
    n_tokens: int
    tokens: list[TokenScore]
    mean_logprob: float
    perplexity: float

    def to_json(self) -> dict:
        return asdict(self)


def evaluate(model, text: str | None = None, ids: list[int] | None = None, top_k: int = 0) -> Evaluation:
    """Score every token after the first: log P(x[t+1] | x[1:t])."""
    tok = model.tokenizer
    if ids is None:
        if text is None:
            raise ToycardsError("give a text or token ids to evaluate")
        if tok is None:
            raise ToycardsError("this model has no tokenizer; give token ids")
        ids = tok.encode(text)
    if len(ids) < 2:
        raise ToycardsError(f"need at least 2 tokens to score, got {len(ids)}")
    logits = model.logits(ids)  # (T, N_V)
    require_finite(logits, 1, getattr(model, "path", None))
    targets = np.asarray(ids[1:])
    lp = token_logprobs(logits[:-1], targets)
    top_ids, top_lp = top_logprobs(logits[:-1], top_k) if top_k > 0 else (None, None)

    def piece(i: int) -> str:
        return tok.decode([int(i)], special=True) if tok is not None else ""

    scores = []
    for t, (target, value) in enumerate(zip(targets.tolist(), lp.tolist(), strict=True)):
        top = []
        if top_ids is not None:
            top = [(int(i), piece(i), float(v)) for i, v in zip(top_ids[t], top_lp[t], strict=True)]
        scores.append(TokenScore(t + 1, int(target), piece(target), float(value), top))
    return Evaluation(len(scores), scores, float(np.mean(lp)), float(perplexity(lp)))
