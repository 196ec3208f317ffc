"""`--threads N` of the commands that run a model, and the default thread count.

The oracle is the OpenMP runtime itself (libgomp's `omp_get_max_threads`, which the C kernels'
parallel loops use) and torch's `get_num_threads`, read in the process that ran the command; the
default is checked on a hand-made CPU topology and on a process held to one CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from toycards.cli.options import default_threads

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-llama.gguf"

# Runs `toycards run` in process with the arguments of each line of argv, and prints what the
# runtimes then compute on: OpenMP (the kernels' threads), torch where loaded, the variables.
PROBE = """
import ctypes, json, os, sys
from toycards.cli import main

def omp():
    return ctypes.CDLL("libgomp.so.1").omp_get_max_threads()

if os.environ.get("PROBE_ONE_CPU"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
seen = []
for line in sys.stdin.read().splitlines():
    args = json.loads(line)
    if args == ["import torch"]:
        import torch
        continue
    try:
        main(["run", sys.argv[1], "-p", "Hi", "-n", "1", *args], standalone_mode=False)
    except SystemExit as e:
        assert not e.code, e.code
    torch = sys.modules.get("torch")
    seen.append({"omp": omp(), "torch": torch.get_num_threads() if torch else None,
                 "env": [os.environ.get(v) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")]})
print(json.dumps(seen))
"""


linux_only = pytest.mark.skipif(sys.platform != "linux", reason="reads libgomp.so.1 and sets CPU affinity")


def probe(*runs: list[str], **env: str) -> list[dict]:
    """What each run of PROBE saw, in a fresh process (OpenMP reads its variables once, as it loads)."""
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(EXAMPLE)],
        input="\n".join(json.dumps(r) for r in runs), capture_output=True, text=True,
        env={**base, "PYTHONPATH": str(ROOT), **env}, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


@linux_only
def test_threads_flag_sets_the_kernels_and_torch():
    """First before OpenMP is loaded (the variables), then with it and torch loaded (their setters)."""
    first, second = probe(["--threads", "1"], ["import torch"], ["--threads", "3"])
    assert first == {"omp": 1, "torch": None, "env": ["1", "1"]}
    assert second == {"omp": 3, "torch": 3, "env": ["3", "3"]}


@linux_only
def test_default_is_the_cores_the_process_may_run_on_and_omp_num_threads_stands():
    (held,) = probe([], PROBE_ONE_CPU="1")
    assert held == {"omp": 1, "torch": None, "env": ["1", None]}  # OpenBLAS follows OMP_NUM_THREADS
    (given,) = probe([], OMP_NUM_THREADS="2")
    assert given["omp"] == 2 and given["env"][0] == "2"


def fake_topology(root: Path, siblings: dict[int, str], name: str = "core_cpus_list") -> Path:
    for cpu, text in siblings.items():
        (root / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (root / f"cpu{cpu}" / "topology" / name).write_text(text + "\n")
    return root


@pytest.mark.parametrize(
    "cpus, cores",
    [({0, 1, 2, 3}, 2), ({0, 2}, 1), ({0, 1}, 2), ({3}, 1), ({0, 1, 2, 3, 4, 5}, 3)],
)
def test_default_counts_physical_cores_among_the_allowed_cpus(tmp_path, cpus, cores):
    """Six CPUs, two hardware threads a core: cores {0,2}, {1,3} and {4,5} (the older file name)."""
    topology = fake_topology(tmp_path, {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"})
    fake_topology(tmp_path, {4: "4-5", 5: "4-5"}, name="thread_siblings_list")
    assert default_threads(cpus, topology) == cores


def test_default_without_a_topology_counts_every_cpu(tmp_path):
    assert default_threads({0, 1, 2}, tmp_path) == 3


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", "100000"])
@pytest.mark.parametrize(
    "command",
    [
        ["run", str(EXAMPLE), "-p", "x"],
        ["eval", str(EXAMPLE), "-p", "x y"],
        ["train", "llama", "--data", str(EXAMPLE), "--out", "never.gguf"],
    ],
    ids=["run", "eval", "train"],
)
def test_a_bad_thread_count_is_a_usage_error(command, value):
    from toycards.cli import main

    out = CliRunner().invoke(main, [*command, "--threads", value])
    assert out.exit_code == 2 and "'--threads'" in out.stderr, out.output
    assert "Traceback" not in out.output
