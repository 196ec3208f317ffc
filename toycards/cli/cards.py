"""The commands that work on card files: `check`, `fmt` and `render`.

Owns: `check` (parse + shape-check, compiler-style diagnostics), `fmt` (canonical layout, rewritten
atomically, or in place for a card with hard links; never a read-only card, never losing a
comment) and `render` (card, Markdown, LaTeX, HTML, JSON or an SVG diagram). Each command is argument parsing,
one library call per file, and output; `toycards.cli` adds them to its group. A card argument is
a path or a card name (`llama`: resolve.py's rule); fmt reads a named card but never rewrites it.
Leaves out: the work itself (lang/, checker/, render/).
"""

from __future__ import annotations

import difflib
import os
import re
import stat
import sys
from collections import Counter
from pathlib import Path

import click

from toycards.errors import Diagnostic, Span, ToycardsError
from toycards.fileio import rewrite_in_place, write_atomic

FORMATS = ("card", "markdown", "latex", "html", "json", "svg")


# ── check ───────────────────────────────────────────────────────────────────────────────
def _check_file(file: str) -> tuple[list[Diagnostic], dict[str, str]]:
    """Diagnostics of one card file: syntax errors, or the checker's findings."""
    from toycards.lang.parse import parse

    try:
        card = parse(sys.stdin.read(), file="<stdin>") if file == "-" else parse(_arg_path(file))
    except ToycardsError as e:
        return _as_diagnostics(e, file), e.sources
    try:
        from toycards.checker import check
    except ImportError:  # a build without the checker: syntax only
        return [], {}
    try:
        return list(check(card)), {card.file: card.source}
    except ToycardsError as e:
        return _as_diagnostics(e, file), e.sources or {card.file: card.source}


def _as_diagnostics(e: ToycardsError, file: str) -> list[Diagnostic]:
    """A plain-message error (no such file, not UTF-8) as a diagnostic `file: error: message`."""
    if e.diagnostics:
        return list(e.diagnostics)
    return [Diagnostic(Span(file, 0, 0, 0, 0, 0, 0), e.message.removeprefix(f"{file}: "))]


@click.command("check")
@click.argument("files", nargs=-1, required=True)
def check_cmd(files: tuple[str, ...]) -> None:
    """Parse and shape-check cards (`-` reads stdin); print `file:line:col: error: …`, the line, a caret.

    Exit status 0 when every card is free of errors (warnings are printed), 1 otherwise.
    """
    from toycards.render.terminal import print_diagnostics

    n_errors, bad_files = 0, 0
    for file in files:
        diags, sources = _check_file(file)
        print_diagnostics(diags, sources, sys.stdout)
        errors = sum(d.severity == "error" for d in diags)
        n_errors += errors
        bad_files += errors > 0
    if n_errors:
        s = "s" * (n_errors != 1)
        click.echo(
            f"{n_errors} error{s} in {bad_files} of {len(files)} card{'s' * (len(files) != 1)}", err=True
        )
        sys.exit(1)
    click.echo(f"{len(files)} card{'s' * (len(files) != 1)} checked: no errors", err=True)


# ── fmt ─────────────────────────────────────────────────────────────────────────────────
_COMMENT = re.compile(r'"[^"\n]*"|(?:▷|\|>)([^\n]*)')


def _comments(text: str) -> Counter:
    """The ▷ comments of a card text (strings skipped), as a multiset of their stripped texts."""
    return Counter(m.group(1).strip() for m in _COMMENT.finditer(text) if m.group(1) is not None)


def _formatted(file: str, ascii_: bool) -> tuple[str, str]:
    """(old text, canonical text) of one card; refuses when formatting would lose anything."""
    from toycards.lang.parse import parse
    from toycards.lang.printer import render_card

    text = sys.stdin.read() if file == "-" else None
    card = parse(text, file="<stdin>") if text is not None else parse(_arg_path(file))
    new = render_card(card, ascii=ascii_)
    if parse(new, file=card.file) != card:
        raise RuntimeError(f"{file}: the formatted card does not parse back to the same card")
    lost = _comments(card.source) - _comments(new)
    if lost:
        comment = next(iter(lost))
        line = next((i for i, s in enumerate(card.source.splitlines(), 1) if comment in s), 0)
        raise ToycardsError(
            f"{file}:{line}: fmt would drop the comment ‘{comment}’ (a header line keeps no comment); "
            "move it to a line of its own before the algorithm; the file is unchanged"
        )
    return card.source, new


def _unified_diff(file: str, old: str, new: str) -> str:
    """The change fmt would make to `file`, as a unified diff (`--- file`, `+++ file (formatted)`)."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), file, f"{file} (formatted)"
    )
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )


def _rewrite(file: str, new: str) -> None:
    """Write a card's formatted text over it. A read-only card is refused: its bits say "do not
    change me", and an atomic rename would replace it anyway. A card with other hard links is
    rewritten in place (fileio.rewrite_in_place: the old text kept in FILE~ until the new one is
    on disk), so that every name sees the new text; any other card is replaced atomically."""
    try:
        info = os.stat(file)
    except OSError as e:
        raise ToycardsError(f"{file}: cannot write: {e.strerror or e}") from None
    # os.access alone would let root through, for whom it ignores the permission bits
    if not os.access(file, os.W_OK) or not info.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise ToycardsError(f"{file}: is read-only; not formatted")
    if info.st_nlink > 1:
        rewrite_in_place(file, new)
    else:
        write_atomic(file, new)


@click.command("fmt")
@click.argument("files", nargs=-1, required=True)
@click.option(
    "--check",
    "check_only",
    is_flag=True,
    help="Change nothing; exit 1, showing for each file that would change a unified diff of the change.",
)
@click.option(
    "--diff", "diff_only", is_flag=True, help="Change nothing; print only the unified diffs (exit 1 if any)."
)
@click.option(
    "--ascii", "ascii_", is_flag=True, help="Write the ASCII spelling (<-, in, R^{d x n}, gamma_l^1)."
)
@click.option(
    "--stdout", "to_stdout", is_flag=True, help="Print the formatted cards instead of rewriting them."
)
def fmt_cmd(files: tuple[str, ...], check_only: bool, diff_only: bool, ascii_: bool, to_stdout: bool) -> None:
    """Rewrite cards in the canonical layout (only files that change; `-` reads stdin)."""
    from toycards.render.terminal import print_error

    check_only = check_only or diff_only

    failed, changed = 0, []
    for file in files:
        try:
            if not (check_only or to_stdout):
                _refuse_named(file)
            old, new = _formatted(file, ascii_)
        except ToycardsError as e:
            print_error(e, sys.stderr)
            failed += 1
            continue
        if to_stdout or file == "-":
            click.echo(new, nl=False)
        elif new != old:
            changed.append(file)
            if check_only:
                if not diff_only:
                    click.echo(f"would reformat {file}")
                click.echo(_unified_diff(file, old, new), nl=False)
            else:
                try:
                    _rewrite(file, new)
                except ToycardsError as e:
                    print_error(e, sys.stderr)
                    failed += 1
                    continue
                click.echo(f"reformatted {file}", err=True)
    if check_only and changed:
        click.echo(
            f"{len(changed)} of {len(files)} card{'s' * (len(files) != 1)} would be reformatted", err=True
        )
    sys.exit(1 if failed or (check_only and changed) else 0)


# ── render ──────────────────────────────────────────────────────────────────────────────
def render(card, fmt: str, ascii_: bool = False, layout: str = "python") -> str:
    """A card in one of FORMATS; LaTeX, HTML and SVG as complete documents (HTML with the
    diagram, render/diagram.py, after the algorithms)."""
    if fmt == "card":
        from toycards.lang.printer import render_card

        return render_card(card, ascii=ascii_)
    if fmt == "markdown":
        from toycards.render.markdown import render_markdown

        return render_markdown(card)
    if fmt == "latex":
        from toycards.render.latex import render_latex

        return render_latex(card, standalone=True)
    if fmt == "html":
        from toycards.render.html import render_html

        return render_html(card, standalone=True, diagram=True, layout=layout)
    if fmt == "svg":
        from toycards.render.diagram import render_svg

        return render_svg(card, engine=layout)
    from toycards.render.json import render_json

    return render_json(card)


@click.command("render")
@click.argument("file")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="card", show_default=True)
@click.option("--ascii", "ascii_", is_flag=True, help="ASCII spelling (card format).")
@click.option(
    "--layout",
    type=click.Choice(("python", "dot")),
    default="python",
    show_default=True,
    help="Who places the diagram (svg, html): the built-in layered layout, or Graphviz dot where installed.",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to this file instead of stdout.")
def render_cmd(file: str, fmt: str, ascii_: bool, layout: str, output: str | None) -> None:
    """Show a card as a card, Markdown, LaTeX (algorithm + algpseudocode), HTML, JSON or an SVG
    block diagram of each algorithm (HTML embeds the diagram)."""
    from toycards.lang.parse import parse
    from toycards.render.terminal import print_card

    path = None if file == "-" else _arg_path(file)
    card = parse(sys.stdin.read(), file="<stdin>") if path is None else parse(path)
    text = render(card, fmt, ascii_, layout)
    if output:
        same = path is not None and Path(output).exists() and Path(output).resolve() == path.resolve()
        if same and (fmt != "card" or path != Path(file)):  # a named card is never rewritten
            raise ToycardsError(f"{output}: is the input card; refusing to overwrite it with {fmt}")
        write_atomic(output, text)
    elif fmt == "card":
        print_card(text, sys.stdout)
    else:
        from toycards.render.escape import terminal_safe, to_terminal

        click.echo(terminal_safe(text) if fmt == "markdown" and to_terminal(sys.stdout) else text, nl=False)


def _arg_path(file: str) -> Path:
    """The card file an argument names: a path, else a card name (resolve.resolve_card); always
    a Path, since parse() would take a string for card text."""
    from toycards.cli.resolve import resolve_card

    return resolve_card(file)


def _refuse_named(file: str) -> None:
    """fmt rewrites a card only where the user named its file: a card name stands for a card the
    user did not point at (the library's, or one of TOYCARDS_CARDS)."""
    from toycards.cli.resolve import named_card

    path = None if file == "-" else named_card(file)
    if path is not None:
        raise ToycardsError(
            f"{file}: names the card {path}; fmt rewrites only cards given by their path"
            f" (`toycards fmt --check {file}` shows what it would change)"
        )
