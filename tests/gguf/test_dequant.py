"""toycards.gguf.dequant against gguf.quants (the oracle) and hand-computed blocks."""

from __future__ import annotations

import re

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, quants
from gguf_factory import Q, random_blocks, write_gguf

from toycards.errors import ToycardsError
from toycards.gguf.dequant import _CHUNK, KERNELS, PLAIN_DTYPES, dequantize
from toycards.gguf.reader import open_gguf

# the types compared against gguf.quants here (others work as far as gguf.quants does)
TESTED_TYPES = tuple(Q[name] for name in "F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K".split())
QUANTISABLE = {Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1}  # gguf.quants.quantize can make these
BLOCK_TYPES = [t for t in TESTED_TYPES if t not in PLAIN_DTYPES and t != Q.BF16]


def assert_same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal values (NaN equal to NaN); on failure name the worst element."""
    assert got.shape == want.shape and got.dtype == want.dtype == np.float32, (what, got.shape, want.shape)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    if not same.all():
        diff = np.where(same, 0, np.abs(got.astype(np.float64) - want))
        worst = tuple(int(i) for i in np.unravel_index(np.argmax(np.nan_to_num(diff, nan=np.inf)), got.shape))
        pytest.fail(
            f"{what}: {(~same).sum()} of {got.size} values differ; worst at {worst}: "
            f"got {got[worst]!r}, gguf.quants {want[worst]!r}"
        )


def oracle(raw: np.ndarray, qtype: Q, shape: tuple[int, ...]) -> np.ndarray:
    return quants.dequantize(raw, qtype).astype(np.float32).reshape(shape)


def quantised(qtype: Q, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Raw data as GGUFFile.raw gives it: plain types typed, others uint8 blocks."""
    x = (rng.standard_normal(shape) * rng.uniform(0.01, 10, shape[:-1] + (1,))).astype(np.float32)
    x[..., :32] = 0  # an all-zero block (d = 0)
    if qtype == Q.F32:
        return x
    return quants.quantize(x, qtype)


@pytest.mark.parametrize("qtype", TESTED_TYPES, ids=lambda t: t.name)
def test_matches_gguf_quants_on_quantised_data(qtype):
    rng = np.random.default_rng(int(qtype))
    shape = (3, 2, 512)
    if qtype in QUANTISABLE or qtype == Q.F32:
        raw = quantised(qtype, shape, rng)
    else:  # K-types: gguf.quants cannot quantise them; random blocks with sane scales
        raw = random_blocks(qtype, shape, rng)
    want = raw.astype(np.float32) if qtype == Q.F32 else oracle(raw, qtype, shape)
    assert_same(dequantize(raw, qtype, shape), want, qtype.name)


@pytest.mark.parametrize("qtype", [*BLOCK_TYPES, Q.BF16, Q.F16], ids=lambda t: t.name)
def test_matches_gguf_quants_on_random_bytes(qtype):
    """Every bit pattern, including inf/NaN scales, and more blocks than one kernel chunk."""
    rng = np.random.default_rng(100 + int(qtype))
    block, type_size = GGML_QUANT_SIZES[qtype]
    n_blocks = _CHUNK + 77 if qtype in KERNELS else 700
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8).reshape(1, -1)
    shape = (1, n_blocks * block)
    if qtype == Q.F16:
        raw = raw.view("<f2")
    with np.errstate(all="ignore"):
        want = oracle(raw, qtype, shape)
        got = dequantize(raw, qtype, shape)
    assert_same(got, want, qtype.name)


def _block(*parts: bytes) -> np.ndarray:
    return np.frombuffer(b"".join(parts), dtype=np.uint8).reshape(1, -1)


def f16(x: float) -> bytes:
    return np.float16(x).tobytes()


def test_hand_computed_blocks():
    # Q8_0: d = 0.5, q = 0, 1, …, 31 → x = q / 2
    q8 = _block(f16(0.5), bytes(range(32)))
    assert dequantize(q8, Q.Q8_0, (32,)).tolist() == [q / 2 for q in range(32)]
    # Q4_0: d = 2, byte j holds q_j (low) and q_{j+16} (high); x = 2 (q − 8)
    q4 = _block(f16(2.0), bytes([0x8F] + [0x08] * 15))
    x = dequantize(q4, Q.Q4_0, (32,))
    assert (x[0], x[16], x[1], x[17]) == (14.0, 0.0, 0.0, -16.0)
    # Q4_1: d = 2, m = −1 → x = 2 q − 1
    x = dequantize(_block(f16(2.0), f16(-1.0), bytes([0x21] * 16)), Q.Q4_1, (32,))
    assert (x[0], x[16]) == (1.0, 3.0)
    # Q5_0: d = 1, fifth bit of element 0 set → x_0 = (0 + 16) − 16, x_16 = 0 − 16
    x = dequantize(_block(f16(1.0), (1).to_bytes(4, "little"), bytes(16)), Q.Q5_0, (32,))
    assert (x[0], x[1], x[16]) == (0.0, -16.0, -16.0)
    # Q5_1: d = 1, m = 0.5, fifth bit of element 31 set, high nibble of byte 15 = 15 → 31.5
    x = dequantize(
        _block(f16(1.0), f16(0.5), (1 << 31).to_bytes(4, "little"), bytes(15) + b"\xf0"), Q.Q5_1, (32,)
    )
    assert (x[0], x[31]) == (0.5, 31.5)
    # BF16: the upper 16 bits of a float32
    assert dequantize(_block(b"\x80\x3f\x00\xc0"), Q.BF16, (2,)).tolist() == [1.0, -2.0]


def test_shapes_and_plain_types():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert np.shares_memory(dequantize(x, Q.F32, (2, 3, 4)), x)  # F32 is not copied
    assert dequantize(x.view(np.uint8), Q.F32, (2, 3, 4)).tolist() == x.tolist()  # bytes are reinterpreted
    assert dequantize(np.arange(6, dtype=np.int16), Q.I16, (2, 3)).tolist() == [[0, 1, 2], [3, 4, 5]]
    experts = quants.quantize(np.ones((4, 3, 64), np.float32), Q.Q8_0)  # (n_expert, n_ff, n_embd)
    assert dequantize(experts, Q.Q8_0, (4, 3, 64)).shape == (4, 3, 64)


@pytest.mark.parametrize(
    "raw, qtype, shape, fragment",
    [
        (np.zeros(34, np.uint8), Q.Q8_0, (64,), "34 bytes of Q8_0 data do not fit shape (64,)"),
        (np.zeros(34, np.uint8), 99, (32,), "unknown tensor type 99"),
        (np.zeros(40, np.uint8), Q.Q8_1, (32,), "dequantising Q8_1 is not supported"),
    ],
)
def test_errors(raw, qtype, shape, fragment):
    with pytest.raises(ToycardsError, match="^w: " + re.escape(fragment)):
        dequantize(raw, qtype, shape, "w")


def test_every_tested_type_through_a_file(tmp_path):
    """GGUFWriter writes each type; GGUFFile.tensor reads it back as gguf.quants would."""
    rng = np.random.default_rng(7)
    tensors, raws = {}, {}
    for t in TESTED_TYPES:
        raws[t] = (
            quantised(t, (4, 256), rng) if t in QUANTISABLE or t == Q.F32 else random_blocks(t, (4, 256), rng)
        )
        tensors[t.name] = raws[t] if t == Q.F32 else (raws[t], t)
    with open_gguf(write_gguf(tmp_path / "types.gguf", tensors=tensors)) as f:
        for t, raw in raws.items():
            want = raw.astype(np.float32) if t == Q.F32 else oracle(raw, t, (4, 256))
            assert_same(f.tensor(t.name), want, t.name)
