"""A jinja2 sandbox with bounds on time, output, loops, nesting and the size of what it builds.

Owns: `Limits` (the bounds of one render), `LimitExceeded` (a bound was hit; the message says
which), and `BoundedSandbox`, an `ImmutableSandboxedEnvironment` whose hooks enforce them:
- the length of the template itself, and a wall-clock deadline, checked at every loop
  iteration, call, filter and chunk of output;
- loop iterations and macro calls, counted together across all loops and nesting levels;
- the nesting depth of macro calls, `caller()`, blocks and recursive loops;
- the length of `range()`;
- the size of every string, list and integer built by `*`, `+`, `%`, `**`, `~`, by filters
  (`join`, `replace`, `center`, `indent`, `format`, `wordwrap`, `tojson`, …) and by string
  methods (`ljust`, `replace`, `join`, `format`, …), estimated *before* it is built, so that a
  refused value never takes memory; and the total of all of them, which bounds what lists and
  macro buffers can hold;
- the characters rendered.
Leaves out: Hugging Face chat-template conventions and turning `LimitExceeded` into a
ToycardsError (chat.py).

Sizes are estimates of `str(value)` from a bounded walk (`text_size`): exact for strings, within
a small factor for containers and escaped output (`tojson`, `%r`), so each bound holds to that
factor. `pprint` is not offered: its indentation grows with nesting depth times size.

>>> BoundedSandbox(Limits()).render("{% for x in range(3) %}{{ x ~ '.' }}{% endfor %}", {})
'0.1.2.'
"""

from __future__ import annotations

import re
import string
import time
from collections.abc import ItemsView, Iterable, KeysView, Mapping, ValuesView
from dataclasses import dataclass

from jinja2 import nodes
from jinja2.compiler import CodeGenerator
from jinja2.filters import make_attrgetter
from jinja2.runtime import BlockReference, LoopContext, Macro, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError
from jinja2.utils import Namespace, generate_lorem_ipsum, pass_context


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
    return len(value) if isinstance(value, str) else _walk(value, limit)[0]


def _walk(value: object, limit: int) -> tuple[int, int, int]:
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


def _int(n: object) -> int:
    """An integer argument, or 0 for anything that the operation itself will refuse."""
    return n if isinstance(n, int) else 0


class _Budget:
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


# --- size of an operation's result, before it runs --------------------------------------------

_PRINTF_FIELD = re.compile(r"%(\([^)]*\))?[#0 +-]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?([a-zA-Z%])")


def _printf_size(b: _Budget, fmt: str | bytes, args: object) -> int:
    """`fmt % args`: the format's text, every width and precision (`*` taken as the largest
    integer argument), and the arguments' text once per field of a mapping, else once."""
    text = fmt if isinstance(fmt, str) else fmt.decode("latin-1")
    fields = _PRINTF_FIELD.findall(text)
    values = args if isinstance(args, tuple) else (args,)
    widest = max((abs(v) for v in values if isinstance(v, int)), default=0)
    pads = sum(int(n) if n.isdigit() else widest for f in fields for n in f[1:3] if n)
    copies = len(fields) if isinstance(args, Mapping) else 1
    escapes = 10 if any(f[3] in "ra" for f in fields) else 1  # '\U0001f600'
    return len(text) + pads + copies * escapes * b.size(args)


def _widest(values: Iterable) -> int:
    """The largest width that `values` can put into a nested `{}` of a format spec: integers,
    and digit runs in strings (`'>1000'`)."""
    widest = 0
    for v in values:
        if isinstance(v, int):
            widest = max(widest, abs(v))
        elif isinstance(v, str):
            for digits in re.findall(r"\d+", v):
                digits = digits.lstrip("0") or "0"
                widest = max(widest, int(digits) if len(digits) < 20 else 1 << 64)
    return widest


def _format_size(b: _Budget, fmt: str, args: tuple, kwargs: Mapping) -> int:
    """`fmt.format(*args, **kwargs)`: as `_printf_size`, with all arguments' text once per field
    (a field can name any of them) and a nested `{}` in a spec taken as the widest argument."""
    fields = list(string.Formatter().parse(fmt))
    values = [*args, *kwargs.values()]
    widest = _widest(values) if any("{" in (spec or "") for _, _, spec, _ in fields) else 0
    size, each = 0, b.size(values)
    for literal, name, spec, conversion in fields:
        size += len(literal)
        if name is not None:
            numbers = [int(n) for n in re.findall(r"\d+", spec or "")] + [widest] * ("{" in (spec or ""))
            size += max(numbers, default=0) + each * (10 if conversion in ("r", "a") else 1)
    return size


def _replace_size(s: str | bytes, old: object, new: object, count: object = -1) -> int:
    hits = s.count(old) if isinstance(old, type(s)) and old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    grow = len(new) - len(old) if isinstance(new, str | bytes) and isinstance(old, str | bytes) else 0
    return len(s) + hits * max(0, grow)


def _expandtabs_size(s: str | bytes, tabsize: object = 8) -> int:
    return len(s) + s.count(b"\t" if isinstance(s, bytes) else "\t") * max(0, _int(tabsize))


def _translate_size(s: str | bytes, table: object) -> int:
    values = (
        table.values() if isinstance(table, Mapping) else table if isinstance(table, list | tuple) else ""
    )
    return len(s) * max((len(v) for v in values if isinstance(v, str | bytes)), default=1)


# str / bytes methods whose result can outgrow their receiver → its size from (receiver, *args);
# other methods give at most a few times their receiver's size.
_METHOD_SIZES = {
    "center": lambda s, width=0, *_: max(len(s), _int(width)),
    "ljust": lambda s, width=0, *_: max(len(s), _int(width)),
    "rjust": lambda s, width=0, *_: max(len(s), _int(width)),
    "zfill": lambda s, width=0: max(len(s), _int(width)),
    "expandtabs": _expandtabs_size,
    "replace": _replace_size,
    "translate": _translate_size,
}


def _check_call(b: _Budget, func: object, args: tuple, kwargs: dict) -> tuple:
    """Account for a method call's result; returns `args`, a joined iterable read into a list."""
    receiver, name = getattr(func, "__self__", None), getattr(func, "__name__", "")
    wrapped = getattr(func, "__wrapped__", None)  # the sandbox's wrapper of str.format
    if isinstance(getattr(wrapped, "__self__", None), str) and wrapped.__name__ == "format_map":
        mapping = args[0] if args and isinstance(args[0], Mapping) else {}
        b.build(_format_size(b, wrapped.__self__, (), mapping))
    elif isinstance(getattr(wrapped, "__self__", None), str):
        b.build(_format_size(b, wrapped.__self__, args, kwargs))
    elif isinstance(receiver, int) and name == "to_bytes":
        b.build(4 * _int(args[0] if args else kwargs.get("length", 1)))
    elif isinstance(receiver, str | bytes) and name == "join" and args:
        items = list(args[0])
        b.build(b.size(items) + len(receiver) * max(0, len(items) - 1))
        return (items, *args[1:])
    elif isinstance(receiver, str | bytes) and name in _METHOD_SIZES:
        b.build(_METHOD_SIZES[name](receiver, *args, **kwargs))
    return args


# --- filters ----------------------------------------------------------------------------------


def _as_text(b: _Budget, value: object) -> str:
    """`str(value)` for a filter that reads its text, accounted for first."""
    if isinstance(value, str):
        return value
    b.text(value)
    return str(value)


def _attributes(context, items: list, attribute: object) -> list:
    """`items`, or their `attribute`, as `join` and `sum` read them."""
    if attribute is None:
        return items
    return list(map(make_attrgetter(context.environment, attribute), items))


class _FilterSizes:
    """For each filter whose result can outgrow its input: the same parameters as the filter,
    after the context; accounts for the result and returns the value to pass on (an iterable
    it had to read, read into a list)."""

    @staticmethod
    def join(context, value, d="", attribute=None):
        b, value = context.environment.budget, list(value)
        b.build(b.size(_attributes(context, value, attribute)) + b.size(d) * max(0, len(value) - 1))
        return value

    @staticmethod
    def sum(context, iterable, attribute=None, start=0):
        value = list(iterable)
        items = [start, *_attributes(context, value, attribute)]
        context.environment.budget.items(sum(len(i) for i in items if isinstance(i, list | tuple)))
        return value

    @staticmethod
    def center(context, value, width=80):
        context.environment.budget.build(max(context.environment.budget.size(value), _int(width)))
        return value

    @staticmethod
    def indent(context, s, width=4, first=False, blank=False):
        b = context.environment.budget
        text = _as_text(b, s)
        b.build(len(text) + (text.count("\n") + 1) * (len(width) if isinstance(width, str) else _int(width)))
        return s

    @staticmethod
    def replace(context, s, old, new, count=None):
        b = context.environment.budget
        old, new = _as_text(b, old), _as_text(b, new)
        b.build(_replace_size(_as_text(b, s), old, new, -1 if count is None else count))
        return s

    @staticmethod
    def format(context, value, *args, **kwargs):
        b = context.environment.budget
        b.build(_printf_size(b, _as_text(b, value), kwargs or args))
        return value

    @staticmethod
    def wordwrap(context, s, width=79, break_long_words=True, wrapstring=None, break_on_hyphens=True):
        b = context.environment.budget
        n = b.size(s)
        b.build(n + (n + 1) * b.size(wrapstring or "\n"))  # a line break after every character
        return s

    @staticmethod
    def truncate(context, s, length=255, killwords=False, end="...", leeway=None):
        b = context.environment.budget
        b.build(b.size(s) + b.size(end))
        return s

    @staticmethod
    def urlize(
        context, value, trim_url_limit=None, nofollow=False, target=None, rel=None, extra_schemes=None
    ):
        b = context.environment.budget
        n = b.size(value)
        b.build(4 * n + (n // 2 + 1) * (b.size(target or "") + b.size(rel or "") + 64))  # a link per word
        return value

    @staticmethod
    def tojson(context, value, indent=None, *_, **__):
        b = context.environment.budget
        size, count, depth = _walk(value, b.max_chars)
        width = len(indent) if isinstance(indent, str) else _int(indent)
        b.build(2 * size + count * width * depth)  # one indented line per value
        return value

    @staticmethod
    def batch(context, value, linecount, fill_with=None):
        if fill_with is not None:
            context.environment.budget.items(_int(linecount))  # padding of the last batch
        return value

    @staticmethod
    def slice(context, value, slices, fill_with=None):
        context.environment.budget.items(_int(slices))  # one list per slice
        return value

    @staticmethod
    def round(context, value, precision=0, method="common"):
        if abs(_int(precision)) > 1000:  # 10 ** precision is computed in full
            raise LimitExceeded(f"rounds to {precision:,} digits (the limit is 1,000)")
        return value


# Filters that never turn a value into text, or whose result is no larger than their input.
_NO_TEXT_FILTERS = frozenset(
    "abs attr count d default dictsort filesizeformat first float groupby int items last length "
    "list map max min random reject rejectattr reverse select selectattr sort unique".split()
)


def _bounded_filter(name: str, func):
    """`func`, its result accounted for first. Context-passing, so that jinja2 never runs it at
    compile time, before a budget exists."""
    size = getattr(_FilterSizes, name, None)
    lead = getattr(getattr(func, "jinja_pass_arg", None), "name", None)

    @pass_context
    def bounded(context, value, *args, **kwargs):
        b = context.environment.budget
        b.check_time()
        if size is not None:
            value = size(context, value, *args, **kwargs)
        elif name not in _NO_TEXT_FILTERS:
            b.text(value)
        first = {"context": context, "eval_context": context.eval_ctx, "environment": context.environment}
        return func(first[lead], value, *args, **kwargs) if lead else func(value, *args, **kwargs)

    return bounded


# --- the environment --------------------------------------------------------------------------


_LOOP_FILTER = "for loop"  # not a name a template can write


@pass_context
def _loop_filter(context, iterable: Iterable) -> Iterable:
    return context.environment.budget.loop(iterable)


class _BoundedCodeGenerator(CodeGenerator):
    """Routes loops, `~` and template text through the budget."""

    def visit_Template(self, node: nodes.Template, frame=None) -> None:
        for loop in node.find_all(nodes.For):  # each iteration is counted
            loop.iter = nodes.Filter(loop.iter, _LOOP_FILTER, [], [], None, None, lineno=loop.lineno)
        super().visit_Template(node, frame)

    def visit_Concat(self, node: nodes.Concat, frame) -> None:
        join = "markup_join" if frame.eval_ctx.volatile or frame.eval_ctx.autoescape else "str_join"
        self.write(f"environment.concat_bounded({join}, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    def visit_Output(self, node: nodes.Output, frame) -> None:
        # Template text bypasses finalize; in a loop or a macro it is copied anew each time,
        # into a buffer that the output limit sees only when the macro returns.
        chars = sum(len(n.data) for n in node.nodes if isinstance(n, nodes.TemplateData))
        if chars:
            self.writeline(f"environment.budget.build({chars})")
        super().visit_Output(node, frame)


@pass_context
def _finalize(context, value: object) -> object:
    context.environment.budget.text(value)
    return value


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """An immutable sandbox that enforces `limits` in `render`, and fails on the first unsafe
    attribute instead of rendering it as empty. `filters` and `globals` are added to jinja2's."""

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"*", "+", "%", "**"})

    def __init__(self, limits: Limits, filters: dict | None = None, globals: dict | None = None, **kw):  # noqa: A002
        super().__init__(finalize=_finalize, optimized=False, **kw)  # no constant folding: no budget yet
        self.limits, self.budget = limits, _Budget(limits, 0)
        self.filters.update(filters or {})
        del self.filters["pprint"]
        self.filters = {name: _bounded_filter(name, f) for name, f in self.filters.items()}
        self.filters[_LOOP_FILTER] = _loop_filter
        self.globals.update(globals or {}, range=self._range, lipsum=self._lipsum)

    def render(self, template: str, variables: dict[str, object]) -> str:
        """Compile and render `template` with `variables`; raises LimitExceeded past a limit."""
        if len(template) > self.limits.template:
            raise LimitExceeded(
                f"is {len(template):,} characters long (the limit is {self.limits.template:,})"
            )
        self.budget = _Budget(self.limits, sum(text_size(v, 1 << 62) for v in variables.values()))
        out, size = [], 0
        for chunk in self.from_string(template).generate(**variables):
            size += len(chunk)
            if size > self.budget.max_chars:
                raise LimitExceeded(f"renders more than {self.budget.max_chars:,} characters")
            self.budget.check_time()
            out.append(chunk)
        return "".join(out)

    def unsafe_undefined(self, obj: object, attribute: str) -> Undefined:
        raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__} object is unsafe")

    def _range(self, *args: int) -> range:
        r = range(*args)
        if len(r) > self.limits.range:
            raise LimitExceeded(f"asks for a range of {len(r):,} items (the limit is {self.limits.range:,})")
        return r

    def _lipsum(self, n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:  # noqa: A002
        self.budget.build(_int(n) * _int(max) * 16)  # words of up to 15 letters and a space
        return generate_lorem_ipsum(n, html, min, max)

    def concat_bounded(self, join, parts: tuple) -> str:
        """`a ~ b ~ …`"""
        self.budget.build(sum(map(self.budget.size, parts)))
        return join(parts)

    def call_binop(self, context, operator: str, left: object, right: object) -> object:
        b = self.budget
        if operator == "*":
            seq, n = (right, left) if isinstance(left, int) else (left, right)
            if isinstance(seq, str | bytes) and isinstance(n, int):
                b.build(len(seq) * max(n, 0))
            elif isinstance(seq, list | tuple) and isinstance(n, int):
                b.items(len(seq) * max(n, 0))
            elif isinstance(left, int) and isinstance(right, int):
                b.integer(left.bit_length() + right.bit_length())
        elif operator == "+" and isinstance(left, str | bytes) and isinstance(right, str | bytes):
            b.build(len(left) + len(right))
        elif operator == "+" and isinstance(left, list | tuple) and isinstance(right, list | tuple):
            b.items(len(left) + len(right))
        elif operator == "%" and isinstance(left, str | bytes):
            b.build(_printf_size(b, left, right))
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
            b.integer(max(right, 0) * left.bit_length())
        return super().call_binop(context, operator, left, right)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja2's own signature)
        b = __self.budget
        b.check_time()
        if not isinstance(__obj, Macro | LoopContext | BlockReference):
            return super().call(__context, __obj, *_check_call(b, __obj, args, kwargs), **kwargs)
        if isinstance(__obj, LoopContext) and args:  # loop(children) in a recursive loop
            args = (b.loop(args[0]), *args[1:])
        b.step()
        b.depth += 1
        try:
            if b.depth > __self.limits.depth:
                raise LimitExceeded(f"nests macro calls or recursive loops deeper than {__self.limits.depth}")
            return super().call(__context, __obj, *args, **kwargs)
        finally:
            b.depth -= 1
