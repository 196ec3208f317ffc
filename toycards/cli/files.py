"""The commands that start from files a user already has: `describe`, `diff` and `list`.

Owns: argument parsing and terminal output of `toycards describe` (rich view, or any of the
formats of inspect/formats.py), `toycards diff` (text or JSON; also git's external diff driver
with its seven arguments) and `toycards list`; each is one library call (inspect/describe.py,
inspect/diff.py, inspect/discover.py) plus printing. The commands are plain click commands that `toycards.cli` adds to
its group: `main.add_command(describe_cmd)`, `diff_cmd`, `list_cmd`. A model argument is a path or a
name that `list` shows, a card argument a path or a card name (resolve.py).
Leaves out: the work itself (the library modules above), the other commands (cards.py, models.py).

Text from a file reaches the terminal only through render/escape.py's `terminal_safe`, and rich
only as `Text`, never as markup: the terminal view, the text format, notices, problems, tensor
reports, diff reports and list tables always; the card and Markdown formats when stdout is a
terminal (JSON, LaTeX and HTML are escaped by their own writers).

Errors follow the group's policy (cli/__init__.py) (a ToycardsError is printed by the group, exit 1), except in
diff, which exits like diff(1): 0 equal, 1 different, 2 a file that cannot be read. describe also
exits 1 when the file does not match its card (the problems are listed on stderr) and, with
--check-tensors, when a tensor holds NaN or Inf (gguf/finite.py; the report goes to stderr).
"""

from __future__ import annotations

import sys

import click

from toycards.cli.options import card_option, given_card
from toycards.errors import ToycardsError
from toycards.render.escape import terminal_safe, to_terminal


def _fail(e: ToycardsError, code: int) -> None:
    from toycards.render.terminal import print_error

    print_error(e, sys.stderr)
    sys.exit(code)


DESCRIBE_FORMATS = ("terminal", "card", "text", "json", "markdown", "latex", "html")


def _line(text: str) -> str:
    """One line of a file's text, safe for the terminal."""
    return terminal_safe(text, newlines=False)


_PROBLEM_STYLES = {"error": "red", "warning": "yellow", "note": "dim"}


def _describe_terminal(card, every_problem: bool, whole_template: bool) -> None:
    """The rich view: header table, notice, problems (the first ones and a count, unless
    `every_problem`), the chat template (its start, unless `whole_template`), then the
    highlighted card."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from toycards.inspect.formats import described_rows, problem_lines, template_excerpt, template_heading
    from toycards.render.terminal import highlight_card

    console = Console(highlight=False, soft_wrap=True, markup=False, emoji=False)
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold cyan", justify="right", no_wrap=True)
    table.add_column()
    for label, value in described_rows(card):
        table.add_row(Text(_line(label)), Text(_line(value)))
    console.print(table)
    if card.notice:
        console.print(Text(f"notice: {_line(card.notice)}", style="yellow"))
    for severity, line in problem_lines(card, every_problem):
        console.print(Text(_line(line), style=_PROBLEM_STYLES[severity]))
    template = card.header.chat_template if card.header else None
    if template is not None:
        shown, left_out = template_excerpt(template, whole_template)
        console.print()
        console.print(Text(template_heading(template, left_out), style="bold cyan"))
        console.print(Text("\n".join("  " + ln for ln in terminal_safe(shown).split("\n"))))
    console.print()
    text = highlight_card(terminal_safe(str(card)))
    text.highlight_regex(r"(?<= = )[^ \n]+", "bold green")  # the values describe found
    console.print(text, end="")


@click.command("describe")
@click.argument("model", type=click.Path())
@click.option(
    "--format",
    "fmt",
    type=click.Choice(DESCRIBE_FORMATS),
    default=None,
    help="terminal (default on a terminal), text (default otherwise), card (a card that parses), "
    "json, markdown, latex or html.",
)
@click.option(
    "--check-tensors",
    "check_tensors",
    is_flag=True,
    help="Also read every tensor's data and report (on stderr) each one holding NaN or Inf.",
)
@click.option(
    "--all",
    "every_problem",
    is_flag=True,
    help="List every problem (default on a terminal, and on stderr: the first 10 and a count).",
)
@click.option(
    "--show-template",
    "whole_template",
    is_flag=True,
    help="Show the whole chat template (default: its first lines and a count of the rest).",
)
@card_option
def describe_cmd(
    model: str,
    fmt: str | None,
    check_tensors: bool,
    every_problem: bool,
    whole_template: bool,
    card: str | None,
) -> None:
    """The bound card of a GGUF file: concrete hyperparameters, every tensor checked, a header.

    The card is `--card FILE`, else the one embedded in the file, else ARCH.card from a folder of
    TOYCARDS_CARDS, else the library's. Exit status 1 when the file is not valid GGUF or does not
    match its card (the problems are listed on stderr; the first 10 and a count, or all with
    --all); an architecture without a card gives a declaration-only card and exit 0. With
    --check-tensors, also 1 when a tensor holds NaN or Inf; stdout stays the format's output.
    The terminal and text views show the start of the chat template (--show-template: all of it).
    """
    from toycards.cli.resolve import resolve_model
    from toycards.inspect.describe import describe
    from toycards.inspect.formats import problem_lines, render_described

    model = str(resolve_model(model))
    card = describe(model, given_card(card))
    fmt = fmt or ("terminal" if sys.stdout.isatty() else "text")
    if fmt == "terminal":
        _describe_terminal(card, every_problem, whole_template)
    else:
        out = render_described(card, fmt, every_problem, whole_template)  # text: terminal-safe already
        click.echo(
            terminal_safe(out) if fmt in ("card", "markdown") and to_terminal(sys.stdout) else out, nl=False
        )
        if card.notice:
            click.echo(f"notice: {_line(card.notice)}", err=True)
        for _, line in problem_lines(card, every_problem):
            click.echo(_line(line), err=True)
    finite = _check_tensors(model) if check_tensors else True
    sys.exit(1 if card.errors or not finite else 0)


def _check_tensors(model: str) -> bool:
    """Stream every tensor of the file, print the report on stderr; True when all are finite."""
    sys.stdout.flush()  # the format's output first, then the report
    from toycards.gguf.finite import check_tensors

    report = check_tensors(model)
    for line in report.lines():
        click.echo(_line(line), err=True)
    return report.ok


@click.command("diff")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def diff_cmd(paths: tuple[str, ...], fmt: str) -> None:
    """What changed between A and B (cards or GGUF files, by path or by name: `toycards cards`,
    `toycards list`): exit 0 when equal, 1 when not, 2 on errors.

    Also git's external diff driver: given git's seven arguments (path old-file old-hex old-mode
    new-file new-hex new-mode) it prints the report for that path and exits 0.
    """
    import json

    from toycards.cli.resolve import resolve_input
    from toycards.inspect.diff import diff_paths

    if len(paths) not in (2, 7):
        raise click.UsageError("give two files (A B), or git's seven diff-driver arguments")
    git = len(paths) == 7
    a, b = (paths[1], paths[4]) if git else paths
    labels = (f"a/{paths[0]}", f"b/{paths[0]}") if git else (a, b)
    try:
        if not git:  # git names files that exist, or /dev/null
            a, b = (str(resolve_input(p)) for p in (a, b))
        result = diff_paths(a, b, *labels)
    except ToycardsError as e:
        if git:  # never stop `git diff`: fall back to the lines
            click.echo(_plain_diff(a, b, labels, e), nl=False)
            sys.exit(0)
        _fail(e, 2)
    if git:
        click.echo(_line(f"diff --toycards {labels[0]} {labels[1]}"))
    click.echo(
        json.dumps(result.to_json(), ensure_ascii=False, indent=1) if fmt == "json" else result.text(),
        nl=False,
    )
    sys.exit(0 if git or result.equal else 1)


def _plain_diff(a: str, b: str, labels: tuple[str, str], why: Exception) -> str:
    import difflib

    def lines(p: str) -> list[str]:
        try:
            return open(p, encoding="utf-8", errors="replace").read().splitlines(True)
        except OSError:
            return []

    head = f"diff --toycards {labels[0]} {labels[1]}\n(not compared as cards: {str(why).splitlines()[0]})"
    return _line(head) + "\n" + terminal_safe("".join(difflib.unified_diff(lines(a), lines(b), *labels)))


@click.command("list")
@click.option(
    "--dir",
    "dirs",
    multiple=True,
    type=click.Path(),
    help="a folder or file to search (repeatable); default: .",
)
@click.option("--recursive", "-r", is_flag=True, help="descend into sub-folders of --dir folders")
@click.option(
    "--hf-cache", multiple=True, type=click.Path(), help="Hugging Face hub cache(s) instead of the usual one"
)
@click.option(
    "--ollama", multiple=True, type=click.Path(), help="Ollama model store(s) instead of the usual one"
)
@click.option(
    "--lmstudio", multiple=True, type=click.Path(), help="LM Studio model folder(s) instead of the usual one"
)
@click.option("--no-caches", is_flag=True, help="search only the folders, not the model caches")
@click.option("--json", "as_json", is_flag=True, help="one JSON array on stdout")
def list_cmd(dirs, recursive, hf_cache, ollama, lmstudio, no_caches, as_json) -> None:
    """GGUF files in folders, the Hugging Face cache, Ollama's store and LM Studio's models."""
    import dataclasses
    import json

    from toycards.inspect.discover import list_gguf

    def arg(values):
        return list(values) if values else ([] if no_caches else None)

    entries = list_gguf(list(dirs) or None, arg(hf_cache), arg(ollama), arg(lmstudio), recursive)
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(e) for e in entries], ensure_ascii=False, indent=1))
        return
    _list_table(entries)


def _list_table(entries) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from toycards.inspect.header import human_count, human_size

    width = None if sys.stdout.isatty() else 100_000  # a pipe gets whole names
    console = Console(width=width, markup=False, emoji=False)
    if not entries:
        console.print("no GGUF files found")
        return
    table = Table(
        "name", "source", "architecture", "size", "parameters", "tensor types", box=None, pad_edge=False
    )
    for e in entries:
        types = ", ".join(f"{t} ×{n}" for t, n in e.tensor_types.items())
        params = human_count(e.n_params).split(" ")[-1].strip("()") if e.n_params is not None else ""
        cells = (e.name, e.source, e.architecture or "", human_size(e.size), params, e.error or types)
        table.add_row(*(Text(_line(c)) for c in cells))
    console.print(table)
