"""Benchmark: `toycards serve` against llama.cpp's server (`python -m llama_cpp.server`), over HTTP.

Each server runs in its own process on a free loopback port with the same thread count and the
same file; every concurrency level (--clients, default 1,4,16) sends that many clients at once,
each making --requests greedy completions of --max-tokens tokens on prompts of its own (after one
warm-up request). Printed per level and server: generated tokens per second over the level's wall
time (the tokens each reply's `usage` counts), the median request latency, and toycards' ratio to
llama.cpp from the same run. llama.cpp's server comes from llama-cpp-python in --llama-python (a
benchmark dependency, never a test or CI one); where it is not installed its column says so and
toycards runs alone.

    .venv/bin/python bench/serve.py [--file examples/tiny-llama.gguf] [--clients 1,4,16] \\
        [--requests 4] [--max-tokens 32] [--threads 2] [--parallel 4] [--llama-python PYTHON]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL_ID = "bench"  # the id both servers answer to
START_SECONDS = 300  # for a server to load its model and answer /v1/models


class Running:
    """A server process; `base` is its /v1 URL; `stop()` ends it."""

    def __init__(self, name: str, cmd: list[str], env: dict, log: Path, base: str | None = None) -> None:
        self.name, self.log = name, log
        with open(log, "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=err, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        self.base = base or self._announced()
        self._wait_ready()

    def _announced(self) -> str:
        """toycards prints its URL once it listens."""
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            found = re.search(r"at (http://\S+/v1) ", self.log.read_text())
            if found:
                return found.group(1)
            self._alive()
            time.sleep(0.05)
        raise SystemExit(f"{self.name}: no start line in {START_SECONDS} s")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.base + "/models", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            self._alive()
            time.sleep(0.2)
        raise SystemExit(f"{self.name}: not answering {self.base}/models after {START_SECONDS} s")

    def _alive(self) -> None:
        if self.proc.poll() is not None:
            raise SystemExit(f"{self.name} exited ({self.proc.returncode}):\n{self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def complete(base: str, prompt: str, max_tokens: int) -> tuple[int, float]:
    """One greedy completion: the tokens its usage counts, and its latency in seconds."""
    body = {"model": MODEL_ID, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    request = urllib.request.Request(
        base + "/completions", json.dumps(body).encode(), {"content-type": "application/json"}
    )
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        reply = json.load(response)
    return reply["usage"]["completion_tokens"], time.perf_counter() - start


def level(base: str, clients: int, requests: int, max_tokens: int) -> dict:
    """`clients` threads, each making `requests` completions in turn: tokens/s and median latency."""
    results: list[tuple[int, float]] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        for r in range(requests):
            done = complete(base, f"Client {c}, request {r}: once upon a time", max_tokens)
            with lock:
                results.append(done)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    tokens = sum(n for n, _ in results)
    return {"tok_s": tokens / wall, "latency_s": statistics.median(s for _, s in results), "tokens": tokens}


def llama_cpp_server(python: str) -> bool:
    """Whether `python` can run llama.cpp's server (llama-cpp-python with its `server` extra)."""
    probe = subprocess.run([python, "-c", "import llama_cpp.server"], capture_output=True)
    return probe.returncode == 0


def start_servers(args: argparse.Namespace, logs: Path) -> list[Running]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env |= {v: str(args.threads) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    toycards = [sys.executable, "-m", "toycards", "serve", args.file, "--port", "0", "--alias", MODEL_ID]
    toycards += ["--parallel", str(args.parallel), "--target", args.target]
    servers = [Running("toycards", toycards, env, logs / "toycards.log")]
    if llama_cpp_server(args.llama_python):
        port = free_port()
        llama = [args.llama_python, "-m", "llama_cpp.server", "--model", args.file, "--model_alias", MODEL_ID]
        llama += ["--host", "127.0.0.1", "--port", str(port), "--n_threads", str(args.threads)]
        llama += ["--n_ctx", str(args.ctx)]
        servers.append(Running("llama.cpp", llama, env, logs / "llama.log", f"http://127.0.0.1:{port}/v1"))
    else:
        print(f"llama.cpp: skipped (llama_cpp.server is not importable in {args.llama_python})")
    return servers


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--file", default=str(ROOT / "examples" / "tiny-llama.gguf"))
    p.add_argument("--clients", default="1,4,16", help="concurrency levels, comma-separated")
    p.add_argument("--requests", type=int, default=4, help="completions per client per level")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--parallel", type=int, default=4, help="toycards serve --parallel")
    p.add_argument("--target", choices=["numpy", "torch"], default="numpy", help="toycards serve --target")
    p.add_argument("--ctx", type=int, default=2048, help="llama.cpp's --n_ctx")
    p.add_argument("--llama-python", default=sys.executable, help="the interpreter with llama-cpp-python")
    args = p.parse_args()
    levels = [int(c) for c in args.clients.split(",")]

    with tempfile.TemporaryDirectory() as logs:
        servers = start_servers(args, Path(logs))
        try:
            table = {}
            for server in servers:
                complete(server.base, "warm up", args.max_tokens)
                table[server.name] = {
                    c: level(server.base, c, args.requests, args.max_tokens) for c in levels
                }
        finally:
            for server in servers:
                server.stop()

    print(f"{Path(args.file).name}: {args.requests} greedy completions of {args.max_tokens} tokens per client,"
          f" --threads {args.threads}")  # fmt: skip
    print(
        f"{'clients':>7}  "
        + "  ".join(f"{name + ' tok/s':>16} {'latency':>8}" for name in table)
        + "   ratio"
    )
    for c in levels:
        cells = "  ".join(f"{table[n][c]['tok_s']:16.1f} {table[n][c]['latency_s']:7.3f}s" for n in table)
        ratio = (
            f"   ×{table['toycards'][c]['tok_s'] / table['llama.cpp'][c]['tok_s']:.2f}"
            if "llama.cpp" in table
            else ""
        )
        print(f"{c:>7}  {cells}{ratio}")


if __name__ == "__main__":
    main()
