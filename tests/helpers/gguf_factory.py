"""Small helpers that write tiny GGUF files for tests (and the bench scripts).

Owns: `write_gguf` (a well-formed file through `gguf.GGUFWriter`: typed metadata,
float tensors stored as any quant type), `raw_gguf` (the bytes of a file assembled
field by field with our own packer, so a test can break any one field), the tensor
inventory of a Llama-shaped model, a sparse multi-GB model header and a big vocabulary.
Leaves out: reading files (toycards.runtime.gguf) and real model weights.

>>> p = write_gguf(tmp / "t.gguf", kv={"llama.block_count": typed(2, GGUFValueType.UINT32)},
...                tensors={"token_embd.weight": (np.ones((8, 32), np.float32), Q.Q8_0)})  # doctest: +SKIP
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from gguf import (
    GGML_QUANT_SIZES,
    MODEL_TENSOR,
    TENSOR_NAMES,
    GGMLQuantizationType,
    GGUFValueType,
    GGUFWriter,
    quants,
)

V, Q = GGUFValueType, GGMLQuantizationType

# ---------------------------------------------------------------------------
# well-formed files through GGUFWriter


@dataclass(frozen=True)
class Typed:
    """A metadata value with an explicit GGUF type (GGUFWriter guesses int32/float32 otherwise)."""

    value: object
    vtype: GGUFValueType
    sub_type: GGUFValueType | None = None


def typed(value: object, vtype: GGUFValueType, sub_type: GGUFValueType | None = None) -> Typed:
    return Typed(value, vtype, sub_type)


def write_gguf(
    path: str | Path,
    kv: dict[str, object] | None = None,
    tensors: dict[str, np.ndarray | tuple[np.ndarray, GGMLQuantizationType]] | None = None,
    arch: str = "llama",
    alignment: int | None = None,
) -> Path:
    """Write a GGUF with GGUFWriter; returns the path.

    `kv` values are `Typed(...)` or plain Python values (typed as GGUFWriter does).
    `tensors` map a name to an array (stored in its own dtype: f32, f16, f64, i8…i64)
    or to `(array, qtype)`: a float array is quantised with `gguf.quants.quantize`, a
    uint8 array is taken as ready blocks (see `random_blocks`) of shape (..., row_bytes).
    """
    w = GGUFWriter(str(path), arch)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for key, value in (kv or {}).items():
        if isinstance(value, Typed):
            w.add_key_value(key, value.value, value.vtype, value.sub_type)
        else:
            w.add_key_value(key, value, V.get_type(value))
    for name, t in (tensors or {}).items():
        if isinstance(t, tuple):
            data, qtype = t
            if data.dtype != np.uint8:
                data = quants.quantize(np.asarray(data, np.float32), qtype)
            w.add_tensor(name, data, raw_dtype=qtype)
        else:
            w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


# where the float16 scales of each block type sit (ggml-common.h block_* structs);
# random bytes elsewhere are valid quants, random scales could be inf or NaN
F16_SCALE_OFFSETS = {
    Q.Q8_0: (0,),
    Q.Q4_0: (0,),
    Q.Q4_1: (0, 2),
    Q.Q5_0: (0,),
    Q.Q5_1: (0, 2),
    Q.Q2_K: (80, 82),  # scales[16] qs[64] d dmin
    Q.Q3_K: (108,),  # hmask[32] qs[64] scales[12] d
    Q.Q4_K: (0, 2),  # d dmin scales[12] qs[128]
    Q.Q5_K: (0, 2),  # d dmin scales[12] qh[32] qs[128]
    Q.Q6_K: (208,),  # ql[128] qh[64] scales[16] d
}


def random_blocks(qtype: GGMLQuantizationType, shape: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """Random uint8 blocks for a tensor of NumPy `shape`, as (*shape[:-1], row_bytes).

    Every byte is random except the float16 scales, which are drawn from ±[0.001, 1).
    """
    block, type_size = GGML_QUANT_SIZES[qtype]
    n_blocks = int(np.prod(shape)) // block
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in F16_SCALE_OFFSETS.get(qtype, ()):
        scale = rng.uniform(0.001, 1.0, n_blocks) * rng.choice([-1.0, 1.0], n_blocks)
        blocks[:, off : off + 2] = scale.astype("<f2").view(np.uint8).reshape(n_blocks, 2)
    return blocks.reshape(*shape[:-1], shape[-1] // block * type_size)


# ---------------------------------------------------------------------------
# raw bytes, one field at a time

_SCALAR_FMT = {
    V.UINT8: "<B",
    V.INT8: "<b",
    V.UINT16: "<H",
    V.INT16: "<h",
    V.UINT32: "<I",
    V.INT32: "<i",
    V.FLOAT32: "<f",
    V.BOOL: "<?",
    V.UINT64: "<Q",
    V.INT64: "<q",
    V.FLOAT64: "<d",
}


def pack_string(s: str | bytes) -> bytes:
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def pack_strings(items: Iterable[str | bytes]) -> bytes:
    """Many strings back to back, fast enough for 150k tokens."""
    out = []
    for s in items:
        b = s.encode("utf-8") if isinstance(s, str) else s
        out.append(struct.pack("<Q", len(b)))
        out.append(b)
    return b"".join(out)


def pack_payload(vtype: int, value: object, sub_type: int | None = None) -> bytes:
    """The bytes of a value (without its type code); arrays need `sub_type`."""
    if vtype in _SCALAR_FMT:
        return struct.pack(_SCALAR_FMT[vtype], value)
    if vtype == V.STRING:
        return pack_string(value)
    assert vtype == V.ARRAY and sub_type is not None
    items = list(value)
    head = struct.pack("<IQ", sub_type, len(items))
    if sub_type == V.STRING:
        return head + pack_strings(items)
    if sub_type in _SCALAR_FMT:
        return head + np.asarray(items, dtype=np.dtype(_SCALAR_FMT[sub_type])).tobytes()
    # arrays of arrays: each item is (sub_sub_type, values)
    return head + b"".join(pack_payload(V.ARRAY, vals, st) for st, vals in items)


@dataclass
class RawKV:
    """One key/value pair; `payload` overrides the packed value, `raw` the whole pair (broken files)."""

    key: str | bytes
    vtype: int
    value: object = None
    sub_type: int | None = None
    payload: bytes | None = None
    raw: bytes | None = None

    def pack(self) -> bytes:
        if self.raw is not None:
            return self.raw
        body = (
            self.payload if self.payload is not None else pack_payload(self.vtype, self.value, self.sub_type)
        )
        return pack_string(self.key) + struct.pack("<I", self.vtype) + body


@dataclass
class RawTensor:
    """One tensor info: `ne` in ggml order (innermost first), offset relative to the data."""

    name: str | bytes
    ne: Sequence[int]
    ggml_type: int
    offset: int

    def pack(self) -> bytes:
        dims = struct.pack(f"<I{len(self.ne)}Q", len(self.ne), *self.ne)
        return pack_string(self.name) + dims + struct.pack("<IQ", self.ggml_type, self.offset)


def nbytes(ne: Sequence[int], ggml_type: int) -> int:
    block, type_size = GGML_QUANT_SIZES[ggml_type]
    return int(np.prod(ne, dtype=object)) // block * type_size


def layout(
    specs: Iterable[tuple[str, Sequence[int], int]], alignment: int = 32
) -> tuple[list[RawTensor], int]:
    """Tensor infos with offsets as GGUFWriter assigns them, and the data section's size.

    `specs` are (name, NumPy shape, ggml type).
    """
    infos, offset = [], 0
    for name, shape, ggml_type in specs:
        ne = tuple(reversed(shape))
        infos.append(RawTensor(name, ne, ggml_type, offset))
        offset += -(-nbytes(ne, ggml_type) // alignment) * alignment
    return infos, offset


@dataclass
class RawGGUF:
    """A GGUF file as fields; `build()` gives its bytes. Counts default to the real ones."""

    kv: list[RawKV] = field(default_factory=list)
    tensors: list[RawTensor] = field(default_factory=list)
    data: bytes = b""
    magic: bytes = b"GGUF"
    version: int = 3
    n_tensors: int | None = None
    n_kv: int | None = None
    alignment: int = 32  # for padding only; add a general.alignment RawKV to declare it

    def header(self) -> bytes:
        n_t = len(self.tensors) if self.n_tensors is None else self.n_tensors
        n_kv = len(self.kv) if self.n_kv is None else self.n_kv
        head = self.magic + struct.pack("<IQQ", self.version, n_t, n_kv)
        head += b"".join(kv.pack() for kv in self.kv) + b"".join(t.pack() for t in self.tensors)
        return head + b"\0" * (-len(head) % self.alignment)

    def build(self) -> bytes:
        return self.header() + self.data

    def write(self, path: str | Path) -> Path:
        Path(path).write_bytes(self.build())
        return Path(path)


# ---------------------------------------------------------------------------
# realistic inventories


def llama_inventory(
    n_layer: int, d_e: int, d_ff: int, n_vocab: int, n_head: int, n_head_kv: int, tied: bool = False
) -> list[tuple[str, tuple[int, ...]]]:
    """(name, NumPy shape) of every tensor of a Llama model, named by `gguf.TENSOR_NAMES`."""
    d_h = d_e // n_head
    per_layer = {
        MODEL_TENSOR.ATTN_NORM: (d_e,),
        MODEL_TENSOR.ATTN_Q: (n_head * d_h, d_e),
        MODEL_TENSOR.ATTN_K: (n_head_kv * d_h, d_e),
        MODEL_TENSOR.ATTN_V: (n_head_kv * d_h, d_e),
        MODEL_TENSOR.ATTN_OUT: (d_e, n_head * d_h),
        MODEL_TENSOR.FFN_NORM: (d_e,),
        MODEL_TENSOR.FFN_GATE: (d_ff, d_e),
        MODEL_TENSOR.FFN_UP: (d_ff, d_e),
        MODEL_TENSOR.FFN_DOWN: (d_e, d_ff),
    }
    out = [(TENSOR_NAMES[MODEL_TENSOR.TOKEN_EMBD] + ".weight", (n_vocab, d_e))]
    for bid in range(n_layer):
        out += [(TENSOR_NAMES[t].format(bid=bid) + ".weight", s) for t, s in per_layer.items()]
    out.append((TENSOR_NAMES[MODEL_TENSOR.OUTPUT_NORM] + ".weight", (d_e,)))
    if not tied:
        out.append((TENSOR_NAMES[MODEL_TENSOR.OUTPUT] + ".weight", (n_vocab, d_e)))
    return out


def llama_hparams(
    n_layer: int, d_e: int, d_ff: int, n_head: int, n_head_kv: int, n_ctx: int = 2048
) -> list[RawKV]:
    u32 = V.UINT32
    return [
        RawKV("general.architecture", V.STRING, "llama"),
        RawKV("llama.block_count", u32, n_layer),
        RawKV("llama.context_length", u32, n_ctx),
        RawKV("llama.embedding_length", u32, d_e),
        RawKV("llama.feed_forward_length", u32, d_ff),
        RawKV("llama.attention.head_count", u32, n_head),
        RawKV("llama.attention.head_count_kv", u32, n_head_kv),
        RawKV("llama.rope.dimension_count", u32, d_e // n_head),
        RawKV("llama.attention.layer_norm_rms_epsilon", V.FLOAT32, 1e-5),
        RawKV("llama.rope.freq_base", V.FLOAT32, 10000.0),
    ]


def write_sparse_model(
    path: str | Path, kv: list[RawKV], specs: list[tuple[str, tuple[int, ...], int]]
) -> Path:
    """A model file whose tensor data is a hole: header written, then `truncate` to full size."""
    infos, data_size = layout(specs)
    header = RawGGUF(kv=kv, tensors=infos).header()
    with open(path, "wb") as fh:
        fh.write(header)
        fh.truncate(len(header) + data_size)
    return Path(path)


def vocab_kv(n_tokens: int, n_merges: int) -> list[RawKV]:
    """A byte-level-BPE-looking vocabulary: tokens, token types and merges."""
    tokens = [f"tok{i}" for i in range(n_tokens)]
    merges = [f"t{i % 977} k{i}" for i in range(n_merges)]
    return [
        RawKV("general.architecture", V.STRING, "gpt2"),
        RawKV("tokenizer.ggml.model", V.STRING, "gpt2"),
        RawKV("tokenizer.ggml.tokens", V.ARRAY, tokens, V.STRING),
        RawKV("tokenizer.ggml.token_type", V.ARRAY, np.ones(n_tokens, np.int32), V.INT32),
        RawKV("tokenizer.ggml.merges", V.ARRAY, merges, V.STRING),
        RawKV("tokenizer.ggml.bos_token_id", V.UINT32, 0),
    ]


def tinyllama_specs(ggml_type: int = Q.Q8_0) -> list[tuple[str, tuple[int, ...], int]]:
    """TinyLlama-1.1B's 201 tensors (22 layers, d_e 2048); norms F32, the rest `ggml_type`."""
    inv = llama_inventory(n_layer=22, d_e=2048, d_ff=5632, n_vocab=32000, n_head=32, n_head_kv=4)
    return [(name, shape, Q.F32 if len(shape) == 1 else ggml_type) for name, shape in inv]
