"""The torch target's per-token glue in C++ (kernels/glue.cpp): built once against the installed torch.

Owns: building glue.cpp with the system C++ compiler (torch's headers and libraries, Python's
headers: a slow build, so once per machine and torch version, cached like the C kernels), loading
it as the module `toycards_glue` and binding it to the C kernels, or None where any of that fails
or `TOYCARDS_GLUE_CPP=off`. As for the kernels, only a cached file that matches the record of its size
and checksum is imported (engine/build.py builds it again where not), and a build or import that fails is
said once on stderr.
Leaves out: when its functions apply (each returns None where not, and engine/torch/glue.py, engine/torch/quant.py
and runtime/torch/ops.py then take their Python path, which the tests hold it to) and the kernels themselves
(engine/ckernels.py).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
import sysconfig
from pathlib import Path

import torch

from toycards.engine import build, ckernels

SOURCE = Path(__file__).parents[1] / "kernels" / "glue.cpp"
SWITCH = "TOYCARDS_GLUE_CPP"  # "off": the Python glue alone
FEW_TOKENS = ckernels.FEW_TOKENS  # x rows up to which the products run here
# what the Python side calls on the module (a file without one of them is not this module)
FUNCTIONS = ("sizes", "bind", "weight_class", "plain", "linear", "linears", "swiglu", "embed", "rms_norm",
             "gqa", "record", "recorded", "replay", "spoil", "taped", "tape_add", "tape_constant",
             "tape_info", "tape_op", "tape_refresh", "tape_scale")  # fmt: skip
_module = None
_weight_class: type | None = None
_tried = False
build_error = ""  # why there is no module: the compiler's last words, or what was missing


def _flags() -> list[str] | None:
    """The compile and link flags for torch's headers and libraries, or None without Python's headers."""
    include = sysconfig.get_paths().get("include")
    if not include or not (Path(include) / "Python.h").exists():
        return None
    root = Path(torch.__file__).parent
    return [
        "-O2", "-shared", "-fPIC", "-std=c++17", "-isystem", include,
        "-isystem", str(root / "include"), "-isystem", str(root / "include" / "torch" / "csrc" / "api" / "include"),
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        f"-L{root / 'lib'}", f"-Wl,-rpath,{root / 'lib'}", "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python",
    ]  # fmt: skip


def _load():
    """The module built (or found in the cache, whole: build.shared_library), imported and bound to
    the kernels; built once more where a file that matched its record does not import, and None
    where that fails too (said on stderr, once) or something it needs is missing."""
    global build_error
    lib = ckernels.library()
    cc = build.compiler(os.environ.get("CXX"), "c++", "g++", "clang++")
    flags = _flags()
    if lib is None or cc is None or flags is None:
        build_error = "no C kernels" if lib is None else "no C++ compiler" if cc is None else "no Python.h"
        return None
    key = f"{torch.__version__} {torch.__file__} {sys.version}"
    title = f"the C++ glue for torch {torch.__version__} (~20 s)"
    for rebuild in (False, True):
        try:
            path = build.shared_library("glue-cpp", cc, SOURCE, [flags], key, title, rebuild)
        except build.BuildError as e:  # engine/build.py has said so
            build_error = str(e)
            return None
        try:
            module = _imported(path)
            break
        except (ImportError, OSError, AttributeError) as e:  # not this module, or it needs a missing library
            build_error = str(e)
    else:
        build.fallback(title, build_error)
        return None
    if module.sizes() != (ctypes.sizeof(ckernels.Plan), ctypes.sizeof(ckernels.GQAArgs)):
        build_error = "glue.cpp's structs are not ckernels.Plan and GQAArgs"
        build.fallback(title, build_error)
        return None
    kernels = (lib.tc_rms_norm, lib.tc_linear, lib.tc_linears, lib.tc_swiglu, lib.tc_gqa, lib.tc_gather_rows)
    module.bind(
        torch.Tensor,
        torch.nn.Parameter,
        tuple(ctypes.cast(f, ctypes.c_void_p).value for f in kernels),
        int(ckernels.float_direct(0)),
        FEW_TOKENS,
    )
    if _weight_class is not None:
        module.weight_class(_weight_class)
    return module


def _imported(path):
    """The extension module at `path` as `toycards_glue`, with the functions this file calls."""
    spec = importlib.util.spec_from_file_location("toycards_glue", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in FUNCTIONS:
        getattr(module, name)
    return module


def register_weight_class(cls: type) -> None:
    """The class of weights kept in their blocks (engine.torch.quant.QuantWeight, which registers itself):
    its exact instances' `_cplan`, the address of their kernel plan or 0, is what the glue reads."""
    global _weight_class
    _weight_class = cls
    if _module is not None:
        _module.weight_class(cls)


def module():
    """The loaded `toycards_glue` module, built on first use; None when it cannot be (or is off)."""
    global _module, _tried, build_error
    if not _tried:
        _tried = True
        if os.environ.get(SWITCH, "").strip().lower() != "off":
            try:
                _module = _load()
            except (OSError, ImportError) as e:  # the source or the compiler cannot be read or run
                build_error, _module = str(e), None
                build.fallback("the C++ glue", build_error)
    return _module
