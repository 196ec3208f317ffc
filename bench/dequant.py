"""Benchmark: dequantisation to float32, toycards.runtime.dequant against gguf.quants.

For each type with a kernel of our own (and a few that pass through to gguf.quants, as a
control), quantises a 4096×4096 random matrix (K-types: random blocks) and times, in the
same run, `dequantize(raw, type, shape)` and `gguf.quants.dequantize(raw, type)`; best of
--repeat, results checked equal.

    .venv/bin/python bench/dequant.py [--repeat 5] [--n 4096]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import quants

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "helpers")]

from gguf_factory import random_blocks  # noqa: E402

from toycards.gguf.dequant import KERNELS, dequantize  # noqa: E402

TYPES = [Q.F16, Q.BF16, *(Q(t) for t in KERNELS), Q.Q4_K, Q.Q6_K]


def best_of(repeat: int, fn) -> tuple[float, np.ndarray]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--n", type=int, default=4096, help="matrix side")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    shape = (args.n, args.n)
    x = rng.standard_normal(shape).astype(np.float32)
    print(f"{args.n}×{args.n} float32 out, best of {args.repeat}; ms; ratio = gguf.quants / ours")
    print(f"{'type':6} {'path':12} {'ours':>8} {'gguf':>8} {'ratio':>6}")
    for t in TYPES:
        raw = random_blocks(t, shape, rng) if t in (Q.Q4_K, Q.Q6_K) else quants.quantize(x, t)
        ours, a = best_of(args.repeat, lambda r=raw, t=t: dequantize(r, t, shape))
        theirs, b = best_of(args.repeat, lambda r=raw, t=t: quants.dequantize(r, t))
        assert np.array_equal(a, b.reshape(shape), equal_nan=True), t.name
        path = "own kernel" if t in KERNELS or t == Q.BF16 else "cast" if t == Q.F16 else "gguf.quants"
        print(f"{t.name:6} {path:12} {ours * 1e3:8.1f} {theirs * 1e3:8.1f} {theirs / ours:5.1f}×")


if __name__ == "__main__":
    main()
