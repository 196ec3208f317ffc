"""Training a torch model built from a card: data, schedule, optimizer, checkpoints, processes.

Owns: the text as token ids with a held-out tail (`TokenData`), which windows each step trains
on (drawn from the seed and the step number alone, so that a resumed run and a run split over
processes see the same ones), the learning-rate schedule (linear warm-up, cosine decay to a
tenth), AdamW with decay on matrices only, gradient clipping, gradient accumulation, bfloat16
autocast, and checkpoints (weights, optimizer state, step, and a fingerprint of everything that
must match to resume). Under `torchrun` each process trains on its share of every step's
windows; rank 0 alone reports and writes. Leaves out: how the model is spread over processes
(parallel.py: DDP, or FSDP's shards), where the model comes from (start.py), writing the GGUF
file (save.py), the progress bar and signals (cli/train.py).

One step's windows: `batch` starts drawn uniformly from the training tokens by
`numpy.random.default_rng([seed, step])`; process r of W takes the r-th of W equal slices and
cuts it into `accumulate` (A) micro-batches of b = batch / (W·A) windows, in order. So micro-batch
m of rank r holds the step's windows (r·A + m)·b up to (r·A + m + 1)·b: one process with A = 2
sees the very windows that two processes with A = 1 see, in the same order. Held-out scoring
goes b windows at a time, on every process.

One step's gradient, as the arithmetic goes: each micro-batch's loss (the mean cross-entropy over
its b·seq tokens) is divided by A before `backward`, which adds its gradient into `.grad`; under
DDP the first A − 1 backward passes run in `no_sync()` and the last one hands `.grad` to DDP's
reducer, which multiplies it by 1/W (while copying it into its bucket; the default, no comm
hook) and all-reduces the buckets by summing. With one of W or A equal to 2 and the other to 1,
both come to fl(g₁/2 + g₂/2) from the same g₁ and g₂: halving is exact in float32 (scaling a
backward pass by a power of two scales every product and sum in it exactly, barring underflow),
and a sum of two is commutative. So `--accumulate 2` on one process and two processes write the same bytes;
tests/models/test_train.py checks the halving and the sum, tests/models/test_train_distributed.py the files.
Other splits agree with one another up to float32 rounding (1/3 is not exact; sums of more than
two terms associate differently).

With `--fsdp` the gradients are reduce-scattered rather than all-reduced (and the first A − 1
backward passes run with `set_requires_gradient_sync(False)`): the same mean, summed in
another order, so the run agrees with DDP's up to float32 rounding.

The loss reported for a step: the micro-batches' losses (float32, as Python floats) summed on
each process, those sums summed over the processes (float64), divided by W·A.

A checkpoint holds the whole model and AdamW's state keyed by parameter name (parallel.py's
`full_state`, gathered on rank 0 under FSDP), so that any spread of the processes resumes it.
A checkpoint path that holds anything but a toycards checkpoint is never written over; at the
end of a run the checkpoint is removed only when it is the file this run wrote or resumed from,
or a checkpoint of this very run (what a checkpoint file is, and telling one from anything else:
checkpoint.py).
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from toycards.errors import ToycardsError
from toycards.fileio import atomic_output
from toycards.models.checkpoint import (
    CHECKPOINT_FORMAT,
    file_id,
    inspect_checkpoint,
    read_checkpoint,
    refuse_foreign_checkpoint,
    torch_save,
    unfit_weights,
)
from toycards.models.parallel import World, full_state, load_full_state, spread, synced

EVAL_WINDOWS = 64  # held-out windows scored at each evaluation (non-overlapping, from the start)


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 200  # optimizer steps
    batch: int = 8  # windows per step, over all processes
    accumulate: int = (
        1  # micro-batches per step on each process: batch / (processes · accumulate) windows each
    )
    seq: int = 64  # tokens per window the model reads (it predicts the next `seq`)
    lr: float = 3e-3  # peak learning rate, reached after warm-up
    warmup: int = -1  # warm-up steps, linear from lr/warmup; -1: a tenth of the steps
    min_lr_ratio: float = 0.1  # the cosine decays to lr · min_lr_ratio at the last step
    weight_decay: float = 0.0  # AdamW's decoupled decay, on matrices only
    grad_clip: float = 1.0  # max global gradient norm; 0: no clipping
    seed: int = 0
    held_out: float = 0.1  # fraction of the tokens held out when evaluating
    eval_every: int = 0  # steps between evaluations on the held-out tokens; 0: none
    save_every: int = 0  # steps between checkpoints; 0: only on interruption
    device: str = "cpu"
    dtype: str = "float32"  # or "bfloat16": autocast for the forward pass, float32 weights
    fsdp: bool = False  # under torchrun: shard the model over the processes (FSDP2), not replicate it

    def warmup_steps(self) -> int:
        return self.steps // 10 if self.warmup < 0 else self.warmup

    def lr_at(self, step: int) -> float:
        """Learning rate of step `step` (1-based): linear warm-up, then cosine to lr · min_lr_ratio."""
        w = self.warmup_steps()
        if step <= w:
            return self.lr * step / w
        progress = (step - w) / max(1, self.steps - w)
        low = self.lr * self.min_lr_ratio
        return low + 0.5 * (self.lr - low) * (1 + math.cos(math.pi * min(1.0, progress)))

    def resumable(self) -> dict[str, object]:
        """What a checkpoint must agree with to be resumed: not the cadence of evals and saves, nor
        `accumulate` (like the number of processes, it splits a step's windows, not changes them)."""
        keep = ("steps", "batch", "seq", "lr", "warmup", "min_lr_ratio", "weight_decay", "grad_clip",
                "seed", "held_out", "dtype")  # fmt: skip
        return {k: v for k, v in asdict(self).items() if k in keep}


def fits_context(hyper: dict[str, object], seq: int) -> None:
    """A window longer than the card's context (`ℓ_max`, learned positions) is refused."""
    ell_max = hyper.get("ℓ_max")
    if isinstance(ell_max, int) and seq > ell_max:
        raise ToycardsError(f"--seq {seq} is longer than the card's context ℓ_max = {ell_max}")


def vocabulary_digest(tokenizer) -> str:
    """A digest of a tokenizer's tokens, so that a checkpoint knows its vocabulary."""
    return hashlib.sha256("\n".join(tokenizer.tokens).encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class TokenData:
    """The text's token ids: the training part and, when evaluating, the held-out tail."""

    train: np.ndarray  # int64 [n]
    held_out: np.ndarray | None  # int64 [m], or None
    digest: str  # of all the ids, so that a checkpoint knows its text


def token_data(text: str, tokenizer, config: TrainConfig, where: str) -> TokenData:
    """Encode `text` (no BOS: one stream of tokens) and split off the held-out tail; a text too
    short for `--seq` is one line naming what it needs."""
    if not text.strip():
        raise ToycardsError(f"{where}: the text is empty")
    ids = np.asarray(tokenizer.encode(text, add_bos=False, add_eos=False), dtype=np.int64)
    need, held = config.seq + 1, None
    n_held = max(need, int(len(ids) * config.held_out)) if config.eval_every else 0
    if len(ids) - n_held < need:
        also = f" plus {n_held} held out for --eval-every" if n_held else ""
        raise ToycardsError(
            f"{where}: the text is {len(ids)} tokens; --seq {config.seq} needs at least {need} to train on{also}"
        )
    if n_held:
        ids, held = ids[:-n_held], ids[-n_held:]
    digest = hashlib.sha256(ids.tobytes() + (held.tobytes() if held is not None else b"")).hexdigest()
    return TokenData(ids, held, digest)


def window_starts(config: TrainConfig, step: int, n_tokens: int) -> np.ndarray:
    """The `batch` window starts of step `step` (1-based), from the seed and the step alone."""
    rng = np.random.default_rng([config.seed, step])
    return rng.integers(0, n_tokens - config.seq, size=config.batch)  # [batch]


def windows(ids: np.ndarray, starts: np.ndarray, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-token targets, each [len(starts), seq]."""
    rows = np.stack([ids[s : s + seq + 1] for s in starts])  # [b, seq + 1]
    return torch.from_numpy(rows[:, :-1]), torch.from_numpy(rows[:, 1:])


def micro_batch(config: TrainConfig, processes: int) -> int:
    """Windows per micro-batch: `batch` / (processes · accumulate), or a one-line error.

    >>> micro_batch(TrainConfig(batch=8, accumulate=2), 2)
    2
    """
    parts = processes * config.accumulate
    if config.accumulate < 1 or config.batch % parts:
        among = f" on each of {processes} processes" if processes > 1 else ""
        raise ToycardsError(
            f"--batch {config.batch} does not divide into {parts} equal micro-batches "
            f"(--accumulate {config.accumulate}{among})"
        )
    return config.batch // parts


def freeze_constants(model) -> None:
    """Parameters with a constant fallback (`ρ from "rope_freqs.weight" or 1`) are fixed factors,
    not weights: they are not trained."""
    for p in model.bound.params:
        sources = p.decl.binding.sources if p.decl.binding else ()
        alts = sources[min(p.decl.names.index(p.name), len(sources) - 1)] if sources else ()
        if any(s.const for s in alts) and p.key in model.w:
            model.w[p.key].requires_grad_(False)


@dataclass
class Trainer:
    """One run's model, optimizer and position; `step` counts the optimizer steps taken."""

    model: torch.nn.Module
    config: TrainConfig
    data: TokenData
    fingerprint: dict[str, object]  # card text and tokenizer: must match to resume
    world: World = field(default_factory=World)
    step: int = 0
    losses: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.micro = micro_batch(self.config, self.world.size)  # windows per micro-batch
        self._checkpoint_file = None  # `_file_id` of the checkpoint last written or resumed from
        if getattr(self.model, "bound", None) is not None:
            freeze_constants(self.model)  # fixed factors such as rope_freqs are not weights
        self.model.to(self.config.device)
        self.net = spread(self.model, self.world, self.config.fsdp, self.config.device)
        trained = [p for p in dict.fromkeys(self.model.parameters()) if p.requires_grad]  # shards under FSDP
        groups = [
            {"params": [p for p in trained if p.dim() >= 2], "weight_decay": self.config.weight_decay},
            {"params": [p for p in trained if p.dim() < 2], "weight_decay": 0.0},
        ]
        self.optimizer = torch.optim.AdamW(groups, lr=self.config.lr, betas=(0.9, 0.95), eps=1e-8)

    def _loss(self, net, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        device = self.config.device
        x, y = x.to(device), y.to(device)
        autocast = torch.autocast(
            device.split(":")[0], torch.bfloat16, enabled=self.config.dtype == "bfloat16"
        )
        with autocast:
            logits = net(x)  # [b, seq, N_V]
        return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten())

    def _synced(self, last: bool):
        """The gradients are reduced over the processes on the last micro-batch's backward pass only."""
        return synced(self.net, self.world, self.config.fsdp, last)

    def accumulate_gradient(self, step: int) -> float:
        """Set `.grad` to the gradient of step `step`'s mean loss (over every process's windows,
        under DDP); return the sum of this process's micro-batch losses."""
        c, w, b = self.config, self.world, self.micro
        starts = window_starts(c, step, len(self.data.train))  # [batch]
        mine = starts[w.rank * c.accumulate * b : (w.rank + 1) * c.accumulate * b]  # [A·b]
        self.net.train()
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for m in range(c.accumulate):
            x, y = windows(self.data.train, mine[m * b : (m + 1) * b], c.seq)  # [b, seq] each
            with self._synced(last=m == c.accumulate - 1):
                loss = self._loss(self.net, x, y)
                (loss / c.accumulate).backward()  # .grad += ∇(loss / A)
            total += loss.item()
        return total

    def train_step(self) -> float:
        """Take the next step; the mean loss over all of its windows (every process's)."""
        c, w = self.config, self.world
        self.step += 1
        total = self.accumulate_gradient(self.step)
        if c.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_clip)
        for group in self.optimizer.param_groups:
            group["lr"] = c.lr_at(self.step)
        self.optimizer.step()
        value = w.sum(total) / (w.size * c.accumulate)  # the mean of all W·A micro-batch losses
        self.losses.append(value)
        return value

    @torch.no_grad()
    def eval_loss(self) -> float:
        """Mean loss on up to EVAL_WINDOWS non-overlapping held-out windows (the same on every
        process, which all call this: FSDP's forward pass gathers), a micro-batch at a time."""
        held, seq, b = self.data.held_out, self.config.seq, self.micro
        assert held is not None, "eval_loss needs a held-out split (eval_every > 0)"
        starts = np.arange(0, len(held) - seq, seq)[:EVAL_WINDOWS]
        self.model.eval()
        total = 0.0
        for i in range(0, len(starts), b):
            x, y = windows(held, starts[i : i + b], seq)  # [≤ b, seq] each
            total += self._loss(self.model, x, y).item() * len(x)
        return total / len(starts)

    # ── checkpoints ──────────────────────────────────────────────────────────────────────
    def _identity(self) -> dict[str, object]:
        return {**self.fingerprint, **self.config.resumable(), "data": self.data.digest}

    def full_weights(self) -> dict[str, torch.Tensor]:
        """The whole model's tensors by GGUF name on the CPU, on rank 0 (every process calls this)."""
        from toycards.runtime.torch.model import gguf_name

        return {gguf_name(k): v for k, v in full_state(self.model)[0].items()}

    def save_checkpoint(self, path: str) -> None:
        """Weights, optimizer state, step and identity, gathered (every process calls this) and
        written atomically by rank 0; over a file that is not a toycards checkpoint, refused."""
        weights, optimizer_state = full_state(self.model, self.optimizer)
        if self.world.rank == 0:
            if file_id(path) not in (None, self._checkpoint_file):
                refuse_foreign_checkpoint(path)
            state = {
                "format": CHECKPOINT_FORMAT,
                "step": self.step,
                "losses": list(self.losses),
                "identity": self._identity(),
                "model": weights,
                "optimizer": optimizer_state,
            }
            with atomic_output(path) as part, open(part, "wb") as f:
                torch_save(state, f)
            self._checkpoint_file = file_id(path)
        self.world.barrier()

    def resume(self, path: str) -> None:
        """Continue from a checkpoint made by the same card, tokenizer, text and options."""
        if not os.path.isfile(path):
            raise ToycardsError(f"--resume: no checkpoint {path}")
        state = read_checkpoint(path)
        was = self._differs(state["identity"])
        if was:
            raise ToycardsError(f"--resume: the checkpoint {path} was made with {was}")
        unfit = unfit_weights(self.model, state["model"])
        if unfit:
            raise ToycardsError(f"{path}: a damaged {CHECKPOINT_FORMAT} file: {unfit}")
        try:
            load_full_state(self.model, self.optimizer, state["model"], state["optimizer"])
        except (KeyError, ValueError, RuntimeError) as e:  # the weights fit; AdamW's state does not
            detail = " ".join(str(e).split())[:200] or type(e).__name__
            raise ToycardsError(
                f"{path}: a damaged {CHECKPOINT_FORMAT} file: its optimizer state ({detail})"
            ) from None
        self.step, self.losses = int(state["step"]), [float(v) for v in state["losses"]]
        self._checkpoint_file = file_id(path)

    def _differs(self, theirs: dict) -> str | None:
        """What a checkpoint's identity says that this run's does not ("another text",
        "steps = 12, not 13"), or None when it is this run's."""
        for key, value in self._identity().items():
            if theirs.get(key) != value:
                what = {"card": "another card", "tokenizer": "another vocabulary", "data": "another text"}
                return what.get(key) or f"{key} = {theirs.get(key)!r}, not {value!r}"
        return None

    def discard_checkpoint(self, path: str) -> bool:
        """Remove the checkpoint at `path` once the run is done, if it is the file this trainer
        wrote or resumed from (the same inode, size and time) or a checkpoint of this very run
        (its identity is this run's); anything else stays. Whether it was removed."""
        found = file_id(path)
        if found is None:
            return False
        ours = found == self._checkpoint_file
        if not ours:
            state, problem = inspect_checkpoint(path, peek=True)
            ours = problem is None and self._differs(state["identity"]) is None
            del state  # peeking maps the file: let go of it before removing it
        if ours and file_id(path) == found:
            os.unlink(os.path.realpath(path))  # the file atomic_output wrote, not a link to it
            return True
        return False


Report = Callable[[dict[str, object]], None]


def run(trainer: Trainer, report: Report, checkpoint: str, stop: threading.Event | None = None) -> bool:
    """Train to `config.steps`; `report` gets one dict per step on rank 0 (step, loss, lr, tokens,
    seconds, and eval_loss on evaluation steps). When `stop` is set (Ctrl-C), the step under way
    finishes, a checkpoint is written and False is returned; True when all steps are done."""
    c = trainer.config
    stop = stop or threading.Event()
    while trainer.step < c.steps:
        began = time.perf_counter()
        loss = trainer.train_step()
        event: dict[str, object] = {"step": trainer.step, "loss": loss, "lr": c.lr_at(trainer.step)}
        event |= {"tokens": c.batch * c.seq, "seconds": time.perf_counter() - began}
        if c.eval_every and (trainer.step % c.eval_every == 0 or trainer.step == c.steps):
            event["eval_loss"] = trainer.eval_loss()
        if trainer.world.rank == 0:
            report(event)
        if trainer.world.any(stop.is_set()) and trainer.step < c.steps:
            trainer.save_checkpoint(checkpoint)
            return False
        if c.save_every and trainer.step % c.save_every == 0 and trainer.step < c.steps:
            trainer.save_checkpoint(checkpoint)
    return True
