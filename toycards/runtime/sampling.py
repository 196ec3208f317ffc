"""Next-token sampling and per-token log-probabilities, in NumPy only.

Owns: turning one logit vector `z ∈ ℝ^{N_V}` into a token id (greedy, top-k, top-p,
temperature), the numerically stable log-softmax, and the scoring helpers that the
`eval` command needs (log-probability of each target token, perplexity, the k most likely
tokens at each position).
Leaves out: running the model, the KV cache and the generation loop (runtime/generate),
repetition penalties and other llama.cpp samplers (min-p, typical, DRY, mirostat).

The sampler chain is llama.cpp's default order, restricted to the samplers we have
(`common_params_sampling::samplers`: … top_k → typ_p → top_p → min_p → xtc → temperature,
then draw from the distribution):

    1. top-k        keep the k largest logits
    2. top-p        softmax of the survivors at temperature 1; keep the smallest prefix
                    (largest first) whose probability mass is ≥ p
    3. temperature  divide the surviving logits by T
    4. draw         softmax, then one uniform draw by inverse CDF

So top-p chooses its nucleus before the temperature is applied, as llama.cpp does (Hugging
Face `transformers` applies temperature first; the two differ only in which tokens top-p keeps).
Temperature 0 is greedy decoding: the largest logit, the lowest id among ties (`np.argmax`),
and no random number is drawn. Ties in logits are ordered by token id everywhere, so every
result is a pure function of (logits, arguments, rng state).
"""

from __future__ import annotations

import numpy as np

from toycards.errors import ToycardsError

__all__ = ["distribution", "log_softmax", "perplexity", "sample", "softmax", "token_logprobs", "top_logprobs"]


def _check_logits(logits: np.ndarray, ndim: int, what: str = "logits") -> np.ndarray:
    """Return `logits` as float64, or raise if its rank is wrong or it holds NaN / +inf."""
    z = np.asarray(logits)
    if z.ndim != ndim or z.shape[-1] == 0:
        want = "[N_V]" if ndim == 1 else "[T, N_V]"
        raise ToycardsError(f"{what} must have shape {want} with N_V ≥ 1, got shape {tuple(z.shape)}")
    if not np.issubdtype(z.dtype, np.number) or np.issubdtype(z.dtype, np.complexfloating):
        raise ToycardsError(f"{what} must be real numbers, got dtype {z.dtype}")
    z = z.astype(np.float64, copy=False)
    bad = np.isnan(z) | (z == np.inf)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ToycardsError(f"{what} contain {z[where]} at index {where if ndim > 1 else where[0]}")
    if (z == -np.inf).all(axis=-1).any():
        raise ToycardsError(f"{what}: every logit of a row is -inf, so no token can be chosen")
    return z


def log_softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """log softmax along `axis`, stable for large logits and exact for -inf entries.

    >>> log_softmax(np.array([0.0, 0.0])).round(4).tolist()
    [-0.6931, -0.6931]
    >>> log_softmax(np.array([1000.0, 1000.0 + np.log(3)])).round(4).tolist()
    [-1.3863, -0.2877]
    """
    z = np.asarray(logits, dtype=np.float64)
    m = np.max(z, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)  # a row of -inf stays -inf instead of becoming NaN
    shifted = z - m
    with np.errstate(divide="ignore"):
        return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """softmax along `axis` (the paper's column softmax when axis is the vocabulary).

    >>> softmax(np.array([0.0, np.log(3.0)])).round(4).tolist()
    [0.25, 0.75]
    """
    return np.exp(log_softmax(logits, axis=axis))


def _validate(temperature: float, top_k: int | None, top_p: float | None) -> None:
    if not np.isfinite(temperature) or temperature < 0:
        raise ToycardsError(f"temperature must be a finite number ≥ 0, got {temperature}")
    if top_k is not None and (isinstance(top_k, bool) or int(top_k) != top_k or top_k < 1):
        raise ToycardsError(f"top_k must be an integer ≥ 1 (or None for no limit), got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ToycardsError(f"top_p must be in (0, 1] (or None for no limit), got {top_p}")


def _order(z: np.ndarray, top_k: int | None) -> np.ndarray:
    """Token ids of the `top_k` largest logits (all ids if None), largest first, ties by id.

    >>> _order(np.array([1.0, 3.0, 3.0, 2.0]), 3).tolist()
    [1, 2, 3]
    """
    ids = np.arange(z.shape[0])
    if top_k is not None and top_k < z.shape[0]:
        kth = np.partition(z, -top_k)[-top_k]  # the k-th largest value
        ids = np.flatnonzero(z >= kth)  # ≥ k ids when the k-th value is tied; cut below
    order = ids[np.argsort(-z[ids], kind="stable")]  # ids ascending, so a stable sort breaks ties by id
    return order if top_k is None else order[:top_k]


def _nucleus(z_sorted: np.ndarray, top_p: float) -> int:
    """How many of the sorted logits top-p keeps: the shortest prefix with mass ≥ p (at least 1).

    >>> _nucleus(np.log(np.array([0.5, 0.25, 0.15, 0.10])), 0.7)
    2
    """
    cdf = np.cumsum(softmax(z_sorted))
    return int(min(np.searchsorted(cdf, top_p, side="left") + 1, z_sorted.shape[0]))


def distribution(
    logits: np.ndarray, temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None
) -> np.ndarray:
    """The distribution `sample` draws from: float64 [N_V], zero outside the kept tokens.

    Temperature 0 gives the one-hot vector of the greedy choice.

    >>> distribution(np.log([0.1, 0.5, 0.15, 0.25]), 1.0, top_p=0.7).round(4).tolist()
    [0.0, 0.6667, 0.0, 0.3333]
    """
    _validate(temperature, top_k, top_p)
    z = _check_logits(logits, ndim=1)  # (N_V,)
    p = np.zeros_like(z)  # (N_V,)
    if temperature == 0.0:
        p[np.argmax(z)] = 1.0
        return p
    if top_k is None and (top_p is None or top_p >= 1.0):
        return softmax(z / temperature)  # nothing to cut, so no sort
    order = _order(z, None if top_k is None else int(top_k))  # (k,) ids, largest logit first
    z_kept = z[order]  # (k,)
    if top_p is not None and top_p < 1.0:
        order = order[: _nucleus(z_kept, top_p)]
    p[order] = softmax(z[order] / temperature)
    return p


def sample(
    logits: np.ndarray,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    rng: np.random.Generator | None = None,
) -> int:
    """Choose the next token id from `logits ∈ ℝ^{N_V}` (chain order in the module docstring).

    `rng` is consumed only when temperature > 0 (one `rng.random()` per call, inverted
    through the CDF of `distribution(...)` in token-id order); None means a fresh unseeded
    generator. `-inf` logits mark forbidden tokens; NaN and +inf are errors.

    >>> sample(np.array([0.0, 2.0, 2.0, 1.0]))          # greedy, tie → lower id
    1
    >>> sample(np.array([0.0, 2.0, 1.0]), temperature=1.0, top_k=1)
    1
    """
    p = distribution(logits, temperature, top_k, top_p)  # (N_V,)
    if temperature == 0.0:
        return int(np.argmax(p))
    cdf = np.cumsum(p)  # (N_V,)
    rng = np.random.default_rng() if rng is None else rng
    u = rng.random() * cdf[-1]
    i = int(np.searchsorted(cdf, u, side="right"))  # first id whose CDF step passes u
    return min(i, int(np.flatnonzero(p)[-1]))


def _check_targets(targets: np.ndarray, n_rows: int, n_vocab: int) -> np.ndarray:
    x = np.asarray(targets)
    if x.ndim != 1 or x.shape[0] != n_rows:
        raise ToycardsError(f"targets must have shape [T] = [{n_rows}] to match the logits, got {x.shape}")
    if x.size and not np.issubdtype(x.dtype, np.integer):
        raise ToycardsError(f"targets must be integer token ids, got dtype {x.dtype}")
    bad = (x < 0) | (x >= n_vocab)
    if bad.any():
        t = int(np.flatnonzero(bad)[0])
        raise ToycardsError(
            f"target token id {int(x[t])} at position {t} is outside the vocabulary [0, {n_vocab})"
        )
    return x.astype(np.int64, copy=False)


def token_logprobs(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """log P(targets[t] | row t) for each row of `logits ∈ ℝ^{T×N_V}`; returns float64 [T].

    For a prompt x of length ℓ, pass `logits[:-1]` and `targets = x[1:]`: row t of the
    model's logits predicts token t+1.

    >>> token_logprobs(np.log([[0.25, 0.75], [0.5, 0.5]]), np.array([1, 0])).round(4).tolist()
    [-0.2877, -0.6931]
    """
    z = _check_logits(logits, ndim=2)  # (T, N_V)
    x = _check_targets(targets, z.shape[0], z.shape[1])  # (T,)
    return log_softmax(z, axis=-1)[np.arange(z.shape[0]), x]


def top_logprobs(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k most likely token ids of each row and their log-probabilities, largest first.

    Returns `(ids, logprobs)`, both of shape [T, min(k, N_V)]; ties are ordered by id.

    >>> ids, lp = top_logprobs(np.log([[0.2, 0.5, 0.3]]), 2)
    >>> ids.tolist(), lp.round(4).tolist()
    ([[1, 2]], [[-0.6931, -1.204]])
    """
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ToycardsError(f"k must be an integer ≥ 1, got {k}")
    z = _check_logits(logits, ndim=2)  # (T, N_V)
    lp = log_softmax(z, axis=-1)  # (T, N_V)
    ids = np.stack([_order(row, int(k)) for row in z]) if z.shape[0] else np.zeros((0, min(k, z.shape[1])))
    ids = ids.astype(np.int64)  # (T, k)
    return ids, np.take_along_axis(lp, ids, axis=-1)


def perplexity(logprobs: np.ndarray) -> float:
    """exp(−mean log-probability) of the scored tokens (natural log, as llama.cpp reports).

    >>> round(perplexity(np.log([0.5, 0.25])), 4)   # geometric mean of 1/p: √(2·4)
    2.8284
    """
    lp = np.asarray(logprobs, dtype=np.float64)
    if lp.ndim != 1 or lp.shape[0] == 0:
        raise ToycardsError(
            f"perplexity needs a non-empty [T] vector of log-probabilities, got shape {lp.shape}"
        )
    if np.isnan(lp).any() or (lp > 1e-12).any():
        raise ToycardsError("perplexity: log-probabilities must be ≤ 0 and not NaN")
    return float(np.exp(-lp.mean()))
