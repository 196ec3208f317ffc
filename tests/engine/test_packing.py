"""Packed copies of GGUF weights kept in their blocks, and the memory they live in: which weights pack
ahead, at their first decoding step or after some decoding (engine/packing.py states the rule), the
file's pages handed back as they are copied, resident copies on huge pages, and a NumPy prompt that
waits for the copies being made.

(The packed layout itself, tied to gguf.quants and a float64 product: test_quant_kernels.py.)
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import torch
from file_pages import file_ranges, mapped_kib
from gguf_factory import write_gguf
from test_quant_kernels import (  # noqa: F401 - prefill_as_shipped: the same products as shipped
    INT8,
    NO_KERNELS,
    PACKED,
    PACKED_LATER,
    SPLIT,
    Q,
    decode_logits,
    llama_file,
    packed_layout,
    prefill_as_shipped,
    small_blocks,
    tiny_llama,
)

import toycards
from toycards import engine
from toycards.engine import ckernels as quant_kernels
from toycards.engine import packing
from toycards.engine.numpy import quant as quant_numpy
from toycards.engine.torch import quant as quant_torch


@pytest.mark.skipif(not quant_kernels.pack_rows(Q.Q8_0) or not os.path.exists("/proc/self/smaps"),
                    reason="no packed kernels here, or no /proc/self/smaps")  # fmt: skip
@pytest.mark.parametrize("target", ["torch", "numpy"])
def test_packing_hands_the_file_pages_back(tmp_path, monkeypatch, target):
    """Once packed (by either target's weight), the weight's pages of the file mapping are no longer
    resident in this process (the packed copy replaces them, a slice at a time), and the weight still
    reads right (the file is only read)."""
    from toycards.gguf.reader import open_gguf

    monkeypatch.setattr(packing, "PACK_BYTES", 64 * 1024)

    rng = np.random.default_rng(5)
    w = rng.normal(0, 0.1, size=(256, 1024)).astype(np.float32)  # ~280 KB of Q8_0: ~68 pages
    path = write_gguf(tmp_path / "one.gguf", tensors={"m.weight": (w, Q.Q8_0)})
    f = open_gguf(path)
    blocks = f.raw("m.weight")
    assert not blocks.flags.writeable
    q = (quant_torch if target == "torch" else quant_numpy).QuantWeight(blocks, Q.Q8_0, w.shape)
    want = np.asarray(q.dequantize())  # reads every page of the tensor
    before = mapped_kib(path)
    assert before * 1024 >= 0.9 * blocks.nbytes
    x = rng.normal(size=(1, 1024)).astype(np.float32)
    y = np.asarray(q.linear(torch.from_numpy(x) if target == "torch" else x))  # packs
    after = mapped_kib(path)
    assert before - after >= 0.9 * blocks.nbytes / 1024 - 8, (before, after)
    assert np.array_equal(np.asarray(q.dequantize()), want)
    in_place = quant_numpy.QuantWeight(blocks, Q.Q8_0, w.shape)
    in_place._unpacked = False  # the rows as stored (mapped again from the file)
    assert np.array_equal(y, in_place.linear(x))
    writable = blocks.copy()  # anonymous memory: left alone by packing (MADV_DONTNEED would zero it)
    own = (quant_torch if target == "torch" else quant_numpy).QuantWeight(writable, Q.Q8_0, w.shape)
    own._pack()
    assert own._plan.packed == 1 and np.array_equal(writable, blocks)


pytestmark = pytest.mark.skipif(
    NO_KERNELS, reason="no C compiler (or TOYCARDS_QUANT_KERNELS=off): no kernels"
)


@pytest.mark.skipif(not quant_kernels.float_direct(0) or not os.path.exists("/proc/self/smaps"),
                    reason="no in-place float products here, or no /proc/self/smaps")  # fmt: skip
@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16], ids=lambda t: t.name)
def test_float_weights_are_copied_into_memory_of_their_own(tmp_path, monkeypatch, qtype):
    """With TOYCARDS_WEIGHTS=resident the torch target copies the matrices it would read in the
    file's pages (F32 parameters, F16 and BF16 weights kept in their bytes) into memory of its own
    as the model is made, the file's pages handed back as it copies (tied weights: one copy); its
    logits, a whole pass and decoding, are to the bit those of the weights read in the file's pages
    (the default), and a write to a weight (training) never reaches the file."""
    monkeypatch.setattr(packing, "PACK_BYTES", 64 * 1024)
    monkeypatch.setenv(packing.WEIGHTS, "resident")
    path = llama_file(
        tmp_path / "floats.gguf", (1, 512, 1024, 600, 4, 2), lambda i, name, shape: qtype, tied=True
    )
    on_disk = path.read_bytes()

    def matrices(model) -> list:
        if qtype == Q.F32:
            return [p for p in model.parameters() if p.dim() == 2]
        return list({id(w): w for w in model.w._quantized.values()}.values())

    def address(w) -> int:
        return w.data_ptr() if qtype == Q.F32 else w._plan.w

    model = toycards.load(path, target="torch")
    if model._packing_ahead is not None:
        model._packing_ahead.join()
    ranges = file_ranges(path)
    kept = matrices(model)
    assert len(kept) == 8  # the token embedding (the output too), Q, K, V, O, gate, up, down
    assert model.w["output.weight"] is model.w["token_embd.weight"]
    for w in kept:
        assert not any(a <= address(w) < b for a, b in ranges), w
        if qtype != Q.F32:
            assert w._packed is not None and w._plan.packed == 0
    mapped_bytes = sum(p.numel() * 4 for p in kept) if qtype == Q.F32 else sum(w.nbytes for w in kept)
    assert mapped_kib(path) * 1024 < 0.1 * mapped_bytes, (mapped_kib(path), mapped_bytes)

    monkeypatch.delenv(packing.WEIGHTS)
    mapped = toycards.load(path, target="torch")
    from toycards.models.load import SMALL_F32  # F32 tensors up to this size are read, never mapped

    in_file = [w for w in matrices(mapped) if qtype != Q.F32 or w.numel() * 4 > SMALL_F32]
    assert len(in_file) >= 3 and all(any(a <= address(w) < b for a, b in file_ranges(path)) for w in in_file)
    ids = [int(i) for i in np.random.default_rng(3).integers(0, 600, size=9)]
    assert np.array_equal(model.logits(ids), mapped.logits(ids))
    assert np.array_equal(decode_logits(model, ids), decode_logits(mapped, ids))
    if qtype == Q.F32:
        with torch.no_grad():
            for p in kept:
                p.add_(1.0)
        assert not np.array_equal(model.logits(ids), mapped.logits(ids))
    assert path.read_bytes() == on_disk


@pytest.mark.skipif(not quant_kernels.library(), reason="no C kernels here")
def test_weight_memory_is_aligned_zeroed_and_on_huge_pages_where_asked(monkeypatch):
    """Resident copies' memory starts on a cache line (a 2 MiB page when large), is zero and
    writable; large blocks are marked for the kernel's huge pages (THPeligible where the kernel has
    them); packed copies go there with TOYCARDS_WEIGHTS=resident."""
    thp = "/sys/kernel/mm/transparent_hugepage/enabled"
    huge = os.path.exists(thp) and "[never]" not in open(thp, encoding="utf-8").read()
    for nbytes in (1, 100, (2 << 20) + 5, 5 << 20):
        m = packing.weight_memory(nbytes)
        assert m.dtype == np.uint8 and m.shape == (nbytes,) and m.flags.writeable and not m.any()
        assert m.ctypes.data % (packing.HUGE_PAGE if nbytes >= packing.HUGE_PAGE else 64) == 0
        m[-1] = 7
        if nbytes >= packing.HUGE_PAGE and huge:
            assert _thp_eligible(m.ctypes.data)
    shape = (64, 256)
    blocks = small_blocks(Q.Q8_0, shape, np.random.default_rng(2))
    for resident in (False, True):
        if resident:
            monkeypatch.setenv(packing.WEIGHTS, "resident")
        for module in (quant_torch, quant_numpy):
            w = module.QuantWeight(np.repeat(blocks, 200, axis=0), Q.Q8_0, (shape[0] * 200, shape[1]))
            w._pack()
            assert (w._packed is not None) == bool(quant_kernels.pack_rows(Q.Q8_0))
            if w._packed is not None and huge and resident:  # (else the allocator's memory, whatever it is)
                assert _thp_eligible(w._plan.w)


def _thp_eligible(address: int) -> bool:
    """Whether the mapping holding `address` may get transparent huge pages (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps", encoding="utf-8") as fh:
        for line in fh:
            fields = line.split()
            if "-" in fields[0] and fields[0][0] in "0123456789abcdef" and len(fields) >= 5:
                start, end = (int(v, 16) for v in fields[0].split("-"))
                inside = start <= address < end
            elif inside and fields[0] == "THPeligible:":
                return fields[1] == "1"
    return False


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="no /proc/self/maps")
@pytest.mark.parametrize("target", ["torch", "numpy"])
def test_small_f32_tensors_are_read_not_mapped(tmp_path, target):
    """The norms' γ (and any F32 tensor up to load.SMALL_F32) live in the process's own memory, not in
    a mapping of the file: a mapped 2 KB γ maps the page-cache folio it lies in, which on ext4's large
    folios held 43 MB of SmolLM2 Q8_0's neighbouring weights, resident for the model's life. The
    matrices stay mapped, and the copies hold the file's values."""
    import toycards
    from toycards.gguf.reader import open_gguf
    from toycards.models.load import SMALL_F32

    path = tiny_llama(tmp_path, "Q8_0")
    model = toycards.load(path, target=target)
    ranges = file_ranges(path)
    with open_gguf(path) as f:
        small = {n: f.tensor(n, copy=True) for n, i in f.tensors.items() if i.type_name == "F32"}
        assert all(f.tensors[n].n_bytes <= SMALL_F32 for n in small)
    assert len(small) == 2 * 2 + 1  # two norms a layer, and the output norm

    def mapped(x) -> bool:
        at = x.data_ptr() if target == "torch" else x.ctypes.data
        return any(a <= at < b for a, b in ranges)

    assert mapped(model.w["blk.0.ffn_up.weight"].blocks)
    for name, want in small.items():
        w = model.w[name]
        assert not mapped(w), f"{name} is mapped from the file"
        np.testing.assert_array_equal(w.detach().numpy() if target == "torch" else w, want)


@pytest.mark.skipif(not PACKED_LATER, reason="no types here that pack after some decoding (AVX-512 VNNI)")
@pytest.mark.parametrize("target", ["torch", "numpy"])
def test_later_packing_after_some_decoding(tmp_path, monkeypatch, target):
    """In a Q4_K_M-style model (Q4_K, Q6_K) the K-quants are read as stored through the prompt and
    the first AFTER decoding steps, then pack one a step; every step's logits are those of a model
    whose weights never pack (the same floats, packed or not)."""
    monkeypatch.setattr(packing.LaterPacking, "AFTER", 3)
    monkeypatch.delenv(packing.WEIGHTS, raising=False)  # (resident weights all pack ahead)
    path = tiny_llama(tmp_path, "Q4_K_M")
    model = toycards.load(path, target=target)
    never = toycards.load(path, target=target)
    never._later.waiting = []
    kept = [w for w in model.w._quantized.values()] if target == "torch" else list(model.w.values())
    later = {id(w): w for w in kept if getattr(w, "_unpacked", False)}
    assert later and len(model._later.waiting) == len(later)
    caches = model.new_cache(), never.new_cache()
    with torch.inference_mode():
        assert np.array_equal(
            *(np.asarray(m(np.arange(20)[None], c)) for m, c in zip((model, never), caches))
        )
        assert all(w._packed is None for w in later.values())
        for t in range(3 + len(later)):
            a, b = (np.asarray(m(np.array([[t]]), c, last=True)) for m, c in zip((model, never), caches))
            assert np.array_equal(a, b)
            packed = sum(w._packed is not None for w in later.values())
            assert packed == max(0, t + 1 - 3)
    assert not model._later.waiting


@pytest.mark.skipif(not PACKED_LATER, reason="no types here that pack after some decoding (AVX-512 VNNI)")
@pytest.mark.parametrize("target", ["torch", "numpy"])
def test_resident_weights_all_pack_ahead(tmp_path, monkeypatch, target):
    """With TOYCARDS_WEIGHTS=resident the K-quants pack ahead of the first product as the other
    types do (no LaterPacking), into memory of the model's own; the logits, a pass and decoding,
    are those of the default model, whose K-quants are read as stored."""
    path = tiny_llama(tmp_path, "Q4_K_M")
    monkeypatch.delenv(packing.WEIGHTS, raising=False)
    default = toycards.load(path, target=target)
    monkeypatch.setenv(packing.WEIGHTS, "resident")
    model = toycards.load(path, target=target)
    assert not model._later.waiting and default._later.waiting
    model._packing_ahead.join()
    kept = list(model.w._quantized.values()) if target == "torch" else list(model.w.values())
    blocks = [w for w in kept if isinstance(w, quant_torch.QuantWeight | quant_numpy.QuantWeight)]
    assert blocks and all(w._packed is not None and w._plan.packed == 1 for w in blocks)
    ranges = file_ranges(path)
    assert not any(a <= w._plan.w < b for w in blocks for a, b in ranges)
    ids = [int(i) for i in np.random.default_rng(6).integers(0, 300, size=10)]
    assert np.array_equal(model.logits(ids), default.logits(ids))
    assert np.array_equal(decode_logits(model, ids), decode_logits(default, ids))


@pytest.mark.skipif(not PACKED, reason="no packed kernels on this CPU (AVX-512 VNNI)")
def test_weights_pack_together():
    """pack_weights copies several weights in one C call into one buffer: each copy is its weight's
    packed layout, on a cache line of its own, and multiplies as its rows as stored; a weight
    already packed is left as it is."""
    rng = np.random.default_rng(11)
    cases = [(t, shape) for t in SPLIT if t in PACKED for shape in ((13, 576), (9, 32))]
    weights, stored, xs = [], [], []
    for qtype, shape in cases:
        blocks = small_blocks(qtype, shape, rng)
        weights.append(quant_torch.QuantWeight(blocks, qtype, shape))
        stored.append(quant_numpy.QuantWeight(blocks, qtype, shape))
        stored[-1]._unpacked = False  # never packed: the rows as stored
        xs.append(rng.normal(size=(2, shape[1])).astype(np.float32))
    weights[0]._pack()
    first = weights[0]._packed
    packing.pack_weights(weights)
    assert weights[0]._packed is first  # packed once
    for w, s, x, (qtype, shape) in zip(weights, stored, xs, cases, strict=True):
        assert w._plan.packed == 1 and w._packed.data_ptr() % 64 == 0
        layout = packed_layout(s.blocks, qtype, shape[1], quant_kernels.pack_rows(qtype))
        assert np.array_equal(w._packed.numpy(), layout)
        assert np.array_equal(w.linear(torch.from_numpy(x)).numpy(), s.linear(x))


@pytest.mark.skipif(not PACKED, reason="no packed kernels on this CPU (AVX-512 VNNI)")
@pytest.mark.parametrize("target", ["torch", "numpy"])
@pytest.mark.parametrize("wait", [True, False], ids=["after-packing", "racing-it"])
def test_weights_pack_ahead_of_the_first_product(tmp_path, monkeypatch, target, wait):
    """A loaded model's weights that pack at their first product pack on a thread of their own as
    the model is made (here all of them before any product, when waited for); a prompt's pass that
    comes first (racing it) reads each weight as stored or packed, whichever it finds. Either way
    the logits are those of a model whose weights are read as stored (the same floats, packed or
    not)."""
    path = tiny_llama(tmp_path, "Q8_0")
    model = toycards.load(path, target=target)
    kept = list(model.w._quantized.values()) if target == "torch" else list(model.w.values())
    first = [w for w in kept if getattr(w, "_pack_first", False)]
    assert first and model._packing_ahead is not None
    with monkeypatch.context() as m:
        m.setattr(engine, "pack_ahead", lambda weights: None)
        stored = toycards.load(path, target=target)
    for w in stored.w._quantized.values() if target == "torch" else stored.w.values():
        if isinstance(w, quant_torch.QuantWeight | quant_numpy.QuantWeight):
            w._unpacked = False  # never packed: the rows as stored
    if wait:
        model._packing_ahead.join()
        assert all(w._plan.packed == 1 and w._packed is not None for w in first)
    ids = np.arange(20)[None]
    with torch.inference_mode():
        got, want = (
            np.asarray(m(torch.from_numpy(ids) if target == "torch" else ids)) for m in (model, stored)
        )
    assert np.array_equal(got, want)
    model._packing_ahead.join()
    assert all(w._plan.packed == 1 for w in first)


@pytest.mark.skipif(not quant_kernels.pack_rows(Q.Q4_0) or not os.path.exists("/proc/self/smaps"),
                    reason="no packed kernels here, or no /proc/self/smaps")  # fmt: skip
def test_a_numpy_prompt_waits_for_the_copies_being_made_instead_of_mapping_the_file(tmp_path, monkeypatch):
    """The NumPy target's prompt that comes while the pack-ahead thread is still at work (its copies
    made and the file's pages handed back, not yet adopted) waits for it and reads the copies: its
    embedding rows and products map none of the file's pages again (they would stay mapped, beside
    the copies), and its logits are those of the blocks as stored."""
    path = tiny_llama(tmp_path, "Q4_0")
    copied, adopt = threading.Event(), threading.Event()
    real = packing.packed_copies

    def held_before_adopting(items, one_thread=False):
        plans = real(items, one_thread)
        if threading.current_thread().name == "toycards-pack-ahead":
            copied.set()
            adopt.wait(0.3)  # the prompt below starts meanwhile
        return plans

    monkeypatch.setattr(packing, "packed_copies", held_before_adopting)
    model = toycards.load(path, target="numpy")
    assert model._packing_ahead is not None and copied.wait(30)
    before = mapped_kib(path)  # the header's pages; the weights' were handed back as they were copied
    ids = np.arange(20)[None]
    got = model(ids)
    adopt.set()
    model._packing_ahead.join()
    weights = [w for w in model.w.values() if isinstance(w, quant_numpy.QuantWeight)]
    assert weights and all(w._plan.packed == 1 for w in weights)
    size = sum(w.blocks.nbytes for w in weights)
    assert (mapped_kib(path) - before) * 1024 < 0.05 * size, (before, mapped_kib(path), size)
    monkeypatch.setattr(engine, "pack_ahead", lambda weights: None)
    stored = toycards.load(path, target="numpy")
    for w in stored.w.values():
        if isinstance(w, quant_numpy.QuantWeight):
            w._unpacked = False  # never packed: the rows as stored
    assert np.array_equal(np.asarray(got), np.asarray(stored(ids)))


@pytest.mark.skipif(not INT8, reason="no int8 GEMM on this CPU (AVX2 or AVX-512)")
def test_a_numpy_prompt_keeps_its_c_kernels_to_one_thread_once_numpys_blas_has_run(tmp_path, monkeypatch):
    """The NumPy target's prompt runs its int8 GEMMs and its attention on the kernels' threads while
    NumPy's BLAS has run no product in the process, and on the calling thread alone from the first
    one on (its threads would spin against the kernels'): a card's own `ops.matmul` is one. The
    logits are the same floats either way (each tile's sums are one thread's)."""
    path = tiny_llama(tmp_path, "Q8_0")
    monkeypatch.setattr(quant_numpy, "_blas_ran", False)
    gemm_threads, attention_threads = [], []
    real_gemm, real_library = quant_kernels.gemm, quant_kernels.library

    def gemm(p, x_ptr, t, y_ptr, one_thread=False):
        gemm_threads.append(one_thread)
        return real_gemm(p, x_ptr, t, y_ptr, one_thread)

    class Library:  # the kernels, tc_gqa's argument seen on its way
        def __getattr__(self, name):
            return getattr(real_library(), name)

        def tc_gqa(self, args):
            attention_threads.append(args._obj.one_thread)
            return real_library().tc_gqa(args)

    monkeypatch.setattr(quant_kernels, "gemm", gemm)
    monkeypatch.setattr(quant_kernels, "library", Library)
    model = toycards.load(path, target="numpy")
    ids = np.arange(20)[None]
    free = np.asarray(model(ids))
    assert gemm_threads and attention_threads
    assert not any(gemm_threads) and not any(attention_threads)
    assert not quant_numpy.prompt_one_thread()
    gemm_threads.clear(), attention_threads.clear()
    from toycards.runtime.numpy import ops as ops_numpy

    ops_numpy.matmul(np.ones((3, 4), np.float32), np.ones((4, 2), np.float32))
    assert quant_numpy.prompt_one_thread()
    kept = np.asarray(model(ids))
    assert gemm_threads and all(gemm_threads) and attention_threads and all(attention_threads)
    assert np.array_equal(free, kept)


@pytest.mark.skipif(not PACKED, reason="no packed kernels on this CPU (AVX-512 VNNI)")
@pytest.mark.parametrize("target", ["torch", "numpy"])
def test_weights_over_the_pack_ahead_budget_pack_at_their_first_decoding_step(tmp_path, monkeypatch, target):
    """Weights that come to more than PACK_AHEAD_BYTES do not pack as the model is made (its load
    stays lazy: no copy, the file's blocks read in place), nor for a prompt's many-token products
    (the int8 GEMM's tiles come as fast from the blocks as stored), but each at its first few-token
    product (decoding); at the budget exactly they do pack ahead. The logits are those of the rows
    as stored either way."""
    path = tiny_llama(tmp_path, "Q8_0")

    def first_weights(model):
        kept = list(model.w._quantized.values()) if target == "torch" else list(model.w.values())
        return list({id(w): w for w in kept if getattr(w, "_pack_first", False)}.values())

    budget = sum(w.blocks.nbytes for w in first_weights(toycards.load(path, target=target)))
    monkeypatch.setattr(packing, "PACK_AHEAD_BYTES", budget)
    ahead = toycards.load(path, target=target)
    assert ahead._packing_ahead is not None
    ahead._packing_ahead.join()
    assert all(w._plan.packed == 1 for w in first_weights(ahead))

    monkeypatch.setattr(packing, "PACK_AHEAD_BYTES", budget - 1)
    model = toycards.load(path, target=target)
    first = first_weights(model)
    assert first and model._packing_ahead is None
    ranges = file_ranges(path)  # this model's mapping of the file among them
    assert all(
        w._unpacked and w._packed is None and any(a <= w._plan.w < b for a, b in ranges) for w in first
    )
    products = [w for w in first if w.name != "token_embd.weight"]  # the table's rows are only gathered
    assert len(products) == len(first) - 1
    for n_tokens in (20, 1):  # a prompt (many-token products), then one token (few-token products)
        ids = np.arange(n_tokens)[None]
        with torch.inference_mode():
            got, want = (
                np.asarray(m(torch.from_numpy(ids) if target == "torch" else ids)) for m in (model, ahead)
            )
        assert np.array_equal(got, want)
        packed = [w._plan.packed == 1 and w._packed is not None for w in products]
        assert packed == [n_tokens <= quant_torch.FEW_TOKENS] * len(products), (n_tokens, packed)


@pytest.mark.skipif(not PACKED, reason="no packed kernels on this CPU (AVX-512 VNNI)")
@pytest.mark.parametrize("target", ["torch", "numpy"])
def test_a_load_where_no_thread_starts_reads_and_packs_nothing_ahead(tmp_path, monkeypatch, target):
    """Where the system starts no more threads (RuntimeError from Thread.start), `load` still makes
    the model: nothing is read or packed ahead, no file descriptor is left open, the weights pack
    at their first decoding product, and the logits are those of a model loaded as usual."""
    path = tiny_llama(tmp_path, "Q8_0")
    usual = toycards.load(path, target=target)
    if usual._packing_ahead is not None:
        usual._packing_ahead.join()
    started = []

    def refuse(thread):
        started.append(thread.name)
        raise RuntimeError("can't start new thread")

    opened, os_open = [], os.open

    def record(*args, **kwargs):
        opened.append(os_open(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(threading.Thread, "start", refuse)
    monkeypatch.setattr(os, "open", record)
    model = toycards.load(path, target=target)
    monkeypatch.undo()
    assert sorted(started) == ["toycards-pack-ahead", "toycards-read-ahead"]
    assert model._packing_ahead is None and opened  # (the read-ahead's descriptor)
    for fd in opened:
        with pytest.raises(OSError):
            os.fstat(fd)  # closed
    kept = list(model.w._quantized.values()) if target == "torch" else list(model.w.values())
    first = [w for w in kept if getattr(w, "_pack_first", False) and w.name != "token_embd.weight"]
    assert first and all(w._unpacked for w in first)
    for n_tokens in (20, 1):
        ids = np.arange(n_tokens)[None]
        with torch.inference_mode():
            got, want = (
                np.asarray(m(torch.from_numpy(ids) if target == "torch" else ids)) for m in (model, usual)
            )
        assert np.array_equal(got, want)
    assert all(w._plan.packed == 1 for w in first)


@pytest.mark.skipif(not quant_kernels.packs_at_first_decoding(Q.Q8_0), reason="no packed kernels on this CPU")
@pytest.mark.parametrize("target", ["torch", "numpy"])
def test_a_row_view_packs_its_whole_weight_at_its_first_decoding_product(target, monkeypatch):
    """A view of rows made before its weight packed (`W[a:b]`) leaves the blocks as stored through a
    prompt's product, and at its first few-token product packs the whole weight: a view on the copy's
    groups then reads that copy (no second one), a view off them a copy of its own. Products equal
    the whole weight's rows throughout."""
    monkeypatch.delenv(packing.WEIGHTS, raising=False)
    rng = np.random.default_rng(13)
    shape, group = (40, 256), quant_kernels.pack_rows(Q.Q8_0)
    blocks = small_blocks(Q.Q8_0, shape, rng)
    module = quant_torch if target == "torch" else quant_numpy
    W = module.QuantWeight(blocks, Q.Q8_0, shape)
    stored = quant_numpy.QuantWeight(blocks, Q.Q8_0, shape)
    stored._unpacked = False  # never packed: the rows as stored
    on, off = W[group : 3 * group], W[5:29]
    for n_tokens in (quant_torch.FEW_TOKENS + 4, 1):  # a prompt, then a decoding step
        x = rng.normal(size=(n_tokens, shape[1])).astype(np.float32)
        want = stored.linear(x)
        for view, (a, b) in ((on, (group, 3 * group)), (off, (5, 29))):
            y = view.linear(torch.from_numpy(x) if target == "torch" else x)
            assert np.array_equal(np.asarray(y), want[:, a:b])
        if n_tokens > quant_torch.FEW_TOKENS:
            assert W._packed is None and on._packed is None and off._packed is None
    assert W._packed is not None and W._plan.packed == 1
    assert np.shares_memory(np.asarray(on._packed), np.asarray(W._packed))
    assert off._packed is not None and not np.shares_memory(np.asarray(off._packed), np.asarray(W._packed))
