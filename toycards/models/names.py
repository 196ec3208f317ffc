"""Names with placeholders in a card's bindings, and which of them a file holds.

Owns: `expand_template` (`{arch}` and `{l-1}`-style placeholders of metadata keys and tensor names)
and `present` (a derived hyperparameter read from the file's tensor list: `present("…")`,
`present("blk.{l-1}.…", n)`).
Leaves out: binding hyperparameters and parameters (binding.py).
"""

from __future__ import annotations

import re

from toycards.lang import ir
from toycards.models.scalars import EvalError, eval_scalar

_TEMPLATE = re.compile(r"\{([^{}]*)\}")


def expand_template(template: str, arch: str | None, var: str = "", value: int | None = None) -> str:
    """Fill `{arch}` and `{l-1}`-style placeholders.

    >>> expand_template("blk.{l-1}.attn_q.weight", "llama", "l", 1), expand_template("{arch}.block_count", "gpt2")
    ('blk.0.attn_q.weight', 'gpt2.block_count')
    """

    def fill(m: re.Match) -> str:
        inner = m.group(1).replace(" ", "").replace("−", "-")
        if inner == "arch":
            return arch if arch is not None else m.group(0)
        m2 = re.fullmatch(rf"{re.escape(var)}([+-]\d+)?", inner) if var else None
        if m2 is None or value is None:
            raise EvalError(f"cannot fill {{{m.group(1)}}} in {template!r}")
        return str(value + int(m2.group(1) or 0))

    return _TEMPLATE.sub(fill, template)


def reads_tensors(e: ir.Expr) -> bool:
    """`present("…")` or `present("…{l-1}…", n)`: a value read from the file's tensor list."""
    return isinstance(e, ir.Call) and e.func == "present" and not e.params


def present(e: ir.Call, values: dict, tensor_shapes: dict, arch: str) -> int | tuple[int, ...]:
    """1 where the file holds the tensor `present` names, else 0 (llama.cpp's optional tensors,
    TENSOR_NOT_REQUIRED, which its graph tests for); one flag per l = 1 … n when a count is given,
    the name's one placeholder taking each l in turn."""
    if not tensor_shapes:
        raise EvalError("present(…) reads a file's tensor list: bind the card to a file, or give the value")
    template = e.args[0].value if isinstance(e.args[0], ir.Str) else ""
    if len(e.args) == 1:
        return int(expand_template(template, arch) in tensor_shapes)
    n = eval_scalar(e.args[1], values)
    var = placeholder(template)
    return tuple(int(expand_template(template, arch, var, i) in tensor_shapes) for i in range(1, int(n) + 1))


def placeholder(template: str) -> str:
    """The variable of a tensor name's one placeholder: `blk.{l-1}.x` → l."""
    inner = [m.strip() for m in re.findall(r"\{([^{}]*)\}", template)]
    found = {re.match(r"[^\s+\-−]+", m).group(0) for m in inner if m} - {"arch"}
    if len(found) != 1:
        raise EvalError(f"present({template!r}, n) needs one placeholder such as {{l-1}} in the name")
    return found.pop()
