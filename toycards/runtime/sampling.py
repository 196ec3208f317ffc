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

import threading

import numpy as np

from toycards.errors import ToycardsError

__all__ = ["distribution", "log_softmax", "perplexity", "sample", "softmax", "token_logprobs", "top_logprobs"]


def _check_logits(
    logits: np.ndarray, ndim: int, what: str = "logits", into: np.ndarray | None = None
) -> np.ndarray:
    """Return `logits` as float64 (written into `into` when given and of its shape), or raise if its
    rank is wrong or it holds NaN / +inf."""
    z = np.asarray(logits)
    if z.ndim != ndim or z.shape[-1] == 0:
        want = "[N_V]" if ndim == 1 else "[T, N_V]"
        raise ToycardsError(f"{what} must have shape {want} with N_V ≥ 1, got shape {tuple(z.shape)}")
    if not np.issubdtype(z.dtype, np.number) or np.issubdtype(z.dtype, np.complexfloating):
        raise ToycardsError(f"{what} must be real numbers, got dtype {z.dtype}")
    if into is not None and into.shape == z.shape:
        np.copyto(into, z)
        z = into
    else:
        z = z.astype(np.float64, copy=False)
    if np.isfinite(z.max(axis=-1)).all():  # each row's max is finite: no NaN, no +inf, not all -inf
        return z
    bad = np.isnan(z) | (z == np.inf)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ToycardsError(f"{what} contain {z[where]} at index {where if ndim > 1 else where[0]}")
    raise ToycardsError(f"{what}: every logit of a row is -inf, so no token can be chosen")


_held = threading.local()  # this thread's scratch vectors for `sample` (see _scratch)


def _scratch(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Three float64 vectors of n entries, this thread's, kept from call to call: `sample` runs once
    a token on one vocabulary, and a fresh vector of 50–250k float64 can cost more than the
    arithmetic on it (glibc hands a freed vector that large back to the system, and a new one's
    pages fault in again)."""
    held = getattr(_held, "vectors", None)
    if held is None or held[0].shape[0] != n:
        held = _held.vectors = (np.empty(n), np.empty(n), np.empty(n))
    return held


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
    return _softmax_in_place(np.array(logits, dtype=np.float64), axis)


def _softmax_in_place(z: np.ndarray, axis: int = -1) -> np.ndarray:
    """softmax of float64 z, computed in z itself (no temporary of its size: on a 50–250k
    vocabulary, each one can cost more than the arithmetic)."""
    m = np.max(z, axis=axis, keepdims=True)
    z -= np.where(np.isfinite(m), m, 0.0)
    np.exp(z, out=z)
    with np.errstate(invalid="ignore"):  # a row of -inf: NaN, as log_softmax gives
        z /= np.sum(z, axis=axis, keepdims=True)
    return z


def _validate(temperature: float, top_k: int | None, top_p: float | None) -> None:
    if not np.isfinite(temperature) or temperature < 0:
        raise ToycardsError(f"temperature must be a finite number ≥ 0, got {temperature}")
    if top_k is not None and (isinstance(top_k, bool) or int(top_k) != top_k or top_k < 1):
        raise ToycardsError(f"top_k must be an integer ≥ 1 (or None for no limit), got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ToycardsError(f"top_p must be in (0, 1] (or None for no limit), got {top_p}")


def _order(z: np.ndarray, top_k: int | None, scratch: np.ndarray | None = None) -> np.ndarray:
    """Token ids of the `top_k` largest logits (all ids if None), largest first, ties by id
    (`scratch`: a vector of z's size that it may overwrite).

    >>> _order(np.array([1.0, 3.0, 3.0, 2.0]), 3).tolist()
    [1, 2, 3]
    """
    ids = np.arange(z.shape[0])
    if top_k is not None and top_k < z.shape[0]:
        kth = _kth_largest(z, top_k, scratch)
        ids = np.flatnonzero(z >= kth)  # ≥ k ids when the k-th value is tied; cut below
    order = ids[np.argsort(-z[ids], kind="stable")]  # ids ascending, so a stable sort breaks ties by id
    return order if top_k is None else order[:top_k]


def _kth_largest(z: np.ndarray, k: int, scratch: np.ndarray | None) -> float:
    """The k-th largest of z (partitioning a copy: `scratch`, of z's size, where given)."""
    if scratch is None:
        return np.partition(z, -k)[-k]
    np.copyto(scratch, z)
    scratch.partition(-k)
    return scratch[-k]


def _nucleus(z: np.ndarray, top_k: int | None, top_p: float, scratch: np.ndarray | None = None) -> np.ndarray:
    """Token ids that top-k and then top-p keep, largest logit first, ties by id: the shortest prefix
    of the top-k survivors, sorted, whose mass (softmax over the survivors) is ≥ p, at least one id
    (`scratch`: a vector of z's size that it may overwrite).

    Only that prefix needs sorting (sorting a whole vocabulary of 50–250k logits costs as much as a
    decoding step): the logits within c of the largest are a prefix of the sorted order, so they
    alone are sorted, for a c where they hold mass p (the first of 0.5, 1, 2, … 64, then halved
    four times towards the smallest); every survivor where none does.

    >>> _nucleus(np.log(np.array([0.10, 0.5, 0.15, 0.25])), None, 0.7).tolist()
    [1, 3]
    """
    n = z.shape[0]
    k = n if top_k is None else min(int(top_k), n)
    top = z.max()  # finite: _check_logits refuses a row of -inf
    floor = -np.inf if k == n else _kth_largest(z, k, scratch)  # the survivors: above it, and ties up to k
    w = np.subtract(z, top, out=scratch)
    np.exp(w, out=w)  # (N_V,) the unnormalised probabilities; -inf gives 0
    if k < n:
        above = z > floor
        total = w[above].sum() + (k - np.count_nonzero(above)) * np.exp(floor - top)
    else:
        total = w.sum()

    def enough(c: float) -> bool:  # the logits ≥ top − c hold mass p
        return w[z >= top - c].sum() >= top_p * total

    lo, hi = 0.0, 0.5  # the first of 0.5, 1, 2, … 64 that holds mass p, then four halvings
    while hi < 64 and top - hi > floor and not enough(hi):
        lo, hi = hi, 2 * hi
    if top - hi > floor:
        for _ in range(4):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    for c in (hi, np.inf):  # the cdf decides; the sums above only chose where to look
        ids = np.flatnonzero(z >= max(top - c, floor))  # ascending
        order = ids[np.argsort(-z[ids], kind="stable")][:k]  # ids ascending: ties stay by id
        cdf = np.cumsum(w[order]) / total
        if cdf[-1] >= top_p or top - c <= floor:
            break
    return order[: int(min(np.searchsorted(cdf, top_p, side="left") + 1, len(order)))]


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
    return _distribution(z, temperature, top_k, top_p, np.empty_like(z), None)[0]


def _distribution(z, temperature, top_k, top_p, out: np.ndarray, scratch: np.ndarray | None):
    """`distribution` of checked float64 logits z [N_V], written into `out` (`scratch`: a vector of
    z's size that it may overwrite, or None), and the ids it keeps (None: every id)."""
    if temperature != 0.0 and top_k is None and (top_p is None or top_p >= 1.0):
        np.divide(z, temperature, out=out)
        return _softmax_in_place(out), None  # nothing to cut, so no sort
    out.fill(0.0)
    if temperature == 0.0:
        kept = np.argmax(z)[None]
        out[kept] = 1.0
    else:
        if top_p is not None and top_p < 1.0:
            kept = _nucleus(z, top_k, top_p, scratch)  # (n,) ids, largest logit first
        else:
            kept = _order(z, int(top_k), scratch)  # (k,)
        out[kept] = softmax(z[kept] / temperature)
    return out, kept


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
    _validate(temperature, top_k, top_p)
    z = np.asarray(logits)
    if temperature == 0.0 and z.ndim == 1 and z.size and z.dtype.kind == "f" and np.isfinite(z.max()):
        return int(np.argmax(z))  # greedy: no NaN or +inf (max would be), float64's order is float32's
    held = _scratch(z.shape[0]) if z.ndim == 1 else (None, None, None)  # (the check refuses other ranks)
    z = _check_logits(z, ndim=1, into=held[0])  # (N_V,)
    if temperature == 0.0:
        return int(np.argmax(z))
    p, kept = _distribution(z, temperature, top_k, top_p, held[1], held[2])
    # the CDF in token-id order steps only at the kept ids: its values there are the sums over them
    ids = np.flatnonzero(p) if kept is None else np.sort(kept[p[kept] > 0])  # (n,) ascending
    cdf = np.cumsum(p[ids])  # (n,)
    rng = np.random.default_rng() if rng is None else rng
    u = rng.random() * cdf[-1]
    j = int(np.searchsorted(cdf, u, side="right"))  # the first id whose CDF step passes u
    return int(ids[min(j, len(ids) - 1)])


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
