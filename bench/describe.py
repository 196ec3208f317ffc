"""Benchmark: reading what `toycards describe` needs from a GGUF file, against `gguf-dump`.

Builds two files in a temporary directory:
  (a) a TinyLlama-shaped model (22 layers, 201 tensors, Q8_0, about 1.2 GB; the tensor
      data is a sparse hole, since neither side reads it), and
  (b) a vocabulary-only file with 150,000 tokens and 150,000 merges;
then times, on each file, in the same run:
  ours       `describe_fn(path)`: open_gguf + every scalar value, every array's type
             and length, the whole tensor table, and check_hparams;
  gguf-dump  the `gguf` package's dump script on the same file (it parses every field,
             arrays included, with gguf.GGUFReader).
Both are timed end to end in a fresh interpreter (start-up and imports included, output
to /dev/null; a first row shows that floor: the imports alone), and also in this process (ours: `describe_fn`; gguf: `GGUFReader(path)`
plus reading every field, which is what gguf-dump spends its time on). Best of --repeat.

`describe_fn` is the one function to swap for `toycards.describe` once it exists.

    .venv/bin/python bench/describe.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from toycards.runtime.gguf import check_hparams, open_gguf  # noqa: E402


def describe_fn(path: str | Path) -> dict:
    """Everything a describe reads from the file (arrays are measured, never decoded)."""
    with open_gguf(path) as f:
        metadata = {}
        for key in f.metadata:
            vtype = f.value_type(key)
            metadata[key] = (vtype, f.array_len(key)) if vtype.startswith("array") else f.metadata[key]
        tensors = [(t.name, t.type_name, t.shape, t.n_bytes) for t in f.tensors.values()]
        return {"metadata": metadata, "tensors": tensors, "problems": check_hparams(f)}


def gguf_reader_fn(path: str | Path) -> None:
    """The gguf package's parse as gguf-dump drives it: every field's contents, every tensor."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    for field in reader.fields.values():
        field.contents()
    for t in reader.tensors:
        (t.name, t.tensor_type.name, t.shape.tolist(), t.n_bytes)


def gguf_dump_cmd(path: Path) -> list[str]:
    script = Path(sys.executable).with_name("gguf-dump")
    if script.exists():
        return [str(script), str(path)]
    return [sys.executable, "-m", "gguf.scripts.gguf_dump", str(path)]


def ours_cmd(path: Path) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--describe", str(path)]


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def run_quiet(cmd: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr}")


def build_files(tmp: Path) -> dict[str, Path]:
    from gguf_factory import RawGGUF, llama_hparams, tinyllama_specs, vocab_kv, write_sparse_model

    specs = tinyllama_specs()
    kv = llama_hparams(n_layer=22, d_e=2048, d_ff=5632, n_head=32, n_head_kv=4)
    model = write_sparse_model(tmp / "tinyllama-q8_0.gguf", kv, specs)
    vocab = RawGGUF(kv=vocab_kv(150_000, 150_000)).write(tmp / "vocab-150k.gguf")
    return {f"(a) Llama-shaped, {len(specs)} tensors": model, "(b) 150k tokens + 150k merges": vocab}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best counts")
    ap.add_argument("--describe", metavar="GGUF", help="(internal) run describe_fn on one file and exit")
    args = ap.parse_args()
    if args.describe:
        d = describe_fn(args.describe)
        print(len(d["metadata"]), "keys,", len(d["tensors"]), "tensors,", len(d["problems"]), "problems")
        return
    with tempfile.TemporaryDirectory() as tmp:
        files = build_files(Path(tmp))
        print(f"best of {args.repeat}; times in seconds; ratio = gguf / ours\n")
        head = f"{'file':38} {'size':>8}  {'what is timed':32} {'ours':>8} {'gguf':>8} {'ratio':>7}"
        print(head + "\n" + "-" * len(head))
        imports = (
            best_of(args.repeat, lambda: run_quiet([sys.executable, "-c", "import toycards.runtime.gguf"])),
            best_of(args.repeat, lambda: run_quiet([sys.executable, "-c", "import gguf.scripts.gguf_dump"])),
        )
        print(f"{'(start-up floor: imports only)':38} {'':>8}  {'fresh python: imports':32} ", end="")
        print(f"{imports[0]:8.3f} {imports[1]:8.3f} {imports[1] / imports[0]:6.1f}×")
        for label, path in files.items():
            size = (
                f"{path.stat().st_size / 1e9:.2f} GB"
                if path.stat().st_size > 1e8
                else f"{path.stat().st_size / 1e6:.1f} MB"
            )
            rows = [
                (
                    "in process: describe_fn | GGUFReader",
                    best_of(args.repeat, lambda p=path: describe_fn(p)),
                    best_of(args.repeat, lambda p=path: gguf_reader_fn(p)),
                ),
                (
                    "fresh python: ours | gguf-dump",
                    best_of(args.repeat, lambda p=path: run_quiet(ours_cmd(p))),
                    best_of(args.repeat, lambda p=path: run_quiet(gguf_dump_cmd(p))),
                ),
            ]
            for what, ours, theirs in rows:
                print(f"{label:38} {size:>8}  {what:32} {ours:8.3f} {theirs:8.3f} {theirs / ours:6.1f}×")
                label = size = ""


if __name__ == "__main__":
    main()
