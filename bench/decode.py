"""Benchmark: prefill and greedy decoding, toycards' generated modules against transformers.

A SmolLM2-135M-shaped Llama (d_e 576, L 30, H 9, H_kv 3, d_ff 1536, N_V 49152, tied output; or
with `--shape llama-1b` Llama 3.2 1B's shape) with random F32 weights is built with transformers,
written to a temporary GGUF the way llama.cpp's converter writes it (`tests/oracle`), and run in
the same process, with the same thread count (torch.set_num_threads and the BLAS thread
variables), on the same device (`--device cuda`: both on the GPU, float32 without TF32), by:

- toycards' generated torch module (`toycards.load(path, target="torch")`, KV cache),
- transformers with eager attention and with SDPA (a DynamicCache, the same loop),
- toycards' generated NumPy module (on the CPU runs only).

Each prefills the same prompt, then decodes greedily one token at a time; prefill is timed as
the best of --repeat passes (each with a fresh cache), decoding once (the first new token comes
from the prefill, so decoding speed is over --decode − 1 steps). The implementations take turns
step by step, so that load from other processes on a shared machine hits them alike. Prints
tokens/s, the ratios against transformers, and whether every implementation chose the same tokens.

    .venv/bin/python bench/decode.py [--prefill 128] [--decode 64] [--threads 2] [--skip-numpy]
        [--device cuda] [--shape smollm2-135m|llama-1b]
"""

from __future__ import annotations

import argparse
import copy
import inspect
import os
import tempfile
import time
from pathlib import Path

from _setup import prepare

SMOLLM2_135M = dict(  # HuggingFaceTB/SmolLM2-135M's shape
    hidden_size=576,
    num_attention_heads=9,
    num_key_value_heads=3,
    num_hidden_layers=30,
    intermediate_size=1536,
    vocab_size=49152,
    max_position_embeddings=2048,
    tie_word_embeddings=True,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
)


SHAPES = ("smollm2-135m", "llama-1b")


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prefill", type=int, default=128, help="prompt tokens")
    p.add_argument("--decode", type=int, default=64, help="tokens generated greedily")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--repeat", type=int, default=2, help="prefill passes; the best is kept")
    p.add_argument("--layers", type=int, default=0, help="fewer layers for a quick run (0: the shape's)")
    p.add_argument("--skip-numpy", action="store_true")
    p.add_argument("--device", default="cpu", help="cpu, or cuda: toycards and transformers both there")
    p.add_argument("--shape", choices=SHAPES, default="smollm2-135m")
    return p.parse_args()


ARGS = _parse_args() if __name__ == "__main__" else None
prepare(ARGS.threads if ARGS is not None else None)  # before numpy and torch are imported

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from llama_1b import N_CTX  # noqa: E402
from llama_1b import SHAPE as LLAMA_1B  # noqa: E402
from oracle.hf_gguf import tiny_model, write_gguf  # noqa: E402

import toycards  # noqa: E402

# transformers 5.2x renamed `past_key_values` to `cache`
CACHE_ARG = (
    "cache"
    if "cache" in inspect.signature(transformers.LlamaForCausalLM.forward).parameters
    else "past_key_values"
)


def config_of(shape: str) -> dict:
    """transformers' LlamaConfig arguments for a shape: SmolLM2-135M's, or Llama 3.2 1B's as
    tests/helpers/llama_1b.py writes it (its RoPE scaling left out: the speed is the same)."""
    if shape == "smollm2-135m":
        return dict(SMOLLM2_135M)
    hp = LLAMA_1B
    return dict(
        hidden_size=hp.d_e, num_attention_heads=hp.n_head, num_key_value_heads=hp.n_head_kv,
        num_hidden_layers=hp.n_layer, intermediate_size=hp.d_ff, vocab_size=hp.n_vocab,
        max_position_embeddings=N_CTX, tie_word_embeddings=True, rope_theta=hp.rope_base, rms_norm_eps=1e-5,
    )  # fmt: skip


def where(device: str) -> str:
    """The device in words: the GPU's name on CUDA."""
    return torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"


class Toycards:
    """Greedy steps with a toycards model (either target) and its KV cache."""

    def __init__(self, model) -> None:
        self.model = model

    def new_cache(self):
        return self.model.new_cache()

    def step(self, ids: np.ndarray, cache) -> int:
        out = self.model(ids[None, :], cache)  # logits [1, T, N_V]
        return int(out[0, -1].argmax())  # (on a GPU, .item() waits for the step to finish)


class Transformers:
    """The same with a transformers model and its DynamicCache."""

    def __init__(self, model, device: str) -> None:
        self.model, self.device = model, device

    def new_cache(self):
        return transformers.DynamicCache()

    def step(self, ids: np.ndarray, cache) -> int:
        x = torch.as_tensor(ids, device=self.device)[None, :]
        out = self.model(x, **{CACHE_ARG: cache}, use_cache=True)
        return int(out.logits[0, -1].argmax())


def race(
    runners: dict[str, object], prompt: np.ndarray, n_new: int, repeat: int
) -> dict[str, tuple[float, float, list[int]]]:
    """(best prefill seconds, total decode seconds, tokens) per runner.

    The runners take turns, one prefill or one decoding step each, so that a machine shared with
    other work slows them all alike.
    """
    prefill = dict.fromkeys(runners, float("inf"))
    decode = dict.fromkeys(runners, 0.0)
    caches, tokens = {}, {}
    with torch.inference_mode():
        for r in runners.values():  # warm up: allocations, kernel selection
            cache = r.new_cache()
            r.step(r.step(prompt[:8], cache) * np.ones(1, np.int64), cache)
        for _ in range(repeat):
            for name, r in runners.items():
                caches[name] = r.new_cache()
                t0 = time.perf_counter()
                tokens[name] = [r.step(prompt, caches[name])]
                prefill[name] = min(prefill[name], time.perf_counter() - t0)
        for _ in range(n_new - 1):
            for name, r in runners.items():
                t0 = time.perf_counter()
                tokens[name].append(r.step(np.asarray([tokens[name][-1]]), caches[name]))
                decode[name] += time.perf_counter() - t0
    return {name: (prefill[name], decode[name], tokens[name]) for name in runners}


def main() -> None:
    args = ARGS
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    shape = config_of(args.shape)
    shape["num_hidden_layers"] = args.layers or shape["num_hidden_layers"]
    t0 = time.perf_counter()
    hf, config = tiny_model("llama", seed=0, **shape)
    n_params = sum(p.numel() for p in hf.parameters())
    prompt = np.random.default_rng(0).integers(0, config.vocab_size, size=args.prefill)
    print(
        f"{args.shape}-shaped Llama, L={shape['num_hidden_layers']}: {n_params / 1e6:.1f}M parameters (F32), "
        f"prefill {args.prefill}, decode {args.decode}, {args.threads} threads, {where(args.device)}, "
        f"torch {torch.__version__}, transformers {transformers.__version__}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = write_gguf(hf, config, Path(tmp) / f"{args.shape}-shaped.gguf", "llama", "F32")
        print(f"built and wrote {path.stat().st_size / 2**20:.0f} MiB in {time.perf_counter() - t0:.1f} s")
        sdpa = copy.deepcopy(hf)
        sdpa.set_attn_implementation("sdpa")
        hf.set_attn_implementation("eager")
        hf.to(args.device), sdpa.to(args.device)
        runners = {
            "toycards torch": Toycards(toycards.load(path, target="torch", device=args.device)),
            "transformers eager": Transformers(hf, args.device),
            "transformers sdpa": Transformers(sdpa, args.device),
        }
        if not args.skip_numpy and args.device == "cpu":
            runners["toycards numpy"] = Toycards(toycards.load(path, target="numpy"))
        runs = race(runners, prompt, args.decode, args.repeat)
    for name, (prefill, decode, _) in runs.items():
        print(
            f"  {name:<20} prefill {args.prefill / prefill:8.1f} tok/s   decode {(args.decode - 1) / decode:7.2f} tok/s"
        )
    report(runs, args)


def report(runs: dict[str, tuple[float, float, list[int]]], args: argparse.Namespace) -> None:
    base = runs["toycards torch"]
    print("ratios (> 1: toycards torch is faster)")
    for name in ("transformers eager", "transformers sdpa"):
        prefill, decode, _ = runs[name]
        print(
            f"  toycards torch / {name:<19} prefill ×{prefill / base[0]:.2f}   decode ×{decode / base[1]:.2f}"
        )
    if "toycards numpy" in runs:
        prefill, decode, _ = runs["toycards numpy"]
        print(
            f"  toycards numpy / toycards torch      prefill ×{base[0] / prefill:.2f}   decode ×{base[1] / decode:.2f}"
        )
    tokens = {name: run[2] for name, run in runs.items()}
    agree = {name: sum(a == b for a, b in zip(t, base[2])) for name, t in tokens.items()}
    print(
        "greedy tokens equal to toycards torch's: "
        + ", ".join(f"{n} {k}/{args.decode}" for n, k in agree.items())
    )


if __name__ == "__main__":
    main()
