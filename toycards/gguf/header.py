"""Parsing and validating the header of a GGUF file, byte by byte.

Owns: the GGUF layout, the checks ggml's own C reader makes (magic, version, every
count and length against the bytes left, unique non-empty keys, known value types,
alignment, tensor names, dimensions, types, offsets, bounds and overlaps), and
decoding array values on demand. Every problem is one `ToycardsError` line that
starts with the file's name.
Leaves out: the public objects (`GGUFFile`, `open_gguf` in gguf/reader.py) and
tensor data (gguf/dequant.py).

Layout (all little-endian; `str` = u64 byte length + UTF-8 bytes):

    "GGUF" u32:version u64:n_tensors u64:n_kv
    n_kv ×      str:key  u32:value_type  value
    n_tensors × str:name u32:n_dims  u64×n_dims:ne  u32:ggml_type  u64:offset
    padding to `general.alignment` (default 32), then the tensor data;
    a tensor's offset counts from the start of the data.

An array value is `u32:element_type u64:count element×count`; arrays are skipped
on open (one pass over the length prefixes of a string array) and decoded later.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from toycards.errors import ToycardsError
from toycards.gguf.facts import (
    DEFAULT_ALIGNMENT,
    QUANT_NAMES,
    QUANT_SIZES,
    VALUE_TYPE_NAMES,
    Keys,
    ValueType,
)

if TYPE_CHECKING:
    import numpy as np

SUPPORTED_VERSIONS = (2, 3)
MAX_NAME_BYTES = 63  # ggml's GGML_MAX_NAME is 64 including the terminating NUL
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ALIGNMENT = 1 << 16
MAX_ARRAY_NESTING = 8  # arrays of arrays: GGUFWriter writes them, ggml itself rejects them
MAX_ELEMENTS = (1 << 63) - 1  # ggml counts elements in int64

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

# value type → struct of a scalar; strings and arrays are variable-sized
SCALAR_STRUCTS: dict[int, struct.Struct] = {
    ValueType.UINT8: struct.Struct("<B"),
    ValueType.INT8: struct.Struct("<b"),
    ValueType.UINT16: struct.Struct("<H"),
    ValueType.INT16: struct.Struct("<h"),
    ValueType.UINT32: _U32,
    ValueType.INT32: struct.Struct("<i"),
    ValueType.FLOAT32: struct.Struct("<f"),
    ValueType.BOOL: struct.Struct("<B"),  # ggml reads an int8 and tests != 0
    ValueType.UINT64: _U64,
    ValueType.INT64: struct.Struct("<q"),
    ValueType.FLOAT64: struct.Struct("<d"),
}
# the fewest bytes one array element can take: bounds every count before any loop runs
_MIN_ELEMENT_BYTES = {
    **{t: s.size for t, s in SCALAR_STRUCTS.items()},
    ValueType.STRING: 8,
    ValueType.ARRAY: 12,
}
_MIN_KV_BYTES = 8 + 1 + 4 + 1  # key length, a 1-byte key, value type, a 1-byte value
_MIN_TENSOR_INFO_BYTES = 8 + 1 + 4 + 8 + 4 + 8  # name length, name, n_dims, one dim, type, offset
TENSOR_COUNT_OFFSET = 8  # after the magic and the version
LAZY = object()  # the value of an array not decoded yet


def value_type_name(vtype: int) -> str:
    """`ValueType.UINT32` → `"uint32"`; an unknown code → `"unknown(N)"`."""
    return VALUE_TYPE_NAMES.get(vtype, f"unknown({vtype})")


def ggml_type_name(ggml_type: int) -> str:
    """`8` → `"Q8_0"`; a type `gguf.GGML_QUANT_SIZES` does not know → `"unknown(N)"`."""
    if ggml_type in QUANT_SIZES:
        return QUANT_NAMES[ggml_type]
    return f"unknown({ggml_type})"


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor table.

    `shape` is in NumPy order (ggml's `ne` reversed): a linear weight is
    `(n_out, n_in)`, a token embedding `(n_vocab, n_embd)`. `n_bytes` is 0 when the
    type is unknown (`type_name == "unknown(N)"`, `known_type` false).
    """

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    type_name: str  # "F32", "Q8_0", "unknown(99)"
    offset: int  # absolute file offset of the data
    n_bytes: int
    n_elements: int

    @property
    def known_type(self) -> bool:
        return self.ggml_type in QUANT_SIZES


@dataclass
class Entry:
    """A metadata value: parsed, or an array still `LAZY` with where to find it."""

    vtype: int
    value: object
    subtype: int = -1  # element type of an array
    count: int = 0  # element count of an array
    start: int = 0  # file offsets of the first element and just past the last
    end: int = 0


def file_error(label: str, message: str) -> ToycardsError:
    """`label: message` on one line: control characters from names in the file are escaped."""
    text = f"{label}: {message}"
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return ToycardsError(text)


class Cursor:
    """Reads little-endian values from a buffer, checking each against the bytes left."""

    def __init__(self, buf: mmap.mmap, size: int, label: str, off: int = 0) -> None:
        self.buf, self.size, self.label, self.off = buf, size, label, off

    def error(self, message: str) -> ToycardsError:
        return file_error(self.label, message)

    def scalar(self, st: struct.Struct, what: str) -> int | float:
        left = self.size - self.off
        if st.size > left:
            raise self.error(
                f"truncated: {what} at offset {self.off} needs {st.size} bytes, only {left} left"
            )
        (value,) = st.unpack_from(self.buf, self.off)
        self.off += st.size
        return value

    def string_bytes(self, what: str) -> bytes:
        n = self.scalar(_U64, f"length of {what}")
        left = self.size - self.off
        if n > left:
            raise self.error(
                f"truncated: {what}: string length {n} at offset {self.off - 8} exceeds the {left} bytes left"
            )
        self.off += n
        return self.buf[self.off - n : self.off]

    def string(self, what: str) -> str:
        raw = self.string_bytes(what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(f"{what} is not valid UTF-8: {raw[:40]!r}") from None

    def count(self, n: int, min_bytes: int, what: str, at: int | None = None) -> None:
        """Refuse a count (read at offset `at`, by default just now) whose smallest
        possible encoding overruns the rest of the file."""
        left = self.size - self.off
        if n * min_bytes > left:
            raise self.error(
                f"truncated: {what} {n} at offset {self.off - 8 if at is None else at} needs at least "
                f"{n * min_bytes} bytes, only {left} left"
            )

    def array_header(self, what: str, depth: int) -> tuple[int, int]:
        """Read and validate (element type, element count) of an array."""
        if depth > MAX_ARRAY_NESTING:
            raise self.error(f"{what}: arrays nested deeper than {MAX_ARRAY_NESTING} levels")
        subtype = self.scalar(_U32, f"element type of {what}")
        if subtype not in _MIN_ELEMENT_BYTES:
            raise self.error(f"{what} has unknown array element type {subtype}")
        n = self.scalar(_U64, f"length of {what}")
        self.count(n, _MIN_ELEMENT_BYTES[subtype], f"{what}: array length")
        return subtype, n

    def skip_array(self, subtype: int, n: int, what: str, depth: int = 1) -> None:
        if subtype in SCALAR_STRUCTS:
            self.off += n * SCALAR_STRUCTS[subtype].size  # `count` has checked the bytes
        elif subtype == ValueType.STRING:
            self.skip_strings(n, what)
        else:
            for i in range(n):
                sub, m = self.array_header(f"{what}[{i}]", depth + 1)
                self.skip_array(sub, m, f"{what}[{i}]", depth + 1)

    def skip_strings(self, n: int, what: str) -> None:
        """Step over `n` strings: the hot loop of opening a large vocabulary."""
        buf, off, size, unpack = self.buf, self.off, self.size, _U64.unpack_from
        try:
            for _ in range(n):
                off += 8 + unpack(buf, off)[0]
        except (struct.error, OverflowError):  # a length prefix past the end (or past 2**63)
            off = size + 1
        if off > size:  # walk again, checking every element, to say where it broke
            for i in range(n):
                self.string_bytes(f"{what}[{i}]")
        self.off = off


def read_header(cur: Cursor) -> tuple[int, int, dict[str, Entry]]:
    """Magic, version, counts and every key/value pair → (version, n_tensors, entries)."""
    magic = cur.buf[:4]
    if magic != b"GGUF":
        raise cur.error(f"not a GGUF file (magic {magic!r})")
    cur.off = 4
    version = cur.scalar(_U32, "version")
    if version & 0xFFFF == 0 and version:
        raise cur.error(f"version field {version:#x} looks big-endian; only little-endian GGUF is supported")
    if version == 1:
        raise cur.error("GGUF version 1 is no longer supported (convert the model again)")
    if version not in SUPPORTED_VERSIONS:
        raise cur.error(f"unsupported GGUF version {version} (supported: 2 and 3)")
    n_tensors = cur.scalar(_U64, "tensor count")
    n_kv = cur.scalar(_U64, "key-value count")
    cur.count(n_tensors, _MIN_TENSOR_INFO_BYTES, "tensor count", TENSOR_COUNT_OFFSET)
    cur.count(n_kv, _MIN_KV_BYTES, "key-value count")
    entries: dict[str, Entry] = {}
    for i in range(n_kv):
        key = cur.string(f"name of key #{i}")
        if not key:
            raise cur.error(f"key #{i} has an empty name")
        if key in entries:
            raise cur.error(f"duplicate key '{key}' (key #{i})")
        vtype = cur.scalar(_U32, f"value type of '{key}'")
        entries[key] = _read_value(cur, key, vtype)
    return version, n_tensors, entries


def _read_value(cur: Cursor, key: str, vtype: int) -> Entry:
    what = f"value of '{key}'"
    if vtype in SCALAR_STRUCTS:
        value = cur.scalar(SCALAR_STRUCTS[vtype], what)
        return Entry(vtype, value != 0 if vtype == ValueType.BOOL else value)
    if vtype == ValueType.STRING:
        return Entry(vtype, cur.string(what))
    if vtype == ValueType.ARRAY:
        subtype, n = cur.array_header(what, 1)
        start = cur.off
        cur.skip_array(subtype, n, what)
        return Entry(vtype, LAZY, subtype, n, start, cur.off)
    raise cur.error(f"key '{key}' has unknown value type {vtype}")


def read_alignment(cur: Cursor, entries: dict[str, Entry]) -> int:
    """`general.alignment`: a uint32 power of two, at most MAX_ALIGNMENT; default 32."""
    entry = entries.get(Keys.General.ALIGNMENT)
    if entry is None:
        return DEFAULT_ALIGNMENT
    if entry.vtype != ValueType.UINT32:
        raise cur.error(f"{Keys.General.ALIGNMENT} must be a uint32, not {value_type_name(entry.vtype)}")
    a = entry.value
    if not (0 < a <= MAX_ALIGNMENT and a & (a - 1) == 0):
        raise cur.error(f"{Keys.General.ALIGNMENT} = {a} is not a power of two from 1 to {MAX_ALIGNMENT}")
    return a


def read_tensor_infos(cur: Cursor, n_tensors: int) -> list[tuple[str, tuple[int, ...], int, int]]:
    """(name, ne, ggml_type, relative offset) of each tensor; names and dims validated."""
    cur.count(n_tensors, _MIN_TENSOR_INFO_BYTES, "tensor count", TENSOR_COUNT_OFFSET)
    infos, seen = [], set()
    for i in range(n_tensors):
        name = cur.string(f"name of tensor #{i}")
        n_name = len(name.encode("utf-8"))
        if not 1 <= n_name <= MAX_NAME_BYTES:
            raise cur.error(
                f"tensor #{i} name {name[:80]!r} is {n_name} bytes; GGUF allows 1 to {MAX_NAME_BYTES}"
            )
        if name in seen:
            raise cur.error(f"duplicate tensor name '{name}' (tensor #{i})")
        seen.add(name)
        n_dims = cur.scalar(_U32, f"dimension count of tensor '{name}'")
        if not 1 <= n_dims <= MAX_DIMS:
            raise cur.error(f"tensor '{name}' has {n_dims} dimensions; GGUF allows 1 to {MAX_DIMS}")
        ne = tuple(cur.scalar(_U64, f"dimension {j} of tensor '{name}'") for j in range(n_dims))
        if min(ne) < 1 or _prod(ne) > MAX_ELEMENTS:
            raise cur.error(f"tensor '{name}' has impossible dimensions ne={list(ne)}")
        ggml_type = cur.scalar(_U32, f"type of tensor '{name}'")
        offset = cur.scalar(_U64, f"data offset of tensor '{name}'")
        infos.append((name, ne, ggml_type, offset))
    return infos


def tensor_table(cur: Cursor, infos: list, data_offset: int, alignment: int) -> dict[str, TensorInfo]:
    """Sizes from `gguf.GGML_QUANT_SIZES`, then alignment, bounds and overlap checks."""
    table: dict[str, TensorInfo] = {}
    for name, ne, ggml_type, rel in infos:
        n_elements, n_bytes = _prod(ne), 0
        if ggml_type in QUANT_SIZES:
            block, type_size = QUANT_SIZES[ggml_type]
            if ne[0] % block:
                raise cur.error(
                    f"tensor '{name}' of type {ggml_type_name(ggml_type)} has rows of {ne[0]} elements, "
                    f"not a multiple of its block size {block}"
                )
            n_bytes = n_elements // block * type_size
        if rel % alignment:
            raise cur.error(
                f"tensor '{name}' data offset {rel} is not a multiple of the alignment {alignment}"
            )
        start = data_offset + rel
        if start + n_bytes > cur.size:
            raise cur.error(
                f"truncated: tensor '{name}' data [{start}, {start + n_bytes}) lies past the end "
                f"of the file ({cur.size} bytes)"
            )
        info = TensorInfo(name, ne[::-1], ggml_type, ggml_type_name(ggml_type), start, n_bytes, n_elements)
        table[name] = info
    spans = sorted((t.offset, t.offset + t.n_bytes, t.name) for t in table.values() if t.n_bytes)
    for (a0, a1, a), (b0, b1, b) in zip(spans, spans[1:]):
        if b0 < a1:
            raise cur.error(f"tensors '{a}' [{a0}, {a1}) and '{b}' [{b0}, {b1}) overlap")
    return table


def decode_array(
    cur: Cursor, subtype: int, n: int, what: str, depth: int = 1, end: int | None = None
) -> list | np.ndarray:
    """Decode `n` elements from `cur.off`: numbers and bools → read-only ndarray,
    strings → list[str], arrays → list. `end`: where the elements end, when `read_header`'s walk
    over them has checked every length already (a top-level entry's `Entry.end`). (NumPy is
    imported here, on the first numeric array.)"""
    if subtype in SCALAR_STRUCTS:
        import numpy as np

        st = SCALAR_STRUCTS[subtype]
        arr = np.frombuffer(cur.buf[cur.off : cur.off + n * st.size], dtype=np.dtype(st.format))
        cur.off += n * st.size
        return arr != 0 if subtype == ValueType.BOOL else arr
    if subtype == ValueType.STRING:
        return _decode_strings(cur, n, what, end)
    out = []
    for i in range(n):
        sub, m = cur.array_header(f"{what}[{i}]", depth + 1)
        out.append(decode_array(cur, sub, m, f"{what}[{i}]", depth + 1))
    return out


def _decode_strings(cur: Cursor, n: int, what: str, end: int | None) -> list[str]:
    """`n` strings from `cur.off` to `end`, or, without `end`, to where `skip_strings` (which checks
    every length) finds it: the lengths are then known good, and one pass decodes them all, with no
    bounds check per string (a vocabulary has tens of thousands)."""
    start = cur.off
    if end is None:
        cur.skip_strings(n, what)
        end = cur.off
    cur.off = end
    blob, unpack, off, out = cur.buf[start:end], _U64.unpack_from, 0, []
    append = out.append
    try:
        for _ in range(n):
            at = off + 8
            off = at + unpack(blob, off)[0]
            append(blob[at:off].decode("utf-8"))
    except UnicodeDecodeError:
        raise cur.error(f"{what}[{len(out)}] is not valid UTF-8: {blob[at:off][:40]!r}") from None
    return out


def _prod(ne: tuple[int, ...]) -> int:
    n = 1
    for d in ne:
        n *= d
    return n
