"""`target="reference"`: a model whose forward pass is the reference interpreter running its card.

Owns: `ReferenceModel` (a `ModelAPI`, so `.logits`, `.generate`, `.new_cache` and the tokenizer
work as for the generated targets) and `TokenCache`, its cache. Each forward pass hands the
interpreter (toycards/lang/interpret/) the bound card, its hyperparameters and every parameter
in its card shape (a binding `from "token_embd.weight"^⊺` is transposed back, so that
`W_e ∈ ℝ^{d_e×N_V}` is d_e×N_V), all in float64.
Leaves out: the meaning of the card (the interpreter), binding and reading weights (load.py,
binding.py).

Token ids: the card numbers the vocabulary 1…N_V like every other index (`v ∈ [N_V]`, `W_e[:, x[t]]`
is column x[t]), so the tokenizer's id i is the card's token i + 1.

Cache: the simplest correct one. The cache holds the token ids seen so far; a pass with a cache
runs the card on all of them and returns the columns of the new tokens. So cached decoding
equals, by construction, the full pass over every token so far.
"""

from __future__ import annotations

import numpy as np

from toycards.errors import ToycardsError
from toycards.lang import ir
from toycards.lang.interpret import Interpreter
from toycards.models.binding import Bound
from toycards.runtime.model_base import ModelAPI


class TokenCache:
    """The reference model's cache: the token ids `[B, length]` seen so far."""

    def __init__(self) -> None:
        self.ids: np.ndarray | None = None

    @property
    def length(self) -> int:
        return 0 if self.ids is None else int(self.ids.shape[-1])

    def reset(self) -> None:
        self.ids = None

    def expect(self, n: int) -> None:
        """(KVCache.expect: the ids need no room made ahead.)"""

    def can_keep(self, n: int) -> bool:
        """Any prefix can be kept: the cache is the token ids (KVCache.can_keep)."""
        return 0 <= n <= self.length

    def truncate(self, n: int) -> None:
        """Keep the first `n` tokens (KVCache.truncate)."""
        if not 0 <= n <= self.length:
            raise ValueError(f"cannot keep {n} tokens of a cache that holds {self.length}")
        self.ids = self.ids[:, :n] if n else None


class ReferenceModel(ModelAPI):
    """The interpreter behind the model interface; slow, float64, and the definition."""

    def __init__(self, card: ir.Card, bound: Bound, weights: dict[str, np.ndarray]) -> None:
        from toycards.checker import check_card, check_prelude
        from toycards.library import library_algorithms

        result = check_card(card)
        errors = [d for d in result.diagnostics if d.severity == "error"]
        if errors:
            raise ToycardsError.from_diagnostics(errors, {card.main.span.file: card.source})
        shapes = {
            k: s
            for r in (check_prelude(), result)
            if r
            for i in r.algorithms.values()
            for k, s in i.shapes.items()
        }
        self._results = (result, check_prelude())  # the nodes' ids stay valid while these live
        self.rank_of = lambda node: None if (s := shapes.get(id(node))) is None else s.rank
        self.card, self.bound = card, bound
        self.hp = dict(bound.hyper)
        self.w = {k: np.asarray(v) for k, v in weights.items()}  # as GGUF stores them, by tensor name
        self.library = library_algorithms()

    def values(self) -> dict[str, object]:
        """Hyperparameters and parameters by card name, each parameter in its card shape, float64;
        a per-layer parameter (`γ_l^1`) as {layer: value}."""
        out: dict[str, object] = dict(self.hp)
        for decl, group in self.card.main.all_params():  # a conditional group's family may hold no layer
            out.update({n: {} for n in decl.names if group is not None})
        for p in self.bound.params:
            stored = np.asarray(self.w[p.key], dtype=np.float64)
            value = stored.T if p.transpose else stored
            if p.layer is None:
                out[p.name] = value
            else:
                out.setdefault(p.name, {})[p.layer] = value
        return out

    def sequence_logits(self, ids: np.ndarray) -> np.ndarray:
        """float64 logits `[ℓ, N_V]` of one sequence of token ids: Z of the card's `P = softmax(Z)`."""
        x = np.asarray(ids, dtype=np.int64) + 1  # the card's token numbers are 1-based
        interp = Interpreter(self.card, self.library, logits=True, rank_of=self.rank_of)
        Z = interp.run(self.card.main.name, [x], self.values())
        return np.asarray(Z, dtype=np.float64).T

    def __call__(self, x, cache: TokenCache | None = None) -> np.ndarray:
        """float64 logits `[..., T, N_V]` for ids `[..., T]`; with a cache, x holds only the new tokens."""
        x = np.asarray(x, dtype=np.int64)
        batch = x.reshape(-1, x.shape[-1])
        if cache is not None and cache.ids is not None:
            if cache.ids.shape[0] != batch.shape[0]:
                raise ToycardsError("the batch shape changed within one cache; start a new cache")
            batch = np.concatenate([cache.ids, batch], axis=1)
        out = np.stack([self.sequence_logits(row) for row in batch])[:, -x.shape[-1] :, :]
        if cache is not None:
            cache.ids = batch
        return out.reshape(*x.shape, out.shape[-1])

    def _passes(self, n: int) -> list[slice]:
        """One pass over all n new tokens: the interpreter reruns the card on every token so far at
        each pass, so a pass a micro-batch would rerun the prompt's start once per micro-batch."""
        return [slice(0, n)]

    def new_cache(self, kv_type: str = "f32") -> TokenCache:
        """The ids so far; keys and values are recomputed, never kept, so "f32" alone: the reference
        runs the card itself, and a float16 cache is a target's choice of numerics."""
        if kv_type != "f32":
            raise ToycardsError(
                f"KV cache type {kv_type!r}: the reference target keeps no KV cache (it reruns the card on"
                " every token so far); a float16 cache is for the numpy and torch targets"
            )
        return TokenCache()

    def _forward_numpy(self, ids: np.ndarray, cache: TokenCache | None, last: bool = False) -> np.ndarray:
        out = np.asarray(self(ids, cache), dtype=np.float32)
        return out[..., -1:, :] if last else out
