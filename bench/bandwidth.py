"""Benchmark: how close decoding a GGUF file on the torch target comes to this machine's memory floor.

A decoding step reads every matrix once (the output head in full, the embedding one row, unless
they are one tied matrix), so no runner can decode faster than those bytes over the machine's read
bandwidth. This measures that bandwidth with a small C loop of 64-byte loads (built here with the
system compiler and OpenMP; the same thread count as the decode) over a buffer of the weights'
size, best of --repeats, then times the torch target's greedy decoding of the file (median of
--decode steps after a 128-token prompt) and prints both: a ratio near 1 means the step is bound by
memory, not by the kernels or the glue (bench/vs_llama_cpp.py compares with llama.cpp itself).

    .venv/bin/python bench/bandwidth.py --file model.F32.gguf [--threads 2] [--decode 64]
"""

from __future__ import annotations

import argparse
import ctypes
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _setup import prepare

SOURCE = r"""
#include <immintrin.h>
#include <stdint.h>
#include <omp.h>
/* Seconds of the fastest of `repeats` passes reading n bytes (a multiple of 4096) from a, on `threads`. */
double best_read(const char *a, int64_t n, int repeats, int threads, float *sink) {
    double best = 1e30;
    float total = 0;
    for (int r = 0; r < repeats; r++) {
        double t0 = omp_get_wtime();
        #pragma omp parallel for num_threads(threads) reduction(+:total) schedule(static)
        for (int64_t c = 0; c < n; c += 4096) {
            __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
            for (int64_t i = c; i < c + 4096; i += 128) {
                s0 = _mm512_add_ps(s0, _mm512_load_ps((const float *)(a + i)));
                s1 = _mm512_add_ps(s1, _mm512_load_ps((const float *)(a + i + 64)));
            }
            total += _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
        }
        double t = omp_get_wtime() - t0;
        if (t < best) best = t;
    }
    *sink = total;
    return best;
}
"""


def read_bandwidth(n_bytes: int, threads: int, repeats: int) -> float:
    """Bytes a second of the fastest pass over a buffer of `n_bytes` (AVX-512 loads, `threads` threads)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("bandwidth.py needs a C compiler (cc or gcc) on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        src, lib = Path(tmp) / "read.c", Path(tmp) / "read.so"
        src.write_text(SOURCE)
        done = subprocess.run(
            [cc, "-O2", "-mavx512f", "-fopenmp", "-shared", "-fPIC", str(src), "-o", str(lib)],
            capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            sys.exit(f"bandwidth.py: the read loop did not compile (it needs AVX-512): {done.stderr[-300:]}")
        fn = ctypes.CDLL(str(lib)).best_read
    fn.restype = ctypes.c_double
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_float)]  # fmt: skip
    n = -(-n_bytes // 4096) * 4096
    buf = ctypes.create_string_buffer(n + 64)
    start = -ctypes.addressof(buf) % 64  # 64-byte aligned loads
    ctypes.memset(ctypes.addressof(buf), 1, n + 64)  # every page written: none is a shared zero page
    sink = ctypes.c_float()
    seconds = fn(ctypes.addressof(buf) + start, n, repeats, threads, ctypes.byref(sink))
    return n / seconds


def bytes_per_token(path: str) -> int:
    """Bytes of the file's tensors that one decoding step reads: all of them but the embedding
    table, of which one row (the whole table where it is also the output head)."""
    from toycards.gguf.reader import open_gguf

    with open_gguf(path) as f:
        sizes = {name: info.n_bytes for name, info in f.tensors.items()}
    total = sum(sizes.values())
    if "output.weight" in sizes and "token_embd.weight" in sizes:
        total -= sizes["token_embd.weight"]
    return total


def decode_seconds(path: str, decode: int) -> float:
    """Median seconds of a greedy decoding step on the torch target, after a 128-token prompt."""
    import torch

    import toycards

    model = toycards.load(path, target="torch")
    cache = model.new_cache()
    ids = list(range(1000, 1128))
    steps = []
    with torch.inference_mode():
        token = int(torch.argmax(model(torch.tensor([ids]), cache, last=True)[0, -1]))
        for _ in range(decode):
            t0 = time.perf_counter()
            token = int(torch.argmax(model(torch.tensor([[token]]), cache, last=True)[0, -1]))
            steps.append(time.perf_counter() - t0)
    return statistics.median(steps)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--file", required=True, help="a GGUF file")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--decode", type=int, default=64)
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args()
    prepare(args.threads)
    import torch

    from toycards.errors import ToycardsError

    torch.set_num_threads(args.threads)
    try:
        need = bytes_per_token(args.file)
        bandwidth = read_bandwidth(need, args.threads, args.repeats)
        step = decode_seconds(args.file, args.decode)
    except ToycardsError as e:
        sys.exit(f"bandwidth.py: {e}")
    floor = need / bandwidth
    print(
        f"{Path(args.file).name}: {need / 1e6:.0f} MB read a token; read bandwidth {bandwidth / 1e9:.1f} GB/s"
        f" on {args.threads} threads → floor {floor * 1e3:.2f} ms a token"
    )
    print(
        f"  torch target: {step * 1e3:.2f} ms a token (median of {args.decode}), ×{floor / step:.2f} of the"
        f" floor's speed ({need / step / 1e9:.1f} GB/s of weights)"
    )


if __name__ == "__main__":
    main()
