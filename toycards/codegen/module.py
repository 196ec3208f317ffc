"""What the module template lays out: the generated functions and the module around them.

Owns: `Function` (one generated function: its identifier, the card header it implements, its
arguments and body lines), `ModuleSpec` (everything templates/module.py.jinja reads) and
`comment_safe` (card text that stays inside one `#` comment).
Leaves out: making the decisions (emitter.py), the text layout (the template).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass
class Function:
    """One generated function (an algorithm of the card or of the prelude)."""

    name: str  # identifier
    card_name: str
    header: str  # the card's header line
    description: str
    args: list[str]
    body: list[str]
    is_main: bool = False
    keywords: list[str] = field(default_factory=list)  # extra keyword parameters, after ctx


@dataclass
class ModuleSpec:
    """Everything the templates lay out."""

    target: str
    class_name: str
    card_text: str
    card_sha256: str
    main: Function
    functions: list[Function]
    hyper: list[tuple[str, str]]  # (identifier, card name)
    logits_from_softmax: bool = True
    recompute: str = ""  # why a KV cache cannot follow the card (decoding then recomputes); "" if it can


_LINE_BREAKS = re.compile("[\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def comment_safe(text: str) -> str:
    """Card text made safe to sit in a `#` comment: no character Python or an editor breaks lines at."""
    return _LINE_BREAKS.sub(" ", text)
