"""The `toycards train` command: a card (or a GGUF file to fine-tune) + a text → a trained GGUF file.

Owns: the options, the checks that come before any work (paths, devices; each a one-line error
and exit 1 with nothing written), the rich progress bar (step, loss, tokens/s, time left) or
`--json` lines, Ctrl-C (the step under way finishes, a checkpoint is written, exit 130), and
the summary. OUT is never written over an existing file unless `--force` (refused up front, and
again if a file appears there while training: the checkpoint is then written, so that nothing
trained is lost). Under `torchrun` every process runs this command and rank 0 alone prints and
writes; `--fsdp` shards the model over the processes (torch's FSDP2) instead of copying it into each
(DDP), and is refused without torchrun.
Leaves out: the work (models/start.py, models/train.py, models/save.py).

The checkpoint (`--checkpoint`, default OUT with the suffix .ckpt) is written every
`--save-every` steps and on Ctrl-C; `--resume` continues from it (same card, tokenizer, text
and options, or a one-line error) and ends with the weights an uninterrupted run would have.
A `--checkpoint` path that holds anything but a toycards checkpoint is refused up front (with
`--resume`, reading it says what it is); once OUT is written the checkpoint is removed if this
run wrote it, resumed from it, or it is a checkpoint of this very run, and left alone otherwise.
`--accumulate N` and the number of processes only split each step's `--batch` windows (into N
micro-batches per process); they may differ on resuming.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import click

from toycards.cli.options import threads_option
from toycards.errors import ToycardsError

EXIT_INTERRUPTED = 130  # the shell's convention for a command stopped by Ctrl-C


def _same_file(a: str, b: str | None) -> bool:
    return b is not None and Path(b).exists() and Path(a).resolve() == Path(b).resolve()


def _check_paths(
    source: str, data: str, out: str, tokenizer: str | None, checkpoint: str, force: bool
) -> str:
    """The text of --data; refuses an OUT that is an input, or that exists without `force`, before
    anything is read or written."""
    from toycards.models.save import refuse_existing

    if not out.endswith(".gguf"):
        raise ToycardsError(f"--out {out}: expected a .gguf file name")
    if Path(checkpoint).resolve() == Path(out).resolve():
        raise ToycardsError(f"--checkpoint {checkpoint}: is --out; give each its own file")
    for what, path in (("SOURCE", source), ("--tokenizer", tokenizer), ("--data", data)):
        if _same_file(out, path):
            raise ToycardsError(f"--out {out}: is the {what}; refusing to overwrite it")
        if _same_file(checkpoint, path):
            raise ToycardsError(f"--checkpoint {checkpoint}: is the {what}; refusing to overwrite it")
    if not Path(out).parent.is_dir():
        raise ToycardsError(f"--out {out}: no such folder {Path(out).parent}")
    refuse_existing(out, force, "--force", f"--out {out}")
    if not Path(data).exists():
        raise ToycardsError(f"--data {data}: no such file")
    try:
        return Path(data).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ToycardsError(
            f"--data {data}: cannot read the text ({getattr(e, 'strerror', None) or e})"
        ) from None


class _Progress:
    """The rich progress bar on stderr (rank 0), or one JSON line per step on stdout."""

    def __init__(self, steps: int, first: int, as_json: bool) -> None:
        self.as_json, self.began, self.tokens = as_json, time.perf_counter(), 0
        self.bar = None
        if not as_json:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(
                TextColumn("step"), MofNCompleteColumn(), BarColumn(),
                TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[speed]} tok/s"),
                TextColumn("eta"), TimeRemainingColumn(),
                console=Console(stderr=True), transient=False,
            )  # fmt: skip
            self.task = self.bar.add_task("train", total=steps, completed=first, loss="…", speed="…")
            self.bar.start()

    def __call__(self, event: dict[str, object]) -> None:
        self.tokens += int(event["tokens"])
        speed = self.tokens / max(time.perf_counter() - self.began, 1e-9)
        if self.as_json:
            click.echo(json.dumps({**event, "tokens_per_s": round(speed, 1)}))
            return
        loss = f"{event['loss']:.4f}" + (
            f" (held out {event['eval_loss']:.4f})" if "eval_loss" in event else ""
        )
        self.bar.update(self.task, completed=event["step"], loss=loss, speed=f"{speed:,.0f}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _interruptible(stop: threading.Event):
    """Ctrl-C sets `stop` (the loop finishes its step and writes a checkpoint); the old handler back."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, lambda *_: stop.set())


@click.command("train")
@click.argument("source")
@click.option(
    "--data", "data", required=True, type=click.Path(dir_okay=False), help="The text to train on (UTF-8)."
)
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False), help="The GGUF file to write.")
@click.option("--force", is_flag=True, help="Replace --out if it exists (an input of the run never).")
@click.option(
    "--tokenizer", type=click.Path(dir_okay=False), help="A GGUF file whose vocabulary to use (with a card)."
)
@click.option(
    "--set", "sets", multiple=True, metavar="NAME=VALUE", help="A hyperparameter's value (repeatable)."
)
@click.option("--steps", type=click.IntRange(1), default=200, show_default=True)
@click.option(
    "--batch", type=click.IntRange(1), default=8, show_default=True, help="Windows per step (all processes)."
)
@click.option(
    "--accumulate",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    metavar="N",
    help="Gradient accumulation: N micro-batches per step on each process, of --batch / (processes × N) "
    "windows; the step's gradient is the mean over all of them.",
)
@click.option("--seq", type=click.IntRange(1), default=64, show_default=True, help="Tokens per window.")
@click.option(
    "--lr",
    type=click.FloatRange(0, min_open=True),
    default=3e-3,
    show_default=True,
    help="Peak learning rate.",
)
@click.option(
    "--warmup", type=click.IntRange(0), default=None, help="Warm-up steps [default: a tenth of --steps]."
)
@click.option("--weight-decay", "weight_decay", type=click.FloatRange(0), default=0.0, show_default=True)
@click.option(
    "--grad-clip", "grad_clip", type=click.FloatRange(0), default=1.0, show_default=True, help="0: none."
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--eval-every",
    "eval_every",
    type=click.IntRange(0),
    default=0,
    help="Score the held-out tenth every N steps.",
)
@click.option(
    "--save-every", "save_every", type=click.IntRange(0), default=0, help="Write a checkpoint every N steps."
)
@click.option(
    "--checkpoint", type=click.Path(dir_okay=False), default=None, help="[default: OUT with suffix .ckpt]"
)
@click.option("--resume", is_flag=True, help="Continue from the checkpoint.")
@click.option("--device", type=click.Choice(["cpu", "cuda", "mps"]), default="cpu", show_default=True)
@click.option("--dtype", type=click.Choice(["float32", "bfloat16"]), default="float32", show_default=True)
@click.option(
    "--fsdp",
    is_flag=True,
    help="Under torchrun: shard the parameters, gradients and AdamW's state over the processes "
    "(torch FSDP2) instead of a copy on each (DDP).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON line per step on stdout.")
@threads_option
def train_cmd(source, data, out, tokenizer, sets, steps, batch, accumulate, seq, lr, warmup, weight_decay,
              grad_clip, seed, eval_every, save_every, checkpoint, resume, device, dtype, fsdp,
              as_json, force) -> None:  # fmt: skip
    """Train SOURCE (a card file or card name, or a GGUF file to fine-tune) on the text of --data
    and write --out: a GGUF file that embeds the card with its values.

    Exit status 0 when OUT is written, 1 on a wrong input (nothing written) or an OUT that exists
    (without --force), 130 after Ctrl-C (a checkpoint written: continue with --resume)."""
    checkpoint = checkpoint or str(Path(out).with_suffix(".ckpt"))
    text = _check_paths(source, data, out, tokenizer, checkpoint, force)
    from toycards.models.load import torch_device
    from toycards.models.start import parse_sets

    given = parse_sets(sets)
    training = _training()
    config = training.TrainConfig(
        steps=steps, batch=batch, accumulate=accumulate, seq=seq, lr=lr, warmup=-1 if warmup is None else warmup,
        weight_decay=weight_decay, grad_clip=grad_clip, seed=seed, eval_every=eval_every,
        save_every=save_every, device=device, dtype=dtype, fsdp=fsdp,
    )  # fmt: skip
    torch_device(device, "--device")  # a one-line error before the model is built
    if not resume:  # --resume reads it, and says what it is when it is not a checkpoint
        training.refuse_foreign_checkpoint(checkpoint)
    trainer, begun = _trainer(source, given, tokenizer, config, text, data)
    if resume:
        trainer.resume(checkpoint)
    stop = threading.Event()
    previous = _interruptible(stop)
    rank0 = trainer.world.rank == 0
    progress = _Progress(steps, trainer.step, as_json or not rank0)
    try:
        done = training.run(trainer, progress if rank0 else (lambda _e: None), checkpoint, stop)
    finally:
        progress.close()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if not done:
        if rank0:
            click.echo(
                f"interrupted after step {trainer.step}: wrote {checkpoint} (continue with --resume)",
                err=True,
            )
        sys.exit(EXIT_INTERRUPTED)
    _refuse_out_made_meanwhile(trainer, out, checkpoint, force, rank0)
    held = trainer.eval_loss() if config.eval_every else None  # every process: FSDP's forward gathers
    weights = trainer.full_weights()  # every process: FSDP gathers the shards on rank 0
    if rank0:
        _finish(trainer, begun, weights, held, out, checkpoint, as_json, force)
    trainer.world.barrier()


def _refuse_out_made_meanwhile(trainer, out: str, checkpoint: str, force: bool, rank0: bool) -> None:
    """OUT was absent when training began; where something has been put there since (without
    --force), write the checkpoint (every process takes part) and stop with one line, rather than
    write over it or lose the run."""
    if not trainer.world.any(rank0 and not force and os.path.lexists(out)):
        return
    trainer.save_checkpoint(checkpoint)
    raise ToycardsError(
        f"--out {out}: appeared while training; refusing to overwrite it. Wrote {checkpoint}: "
        "continue with --resume (and --force to replace it)"
    )


def _training():
    """The trainer module (it needs torch, an optional extra)."""
    try:
        from toycards.models import train
    except ImportError:
        raise ToycardsError("training needs PyTorch: pip install 'toycards[torch]'") from None
    return train


def _trainer(source, given, tokenizer, config, text, data):
    from toycards.lang.printer import render_card
    from toycards.models.start import start

    training = _training()

    world = training.World.from_env(config.device, config.fsdp)
    begun = start(source, given, tokenizer, config.seed)
    training.fits_context(begun.model.hp, config.seq)
    tokens = training.token_data(text, begun.tokenizer, config, f"--data {data}")
    fingerprint = {"card": render_card(begun.card), "tokenizer": training.vocabulary_digest(begun.tokenizer)}
    return training.Trainer(begun.model, config, tokens, fingerprint, world), begun


def _finish(trainer, begun, weights, held: float | None, out: str, checkpoint: str, as_json: bool,
            force: bool) -> None:  # fmt: skip
    """Write OUT from the whole model's `weights` (gathered on rank 0), remove this run's
    checkpoint (and nothing else: `Trainer.discard_checkpoint`), sum up."""
    from toycards.models.save import save

    path = save(
        trainer.model, out, tokenizer=begun.tokenizer_path, arch=begun.arch, weights=weights, force=force
    )
    trainer.discard_checkpoint(checkpoint)
    losses = trainer.losses
    summary = {
        "done": True, "steps": trainer.step, "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None, "eval_loss": held, "out": str(path),
        "bytes": path.stat().st_size,
    }  # fmt: skip
    if as_json:
        click.echo(json.dumps(summary))
        return
    first = f"{losses[0]:.4f} → " if losses else ""
    held_text = f", held out {held:.4f}" if held is not None else ""
    size = path.stat().st_size / 1024
    click.echo(
        f"trained {trainer.step} steps: loss {first}{losses[-1]:.4f}{held_text}; wrote {out} ({size:.0f} KiB)",
        err=True,
    )
