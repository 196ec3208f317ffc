"""Benchmark: the KV cache `toycards describe --memory` says llama.cpp allocates, against the size
llama.cpp logs as it makes a context; and toycards' process peak against its own estimate.

KV cache: for each file (SmolLM2-135M-Instruct Q4_1, fetched once by tests/helpers/real_model.py,
or --file; --oracle also writes tiny oracle files of tests/oracle, such as gemma3 for sliding-window
layers and mamba for a recurrent state), each --ctx and each --kv-cache type, a child process of
--llama-python makes a llama.cpp context with llama-cpp-python (n_ctx, type_k = type_v, swa_full off
as llama.cpp's own tools have it, flash attention for a quantized cache, which llama.cpp needs for
one) and the sizes it logs are read: `llama_kv_cache: size = … MiB` (one line per cache: a
sliding-window model has two) and `llama_memory_recurrent: size = … MiB`. The table shows them
beside describe's llama.cpp column, in MiB to the two decimals llama.cpp prints, and whether the
two agree to that rounding.

Process peak (--peak N,…): per prompt of N tokens, one child process measures the baseline, what
describe leaves out (Python with toycards imported, the file's tokenizer and the generated module
made, the C kernels loaded: its resident memory), then another loads the file and runs one prefill
of N tokens with an f32 cache as generation does (the last token's logits) and reports its peak
resident memory (VmHWM). The table shows that peak against the baseline plus describe's toycards
total (weights, KV cache resident, activations at peak) and whether it is within 10%.

    .venv/bin/python bench/kv_vs_llama_cpp.py --llama-python /path/to/venv/bin/python \
        [--file F.gguf] [--ctx 512,2048,8192] [--kv-cache f16,f32,q8_0] [--oracle gemma3,mamba] \
        [--peak 256,1024] [--no-kv]

Without llama-cpp-python in --llama-python the script says so in one line and exits 2, unless
only --peak was asked for (--no-kv).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from _setup import prepare

MIB = 1 << 20
KV_GGML = {"f32": 0, "f16": 1, "q8_0": 8}  # ggml type ids of llama.cpp's type_k and type_v
SIZE_LINE = re.compile(r"^(llama_kv_cache|llama_memory_recurrent): size =\s*([0-9.]+) MiB", re.M)
TOLERANCE = 0.10  # the process peak against baseline + estimate

LLAMA_CHILD = """
import sys, llama_cpp
path, n_ctx, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
llama_cpp.Llama(path, n_ctx=n_ctx, type_k={types}[kind], type_v={types}[kind], swa_full=False,
                flash_attn=kind not in ("f16", "f32"), n_gpu_layers=0, verbose=True)
"""

STATUS = """
def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))
"""

BASELINE_CHILD = (
    STATUS
    + """
import json, sys
import numpy as np
import toycards
from toycards.engine import ckernels
from toycards.gguf.reader import open_gguf
from toycards.models.load import card_for_file, module_namespace
from toycards.tokenizer.tokenizer import tokenizer_of
ckernels.library()
with open_gguf(sys.argv[1]) as f:
    tokenizer = tokenizer_of(f)
    module = module_namespace(card_for_file(f), "numpy")
print(json.dumps({"rss": status("VmRSS")}))
"""
)

PEAK_CHILD = (
    STATUS
    + """
import json, sys, time
import numpy as np
import toycards
path, n = sys.argv[1], int(sys.argv[2])
model = toycards.load(path)
time.sleep(1.0)  # the weights a load packs on a thread of their own, packed
cache = model.new_cache("f32")
ids = np.random.default_rng(0).integers(100, 1000, size=(1, n))
model(ids, cache, last=True)
print(json.dumps({"peak": status("VmHWM")}))
"""
)


def llama_cpp_sizes(python: str, path: Path, n_ctx: int, kind: str) -> list[float] | None:
    """MiB of each of llama.cpp's caches for a context, as it logs them, or None on failure."""
    code = LLAMA_CHILD.format(types=KV_GGML)
    run = subprocess.run([python, "-c", code, str(path), str(n_ctx), kind], capture_output=True, text=True)
    sizes = [float(m.group(2)) for m in SIZE_LINE.finditer(run.stderr + run.stdout)]
    return sizes if run.returncode == 0 and sizes else None


def has_llama_cpp(python: str | None) -> bool:
    if not python:
        return False
    try:
        run = subprocess.run([python, "-c", "import llama_cpp"], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return run.returncode == 0


def child_json(code: str, *args: str) -> dict:
    run = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


# ── the two tables ──────────────────────────────────────────────────────────────────────
def kv_table(files: list[Path], contexts: tuple[int, ...], kinds: list[str], python: str) -> bool:
    from toycards.inspect.describe import describe
    from toycards.inspect.memory import memory_report

    print(f"{'file':<34} {'ctx':>6} {'type':>5} {'describe MiB':>13} {'llama.cpp MiB':>14}  agree")
    agree = True
    for path in files:
        card = describe(path)
        for kind in kinds:
            report = memory_report(card, contexts, kind)
            for column in report.columns:
                c = column.llama_cpp
                ours = None if c["kv"] is None else (c["kv"] + c["kv_sliding"] + (c["recurrent"] or 0)) / MIB
                logged = llama_cpp_sizes(python, path, column.context, kind)
                theirs = sum(logged) if logged else None
                # each logged size is rounded to 0.01 MiB: their sum to half that per size
                same = (
                    ours is not None
                    and theirs is not None
                    and abs(ours - theirs) <= 0.005 * len(logged) + 1e-9
                )
                agree &= same
                shown = [f"{v:.2f}" if v is not None else "—" for v in (ours, theirs)]
                said = "yes" if same else "NO"
                print(f"{path.name:<34} {column.context:>6} {kind:>5} {shown[0]:>13} {shown[1]:>14}  {said}")
    return agree


def peak_table(path: Path, prompts: list[int]) -> bool:
    from toycards.inspect.describe import describe
    from toycards.inspect.memory import memory_report

    baseline = child_json(BASELINE_CHILD, str(path))["rss"]
    report = memory_report(describe(path), tuple(prompts), "f32")
    print(f"\n{path.name}: baseline (toycards imported, tokenizer and module made) {baseline / MIB:.1f} MiB")
    print(f"{'prompt':>6} {'estimate MiB':>13} {'+ baseline':>11} {'peak MiB':>9} {'ratio':>6}  within 10%")
    ok = True
    for column in report.columns:
        estimate = column.toycards["total"]
        peak = child_json(PEAK_CHILD, str(path), str(column.context))["peak"]
        ratio = peak / (baseline + estimate)
        ok &= abs(ratio - 1) <= TOLERANCE
        print(
            f"{column.context:>6} {estimate / MIB:>13.1f} {(baseline + estimate) / MIB:>11.1f}"
            f" {peak / MIB:>9.1f} {ratio:>6.3f}  {'yes' if abs(ratio - 1) <= TOLERANCE else 'NO'}"
        )
    return ok


def oracle_files(cases: list[str], folder: Path) -> list[Path]:
    from oracle.cases import OracleFiles

    files = OracleFiles(folder)
    return [files(case, "F32").path for case in cases]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-python", default=None, help="a Python with llama-cpp-python installed")
    parser.add_argument("--file", type=Path, default=None, help="default: SmolLM2-135M-Instruct Q4_1")
    parser.add_argument("--ctx", default="512,2048,8192")
    parser.add_argument("--kv-cache", default="f16,f32,q8_0")
    parser.add_argument("--oracle", default="", help="tiny oracle files too, e.g. gemma3,mamba")
    parser.add_argument("--peak", default="", help="prompt lengths for the process-peak check, e.g. 256,1024")
    parser.add_argument("--no-kv", action="store_true", help="only the process-peak check")
    args = parser.parse_args()
    prepare(threads=None)

    from real_model import smollm2_q4_1

    path = args.file or smollm2_q4_1()
    ok = True
    if not args.no_kv:
        if not has_llama_cpp(args.llama_python):
            print(
                f"llama-cpp-python is not importable from --llama-python {args.llama_python}", file=sys.stderr
            )
            sys.exit(2)
        with tempfile.TemporaryDirectory() as tmp:
            files = [path] + oracle_files([c for c in args.oracle.split(",") if c], Path(tmp))
            contexts = tuple(int(c) for c in args.ctx.split(","))
            ok &= kv_table(files, contexts, args.kv_cache.split(","), args.llama_python)
    if args.peak:
        ok &= peak_table(path, [int(n) for n in args.peak.split(",")])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
