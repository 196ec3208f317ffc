"""Card lines → algorithms: the line assembler.

Owns: `Assembler`, which reads the flat list of `Line` records the transformer makes and
builds the card: the version line and the preamble comments, one algorithm per header, its
/* description */, its declaration blocks (Input, Output, Hyperparameters, Parameters),
parameter groups (their declarations found by indentation) and its steps, nested by
`do … end` and `if … else … end`; and the diagnostics for lines in the wrong place.
Leaves out: the tree and the IR nodes inside each line (transformer.py), and whether names
and shapes agree (checker/).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from toycards.errors import Diagnostic, Span, ToycardsError
from toycards.lang import ir

if TYPE_CHECKING:
    from toycards.lang.transformer import Line

_BLOCK_FIELDS = {
    "Input": "input_decls",
    "Output": "output_decls",
    "Hyperparameters": "hyper_decls",
    "Parameters": "param_decls",
}


class Assembler:
    """Builds algorithms from the flat list of lines; reports misplaced lines."""

    def __init__(self, file: str, text: str) -> None:
        self.file, self.text = file, text
        self.diags: list[Diagnostic] = []

    def error(self, span: Span, message: str, hint: str = "") -> None:
        self.diags.append(Diagnostic(span, message, hint))

    def assemble(self, lines: list[Line]) -> ir.Card:
        version, preamble, algos = ir.CARD_LANGUAGE_VERSION, [], []
        current: list[Line] | None = None
        for i, line in enumerate(lines):
            if line.kind == "version":
                if i != 0:
                    self.error(line.span, "the version line must be the first line of the card")
                version = line.data["version"]
                if version != ir.CARD_LANGUAGE_VERSION:
                    self.error(
                        line.span,
                        f"card language version {version} is not supported",
                        f"this toycards reads version {ir.CARD_LANGUAGE_VERSION}",
                    )
            elif line.kind == "header":
                if line.data.get("comment"):
                    self.error(
                        line.span,
                        "a comment on the header line would be lost",
                        "put it in the /* description */ under the header",
                    )
                current = [line]
                algos.append(current)
            elif current is None:
                if line.kind == "comment":
                    preamble.append(line.data["text"])
                else:
                    self.error(
                        line.span,
                        "this line comes before any algorithm header",
                        "start with `Algorithm: OUT ← Name(inputs | parameters)`",
                    )
            else:
                current.append(line)
        if not algos and not self.diags:
            self.error(
                Span(self.file, 1, 1, 1, 2, 0, 1),
                "no algorithm in this card",
                "a card holds at least one `Algorithm: …` box",
            )
        built = [self.algorithm(a) for a in algos]
        if self.diags:
            raise ToycardsError.from_diagnostics(self.diags, {self.file: self.text})
        return ir.Card(tuple(built), version, tuple(preamble))

    def algorithm(self, lines: list[Line]) -> ir.Algorithm:
        head = lines[0]
        blocks: dict[str, list] = {f: [] for f in _BLOCK_FIELDS.values()}
        desc: list[str] = []
        block: str | None = None
        group: tuple[Line, list] | None = None
        steps: list[Line] = []

        def close_group() -> None:
            nonlocal group
            if group is not None:
                g, members = group
                if not members:
                    self.error(
                        g.span,
                        "a parameter group with no declarations",
                        "indent the per-layer declarations under it",
                    )
                blocks["param_decls"].append(
                    ir.ParamGroup(
                        g.data["var"],
                        g.data["bound"],
                        g.data["prefix"],
                        tuple(members),
                        g.data["comment"],
                        span=g.span,
                    )
                )
                group = None

        for line in lines[1:]:
            k = line.kind
            if k == "desc":
                if (
                    block
                    or steps
                    or len(desc) != len([x for x in lines[1 : 1 + len(desc)] if x.kind == "desc"])
                ):
                    self.error(line.span, "a /* description */ belongs right under the algorithm header")
                desc.append(line.data["text"])
            elif k == "block":
                close_group()
                if steps:
                    self.error(
                        line.span,
                        f"the {line.data['block']} block comes after the steps",
                        "declaration blocks come before the numbered steps",
                    )
                block = _BLOCK_FIELDS[line.data["block"]]
                if line.data["comment"]:
                    self.error(
                        line.span,
                        "a comment here would be lost",
                        "put ▷ comments at the end of a declaration or step",
                    )
                if line.data["decl"] is not None:
                    blocks[block].append(line.data["decl"])
            elif k in ("decl", "group"):
                if steps or block is None:
                    self.error(
                        line.span,
                        "a declaration outside Input/Output/Hyperparameters/Parameters"
                        if not steps
                        else "a declaration among the steps",
                    )
                    continue
                if k == "group":
                    close_group()
                    if block != "param_decls":
                        self.error(
                            line.span,
                            'parameter groups (`for l ∈ [L], in "blk.{l-1}.":`) belong in the Parameters block',
                        )
                        continue
                    group = (line, [])
                elif group is not None and line.span.col > group[0].span.col:
                    group[1].append(line.data["decl"])
                else:
                    close_group()
                    blocks[block].append(line.data["decl"])
            elif k == "comment" and not steps:
                self.error(
                    line.span,
                    "a whole-line comment among declarations would be lost",
                    "put ▷ comments at the end of a declaration line",
                )
            else:
                close_group()
                steps.append(line)
        close_group()
        d = head.data
        return ir.Algorithm(
            d["name"], d["number"], d["output"], tuple(d["inputs"]), tuple(d["params"]), "\n".join(desc),
            *(tuple(blocks[f]) for f in _BLOCK_FIELDS.values()), self.steps(steps, head.span), span=head.span,
        )  # fmt: skip

    def steps(self, lines: list[Line], head: Span) -> tuple[ir.Stmt, ...]:
        """Nest `do … end` and `if … else … end` blocks with a stack."""
        stack: list[tuple[Line, list, list | None]] = [(None, [], None)]  # (opener, body, else-body)

        def current() -> list:
            _, body, orelse = stack[-1]
            return orelse if orelse is not None else body

        for line in lines:
            k, d = line.kind, line.data
            if k == "stmt":
                s = d["stmt"]
                current().append(dataclasses.replace(s, comment=d["comment"]) if d["comment"] else s)
            elif k == "comment":
                current().append(ir.Comment(d["text"], span=line.span))
            elif k in ("for_seq", "forall", "if"):
                stack.append((line, [], None))
            elif k == "else":
                opener, body, orelse = stack[-1]
                if opener is None or opener.kind != "if" or orelse is not None:
                    self.error(line.span, "`else` without a matching `if … then`")
                    continue
                stack[-1] = (opener, body, [])
                opener.data["else_comment"] = d["comment"]
            elif k == "end":
                if len(stack) == 1:
                    self.error(line.span, "`end` without a matching `for … do` or `if … then`")
                    continue
                opener, body, orelse = stack.pop()
                current().append(self._close(opener, body, orelse, d["comment"]))
        for opener, _body, _ in stack[1:]:
            self.error(opener.span, "this block is never closed", "add a line `end`")
        return tuple(
            stack[0][1]
        )  # no steps: a declaration-only algorithm (e.g. describe of an unknown architecture)

    @staticmethod
    def _close(opener: Line, body: list, orelse: list | None, end_comment: str) -> ir.Stmt:
        d = opener.data
        if opener.kind == "for_seq":
            return ir.ForSeq(
                d["var"],
                d["start"],
                d["stop"],
                tuple(body),
                d["second"],
                d["comment"],
                end_comment,
                span=d["span"],
            )
        if opener.kind == "forall":
            return ir.ForAll(d["ranges"], tuple(body), False, d["comment"], end_comment, span=d["span"])
        return ir.If(
            d["cond"],
            tuple(body),
            tuple(orelse or ()),
            False,
            d["comment"],
            d.get("else_comment", ""),
            end_comment,
            span=d["span"],
        )
