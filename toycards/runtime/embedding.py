"""Embeddings of texts from a model whose card outputs one embedding per token (an encoder: BERT).

Owns: `POOLINGS` and `pool` (a sequence's columns to one vector, as llama.cpp's `build_pooling`
does after the model's graph, llama-graph.cpp), `normalize` (as llama.cpp's
`common_embd_normalize`, the embedding example's `--embd-normalize`), and `embed`, behind
`ModelAPI.embed`: tokenize, run the sequences of one length together, pool, normalise.
Leaves out: the forward pass (the generated module or the interpreter), tokenization (tokenizer/),
the command (cli/embed.py).

The pooling is the card's hyperparameter `pooling` (bert.card binds it to `{arch}.pooling_type`,
llama.cpp's default none) unless the caller names another, as llama.cpp's `--pooling` overrides the
file's. Token ids of a text are llama.cpp's embedding example's: `common_tokenize(…, add_special,
parse_special)`, so a BERT text is [CLS] … [SEP] and "[SEP]" written in it is that token.
Sequences of different lengths run one length at a time: the generated modules take a batch of
one length (no padding), which gives what llama.cpp's per-sequence masks give.
NumPy is imported by the functions, not the module: the command line reads `POOLINGS` for its
options, and a command that only reads a header imports no NumPy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from toycards.errors import ToycardsError

if TYPE_CHECKING:
    import numpy as np

# llama.cpp's LLAMA_POOLING_TYPE_NONE, _MEAN, _CLS, _LAST (rank, a reranker's classifier head, is no
# pooling of embeddings)
POOLINGS = ("none", "mean", "cls", "last")
NORMALIZE_HELP = "-1 none, 0 max-abs to int16, 1 taxicab, 2 Euclidean, p > 2 p-norm"


def pool(E: np.ndarray, pooling: str) -> np.ndarray:
    """One sequence's embedding from its tokens' `E` [ℓ, d] (llama-graph.cpp `build_pooling`): the
    mean of the rows (mean), the first row ([CLS]: cls), the last (last), or every row (none).

    >>> import numpy as np
    >>> E = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 9.0]])
    >>> pool(E, "mean").tolist(), pool(E, "cls").tolist(), pool(E, "last").tolist(), pool(E, "none").shape
    ([3.0, 5.0], [1.0, 2.0], [5.0, 9.0], (3, 2))
    """

    if pooling == "mean":
        return E.mean(axis=-2)  # (d,)
    if pooling == "cls":
        return E[..., 0, :]  # (d,)
    if pooling == "last":
        return E[..., -1, :]  # (d,)
    if pooling == "none":
        return E  # (ℓ, d)
    raise ToycardsError(f"unknown pooling {pooling!r}: choose {', '.join(POOLINGS)}")


def normalize(v: np.ndarray, p: int = 2) -> np.ndarray:
    """Each row of `v` [..., d] divided by its norm, as llama.cpp's `common_embd_normalize` (in
    float64): p = -1 leaves it, 0 scales the largest |entry| to 32760 (int16's range), 1 is the
    taxicab norm, 2 the Euclidean, p > 2 the p-norm; a row of norm 0 becomes zeros.

    >>> import numpy as np
    >>> v = np.array([3.0, -4.0])
    >>> normalize(v).round(6).tolist(), normalize(v, 1).round(6).tolist()
    ([0.6, -0.8], [0.428571, -0.571429])
    >>> normalize(np.array([1.0, -2.0]), 0).tolist(), normalize(np.zeros(2)).tolist()
    ([16380.0, -32760.0], [0.0, 0.0])
    """
    import numpy as np

    if p < -1:
        raise ToycardsError(f"normalize {p}: choose {NORMALIZE_HELP}")
    x = np.asarray(v, dtype=np.float64)
    if p == -1:
        return x
    a = np.abs(x)
    if p == 0:
        norm = a.max(axis=-1, keepdims=True) / 32760.0
    elif p == 2:
        norm = np.sqrt((x * x).sum(axis=-1, keepdims=True))
    else:
        norm = (a**p).sum(axis=-1, keepdims=True) ** (1.0 / p)
    return x * np.divide(1.0, norm, out=np.zeros_like(norm), where=norm > 0)


def _sequences(model, inputs) -> tuple[list[list[int]], bool]:
    """The token ids of each input, and whether `inputs` was one (a text, or one list of ids)."""
    import numpy as np

    one = isinstance(inputs, str) or (
        isinstance(inputs, Sequence | np.ndarray)
        and len(inputs) > 0
        and not isinstance(inputs[0], str)
        and np.isscalar(inputs[0])
    )
    items = [inputs] if one else list(inputs)
    if not items:
        raise ToycardsError("embed() needs a text or token ids")
    seqs = []
    for item in items:
        if isinstance(item, str):
            if model.tokenizer is None:
                raise ToycardsError(
                    "this model has no tokenizer (the GGUF file carries no vocabulary); give ids"
                )
            ids = model.tokenizer.encode(item, parse_special=True)
        else:
            ids = [int(i) for i in np.asarray(item).reshape(-1)]
        if not ids:
            raise ToycardsError(f"embed(): {item!r} gives no tokens")
        seqs.append(ids)
    return seqs, one


def embed(model, inputs, pooling: str | None = None, normalize_p: int = 2):
    """Embeddings of `inputs`: a text or a list of token ids (one sequence), or a list of either
    (several). Per sequence, float32 [d_e] pooled, or [ℓ, d_e] with pooling none; several pooled
    sequences stack to [n, d_e] (with pooling none, a list of [ℓ_i, d_e])."""
    import numpy as np

    pooling = str(model.hp.get("pooling", "none")) if pooling is None else pooling
    if pooling not in POOLINGS:
        raise ToycardsError(f"unknown pooling {pooling!r}: choose {', '.join(POOLINGS)}")
    seqs, one = _sequences(model, inputs)
    outs: list[np.ndarray | None] = [None] * len(seqs)
    for length in sorted({len(s) for s in seqs}):
        rows = [i for i, s in enumerate(seqs) if len(s) == length]
        ids = np.asarray([seqs[i] for i in rows], dtype=np.int64)  # (n, ℓ)
        model._check_ids(ids)
        model.context_length.check_fits(length, model.path)
        E = model._forward_numpy(ids, None)  # (n, ℓ, d_e)
        for i, e in zip(rows, E, strict=True):
            outs[i] = normalize(pool(e, pooling), normalize_p).astype(np.float32)
    if one:
        return outs[0]
    return list(outs) if pooling == "none" else np.stack(outs)
