"""`torchrun --nproc-per-node 2 -m toycards train …`: DistributedDataParallel over gloo on CPU.

Each of the two processes trains on half of every step's windows. DDP's reducer multiplies each
process's gradient by ½ and sums the two; one process with `--accumulate 2` takes the same two
halves of the windows, in the same order, and adds their gradients, each of a loss divided by 2.
Halving is exact in float32 and a sum of two is commutative, so the two runs do the same
arithmetic: the same loss curve, exactly, and the same file, byte for byte. One process with the
same `--batch` and no accumulation sums over all windows in one backward pass, in another order:
its loss curve and weights agree up to float32 rounding, and the file's metadata, card and
tensor names and shapes are the same. Rank 0 alone prints and writes.
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
from test_train import LLAMA, TOKENIZER, counting_text

from toycards.cli import main

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_two_gloo_processes_train_like_one_accumulating_two_halves(tmp_path):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("this torch has no gloo backend")
    data = tmp_path / "count.txt"
    data.write_text(counting_text(), encoding="utf-8")
    common = ["train", "llama", "--tokenizer", TOKENIZER, "--data", data, *LLAMA,
              "--steps", 20, "--batch", 8, "--seq", 16, "--lr", 1e-2, "--seed", 5, "--json"]  # fmt: skip
    two = tmp_path / "two.gguf"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "toycards", *common, "--out", two]  # fmt: skip
    proc = subprocess.run([str(a) for a in cmd], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one, accumulated = tmp_path / "one.gguf", tmp_path / "accumulated.gguf"
    single = CliRunner().invoke(main, [str(a) for a in [*common, "--out", one]])
    assert single.exit_code == 0, single.output
    halves = CliRunner().invoke(main, [str(a) for a in [*common, "--accumulate", 2, "--out", accumulated]])
    assert halves.exit_code == 0, halves.output

    def curve(stdout: str) -> list[float]:
        return [e["loss"] for e in map(json.loads, stdout.splitlines()) if "step" in e]

    losses_two, losses_one, losses_halves = curve(proc.stdout), curve(single.stdout), curve(halves.stdout)
    assert len(losses_two) == 20, "rank 0 alone reports: one line per step"
    assert losses_one[-1] < losses_one[0] - 2
    gaps = [abs(p - q) for p, q in zip(losses_two, losses_halves, strict=True)]
    assert losses_two == losses_halves, f"worst |Δ| {max(gaps):.3g} at step {gaps.index(max(gaps)) + 1}"
    assert two.read_bytes() == accumulated.read_bytes(), "two processes and --accumulate 2: the same bits"
    np.testing.assert_allclose(losses_two, losses_one, rtol=0, atol=1e-5)

    a, b = gguf.GGUFReader(one), gguf.GGUFReader(two)
    assert {k: f.contents() for k, f in a.fields.items() if not k.startswith("GGUF.")} == {
        k: f.contents() for k, f in b.fields.items() if not k.startswith("GGUF.")
    }
    assert [(t.name, tuple(t.shape)) for t in a.tensors] == [(t.name, tuple(t.shape)) for t in b.tensors]
    worst = max(
        float(np.abs(np.asarray(x.data) - np.asarray(y.data)).max()) for x, y in zip(a.tensors, b.tensors)
    )
    assert worst <= 1e-4, f"weights differ by {worst:.3g}"
