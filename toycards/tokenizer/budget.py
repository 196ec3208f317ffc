"""What one render of a chat template may spend, and what it has spent.

Owns: `Limits` (the bounds of one render), `LimitExceeded` (a bound was hit; the message says
which), `Budget` (what a render has used so far: time, steps, nesting, characters built; every
check raises LimitExceeded) and `text_size` (the size of `str(value)` from a bounded walk, before
it is built).
Leaves out: the sandbox's hooks that call these checks (sandbox.py).
"""

from __future__ import annotations

import time
from collections.abc import ItemsView, Iterable, KeysView, Mapping, ValuesView
from dataclasses import dataclass

from jinja2.runtime import Undefined
from jinja2.utils import Namespace


@dataclass(frozen=True)
class Limits:
    """Bounds of one render. `chars` grows by 4 × the size of the values passed in, so that a
    template may echo its input a few times whatever its size."""

    seconds: float = 5.0  # wall-clock time of one render, compiling included
    template: int = 200_000  # characters of the template itself (about 10 × the largest in use)
    chars: int = 4_000_000  # characters rendered, and in any one string or list built
    steps: int = 1_000_000  # loop iterations and macro calls, all together
    depth: int = 64  # nested macro calls, blocks and recursive loops (~7 Python frames each)
    range: int = 100_000  # items in one range(), as in jinja2's own sandbox
    int_bits: int = 1 << 16  # the largest integer built by * or **
    built: int = 16  # characters built by all operations together, in multiples of `chars`


class LimitExceeded(Exception):
    """A template went past one of its Limits; the message says which."""


def text_size(value: object, limit: int) -> int:
    """Characters of `str(value)`, estimated by a walk that stops once past `limit`.

    >>> text_size("abc", 10), text_size(["abc", 12], 100), len(str(["abc", 12]))
    (3, 14, 11)
    >>> text_size(["x" * 50] * 9, 100) > 100
    True
    """
    return len(value) if isinstance(value, str) else walk_size(value, limit)[0]


def walk_size(value: object, limit: int) -> tuple[int, int, int]:
    """(characters, values, nesting depth) of a value's text form; counting stops past `limit`.
    Iterative, since a template can nest lists deeper than Python's recursion limit."""
    size = count = depth = 0
    stack = [(value, 1)]
    while stack and size <= limit:
        v, level = stack.pop()
        count, depth = count + 1, max(depth, level)
        if isinstance(v, str):
            size += len(v) + 2  # quotes, inside a container
        elif isinstance(v, bytes | bytearray):
            size += 4 * len(v) + 3  # b'\x00'
        elif isinstance(v, bool | float | Undefined) or v is None:
            size += 5
        elif isinstance(v, int):
            size += v.bit_length() // 3 + 2
        elif isinstance(v, Namespace):
            stack.append((object.__getattribute__(v, "_Namespace__attrs"), level + 1))
            size += 13
        elif isinstance(v, Mapping | ItemsView):
            stack.extend((x, level + 1) for kv in (v.items() if isinstance(v, Mapping) else v) for x in kv)
            size += 2 + 4 * len(v)
        elif isinstance(v, list | tuple | set | frozenset | KeysView | ValuesView):
            stack.extend((x, level + 1) for x in v)
            size += 2 + 2 * len(v)
        else:  # ranges, loop contexts, macros, the caller's own objects: a short fixed repr
            size += 64
    return size, count, depth


def as_int(n: object) -> int:
    """An integer argument, or 0 for anything that the operation itself will refuse."""
    return n if isinstance(n, int) else 0


class Budget:
    """What one render has used so far; every check raises LimitExceeded."""

    def __init__(self, limits: Limits, input_chars: int):
        self.limits = limits
        self.deadline = time.monotonic() + limits.seconds
        self.max_chars = limits.chars + 4 * input_chars
        self.max_built = limits.built * self.max_chars
        self.built = self.steps = self.depth = 0

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise LimitExceeded(f"ran past its time limit of {self.limits.seconds:g} s")

    def step(self) -> None:
        self.steps += 1
        if self.steps > self.limits.steps:
            raise LimitExceeded(f"ran over {self.limits.steps:,} loop iterations and macro calls")
        self.check_time()

    def loop(self, iterable: Iterable) -> Iterable:
        for item in iterable:
            self.step()
            yield item

    def build(self, chars: int, what: str = "a string of {:,} characters") -> None:
        """Account for a value of `chars` characters (items, for a list) about to be built.
        Time is not checked here: between two loop iterations or calls a template runs at
        most its own length in operations."""
        if chars > self.max_chars:
            raise LimitExceeded(f"builds {what.format(chars)} (the limit is {self.max_chars:,})")
        self.built += chars
        if self.built > self.max_built:
            raise LimitExceeded(f"builds more than {self.max_built:,} characters in all")

    def size(self, value: object) -> int:
        return text_size(value, self.max_chars)

    def text(self, value: object) -> None:
        """Account for `str(value)` about to be built."""
        self.build(self.size(value), "text of {:,} characters from a value")

    def items(self, n: int) -> None:
        self.build(n, "a list of {:,} items")

    def integer(self, bits: int) -> None:
        if bits > self.limits.int_bits:
            raise LimitExceeded(f"builds an integer of {bits:,} bits (the limit is {self.limits.int_bits:,})")
