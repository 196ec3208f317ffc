"""`toycards train` under `torchrun --nproc-per-node 2`, over gloo on CPU: DDP and FSDP.

DistributedDataParallel: each of the two processes trains on half of every step's windows. DDP's
reducer multiplies each process's gradient by ½ and sums the two; one process with
`--accumulate 2` takes the same two halves of the windows, in the same order, and adds their
gradients, each of a loss divided by 2. Halving is exact in float32 and a sum of two is
commutative, so the two runs do the same arithmetic: the same loss curve, exactly, and the same
file, byte for byte. One process with the same `--batch` and no accumulation sums over all
windows in one backward pass, in another order: its loss curve and weights agree up to float32
rounding, and the file's metadata, card and tensor names and shapes are the same.

`--fsdp` (torch's FSDP2, the model sharded over the two processes): the same mean gradient,
reduce-scattered instead of all-reduced, so its loss curve and weights are DDP's up to float32
rounding (with `--accumulate 2` too); the file it writes from the gathered weights gives the
in-memory sharded model's logits exactly; a run stopped at step 10 and resumed from its
checkpoint writes the uninterrupted run's file byte for byte; and one process resumes that
checkpoint (the whole model and AdamW's state) to DDP's weights up to float32 rounding.

The runs on two processes are made in one torchrun launch (tests/helpers/distributed_worker.py), since
starting two processes that import torch takes most of this test's time. Rank 0 alone prints and
writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from click.testing import CliRunner
from distributed_worker import COMMON, STEPS, STOP
from test_train import counting_text

from toycards.cli import main

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """A folder with the worker's files: NAME.gguf and NAME.jsonl for ddp, fsdp, fsdp-accumulate;
    resumed.gguf, stopped.ckpt and result.json (tests/helpers/distributed_worker.py), and count.txt."""
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("this torch has no gloo backend")
    folder = tmp_path_factory.mktemp("distributed")
    (folder / "count.txt").write_text(counting_text(), encoding="utf-8")
    tests = [p for p in sys.path if p.startswith(str(ROOT / "tests"))]  # the folders conftest.py adds
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *tests]), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           ROOT / "tests" / "helpers" / "distributed_worker.py", folder, folder / "count.txt"]  # fmt: skip
    proc = subprocess.run([str(a) for a in cmd], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder


def cli(*args) -> object:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def curve(stdout: str) -> list[float]:
    return [e["loss"] for e in map(json.loads, stdout.splitlines()) if "step" in e]


def worst_gap(a: list[float], b: list[float]) -> str:
    gaps = [abs(p - q) for p, q in zip(a, b, strict=True)]
    return f"worst |Δ| {max(gaps):.3g} at step {gaps.index(max(gaps)) + 1}"


def assert_same_file_but_rounding(a_path: Path, b_path: Path) -> None:
    """The same metadata (card, keys, vocabulary) and tensor names and shapes; weights within
    float32 noise."""
    a, b = gguf.GGUFReader(a_path), gguf.GGUFReader(b_path)
    assert {k: f.contents() for k, f in a.fields.items() if not k.startswith("GGUF.")} == {
        k: f.contents() for k, f in b.fields.items() if not k.startswith("GGUF.")
    }
    assert [(t.name, tuple(t.shape)) for t in a.tensors] == [(t.name, tuple(t.shape)) for t in b.tensors]
    gaps = {
        x.name: float(np.abs(np.asarray(x.data) - np.asarray(y.data)).max())
        for x, y in zip(a.tensors, b.tensors)
    }
    name = max(gaps, key=gaps.get)
    assert gaps[name] <= 1e-4, f"weights differ by {gaps[name]:.3g} ({name})"


def test_two_gloo_processes_train_like_one_accumulating_two_halves(runs, tmp_path):
    common = [*COMMON, "--data", runs / "count.txt"]
    one, accumulated = tmp_path / "one.gguf", tmp_path / "accumulated.gguf"
    single = cli(*common, "--out", one)
    halves = cli(*common, "--accumulate", 2, "--out", accumulated)
    two = runs / "ddp.gguf"
    losses_two = curve((runs / "ddp.jsonl").read_text(encoding="utf-8"))
    losses_one, losses_halves = curve(single.stdout), curve(halves.stdout)
    assert len(losses_two) == STEPS, "rank 0 alone reports: one line per step"
    assert losses_one[-1] < losses_one[0] - 2
    assert losses_two == losses_halves, worst_gap(losses_two, losses_halves)
    assert two.read_bytes() == accumulated.read_bytes(), "two processes and --accumulate 2: the same bits"
    np.testing.assert_allclose(losses_two, losses_one, rtol=0, atol=1e-5)
    assert_same_file_but_rounding(one, two)


def test_fsdp_trains_like_ddp_and_writes_the_sharded_models_weights(runs):
    ddp = curve((runs / "ddp.jsonl").read_text(encoding="utf-8"))
    for name in ("fsdp", "fsdp-accumulate"):
        losses = curve((runs / f"{name}.jsonl").read_text(encoding="utf-8"))
        assert len(losses) == STEPS and losses[-1] < losses[0] - 2
        np.testing.assert_allclose(
            losses, ddp, rtol=0, atol=1e-5, err_msg=f"{name}: {worst_gap(losses, ddp)}"
        )
        assert_same_file_but_rounding(runs / "ddp.gguf", runs / f"{name}.gguf")
    result = json.loads((runs / "result.json").read_text(encoding="utf-8"))
    assert result["logits_gap"] == 0, "the file's logits are the in-memory sharded model's, exactly"
    fsdp = curve((runs / "fsdp.jsonl").read_text(encoding="utf-8"))
    assert result["resumed_from"] == STOP and result["losses"] == fsdp
    assert (runs / "resumed.gguf").read_bytes() == (runs / "fsdp.gguf").read_bytes(), (
        "stopped, checkpointed and resumed under FSDP: the uninterrupted run's bytes"
    )


def test_one_process_resumes_an_fsdp_checkpoint(runs, tmp_path):
    """The checkpoint holds the whole model and AdamW's state (gathered), not a shard."""
    out = tmp_path / "resumed-alone.gguf"
    resumed = cli(*COMMON, "--data", runs / "count.txt", "--out", out, "--checkpoint", runs / "stopped.ckpt",
                  "--resume")  # fmt: skip
    assert [e["step"] for e in map(json.loads, resumed.stdout.splitlines()) if "step" in e][0] == STOP + 1
    assert_same_file_but_rounding(runs / "fsdp.gguf", out)
