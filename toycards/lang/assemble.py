"""Card lines → algorithms: the line assembler.

Owns: `Assembler`, which reads the flat list of `Line` records the transformer makes and
builds the card: the version line and the preamble comments, one algorithm per header, its
/* description */, its declaration blocks (Input, Output, Hyperparameters, Parameters),
parameter groups (their declarations found by indentation) and its steps, nested by
`do … end` and `if … else … end`, at most `MAX_BLOCKS` deep; and the diagnostics for what is out
of place (a line in the wrong part of the card, an unsupported version, an empty group, a block
left open, blocks nested too deep).
Leaves out: the tree and the IR nodes inside each line (transformer.py), and whether names
and shapes agree (checker/).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from toycards.errors import Diagnostic, Span, ToycardsError
from toycards.lang import ir
from toycards.lang.reading import MAX_BLOCKS

if TYPE_CHECKING:
    from collections.abc import Callable

    from toycards.lang.transformer import Line

_BLOCK_FIELDS = {
    "Input": "input_decls",
    "Output": "output_decls",
    "Hyperparameters": "hyper_decls",
    "Parameters": "param_decls",
    "State": "state_decls",
}


_DECL_FIELDS = ("input_decls", "output_decls", "hyper_decls", "param_decls")  # Algorithm's order


class Assembler:
    """Builds algorithms from the flat list of lines; reports misplaced lines."""

    def __init__(self, file: str, text: str) -> None:
        self.file, self.text = file, text
        self.diags: list[Diagnostic] = []

    def error(self, span: Span, message: str, hint: str = "") -> None:
        self.diags.append(Diagnostic(span, message, hint))

    def assemble(self, lines: list[Line]) -> ir.Card:
        """The card the lines make; raises ToycardsError with every diagnostic if any."""
        version, preamble, algos = self.split(lines)
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

    def split(self, lines: list[Line]) -> tuple[int, list[str], list[list[Line]]]:
        """The card's version, its preamble comments, and each algorithm's lines, header first."""
        version, preamble, algos = ir.CARD_LANGUAGE_VERSION, [], []
        current: list[Line] | None = None
        for i, line in enumerate(lines):
            if line.kind == "version":
                version = self.version(line, first=i == 0)
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
        return version, preamble, algos

    def version(self, line: Line, first: bool) -> int:
        """The version a version line names; it must come first and be the one this toycards reads."""
        if not first:
            self.error(line.span, "the version line must be the first line of the card")
        version = line.data["version"]
        if version != ir.CARD_LANGUAGE_VERSION:
            self.error(
                line.span,
                f"card language version {version} is not supported",
                f"this toycards reads version {ir.CARD_LANGUAGE_VERSION}",
            )
        return version

    def algorithm(self, lines: list[Line]) -> ir.Algorithm:
        """One algorithm from its header line and the lines under it."""
        head, parts = lines[0], _Parts(lines, self.error)
        for line in lines[1:]:
            parts.add(line)
        parts.close_group()
        d = head.data
        return ir.Algorithm(
            d["name"], d["number"], d["output"], tuple(d["inputs"]), tuple(d["params"]), "\n".join(parts.desc),
            *(tuple(parts.blocks[f]) for f in _DECL_FIELDS), self.steps(parts.steps), span=head.span,
            state_decls=tuple(parts.blocks["state_decls"]),
        )  # fmt: skip

    def steps(self, lines: list[Line]) -> tuple[ir.Stmt, ...]:
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
                if len(stack) == MAX_BLOCKS + 1:  # stack[0] holds the algorithm's own steps
                    self.error(
                        line.span,
                        f"blocks nested {MAX_BLOCKS + 1} deep (the limit is {MAX_BLOCKS})",
                        "move the inner steps into an algorithm of their own",
                    )
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
        # no steps at all is fine: a declaration-only algorithm (e.g. describe of an unknown architecture)
        return tuple(stack[0][1])

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


class _Parts:
    """One algorithm's lines sorted in the order they come: the description, the declaration
    blocks with their parameter groups, and the step lines (nested by `Assembler.steps`)."""

    def __init__(self, lines: list[Line], error: Callable[..., None]) -> None:
        self.lines, self.error = lines, error  # lines[0] is the header
        self.desc: list[str] = []
        self.blocks: dict[str, list] = {f: [] for f in _BLOCK_FIELDS.values()}
        self.block: str | None = None  # the Algorithm field the current block fills
        self.group: tuple[Line, list] | None = None  # the open parameter group, its declarations
        self.steps: list[Line] = []

    def add(self, line: Line) -> None:
        k = line.kind
        if k == "desc":
            self.description(line)
        elif k == "block":
            self.block_line(line)
        elif k in ("decl", "group"):
            self.declaration(line)
        elif k == "comment" and not self.steps:
            self.error(
                line.span,
                "a whole-line comment among declarations would be lost",
                "put ▷ comments at the end of a declaration line",
            )
        else:
            self.close_group()
            self.steps.append(line)

    def description(self, line: Line) -> None:
        n = len(self.desc)
        if self.block or self.steps or n != len([x for x in self.lines[1 : 1 + n] if x.kind == "desc"]):
            self.error(line.span, "a /* description */ belongs right under the algorithm header")
        self.desc.append(line.data["text"])

    def block_line(self, line: Line) -> None:
        """`Input:`, `Parameters:` …, perhaps with a first declaration on the same line."""
        self.close_group()
        if self.steps:
            self.error(
                line.span,
                f"the {line.data['block']} block comes after the steps",
                "declaration blocks come before the numbered steps",
            )
        self.block = _BLOCK_FIELDS[line.data["block"]]
        if line.data["comment"]:
            self.error(
                line.span,
                "a comment here would be lost",
                "put ▷ comments at the end of a declaration or step",
            )
        if line.data["decl"] is not None:
            self.blocks[self.block].append(line.data["decl"])

    def declaration(self, line: Line) -> None:
        """A declaration, or a parameter group's `for l ∈ [L], in "blk.{l-1}.":` line."""
        if self.steps or self.block is None:
            self.error(
                line.span,
                "a declaration outside Input/Output/Hyperparameters/Parameters/State"
                if not self.steps
                else "a declaration among the steps",
            )
            return
        if line.kind == "group":
            self.close_group()
            if self.block != "param_decls":
                self.error(
                    line.span,
                    'parameter groups (`for l ∈ [L], in "blk.{l-1}.":`) belong in the Parameters block',
                )
                return
            self.group = (line, [])
        elif self.group is not None and line.span.col > self.group[0].span.col:
            self.group[1].append(line.data["decl"])
        else:
            self.close_group()
            self.blocks[self.block].append(line.data["decl"])

    def close_group(self) -> None:
        """End the open parameter group, if any: it joins the Parameters block."""
        if self.group is None:
            return
        g, members = self.group
        if not members:
            self.error(
                g.span,
                "a parameter group with no declarations",
                "indent the per-layer declarations under it",
            )
        self.blocks["param_decls"].append(
            ir.ParamGroup(
                g.data["var"],
                g.data["bound"],
                g.data["prefix"],
                tuple(members),
                g.data["comment"],
                span=g.span,
                cond=g.data["cond"],
            )
        )
        self.group = None
