"""Fuzzing the GGUF reader: every mutation of a valid file reads, or fails as one line naming the file.

The seed file is `examples/tiny-llama.gguf` (a real vocabulary, 20 tensors, 307 kB). Each case applies
one mutation from tests/helpers/gguf_mutations.py (drawn from a fixed seed per batch): a truncation in each
region (header, key/values, tensor infos, alignment padding, data), a bit flip, an overwritten count,
length, type, dimension or offset (0, 1, 2**31, 2**63, 2**64 - 1, …), a duplicated or deleted run
of bytes. Then `toycards.describe(path)`, `toycards.load(path, target="numpy").logits([1, 2, 3])` and
`check_tensors(path)` (and the torch target on a subset, and the command line on a smaller one:
describe (with and without --check-tensors), run, eval, gen and list) must either succeed or
raise `ToycardsError` with one line that names the file. Anything else fails the test, naming the
mutation: `gguf_mutations.apply(data, mutation)` rebuilds the file.

GGUF_FUZZ_CASES scales the number of cases of the main test (default 3000 mutations, each through
describe, load and check_tensors); with 120 torch cases, 200 command-line cases (five commands
each) and three in fresh processes, the file takes about 35 s on one core.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import traceback
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from gguf_mutations import apply, field_map, mutations

import toycards
from toycards.cli import main
from toycards.errors import ToycardsError
from toycards.gguf.finite import check_tensors

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-llama.gguf"
CASES = int(os.environ.get("GGUF_FUZZ_CASES", 3000))
BATCHES = 6
PEAK_GROWTH_MB = 1000  # a batch may not raise the process's peak memory by more than this


@pytest.fixture(scope="module")
def source() -> bytes:
    return EXAMPLE.read_bytes()


def _write(path: Path, data: bytes) -> None:
    """Replace the file, never rewrite it in place: a model of the previous case may still map it."""
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _failure(call, path: Path) -> str | None:
    """None when `call()` succeeds or raises a one-line ToycardsError naming `path`; else what went wrong."""
    try:
        with np.errstate(all="ignore"):  # NaN logits from garbage weights are a success here
            call()
    except ToycardsError as e:
        text = str(e)
        if "\n" in text or str(path) not in text:
            return f"ToycardsError not one line naming the file: {text[:300]!r}"
    except Exception as e:  # noqa: BLE001 - the point of the test
        where = traceback.extract_tb(e.__traceback__)[-1]
        return f"{type(e).__name__}: {str(e)[:200]} (at {where.filename}:{where.lineno})"
    return None


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def test_the_mutations_cover_every_region_and_every_kind_of_field(source):
    fields, regions = field_map(source)
    cases = [m for batch in range(BATCHES) for m in mutations(source, batch, CASES // BATCHES)]
    assert Counter(m[0] for m in cases).keys() == {"truncate", "flip", "put", "dup", "delete"}
    for name, (lo, hi) in regions.items():
        assert any(m[0] == "truncate" and lo <= m[1] < hi for m in cases), f"no truncation in {name}"
    kind_at = {(f.at, f.width): f.kind for f in fields}
    written = {kind_at[m[1], m[2]] for m in cases if m[0] == "put"}
    assert written == {f.kind for f in fields}
    assert mutations(source, 0, 50) == mutations(source, 0, 50)  # deterministic: reproducible by seed


@pytest.mark.parametrize("batch", range(BATCHES))
def test_describe_and_load_survive_mutations(batch, source, tmp_path):
    path, failures, peak = tmp_path / "model.gguf", [], _peak_mb()
    for m in mutations(source, batch, CASES // BATCHES):
        _write(path, apply(source, m))
        for what, call in (
            ("describe", lambda: toycards.describe(path)),
            ("load numpy", lambda: toycards.load(path, target="numpy").logits([1, 2, 3])),
            ("check_tensors", lambda: check_tensors(path)),
        ):
            problem = _failure(call, path)
            if problem:
                failures.append(f"{m!r}: {what}: {problem}")
    assert not failures, f"{len(failures)} failures, e.g.\n" + "\n".join(failures[:10])
    assert _peak_mb() - peak < PEAK_GROWTH_MB


def test_torch_load_survives_mutations(source, tmp_path):
    pytest.importorskip("torch")
    path, failures = tmp_path / "model.gguf", []
    for m in mutations(source, 100, 120):
        _write(path, apply(source, m))
        problem = _failure(lambda: toycards.load(path, target="torch").logits([1, 2, 3]), path)
        if problem:
            failures.append(f"{m!r}: load torch: {problem}")
    assert not failures, "\n".join(failures[:10])


def _commands(path: Path, i: int) -> list[list[str]]:
    formats = ("text", "json", "card", "markdown", "latex", "html", "terminal")
    return [
        ["describe", str(path), "--format", formats[i % len(formats)]] + ["--check-tensors"] * (i % 2),
        ["run", str(path), "-p", "Hello", "-n", "3"],
        ["eval", str(path), "-p", "Hello world"],
        ["gen", str(path), "--target", "numpy"],
        ["list", "--dir", str(path.parent), "--no-caches"] + (["--json"] if i % 2 else []),
    ]


def test_the_command_line_survives_mutations(source, tmp_path):
    path, failures = tmp_path / "model.gguf", []
    for i, m in enumerate(mutations(source, 200, 200)):
        _write(path, apply(source, m))
        for args in _commands(path, i):
            with np.errstate(all="ignore"):
                result = CliRunner().invoke(main, args)
            out = result.output  # stdout and stderr
            if result.exit_code not in (0, 1) or "Traceback" in out or "internal error" in out:
                failures.append(f"{m!r}: toycards {args[0]}: exit {result.exit_code}: {out[-300:]!r}")
    assert not failures, "\n".join(failures[:10])


@pytest.mark.parametrize("m", [("put", 8, 8, (1 << 64) - 1), ("truncate", 20000), ("flip", 27400, 3)])
def test_the_installed_command_reports_a_mutated_file_on_one_line(m, source, tmp_path):
    """In a fresh process, as a user runs it: exit 1, one line on stderr that names the file."""
    path = tmp_path / "model.gguf"
    _write(path, apply(source, m))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for args in (["describe", str(path), "--format", "json"], ["run", str(path), "-p", "Hi", "-n", "2"]):
        done = subprocess.run(
            [sys.executable, "-m", "toycards", *args], capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == 1, (m, args, done.stderr)
        assert done.stderr.count("\n") == 1 and str(path) in done.stderr, (m, args, done.stderr)
        assert "Traceback" not in done.stderr
