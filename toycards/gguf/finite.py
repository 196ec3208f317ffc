"""Whether every tensor of a GGUF file holds finite numbers (`toycards describe --check-tensors`).

Owns: `check_tensors(path)` → `TensorCheck`: every tensor's data read in chunks, dequantised
(quantised types block by block, through dequant.py) and its NaN and ±Inf values counted, with
the report lines the command prints. Memory stays bounded whatever the model's size: each chunk
is read with `readinto` into one reused buffer of about `chunk_elements` values (4 MB of float32
by default), never through the file's memory map, so not even the page cache of the process
grows with the model.
Leaves out: the header (header.py, reader.py), what the numbers mean (describe), and the
logits check of `run`, `eval` and `generate()` (runtime/model_base.py `require_finite`).

A quantised block is non-finite when its scale is: Q8_0 with d = NaN gives 32 NaN values, and
d = ±Inf gives ±Inf (or NaN where q = 0).

>>> report = check_tensors("model.gguf")                            # doctest: +SKIP
>>> report.ok, report.lines()                                        # doctest: +SKIP
(False, ["error: tensor 'blk.0.attn_norm.weight' (F32): 2 of 64 values are not finite (1 NaN, 1 Inf)",
         '1 of 20 tensors hold non-finite values'])
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from toycards.errors import ToycardsError
from toycards.gguf.facts import QUANT_SIZES
from toycards.gguf.header import TensorInfo, file_error
from toycards.gguf.reader import GGUFFile, open_gguf

CHUNK_ELEMENTS = 1 << 20  # values dequantised at a time: 4 MB of float32
_INTEGER_TYPES = frozenset({"I8", "I16", "I32", "I64"})  # always finite: nothing to read
_FLOAT_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "F64": np.dtype("<f8")}  # counted as stored


@dataclass(frozen=True)
class BadTensor:
    """A tensor holding non-finite values.

    >>> BadTensor("blk.0.attn_norm.weight", "F32", 64, 1, 1).line()
    "error: tensor 'blk.0.attn_norm.weight' (F32): 2 of 64 values are not finite (1 NaN, 1 Inf)"
    """

    name: str
    type_name: str
    n_elements: int
    n_nan: int
    n_inf: int

    def line(self) -> str:
        bad = self.n_nan + self.n_inf
        return (
            f"error: tensor '{self.name}' ({self.type_name}): {bad} of {self.n_elements} values "
            f"are not finite ({self.n_nan} NaN, {self.n_inf} Inf)"
        )


@dataclass
class TensorCheck:
    """What `check_tensors` found: the tensors with non-finite values, and those it could not read."""

    path: str
    n_tensors: int
    bad: list[BadTensor] = field(default_factory=list)
    unchecked: list[tuple[str, str]] = field(default_factory=list)  # (name, why)

    @property
    def ok(self) -> bool:
        return not self.bad

    def lines(self) -> list[str]:
        """One line per bad or unchecked tensor, then a summary line."""
        out = [b.line() for b in self.bad]
        out += [f"warning: tensor '{name}' not checked: {why}" for name, why in self.unchecked]
        if self.bad:
            out.append(f"{len(self.bad)} of {self.n_tensors} tensors hold non-finite values")
        elif self.unchecked:
            n = self.n_tensors - len(self.unchecked)
            out.append(f"all {n} checked tensors finite ({len(self.unchecked)} not checked)")
        else:
            out.append(f"all {self.n_tensors} tensors finite")
        return out


def check_tensors(path: str | os.PathLike, chunk_elements: int = CHUNK_ELEMENTS) -> TensorCheck:
    """Count the NaN and ±Inf values of every tensor of the GGUF file at `path`, chunk by chunk."""
    with open_gguf(path) as f, open(f.path, "rb", buffering=0) as fh:
        report = TensorCheck(f.path, len(f.tensors))
        buf = bytearray(_chunk_bytes(f, chunk_elements))
        for info in f.tensors.values():
            try:
                counts = _count(fh, f, info, buf, chunk_elements)
            except ToycardsError as e:  # a type gguf.quants cannot dequantise
                report.unchecked.append((info.name, e.message.split(": ")[-1]))
                continue
            if counts is None:
                report.unchecked.append((info.name, f"toycards cannot read its type {info.type_name}"))
            elif sum(counts):
                report.bad.append(BadTensor(info.name, info.type_name, info.n_elements, *counts))
    return report


def _chunk_bytes(f: GGUFFile, chunk_elements: int) -> int:
    """The size of the one read buffer: a whole number of blocks of the widest type in the file."""
    known = [t for t in f.tensors.values() if t.known_type]
    return max([_blocks_per_chunk(t, chunk_elements) * QUANT_SIZES[t.ggml_type][1] for t in known] or [0])


def _blocks_per_chunk(info: TensorInfo, chunk_elements: int) -> int:
    block, _ = QUANT_SIZES[info.ggml_type]
    return max(1, chunk_elements // block)


def _count(fh, f: GGUFFile, info: TensorInfo, buf: bytearray, chunk_elements: int) -> tuple[int, int] | None:
    """(NaN count, Inf count) of one tensor; None when its type is unknown."""
    from toycards.gguf.dequant import dequantize

    if not info.known_type:
        return None
    if info.type_name in _INTEGER_TYPES:
        return 0, 0
    block, type_size = QUANT_SIZES[info.ggml_type]
    step = _blocks_per_chunk(info, chunk_elements) * type_size  # bytes per chunk
    n_nan = n_inf = 0
    fh.seek(info.offset)
    for start in range(0, info.n_bytes, step):
        n = min(step, info.n_bytes - start)
        raw = np.frombuffer(_read_exactly(fh, memoryview(buf)[:n], f.path, info.name), dtype=np.uint8)
        if info.type_name in _FLOAT_DTYPES:
            x = raw.view(_FLOAT_DTYPES[info.type_name])  # counted as stored: no float32 copy
        else:
            blocks = raw.reshape(-1, type_size)  # (n_blocks, type_size)
            x = dequantize(
                blocks, info.ggml_type, (blocks.shape[0] * block,), f"{f.path}: tensor '{info.name}'"
            )
        if not np.isfinite(x).all():
            n_nan += int(np.count_nonzero(np.isnan(x)))
            n_inf += int(np.count_nonzero(np.isinf(x)))
    return n_nan, n_inf


def _read_exactly(fh, view: memoryview, path: str, name: str) -> memoryview:
    """Fill `view` from the file's current position (a short read only ever means a shrunk file)."""
    got = 0
    while got < len(view):
        n = fh.readinto(view[got:])
        if not n:
            raise file_error(path, f"tensor '{name}': the file ended while reading its data")
        got += n
    return view
