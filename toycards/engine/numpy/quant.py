"""A NumPy weight kept in its GGUF blocks: `QuantWeight`, which `runtime.numpy.ops.linear` and `embed` multiply by.

Owns: the NumPy twin of engine.torch.quant.QuantWeight (the file's bytes, uint8 [N, row_bytes],
memory-mapped; products by the C kernels of engine/ckernels.py, or gguf.quants without them; the
dequantized array for any other use, through `__array__`), so that a quantized file costs about
its own size in memory on the NumPy target too. Many tokens take the int8 GEMM where
`engine.ckernels.quantizes_x`, else (or with `TOYCARDS_PREFILL=float32`) dequantized tiles and
NumPy's GEMM.
Where the few-token kernel reads a packed copy faster, the weight makes that copy when
engine/packing.py's rule says (its docstring states when a weight packs), and hands the file's
pages back, as engine/torch/quant.py does. Its kernels run on the calling thread where NumPy
comes next (dequantizing, packing): OpenBLAS's threads keep spinning after a GEMM, and the kernels'
OpenMP threads would fight them over the cores. The int8 GEMM (and the attention kernel,
engine/numpy/glue.py) run on the kernels' threads until NumPy's BLAS has run a product in the
process (`blas_product`, `prompt_one_thread`).
Few tokens of a plain float32 weight multiply by the C product too (`float_linear`), as on the
torch target.
Leaves out: torch (engine/torch/quant.py), the kernels themselves.
"""

from __future__ import annotations

import ctypes
import functools
import platform

import numpy as np

from toycards.engine import ckernels as kernels
from toycards.engine import packing

FEW_TOKENS = kernels.FEW_TOKENS  # x rows up to which the row-at-a-time kernel beats dequantize-then-GEMM
# elements of one dequantized tile (1 MiB): enough rows for NumPy's GEMM to run as fast as on the torch
# target's 4 MiB tiles (not so at half this), and a smaller buffer for each thread to keep
TILE_FLOATS = 1 << 18


def reference_dequantize(blocks: np.ndarray, ggml_type: int, shape: tuple[int, ...]) -> np.ndarray:
    """The blocks dequantized to float32 of `shape` without the kernels: gguf/dequant.py, which the
    tests hold bit-identical to gguf.quants (and which imports gguf.quants only for the types it has
    no code of its own for)."""
    from toycards.gguf.dequant import dequantize

    return dequantize(blocks, ggml_type, shape)


_blas_ran = False  # whether the NumPy target has had NumPy's BLAS run a product (`blas_product`)


def blas_product(a, b):
    """a @ b by NumPy's BLAS, for the NumPy target (runtime/numpy/ops.py, and the tiles here), noted: from then on
    the prompt's C kernels keep to the calling thread (`prompt_one_thread`)."""
    global _blas_ran
    _blas_ran = True
    return a @ b


def prompt_one_thread() -> bool:
    """Whether the NumPy target's many-token C kernels (the int8 GEMM, engine/numpy/glue.py's attention) run on
    the calling thread alone: once NumPy's BLAS has run a product in this process (`blas_product`),
    since its threads spin for a while after each one and the kernels' OpenMP threads would fight
    them over the cores; until then on the kernels' threads, which then have the cores to
    themselves. A process whose models have only quantized weights with the int8 GEMM and the
    prelude's attention never has it run one. `bench/vs_llama_cpp.py --numpy` measures the NumPy
    target's prompts."""
    return _blas_ran


def _data_at() -> int | None:
    """Where in a NumPy array object its data pointer is (PyArrayObject's `data`, right after the
    object's header in CPython), found by probing arrays whose pointers `.ctypes.data` gives; None
    where no place fits them all (another interpreter or layout: `data_ptr` then asks `.ctypes`)."""
    if platform.python_implementation() != "CPython":
        return None
    probes = [np.zeros(3, np.float32), np.arange(8, dtype=np.int64)[2:], np.ones((4, 5), np.float16)[1:, 2:]]
    for at in range(8, 40, 8):  # (within the object: its header and first fields)
        if all(ctypes.c_void_p.from_address(id(a) + at).value == a.ctypes.data for a in probes):
            return at
    return None


_DATA_AT, _ADDRESS = _data_at(), ctypes.c_void_p.from_address


def data_ptr(a: np.ndarray) -> int:
    """The address of a NumPy array's first element, as `a.ctypes.data` gives it: read from the
    array object, since `.ctypes.data` makes a ctypes object at each call and a decoding step asks
    for hundreds of addresses."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"data_ptr of a {type(a).__name__}, not of a NumPy array")
    return a.ctypes.data if _DATA_AT is None else _ADDRESS(id(a) + _DATA_AT).value or 0


class QuantWeight:
    """A weight W [N, K] as GGUF blocks (`blocks` uint8 [N, row_bytes]) of ggml type `ggml_type`.

    >>> from gguf import GGMLQuantizationType, quants
    >>> W = np.arange(64, dtype=np.float32).reshape(2, 32) / 8
    >>> q = QuantWeight(quants.quantize(W, GGMLQuantizationType.Q4_0), GGMLQuantizationType.Q4_0, (2, 32))
    >>> q.shape, q.linear(np.ones((3, 32), dtype=np.float32)).shape
    ((2, 32), (3, 2))
    """

    ndim = 2
    dtype = np.dtype(np.float32)
    is_quantized_weight = True

    def __init__(
        self, blocks: np.ndarray, ggml_type: int, shape: tuple[int, ...], name: str = "weight"
    ) -> None:
        assert blocks.ndim == 2 and blocks.shape[0] == shape[0], (blocks.shape, shape)
        self.blocks, self.ggml_type, self.shape, self.name = blocks, int(ggml_type), tuple(shape), name
        self.row_bytes = blocks.shape[1]
        self.fast = kernels.available(self.ggml_type) and blocks.flags.c_contiguous
        # the kernels' view of the weight: the blocks in place, then, where that is faster, their
        # packed copy (`_pack`)
        self._plan = (
            kernels.plan(self.ggml_type, data_ptr(blocks), self.row_bytes, *shape) if self.fast else None
        )
        self._unpacked = self.fast and kernels.pack_rows(self.ggml_type) > 0  # a packed copy would be faster
        # when it packs: engine/packing.py
        self._pack_first = self._unpacked and packing.packs_first(self.ggml_type)
        self._gemm = self.fast and kernels.int8_prefill(self.ggml_type)
        # a prompt's few rows go to dequantized tiles: the few-token product would round x to int8, and a
        # prompt's does not (TOYCARDS_PREFILL=float32)
        self._prompt_tiles = self.fast and kernels.quantizes_x(self.ggml_type) and not self._gemm
        self._packed: np.ndarray | None = None
        # the few-token product may read `_plan` as it is (no packing due at its first call)
        self._ready = self.fast and not self._pack_first

    def _pack(self) -> None:
        """The packed copy of the blocks, once, read from then on (engine.torch.quant.QuantWeight._pack)."""
        packing.pack_weights((self,), one_thread=True)

    def _stored(self):
        """What packing.pack_weights copies: the plan as stored and the blocks."""
        return self._plan, self.blocks

    @staticmethod
    def _buffer(nbytes: int):
        """Bytes for packed copies (packing.weight_memory where resident), and their address."""
        buffer = packing.weight_memory(nbytes) if packing.resident() else np.empty(nbytes, dtype=np.uint8)
        return buffer, data_ptr(buffer)

    def _adopt(self, packed: np.ndarray, plan) -> None:
        """Read the packed copy from now on (under packing.PACKING)."""
        self._plan, self._packed, self._unpacked, self._ready = plan, packed, False, True

    def __repr__(self) -> str:
        return f"QuantWeight({self.name}: type {self.ggml_type} {self.shape}, {self.blocks.nbytes} bytes)"

    def dequantize(self) -> np.ndarray:
        n, k = self.shape
        if not self.fast:
            return reference_dequantize(self.blocks, self.ggml_type, self.shape)
        out = np.empty((n, k), dtype=np.float32)
        kernels.dequant_rows(self._plan, 0, n, data_ptr(out), one_thread=True)
        return out

    def __array__(self, dtype=None, copy=None):
        out = self.dequantize()
        return out if dtype is None else out.astype(dtype)

    @property
    def T(self) -> np.ndarray:
        return self.dequantize().T

    def __getitem__(self, index):
        rows = kernels.row_range(index, self.shape[0])
        return self.dequantize()[index] if rows is None else self.rows(*rows)

    def rows(self, a: int, b: int) -> QuantWeight:
        """Rows a … b−1 as a weight of their own over the same blocks, made once (see engine/torch/quant.py)."""
        if (a, b) == (0, self.shape[0]):
            return self

        def view(a: int, b: int) -> QuantWeight:
            return QuantWeight(
                self.blocks[a:b], self.ggml_type, (b - a, self.shape[1]), f"{self.name}[{a}:{b}]"
            )

        return packing.row_view(self, a, b, view)

    def __getattr__(self, name: str):  # any other array attribute or method: the dequantized array's
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.dequantize(), name)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(x.dequantize() if isinstance(x, QuantWeight) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def linear(self, x: np.ndarray, prompt: bool = False) -> np.ndarray:
        """W · X in the codegen layout: x [..., K] → [..., N]. `prompt`: x is a prompt's tokens whatever
        its rows (an expert's share of them, runtime/numpy/ops.py's MoE): multiplied as many tokens are
        (engine/torch/quant.py's QuantWeight.linear)."""
        n, k = self.shape
        if (  # a decoding step's common case in few checks (each NumPy call costs µs, 211 products a token)
            not prompt
            and x.__class__ is np.ndarray
            and x.dtype == np.float32
            and x.flags.c_contiguous
            and self._ready
            and x.shape[-1] == k
            and 0 < x.size <= FEW_TOKENS * k
        ):
            y = np.empty((*x.shape[:-1], n), dtype=np.float32)
            kernels.linear(self._plan, data_ptr(x), x.size // k, data_ptr(y))
            return y
        x = np.asarray(x)
        if not self.fast:
            return blas_product(x, self.dequantize().T)
        lead = x.shape[:-1]
        x2 = np.ascontiguousarray(x.reshape(-1, k), dtype=np.float32)  # (T, K)
        few = x2.shape[0] <= FEW_TOKENS and not (prompt and self._prompt_tiles)
        if packing.copy_due(self):  # its copy is due: made here, or waited for in a prompt
            if few and not prompt:
                self._pack()
            else:
                packing.packed_when_done()
        y = np.empty((x2.shape[0], n), dtype=np.float32)  # (T, N)
        if few:
            kernels.linear(self._plan, data_ptr(x2), x2.shape[0], data_ptr(y))
        elif self._gemm:  # on the kernels' threads until NumPy's BLAS has run a product
            kernels.gemm(self._plan, data_ptr(x2), x2.shape[0], data_ptr(y), one_thread=prompt_one_thread())
        else:
            rows = max(1, min(n, TILE_FLOATS // k))
            make = functools.partial(np.empty, dtype=np.float32)
            with kernels.tile_buffer(np.float32, rows * k, make, TILE_FLOATS) as buffer:
                tile = buffer[: rows * k].reshape(rows, k)  # (rows, K)
                for r0 in range(0, n, rows):
                    r1 = min(n, r0 + rows)
                    kernels.dequant_rows(self._plan, r0, r1, data_ptr(tile), one_thread=True)
                    y[:, r0:r1] = blas_product(x2, tile[: r1 - r0].T)
        return y.reshape(*lead, n).astype(np.result_type(x.dtype, np.float32), copy=False)

    def embed(self, ids) -> np.ndarray:
        """Rows of W by integer ids [...] → [..., K]."""
        n, k = self.shape
        ids = np.asarray(ids, dtype=np.int64)
        flat = np.ascontiguousarray(ids.reshape(-1))
        if packing.copy_due(self):  # rows of the copy being made, not the file's pages
            packing.packed_when_done()
        if self.fast:  # the kernel checks the ids
            out = np.empty((flat.size, k), dtype=np.float32)
            if kernels.gather_rows(self._plan, data_ptr(flat), flat.size, data_ptr(out)):
                return out.reshape(*ids.shape, k)
        if flat.size and (flat.min() < 0 or flat.max() >= n):
            raise IndexError(f"{self.name}: index out of range 0…{n - 1}")
        return reference_dequantize(self.blocks[flat], self.ggml_type, (flat.size, k)).reshape(*ids.shape, k)


def float_linear(x: np.ndarray, W: np.ndarray) -> np.ndarray | None:
    """x [..., K] · Wᵀ for a float32 weight W [N, K] read in place by the C product, for 1 …
    FEW_FLOAT_TOKENS rows of a C-contiguous float32 x (a decoding step), as the torch target does;
    else None (NumPy's own product then). NumPy's BLAS left out of decoding also keeps its threads
    from spinning against the kernels' OpenMP threads of the next C call."""
    if not (
        x.__class__ is np.ndarray
        and x.dtype == np.float32
        and W.dtype == np.float32
        and x.flags.c_contiguous
        and W.flags.c_contiguous
        and W.ndim == 2
    ):
        return None
    n, k = W.shape
    if x.shape[-1] != k or not 0 < x.size <= kernels.FEW_FLOAT_TOKENS * k:
        return None
    plan = kernels.float32_plan(data_ptr(W), n, k)
    if plan is None:
        return None
    y = np.empty((*x.shape[:-1], n), dtype=np.float32)
    kernels.linear(plan, data_ptr(x), x.size // k, data_ptr(y))
    return y


kernels.forward_operators(
    QuantWeight, lambda args: tuple(a.dequantize() if isinstance(a, QuantWeight) else a for a in args)
)
