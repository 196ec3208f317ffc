"""When GGUF weights kept in their blocks get their packed copies (the layout the few-token
products read fastest, engine.ckernels.pack_rows), for either target, and the memory those copies
(and the torch target's copies of the float weights it would otherwise read in the file's pages)
live in.

Owns: `pack_weights` (the copies of many weights in one C call, the file's pages handed back as
they are copied, under the `PACKING` lock, so that a weight packs once whichever thread asks),
`packs_first` (the types that pack at their first few-token product, not at a prompt's: Q4_0,
Q4_1, Q5_0, Q5_1, Q8_0, on AVX2 the K-quants too; where resident, every type), `copy_due` (a weight
of those not packed yet), `pack_ahead` (those
on a thread of their own as a model is made, where they come to PACK_AHEAD_BYTES or less, or where
resident: then also the float types the torch target copies),
`LaterPacking` (after some decoding: the K-quants on AVX-512), `row_view` (a weight's rows as a weight,
reading its packed copy), `resident` and `weight_memory` (`TOYCARDS_WEIGHTS=resident`: copies
on 2 MiB pages, the float weights copied too), `resident_float32` (a model's float32 matrices
copied there).
Leaves out: the packed layout and the products on it (kernels/pack.c, engine/ckernels.py), the
weights themselves (engine/torch/quant.py, engine/numpy/quant.py: `_stored`, `_buffer`, `_adopt`), and the
model's file: reading it ahead, watching it for changes, the threads that work on it (engine/mapped.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import sys
import threading
import weakref

import numpy as np

from toycards.engine.ckernels import F32, Plan, _check, library, pack_rows, packs_at_first_decoding, plan
from toycards.engine.mapped import Background, file_view, started, unchanged

PACKING = threading.Lock()  # weights pack under this lock (each weight packs once)
PACK_BYTES = 1 << 20  # bytes of a weight packed (and its file pages handed back) at a time
PACK_AHEAD_BYTES = 256 << 20  # the most bytes of weights that pack as a model is made (pack_ahead)
AHEAD_STEP_BYTES = 32 << 20  # bytes of weights pack_ahead copies in one C call, between looks at the file
WEIGHTS = "TOYCARDS_WEIGHTS"
HUGE_PAGE = 2 << 20  # bytes of one of the kernel's transparent huge pages (x86-64, most arm64)
MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)  # Linux's number where Python does not name it


def resident() -> bool:
    """Whether the weights the torch target reads in place are copied into memory of its own on
    2 MiB pages (`TOYCARDS_WEIGHTS=resident`; the C kernels needed): the float types (F32, F16,
    BF16) as the model is made, the file's pages handed back as it copies, and every packed copy
    (either target) on `weight_memory` too, the K-quants' made ahead as the others' (not after
    some decoding: `LaterPacking` waits because of that first cost). By default (`mapped`) the
    float weights are read in the file's pages (shared with the page cache and other processes, as
    llama.cpp's default `mmap`) and packed copies lie on ordinary pages.

    Why not by default: a decoding step reads every weight once, and copies on 2 MiB pages take
    fewer TLB misses on that stream of hundreds of MB; but fresh memory is costly the first time it
    is touched (the system backs it then; the file's pages are backed already), so the load and the
    first prompt take longer, and only a long generation repays them. `bench/vs_llama_cpp.py
    --weights resident` measures both sides."""
    value = os.environ.get(WEIGHTS, "").strip().lower()
    return value == "resident" and library() is not None


def packs_first(ggml_type: int) -> bool:
    """Whether a weight of this type that has a faster copy makes it at its first few-token product
    (resident weights: every type; else the types whose copy regroups the blocks,
    `packs_at_first_decoding`), rather than after some decoding (`LaterPacking`); or ahead of it
    (`pack_ahead`). Both targets' QuantWeight ask this.

    Not at a prompt's many-token product: the int8 GEMM builds its tiles from the blocks as stored
    about as fast as from the copy, and a copy made there would be fresh memory on the prompt's
    critical path (and of no use where no token is decoded: scoring, `logits()`); it is made ahead
    (`pack_ahead`) or at the first decoding step instead. `bench/vs_llama_cpp.py --shape llama-1b`
    prints the first prefill and the decoding this trades (with the AVX2 kernels every weight of
    that file packs)."""
    return resident() or packs_at_first_decoding(ggml_type)


def weight_memory(nbytes: int) -> np.ndarray:
    """`nbytes` new zero bytes (uint8) for resident weights' copies, starting on a cache line:
    anonymous memory on 2 MiB pages where the kernel gives them (`madvise(MADV_HUGEPAGE)` on an
    aligned mapping, Linux; freed when the last array over it goes), else ordinary memory."""
    if nbytes < HUGE_PAGE or not sys.platform.startswith("linux"):
        whole = np.zeros(nbytes + 64, dtype=np.uint8)
        start = -whole.ctypes.data % 64
        return whole[start : start + nbytes]
    whole = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    start = -ctypes.addressof(ctypes.c_char.from_buffer(whole)) % HUGE_PAGE
    with contextlib.suppress(OSError, ValueError):  # no THP in this kernel: ordinary pages
        whole.madvise(MADV_HUGEPAGE, start, -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE)
    return np.frombuffer(whole, dtype=np.uint8, count=nbytes, offset=start)


def _reset_packing_in_child() -> None:
    """A process forked while a thread packed (pack_ahead) has that thread's lock held and no thread:
    its weights are as they were before the packing (unpacked) and pack anew (`packs_first`)."""
    global PACKING
    PACKING = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_packing_in_child)


def packed_copies(items, one_thread: bool = False) -> list[Plan]:
    """Copy each weight of `items`, (plan p, its bytes as stored: uint8 [n, row_bytes], the address
    of as many bytes), into those bytes in the packed layout, in one C call (tc_pack_weights): about
    PACK_BYTES at a time, the file's pages of each slice handed back as it is copied where the bytes
    are a read-only view of a file (`file_view`), so a weight costs its size once. The plans that
    read the copies. `one_thread`: on the calling thread alone (see tc_dequant_rows)."""
    n = len(items)
    plans = (Plan * n)(*(p for p, _, _ in items))
    outs = (ctypes.c_void_p * n)(*(out for _, _, out in items))
    back = (ctypes.c_uint8 * n)(*(int(file_view(blocks)) for _, blocks, _ in items))
    _check(library().tc_pack_weights(plans, outs, back, n, PACK_BYTES, int(one_thread)), "pack")
    copies = []
    for p, _, out in items:
        packed = plan(p.type, out, p.row_bytes, p.n, p.k)
        packed.packed = int(pack_rows(p.type) > 0)  # else a copy as stored (tc_pack_weights)
        copies.append(packed)
    return copies


def resident_float32(weights: dict) -> dict:
    """`weights` (name → array or weight) with each float32 array that is a read-only view of a
    file (C order) replaced by a copy of the same shape in one block of `weight_memory`, the file's
    pages handed back as each is copied (one C call, `packed_copies`); names that share an array
    (tied weights) share its copy; the others as they are. Where not `resident()`, `weights`."""
    todo = {
        id(a): a
        for a in weights.values()
        if isinstance(a, np.ndarray)
        and a.dtype == np.float32
        and a.ndim
        and a.flags.c_contiguous
        and file_view(a)
    }
    if not todo or not resident():
        return weights
    unchanged(todo.values())
    offsets, total = {}, 0
    for key, a in todo.items():
        offsets[key] = total
        total += -(-a.nbytes // 64) * 64  # each copy on a cache line of its own
    buffer = weight_memory(total)
    items = []
    for key, a in todo.items():
        k = a.shape[-1]
        items.append((plan(F32, a.ctypes.data, 4 * k, a.size // k, k), a, buffer.ctypes.data + offsets[key]))
    packed_copies(items)
    copies = {
        key: buffer[o : o + todo[key].nbytes].view(np.float32).reshape(todo[key].shape)
        for key, o in offsets.items()
    }
    return {name: copies.get(id(a), a) for name, a in weights.items()}


def pack_weights(weights, one_thread: bool = False) -> None:
    """Each of `weights` (engine/torch/quant.py's or engine/numpy/quant.py's QuantWeight) not yet packed gets its packed
    copy (`packed_copies`, one C call for them all, into one new buffer: one allocation, which torch
    makes without Python's lock, where one per weight let another thread take it back each time) and
    reads it from then on; under PACKING, so that a weight packs once whichever thread asks first.
    A row view (`row_view`) packs its whole weight, whose copy then holds its rows where they fall
    on the copy's groups, and a copy of its own only where they do not."""
    with PACKING:
        _pack_held(weights, one_thread)


def _pack_held(weights, one_thread: bool) -> None:
    """`pack_weights` under PACKING: the whole weights of row views first, then the weights."""
    _pack_unpacked([w._whole for w in weights if getattr(w, "_whole", None) is not None], one_thread)
    _pack_unpacked(weights, one_thread)


def copy_due(weight) -> bool:
    """Whether `weight` (either target's QuantWeight, or any other weight: False) is to read a packed
    copy from its first few-token product on (`packs_first`) and has none yet: a few-token product
    makes it first, a prompt's waits for one being made (`packed_when_done`), and `pack_ahead` may
    make it before either."""
    return getattr(weight, "_unpacked", False) and weight._pack_first


def packed_when_done() -> None:
    """Wait for a packing in progress (PACKING held: `pack_ahead`'s thread, usually), so that a weight
    it was copying is read in its copy from then on; at once where none is. The NumPy target's
    prompt does (its embedding rows and its products of the weights that pack first), where it
    would otherwise map again pages of the file that the thread had already handed back (the
    embedding's rows, a fault-around each, and the first layers' blocks), and keep them: a higher
    peak, for a first prefill no shorter. `bench/vs_llama_cpp.py --numpy` prints the NumPy target's
    peak against the file's size."""
    if PACKING.locked():
        with PACKING:
            pass


def _pack_unpacked(weights, one_thread: bool) -> None:
    """`pack_weights`' copies (under PACKING) of those of `weights` not packed yet; a ToycardsError,
    and nothing copied, where their file has changed since it was opened (`FileWatch`)."""
    todo = list({id(w): w for w in weights if w._unpacked}.values())
    if not todo:
        return
    stored = [w._stored() for w in todo]  # (plan, blocks)
    unchanged(blocks for _, blocks in stored)
    offsets, total = [], 0
    for _, blocks in stored:
        offsets.append(total)
        total += -(-blocks.nbytes // 64) * 64  # each copy on a cache line of its own
    buffer, at = todo[0]._buffer(total)
    items = [(p, blocks, at + o) for (p, blocks), o in zip(stored, offsets, strict=True)]
    plans = packed_copies(items, one_thread)
    for w, (_, blocks), o, packed in zip(todo, stored, offsets, plans, strict=True):
        w._adopt(buffer[o : o + blocks.nbytes], packed)
        _share_rows(w)


def row_view(weight, a: int, b: int, make):
    """Rows a … b−1 of `weight` (either target's QuantWeight, rows 0 … n−1 not all of them) as a
    weight of their own, `make(a, b)` over the same blocks, made once and kept in the weight. When
    the view is to pack (its first few-token product, `packs_first`), the whole weight packs, and a
    view whose rows fall on its packed groups reads them in its copy (a card slicing a fused weight,
    Phi-3's gate and up rows, then costs no second copy; the file's pages of a packed weight are
    handed back, and a view of its blocks would read them in again)."""
    views = weight.__dict__.setdefault("_views", {})
    view = views.get((a, b))
    if view is None:
        view = views[a, b] = make(a, b)
        view._whole = weight  # what pack_weights packs for it
        with PACKING:
            _share_rows(weight)
    return view


def _share_rows(weight) -> None:
    """Each row view of `weight` with no copy of its own reads its rows of the weight's packed copy,
    where they fall on its groups (a copy as stored: any rows; under PACKING; again whenever the
    weight packs)."""
    if weight._packed is None:
        return
    p, n, row_bytes = weight._plan, weight.shape[0], weight.row_bytes
    group = pack_rows(weight.ggml_type) if p.packed else 1
    for (a, b), view in weight.__dict__.get("_views", {}).items():
        if view._unpacked and group and a % group == 0 and (b % group == 0 or b == n):
            rows = plan(p.type, p.w + a * row_bytes, row_bytes, b - a, p.k)
            rows.packed = p.packed
            view._adopt(weight._packed[a * row_bytes : b * row_bytes], rows)


def pack_ahead(weights) -> threading.Thread | None:
    """Pack the weights that pack at their first few-token product (`packs_first`) on a thread of
    their own, started as a model is made: while the loader then reads the vocabulary (Python, under
    its interpreter lock) the packing runs in C without that lock, on another core, instead of in
    the first prefill, where the copies' fresh pages would be on its critical path. A few-token
    product that comes first waits for it under PACKING; a prompt's product reads each weight as
    stored or packed, whichever it finds. Should it fail (memory), the weights stay as they are and
    pack at their first few-token product, which then says why.

    Only where they come to PACK_AHEAD_BYTES or less, unless `resident()` (copies asked for as the
    model is made): more would not be copied by the time the loader is done, and the load would no
    longer be lazy (its peak before the first token would hold the weights). `bench/vs_llama_cpp.py`
    prints the first token's wait and the peak RSS this trades, on SmolLM2-135M (below the bound)
    and with `--shape llama-1b` (above it).

    The thread holds the weights by weak references and copies AHEAD_STEP_BYTES of them at a time
    (one C call each: between calls it needs Python's lock, which the loader holds while it runs
    Python): before each step it stops where it was told to (`Background.stop`: a load that failed,
    `stopped_on_failure`), where a weight is gone (the model was dropped) or where their file has
    changed (module docstring); the weights it did not copy pack at their first few-token product,
    which then says why."""
    todo = list({id(w): w for w in weights if copy_due(w)}.values())
    if not todo or library() is None:
        return None
    if not resident() and sum(w.blocks.nbytes for w in todo) > PACK_AHEAD_BYTES:
        return None  # they pack at their first few-token product
    refs = [weakref.ref(w) for w in todo]
    del todo

    def run(halt: threading.Event) -> None:
        if not _acquired(PACKING, halt):
            return
        try:
            at = 0
            while at < len(refs) and not halt.is_set():
                step, at = _ahead_step(refs, at)
                if step is None:  # the model was dropped
                    return
                _pack_held(step, one_thread=True)
                del step  # held by weak references alone between steps
        finally:
            PACKING.release()

    return started(Background("toycards-pack-ahead", run))


def _ahead_step(refs, at: int) -> tuple[list | None, int]:
    """The weights of `refs` from `at` on that come to AHEAD_STEP_BYTES (at least one), and where the
    next step starts; None where one of them is gone."""
    step, size = [], 0
    while at < len(refs) and (not step or size < AHEAD_STEP_BYTES):
        w = refs[at]()
        if w is None:
            return None, at
        step.append(w)
        size += w.blocks.nbytes
        at += 1
    return step, at


def _acquired(lock: threading.Lock, halt: threading.Event) -> bool:
    """`lock` taken, or False (not taken) once `halt` is set while it waits for it."""
    while not lock.acquire(timeout=0.05):
        if halt.is_set():
            return False
    if halt.is_set():
        lock.release()
        return False
    return True


class LaterPacking:
    """The packed copies of one model's weights that pack only after some decoding: those whose copy
    only puts a group's rows side by side (`pack_rows`, not `packs_at_first_decoding`). Their copy
    pays for itself only over a long generation: each decoding step gains a little from reading one
    stream, while the copy costs fresh memory at once, so a short run is faster without it. They
    are read as the file stores them until AFTER decoding steps have run, then one weight packs
    after each further step (a short pause each, where all at once would stall one token). The
    products are the same floats either way. `bench/vs_llama_cpp.py --shape llama-1b` on an
    AVX-512 machine measures it."""

    AFTER = 64

    def __init__(self, weights) -> None:
        unique = {id(w): w for w in weights if getattr(w, "_unpacked", False) and not w._pack_first}
        self.waiting = list(unique.values())
        self.steps = 0

    def step(self) -> None:
        """One decoding step has run."""
        if self.waiting:
            self.steps += 1
            if self.steps > self.AFTER:
                self.waiting.pop(0)._pack()
