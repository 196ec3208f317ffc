"""Single kernels in place of prelude algorithms: the table, and the adapters that put a kernel in
a generated module.

A generated module holds the card's steps and nothing else. Where toycards loads one
(models/load.py), `substitute` replaces the module-level function of each prelude algorithm that
has a kernel on the module's target (`KERNELS`) with an adapter. The adapter calls the kernel with
the function's own arguments and whatever else the kernel needs, read the way the steps read it:
the positions of a dimension the cache plan says holds this pass's tokens (`runtime.positions`,
else 1…n), the KV cache where the steps extend it, and `kv_index` for grouped-query attention. It
runs the generated function itself (the card's steps, kept as the adapter's `__wrapped__`) where
the kernel declines (returns None: another layout, autograd on) and wherever the target's
`ops.fast` is false. Only the library's own algorithm gets a kernel: the caller names the
algorithms the card runs as the prelude wrote them, so a card that defines its own `softmax` keeps
its steps. tests/engine/test_kernels.py (torch) and tests/engine/test_kernels_numpy.py tie every entry to the
steps it replaces, through this substitution.

Owns: `KERNELS`, `Site` (what the cache plan says of one algorithm of a card) and `substitute`.
Leaves out: the kernels (runtime/torch/ops.py, runtime/numpy/ops.py and their glue), which algorithms a card runs
as the library's and the cache plan (models/load.py, from checker/tokenflow.py), the generated
code (codegen/).
"""

from __future__ import annotations

import functools
import importlib
import re
import types
from collections.abc import Callable
from dataclasses import dataclass

from toycards.lang import ir
from toycards.runtime import context, rows

OPS = {"torch": "toycards.runtime.torch.ops", "numpy": "toycards.runtime.numpy.ops"}


@dataclass(frozen=True)
class Site:
    """What the cache plan (checker/tokenflow.py) says of one prelude algorithm in one card: its
    dimensions that hold this pass's tokens (`windowed`: their positions are the context's, after
    the cached tokens), and the inputs of its calls that the KV cache extends (`extended`: one tuple
    of argument indices per call that extends it)."""

    windowed: frozenset[str] = frozenset()
    extended: frozenset[tuple[int, ...]] = frozenset()


@dataclass(frozen=True)
class Kernel:
    """One entry of the table: the kernel's name in the target's ops module, how its adapter is
    made (`adapter(kernel, steps, ops, algo, site)`: the adapter, or None where the kernel does not
    do what these steps do), and whether it may decline (return None where it does not apply)."""

    name: str
    adapter: Callable
    declines: bool = False


def _arguments(steps: types.FunctionType) -> Callable[[tuple], tuple | None]:
    """For a generated function `f(card arguments…, ctx=None, …)`: a function from the card
    arguments of a call (trailing ones left to their defaults, as calls leave them) to all of
    them, or None for a count the function does not take (the steps then raise Python's error).

    >>> def f(Q, K, Mask, c=0, ctx=None, kv_index=None): ...
    >>> full = _arguments(f)
    >>> full((1, 2, 3)), full((1, 2, 3, 4)), full((1, 2))
    ((1, 2, 3, 0), (1, 2, 3, 4), None)
    """
    code = steps.__code__
    n = code.co_varnames[: code.co_argcount].index("ctx")
    defaults = steps.__defaults__ or ()
    first = code.co_argcount - len(defaults)  # the first argument with a default
    tail = defaults[: max(n - first, 0)]

    def full(args: tuple) -> tuple | None:
        if len(args) == n:
            return args
        if first <= len(args) < n:
            return (*args, *tail[len(args) - first :])
        return None

    return full


def _size(algo: ir.Algorithm, dim: str) -> tuple[int, int]:
    """(argument index, array axis) of the first input that runs over dimension `dim`: a card
    matrix ℝ^{m×n} is an array [..., n, m], so its card axis i is array axis −1 − i."""
    decls = {n: d for d in algo.input_decls for n in d.names}
    for i, name in enumerate(algo.inputs):
        t = decls[name].type if name in decls else None
        if isinstance(t, ir.TensorType):
            for k, d in enumerate(t.dims):
                if isinstance(d, ir.DimName) and d.name == dim:
                    return i, -1 - k
    raise AssertionError(f"{algo.name}: no input runs over {dim}")


def _positions(algo: ir.Algorithm, site: Site, dims) -> list[tuple[int, int, bool]]:
    """Where the kernel takes the positions of each of `dims` from: (argument, axis, windowed)."""
    return [(*_size(algo, d.name), d.name in site.windowed) for d in dims]


def _at(ops, ctx, args: tuple, where: tuple[int, int, bool]):
    """The 1-based positions along one dimension, as the steps read them: the context's for this
    pass's tokens (`runtime.positions`, looked up at each call: engine/torch/replay.py watches it), else 1…n."""
    i, axis, windowed = where
    n = args[i].shape[axis]
    return context.positions(ctx, n) if windowed else ops.arange(1, n + 1)


def _plain(kernel: Kernel, steps, ops, algo: ir.Algorithm, site: Site):
    """The kernel takes the card arguments as they are: `ops.softmax(x)`, `ops.rms_norm(e, γ, ε)`."""
    full, name, declines = _arguments(steps), kernel.name, kernel.declines

    def adapter(*args, ctx=None, **named):
        if ops.fast and not named and (a := full(args)) is not None:
            out = getattr(ops, name)(*a)
            if out is not None or not declines:
                return out
        return steps(*args, ctx=ctx, **named)

    return adapter


def _attention(kernel: Kernel, steps, ops, algo: ir.Algorithm, site: Site):
    """`ops.attention(Q, K, V, Mask, c, σ, t_z, t_x, kv_index)`: the positions of the mask's two
    dimensions, and the key/value head of each query head."""
    mask = next(d for d in algo.hyper_decls if isinstance(d.type, ir.TensorType) and d.type.field == "B")
    where = _positions(algo, site, mask.type.dims)
    full, name = _arguments(steps), kernel.name

    def adapter(*args, ctx=None, kv_index=None, **named):
        if ops.fast and not named and (a := full(args)) is not None:
            return getattr(ops, name)(*a, *(_at(ops, ctx, a, w) for w in where), kv_index)
        return steps(*args, ctx=ctx, kv_index=kv_index, **named)

    return adapter


def _gq_attention(kernel: Kernel, steps, ops, algo: ir.Algorithm, site: Site):
    """`ops.gq_attention(Q, K, V, H, H_kv, layout, θ, ρ, Mask, c, σ, t, ctx)` (σ None where the call
    leaves it out): the positions of the new tokens, and the context when the steps extend its cache (with K̂ and V, the arguments 1 and
    2 of their `attention` call; a card whose steps cache anything else keeps its steps). In a pass
    whose batch rows are sequences at positions of their own (runtime/rows.py), `ops.gq_attention_rows`
    alone: the steps would read one position list for every row, so where it declines the pass is
    refused."""
    if site.extended - {(1, 2)}:
        return None
    (where,) = _positions(algo, site, algo.input_decls[0].type.dims[-1:])  # ℓ, Q's tokens
    full, name, extends = _arguments(steps), kernel.name, bool(site.extended)

    def adapter(*args, ctx=None, **named):
        if ctx is not None and ctx.rows is not None:  # rows at positions of their own: the kernel alone
            a = full(args) if ops.fast and extends and not named else None
            out = ops.gq_attention_rows(*a, ctx) if a is not None else None
            if out is None:
                rows.refuse("GQAttention's kernel does not take this call")
            return out
        if ops.fast and not named and (a := full(args)) is not None:
            out = getattr(ops, name)(*a, _at(ops, ctx, a, where), ctx if extends else None)
            if out is not None:
                return out
        return steps(*args, ctx=ctx, **named)

    return adapter


def _entry(name: str, declines: bool = False) -> Kernel:
    return Kernel(name, _plain, declines)


# Prelude algorithm → its kernel, per target (the kernel is `ops_<target>.<name>`).
KERNELS: dict[str, dict[str, Kernel]] = {
    "torch": {
        "softmax": _entry("softmax"), "layer_norm": _entry("layer_norm"), "rms_norm": _entry("rms_norm"),
        "SiLU": _entry("silu"), "GELU": _entry("gelu"), "GELU_tanh": _entry("gelu_tanh"),
        "attention": Kernel("attention", _attention), "rope_pairs": _entry("rope_pairs"),
        "rope_halves": _entry("rope_halves"), "MoE": _entry("moe"), "MoE_biased": _entry("moe_biased"),
        "GQAttention": Kernel("gq_attention", _gq_attention, declines=True),
        "SwiGLU": _entry("swiglu", declines=True),
    },
    # MoE: the card's steps run every expert on every token, the kernel only the chosen ones;
    # GQAttention: one C call where the kernels are built (its steps cost most of a decoding step
    # in NumPy calls)
    "numpy": {
        "MoE": _entry("moe"), "MoE_biased": _entry("moe_biased"),
        "GQAttention": Kernel("gq_attention", _gq_attention, declines=True),
    },
}  # fmt: skip

# a generated function's docstring starts with the card header it implements: `y ← softmax(x)`
_HEADER = re.compile(r"[^\n←]*← ([^\s(]+)\(")


def algorithm_functions(namespace: dict) -> dict[str, types.FunctionType]:
    """The module-level functions of a generated module (or its adapters), by the name of the
    card algorithm each implements (the header its docstring starts with)."""
    out = {}
    for value in namespace.values():
        if isinstance(value, types.FunctionType) and (m := _HEADER.match(value.__doc__ or "")):
            out[m.group(1)] = value
    return out


def substitute(
    namespace: dict, target: str, sites: dict[str, Site], library: dict[str, ir.Algorithm]
) -> list[str]:
    """Put the kernels of `target` in a generated module's `namespace` (its globals): each function of
    an algorithm in `sites` (those the card runs as the library's prelude wrote them, with what the
    cache plan says of each) that has a kernel becomes that kernel's adapter. The names of the
    algorithms whose function is an adapter now (a second call changes nothing)."""
    table = KERNELS.get(target, {})
    ops = importlib.import_module(OPS[target]) if table else None
    done = []
    for name, steps in algorithm_functions(namespace).items():
        kernel, site = table.get(name), sites.get(name)
        if kernel is None or site is None or library.get(name) is None:
            continue
        if not hasattr(steps, "__wrapped__"):  # (an adapter already)
            adapter = kernel.adapter(kernel, steps, ops, library[name], site)
            if adapter is None:
                continue
            namespace[steps.__name__] = functools.update_wrapper(adapter, steps)
        done.append(name)
    return sorted(done)
