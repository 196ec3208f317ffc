"""What the module template lays out: the generated functions and the module around them.

Owns: `Function` (one generated function: its identifier, the card header it implements, its
arguments and body lines), `ModuleSpec` (everything templates/module.py.jinja reads) and
`comment_safe`, the one way card text enters a `#` comment of generated code.
Leaves out: making the decisions (emitter.py), the text layout (the template).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toycards.errors import visible


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
    logits_from_softmax: bool = True  # P = softmax(Z): the module returns the logits Z (else: the output)
    recompute: str = ""  # why a KV cache cannot follow the card (decoding then recomputes); "" if it can


def comment_safe(text: str) -> str:
    """Card text made safe to sit in a `#` comment: every character that is not printable (a line
    end for Python or an editor among them: CR, VT, FF, NEL, U+2028) spelled as its escape, so
    the comment ends where the emitter ends it.

    >>> comment_safe("Y_{a\\rimport os}")
    'Y_{a\\\\rimport os}'
    """
    return visible(text)
