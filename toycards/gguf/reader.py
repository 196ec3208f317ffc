"""Reading GGUF files: a validated header, lazy metadata, the tensor table, mapped data.

Owns: `open_gguf`, `GGUFFile` (metadata as a lazy mapping, the tensor table in NumPy
order, memory-mapped raw tensor data and dequantised tensors, read only from the file as it
was opened: its `identity`) and `TensorInfo`.
Leaves out: the byte-level parsing and validation (gguf/header.py), dequantisation
(gguf/dequant.py), the plausibility of hyperparameters (gguf/metadata.py, `check_hparams`)
and what the metadata means for a card (inspect/describe.py).
Writing files is left to `gguf.GGUFWriter`.

Opening a file and reading its metadata imports neither NumPy nor `gguf` (the facts it
needs come from gguf/facts.py): `describe` and `list` stay fast in a fresh process.
NumPy is imported on the first numeric array or tensor read.

Why not `gguf.GGUFReader`: it parses every field eagerly (bench/describe.py times it on a
150,000-token vocabulary), drops all metadata when one tensor has a type it does not know, and
reports malformed files as raw numpy errors. This reader checks what ggml's C reader
checks, decodes arrays only when asked, and raises one-line `ToycardsError`s.

The repository's example (examples/make_example.py: 2 layers, d_e = 64, 4 query heads
and 2 key/value heads of 16, a 1,024-token vocabulary, matrices stored as F16):

>>> with open_gguf("examples/tiny-llama.gguf") as f:
...     f.get("llama.block_count"), f.array_len("tokenizer.ggml.tokens")
...     f.tensors["blk.0.attn_k.weight"].shape, f.tensors["blk.0.attn_k.weight"].type_name
...     f.tensor("blk.0.attn_k.weight").dtype                # dequantised to float32
(2, 1024)
((32, 64), 'F16')
dtype('float32')
"""

from __future__ import annotations

import difflib
import mmap
import os
import struct
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from toycards.gguf.facts import ValueType
from toycards.gguf.header import (
    LAZY,
    SCALAR_STRUCTS,
    Cursor,
    Entry,
    TensorInfo,
    decode_array,
    file_error,
    ggml_type_name,
    read_alignment,
    read_header,
    read_tensor_infos,
    tensor_table,
    value_type_name,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["GGUFFile", "Metadata", "TensorInfo", "ggml_type_name", "open_gguf"]


_U64 = struct.Struct("<Q")


class Metadata(Mapping):
    """The key/value pairs of a GGUF file, in file order.

    Scalars are plain Python values (int, float, bool, str). Arrays are decoded on
    first access and cached: numbers and bools as read-only `np.ndarray`s, strings
    as a `list[str]` (shared between callers: do not mutate), arrays of arrays as lists.
    """

    def __init__(self, entries: dict[str, Entry], owner: GGUFFile) -> None:
        self._entries, self._owner = entries, owner

    def __getitem__(self, key: str) -> object:
        entry = self._entries[key]
        if entry.value is LAZY:
            entry.value = self._owner._decode(key, entry)
        return entry.value

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __repr__(self) -> str:
        return f"<Metadata of {self._owner.path}: {len(self)} keys>"


class GGUFFile:
    """An open, validated GGUF file. Use as a context manager or call `close()`.

    Attributes: `path`, `version` (2 or 3), `alignment`, `file_size`, `data_offset`
    (where tensor data starts), `metadata` (a lazy `Metadata` mapping) and `tensors`
    (name → `TensorInfo`, in file order), `identity` (the file's st_dev, st_ino, st_size and
    st_mtime_ns when it was opened: tensor data is read only from a file that still has them,
    and runtime/mapped.FileWatch compares them with the file's later). After `close()`,
    scalars and arrays already read stay available; reading an array not yet decoded, or
    tensor data, fails.
    """

    def __init__(
        self, path: str, buf: mmap.mmap, file_size: int, identity: tuple[int, int, int, int] | None = None
    ) -> None:
        self.path, self.file_size = path, file_size
        self.identity = identity
        self._buf: mmap.mmap | None = buf
        self._data: np.ndarray | None = None
        self._private: np.ndarray | None = None  # the copy-on-write mapping (raw(private=True))
        cur = Cursor(buf, file_size, path)
        self.version, n_tensors, entries = read_header(cur)
        self.metadata = Metadata(entries, self)
        self.alignment = read_alignment(cur, entries)
        infos = read_tensor_infos(cur, n_tensors)
        self.data_offset = -(-cur.off // self.alignment) * self.alignment
        self.tensors: dict[str, TensorInfo] = tensor_table(cur, infos, self.data_offset, self.alignment)

    # -- metadata --------------------------------------------------------------
    def get(self, key: str, default: object = None) -> object:
        """The value of `key` (arrays decoded), or `default` when the file lacks it."""
        return self.metadata[key] if key in self.metadata else default

    def require(self, key: str) -> object:
        """The value of `key`, or a `ToycardsError` naming the file and the missing key."""
        self._entry(key)
        return self.metadata[key]

    def value_type(self, key: str) -> str:
        """`"uint32"`, `"string"`, `"array[string]"`, `"array[array]"`, … without decoding."""
        entry = self._entry(key)
        if entry.vtype != ValueType.ARRAY:
            return value_type_name(entry.vtype)
        return f"array[{value_type_name(entry.subtype)}]"

    def array_len(self, key: str) -> int:
        """Number of elements of an array value, without decoding it."""
        entry = self._entry(key)
        if entry.vtype != ValueType.ARRAY:
            raise file_error(self.path, f"metadata key '{key}' is a {self.value_type(key)}, not an array")
        return entry.count

    def array_items(self, key: str, n: int) -> list[int | float | bool]:
        """The first `n` items of an array of numbers or bools, as Python values, read without
        decoding the rest of it (nor importing NumPy); [] for an array of strings or arrays."""
        entry = self._entry(key)
        if entry.vtype != ValueType.ARRAY or entry.subtype not in SCALAR_STRUCTS:
            return []
        if self._buf is None:
            raise file_error(self.path, f"file is closed; array '{key}' was not read before close()")
        st = SCALAR_STRUCTS[entry.subtype]
        items = [st.unpack_from(self._buf, entry.start + i * st.size)[0] for i in range(min(n, entry.count))]
        return [v != 0 for v in items] if entry.subtype == ValueType.BOOL else items

    def string_items(self, key: str, indices: set[int]) -> dict[int, str]:
        """Some entries of a string array by index, without decoding the rest of it: steps over
        the length prefixes (validated when the file was opened) up to the largest index asked."""
        entry = self._entry(key)
        if self.value_type(key) != "array[string]" or self._buf is None:
            return {}
        wanted = {i for i in indices if 0 <= i < entry.count}
        out, off, buf = {}, entry.start, self._buf
        for i in range(max(wanted) + 1 if wanted else 0):
            (n,) = _U64.unpack_from(buf, off)
            if i in wanted:
                out[i] = bytes(buf[off + 8 : off + 8 + n]).decode("utf-8", "replace")
            off += 8 + n
        return out

    def _entry(self, key: str) -> Entry:
        entries = self.metadata._entries
        if key not in entries:
            raise file_error(self.path, f"missing metadata key '{key}'{_did_you_mean(key, entries)}")
        return entries[key]

    def _decode(self, key: str, entry: Entry) -> list | np.ndarray:
        if self._buf is None:
            raise file_error(self.path, f"file is closed; array '{key}' was not read before close()")
        cur = Cursor(self._buf, self.file_size, self.path, entry.start)
        value = decode_array(cur, entry.subtype, entry.count, f"value of '{key}'", end=entry.end)
        if hasattr(value, "flags"):  # an ndarray
            value.flags.writeable = False
        return value

    # -- tensors ---------------------------------------------------------------
    def tensor_info(self, name: str) -> TensorInfo:
        """The table entry of `name`, or a `ToycardsError` with the nearest name."""
        if name not in self.tensors:
            raise file_error(self.path, f"no tensor named '{name}'{_did_you_mean(name, self.tensors)}")
        return self.tensors[name]

    def _readable(self, name: str) -> TensorInfo:
        info = self.tensor_info(name)
        if not info.known_type:
            raise file_error(self.path, f"tensor '{name}' has unsupported type {info.type_name}")
        return info

    def raw(self, name: str, private: bool = False) -> np.ndarray:
        """The tensor's bytes, memory-mapped and read-only, in the form `gguf.quants` expects.

        F32, F16, F64, I8, I16, I32 and I64 come typed, in NumPy shape; quantised
        types and BF16 come as uint8 blocks of shape `(*shape[:-1], bytes_per_row)`.
        `private=True`: a writable copy-on-write mapping instead (the file's pages are shared
        until written; a write makes a private copy of its page and never reaches the file),
        for a model's parameters, which torch wants writable.
        """
        info = self._readable(name)
        return _shaped(info, self._mapped(private)[info.offset : info.offset + info.n_bytes])

    def read(self, name: str) -> np.ndarray:
        """The tensor's bytes as `raw()` shapes them, read into a fresh, writable array of this
        process's own memory: nothing of the file is mapped. Mapping a small tensor maps the whole
        page-cache folio it lies in, which on filesystems with large folios holds megabytes of its
        neighbours, and those pages then count in the process's resident memory."""
        import numpy as np

        info = self._readable(name)
        if self._buf is None:
            raise file_error(self.path, "file is closed")
        out = np.empty(info.n_bytes, dtype=np.uint8)
        with open(self.path, "rb") as fh:
            self._same_file(fh)  # as _mapped checks its mapping
            fh.seek(info.offset)
            n = fh.readinto(out)
        if n != info.n_bytes:
            raise file_error(self.path, f"tensor '{name}': the file ends {info.n_bytes - n} bytes early")
        return _shaped(info, out)

    def tensor(self, name: str, dtype: npt.DTypeLike = "float32", copy: bool = False) -> np.ndarray:
        """The tensor dequantised and cast to `dtype`, in NumPy shape.

        An F32 tensor asked for as float32 comes back as a read-only view of the
        file unless `copy=True`; every other result is a fresh, writable array.
        """
        import numpy as np

        from toycards.gguf.dequant import dequantize

        info = self.tensor_info(name)
        out = dequantize(self.raw(name), info.ggml_type, info.shape, f"{self.path}: tensor '{name}'")
        out = out.astype(dtype, copy=False)
        return np.array(out) if copy and not out.flags.writeable else out

    def _mapped(self, private: bool = False) -> np.ndarray:
        if self._buf is None:
            raise file_error(self.path, "file is closed")
        attr = "_private" if private else "_data"
        if getattr(self, attr, None) is None:
            import numpy as np

            with open(self.path, "rb") as fh:  # the file whose header was read, still as it was
                self._same_file(fh)
                data = np.memmap(fh, dtype=np.uint8, mode="c" if private else "r", shape=(self.file_size,))
            setattr(self, attr, np.asarray(data))  # a plain ndarray view; the mapping lives on in its base
        return getattr(self, attr)

    def _same_file(self, fh) -> None:
        """A ToycardsError where the open file `fh` is not the file as it was opened (another inode at
        the path, another size or modification time)."""
        st = os.fstat(fh.fileno())
        if st.st_size != self.file_size:
            raise file_error(self.path, "the file changed size since it was opened")
        if self.identity is not None and _identity(st) != self.identity:
            raise file_error(self.path, "the file changed since it was opened")

    def mappings(self) -> list[mmap.mmap]:
        """The memory maps of the file under the arrays `raw()` has returned (they outlive `close()`)."""
        found = []
        for base in (self._data, self._private):
            while base is not None and not isinstance(base, mmap.mmap):  # the memmap, then its mmap
                base = getattr(base, "base", None)
            if base is not None:
                found.append(base)
        return found

    # -- lifetime --------------------------------------------------------------
    def close(self) -> None:
        """Release the file; arrays already returned by `raw()`/`tensor()` stay valid."""
        if self._buf is not None:
            self._buf.close()
            self._buf, self._data, self._private = None, None, None

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "" if self._buf is not None else ", closed"
        return f"<GGUFFile {self.path}: v{self.version}, {len(self.metadata)} keys, {len(self.tensors)} tensors{state}>"


def _did_you_mean(name: str, choices: Mapping) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def open_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Open and validate a GGUF file; any problem is one `ToycardsError` naming the file.

    >>> open_gguf("README.md")
    Traceback (most recent call last):
    ...
    toycards.errors.ToycardsError: README.md: not a GGUF file (magic b'# to')
    """
    label = os.fspath(path)
    try:
        with open(label, "rb") as fh:
            st = os.fstat(fh.fileno())
            size = st.st_size
            if size < 4:
                raise file_error(label, f"not a GGUF file ({f'only {size} bytes' if size else 'empty'})")
            buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except IsADirectoryError:
        raise file_error(label, "is a directory, not a GGUF file") from None
    except FileNotFoundError:
        raise file_error(label, "no such file") from None
    except OSError as e:
        raise file_error(label, f"cannot read the file ({e.strerror or e})") from None
    try:
        return GGUFFile(label, buf, size, _identity(st))
    except BaseException:
        buf.close()
        raise


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """What tells a file from itself changed: device, inode, size and modification time (ns)."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _shaped(info: TensorInfo, data: np.ndarray) -> np.ndarray:
    """A tensor's bytes in the form `gguf.quants` expects: F32, F16, F64 and the integer types typed,
    in NumPy shape; quantised types and BF16 as uint8 blocks of shape `(*shape[:-1], bytes_per_row)`."""
    from toycards.gguf.dequant import PLAIN_DTYPES

    if info.ggml_type in PLAIN_DTYPES:
        return data.view(PLAIN_DTYPES[info.ggml_type]).reshape(info.shape)
    return data.reshape(*info.shape[:-1], -1)
