"""A Llama-3.2-1B-shaped GGUF file of random K-quant weights, for the tests and the benchmarks.

Owns: `write_llama_1b(path)`: the 1.24 B-parameter shape of Llama 3.2 1B (`SHAPE`: d_e 2048,
16 layers, 32 heads, 8 KV heads, d_ff 8192, 128,256 tokens, tied embeddings, RoPE base 500,000 with
Llama 3's `rope_freqs.weight` factors, RMSNorm ε 1e-5), every matrix as random Q4_K blocks (or
Q5_K, `mix="Q5_K"`; or llama.cpp's Q4_K_M or Q5_K_M mix, `mix="Q4_K_M"`, `"Q5_K_M"`), norms F32
ones, and a byte-level BPE vocabulary of exactly 128,256 tokens (tests/oracle/vocab.py) that
toycards and llama.cpp both read. The blocks are random bytes written straight to the file a
slice at a time (nothing is quantized; memory stays at one slice), so the ~0.7 GB file takes about
a second. Leaves out: real weights, and checking the file
(the tests and bench/vs_llama_cpp.py do that).

Random blocks decode to finite weights of about N(0, 0.02²)'s size: each block's float16 scales are
drawn near `D_SCALE[type]` (Q4_K: w = d·sc·q − dmin·m with sc, m, q uniform 6- and 4-bit values,
dmin ≈ 7.5·d so that w is about centred; Q5_K the same with 5-bit q and dmin ≈ 15.5·d; Q6_K:
w = d·s·(q − 32) with s a random int8), which keeps the activations finite through the 16 layers.

>>> path = write_llama_1b(tmp / "llama-1b.Q4_K.gguf")               # doctest: +SKIP
>>> path.stat().st_size / 2**20                                      # doctest: +SKIP
665.8...
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from gguf import GGML_QUANT_SIZES, MODEL_TENSOR, TENSOR_NAMES
from gguf_factory import Q, RawGGUF, RawKV, V, layout, llama_hparams, llama_inventory
from oracle.vocab import bpe_vocab_kv

# Llama 3.2 1B (meta-llama/Llama-3.2-1B config.json)
SHAPE = SimpleNamespace(
    n_layer=16, d_e=2048, n_head=32, n_head_kv=8, d_ff=8192, n_vocab=128256, rope_base=500000.0,
    # rope_scaling: llama3, factor 32, low/high frequency factors 1 and 4, original context 8192
    rope_factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_context=8192,
)  # fmt: skip
N_CTX = 4096  # the file's context_length: Llama 3.2 says 131072; a smaller one keeps caches small

# float16 block scales: w's standard deviation about 0.02 (see the module docstring)
D_SCALE = {Q.Q4_K: 8e-5, Q.Q5_K: 4e-5, Q.Q6_K: 1.5e-5}
# E[sc·q] = 31.5·E[q] = E[m]·(dmin / d): dmin = E[q]·d centres w (Q4_K: E[q] = 7.5; Q5_K: 15.5)
DMIN_OVER_D = {Q.Q4_K: 7.5, Q.Q5_K: 15.5}
SCALE_OFFSETS = {Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}  # a block's float16 d (and dmin)
# llama_ftype: MOSTLY_Q4_K_S (all Q4_K), MOSTLY_Q4_K_M, MOSTLY_Q5_K_S (all Q5_K), MOSTLY_Q5_K_M
FILE_TYPE = {"Q4_K": 14, "Q4_K_M": 15, "Q5_K": 16, "Q5_K_M": 17}
ROPE_FREQS = TENSOR_NAMES[MODEL_TENSOR.ROPE_FREQS] + ".weight"  # Llama 3's frequency factors
SLICE_BLOCKS = 1 << 16  # blocks generated and written at a time (9 MiB of Q4_K)


def with_changes(**changes) -> SimpleNamespace:
    """SHAPE with some fields changed (a narrow model of the same depth, for quick checks).

    >>> with_changes(d_e=256).d_e, SHAPE.d_e
    (256, 2048)
    """
    return SimpleNamespace(**{**vars(SHAPE), **changes})


def rope_factors(head_dim: int, hp: SimpleNamespace = SHAPE) -> np.ndarray:
    """Llama 3's frequency factors (head_dim/2 of them), as llama.cpp's converter writes
    `rope_freqs.weight`: 1 for short wavelengths, the scaling factor for long ones, a smooth ramp between.

    >>> f = rope_factors(64)
    >>> float(f[0]), float(f[-1]), f.shape
    (1.0, 32.0, (32,))
    """
    s = hp
    freqs = 1.0 / s.rope_base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2 * math.pi / freqs
    low, high = s.original_context / s.low_freq_factor, s.original_context / s.high_freq_factor
    smooth = (s.original_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    ramp = 1 / ((1 - smooth) / s.rope_factor + smooth)
    return np.where(wavelen < high, 1.0, np.where(wavelen > low, s.rope_factor, ramp)).astype(np.float32)


def _more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _type_of(name: str, shape: tuple[int, ...], mix: str, n_layer: int) -> int:
    """The ggml type of one tensor: F32 for vectors, the mix's K-quant for matrices (Q4_K, Q5_K);
    under an _M mix, Q6_K for the (tied) token embedding and for attn_v / ffn_down on the layers
    `_more_bits` picks, as llama.cpp's Q4_K_M and Q5_K_M do."""
    if len(shape) == 1:
        return Q.F32
    base = Q.Q5_K if mix.startswith("Q5_K") else Q.Q4_K
    if not mix.endswith("_M"):
        return base
    if name == TENSOR_NAMES[MODEL_TENSOR.TOKEN_EMBD] + ".weight":
        return Q.Q6_K
    if name.endswith(("attn_v.weight", "ffn_down.weight")):
        return Q.Q6_K if _more_bits(int(name.split(".")[1]), n_layer) else base
    return base


def specs(mix: str = "Q4_K", hp: SimpleNamespace = SHAPE) -> list[tuple[str, tuple[int, ...], int]]:
    """(name, NumPy shape, ggml type) of every tensor, in file order: rope_freqs, token_embd, the
    layers, output_norm (no output.weight: tied)."""
    if mix not in FILE_TYPE:
        raise ValueError(f"unknown mix {mix!r}: choose {', '.join(FILE_TYPE)}")
    s = hp
    inventory = llama_inventory(s.n_layer, s.d_e, s.d_ff, s.n_vocab, s.n_head, s.n_head_kv, tied=True)
    rope = (ROPE_FREQS, (s.d_e // s.n_head // 2,))
    return [(name, shape, _type_of(name, shape, mix, s.n_layer)) for name, shape in [rope, *inventory]]


def metadata(mix: str = "Q4_K", hp: SimpleNamespace = SHAPE) -> list[RawKV]:
    """The hyperparameters (llama.*), the file type and the 128,256-token vocabulary."""
    s = hp
    kv = [
        RawKV(p.key, p.vtype, s.rope_base if p.key == "llama.rope.freq_base" else p.value)
        for p in llama_hparams(s.n_layer, s.d_e, s.d_ff, s.n_head, s.n_head_kv, n_ctx=N_CTX)
    ]
    kv += [
        RawKV("general.name", V.STRING, f"random Llama-3.2-1B-shaped {mix}"),
        RawKV("general.file_type", V.UINT32, FILE_TYPE[mix]),
        RawKV("llama.vocab_size", V.UINT32, s.n_vocab),
    ]
    eos = s.n_vocab - 1  # the vocabulary's `<|endoftext|>`
    vocab = bpe_vocab_kv(
        SimpleNamespace(vocab_size=s.n_vocab, bos_token_id=eos, eos_token_id=eos), "llama-bpe"
    )
    sub_types = {str: V.STRING, int: V.INT32}
    for key, (value, vtype) in vocab.items():
        if vtype == V.ARRAY:
            kv.append(RawKV(key, V.ARRAY, value, sub_types[type(value[0])]))
        else:
            kv.append(RawKV(key, vtype, value))
    return kv


def random_k_blocks(ggml_type: int, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """n_blocks random blocks (uint8 [n_blocks, type_size]) whose float16 scales are small and finite."""
    type_size = GGML_QUANT_SIZES[ggml_type][1]
    words = -(-n_blocks * type_size // 8)
    blocks = rng.bit_generator.random_raw(words).view(np.uint8)[: n_blocks * type_size]
    blocks = blocks.reshape(n_blocks, type_size)
    d = D_SCALE[ggml_type] * rng.uniform(0.5, 1.5, n_blocks)
    scales = [d, DMIN_OVER_D.get(ggml_type, 0.0) * d * rng.uniform(0.8, 1.2, n_blocks)]  # (Q6_K: d alone)
    for offset, value in zip(SCALE_OFFSETS[ggml_type], scales):
        blocks[:, offset : offset + 2] = value.astype("<f2").view(np.uint8).reshape(n_blocks, 2)
    return blocks


def _write_tensor(fh, spec: tuple[str, tuple[int, ...], int], hp: SimpleNamespace, rng) -> int:
    """Write one tensor's data; return its size in bytes."""
    name, shape, ggml_type = spec
    if ggml_type == Q.F32:  # the RoPE factors, or a norm's γ (ones)
        data = rope_factors(2 * shape[0], hp) if name == ROPE_FREQS else np.ones(shape, np.float32)
        fh.write(data.tobytes())
        return data.nbytes
    n_blocks = int(np.prod(shape)) // GGML_QUANT_SIZES[ggml_type][0]
    for start in range(0, n_blocks, SLICE_BLOCKS):
        fh.write(random_k_blocks(ggml_type, min(SLICE_BLOCKS, n_blocks - start), rng).data)
    return n_blocks * GGML_QUANT_SIZES[ggml_type][1]


def write_llama_1b(path: str | Path, mix: str = "Q4_K", seed: int = 0, hp: SimpleNamespace = SHAPE) -> Path:
    """Write the file (see the module docstring; `hp`: another shape, see `with_changes`) and return
    its path; the same seed, the same bytes."""
    tensors = specs(mix, hp)
    infos, data_size = layout(tensors)
    header = RawGGUF(kv=metadata(mix, hp), tensors=infos).header()
    rng = np.random.default_rng(seed)
    path = Path(path)
    with open(path, "wb") as fh:
        fh.write(header)
        for info, spec in zip(infos, tensors):
            assert fh.tell() == len(header) + info.offset, spec[0]
            written = _write_tensor(fh, spec, hp, rng)
            fh.write(b"\0" * (-written % 32))
    assert path.stat().st_size == len(header) + data_size
    return path
