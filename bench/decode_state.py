"""Benchmark: a decoding step's cost against the context length, for a recurrent card and an attention card.

A card whose layers carry a `State:` (the prelude's causal_conv and selective_scan, the shape of a
Mamba mixer) decodes a token from its state alone, so a step should cost the same at every
context; an attention card of the same width reads every cached key and value, so its step grows
with the context. Both are built from card text with random weights (`toycards.load(text)`), the
same width (--width), layers (--layers) and vocabulary, in the same process, on the same target.

For each context c in --contexts: a fresh cache is filled with c tokens in one prefill pass, then
--steps decoding steps (the next tokens fixed, so that both cards do the same work) are timed
one by one, after a warm-up run of each card; the median milliseconds per step is printed. Then, per card, the step at
the longest context over the step at the shortest (×1.0: flat), and the attention card's step
over the recurrent card's at each context.

    .venv/bin/python bench/decode_state.py [--contexts 64,512,2048] [--steps 16] [--width 128]
        [--layers 2] [--target numpy|torch] [--threads 2]

--arch mamba2 compares with llama.cpp instead: a Mamba-2-shaped GGUF file with random weights (the
oracle's Mamba2ForCausalLM at d_e = --width, --layers blocks, d_inner 2·d_e in heads of --head-dim
channels, --groups groups, d_state --state; written as llama.cpp's converter writes it, --ftype) in a
temporary folder; toycards (--target) and llama.cpp (llama-cpp-python in --llama-python) each decode
it in a process of their own, one after the other (--rounds times, alternating), with --threads
threads: for each context, a prefill of that many tokens on an empty state, then --steps single-token
steps, each timed. The table shows each one's median milliseconds per token over all rounds,
toycards' over llama.cpp's, and each one's step at the longest context over its step at the shortest
(×1.0: flat).

    .venv/bin/python bench/decode_state.py --arch mamba2 --llama-python /path/to/venv/bin/python \
        [--contexts 128,1024,4096] [--steps 16] [--width 128] [--layers 2] [--state 64] [--head-dim 32]
        [--groups 1] [--ftype F32] [--target torch] [--threads 2] [--rounds 3]
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

from _setup import ROOT, prepare

RECURRENT = """toycards 1

Algorithm: P ← Recurrent(x | θ)
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{N_V×ℓ}
Hyperparameters:
  L ∈ ℕ = LAYERS  from "{arch}.block_count"
  d ∈ ℕ = WIDTH  from "{arch}.embedding_length"
  N_V ∈ ℕ = 256
Parameters:
  E ∈ ℝ^{d×N_V}  from "token_embd.weight"^⊺
  for l ∈ [L], in "blk.{l-1}.":
    w_l ∈ ℝ^{d×4}  from "conv.weight"
    b_l ∈ ℝ^{d}  from "conv.bias"
    A_l ∈ ℝ^{d×16}  from "ssm_a"
    D_l ∈ ℝ^{d}  from "ssm_d"
    W_b^l, W_c^l ∈ ℝ^{16×d}  from "b.weight", "c.weight"
  U ∈ ℝ^{N_V×d}  from "output.weight"
1  ℓ ← length(x)
2  for t ∈ [ℓ]: e_t ← E[:, x[t]]
3  X ← [e_1, …, e_ℓ]
4  for l = 1, …, L do
5    V ← tanh(causal_conv(X | w_l, b_l))
6    X ← X + selective_scan(V, sigmoid(X), W_b^l · V, W_c^l · V | −(A_l ⊙ A_l), D_l)
7  end
8  return P = softmax(U · X)
"""

ATTENTION = """toycards 1

Algorithm: P ← Attending(x | θ)
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{N_V×ℓ}
Hyperparameters:
  L ∈ ℕ = LAYERS  from "{arch}.block_count"
  d ∈ ℕ = WIDTH  from "{arch}.embedding_length"
  N_V ∈ ℕ = 256
Parameters:
  E ∈ ℝ^{d×N_V}  from "token_embd.weight"^⊺
  for l ∈ [L], in "blk.{l-1}.":
    W_q^l, W_k^l, W_v^l ∈ ℝ^{d×d}  from "attn_q.weight", "attn_k.weight", "attn_v.weight"
  U ∈ ℝ^{N_V×d}  from "output.weight"
1  ℓ ← length(x)
2  for t ∈ [ℓ]: e_t ← E[:, x[t]]
3  X ← [e_1, …, e_ℓ]
4  for l = 1, …, L do
5    X ← X + attention(W_q^l · X, W_k^l · X, W_v^l · X | Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧)
6  end
7  return P = softmax(U · X)
"""


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--contexts", help="context lengths, comma-separated (64,512,2048; mamba2: 128,1024,4096)")
    p.add_argument("--steps", type=int, default=16, help="decoding steps timed at each context")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--target", default="numpy", choices=("numpy", "torch"))
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--arch", default="cards", choices=("cards", "mamba2"), help="mamba2: against llama.cpp")
    p.add_argument("--llama-python", default=os.environ.get("TOYCARDS_LLAMA_CPP_PYTHON", sys.executable))
    p.add_argument("--state", type=int, default=64, help="mamba2: d_state")
    p.add_argument("--head-dim", type=int, default=32, help="mamba2: channels per head")
    p.add_argument("--groups", type=int, default=1, help="mamba2: groups of heads sharing B and C")
    p.add_argument("--ftype", default="F32", choices=("F32", "F16", "Q8_0"), help="mamba2: the file's type")
    p.add_argument("--rounds", type=int, default=1, help="mamba2: runs of each, alternating")
    p.add_argument("--child", choices=("toycards", "llama"), help=argparse.SUPPRESS)
    p.add_argument("--file", help=argparse.SUPPRESS)
    return p.parse_args()


def step_ms(model, ids, context: int, steps: int) -> float:
    """The median milliseconds of a decoding step after a prefill of `context` tokens."""
    cache = model.new_cache()
    model._forward_numpy(ids[None, :context], cache, last=True)
    times = []
    for k in range(context, context + steps):
        t0 = time.perf_counter()
        model._forward_numpy(ids[None, k : k + 1], cache, last=True)
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main() -> None:
    args = _parse_args()
    prepare(args.threads)
    args.contexts = args.contexts or ("128,1024,4096" if args.arch == "mamba2" else "64,512,2048")
    if args.child:
        print(json.dumps(child_steps(args)))
    elif args.arch == "mamba2":
        against_llama_cpp(args)
    else:
        cards(args)


def cards(args: argparse.Namespace) -> None:
    """The recurrent card against the attention card, both toycards, in this process."""
    import warnings

    import numpy as np

    from toycards.models.load import load
    from toycards.runtime.model_base import CacheRecomputes

    if args.target == "torch":
        import torch

        torch.set_num_threads(args.threads)
    warnings.simplefilter("error", CacheRecomputes)  # neither card may decode by rereading
    contexts = [int(c) for c in args.contexts.split(",")]
    models = {
        name: load(
            text.replace("LAYERS", str(args.layers)).replace("WIDTH", str(args.width)), target=args.target
        )
        for name, text in (("recurrent (State)", RECURRENT), ("attention (KV cache)", ATTENTION))
    }
    ids = np.random.default_rng(0).integers(0, 256, max(contexts) + args.steps)
    print(f"target {args.target}, width {args.width}, {args.layers} layers, {args.threads} threads")
    print(f"{'context':>8}  " + "  ".join(f"{name:>22}" for name in models) + "  attention / recurrent")
    table = {name: [] for name in models}
    for m in models.values():  # first passes build what later ones reuse (kernels, buffers)
        step_ms(m, ids, contexts[0], args.steps)
    for c in contexts:
        for name, m in models.items():
            table[name].append(step_ms(m, ids, c, args.steps))
        row = "  ".join(f"{table[n][-1]:>19.3f} ms" for n in models)
        ratio = table["attention (KV cache)"][-1] / table["recurrent (State)"][-1]
        print(f"{c:>8}  {row}  ×{ratio:.2f}")
    for name, ms in table.items():
        print(f"{name}: step at {contexts[-1]} tokens / step at {contexts[0]} = ×{ms[-1] / ms[0]:.2f}")


# ── --arch mamba2: toycards against llama.cpp on one Mamba-2-shaped file ─────────────────
def mamba2_file(folder: Path, args: argparse.Namespace) -> Path:
    """A Mamba-2 GGUF file with random weights, as llama.cpp's converter writes it (tests/oracle)."""
    from oracle.hf_gguf import tiny_model, write_gguf

    d_inner = 2 * args.width
    shape = dict(hidden_size=args.width, num_hidden_layers=args.layers, state_size=args.state,
                 head_dim=args.head_dim, num_heads=d_inner // args.head_dim, n_groups=args.groups,
                 vocab_size=1024, chunk_size=256)  # fmt: skip
    model, config = tiny_model("mamba2", **shape)
    return write_gguf(model, config, folder / "mamba2.gguf", "mamba2", args.ftype)


def child_steps(args: argparse.Namespace) -> dict[str, list[float]]:
    """In a process of its own: per context, the seconds of each of --steps single-token steps after
    a prefill of that many tokens on an empty state."""
    import numpy as np

    contexts = [int(c) for c in args.contexts.split(",")]
    ids = np.random.default_rng(0).integers(0, 1000, max(contexts) + args.steps).tolist()
    step, restart = (toycards_runner if args.child == "toycards" else llama_runner)(args, len(ids))
    times = {}
    for c in contexts:
        restart()
        step(ids[:c])
        times[str(c)] = []
        for k in range(c, c + args.steps):
            t0 = time.perf_counter()
            step(ids[k : k + 1])
            times[str(c)].append(time.perf_counter() - t0)
    return times


def toycards_runner(args: argparse.Namespace, n_ctx: int):
    """`step(ids)` (a pass through toycards' cache, the last token's logits) and `restart()`."""
    import warnings

    import numpy as np

    from toycards.models.load import load
    from toycards.runtime.model_base import CacheRecomputes

    warnings.simplefilter("error", CacheRecomputes)  # a step that rereads the context is a failure here
    if args.target == "torch":
        import torch

        torch.set_num_threads(args.threads)
        torch.set_grad_enabled(False)
    model = load(args.file, target=args.target)
    cache = model.new_cache()
    model._forward_numpy(np.array([[1, 2, 3]]), cache, last=True)  # warm-up: kernels, buffers
    return (lambda ids: model._forward_numpy(np.array([ids]), cache, last=True)), cache.reset


def llama_runner(args: argparse.Namespace, n_ctx: int):
    """`step(ids)` (llama.cpp's eval, the last token's logits read) and `restart()`."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=args.file, n_ctx=n_ctx + 8, n_batch=512, n_threads=args.threads,
                          n_threads_batch=args.threads, verbose=False)  # fmt: skip
    llm.eval([1, 2, 3])  # warm-up, as toycards'
    n_vocab = llm.n_vocab()

    def step(ids: list[int]) -> float:
        llm.eval(ids)
        return llama_cpp.llama_get_logits_ith(llm.ctx, -1)[n_vocab - 1]

    return step, llm.reset


def _spawn(python: str, which: str, path: Path, args: argparse.Namespace) -> dict[str, list[float]]:
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(ROOT)}
    cmd = [python, __file__, "--child", which, "--file", str(path), "--contexts", args.contexts,
           "--steps", str(args.steps), "--threads", str(args.threads), "--target", args.target]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if done.returncode != 0:
        sys.exit(f"{which} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def against_llama_cpp(args: argparse.Namespace) -> None:
    probe = subprocess.run([args.llama_python, "-c", "import llama_cpp"], capture_output=True)
    if probe.returncode != 0:
        sys.exit(f"no llama-cpp-python in {args.llama_python} (--llama-python)")
    contexts = args.contexts.split(",")
    runs: dict[str, dict[str, list[float]]] = {"toycards": {c: [] for c in contexts}}
    runs["llama.cpp"] = {c: [] for c in contexts}
    with tempfile.TemporaryDirectory() as folder:
        path = mamba2_file(Path(folder), args)
        for _ in range(args.rounds):  # alternating, so that a busy spell of the machine falls on both
            for name, python, child in (
                ("toycards", sys.executable, "toycards"),
                ("llama.cpp", args.llama_python, "llama"),
            ):
                for c, times in _spawn(python, child, path, args).items():
                    runs[name][c] += times
    ms = {name: [1000 * statistics.median(times[c]) for c in contexts] for name, times in runs.items()}
    d_i = 2 * args.width
    print(f"mamba2 {args.ftype}: d_e {args.width}, {args.layers} blocks, d_inner {d_i} in {d_i // args.head_dim} "
          f"heads of {args.head_dim}, {args.groups} group(s), d_state {args.state}; toycards {args.target}, "
          f"{args.threads} threads, median of {args.rounds} × {args.steps} steps")  # fmt: skip
    print(f"{'context':>8}  {'toycards ms/token':>18}  {'llama.cpp ms/token':>19}  toycards / llama.cpp")
    for i, c in enumerate(contexts):
        ours, theirs = ms["toycards"][i], ms["llama.cpp"][i]
        print(f"{c:>8}  {ours:>18.3f}  {theirs:>19.3f}  ×{ours / theirs:.2f}")
    for name, row in ms.items():
        print(f"{name}: step at {contexts[-1]} tokens / step at {contexts[0]} = ×{row[-1] / row[0]:.2f}")


if __name__ == "__main__":
    main()
