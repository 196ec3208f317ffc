"""Benchmark: decoding an OLMoE-shaped mixture of experts, toycards' torch module against transformers.

The model has OLMoE-1B-7B's widths (d_e 2048, 64 experts of d_ff 1024 per layer, 8 per token,
16 heads, vocabulary 50304) with fewer layers (--layers, 2 by default: each layer's experts are
1.6 GB in float32). transformers builds it with random weights (`tests/oracle`, seed 0); the
parent process writes it to a temporary GGUF file the way llama.cpp's converter does. Then, for
--rounds rounds, a fresh child process per implementation, taking turns:

- toycards: `toycards.load(path, target="torch")`, its KV cache;
- transformers: the same model rebuilt from the same seed (eager attention), a DynamicCache.

Each child prefills the same prompt, decodes greedily --decode tokens one at a time and reports
the median seconds per decoding step and the tokens it chose. The parent prints the median of
each implementation's medians as tokens/s, the ratio (> 1: toycards is faster), and whether the
tokens agree.

`--layer` times one MoE layer instead, in one process: the card's steps as generated (every
expert on every token, weight 0 unless chosen), the kernel that generated code calls
(`runtime.torch.ops.moe`: tokens grouped per expert) and a dense gather of each token's chosen experts'
weights (`gathered_moe` below), for one token (decoding) and for --prefill tokens.

`--memory` writes the model as Q8_0 instead and prints the peak RSS (VmHWM) of a child process that
loads it and runs the prompt through it, once with the experts kept in their blocks (the default
load) and once with every weight dequantized to float32 (`dequantize=True`), beside the file's size.

    .venv/bin/python bench/moe.py [--layers 2] [--prefill 16] [--decode 16] [--rounds 3] [--threads 2]
    .venv/bin/python bench/moe.py --layer
    .venv/bin/python bench/moe.py --memory [--layers 1]

Measured on a shared 2-core CPU (torch 2.13, transformers 5.24, float32), 2026-12-01:
`--rounds 5 --prefill 8 --decode 16`: toycards 5.95 tok/s, transformers 4.04 tok/s, ×1.47, the
same greedy tokens (toycards faster in each of the 5 rounds). `--layer`, one token: the card's
steps 784 ms, grouped per expert 58 ms, gathered weights 414 ms; 16 tokens: 6.3 s, 1.9 s, 6.1 s.
Grouping tokens per expert is what generated code calls.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _setup import prepare

OLMOE_1B_7B = dict(  # allenai/OLMoE-1B-7B-0924's widths; num_hidden_layers from --layers
    hidden_size=2048,
    intermediate_size=1024,  # each expert's width
    num_attention_heads=16,
    num_key_value_heads=16,
    num_experts=64,
    num_experts_per_tok=8,
    vocab_size=50304,
    max_position_embeddings=4096,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    norm_topk_prob=False,
    tie_word_embeddings=False,
)


def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--prefill", type=int, default=16, help="prompt tokens")
    p.add_argument("--decode", type=int, default=16, help="tokens decoded greedily, one at a time")
    p.add_argument("--rounds", type=int, default=3, help="child processes per implementation")
    p.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--layer", action="store_true", help="time one MoE layer's three forms instead")
    p.add_argument("--memory", action="store_true", help="peak RSS of a Q8_0 file: kept vs float32")
    p.add_argument("--child", choices=("toycards", "transformers", "kept", "float"), help=argparse.SUPPRESS)
    p.add_argument("--gguf", help=argparse.SUPPRESS)
    return p.parse_args(argv)


ARGS = _parse_args() if __name__ == "__main__" else None
prepare(ARGS.threads if ARGS is not None else None)  # before numpy and torch are imported

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def shape(args: argparse.Namespace) -> dict:
    return {**OLMOE_1B_7B, "num_hidden_layers": args.layers}


def prompt(args: argparse.Namespace) -> np.ndarray:
    return np.random.default_rng(0).integers(0, OLMOE_1B_7B["vocab_size"], size=args.prefill)


# ── one child: prefill, then greedy decoding, timed per step ────────────────────────────
def child(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    ids = prompt(args)
    if args.child == "toycards":
        import toycards

        model = toycards.load(args.gguf, target="torch")
        cache = model.new_cache()

        def step(x: np.ndarray) -> int:
            return int(model(x[None, :], cache, last=True)[0, -1].argmax())
    else:
        import transformers
        from oracle.hf_gguf import tiny_model

        model, _ = tiny_model("olmoe", seed=0, **shape(args))  # the weights the file was written from
        cache = transformers.DynamicCache()
        name = "cache" if "cache" in model.forward.__code__.co_varnames else "past_key_values"

        def step(x: np.ndarray) -> int:
            out = model(torch.as_tensor(x)[None, :], **{name: cache}, use_cache=True)
            return int(out.logits[0, -1].argmax())

    times, tokens = [], []
    with torch.inference_mode():
        tokens.append(step(ids))
        for _ in range(args.decode):
            t0 = time.perf_counter()
            tokens.append(step(np.asarray([tokens[-1]])))
            times.append(time.perf_counter() - t0)
    print(json.dumps({"step_s": statistics.median(times), "tokens": tokens}))


def run_child(args: argparse.Namespace, which: str, path: Path) -> dict:
    cmd = [sys.executable, __file__, "--child", which, "--gguf", str(path), "--layers", str(args.layers),
           "--prefill", str(args.prefill), "--decode", str(args.decode), "--threads", str(args.threads)]  # fmt: skip
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def race(args: argparse.Namespace) -> None:
    import transformers
    from oracle.hf_gguf import tiny_model, write_gguf

    t0 = time.perf_counter()
    hf, config = tiny_model("olmoe", seed=0, **shape(args))
    n_params = sum(p.numel() for p in hf.parameters())
    print(
        f"OLMoE-1B-7B-shaped, L={args.layers}: {n_params / 1e9:.2f}B parameters (F32), 64 experts, top-8, "
        f"prefill {args.prefill}, decode {args.decode}, {args.threads} threads, torch {torch.__version__}, "
        f"transformers {transformers.__version__}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = write_gguf(hf, config, Path(tmp) / "olmoe-shaped.gguf", "olmoe", "F32")
        del hf
        print(f"built and wrote {path.stat().st_size / 2**30:.1f} GiB in {time.perf_counter() - t0:.0f} s")
        runs: dict[str, list[dict]] = {"toycards": [], "transformers": []}
        for r in range(args.rounds):
            for which in runs:
                runs[which].append(run_child(args, which, path))
                print(f"  round {r + 1} {which:<12} {1 / runs[which][-1]['step_s']:6.2f} tok/s")
    speed = {w: 1 / statistics.median(run["step_s"] for run in rs) for w, rs in runs.items()}
    for which, tok_s in speed.items():
        print(f"  {which:<12} decode {tok_s:6.2f} tok/s (median of {args.rounds} processes)")
    print(
        f"ratio toycards / transformers: ×{speed['toycards'] / speed['transformers']:.2f} (> 1: toycards is faster)"
    )
    same = all(a["tokens"] == b["tokens"] for a, b in zip(runs["toycards"], runs["transformers"]))
    print(f"greedy tokens equal: {same}")


# ── memory: the experts in their blocks against float32 ──────────────────────────────────
def memory_child(args: argparse.Namespace) -> None:
    """Load the file (kept, or dequantized), run the prompt, print this process's peak RSS in MiB."""
    import toycards

    model = toycards.load(args.gguf, target="torch", dequantize=args.child == "float")
    with torch.inference_mode():
        model(torch.as_tensor(prompt(args))[None, :])
    with open("/proc/self/status", encoding="ascii") as fh:
        peak_kib = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    print(json.dumps({"peak_rss_mib": peak_kib / 1024}))


def memory(args: argparse.Namespace) -> None:
    from oracle.hf_gguf import tiny_model, write_gguf

    hf, config = tiny_model("olmoe", seed=0, **shape(args))
    with tempfile.TemporaryDirectory() as tmp:
        path = write_gguf(hf, config, Path(tmp) / "olmoe-shaped-q8_0.gguf", "olmoe", "Q8_0")
        del hf
        print(f"OLMoE-1B-7B-shaped, L={args.layers}, Q8_0: file {path.stat().st_size / 2**20:.0f} MiB")
        for which in ("kept", "float"):
            peak = run_child(args, which, path)["peak_rss_mib"]
            what = "experts in their blocks" if which == "kept" else "dequantize=True (float32)"
            print(f"  {what:<26} peak RSS {peak:8.0f} MiB (load, then a {args.prefill}-token prompt)")


# ── one layer, three forms ───────────────────────────────────────────────────────────────
def gathered_moe(X, W_r, W_gate, W_up, W_down, k, norm):
    """The other vectorisation: each token's k experts' weights gathered (copied) per token, then
    batched matrix-vector products. X [N, d_e] → [N, d_e]."""
    from toycards.runtime.torch import ops

    P = torch.softmax(F.linear(X, W_r), dim=-1)
    chosen = ops.topk(P, k) - 1  # (N, k)
    G = P.gather(-1, chosen)
    if norm == "renormalise":
        G = G / G.sum(-1, keepdim=True)
    g = torch.einsum("nkfd,nd->nkf", W_gate[chosen], X)
    u = torch.einsum("nkfd,nd->nkf", W_up[chosen], X)
    return torch.einsum("nkdf,nkf,nk->nd", W_down[chosen], F.silu(g) * u, G)


def layer(args: argparse.Namespace) -> None:
    from toycards.codegen import generate_source
    from toycards.library import library_card
    from toycards.runtime.torch import ops

    torch.set_num_threads(args.threads)
    namespace: dict = {}
    exec(compile(generate_source(library_card("olmoe"), "torch"), "<olmoe>", "exec"), namespace)
    E, d_e, d_ff, k = 64, OLMOE_1B_7B["hidden_size"], OLMOE_1B_7B["intermediate_size"], 8
    gen = torch.Generator().manual_seed(0)
    W = [torch.randn(E, d_e, generator=gen)] + [
        torch.randn(E, *s, generator=gen) * 0.02 for s in ((d_ff, d_e), (d_ff, d_e), (d_e, d_ff))
    ]

    def card_steps(X, *w):
        ops.fast = False
        try:
            return namespace["MoE"](X, *w)
        finally:
            ops.fast = True

    forms = {
        "card steps (dense)": card_steps,
        "grouped per expert": ops.moe,
        "gathered weights": gathered_moe,
    }
    print(f"one MoE layer: 64 experts of {d_ff}×{d_e}, top-8, {args.threads} threads (median ms of 5)")
    with torch.inference_mode():
        for n in (1, args.prefill):
            X = torch.randn(n, d_e, generator=gen)
            want = ops.moe(X, *W, k, "keep")
            for name, fn in forms.items():
                times = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    got = fn(X if fn is not card_steps else X[None], *W, k, "keep")
                    times.append(time.perf_counter() - t0)
                err = (got.reshape(want.shape) - want).abs().max().item()
                print(
                    f"  {n:3d} token(s)  {name:<20} {1e3 * statistics.median(times):8.1f} ms  max |Δ| {err:.1e}"
                )


if __name__ == "__main__":
    if ARGS.child in ("kept", "float"):
        memory_child(ARGS)
    elif ARGS.child:
        child(ARGS)
    elif ARGS.memory:
        memory(ARGS)
    elif ARGS.layer:
        layer(ARGS)
    else:
        race(ARGS)
