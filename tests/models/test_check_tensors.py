"""Non-finite weights are reported: `describe --check-tensors`, and run / eval / generate() stop.

Files are written with `gguf.GGUFWriter` (quantised data from `gguf.quants.quantize`) and then
patched byte by byte: a NaN or Inf float, or a Q8_0 block whose float16 scale is NaN or Inf. The
expected counts come from `gguf.GGUFReader` and `gguf.quants.dequantize` over the whole tensor,
not from toycards.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from click.testing import CliRunner
from gguf import GGMLQuantizationType as Q
from gguf_factory import RawGGUF, RawKV, RawTensor

import toycards
from toycards.cli import main
from toycards.errors import ToycardsError
from toycards.gguf.finite import check_tensors
from toycards.models.evaluate import evaluate

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-llama.gguf"
F16_NAN, F16_INF = b"\x00\x7e", b"\x00\x7c"  # little-endian float16 bit patterns


def _data_offset(path: Path, name: str) -> int:
    """Where a tensor's data starts, as gguf's own reader says."""
    return next(int(t.data_offset) for t in gguf.GGUFReader(path).tensors if t.name == name)


def _patch(path: Path, at: int, raw: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(raw)


def _oracle_counts(path: Path) -> dict[str, tuple[int, int]]:
    """name → (NaN, Inf) of every tensor holding any, by gguf.quants over the whole tensor."""
    out = {}
    for t in gguf.GGUFReader(path).tensors:
        x = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
        counts = (int(np.isnan(x).sum()), int(np.isinf(x).sum()))
        if sum(counts):
            out[t.name] = counts
    return out


def _write(path: Path, tensors: dict[str, tuple[np.ndarray, Q]]) -> Path:
    """A file of architecture "toy" (no card: describe shows a declaration-only card, exit 0)."""
    w = gguf.GGUFWriter(path, "toy")
    for name, (values, qtype) in tensors.items():
        if qtype in (Q.F32, Q.F16):
            w.add_tensor(name, values.astype(np.float32 if qtype == Q.F32 else np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(values, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _weights(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


# (type of the dirty tensor, bytes written, where: element index for floats, block index for Q8_0)
DIRTY = {
    "F32 NaN": (Q.F32, struct.pack("<f", float("nan")), 5),
    "F32 -Inf": (Q.F32, struct.pack("<f", -float("inf")), 100),
    "F16 Inf": (Q.F16, F16_INF, 7),
    "F16 NaN": (Q.F16, F16_NAN, 0),
    "Q8_0 scale NaN": (Q.Q8_0, F16_NAN, 3),
    "Q8_0 scale Inf": (Q.Q8_0, F16_INF, 1),
}


def _dirty_file(tmp_path: Path, case: str) -> Path:
    qtype, raw, index = DIRTY[case]
    path = _write(
        tmp_path / "dirty.gguf",
        {"clean.weight": (_weights((8, 64), 1), Q.Q8_0), "dirty.weight": (_weights((8, 64), 2), qtype)},
    )
    at = index * (34 if qtype == Q.Q8_0 else len(raw))  # a Q8_0 block: d (float16) then 32 int8
    _patch(path, _data_offset(path, "dirty.weight") + at, raw)
    return path


@pytest.mark.parametrize("case", DIRTY)
def test_check_tensors_names_the_tensor_with_the_oracles_counts(case, tmp_path):
    path = _dirty_file(tmp_path, case)
    expected = _oracle_counts(path)
    assert list(expected) == ["dirty.weight"]  # the patch did make it non-finite
    report = check_tensors(path)
    assert not report.ok
    assert [(b.name, (b.n_nan, b.n_inf)) for b in report.bad] == list(expected.items())
    assert report.bad[0].n_elements == 8 * 64


def test_small_chunks_count_the_same_as_the_whole_tensor(tmp_path):
    x = _weights((16, 256))
    path = _write(tmp_path / "m.gguf", {"a.weight": (x, Q.Q8_0), "b.weight": (x, Q.F16)})
    a, b = _data_offset(path, "a.weight"), _data_offset(path, "b.weight")
    for block in (0, 17, 127):  # spread over many 32-element chunks
        _patch(path, a + 34 * block, F16_NAN)
    for i in (3, 999, 4095):
        _patch(path, b + 2 * i, F16_INF)
    expected = _oracle_counts(path)
    for chunk in (32, 96, 1 << 20):
        report = check_tensors(path, chunk_elements=chunk)
        assert {x.name: (x.n_nan, x.n_inf) for x in report.bad} == expected, chunk


def test_describe_check_tensors_reports_on_stderr_and_exits_1(tmp_path):
    path = _dirty_file(tmp_path, "Q8_0 scale Inf")
    result = CliRunner().invoke(main, ["describe", str(path), "--format", "json", "--check-tensors"])
    assert result.exit_code == 1
    json.loads(result.stdout)  # stdout stays the format's output
    (line,) = [s for s in result.stderr.splitlines() if s.startswith("error:")]
    n_nan, n_inf = _oracle_counts(path)["dirty.weight"]
    assert "'dirty.weight'" in line and f"{n_nan + n_inf} of 512 values" in line
    assert "clean.weight" not in result.stderr


def test_describe_without_the_flag_does_not_read_tensor_data(tmp_path):
    path = _dirty_file(tmp_path, "F32 NaN")
    result = CliRunner().invoke(main, ["describe", str(path), "--format", "text"])
    assert result.exit_code == 0 and "NaN" not in result.stderr


@pytest.mark.parametrize("fmt", ["text", "json", "terminal"])
def test_a_clean_file_passes(fmt):
    n = len(gguf.GGUFReader(EXAMPLE).tensors)
    result = CliRunner().invoke(main, ["describe", str(EXAMPLE), "--format", fmt, "--check-tensors"])
    assert result.exit_code == 0, result.output
    assert result.stderr.strip().splitlines()[-1] == f"all {n} tensors finite"


def test_a_tensor_of_unknown_type_is_listed_as_not_checked(tmp_path):
    raw = RawGGUF(
        kv=[RawKV("general.architecture", gguf.GGUFValueType.STRING, "toy")],
        tensors=[RawTensor("odd.weight", (32,), 99, 0), RawTensor("ok.weight", (4,), int(Q.F32), 0)],
        data=struct.pack("<4f", 1, 2, 3, 4),
    )
    report = check_tensors(raw.write(tmp_path / "odd.gguf"))
    assert report.ok and report.bad == []
    assert [name for name, _ in report.unchecked] == ["odd.weight"]
    assert report.lines()[-1] == "all 1 checked tensors finite (1 not checked)"


def test_memory_stays_bounded_on_a_large_tensor(tmp_path):
    """128 MB of F16 (256 MB as float32), checked in a fresh process: the peak grows by far less."""
    from gguf_factory import write_sparse_model

    path = write_sparse_model(tmp_path / "big.gguf", [], [("big.weight", (8192, 8192), int(Q.F16))])
    code = (
        "import resource, sys; from toycards.gguf.finite import check_tensors\n"
        "peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
        "before = peak(); r = check_tensors(sys.argv[1]); print(r.ok, peak() - before)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env)
    ok, growth_mb = done.stdout.split()
    assert ok == "True" and float(growth_mb) < 48, done.stdout + done.stderr


# ── run, eval and generate() ────────────────────────────────────────────────────────────
def _example_with(tmp_path: Path, name: str, element: int, raw: bytes) -> Path:
    path = tmp_path / "model.gguf"
    shutil.copy(EXAMPLE, path)
    _patch(path, _data_offset(path, name) + element * len(raw), raw)
    return path


def test_run_stops_at_non_finite_logits_with_one_line(tmp_path):
    path = _example_with(tmp_path, "output_norm.weight", 3, struct.pack("<f", float("nan")))
    result = CliRunner().invoke(main, ["run", str(path), "-p", "Hello", "-n", "4"])
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    n = len(toycards.load(path, target="numpy").tokenizer.encode("Hello"))  # the prompt's last token's
    assert line == (
        f"error: {path}: the logits at position {n} are not finite (NaN); "
        f"run `toycards describe {path} --check-tensors`"
    )


class _Logits:
    """A stand-in model whose logits turn NaN from row 2 (position 3) on."""

    tokenizer = None
    path = "fake.gguf"

    def logits(self, ids):
        z = np.zeros((len(ids), 8), dtype=np.float32)  # (T, N_V)
        z[2:, 4] = np.nan
        return z

    def window_logits(self, ids, first=0):  # as ModelAPI's: one block of rows from `first` on
        yield first, self.logits(ids)[first:]


def test_eval_names_the_first_position_whose_logits_are_not_finite():
    with pytest.raises(ToycardsError, match=r"^fake.gguf: the logits at position 3 are not finite \(NaN\)"):
        evaluate(_Logits(), ids=[1, 2, 5, 7])


def test_eval_of_a_file_with_nan_weights_exits_1(tmp_path):
    path = _example_with(tmp_path, "blk.0.attn_norm.weight", 0, struct.pack("<f", float("inf")))
    model = toycards.load(path)
    with np.errstate(all="ignore"):
        assert not np.isfinite(model.logits([1, 2, 3])).any()  # logits() returns what the weights give
    result = CliRunner().invoke(main, ["eval", str(path), "-p", "Hello world"])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {path}: the logits at position 1 are not finite (NaN)")
    assert "--check-tensors" in result.stderr and result.stderr.count("\n") == 1


def test_generate_raises_toycards_error(tmp_path):
    path = _example_with(tmp_path, "blk.1.ffn_down.weight", 10, F16_INF)
    model = toycards.load(path, target="numpy")
    with np.errstate(all="ignore"), pytest.raises(ToycardsError, match=f"^{path}: the logits at position"):
        list(model.generate("Hello", max_tokens=3))


@pytest.mark.parametrize("command", ["run", "eval"])
def test_a_fresh_process_prints_one_line_not_numpys_warnings(command, tmp_path):
    path = _example_with(tmp_path, "blk.0.attn_norm.weight", 0, struct.pack("<f", float("inf")))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "toycards", command, str(path), "-p", "Hello"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 1
    # run decodes from the prompt's last token's logits alone; eval computes every position's
    first = len(toycards.load(path, target="numpy").tokenizer.encode("Hello")) if command == "run" else 1
    assert done.stderr.splitlines() == [
        f"error: {path}: the logits at position {first} are not finite (NaN); "
        f"run `toycards describe {path} --check-tensors`"
    ]
