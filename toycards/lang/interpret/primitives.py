"""The builtins (lang/builtins.py) as the reference interpreter computes them.

Owns: one function per shape rule of the registry (`Builtin.rule`: elementwise, length,
extreme, ceil, rows, topk), each computing from the registry's own `scalar` meaning one entry
at a time, or from the definition the registry's doc line gives (`rows(A, i, k) =
A[(i−1)·k+1 : i·k, :]`). Never the runtime's fast kernels.
Leaves out: which builtins exist (lang/builtins.py), algorithms written as cards (machine.py).

>>> from toycards.lang.builtins import BUILTINS
>>> call_builtin(BUILTINS["topk"], [np.array([1.0, 3.0, 3.0, 0.0]), 2]).tolist()
[2, 3]
>>> call_builtin(BUILTINS["rows"], [np.arange(1.0, 7.0), 2, 3]).tolist()
[4.0, 5.0, 6.0]
"""

from __future__ import annotations

import functools

import numpy as np

from toycards.lang.builtins import Builtin
from toycards.lang.interpret.values import Fault, Pick, describe, entrywise, is_array, is_number, take, whole


def call_builtin(b: Builtin, args: list[object]) -> object:
    """The value of `b(args…)`."""
    if len(args) not in b.arity:
        raise Fault(f"{b.name} takes {' or '.join(map(str, b.arity))} argument(s), got {len(args)}")
    return _RULES[b.rule](b, args)


def _length(b: Builtin, args: list[object]) -> int:
    (x,) = args
    if not is_array(x) or x.ndim == 0:
        raise Fault(f"length of {describe(x)}: a number has no length")
    return int(x.shape[-1])  # the entries of a sequence or vector, the columns of a matrix


def _elementwise(b: Builtin, args: list[object]) -> object:
    (x,) = args
    return entrywise(b.scalar, x, b.name)


def _extreme(b: Builtin, args: list[object]) -> object:
    """`max(a, b)` of two numbers; `max(v)` the largest entry of a vector, per column of a matrix."""
    if len(args) == 2:
        x, y = args
        if not (is_number(x) and is_number(y)):
            raise Fault(f"{b.name}(a, b) compares two numbers, got {describe(x)} and {describe(y)}")
        return b.scalar(x, y)
    (v,) = args
    if not is_array(v) or v.ndim not in (1, 2) or v.shape[0] == 0:
        raise Fault(f"{b.name}(v) needs a non-empty vector or matrix, got {describe(v)}")
    if v.ndim == 1:
        return functools.reduce(b.scalar, [float(e) for e in v])  # max(max(v[1], v[2]), v[3]) …
    return np.array([functools.reduce(b.scalar, [float(e) for e in v[:, j]]) for j in range(v.shape[1])])


def _ceil(b: Builtin, args: list[object]) -> object:
    (x,) = args
    return entrywise(b.scalar, x, "⌈⌉")


def _rows(b: Builtin, args: list[object]) -> object:
    """`rows(A, i, k) = A[(i−1)·k+1 : i·k, :]`; on a vector, entries (i−1)·k+1 … i·k."""
    a, i, k = args
    i, k = whole(i, "the block number i of rows(A, i, k)"), whole(k, "the block size k of rows(A, i, k)")
    if not is_array(a) or a.ndim not in (1, 2):
        raise Fault(f"rows(A, i, k) needs a vector or a matrix, got {describe(a)}")
    picks = [Pick(lo=(i - 1) * k + 1, hi=i * k)] + [Pick()] * (a.ndim - 1)
    return take(a, picks, f"rows(A, {i}, {k})")


def _topk(b: Builtin, args: list[object]) -> np.ndarray:
    """The 1-based indices of the k largest entries, largest first, ties to the lower index."""
    v, k = args
    k = whole(k, "k of topk(v, k)")
    if not is_array(v) or v.ndim not in (1, 2) or not 0 <= k <= v.shape[0]:
        raise Fault(f"topk(v, {k}) needs a vector (or matrix) of at least {k} entries, got {describe(v)}")
    if v.ndim == 2:
        return np.stack([_topk(b, [v[:, j], k]) for j in range(v.shape[1])], axis=1)
    order = sorted(range(len(v)), key=lambda j: (-float(v[j]), j))
    return np.array([j + 1 for j in order[:k]], dtype=np.int64)


def _zeros(b: Builtin, args: list[object]) -> np.ndarray:
    return np.zeros(tuple(whole(n, f"a size of {b.name}") for n in args))


def _filled(b: Builtin, args: list[object]) -> np.ndarray:
    c, *sizes = args
    if not is_number(c):
        raise Fault(f"filled(c, …) fills with a number, got {describe(c)}")
    return np.full(tuple(whole(n, "a size of filled") for n in sizes), float(c))


_RULES = {
    "elementwise": _elementwise,
    "length": _length,
    "extreme": _extreme,
    "ceil": _ceil,
    "rows": _rows,
    "topk": _topk,
    "zeros": _zeros,
    "filled": _filled,
}
