"""Work on a card in proportion to its size: the helpers that keep it so.

Owns: `child_fields` (an IR node class's fields but `span`, looked up once per class, for
`ir.walk`), `deeper_than` (the first node past a depth, found without recursing: the parser
holds each line to `MAX_DEPTH` with it, since the printer, checker and codegen recurse once or
more per level) and `collector_paused` (the context in which the parser, printer, checker and
codegen build and read a card).
Leaves out: the limits themselves (reading.py) and the IR's node classes (ir.py). This module
imports nothing from the package, so that ir.py can import it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc


@functools.cache
def child_fields(cls: type) -> tuple[str, ...] | None:
    """The fields of a dataclass but `span`; None for any other type (str, None, a class itself).

    >>> from toycards.lang import ir
    >>> child_fields(ir.BinOp), child_fields(str), child_fields(type)
    (('op', 'left', 'right'), None, None)
    """
    if not dataclasses.is_dataclass(cls):
        return None
    return tuple(f.name for f in dataclasses.fields(cls) if f.name != "span")


def deeper_than(node: object, limit: int) -> object | None:
    """The first node found more than `limit` nodes down from `node` (itself counted, tuples
    not), or None.

    >>> from toycards.lang.ir import BinOp, Name
    >>> deeper_than(BinOp("+", BinOp("+", Name("a"), Name("b")), Name("c")), 2)
    Name(id='a')
    >>> deeper_than(BinOp("+", BinOp("+", Name("a"), Name("b")), Name("c")), 3) is None
    True
    """
    stack = [(node, 0)]
    while stack:
        n, depth = stack.pop()
        if isinstance(n, tuple):
            stack.extend((child, depth) for child in reversed(n))
            continue
        names = child_fields(type(n))
        if names is None:
            continue
        if depth == limit:
            return n
        stack.extend((getattr(n, name), depth + 1) for name in reversed(names))
    return None


@contextlib.contextmanager
def collector_paused():
    """Run the block with Python's cyclic garbage collector paused (and as it was afterwards).

    An IR is a tree of frozen nodes built bottom-up: reference counting frees it, and the cyclic
    collector has nothing to find in it. Yet each of its full passes visits every object alive,
    and while a card of n steps is read, printed, checked or compiled, those passes come about
    log n times over a heap that grows with n; paused, the work stays proportional to the card.
    Whatever cycles the block leaves are collected later.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
