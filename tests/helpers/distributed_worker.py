"""The runs tests/models/test_train_distributed.py compares, made in one `torchrun` launch (it costs tens
of seconds to start two processes that import torch; the runs themselves take a few).

    torchrun --standalone --nproc-per-node 2 tests/helpers/distributed_worker.py FOLDER DATA

Each process runs, in order, with the options COMMON (held-out scoring and checkpoints
included, so that FSDP's gathering forward passes and state dicts run mid-training too):
1. `toycards train … --out FOLDER/ddp.gguf` (DistributedDataParallel);
2. `toycards train … --fsdp --out FOLDER/fsdp.gguf` (FSDP2, the model sharded over the two);
3. `toycards train … --fsdp --accumulate 2 --out FOLDER/fsdp-accumulate.gguf`;
4. the same as 2 through the command's own pieces, stopped after step STOP (a checkpoint,
   FOLDER/stopped.ckpt, kept), resumed by a fresh trainer to the end, and written to
   FOLDER/resumed.gguf; the in-memory sharded model's logits on a few ids are compared with
   those of the model loaded from that file.
Rank 0 writes FOLDER/NAME.jsonl (each command's stdout) and FOLDER/result.json: where the
resumed run started, its loss curve, and the largest |Δ| of the logits.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import torch
from click.testing import CliRunner
from test_train import LLAMA, TOKENIZER, counting_text

from toycards.cli import main

STEPS, STOP, EVERY = 20, 10, 10
COMMON = ["train", "llama", "--tokenizer", TOKENIZER, *LLAMA, "--steps", STEPS, "--batch", 8,
          "--seq", 16, "--lr", 1e-2, "--seed", 5, "--eval-every", EVERY, "--save-every", EVERY,
          "--json"]  # fmt: skip
RUNS = {"ddp": [], "fsdp": ["--fsdp"], "fsdp-accumulate": ["--fsdp", "--accumulate", 2]}


def command(*args) -> str:
    """`toycards …` in this process; its stdout (a failure's output goes to stderr, exit 1)."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    if result.exit_code != 0:
        sys.exit(f"{args}: exit {result.exit_code}\n{result.output}{result.exception!r}")
    return result.stdout


def stopped_and_resumed(folder: Path, data: Path) -> dict[str, object]:
    """Step 4 of the module docstring."""
    import toycards
    from toycards.cli.train import _trainer
    from toycards.models import train as training
    from toycards.models.save import save
    from toycards.models.start import parse_sets

    config = training.TrainConfig(steps=STEPS, batch=8, seq=16, lr=1e-2, seed=5, eval_every=EVERY,
                                  save_every=EVERY, fsdp=True)  # fmt: skip
    given = parse_sets([LLAMA[i + 1] for i in range(0, len(LLAMA), 2)])
    text, ckpt = data.read_text(encoding="utf-8"), str(folder / "stopped.ckpt")
    part, _ = _trainer("llama", given, str(TOKENIZER), config, text, str(data))
    stop = threading.Event()
    assert not training.run(part, lambda e: e["step"] == STOP and stop.set(), ckpt, stop)
    trainer, begun = _trainer("llama", given, str(TOKENIZER), config, text, str(data))
    trainer.resume(ckpt)
    first = trainer.step
    assert training.run(trainer, lambda e: None, str(folder / "unused.ckpt"))
    ids = torch.as_tensor(begun.tokenizer.encode(counting_text(4, seed=9), add_bos=False)).reshape(1, -1)
    with torch.no_grad():
        in_memory = trainer.model(ids)[0]  # [ℓ, N_V]: every process runs it (FSDP gathers)
    weights = trainer.full_weights()
    if trainer.world.rank != 0:
        return {}
    out = save(trainer.model, folder / "resumed.gguf", tokenizer=begun.tokenizer_path, arch=begun.arch,
               weights=weights)  # fmt: skip
    with torch.no_grad():
        from_file = toycards.load(out, target="torch")(ids)[0]  # [ℓ, N_V]
    gap = float((from_file - in_memory).abs().max())
    return {"resumed_from": first, "losses": trainer.losses, "logits_gap": gap}


def main_worker(folder: Path, data: Path) -> None:
    import torch.distributed as dist

    stdout = {name: command(*COMMON, "--data", data, "--out", folder / f"{name}.gguf", *extra)
              for name, extra in RUNS.items()}  # fmt: skip
    result = stopped_and_resumed(folder, data)
    if dist.get_rank() == 0:
        for name, text in stdout.items():
            (folder / f"{name}.jsonl").write_text(text, encoding="utf-8")
        (folder / "result.json").write_text(json.dumps(result), encoding="utf-8")
    # both ranks reach here before either tears gloo down: a rank destroying its group while the
    # other still holds the connection aborted once ("terminate called without an active exception")
    dist.barrier()
    dist.destroy_process_group()
    # then neither runs the interpreter's exit: with the same message a rank aborted once more in
    # CI (where, its log does not say); past the barrier every result is written, and what is left
    # is the exit's static destructors, which tear gloo's threads down
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main_worker(Path(sys.argv[1]), Path(sys.argv[2]))
