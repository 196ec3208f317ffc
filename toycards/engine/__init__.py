"""The performance engine: GGUF weights kept in their blocks, the C kernels and their build, the
packed copies, the C++ glue and replayed decoding steps of the torch target.

The runtime (toycards/runtime: what generated modules import) and the loader (models/load.py)
use the engine only through the names below, never through its modules; the engine may import
the runtime's context (KV cache, GQA sites) but nothing that imports the engine back.

- `backend(target)`: the kernels of one target, `"numpy"` (engine/numpy) or `"torch"`
  (engine/torch): its `QuantWeight` (a weight kept in its blocks), `QuantStack` (a stack of them:
  a layer's experts) and the products, norms, RoPE and attention its ops call where a C kernel
  applies (each returns None where not).
- `library()`: the C kernel library, built once per machine (None where it cannot be);
  `SUPPORTED`: the ggml types kept in their blocks; `FEW_FLOAT_TOKENS`: the rows up to which a
  float weight is multiplied in place; `FEW_TOKENS`: the rows of x up to which a product is a
  decoding step's, not a prompt's; `PrefetchChoice`: the per-model prefetch timing.
- `native()`: the torch target's C++ glue module, or None.
- Packed copies: `pack_ahead`, `LaterPacking`, `copy_due`, `resident`, `resident_float32`;
  `block_matrix` (a stack of experts as the one block matrix that packs).
- The model's file: `read_ahead`, `FileWatch`, `stopped_on_failure`.

Every name is imported on first use (`library()` and `native()` look theirs up at each call), so
`import toycards.engine` costs nothing: a GGUF header is read without NumPy, and the NumPy target
never imports torch.
"""

from __future__ import annotations

import importlib

_NAMES = {
    "SUPPORTED": ("ckernels", "SUPPORTED"),
    "FEW_FLOAT_TOKENS": ("ckernels", "FEW_FLOAT_TOKENS"),
    "FEW_TOKENS": ("ckernels", "FEW_TOKENS"),
    "PrefetchChoice": ("ckernels", "PrefetchChoice"),
    "pack_ahead": ("packing", "pack_ahead"),
    "LaterPacking": ("packing", "LaterPacking"),
    "copy_due": ("packing", "copy_due"),
    "resident": ("packing", "resident"),
    "resident_float32": ("packing", "resident_float32"),
    "FileWatch": ("mapped", "FileWatch"),
    "read_ahead": ("mapped", "read_ahead"),
    "stopped_on_failure": ("mapped", "stopped_on_failure"),
    "block_matrix": ("stack", "block_matrix"),
}

TARGETS = ("numpy", "torch")

__all__ = ["TARGETS", "backend", "library", "native", *_NAMES]


def library():
    """The C kernel library (ctypes), built and loaded once; None where it cannot be."""
    from toycards.engine import ckernels

    return ckernels.library()


def native():
    """The torch target's C++ glue module, built and loaded once; None where it cannot be (or
    `TOYCARDS_GLUE_CPP=off`)."""
    from toycards.engine.torch import native as glue

    return glue.module()


def backend(target: str):
    """The kernel backend of `target` ("numpy" or "torch"): a module whose names its ops call."""
    if target not in TARGETS:
        raise ValueError(f"no engine backend for target {target!r}")
    return importlib.import_module(f"{__name__}.{target}")


def __getattr__(name: str):
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _NAMES[name]
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    globals()[name] = value
    return value
