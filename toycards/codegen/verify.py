"""The second wall in front of `exec`: a generated module's syntax tree, checked against what the
emitter can write.

Owns: `verify_source(source, filename)`, which parses a generated module and refuses it (a
ToycardsError naming the line and the construct) unless every node is one the emitter writes:
- imports only at the top of the module, and only the runtime's (`toycards.runtime`: context,
  ops and the model base of one target), `math`, `numpy as np`, `torch` and `__future__`;
- statements of the emitter's kinds (assignments, `if`, `for`, `return`, functions, one class
  on the runtime's model base): no `with`, `try`, `raise`, `global`, `del`, `while`, `yield`,
  `await`, decorators or annotations;
- no name or attribute that starts with `_` (so no dunder, `__import__`, `__builtins__`,
  `__class__`, `__globals__`);
- of Python's builtins only a few pure ones (`int`, `range`, `min`, …: `ALLOWED_BUILTINS`), so no
  `exec`, `eval`, `open`, `compile`, `getattr`, `globals`, `breakpoint`;
- attributes only of the emitter's: anything public of `ops` and `runtime` (the runtime's own
  functions), a few constants of `math`, and on values only `VALUE_ATTRIBUTES` (`self.w`,
  `x.shape`, `ctx.keep_last`, …); nothing of `np` or `torch`.
Leaves out: making the module (codegen/), running it (models/load.py, which verifies every module
before it executes it, a cached one included). Card names never reach a module but as the
identifiers `Namespace` hands out, and card text but as string literals or `comment_safe`
comments; this check holds even if that first wall had a hole.

Standard library only (`ast`), so a process that loads a cached module verifies it without
importing the generator.

>>> verify_source("import math\\nCARD = 'x'\\ndef f(X, ctx=None):\\n    return math.sqrt(max(X, 1))\\n")
>>> verify_source("def f(ctx=None):\\n    return open('/etc/passwd')\\n")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
toycards.errors.ToycardsError: <generated>:2: generated code refused: calls the builtin `open` (...)
"""

from __future__ import annotations

import ast
import builtins

from toycards.errors import ToycardsError

IMPORTS = frozenset(
    {
        ("__future__", "annotations", None),
        (None, "math", None),
        (None, "numpy", "np"),
        (None, "torch", None),
        ("toycards.runtime", "context", "runtime"),
        ("toycards.runtime.numpy", "ops", None),
        ("toycards.runtime.torch", "ops", None),
        ("toycards.runtime.numpy.model", "NumpyModel", None),
        ("toycards.runtime.torch.model", "TorchModel", None),
    }
)
BASES = frozenset({"NumpyModel", "TorchModel"})
ALLOWED_BUILTINS = frozenset(
    {
        "int",
        "float",
        "bool",
        "str",
        "len",
        "range",
        "min",
        "max",
        "sum",
        "abs",
        "round",
        "tuple",
        "list",
        "zip",
    }
)
RUNTIME_MODULES = frozenset({"ops", "runtime"})  # any public attribute: the runtime's own functions
MATH_ATTRIBUTES = frozenset({"ceil", "floor", "inf", "log", "exp", "pi", "e", "sqrt", "tanh", "cos", "sin"})
VALUE_ATTRIBUTES = frozenset({"w", "hp", "shape", "constant", "keep_last"})

_NODES = frozenset(
    {
        # statements
        ast.Module, ast.Expr, ast.Assign, ast.AugAssign, ast.If, ast.For, ast.Return, ast.Pass,
        ast.Break, ast.Continue, ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom,
        ast.alias, ast.arguments, ast.arg, ast.keyword,
        # expressions
        ast.Constant, ast.Name, ast.Attribute, ast.Subscript, ast.Slice, ast.Call, ast.Tuple, ast.List,
        ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Lambda, ast.ListComp,
        ast.GeneratorExp, ast.comprehension, ast.JoinedStr, ast.FormattedValue,
        ast.Load, ast.Store,
        # operators
        ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.MatMult,
        ast.BitAnd, ast.BitOr, ast.BitXor, ast.Invert, ast.Not, ast.UAdd, ast.USub, ast.And, ast.Or,
        ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Is, ast.IsNot,
    }
)  # fmt: skip
_BUILTINS = frozenset(dir(builtins))
_CONSTANTS = (str, int, float, bool, type(None), type(Ellipsis))


def verify_source(source: str, filename: str = "<generated>") -> None:
    """Refuse `source` unless it is a module the emitter could have written (module docstring)."""
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as exc:
        raise ToycardsError(f"{filename}:{exc.lineno}: generated code refused: it does not parse") from None
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            _check_import(node, filename)
    for node in ast.walk(tree):
        problem = _problem(node, tree)
        if problem:
            line = getattr(node, "lineno", 0)
            raise ToycardsError(
                f"{filename}:{line}: generated code refused: {problem} (toycards runs only what its "
                "code generator writes; this is a bug in toycards or a tampered cache)"
            )


def _check_import(node: ast.Import | ast.ImportFrom, filename: str) -> None:
    module = node.module if isinstance(node, ast.ImportFrom) else None
    for alias in node.names:
        if (module, alias.name, alias.asname) not in IMPORTS or getattr(node, "level", 0):
            raise ToycardsError(
                f"{filename}:{node.lineno}: generated code refused: imports {ast.unparse(node)!r} "
                "(only the runtime's modules, math, numpy and torch)"
            )


def _problem(node: ast.AST, tree: ast.Module) -> str | None:  # noqa: C901 - one rule a node kind
    if type(node) not in _NODES:
        return f"a {type(node).__name__} node, which the code generator never writes"
    if isinstance(node, (ast.Import, ast.ImportFrom)) and node not in tree.body:
        return "an import inside a function"
    if isinstance(node, ast.Constant) and not isinstance(node.value, _CONSTANTS):
        return f"a {type(node.value).__name__} constant"
    if isinstance(node, ast.Name):
        if node.id.startswith("_"):
            return f"the name `{node.id}`"
        if node.id in _BUILTINS and node.id not in ALLOWED_BUILTINS:
            return f"calls the builtin `{node.id}`" if _called(node, tree) else f"the builtin `{node.id}`"
    if isinstance(node, ast.Attribute):
        return _attribute_problem(node)
    if isinstance(node, (ast.FunctionDef, ast.Lambda)):
        return _function_problem(node)
    if isinstance(node, ast.ClassDef):
        names = [b.id if isinstance(b, ast.Name) else None for b in node.bases]
        if node.decorator_list or node.keywords or len(names) != 1 or names[0] not in BASES:
            return f"a class on {', '.join(map(str, names)) or 'no base'}"
    return None


def _attribute_problem(node: ast.Attribute) -> str | None:
    attr, owner = node.attr, node.value.id if isinstance(node.value, ast.Name) else None
    if attr.startswith("_"):
        return f"the attribute `{attr}`"
    if owner in RUNTIME_MODULES:
        return None
    if owner == "math":
        return None if attr in MATH_ATTRIBUTES else f"`math.{attr}`"
    if owner in ("np", "torch"):
        return f"`{owner}.{attr}` (generated code reaches numpy and torch through ops)"
    return None if attr in VALUE_ATTRIBUTES else f"the attribute `.{attr}`"


def _function_problem(node: ast.FunctionDef | ast.Lambda) -> str | None:
    if isinstance(node, ast.FunctionDef) and (node.decorator_list or node.returns):
        return f"a decorated or annotated function `{node.name}`"
    a = node.args
    if a.vararg or a.kwarg or a.posonlyargs:
        return "a function with *args, **kwargs or positional-only parameters"
    if any(arg.annotation for arg in a.args + a.kwonlyargs):
        return "an annotated parameter"
    if isinstance(node, ast.FunctionDef) and node.name.startswith("_"):
        return f"the function name `{node.name}`"
    bad = [arg.arg for arg in a.args + a.kwonlyargs if arg.arg.startswith("_") or arg.arg in _BUILTINS]
    return f"the parameter `{bad[0]}`" if bad else None


def _called(name: ast.Name, tree: ast.Module) -> bool:
    return any(isinstance(n, ast.Call) and n.func is name for n in ast.walk(tree))
