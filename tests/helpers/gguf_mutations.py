"""Seeded mutations of a valid GGUF file, for the reader's fuzz tests (tests/gguf/test_gguf_fuzz.py).

Owns: a map of where every field of a valid GGUF file lies (`field_map`, a walker of its own, written
from the GGUF spec, independent of toycards' reader), the mutations themselves as plain tuples
(`("put", 16, 8, 2**64 - 1)`: write a u64 at byte 16) that `apply` performs and `str` names, so a
failing case can be reproduced from its message alone, and `mutations(data, seed, n)`: n mutations
drawn deterministically from a seed, spread over every kind of field and every region of the file.

    op          arguments       effect
    truncate    at              keep bytes [0, at)
    flip        at, bit         xor one bit of byte `at`
    put         at, width, v    write v as a little-endian u32/u64 (width 4/8) at `at`
    dup         at, n           repeat bytes [at, at+n) right after themselves
    delete      at, n           drop bytes [at, at+n)

>>> apply(b"abcdef", ("dup", 1, 2)), apply(b"abcdef", ("put", 0, 4, 1))
(b'abcbcdef', b'\\x01\\x00\\x00\\x00ef')
"""

from __future__ import annotations

import random
import struct
from collections import defaultdict
from dataclasses import dataclass

# GGUF value types (the spec's numbering) → the size of a scalar; 8 = string, 9 = array
SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9

# values worth writing into a count, a length, an offset or a type
INTERESTING = (0, 1, 2, 3, 7, 8, 9, 12, 13, 31, 32, 33, 63, 64, 255, 4096, 0x7FFF_FFFF, 0x8000_0000)
INTERESTING += (0xFFFF_FFFF, 1 << 32, 1 << 62, (1 << 63) - 1, 1 << 63, (1 << 64) - 1)


@dataclass(frozen=True)
class Field:
    """One fixed-size field of the file: what it is, where it is, how wide (4 or 8 bytes)."""

    kind: str  # "n_tensors", "n_kv", "string_length", "value_type", "array_length", …
    at: int
    width: int


def field_map(data: bytes) -> tuple[list[Field], dict[str, tuple[int, int]]]:
    """Every count, length, type and offset of a valid GGUF v2/v3 file, and its regions.

    Regions are [start, end) byte ranges: "header" (magic, version, counts), "kv", "tensor_infos",
    "padding" (up to the 32-byte-aligned data; the file must not set general.alignment) and "data".
    """
    fields: list[Field] = [Field("version", 4, 4), Field("n_tensors", 8, 8), Field("n_kv", 16, 8)]
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    off = 24

    def u32(kind: str) -> int:
        nonlocal off
        fields.append(Field(kind, off, 4))
        off += 4
        return struct.unpack_from("<I", data, off - 4)[0]

    def u64(kind: str) -> int:
        nonlocal off
        fields.append(Field(kind, off, 8))
        off += 8
        return struct.unpack_from("<Q", data, off - 8)[0]

    def string(kind: str) -> None:
        nonlocal off
        n = u64(kind)  # (`off += u64(…)` would read `off` before the call moves it)
        off += n

    def value(vtype: int, kind: str) -> None:
        nonlocal off
        if vtype in SCALAR_SIZES:
            if SCALAR_SIZES[vtype] in (4, 8):
                fields.append(Field(kind, off, SCALAR_SIZES[vtype]))
            off += SCALAR_SIZES[vtype]
        elif vtype == STRING:
            string("string_length")
        else:
            subtype, n = u32("array_type"), u64("array_length")
            for _ in range(n):
                value(subtype, "array_element")

    for _ in range(n_kv):
        string("key_length")
        value(u32("value_type"), "scalar_value")
    kv_end = off
    for _ in range(n_tensors):
        string("tensor_name_length")
        for _ in range(u32("n_dims")):
            u64("dim")
        u32("ggml_type")
        u64("tensor_offset")
    data_start = -(-off // 32) * 32
    regions = {
        "header": (0, 24),
        "kv": (24, kv_end),
        "tensor_infos": (kv_end, off),
        "padding": (off, data_start),
        "data": (data_start, len(data)),
    }
    return fields, regions


def apply(data: bytes, m: tuple) -> bytes:
    """The bytes of `data` after the mutation `m` (see the module docstring)."""
    op, at, *args = m
    if op == "truncate":
        return data[:at]
    if op == "flip":
        return data[:at] + bytes([data[at] ^ (1 << args[0])]) + data[at + 1 :]
    if op == "put":
        width, v = args
        return data[:at] + v.to_bytes(width, "little") + data[at + width :]
    n = args[0]
    if op == "dup":
        return data[: at + n] + data[at : at + n] + data[at + n :]
    assert op == "delete", m
    return data[:at] + data[at + n :]


def _puts(rng: random.Random, by_kind: dict[str, list[Field]], n: int) -> list[tuple]:
    """Interesting (and some random) values written over fields, every kind in turn."""
    kinds, out = sorted(by_kind), []
    for i in range(n):
        f = rng.choice(by_kind[kinds[i % len(kinds)]])
        v = rng.choice(INTERESTING) if rng.random() < 0.8 else rng.getrandbits(8 * f.width)
        if f.kind.endswith("type") and rng.random() < 0.5:
            v = rng.randrange(64)  # near the known type codes
        out.append(("put", f.at, f.width, v % (1 << (8 * f.width))))
    return out


def mutations(data: bytes, seed: int, n: int) -> list[tuple]:
    """`n` mutations of `data`, drawn from `seed`: about a quarter overwritten fields, a fifth
    truncations spread over the regions, the rest bit flips and duplicated or deleted runs."""
    rng = random.Random(seed)
    fields, regions = field_map(data)
    by_kind: dict[str, list[Field]] = defaultdict(list)
    for f in fields:
        by_kind[f.kind].append(f)
    header_end = regions["data"][0]
    boundaries = sorted({f.at for f in fields} | {f.at + f.width for f in fields})
    spans = [r for r in regions.values() if r[1] > r[0]]
    out = _puts(rng, by_kind, n // 4)
    for i in range(n // 5):
        lo, hi = spans[i % len(spans)]
        out.append(("truncate", rng.randrange(lo, hi)))
    while len(out) < n:
        kind = rng.random()
        at = rng.choice(boundaries) if rng.random() < 0.5 else rng.randrange(header_end)
        at = min(at, len(data) - 1)
        if kind < 0.4:
            at = at if rng.random() < 0.9 else rng.randrange(len(data))
            out.append(("flip", at, rng.randrange(8)))
        else:
            run = min(rng.choice((1, 2, 3, 4, 8, 12, 16, 24, 64, 300)), len(data) - at)
            out.append(("dup" if kind < 0.7 else "delete", at, run))
    return out
