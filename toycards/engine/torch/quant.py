"""A torch weight kept in its GGUF blocks: `QuantWeight`, which `ops.linear` and `ops.embed` multiply by.

Owns: holding a 2-D quantized (or F16 / BF16) tensor as the file's bytes (uint8 [N, row_bytes],
memory-mapped), its products (`linear`: x [..., K] → [..., N]; `embed`: rows by id)
and the fallback for every other use: any torch function or tensor method applied to a
`QuantWeight` gets the dequantized float32 tensor (computed for that use, not kept), so a card
that uses a weight in some other way still gets the right numbers, only slower.
Leaves out: the kernels (engine/ckernels.py) and the reference they are held to, gguf.quants
(`reference_dequantize` here calls it; tests/engine/test_quant_kernels.py ties the two).

The product picks its kernel by the number of tokens: up to `FEW_TOKENS` rows of x, the C kernel
reads each weight row once and takes its dot products with every token (decoding). More (prefill):
for the types whose x the kernels round to int8 blocks (as llama.cpp's quantized products do), the
C int8 GEMM where the CPU has AVX2 or AVX-512 (`engine.ckernels.quantizes_x`: the sums decoding takes,
for every token); otherwise (and for every type with `TOYCARDS_PREFILL=float32`) the weight is
dequantized a tile of rows at a time (a million elements) into a buffer that a float32 GEMM
multiplies by, so no full float copy of the matrix is ever made.
F16 and BF16 rows are not dequantized for few tokens either: the kernel widens their elements in
registers, and `float_linear` does the same for a float32 parameter (an F32 file's matrices): a
decoding step is bound by reading the weights, which the kernel reads faster than torch's own GEMV
(`bench/bandwidth.py` puts a step against the memory floor). Quantized weights are not trainable:
training dequantizes at load (`toycards.load(..., dequantize=True)`). Gradients still flow through
them to whatever is (a norm's γ, the inputs): the backward dequantizes the weight again a tile at
a time, so autograd keeps no float copy of it (`_ThroughBlocks`).

Where the few-token kernel reads a packed weight faster (`engine.ckernels.pack_rows`), the blocks are
copied into that layout (groups of rows side by side, the same bytes in another order:
engine.ckernels.pack) when engine/packing.py's rule says, and every later use reads the copy; the
file's pages of the weight are handed back as the copy grows (madvise), so the weight still costs its size in memory
once. With `TOYCARDS_WEIGHTS=resident` (packing.resident), F16 and BF16 weights read in the file's
pages are copied as stored too, as the model is made (and an F32 file's matrices:
packing.resident_float32), and every copy lies on 2 MiB pages where the kernel has them.
"""

from __future__ import annotations

import contextlib
import ctypes
import warnings

import numpy as np
import torch
import torch.nn.functional as F

from toycards.engine import ckernels as kernels
from toycards.engine import mapped, packing
from toycards.engine.torch import native
from toycards.engine.torch.glue import plain
from toycards.gguf.facts import QUANT_NAMES

FEW_TOKENS = kernels.FEW_TOKENS  # x rows up to which the row-at-a-time kernel beats dequantize-then-GEMM
plans_adopted = 0  # how many weights have taken a new kernel plan (packed) so far: a replayed step's check


def reference_dequantize(blocks: np.ndarray, ggml_type: int, shape: tuple[int, ...]) -> np.ndarray:
    """Version 1: gguf.quants.dequantize of the blocks, float32 of `shape`."""
    from gguf import GGMLQuantizationType, quants

    return np.asarray(quants.dequantize(blocks, GGMLQuantizationType(ggml_type)), dtype=np.float32).reshape(
        shape
    )


_ptr, _int = ctypes.c_void_p, ctypes.c_int64


def float_linear(x: torch.Tensor, W: torch.Tensor) -> torch.Tensor | None:
    """x [..., K] · Wᵀ for a float32 weight W [N, K] (a parameter, usually memory-mapped from the file) by
    the C kernel that reads W in place, when that applies: up to FEW_TOKENS rows of x, no autograd,
    plain contiguous CPU float32 tensors. None otherwise (the caller uses torch's own product).
    runtime.torch.ops.linear tries glue.cpp's version of this call first."""
    if W.dim() != 2 or not (t := _few_tokens(x)) or x.shape[-1] != W.shape[1]:
        return None
    n, k = W.shape
    plan = _few_token_plan(W, n, k)
    return None if plan is None else _c_product(plan, x, t, n)


_onednn_linear = None  # torch.ops.mkldnn._linear_pointwise where torch has it and oneDNN is on; False if not


def float_gemm(x: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """x [..., K] · Wᵀ for float32 CPU tensors x and W [N, K] with many rows of x (prefill; few go to
    `float_linear`): oneDNN's float32 linear where torch ships it, oneDNN is enabled and autograd has
    nothing to record (the op has no backward), else `F.linear`. Both are float32 sums; torch's own
    runs MKL's sgemm, which on AMD CPUs takes its AVX2 code even where the CPU has AVX-512, which
    oneDNN's kernels use; on Intel CPUs the two are alike. `bench/decode.py` measures the prefill."""
    global _onednn_linear
    if _onednn_linear is None:
        try:
            _onednn_linear = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._linear_pointwise
        except (AttributeError, RuntimeError):
            _onednn_linear = False
    if (
        _onednn_linear
        and torch.backends.mkldnn.enabled
        and x.dtype is torch.float32
        and W.dtype is torch.float32
        and W.dim() == 2
        and x.dim() >= 2
        and x.numel() > 0
        and x.is_cpu
        and W.is_cpu
        and not (torch.is_grad_enabled() and (x.requires_grad or W.requires_grad))
    ):
        return _onednn_linear(x, W, None, "none", [], "")
    return F.linear(x, W)


def _c_product(plan, x: torch.Tensor, t: int, n: int) -> torch.Tensor:
    """x [..., K] (t rows, contiguous float32) · Wᵀ → [..., n] by the C product of W's plan (t up to
    FEW_TOKENS, or any t where `kernels.quantizes_x`)."""
    global _c_linear
    if _c_linear is None:  # bound once: this is what a decoding step calls most
        _c_linear = kernels.linear_fn()
    y = torch.empty(*x.shape[:-1], n, dtype=torch.float32)  # sizes as arguments: a cheaper call than a tuple
    code = _c_linear(plan, _ptr(x.data_ptr()), _int(t), _ptr(y.data_ptr()))
    if code != 0:
        raise RuntimeError(f"quant kernel linear failed with code {code}")
    return y


_c_linear = None  # tc_linear, once the kernels are loaded


def _few_token_plan(W, n: int, k: int):
    """The byref'd kernel plan of W [n, k] for the few-token product, or None: a QuantWeight's own,
    or one made for a plain float32 weight read in place."""
    if W.__class__ is QuantWeight:
        if not W.fast or W.shape != (n, k):
            return None
        if packing.copy_due(W):
            W._pack()
        return W._plan_ref
    if W.shape != (n, k) or not plain(W) or (p := kernels.float32_plan(W.data_ptr(), n, k)) is None:
        return None
    return ctypes.byref(p)


def _few_tokens(x) -> int:
    """The token count of x [..., K] when the few-token C products apply to it (a plain contiguous
    float32 CPU tensor, no autograd, 1 … FEW_TOKENS rows), else 0."""
    if x.dim() < 1 or not plain(x):
        return 0
    k = x.shape[-1]
    t = x.numel() // k if k else 0
    return t if t <= FEW_TOKENS else 0


def linears(x: torch.Tensor, Ws) -> tuple | None:
    """W · x for two or three weights W [N_i, K] of one x [..., K], as one C call for few tokens
    (each product as `QuantWeight.linear` or `float_linear` computes it); None where that does not
    apply (the caller multiplies one weight at a time). runtime.torch.ops.linears tries glue.cpp's version
    of this call first."""
    lib = kernels.library()
    if lib is None or not 2 <= len(Ws) <= 3 or not (t := _few_tokens(x)):
        return None
    k = x.shape[-1]
    plans = []
    for W in Ws:
        if len(W.shape) != 2 or W.shape[1] != k or (plan := _few_token_plan(W, W.shape[0], k)) is None:
            return None
        plans.append(plan)
    lead = x.shape[:-1]
    ys = tuple(torch.empty(*lead, W.shape[0], dtype=torch.float32) for W in Ws)
    code = lib.tc_linears(
        plans[0], plans[1], plans[2] if len(plans) == 3 else None, _ptr(x.data_ptr()), _int(t),
        _ptr(ys[0].data_ptr()), _ptr(ys[1].data_ptr()), _ptr(ys[2].data_ptr() if len(ys) == 3 else None),
    )  # fmt: skip
    if code != 0:
        raise RuntimeError(f"quant kernel linears failed with code {code}")
    return ys


def swiglu(x: torch.Tensor, W_gate, W_up, W_down) -> torch.Tensor | None:
    """The prelude's SwiGLU, W_down · (SiLU(W_gate · x) ⊙ (W_up · x)) for x [..., d_e], as one C call
    for few tokens (each product as `QuantWeight.linear` or `float_linear` computes it); None where
    that does not apply (runtime.torch.ops.swiglu then takes it, having tried glue.cpp's version first)."""
    lib = kernels.library()
    if lib is None or len(W_gate.shape) != 2 or not (t := _few_tokens(x)):
        return None
    f, d = W_gate.shape
    if x.shape[-1] != d:
        return None
    gate, up, down = _few_token_plan(W_gate, f, d), _few_token_plan(W_up, f, d), _few_token_plan(W_down, d, f)
    if gate is None or up is None or down is None:
        return None
    y = torch.empty(*x.shape, dtype=torch.float32)
    code = lib.tc_swiglu(gate, up, down, _ptr(x.data_ptr()), _int(t), _ptr(y.data_ptr()))
    if code != 0:
        raise RuntimeError(f"quant kernel swiglu failed with code {code}")
    return y


def unwrap(value):
    """`value` with every weight kept in its blocks (a matrix, a stack) in it dequantized (lists,
    tuples, dicts too): what a torch function applied to one gets."""
    if isinstance(value, TensorLike):
        return value.dequantize()
    if isinstance(value, list | tuple):
        return type(value)(unwrap(v) for v in value)
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    return value


class _Held:
    """A QuantWeight handed through autograd.Function.apply as a plain object (apply would treat the
    weight itself, which speaks __torch_function__, as a tensor-like argument)."""

    __slots__ = ("weight",)

    def __init__(self, weight: QuantWeight) -> None:
        self.weight = weight


class _ThroughBlocks(torch.autograd.Function):
    """y = W · x for a QuantWeight W where autograd records x (gradients into a norm's γ, or into the
    inputs, through frozen quantized weights): the forward is the kernels' product; the backward
    dequantizes W again, a tile at a time, instead of keeping a float32 copy of W for it, which would
    cost the weight's size ×4 to ×8 per call, and per token when decoding."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, held: _Held) -> torch.Tensor:
        ctx.held, ctx.x_dtype = held, x.dtype
        return held.weight.linear(x)  # grad mode is off in here: the kernels' product

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gy: torch.Tensor):
        return ctx.held.weight.grad_of_x(gy).to(ctx.x_dtype), None


class TensorLike:
    """What a weight kept in its blocks answers as a tensor would: its shape (`dim`, `ndim`, `size`,
    `numel`, from `shape`), and its float32 values (`detach`, `float`, NumPy's `__array__`, any
    other torch function or tensor attribute, from `dequantize`): QuantWeight's and QuantStack's
    (engine/torch/stack.py)."""

    shape: torch.Size

    def dim(self) -> int:
        return len(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def size(self, axis: int | None = None):
        return self.shape if axis is None else self.shape[axis]

    def numel(self) -> int:
        return int(np.prod(self.shape))

    def detach(self) -> torch.Tensor:  # toycards.save and friends read weights through detach()
        return self.dequantize()

    def float(self) -> torch.Tensor:
        return self.dequantize()

    def __array__(self, dtype=None, copy=None):
        out = self.dequantize().numpy()
        return out if dtype is None else out.astype(dtype)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return func(*unwrap(args), **unwrap(kwargs or {}))

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.dequantize(), name)


class QuantWeight(TensorLike):
    """A weight W [N, K] as GGUF blocks: `blocks` uint8 [N, row_bytes] (the file's bytes), `ggml_type`.

    >>> from gguf import GGMLQuantizationType, quants
    >>> W = np.arange(64, dtype=np.float32).reshape(2, 32) / 8
    >>> q = QuantWeight(quants.quantize(W, GGMLQuantizationType.Q8_0), GGMLQuantizationType.Q8_0, (2, 32))
    >>> q.shape, q.dim(), q.linear(torch.ones(1, 32)).shape
    (torch.Size([2, 32]), 2, torch.Size([1, 2]))
    """

    requires_grad = False
    dtype = torch.float32
    is_quantized_weight = True

    def __init__(
        self, blocks: np.ndarray, ggml_type: int, shape: tuple[int, ...], name: str = "weight"
    ) -> None:
        n, k = shape
        assert blocks.shape[0] == n and blocks.ndim == 2, (blocks.shape, shape)
        self.ggml_type, self.name = int(ggml_type), name
        self.shape = torch.Size(shape)
        self._np = blocks  # keeps the memory map alive
        with warnings.catch_warnings():  # read-only file pages: nothing here writes to them
            warnings.simplefilter("ignore", UserWarning)
            self.blocks = torch.from_numpy(blocks)  # uint8 [N, row_bytes]
        self.row_bytes = blocks.shape[1]
        self.device = self.blocks.device
        self.fast = kernels.available(self.ggml_type) and blocks.flags.c_contiguous
        # the kernels' view of the weight, bound once (a four-argument C call): the blocks in place,
        # then, where that is faster, their packed copy (`_pack`)
        self._plan = kernels.plan(self.ggml_type, self.blocks.data_ptr(), self.row_bytes, n, k)
        self._plan_ref = ctypes.byref(self._plan)
        # a float type the products read in place in the file's pages gets a copy (packing.resident)
        copied = (
            self.fast
            and kernels.float_direct(self.ggml_type)
            and mapped.file_view(blocks)
            and packing.resident()
        )
        self._unpacked = self.fast and (
            copied or kernels.pack_rows(self.ggml_type) > 0
        )  # a copy would be faster
        # when it packs: engine/packing.py
        self._pack_first = self._unpacked and (copied or packing.packs_first(self.ggml_type))
        # the plan's address where the C++ glue may read it (engine/torch/native.py), else 0 (not packed yet)
        self._cplan = ctypes.addressof(self._plan) if self.fast and not self._pack_first else 0
        self._eplan = ctypes.addressof(self._plan) if self.fast else 0  # what the glue's `embed` reads
        self._gemm = self.fast and kernels.int8_prefill(self.ggml_type)  # the C product for any token count
        # a prompt's few rows go to dequantized tiles: the few-token product would round x to int8, and a
        # prompt's does not (TOYCARDS_PREFILL=float32)
        self._prompt_tiles = self.fast and kernels.quantizes_x(self.ggml_type) and not self._gemm
        self._packed: torch.Tensor | None = None

    # ── what a tensor would say about itself: TensorLike, and ──────────────────────────

    @property
    def nbytes(self) -> int:
        return self.blocks.numel()

    def __repr__(self) -> str:
        kind = QUANT_NAMES.get(self.ggml_type, str(self.ggml_type))
        return f"QuantWeight({self.name}: {kind} {tuple(self.shape)}, {self.nbytes} bytes)"

    # ── values ─────────────────────────────────────────────────────────────────────────
    def dequantize(self) -> torch.Tensor:
        """W as a new float32 tensor [N, K]."""
        n, k = self.shape
        if not self.fast:
            return torch.from_numpy(reference_dequantize(self._np, self.ggml_type, (n, k)))
        out = torch.empty(n, k, dtype=torch.float32)
        kernels.dequant_rows(self._plan, 0, n, out.data_ptr())
        return out

    # ── products ───────────────────────────────────────────────────────────────────────
    def linear(self, x: torch.Tensor, prompt: bool = False) -> torch.Tensor:
        """W · X in the codegen layout: x [..., K] → [..., N]. `prompt`: x is a prompt's tokens whatever
        its rows (an expert's share of them, runtime/torch/moe.py): multiplied as many tokens are."""
        if prompt:
            return self._many(x, prompt)
        if self._cplan and (cx := native.module()) is not None and (y := cx.linear(x, self)) is not None:
            return y  # few tokens: the call below, from C++ (engine/torch/native.py)
        n, k = self.shape
        if self.fast and x.shape[-1] == k and (t := _few_tokens(x)):  # decoding: one C call, no reshapes
            if packing.copy_due(self):
                self._pack()
            return _c_product(self._plan_ref, x, t, n)
        return self._many(x)

    def _many(self, x: torch.Tensor, prompt: bool = False) -> torch.Tensor:
        """`linear` past its few-token call; `prompt`: x's rows as a prompt's, however few (where the
        few-token product rounds x to int8 and a prompt's does not, dequantized tiles)."""
        n, k = self.shape
        if x.shape[-1] != k:
            raise RuntimeError(f"{self.name}: x has {x.shape[-1]} entries per row, the weight {k} columns")
        if x.requires_grad and torch.is_grad_enabled():  # x's gradient, with nothing of W kept for it
            return _ThroughBlocks.apply(x, _Held(self))
        if not self.fast:
            return F.linear(x, self.dequantize().to(x.dtype))
        lead = x.shape[:-1]
        x2 = x.reshape(-1, k)  # (T, K)
        if x2.dtype != torch.float32 or not x2.is_contiguous():
            x2 = x2.to(torch.float32).contiguous()
        t = x2.shape[0]
        few = t <= FEW_TOKENS and not (prompt and self._prompt_tiles)
        if few and not prompt and packing.copy_due(self):  # a prompt's products read the blocks as they are
            self._pack()
        c_product = few or self._gemm  # few tokens, or the int8 GEMM for any number
        y = _c_product(self._plan_ref, x2, t, n) if c_product else self._tiled(x2)  # (T, N)
        y = y.view(*lead, n)
        return y if x.dtype == torch.float32 else y.to(x.dtype)

    def _tiled(self, x2: torch.Tensor) -> torch.Tensor:
        """x2 [T, K] · Wᵀ a tile of rows at a time: dequantize the tile, then a float32 GEMM (a
        weight in one tile: the GEMM's own result, no copy into y)."""
        y = None
        with contextlib.closing(self._tiles()) as tiles:  # (its tile buffer back as this returns)
            for r0, r1, tile in tiles:
                if r0 == 0 and r1 == self.shape[0]:
                    return float_gemm(x2, tile)
                if y is None:
                    y = torch.empty(x2.shape[0], self.shape[0], dtype=torch.float32)  # (T, N)
                y[:, r0:r1] = float_gemm(x2, tile)
        return y

    def _tiles(self):
        """(r0, r1, W[r0:r1] dequantized to float32) for consecutive tiles of about TILE_FLOATS
        elements, in one buffer (kernels.tile_buffer), overwritten from tile to tile."""
        n, k = self.shape
        rows = max(1, min(n, kernels.TILE_FLOATS // k))
        with kernels.tile_buffer(torch.float32, rows * k, lambda size: torch.empty(size)) as buffer:
            tile = buffer[: rows * k].view(rows, k)  # (rows, K)
            for r0 in range(0, n, rows):
                r1 = min(n, r0 + rows)
                kernels.dequant_rows(self._plan, r0, r1, tile.data_ptr())
                yield r0, r1, tile[: r1 - r0]

    def grad_of_x(self, gy: torch.Tensor) -> torch.Tensor:
        """gy [..., N] · W → [..., K]: the gradient of x in y = W · x, W dequantized a tile at a
        time (never whole), float32 sums."""
        n, k = self.shape
        gy2 = gy.reshape(-1, n).to(torch.float32)
        if not self.fast:
            return (gy2 @ self.dequantize()).view(*gy.shape[:-1], k)
        gx = torch.zeros(gy2.shape[0], k, dtype=torch.float32)
        for r0, r1, tile in self._tiles():
            gx.addmm_(gy2[:, r0:r1], tile)
        return gx.view(*gy.shape[:-1], k)

    def _pack(self) -> None:
        """Copy the blocks into the packed layout, once (ahead of the first product, at the first
        few-token one, or at LaterPacking's turn: packing.pack_weights), and read the copy from then on; the file's pages
        of the weight go back to the page cache."""
        packing.pack_weights((self,))

    def _stored(self):
        """What packing.pack_weights copies: the plan as stored and the blocks (NumPy)."""
        return self._plan, self._np

    @staticmethod
    def _buffer(nbytes: int):
        """Bytes for packed copies (packing.weight_memory where resident), and their address."""
        if packing.resident():
            buffer = torch.from_numpy(packing.weight_memory(nbytes))
        else:
            buffer = torch.empty(nbytes, dtype=torch.uint8)
        return buffer, buffer.data_ptr()

    def _adopt(self, packed: torch.Tensor, plan) -> None:
        """Read the packed copy from now on (under packing.PACKING). A new plan, never a changed one:
        a product already running on another thread keeps a consistent view of the weight."""
        self._packed, self._plan, self._plan_ref = packed, plan, ctypes.byref(plan)
        self._unpacked = False
        self._cplan = self._eplan = ctypes.addressof(plan)
        global plans_adopted
        plans_adopted += 1

    def embed(self, ids) -> torch.Tensor:
        """Rows of W by integer ids [...] → [..., K] (W stored [N_V, d_e])."""
        n, k = self.shape
        ids = torch.as_tensor(ids, dtype=torch.long)
        flat = ids.reshape(-1).contiguous()
        if self.fast:  # the kernel checks the ids
            out = torch.empty(flat.numel(), k, dtype=torch.float32)
            if kernels.gather_rows(self._plan, flat.data_ptr(), flat.numel(), out.data_ptr()):
                return out.reshape(*ids.shape, k)
        if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= n):
            raise IndexError(f"{self.name}: index out of range 0…{n - 1}")
        rows = reference_dequantize(self._np[flat.numpy()], self.ggml_type, (flat.numel(), k))
        return torch.from_numpy(rows).reshape(*ids.shape, k)

    # ── every other use: the dequantized tensor (TensorLike) ───────────────────────────
    def __getitem__(self, index):
        rows = kernels.row_range(index, self.shape[0])
        return self.dequantize()[index] if rows is None else self.rows(*rows)

    def rows(self, a: int, b: int) -> QuantWeight:
        """Rows a … b−1 as a weight of their own over the same blocks, made once (a card step slices
        the same rows at every pass, and a slice of the dequantized weight would dequantize all of it
        each time)."""
        if (a, b) == (0, self.shape[0]):
            return self

        def view(a: int, b: int) -> QuantWeight:
            return QuantWeight(self._np[a:b], self.ggml_type, (b - a, self.shape[1]), f"{self.name}[{a}:{b}]")

        return packing.row_view(self, a, b, view)


kernels.forward_operators(QuantWeight, unwrap)
native.register_weight_class(QuantWeight)
