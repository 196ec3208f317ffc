"""What every generated model offers besides `forward`: logits for a list of ids, generation.

Owns: `ModelAPI` (`logits(ids)`, `new_cache()`, `generate(prompt, …)`), shared by the NumPy
and torch base classes. Leaves out: the forward pass (generated), weights (model_*.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from toycards.errors import ToycardsError
from toycards.runtime.context import KVCache


class ModelAPI:
    tokenizer = None  # set by the loader when the GGUF file carries a vocabulary
    bound = None  # toycards.binding.Bound: hyperparameters and where each tensor came from

    def _forward_numpy(self, ids: np.ndarray, cache: KVCache | None) -> np.ndarray:
        raise NotImplementedError

    def logits(self, ids) -> np.ndarray:
        """float32 logits [len(ids), N_V] for one sequence of token ids."""
        ids = np.asarray(ids, dtype=np.int64).reshape(1, -1)
        if ids.size == 0:
            raise ToycardsError("logits() needs at least one token id")
        n_vocab = self.hp.get("N_V")
        if n_vocab is not None and (ids.min() < 0 or ids.max() >= n_vocab):
            raise ToycardsError(f"token id out of range 0…{n_vocab - 1}")
        return self._forward_numpy(ids, None)[0]

    def new_cache(self) -> KVCache:
        return KVCache()

    def generate(self, prompt: str, max_tokens: int = 32, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, seed: int | None = None) -> Iterator[str]:  # fmt: skip
        """Yield text pieces of a continuation of `prompt` (greedy at temperature 0)."""
        from toycards.runtime.sampling import sample

        tok = self.tokenizer
        if tok is None:
            raise ToycardsError("this model has no tokenizer (the GGUF file carries no vocabulary)")
        ids = tok.encode(prompt)
        if not ids:
            raise ToycardsError("the prompt encodes to no tokens")
        rng = np.random.default_rng(seed)
        cache = self.new_cache()
        decoder = tok.decoder(at_start=False)
        logits = self._forward_numpy(np.asarray(ids, dtype=np.int64).reshape(1, -1), cache)[0, -1]
        for _ in range(max_tokens):
            next_id = sample(logits, temperature=temperature, top_k=top_k, top_p=top_p, rng=rng)
            if tok.is_eog(next_id):
                break
            piece = decoder.push(next_id)
            if piece:
                yield piece
            logits = self._forward_numpy(np.asarray([[next_id]], dtype=np.int64), cache)[0, -1]
        tail = decoder.flush()
        if tail:
            yield tail
