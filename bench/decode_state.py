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
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from _setup import prepare

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
    p.add_argument("--contexts", default="64,512,2048", help="context lengths, comma-separated")
    p.add_argument("--steps", type=int, default=16, help="decoding steps timed at each context")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--target", default="numpy", choices=("numpy", "torch"))
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
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


if __name__ == "__main__":
    main()
