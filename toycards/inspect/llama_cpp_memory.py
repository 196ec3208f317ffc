"""What llama.cpp would allocate for a bound card's cache: its rules, applied to what the card
keeps (footprint.py), for `describe --memory` (memory.py).

Owns: `llama_cpp_cells` (the KV cells of a layer: n_ctx padded to 256 per sequence; a layer whose
mask is a window of n_swa tokens ⌈min(n_ctx, n_swa + n_ubatch)/256⌉·256, llama.cpp's default
without `--swa-full`), `llama_cpp_cache` (K and V of each call the cache extends, in
`--cache-type-k/v`, ggml's row sizes; a recurrent state per stateful layer) and
`llama_cpp_recurrent` (n_embd_r + n_embd_s floats of a recurrent layer, read from the file's
ssm.* keys as llama-hparams.cpp does: its convolution state keeps one column fewer than the
card's window).
Leaves out: llama.cpp's compute buffer (ggml's graph allocator sizes it) and output buffer, and
the weights (mapped as stored: memory.py).
"""

from __future__ import annotations

from toycards.inspect.footprint import Footprint, Kept

# llama.cpp's constants (llama-context.cpp, llama-kv-cache-iswa.cpp, llama_context_default_params)
LLAMA_CPP_PAD = 256  # n_ctx, per sequence, and a sliding-window cache are padded to this many cells
LLAMA_CPP_UBATCH = 512  # n_ubatch (at most n_batch, itself at most the context asked for)
LLAMA_CPP_RECURRENT_TYPE_BYTES = 4  # r and s states are F32


def _pad(n: int, to: int = LLAMA_CPP_PAD) -> int:
    return -(-n // to) * to


def llama_cpp_cells(n: int, batch: int, window: int | None, swa_full: bool = False) -> int:
    """The KV cells llama.cpp gives a layer of one sequence's cache for a context of n tokens per
    sequence and `batch` sequences (llama-context.cpp: n_ctx padded to 256, then per sequence; a
    sliding-window layer, llama-kv-cache-iswa.cpp: ⌈min(n_ctx_seq, n_swa + n_ubatch)/256⌉·256).

    >>> llama_cpp_cells(2048, 1, None), llama_cpp_cells(300, 1, None), llama_cpp_cells(8192, 1, 512)
    (2048, 512, 1024)
    """
    n_ctx = _pad(n * batch)
    n_ctx_seq = _pad(n_ctx // batch)
    if window is None or swa_full:
        return n_ctx_seq
    n_ubatch = min(n * batch, LLAMA_CPP_UBATCH)
    return _pad(min(n_ctx_seq, window + n_ubatch))


def _row_bytes(kv_type: str, elements: int) -> int | None:
    """ggml_row_size: bytes of `elements` values of a cache type (None: not whole blocks)."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[kv_type.upper()]]
    return None if elements % block else elements // block * size


def llama_cpp_cache(fp: Footprint, n: int, kv_type: str, batch: int, recurrent: int | None) -> dict:
    """Bytes llama.cpp's memory takes for what `fp` says a pass keeps, at a context of n tokens of
    `batch` sequences: "kv" (the layers without a window), "kv_sliding" (those with one) and
    "recurrent" (`recurrent` bytes per stateful layer and sequence; None: unknown); K and V of
    None where a row is not whole blocks of `kv_type` (llama.cpp refuses such a cache)."""
    calls: dict[int, list[Kept]] = {}
    for k in fp.kept:
        if k.kind == "kv":
            calls.setdefault(k.call, []).append(k)
    out: dict[str, int | None] = {"kv": 0, "kv_sliding": 0}
    for kept in calls.values():
        cells = llama_cpp_cells(n, batch, kept[0].window)
        for k in kept[:2]:  # K and V
            row = _row_bytes(kv_type, k.elements.value)
            if row is None:
                out["kv"] = out["kv_sliding"] = None
                return out | {"recurrent": None}
            part = "kv_sliding" if kept[0].window is not None else "kv"
            out[part] += row * cells * batch
    layers = {k.layer for k in fp.kept if k.kind == "state"}
    if layers:
        out["recurrent"] = None if recurrent is None else len(layers) * recurrent * max(1, batch)
    else:
        out["recurrent"] = 0
    return out


def llama_cpp_recurrent(path) -> tuple[int, str] | None:
    """Bytes of one recurrent layer's r and s states for one sequence, as llama.cpp sizes them
    (llama-hparams.cpp n_embd_r, n_embd_s) from the file's ssm.* keys, and the values it read;
    None without them."""
    from gguf.constants import Keys

    from toycards.gguf.reader import open_gguf

    keys = {"d_conv": Keys.SSM.CONV_KERNEL, "d_inner": Keys.SSM.INNER_SIZE, "d_state": Keys.SSM.STATE_SIZE}
    with open_gguf(path) as f:
        arch = f.get("general.architecture")
        v = {name: f.get(key.format(arch=arch)) for name, key in keys.items()}
        v["n_group"] = f.get(Keys.SSM.GROUP_COUNT.format(arch=arch), 0)
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in v.values()):
        return None
    n_embd_r = max(v["d_conv"] - 1, 0) * (v["d_inner"] + 2 * v["n_group"] * v["d_state"])
    n_embd_s = v["d_state"] * v["d_inner"]
    return (n_embd_r + n_embd_s) * LLAMA_CPP_RECURRENT_TYPE_BYTES, ", ".join(
        f"{k} = {x}" for k, x in v.items()
    )
