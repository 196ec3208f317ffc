"""A jinja2 sandbox with bounds on time, output, loops, nesting and the size of what it builds.

Owns: `BoundedSandbox`, an `ImmutableSandboxedEnvironment` whose hooks enforce the bounds of
one render (budget.py: `Limits`, `LimitExceeded`, `Budget`):
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
from collections.abc import Iterable, Mapping

from jinja2 import nodes
from jinja2.compiler import CodeGenerator
from jinja2.filters import make_attrgetter
from jinja2.runtime import BlockReference, LoopContext, Macro, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError
from jinja2.utils import generate_lorem_ipsum, pass_context

from toycards.tokenizer.budget import Budget, LimitExceeded, Limits, as_int, text_size, walk_size

# --- size of an operation's result, before it runs --------------------------------------------

_PRINTF_FIELD = re.compile(r"%(\([^)]*\))?[#0 +-]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?([a-zA-Z%])")


def _printf_size(b: Budget, fmt: str | bytes, args: object) -> int:
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


def _format_size(b: Budget, fmt: str, args: tuple, kwargs: Mapping) -> int:
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
    return len(s) + s.count(b"\t" if isinstance(s, bytes) else "\t") * max(0, as_int(tabsize))


def _translate_size(s: str | bytes, table: object) -> int:
    values = (
        table.values() if isinstance(table, Mapping) else table if isinstance(table, list | tuple) else ""
    )
    return len(s) * max((len(v) for v in values if isinstance(v, str | bytes)), default=1)


# str / bytes methods whose result can outgrow their receiver → its size from (receiver, *args);
# other methods give at most a few times their receiver's size.
_METHOD_SIZES = {
    "center": lambda s, width=0, *_: max(len(s), as_int(width)),
    "ljust": lambda s, width=0, *_: max(len(s), as_int(width)),
    "rjust": lambda s, width=0, *_: max(len(s), as_int(width)),
    "zfill": lambda s, width=0: max(len(s), as_int(width)),
    "expandtabs": _expandtabs_size,
    "replace": _replace_size,
    "translate": _translate_size,
}


def _check_call(b: Budget, func: object, args: tuple, kwargs: dict) -> tuple:
    """Account for a method call's result; returns `args`, a joined iterable read into a list."""
    receiver, name = getattr(func, "__self__", None), getattr(func, "__name__", "")
    wrapped = getattr(func, "__wrapped__", None)  # the sandbox's wrapper of str.format
    if isinstance(getattr(wrapped, "__self__", None), str) and wrapped.__name__ == "format_map":
        mapping = args[0] if args and isinstance(args[0], Mapping) else {}
        b.build(_format_size(b, wrapped.__self__, (), mapping))
    elif isinstance(getattr(wrapped, "__self__", None), str):
        b.build(_format_size(b, wrapped.__self__, args, kwargs))
    elif isinstance(receiver, int) and name == "to_bytes":
        b.build(4 * as_int(args[0] if args else kwargs.get("length", 1)))
    elif isinstance(receiver, str | bytes) and name == "join" and args:
        items = list(args[0])
        b.build(b.size(items) + len(receiver) * max(0, len(items) - 1))
        return (items, *args[1:])
    elif isinstance(receiver, str | bytes) and name in _METHOD_SIZES:
        b.build(_METHOD_SIZES[name](receiver, *args, **kwargs))
    return args


# --- filters ----------------------------------------------------------------------------------


def _as_text(b: Budget, value: object) -> str:
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
        context.environment.budget.build(max(context.environment.budget.size(value), as_int(width)))
        return value

    @staticmethod
    def indent(context, s, width=4, first=False, blank=False):
        b = context.environment.budget
        text = _as_text(b, s)
        b.build(
            len(text) + (text.count("\n") + 1) * (len(width) if isinstance(width, str) else as_int(width))
        )
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
        size, count, depth = walk_size(value, b.max_chars)
        width = len(indent) if isinstance(indent, str) else as_int(indent)
        b.build(2 * size + count * width * depth)  # one indented line per value
        return value

    @staticmethod
    def batch(context, value, linecount, fill_with=None):
        if fill_with is not None:
            context.environment.budget.items(as_int(linecount))  # padding of the last batch
        return value

    @staticmethod
    def slice(context, value, slices, fill_with=None):
        context.environment.budget.items(as_int(slices))  # one list per slice
        return value

    @staticmethod
    def round(context, value, precision=0, method="common"):
        if abs(as_int(precision)) > 1000:  # 10 ** precision is computed in full
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
        self.limits, self.budget = limits, Budget(limits, 0)
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
        self.budget = Budget(self.limits, sum(text_size(v, 1 << 62) for v in variables.values()))
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
        self.budget.build(as_int(n) * as_int(max) * 16)  # words of up to 15 letters and a space
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
