"""Scoring text with a model: per-token log-probabilities and perplexity (`toycards eval`).

Owns: `evaluate(model, text=None, ids=None, top_k=0, n_ctx=None, stride=None, …)` → `Evaluation`
(the summary: tokens scored, mean log-probability, perplexity, tokens per second; and, when asked
for, each scored token with its log-probability and the model's top-k alternatives), scored in
sliding windows (`windows`), and `default_context`. Non-finite logits (weights holding NaN or
Inf) raise ToycardsError naming the position.
Leaves out: sampling (runtime/sampling.py), the context-length policy (runtime/context.py),
loading (load.py), printing and the progress display (cli/).

The scoring rule (Hugging Face's sliding-window perplexity): windows of at most `n_ctx` tokens
start at 0, S, 2S, … (S the stride) until one reaches the end of the text; each window scores
the tokens it holds that no earlier window scored, each from the tokens before it in the window,
and the first window scores all but its first token. With S < n_ctx every token but the first is
scored, each with at least n_ctx − S tokens before it (the whole text before it, near the start);
with S = n_ctx the windows do not overlap and the first token of each is not scored. Only one
window's logits are held at a time, a micro-batch of rows at a time for a longer window
(`ModelAPI.window_logits`); of them only the scored tokens' log-probabilities are kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from toycards.errors import ToycardsError
from toycards.runtime.context import ContextLength
from toycards.runtime.model_base import require_finite
from toycards.runtime.sampling import log_softmax, top_logprobs

MAX_DEFAULT_CONTEXT = 2048  # the default window stops here: a window's forward pass grows as its square
ROWS = 64  # rows of a window's logits turned into float64 log-probabilities at once


@dataclass
class TokenScore:
    position: int  # index of the predicted token in the sequence (0-based: the first token is 0)
    id: int
    piece: str
    logprob: float
    top: list[tuple[int, str, float]] = field(default_factory=list)  # (id, piece, logprob)


@dataclass
class Evaluation:
    n_tokens: int  # tokens scored
    mean_logprob: float  # natural log
    mean_nll: float  # −mean_logprob
    perplexity: float  # exp(mean_nll)
    n_ctx: int  # the window length
    stride: int
    windows: int
    seconds: float  # the forward passes and scoring, tokenizing left out
    tokens_per_second: float  # n_tokens / seconds
    tokens: list[TokenScore] | None = None  # each scored token, when asked for (`per_token`)

    def to_json(self) -> dict:
        """The summary, and the per-token records under "tokens" where they were kept."""
        out = asdict(self)
        if self.tokens is None:
            del out["tokens"]
        return out


def windows(n: int, n_ctx: int, stride: int) -> list[tuple[int, int, int]]:
    """The windows that score a text of `n` tokens: (begin, end, first) each, 0-based with `end`
    excluded: the window holds tokens begin … end − 1 and scores tokens first … end − 1.

    >>> windows(10, 4, 2)   # overlapping: every token but the first, each once
    [(0, 4, 1), (2, 6, 4), (4, 8, 6), (6, 10, 8)]
    >>> windows(10, 4, 4)   # side by side: tokens 4 and 8 begin a window and are not scored
    [(0, 4, 1), (4, 8, 5), (8, 10, 9)]
    >>> windows(3, 8, 4)    # the whole text in one window
    [(0, 3, 1)]
    """
    if not 1 <= stride <= n_ctx:
        raise ToycardsError(f"the stride {stride} must be between 1 and the window length {n_ctx}")
    out, scored_to = [], 1  # scored_to: the first token no window has scored yet
    for begin in range(0, n, stride):
        end = min(begin + n_ctx, n)
        first = max(scored_to, begin + 1)
        if first < end:
            out.append((begin, end, first))
        scored_to = max(scored_to, end)
        if end == n:
            break
    return out


def default_context(context: ContextLength) -> int:
    """The window length when none is asked for: the trained context, at most MAX_DEFAULT_CONTEXT."""
    return min(context.trained or MAX_DEFAULT_CONTEXT, MAX_DEFAULT_CONTEXT)


def evaluate(
    model,
    text: str | None = None,
    ids: list[int] | None = None,
    top_k: int = 0,
    n_ctx: int | None = None,
    stride: int | None = None,
    per_token: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> Evaluation:
    """Score every token after the first, log P(x[t] | the tokens before it in its window), in
    windows of `n_ctx` tokens (default: `default_context`) starting every `stride` tokens (default
    n_ctx // 2): the module's rule. `per_token`: keep each token's score (with `top_k`
    alternatives); else the summary alone. `progress(done, total)`, in tokens scored: at the start
    and after each window. An `n_ctx` past the trained context is refused for a learned-position
    model, allowed for others (runtime/context.py)."""
    if hasattr(model, "require_vocabulary_output"):
        model.require_vocabulary_output("eval")
    tok = model.tokenizer
    if ids is None:
        if text is None:
            raise ToycardsError("give a text or token ids to evaluate")
        if tok is None:
            raise ToycardsError("this model has no tokenizer; give token ids")
        ids = tok.encode(text)
    if len(ids) < 2:
        raise ToycardsError(f"need at least 2 tokens to score, got {len(ids)}")
    context = getattr(model, "context_length", None) or ContextLength(None)
    n_ctx = context.resolve(n_ctx, "n_ctx")[0] if n_ctx is not None else default_context(context)
    if n_ctx < 2:
        raise ToycardsError(f"a window of {n_ctx} token scores nothing: n_ctx must be at least 2")
    stride = max(1, n_ctx // 2) if stride is None else stride
    plan = windows(len(ids), n_ctx, stride)
    total = sum(end - first for _, end, first in plan)

    began = time.perf_counter()
    logprobs, scores, done = [], [] if per_token else None, 0
    if progress is not None:
        progress(0, total)
    for begin, end, first in plan:
        # row r of a window's logits predicts its token r + 1: rows first − begin − 1 … end − begin − 2
        # score tokens first … end − 1, taken a micro-batch of rows at a time
        blocks = model.window_logits(ids[begin : end - 1], first - begin - 1)
        for row, logits in blocks:  # (rows, N_V)
            require_finite(logits, begin + row + 1, getattr(model, "path", None))
            at = begin + row + 1  # the first token these rows score
            lp = _scored(logits, ids[at : at + len(logits)])
            logprobs.append(lp)
            if scores is not None:
                scores += _token_scores(tok, logits, ids, at, lp, top_k)
            del logits
        done += end - first
        if progress is not None:
            progress(done, total)
    seconds = time.perf_counter() - began

    lp = np.concatenate(logprobs)  # (total,)
    mean = float(lp.mean())
    return Evaluation(
        n_tokens=int(lp.shape[0]),
        mean_logprob=mean,
        mean_nll=-mean,
        perplexity=float(np.exp(-mean)),
        n_ctx=n_ctx,
        stride=stride,
        windows=len(plan),
        seconds=seconds,
        tokens_per_second=lp.shape[0] / max(seconds, 1e-9),
        tokens=scores,
    )


def _scored(logits: np.ndarray, targets: list[int]) -> np.ndarray:
    """log-softmax(logits[t])[targets[t]] for each row, float64, ROWS rows at a time (a window of
    SmolLM2's 49,152-token vocabulary is 400 MB of float32 logits; its float64 log-softmax twice that)."""
    out = np.empty(len(targets), dtype=np.float64)  # (T,)
    for start in range(0, len(targets), ROWS):
        block = log_softmax(logits[start : start + ROWS], axis=-1)  # (≤ ROWS, N_V)
        picked = np.asarray(targets[start : start + ROWS])
        out[start : start + len(picked)] = block[np.arange(len(picked)), picked]
    return out


def _token_scores(tok, logits: np.ndarray, ids: list[int], first: int, lp: np.ndarray, top_k: int):
    """The TokenScore of each scored token first, first + 1, … of the window whose rows are `logits`."""

    def piece(i: int) -> str:
        return tok.decode([int(i)], special=True) if tok is not None else ""

    tops = [[] for _ in range(len(lp))]
    if top_k > 0:
        for start in range(0, len(lp), ROWS):
            top_ids, top_lp = top_logprobs(logits[start : start + ROWS], top_k)  # (≤ ROWS, k) each
            for r, (row_ids, row_lp) in enumerate(zip(top_ids, top_lp, strict=True)):
                tops[start + r] = [(int(i), piece(i), float(v)) for i, v in zip(row_ids, row_lp, strict=True)]
    return [
        TokenScore(first + t, int(ids[first + t]), piece(ids[first + t]), float(value), tops[t])
        for t, value in enumerate(lp.tolist())
    ]
