"""`torchrun --nproc-per-node 2 -m toycards train …`: DistributedDataParallel over gloo on CPU.

Each of the two processes trains on half of every step's windows; DDP averages their gradients,
which is the gradient of the mean loss over all the windows. So the loss curve equals that of one
process with the same `--batch` and seed up to float32 rounding (the sums are taken in another
order), rank 0 alone prints and writes, and the two files agree: the same metadata and card, the
same tensors, weights equal up to that rounding (not bit for bit: the order of the sums differs).
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


def test_two_gloo_processes_train_like_one(tmp_path):
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
    one = tmp_path / "one.gguf"
    single = CliRunner().invoke(main, [str(a) for a in [*common, "--out", one]])
    assert single.exit_code == 0, single.output

    def curve(stdout: str) -> list[float]:
        return [e["loss"] for e in map(json.loads, stdout.splitlines()) if "step" in e]

    losses_two, losses_one = curve(proc.stdout), curve(single.stdout)
    assert len(losses_two) == 20, "rank 0 alone reports: one line per step"
    assert losses_one[-1] < losses_one[0] - 2
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
