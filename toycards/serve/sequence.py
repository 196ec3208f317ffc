"""One request's generation, a step at a time, as `ModelAPI.generate` computes it.

Owns: `Sequence` (the prompt's prefill, then per step one sampled token, its text and the next
forward pass, in its own KV cache, with generate's sampling and random stream, so that a request
served among others gets the reply it gets alone), `StopText` (cutting the text at the first
stop string, holding back an end that may begin one), and the events a sequence sends back:
text pieces (str), `Finished`, `Failed`.
Leaves out: which sequence steps when (scheduler.py), the wire format (protocol.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toycards.runtime.model_base import require_finite
from toycards.runtime.sampling import sample


@dataclass(frozen=True)
class Finished:
    """The reply ended: "stop" (end of generation or a stop string) or "length" (its token cap)."""

    reason: str
    n_prompt: int
    n_reply: int


@dataclass(frozen=True)
class Failed:
    """The reply could not be made: an `ApiError` (a 500 for non-finite logits, a 503 at shutdown)."""

    error: Exception


class StopText:
    """Text pieces in, the text before the first stop string out.

    >>> s = StopText(("\\n\\n",))
    >>> s.push("Hi\\n"), s.push("\\nthere")   # "\\n" might begin "\\n\\n": held back, then cut
    (('Hi', False), ('', True))
    """

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.held = ""  # the end of the text so far that begins a stop string

    def push(self, text: str) -> tuple[str, bool]:
        """The text now safe to send, and whether a stop string was found (the text ends before it)."""
        if not self.stops:
            return text, False
        text = self.held + text
        found = [i for stop in self.stops if (i := text.find(stop)) >= 0]
        if found:
            self.held = ""
            return text[: min(found)], True
        keep = max(
            (k for stop in self.stops for k in range(1, len(stop)) if text.endswith(stop[:k])), default=0
        )
        self.held = text[len(text) - keep :]
        return text[: len(text) - keep], False

    def flush(self) -> str:
        held, self.held = self.held, ""
        return held


class Sequence:
    """The generation of `job` (scheduler.Job): `step()` until it returns a `Finished`, which
    the caller hands on; each step sends the job its new text (`job.emit`). A step that chose a
    token leaves it in `pending`, for the caller to run through the model with other sequences'
    (`ModelAPI.step` over their caches) and hand back the logits it gives (`fed`)."""

    def __init__(self, model, job) -> None:
        self.model, self.job = model, job
        self.cache = None
        self.logits: np.ndarray | None = None  # (N_V,): the next token's
        self.position = len(job.prompt_ids)  # 1-based position of the last token fed
        self.n_reply = 0
        self.rng = np.random.default_rng(job.seed)
        self.decoder = model.tokenizer.decoder(at_start=False)
        self.stops = StopText(job.stop)
        self.pending: int | None = None  # the token chosen, not yet fed

    def step(self) -> Finished | None:
        """The prefill, or the choice of one token (left in `pending`); the reply's `Finished` once
        it is complete."""
        if self.logits is None:
            self.cache = self.model.new_cache()
            self.cache.expect(
                len(self.job.prompt_ids) + self.job.max_tokens
            )  # the prompt and the whole reply
            ids = np.asarray(self.job.prompt_ids, dtype=np.int64).reshape(1, -1)  # (1, ℓ)
            self.fed(self.model.feed(ids, self.cache)[-1])  # the last token's logits
            return None
        job = self.job
        next_id = sample(self.logits, temperature=job.temperature, top_k=job.top_k, top_p=job.top_p,
                         rng=self.rng)  # fmt: skip
        if self.model.tokenizer.is_eog(next_id):
            return self._finish("stop")
        self.n_reply += 1
        text, stopped = self.stops.push(self.decoder.push(next_id))
        if text:
            job.emit(text)
        if stopped:
            return self._finish("stop", flush=False)
        if self.n_reply >= job.max_tokens:
            return self._finish("length")
        self.position += 1
        self.pending = next_id
        return None

    def fed(self, logits: np.ndarray) -> None:
        """The logits (N_V,) of the token just fed (the prompt's last, or `pending`): the next
        token's distribution. Raises ToycardsError where they are not finite."""
        require_finite(logits[None], self.position, self.model.path)
        self.logits, self.pending = logits, None

    def _finish(self, reason: str, flush: bool = True) -> Finished:
        if flush:  # a character split across the last tokens, then text held for a stop string
            tail, stopped = self.stops.push(self.decoder.flush())
            tail += "" if stopped else self.stops.flush()
            reason = "stop" if stopped else reason
            if tail:
                self.job.emit(tail)
        self.cache = None  # its memory goes now, not when the scheduler lets go of the sequence
        return Finished(reason, len(self.job.prompt_ids), self.n_reply)
