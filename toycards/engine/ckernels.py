"""The C kernels for GGUF weights kept in their blocks: built once with the system compiler, called by ctypes.

Owns: compiling the C files of kernels/ (kernels/tc.h says what each holds) into one library
(`cc -O3 -march=native -fopenmp -shared`) in the toycards cache (a file named after the sources, the
compiler and the machine, so an edit or another CPU builds afresh), loading it, and the calls on a
weight's `Plan` (its type, shape and where its bytes are): `linear_fn` (few tokens, or any number
where `quantizes_x`), `gemm` (the int8 GEMM, optionally on the calling thread), `dequant_rows` (a tile
of rows, for a float GEMM on many tokens, or the whole matrix), `gather_rows` (embedding lookups) and
`pack` (a copy in the layout the few-token product reads fastest, where `pack_rows`; when weights
pack is engine/packing.py's). Which ggml types have a kernel is `SUPPORTED`.
Leaves out: torch and NumPy weights (engine/torch/quant.py, engine/numpy/quant.py), the reference
(gguf.quants.dequantize, which the tests hold these kernels to).

The library is loaded only from a cached file that matches the record of its size and checksum
(engine/build.py builds it again where not); one that matches but lacks a kernel is built once more. No
compiler, or a build or load that fails (said once on stderr): `available()` is False and the
weights are dequantized per use with gguf.quants instead (correct, slower);
`TOYCARDS_QUANT_KERNELS=off` forces that path.
Whether the few-token products of every type prefetch their weight stream, not only the K-quants',
is chosen per model by timing its first decoding steps both ways (`PrefetchChoice`: it pays on some
hosts and costs on others); `TOYCARDS_QUANT_PREFETCH=on` or `off` fixes it.
There is one OpenMP runtime in the process: the library asks for `libgomp.so.1`, which is the one
torch ships when torch came first (so `torch.set_num_threads` also sets the kernels' threads), and
the one torch then uses when the kernels came first.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import statistics
import threading
import time
from pathlib import Path

from toycards.engine import build
from toycards.gguf.facts import QUANT_NAMES, TYPE_IDS

SOURCES = tuple(sorted(Path(__file__).with_name("kernels").glob("*.c")))  # compiled together into one library
# TOYCARDS_QUANT_MARCH: the -march to build for (default native; e.g. x86-64-v3 for the AVX2 kernels)
FLAGS = ("-O3", f"-march={os.environ.get('TOYCARDS_QUANT_MARCH', 'native')}", "-fopenmp", "-fPIC", "-shared",
         "-std=c11")  # fmt: skip
# the ggml types with a kernel, kept in their blocks (ids from gguf.GGMLQuantizationType)
KEPT_TYPES = ("F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K", "MXFP4")
SUPPORTED = frozenset(TYPE_IDS[name] for name in KEPT_TYPES)
F32 = TYPE_IDS["F32"]

_lib: ctypes.CDLL | None = None
_tried = False
build_error = ""  # the compiler's last words when the build failed
_P, _I, _D = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            return next((line for line in fh if line.startswith("flags")), "")
    except OSError:
        return ""


def compiler() -> str | None:
    """The C compiler the kernels are built with ($CC, else cc, gcc or clang), or None."""
    return build.compiler(os.environ.get("CC"), "cc", "gcc", "clang")


TITLE = "the C kernels"  # how engine/build.py names them on stderr


def _build() -> ctypes.CDLL | None:
    """The kernels built (or found in the cache, whole: build.shared_library) and loaded; built once
    more where a library that matched its record does not load or lacks a kernel, and None (said on
    stderr, once) where that fails too."""
    global build_error
    cc = compiler()
    if cc is None:
        return None
    machine = platform.machine() + platform.processor() + _cpu_flags()
    no_openmp = [f for f in FLAGS if f != "-fopenmp"]  # no OpenMP: one thread
    attempts = [[*FLAGS, "-lm"], [*no_openmp, "-lm"]]
    for rebuild in (False, True):
        try:
            target = build.shared_library("quant-kernels", cc, SOURCES, attempts, machine, TITLE, rebuild)
        except build.BuildError as e:  # engine/build.py has said so
            build_error = str(e)
            return None
        try:
            lib = ctypes.CDLL(str(target))
        except OSError as e:  # a library it needs is missing (libgomp)
            build_error = str(e)
            continue
        try:
            return _bound(lib)
        except AttributeError as e:  # not these kernels: "undefined symbol: tc_…"
            build_error = str(e)
            _unload(lib)  # else loading the rebuilt file by the same name would give this one again
    build.fallback(TITLE, build_error)
    return None


def _unload(lib: ctypes.CDLL) -> None:
    """Close a library that will not be used (POSIX dlclose), so that its name loads afresh."""
    import _ctypes

    with contextlib.suppress(AttributeError, OSError):
        _ctypes.dlclose(lib._handle)


def _bound(lib: ctypes.CDLL) -> ctypes.CDLL:
    """`lib` with each kernel's argument and result types set; AttributeError where one is missing."""
    for name in ("tc_gqa", "tc_rms_norm", "tc_rope", "tc_attention"):  # the others' are set below
        getattr(lib, name)
    lib.tc_dequant_rows.argtypes = [ctypes.POINTER(Plan), _I, _I, _P, _I]
    lib.tc_gather_rows.argtypes = [ctypes.POINTER(Plan), _P, _I, _P]
    lib.tc_pack.argtypes = [ctypes.POINTER(Plan), _I, _I, _P, _I]
    plans, addresses, flags = ctypes.POINTER(Plan), ctypes.POINTER(_P), ctypes.POINTER(ctypes.c_uint8)
    lib.tc_pack_weights.argtypes = [plans, addresses, flags, _I, _I, _I]
    lib.tc_quantizes_x.argtypes = [ctypes.c_int]
    lib.tc_float_direct.argtypes = [ctypes.c_int]
    lib.tc_packs.argtypes = [ctypes.c_int]
    lib.tc_gemm_linear.argtypes = [ctypes.POINTER(Plan), _P, _I, _P, _I]
    lib.tc_gemm_x_block.argtypes = [ctypes.c_int]
    lib.tc_read_ahead.argtypes = [_I, _I, _I, _I]
    lib.tc_limit.argtypes = [ctypes.c_int]
    if (lib.tc_limit(0), lib.tc_limit(1)) != (FEW_TOKENS, FEW_FLOAT_TOKENS):  # one fact, two languages
        raise AttributeError(f"the kernels' token limits are not FEW_TOKENS, FEW_FLOAT_TOKENS in {__name__}")
    lib.tc_supported.argtypes = [ctypes.c_int]
    if {t for t in QUANT_NAMES if lib.tc_supported(t)} != SUPPORTED:  # the types with a kernel, likewise
        raise AttributeError(f"the kernels' types are not SUPPORTED in {__name__}")
    for fn in (
        lib.tc_pack,
        lib.tc_pack_weights,
        lib.tc_packs,
        lib.tc_dequant_rows,
        lib.tc_gather_rows,
        lib.tc_quantizes_x,
        lib.tc_float_direct,
        lib.tc_gemm_linear,
        lib.tc_gemm_x_block,
        lib.tc_linear,
        lib.tc_swiglu,
        lib.tc_silu_mul,
        lib.tc_linears,
        lib.tc_read_ahead,
    ):
        fn.restype = ctypes.c_int
    lib.tc_set_prefetch.argtypes = [ctypes.c_int]
    lib.tc_prefetch.restype = ctypes.c_int
    lib.tc_pack_regroups.restype = ctypes.c_int
    lib.tc_set_prefetch(prefetch_others() or 0)
    return lib


PREFETCH = "TOYCARDS_QUANT_PREFETCH"


def prefetch_others() -> int | None:
    """What $TOYCARDS_QUANT_PREFETCH fixes for the few-token products of the types other than the
    K-quants: 1 (`on`: they prefetch their weight stream too, see kernels/tc.h's `ahead`), 0 (`off`), or
    None (unset or anything else: each model's `PrefetchChoice` times both where it runs)."""
    return {"on": 1, "off": 0}.get(os.environ.get(PREFETCH, "").strip().lower())


_clock = time.perf_counter  # what PrefetchChoice times steps by


class PrefetchChoice:
    """Whether one model's few-token products prefetch their weight stream (kernels/tc.h's `ahead_other`),
    chosen where it runs by timing the model's own decoding steps: on some CPUs the hardware
    prefetchers alone keep too few lines in flight and prefetching pays, on others it costs. The
    products are the same floats either way.

    `run(step)` runs one forward pass of few tokens with the model's setting: after WARMUP steps
    (first-use costs), steps each way in the order on, off, off, on … (so that a cache growing by a
    token a step favours neither) until one way's slowest of at least SURE steps beats the other's
    fastest (a gap that matters shows within four steps, so trying the slower way costs little), or
    else, after TRIALS each way, the faster median (a gap small enough to leave it open costs as
    little); that setting then holds for every later step of this model.
    $TOYCARDS_QUANT_PREFETCH=on or off fixes the setting and nothing is timed. The library's flag is
    process-wide: each run sets it to its model's setting when another model left it otherwise."""

    WARMUP, SURE, TRIALS = 1, 2, 8
    MARGIN = 0.97  # prefetching is kept only when its steps are at least 3% faster

    def __init__(self) -> None:
        self.setting = prefetch_others()  # None: still timing
        self.steps = 0
        self.times: tuple[list[float], list[float]] = ([], [])  # seconds a step, off and on

    def run(self, step, *args):
        if self.setting is not None:
            _use_prefetch(self.setting)
            return step(*args)
        n = self.steps - self.WARMUP
        on = int(n >= 0 and n % 4 in (0, 3))
        _use_prefetch(on)
        start = _clock()
        out = step(*args)
        took = _clock() - start
        self.steps += 1
        if n >= 0:
            self.times[on].append(took)
            self.setting = self._decided(*self.times)
        return out

    def _decided(self, off: list[float], on: list[float]) -> int | None:
        if min(len(off), len(on)) >= self.SURE:
            if max(on) < self.MARGIN * min(off):
                return 1
            if max(off) < min(on) / self.MARGIN:
                return 0
        if min(len(off), len(on)) >= self.TRIALS:
            return int(statistics.median(on) < self.MARGIN * statistics.median(off))
        return None


def _use_prefetch(on: int) -> None:
    if (lib := library()) is not None:
        lib.tc_set_prefetch(on)


def library() -> ctypes.CDLL | None:
    """The loaded kernels, built on first use; None when they cannot be (or are turned off)."""
    global _lib, _tried, build_error
    if not _tried:
        _tried = True
        if os.environ.get("TOYCARDS_QUANT_KERNELS", "").lower() != "off":
            try:
                _lib = _build()
            except OSError as e:  # the source or the compiler cannot be read or run
                _lib, build_error = None, str(e)
                build.fallback(TITLE, build_error)
    return _lib


def available(ggml_type: int) -> bool:
    return ggml_type in SUPPORTED and library() is not None


def quantizes_x(ggml_type: int) -> bool:
    """Whether the products of this type quantize x to int8 blocks of 32 (as llama.cpp does) rather
    than multiplying in float32: few tokens' and any number's (more than FEW_TOKENS by the int8
    GEMM: the weight's rows 16 or 8 at a time as bytes, no dequantized tile)."""
    return available(ggml_type) and bool(library().tc_quantizes_x(ggml_type))


def float32_prefill() -> bool:
    """`TOYCARDS_PREFILL=float32`: many-token products on dequantized tiles in float32 (the exact
    arithmetic of the dequantized weights, slower) instead of the int8 GEMM; read
    when a weight is made."""
    return os.environ.get("TOYCARDS_PREFILL", "").lower() == "float32"


def int8_prefill(ggml_type: int) -> bool:
    """Whether a weight of this type made now multiplies many tokens by the int8 GEMM: the kernel
    exists (`quantizes_x`) and `TOYCARDS_PREFILL=float32` does not ask for float32 tiles (both targets
    decide so)."""
    return quantizes_x(ggml_type) and not float32_prefill()


def gemm_x_block(ggml_type: int) -> int:
    """How many elements of x share one int8 scale in this type's int8 GEMM (more than FEW_TOKENS
    tokens): 256 for Q4_K with the AVX2 kernels (llama.cpp's q8_K blocks: a weight block's eight
    sub-blocks then sum in integers before any float step), else 32, as in the few-token products;
    0 where there is no int8 GEMM."""
    lib = library()
    return int(lib.tc_gemm_x_block(ggml_type)) if lib is not None and ggml_type in SUPPORTED else 0


def float_direct(ggml_type: int) -> bool:
    """Whether `matmul` multiplies this float type (F32 0, F16 1, BF16 30) by its stored elements in
    place for up to FEW_FLOAT_TOKENS tokens (no dequantized row)."""
    lib = library()
    return lib is not None and bool(lib.tc_float_direct(ggml_type))


FEW_TOKENS = 8  # x rows up to which the row-at-a-time kernels beat dequantize-then-GEMM (C: FEW_TOKENS)
FEW_FLOAT_TOKENS = 8  # x rows up to which float weights are multiplied in place (C: MAX_FLOAT_TOKENS)
_f32_direct: bool | None = None


def float32_plan(w_ptr: int, n: int, k: int) -> Plan | None:
    """The Plan of a float32 weight W [n, k] (C order at `w_ptr`) that the few-token product reads in
    place, or None where the kernels have no such product; keep W's memory alive with it."""
    global _f32_direct
    if _f32_direct is None:
        _f32_direct = float_direct(0)  # ggml's type id of float32
    return plan(0, w_ptr, 4 * k, n, k) if _f32_direct else None


class Plan(ctypes.Structure):
    """One weight's fixed arguments (tc_weight in kernels/structs.h): built once, passed by address to
    `linear`, so that a product costs a four-argument ctypes call. Its bytes are at `w`, as the file
    stores them or, with `packed` 1, in the packed layout (`pack`)."""

    _fields_ = [("type", _I), ("row_bytes", _I), ("n", _I), ("k", _I), ("w", _P), ("packed", _I)]


class GQAArgs(ctypes.Structure):
    """tc_gqa's arguments (gqa_args in kernels/structs.h; engine.torch.glue.gq_attention and
    engine.numpy.glue.gq_attention fill them in)."""

    _fields_ = [
        ("Q", _P), ("K", _P), ("V", _P), ("B", _I), ("T", _I), ("H", _I), ("Hkv", _I), ("d", _I),
        ("cos", _P), ("sin", _P), ("half", _I), ("layout", _I), ("Kc", _P), ("Vc", _P), ("kb", _I),
        ("kh", _I), ("vb", _I), ("vh", _I), ("used", _I), ("kv", _P), ("allowed", _P), ("scale", _D),
        ("cap", _D), ("out", _P), ("one_thread", _I), ("kv_half", _I), ("sinks", _P), ("rows", _P),
    ]  # fmt: skip


GQA_LAYOUTS = {"none": 0, "pairs": 1, "halves": 2}  # the prelude's rope layouts, as tc_gqa numbers them


def gqa_rows(ref, args: GQAArgs, table) -> None:
    """tc_gqa for a pass over rows at positions of their own (runtime/rows.py): `args` (at `ref`) set
    but for `rows`, which is `table` (int64 [B, 5]: each row's buffers, head strides and rows used)
    for this call alone."""
    args.rows = table.ctypes.data
    code = library().tc_gqa(ref)
    args.rows = None  # (the struct is a site's: a later pass over one cache must not read this table)
    if code != 0:
        raise RuntimeError(f"grouped-query attention kernel failed with code {code}")


def gqa_groups(H: int, H_kv: int) -> tuple[int, ...]:
    """The key/value head of each query head h, ⌈h·H_kv/H⌉ (0-based): GQAttention's grouping."""
    return tuple(-(-h * H_kv // H) - 1 for h in range(1, H + 1))


def gqa_shapes(q_shape, k_shape, v_shape, H, H_kv, layout, cap) -> tuple | None:
    """Whether tc_gqa takes a GQAttention call of these shapes and hyperparameters: Q [..., T, H·d],
    K and V [..., T, H_kv·d], a layout it knows, whole head counts and a numeric cap. Its
    (lead axes, T, d), or None where it does not."""
    if layout not in GQA_LAYOUTS or len(q_shape) < 2 or not isinstance(cap, int | float):
        return None
    if not (isinstance(H, int) and isinstance(H_kv, int)) or H <= 0 or H_kv <= 0:
        return None
    T, width = q_shape[-2], q_shape[-1]
    d, lead = width // H, tuple(q_shape[:-2])
    if (
        T == 0
        or d == 0
        or d * H != width
        or tuple(k_shape) != lead + (T, H_kv * d)
        or tuple(v_shape) != tuple(k_shape)
    ):
        return None
    return lead, T, d


def row_range(index, n: int) -> tuple[int, int] | None:
    """(a, b) where `W[index]` of a weight W [n, k] keeps rows a … b−1 whole (`W[a:b]`, `W[a:b, :]`,
    `W[a:b, ...]`, step 1), else None: the rows of a weight kept in its blocks are a weight of their
    own over the same bytes (a card's `W_gu[1:d_ff, :]`, Phi-3's gate rows of a fused ffn_up).

    >>> row_range(slice(None, 8), 16), row_range((slice(8, 16), slice(None)), 16), row_range(slice(0, 16, 2), 16)
    ((0, 8), (8, 16), None)
    """
    if isinstance(index, tuple):
        if len(index) == 2 and (index[1] is Ellipsis or index[1] == slice(None)):
            index = index[0]
        elif len(index) == 1:
            index = index[0]
        else:
            return None
    if not isinstance(index, slice) or index.step not in (None, 1):
        return None
    a, b, _ = index.indices(n)
    return (a, b) if a < b else None


def plan(ggml_type: int, w_ptr: int, row_bytes: int, n: int, k: int) -> Plan:
    """The Plan of W [n, k] (`row_bytes` per row at `w_ptr`); keep the weight's memory alive with it."""
    return Plan(ggml_type, row_bytes, n, k, w_ptr, 0)


def pack_rows(ggml_type: int) -> int:
    """The rows of a packed group where the few-token product of this type runs faster on a packed
    copy of the weight (the types whose x it rounds to int8, with the AVX-512 and the AVX2 kernels
    alike: groups of rows with their blocks side by side, read as one stream), else 0."""
    lib = library()
    return 0 if lib is None else int(lib.tc_packs(ggml_type))


def packs_at_first_decoding(ggml_type: int) -> bool:
    """Whether the kernels' packed copy of this type regroups its bytes (`tc_pack_regroups`), not only
    puts rows side by side: the fact engine/packing.py's rule of when a weight packs reads."""
    lib = library()
    return lib is not None and bool(lib.tc_pack_regroups(ggml_type))


def pack(p: Plan, r0: int, r1: int, out_ptr: int, one_thread: bool = False) -> None:
    """Rows [r0, r1) of plan p's weight (as stored) in the packed layout, into the same bytes of out
    [n · row_bytes] that they take there (a group of rows takes its rows' bytes as stored); r0 and
    r1 multiples of `pack_rows`, or r1 = n. Then a plan at out with `packed` 1 reads the weight; every
    call here reads either layout. `one_thread`: on the calling thread alone (see tc_dequant_rows)."""
    _check(library().tc_pack(ctypes.byref(p), r0, r1, out_ptr, int(one_thread)), "pack")


TILE_FLOATS = 1 << 20  # elements of one dequantized tile (4 MiB of float32)
_spare_tiles = threading.local()  # a thread's tile buffer of TILE_FLOATS elements per dtype, between products


@contextlib.contextmanager
def tile_buffer(dtype, numel: int, make, size: int | None = None):
    """A flat buffer of at least `numel` elements of `dtype` for one product's dequantized tiles
    (both targets' many-token products): the thread's spare one, taken out while the product uses
    it, so tiles of two weights at once get two, and kept again afterwards when it has `size`
    elements (default TILE_FLOATS); `make(n)` makes a new one. A new buffer for each product would
    fault its pages in anew every time, a cost on every prompt."""
    size = TILE_FLOATS if size is None else size
    buffer = _spare_tiles.__dict__.pop(dtype, None)
    if buffer is None or len(buffer) < numel:
        buffer = make(max(size, numel))
    try:
        yield buffer
    finally:
        if len(buffer) == size:
            _spare_tiles.__dict__[dtype] = buffer


def linear_fn():
    """`tc_linear(byref(plan), c_void_p(x_ptr), c_int64(t), c_void_p(y_ptr)) -> code` (0: done), or None
    without kernels. It has no argtypes: the callers pass ctypes objects, a cheaper call than argtypes
    converting Python ints, on the path of every decoding product."""
    lib = library()
    return None if lib is None else lib.tc_linear


def _check(code: int, what: str) -> None:
    if code != 0:
        raise RuntimeError(f"quant kernel {what} failed with code {code}")


def linear(p: Plan, x_ptr: int, t: int, y_ptr: int) -> None:
    """y [t, n] = x [t, k] · Wᵀ for plan p's weight (x, y contiguous float32): t ≤ FEW_TOKENS, or
    any t where `quantizes_x` (the int8 GEMM)."""
    _check(library().tc_linear(ctypes.byref(p), _P(x_ptr), _I(t), _P(y_ptr)), "linear")


def gemm(p: Plan, x_ptr: int, t: int, y_ptr: int, one_thread: bool = False) -> None:
    """y [t, n] = x [t, k] · Wᵀ by the int8 GEMM (any t, a type where `quantizes_x`); `one_thread`:
    on the calling thread alone (see tc_dequant_rows)."""
    _check(library().tc_gemm_linear(ctypes.byref(p), x_ptr, t, y_ptr, int(one_thread)), "gemm")


def dequant_rows(p: Plan, r0: int, r1: int, out_ptr: int, one_thread: bool = False) -> None:
    """Rows [r0, r1) of plan p's weight as float32 into out [(r1 − r0), k]; `one_thread`: on the
    calling thread alone (see tc_dequant_rows)."""
    _check(library().tc_dequant_rows(ctypes.byref(p), r0, r1, out_ptr, int(one_thread)), "dequant_rows")


def gather_rows(p: Plan, ids_ptr: int, n_ids: int, out_ptr: int) -> bool:
    """Rows ids [n_ids] (int64) of plan p's weight as float32 into out [n_ids, k]; False (and nothing
    written) where an id is outside 0 … n − 1."""
    code = library().tc_gather_rows(ctypes.byref(p), ids_ptr, n_ids, out_ptr)
    if code != -3:
        _check(code, "gather_rows")
    return code == 0


OPERATORS = (
    "add",
    "sub",
    "mul",
    "truediv",
    "matmul",
    "pow",
    "neg",
    "radd",
    "rsub",
    "rmul",
    "rtruediv",
    "rmatmul",
)


def forward_operators(cls: type, unwrap) -> None:
    """Give a kept weight class every arithmetic operator, each on the dequantized array (any other
    use than ops.linear / ops.embed is slower, never wrong); `unwrap` dequantizes the operands."""

    def forward(op: str):
        def method(self, *args):
            return getattr(self.dequantize(), op)(*unwrap(args))

        method.__name__ = op
        return method

    for name in OPERATORS:
        setattr(cls, f"__{name}__", forward(f"__{name}__"))
