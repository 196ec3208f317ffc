"""The one thread that runs the model for every request, and the queue in front of it.

Owns: `Job` (a request between the event loop and that thread: what to generate, and an asyncio
queue of the events coming back, put there with `call_soon_threadsafe`) and `Scheduler`: requests
wait in arrival order (at most `max_waiting`; one more is a 503); at most `parallel` are generated
at once, in turns: each sequence takes one step (a prefill, or the choice of one token), then the
chosen tokens of every sequence go through the model together, one forward pass over rows at
their own positions (`ModelAPI.step`), which reads the weights once for all of them. A short
request is not held behind a long one, every reply streams as it is made, and a cancelled job
(its client went away) leaves at its next turn. Leaves out: one request's steps (sequence.py),
HTTP (app.py).

The model is not thread-safe: only this thread calls it. Each sequence keeps its own KV cache and
random stream, so a reply is the one the request gets alone (to float32 rounding where the batch's
products sum in another order: `ModelAPI.step` says where).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque

import numpy as np

from toycards.errors import ToycardsError
from toycards.serve.protocol import ApiError, Request
from toycards.serve.sequence import Failed, Sequence

log = logging.getLogger("toycards.serve")


def _shutting_down() -> ApiError:
    return ApiError(503, "the server is shutting down", "server_error", code="shutting_down")


class Job:
    """One request: its prompt ids, reply cap and sampling options, and `events` (text pieces, then
    a `Finished` or a `Failed`), read on the event loop `loop`."""

    def __init__(self, request: Request, prompt_ids: list[int], max_tokens: int, loop) -> None:
        self.prompt_ids, self.max_tokens = prompt_ids, max_tokens
        self.temperature, self.top_p, self.top_k = request.temperature, request.top_p, request.top_k
        self.seed, self.stop = request.seed, request.stop
        self.events: asyncio.Queue = asyncio.Queue()
        self.cancelled = False  # set on the event loop, read by the generating thread
        self._loop = loop

    def emit(self, event) -> None:
        """From the generating thread: hand `event` to the event loop (a closed loop cancels the job)."""
        try:
            self._loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:
            self.cancelled = True

    def cancel(self) -> None:
        self.cancelled = True


class Scheduler:
    """Queue jobs (`submit`), generate them on a thread of their own (`start`), and stop
    (`stop_admitting`: new and waiting jobs get a 503, running ones finish; `close`: all stop)."""

    def __init__(self, model, parallel: int = 4, max_waiting: int = 64) -> None:
        self.model, self.parallel, self.max_waiting = model, parallel, max_waiting
        self._waiting: deque[Job] = deque()
        self._running = 0
        self._counts = {"finished": 0, "cancelled": 0, "failed": 0}
        self._admitting, self._closed = True, False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._work, name="toycards-generate", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> None:
        """Queue `job`, or raise a 503 ApiError (shutting down, or too many waiting)."""
        with self._cond:
            if not self._admitting:
                raise _shutting_down()
            if len(self._waiting) >= self.max_waiting:
                raise ApiError(
                    503, f"the server is busy ({len(self._waiting)} requests are waiting); try again later",
                    "server_error", code="server_busy",
                )  # fmt: skip
            self._waiting.append(job)
            self._cond.notify()

    def stats(self) -> dict:
        """How many jobs are generating and waiting now, how many ended each way since start, and
        whether the replies' tokens go through the model together (`batched`; else
        `alone_because` says why each takes its step alone: `ModelAPI.rows_why`)."""
        alone = self.model.rows_why
        with self._cond:
            counts = {"generating": self._running, "waiting": len(self._waiting), **self._counts}
        return {**counts, "batched": not alone, **({"alone_because": alone} if alone else {})}

    def stop_admitting(self) -> None:
        """Refuse new jobs and answer the waiting ones with a 503; running jobs go on to their end."""
        with self._cond:
            self._admitting = False
            refused = list(self._waiting)
            self._waiting.clear()
        for job in refused:
            job.emit(Failed(_shutting_down()))

    def close(self, timeout: float = 10.0) -> None:
        """Stop admitting, cancel every running job, and wait up to `timeout` s for the thread to end
        (it ends after the step it is in)."""
        self.stop_admitting()
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _work(self) -> None:
        active: list[Sequence] = []
        with np.errstate(all="ignore"):  # non-finite logits end a reply with an error, not warnings
            while True:
                with self._cond:
                    while not self._closed and not active and not self._waiting:
                        self._cond.wait()
                    if self._closed:
                        break
                    while self._waiting and len(active) < self.parallel:
                        active.append(Sequence(self.model, self._waiting.popleft()))
                    self._running = len(active)
                active = [seq for seq in active if self._advance(seq)]
                pending = [seq for seq in active if seq.pending is not None]
                if pending:
                    done = self._feed(pending)
                    active = [seq for seq in active if id(seq) not in done]
        for seq in active:
            seq.job.emit(Failed(_shutting_down()))

    def _advance(self, seq: Sequence) -> bool:
        """One step of `seq`; False once it has ended (finished, cancelled or failed)."""
        if seq.job.cancelled:
            return self._ended(seq, "cancelled")
        try:
            finished = seq.step()
        except Exception as e:  # noqa: BLE001 - non-finite logits, a weights file changed on disk, a
            return self._failed(seq, e)  # bug: each ends its request, not the server
        return finished is None or self._ended(seq, "finished", finished)

    def _feed(self, seqs: list[Sequence]) -> set[int]:
        """Every sequence's pending token through the model at once; the ids of those that failed."""
        said = bool(self.model.rows_why)
        try:
            logits = self.model.step([seq.pending for seq in seqs], [seq.cache for seq in seqs])
        except Exception as e:  # noqa: BLE001 - as _advance: the requests end, the server goes on
            for seq in seqs:
                self._failed(seq, e)
            return {id(seq) for seq in seqs}
        if self.model.rows_why and not said:  # once, when the model first refuses a shared pass
            log.warning("replies take their decoding steps one at a time: %s", self.model.rows_why)
        done = set()
        for seq, row in zip(seqs, logits, strict=True):
            try:
                seq.fed(row)
            except ToycardsError as e:  # this sequence's logits are not finite
                self._failed(seq, e)
                done.add(id(seq))
        return done

    def _failed(self, seq: Sequence, e: Exception) -> bool:
        """End `seq` with the error `e` as `_advance` does (a ToycardsError says what; anything else is a
        bug, logged); False."""
        if isinstance(e, ToycardsError):
            return self._ended(seq, "failed", Failed(ApiError(500, str(e), "server_error")))
        log.error("generation failed", exc_info=e)
        return self._ended(
            seq, "failed", Failed(ApiError(500, f"internal error: {type(e).__name__}", "server_error"))
        )

    def _ended(self, seq: Sequence, how: str, event=None) -> bool:
        """Count `seq` as ended `how`, then send its last event: a client that has its reply sees
        it counted (`stats`)."""
        with self._cond:
            self._counts[how] += 1
            self._running -= 1
        if event is not None:
            seq.job.emit(event)
        return False
