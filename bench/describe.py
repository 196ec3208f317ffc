"""Benchmark: reading what `toycards describe` needs from a GGUF file, against `gguf-dump`.

Builds two files in a temporary directory:
  (a) a TinyLlama-shaped model (22 layers, 201 tensors, Q8_0, about 1.2 GB; the tensor
      data is a sparse hole, since neither side reads it), and
  (b) a vocabulary-only file with 150,000 tokens and 150,000 merges;
then times, on each file, in the same run:
  ours       `toycards.describe(path)`: the validated header, the header facts (special
             token texts decoded one by one, arrays otherwise only measured), the card
             (library card parsed, or a declaration-only card built), binding and problems;
             in a fresh process: `python -m toycards describe PATH --format json`;
  gguf-dump  the `gguf` package's dump script on the same file (it parses every field,
             arrays included, with gguf.GGUFReader).
Both are timed end to end in a fresh interpreter (start-up and imports included, output
to /dev/null; a first row shows that floor: the imports alone), and also in this process
(ours: `describe` with the library card already parsed, as in a long-running program, and
once cold, parsing it; gguf: `GGUFReader(path)` plus reading every field, which is what
gguf-dump spends its time on). Best of --repeat, after one untimed warm-up run each.

Fresh processes run as an installed package runs: with compiled bytecode. PYTHONDONTWRITEBYTECODE
is dropped for them and PYTHONPYCACHEPREFIX points into the temporary folder, so the warm-up
run compiles both sides once (without it, toycards, installed editable, would be compiled
from source on every run while the gguf package's bytecode was written by pip) and the
source tree gets no __pycache__ folders.

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
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "helpers")]

from toycards.inspect.describe import describe  # noqa: E402


def describe_fn(path: str | Path) -> dict:
    """`toycards.describe(path)`: header, bound card and problems (arrays measured, not decoded)."""
    card = describe(path)
    return {"header": card.header, "card": card, "problems": card.problems}


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
    return [sys.executable, "-m", "toycards", "describe", str(path), "--format", "json"]


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    fn()  # warm-up: bytecode, page cache
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def fresh_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(ROOT), "PYTHONPYCACHEPREFIX": PYCACHE}


PYCACHE = ""  # set by main(): a folder inside the temporary directory


def run_quiet(cmd: list[str]) -> None:
    env = fresh_env()
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


def cold_call(path: Path) -> float:
    """Seconds of the first `describe` call in a fresh interpreter (imports not counted)."""
    code = (
        "import sys, time; import toycards.inspect.describe as d; t = time.perf_counter(); "
        "d.describe(sys.argv[1]); print(time.perf_counter() - t)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=fresh_env()
    )
    if done.returncode:
        sys.exit(f"describe failed on {path}:\n{done.stderr}")
    return float(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best counts")
    args = ap.parse_args()
    global PYCACHE
    with tempfile.TemporaryDirectory() as tmp:
        PYCACHE = str(Path(tmp) / "pycache")
        files = build_files(Path(tmp))
        print(f"best of {args.repeat}; times in seconds; ratio = gguf / ours\n")
        head = f"{'file':38} {'size':>8}  {'what is timed':36} {'ours':>8} {'gguf':>8} {'ratio':>7}"
        print(head + "\n" + "-" * len(head))
        imports = (
            best_of(
                args.repeat, lambda: run_quiet([sys.executable, "-c", "import toycards.inspect.describe"])
            ),
            best_of(args.repeat, lambda: run_quiet([sys.executable, "-c", "import gguf.scripts.gguf_dump"])),
        )
        print(f"{'(start-up floor: imports only)':38} {'':>8}  {'fresh python: imports':36} ", end="")
        print(f"{imports[0]:8.3f} {imports[1]:8.3f} {imports[1] / imports[0]:6.1f}×")
        for label, path in files.items():
            n = path.stat().st_size
            size = f"{n / 1e9:.2f} GB" if n > 1e8 else f"{n / 1e6:.1f} MB"
            reader = best_of(args.repeat, lambda p=path: gguf_reader_fn(p))
            rows = [
                (
                    "in process: describe | GGUFReader",
                    best_of(args.repeat, lambda p=path: describe_fn(p)),
                    reader,
                ),
                (
                    "first call, cold: describe | GGUFReader",
                    min(cold_call(path) for _ in range(args.repeat)),
                    reader,
                ),
                (
                    "fresh python: toycards | gguf-dump",
                    best_of(args.repeat, lambda p=path: run_quiet(ours_cmd(p))),
                    best_of(args.repeat, lambda p=path: run_quiet(gguf_dump_cmd(p))),
                ),
            ]
            for what, ours, theirs in rows:
                print(f"{label:38} {size:>8}  {what:36} {ours:8.3f} {theirs:8.3f} {theirs / ours:6.1f}×")
                label = size = ""


if __name__ == "__main__":
    main()
