"""Benchmark: greedy decoding of an MLA-shaped deepseek2 file, toycards against llama.cpp, with the KV
cache each keeps per token.

The file is a random DeepSeek V2 model of tests/oracle (transformers' DeepseekV2ForCausalLM written
as llama.cpp's converter writes it: attn_k_b and attn_v_b, so llama.cpp runs the absorbed latent
attention and caches, per layer and token, the kv_lora_rank latent and the rope part), every block
dense (--dense, the default) so that the decode is the attention's. Each runner is a child process of
bench/vs_llama_cpp.py (toycards' torch target; llama.cpp from llama-cpp-python in --llama-python),
run in this one invocation. KV bytes per token: toycards' from `describe --memory` (the columns its
cache keeps, f16 or f32 per --kv-cache), llama.cpp's from the size it logs as it makes a context of
--ctx cells, divided by the cells; the formula is L · (kv_lora_rank + n_rot) · bytes per entry.

    .venv/bin/python bench/mla_decode.py --llama-python /tmp/llvenv/bin/python \
        [--d-model 256] [--layers 4] [--heads 8] [--kv-lora 128] [--prefill 64] [--decode 64]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from _setup import prepare


def build_file(args: argparse.Namespace, folder: Path) -> Path:
    """The random deepseek2 GGUF file of the oracle's V2 shape scaled to the arguments."""
    from oracle.hf_gguf import tiny_model, write_gguf

    shape = dict(
        hidden_size=args.d_model, num_attention_heads=args.heads, num_key_value_heads=args.heads,
        num_hidden_layers=args.layers, intermediate_size=4 * args.d_model, kv_lora_rank=args.kv_lora,
        q_lora_rank=args.kv_lora, qk_nope_head_dim=args.head_dim, qk_rope_head_dim=args.rope_dim,
        v_head_dim=args.head_dim, moe_intermediate_size=args.d_model, vocab_size=288,
        first_k_dense_replace=args.layers if args.dense else 1, max_position_embeddings=4096,
    )  # fmt: skip
    model, config = tiny_model("deepseek2", seed=0, **shape)
    return write_gguf(model, config, folder / "mla.gguf", "deepseek2", "F32")


def kv_per_token(path: Path, args: argparse.Namespace) -> dict[str, float | None]:
    """Bytes per token of each KV cache: toycards' (describe's resident cache at --ctx tokens) and
    llama.cpp's (its logged size over --ctx cells), with the formula's."""
    import gguf
    from kv_vs_llama_cpp import llama_cpp_sizes

    from toycards.inspect.describe import describe
    from toycards.inspect.memory import memory_report

    report = memory_report(describe(str(path)), [args.ctx], kv_type=args.kv_cache)
    mine = report.columns[0].toycards["kv_resident"] / args.ctx
    sizes = llama_cpp_sizes(args.llama_python, path, args.ctx, args.kv_cache)
    theirs = sum(sizes) * (1 << 20) / args.ctx if sizes else None
    f = gguf.GGUFReader(path)
    key = lambda k: int(f.fields[f"deepseek2.{k}"].contents())  # noqa: E731
    entry = 2 if args.kv_cache == "f16" else 4
    formula = key("block_count") * (key("attention.kv_lora_rank") + key("rope.dimension_count")) * entry
    return {"toycards": mine, "llama.cpp": theirs, "formula": formula}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--llama-python", default=os.environ.get("TOYCARDS_LLAMA_CPP_PYTHON", sys.executable))
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=32, help="qk_nope_head_dim = v_head_dim")
    p.add_argument("--rope-dim", type=int, default=16, help="qk_rope_head_dim (n_rot)")
    p.add_argument("--kv-lora", type=int, default=128, help="kv_lora_rank (and q_lora_rank)")
    p.add_argument("--dense", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--prefill", type=int, default=64)
    p.add_argument("--decode", type=int, default=64)
    p.add_argument("--ctx", type=int, default=1024, help="the context whose KV cache is measured")
    p.add_argument("--kv-cache", choices=("f16", "f32"), default="f16")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--weights", default="mapped")
    args = p.parse_args()
    prepare(args.threads)
    import vs_llama_cpp as vs

    with tempfile.TemporaryDirectory() as tmp:
        path = build_file(args, Path(tmp))
        ids = [1 + (7 * i) % 280 for i in range(args.prefill)]
        runs = {name: vs._spawn(py, which, path, ids, args) for name, py, which in (
            ("toycards (torch)", sys.executable, "toycards"), ("llama.cpp", args.llama_python, "llama"))}  # fmt: skip
        kv = kv_per_token(path, args)
    print(f"deepseek2 MLA: d_e {args.d_model}, L {args.layers}, H {args.heads}, kv_lora_rank {args.kv_lora}, "
          f"n_rot {args.rope_dim}; prefill {args.prefill}, decode {args.decode}, {args.threads} threads")  # fmt: skip
    print(f"{'runner':<18} {'prefill tok/s':>14} {'decode tok/s':>13} {'KV bytes/token':>15}")
    keys = {"toycards (torch)": "toycards", "llama.cpp": "llama.cpp"}
    for name, r in runs.items():
        per = kv[keys[name]]
        per_text = f"{per:,.0f}" if per is not None else "n/a"
        decode_rate = (args.decode - 1) / r["decode_s"] if r["decode_s"] else float("nan")
        print(f"{name:<18} {args.prefill / r['warm_prefill_s']:>14,.0f} {decode_rate:>13,.1f} {per_text:>15}")
    print(f"formula L · (kv_lora_rank + n_rot) · {args.kv_cache}: {kv['formula']:,} bytes/token")
    same = runs["toycards (torch)"]["tokens"] == runs["llama.cpp"]["tokens"]
    print(f"greedy tokens equal: {same}")


if __name__ == "__main__":
    main()
