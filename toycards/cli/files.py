"""The commands that start from files a user already has: `describe`, `diff` and `list`.

Owns: argument parsing and terminal output of `toycards describe` (rich view, or any of the
formats of inspect/formats.py; or the file's reports of inspect/listing.py), `toycards diff` (text or JSON; also git's external diff driver
with its seven arguments) and `toycards list`; each is one library call (inspect/describe.py,
inspect/diff.py, inspect/discover.py) plus printing. The commands are plain click commands that `toycards.cli` adds to
its group: `main.add_command(describe_cmd)`, `diff_cmd`, `list_cmd`. A model argument is a path or a
name that `list` shows, a card argument a path or a card name (resolve.py).
Leaves out: the work itself (the library modules above), the other commands (cards.py, models.py).

Text from a file reaches the terminal only through render/escape.py's `terminal_safe`, and rich
only as `Text`, never as markup: the terminal view, the text format, notices, problems, tensor
reports, diff reports and list tables always; the card and Markdown formats when stdout is a
terminal (JSON, LaTeX, HTML and SVG are escaped by their own writers).

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


DESCRIBE_FORMATS = ("terminal", "card", "text", "json", "markdown", "latex", "html", "svg")


def _line(text: str) -> str:
    """One line of a file's text, safe for the terminal."""
    return terminal_safe(text, newlines=False)


_PROBLEM_STYLES = {"error": "red", "warning": "yellow", "note": "dim"}


def _describe_terminal(card, every_problem: bool, whole_template: bool, cost=None) -> None:
    """The rich view: header table (and the rows of `cost`, inspect/cost.py, with --flops), notice,
    problems (the first ones and a count, unless `every_problem`), the chat template (its start,
    unless `whole_template`), then the highlighted card."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from toycards.inspect.formats import described_rows, problem_lines, template_excerpt, template_heading
    from toycards.render.terminal import highlight_card

    console = Console(highlight=False, soft_wrap=True, markup=False, emoji=False)
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold cyan", justify="right", no_wrap=True)
    table.add_column()
    for label, value in described_rows(card) + (cost.rows() if cost is not None else []):
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
    "json, markdown, latex, html (with the diagram) or svg (a block diagram of the bound card).",
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
@click.option(
    "--quant-map",
    "quant_map",
    is_flag=True,
    help="Print the quant map instead of the card: each tensor role's type in each layer, bits "
    "per weight, and the llama.cpp mix (Q4_K_M, …) the types follow.",
)
@click.option(
    "--tensors",
    "tensors",
    is_flag=True,
    help="Print every tensor (name, type, shape, elements, bytes, file offset) instead of the card.",
)
@click.option(
    "--metadata", "metadata", is_flag=True, help="Print every metadata key and value instead of the card."
)
@click.option(
    "--flops",
    is_flag=True,
    help="Also print the parameter count and the matrix products' FLOPs of a prefill and of one "
    "decoding step, as numbers and in the card's hyperparameters (MODEL may be a card: CARD --flops).",
)
@click.option(
    "--ctx",
    default=None,
    metavar="N[,N…]",
    help="With --flops: the prefill's tokens and the decoding step's context (default: the trained "
    "context length, else 2048). With --memory: the contexts, comma-separated, max the file's "
    "context length (default 2048,8192,32768,max).",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="NAME=VALUE",
    help="With --flops on a card: a hyperparameter's value (repeatable).",
)
@click.option(
    "--memory",
    is_flag=True,
    help="Print the memory the file takes at each --ctx instead of the card: weights, KV cache or "
    "decoder state, a prefill's activations (an estimate), for toycards and for llama.cpp.",
)
@click.option(
    "--kv-cache",
    "kv_type",
    type=click.Choice(["f16", "f32", "q8_0"]),
    default=None,
    help="With --memory: what both caches keep keys and values as (default: each one's own, "
    "toycards f32, llama.cpp f16; toycards keeps no q8_0 cache).",
)
@click.option(
    "--batch", type=click.IntRange(1), default=1, show_default=True, help="With --memory: sequences at once."
)
@click.option("--explain", is_flag=True, help="With --memory: also the formulas, in the card's names.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="Write to this file (atomically, replacing it) instead of stdout; never over the GGUF file "
    "or its card. `--format html -o report.html` writes the report page.",
)
@card_option
def describe_cmd(
    model: str,
    fmt: str | None,
    check_tensors: bool,
    every_problem: bool,
    whole_template: bool,
    quant_map: bool,
    tensors: bool,
    metadata: bool,
    flops: bool,
    ctx: str | None,
    sets: tuple[str, ...],
    memory: bool,
    kv_type: str | None,
    batch: int,
    explain: bool,
    output: str | None,
    card: str | None,
) -> None:
    """The bound card of a GGUF file: concrete hyperparameters, every tensor checked, a header.

    The card is `--card FILE`, else the one embedded in the file, else ARCH.card from a folder of
    TOYCARDS_CARDS, else the library's. Exit status 1 when the file is not valid GGUF or does not
    match its card (the problems are listed on stderr; the first 10 and a count, or all with
    --all); an architecture without a card gives a declaration-only card and exit 0. With
    --check-tensors, also 1 when a tensor holds NaN or Inf; stdout stays the format's output.
    The terminal and text views show the start of the chat template (--show-template: all of it).
    With --metadata, --tensors or --quant-map, those reports of the file are printed instead of
    the card (together in that order; as terminal, text, json or html), and the card is not bound.
    With --memory, the memory table instead of the card (json: the figures under "memory").
    The html format is a report page: header, card, diagram, memory, FLOPs, quant map, tokenizer,
    chat templates, tensors and metadata. With -o FILE the output goes to FILE (default format:
    text), never over the model file or the card.
    """
    from toycards.cli.resolve import resolve_model
    from toycards.inspect.describe import describe
    from toycards.inspect.formats import problem_lines, render_described

    views = [flag for flag, on in (("--memory", memory), ("--flops", flops)) if on]
    views += ["--metadata, --tensors or --quant-map"] * (metadata or tensors or quant_map)
    if len(views) > 1:
        raise ToycardsError(f"{model}: {' and '.join(views)} are separate views; ask for one at a time")
    if not flops and (sets or (ctx is not None and not memory)):
        raise ToycardsError(f"{model}: --ctx and --set go with --flops (--ctx also with --memory)")
    if not memory and (kv_type is not None or batch != 1 or explain):
        raise ToycardsError(f"{model}: --kv-cache, --batch and --explain go with --memory")
    if output is not None:
        if fmt == "terminal":
            raise click.UsageError("-o writes a file: give a --format other than terminal (such as text)")
        fmt = fmt or "text"
    if flops and _describe_card_cost(model, fmt, _one_ctx(ctx, flops), sets, output):
        return
    model = str(resolve_model(model))
    asked = (("metadata", metadata), ("tensors", tensors), ("quant_map", quant_map))
    reports = [name for name, on in asked if on]
    if reports:
        _describe_reports(model, reports, fmt or ("terminal" if sys.stdout.isatty() else "text"), output)
        sys.exit(0 if not check_tensors or _check_tensors(model) else 1)
    card = describe(model, given_card(card))
    if memory:
        _describe_memory(card, fmt, ctx, kv_type, batch, explain, output)
        sys.exit(0 if not check_tensors or _check_tensors(model) else 1)
    cost = _file_cost(card, fmt, _one_ctx(ctx, flops)) if flops else None
    fmt = fmt or ("terminal" if sys.stdout.isatty() else "text")
    if fmt == "terminal":
        _describe_terminal(card, every_problem, whole_template, cost)
    else:
        out = render_described(card, fmt, every_problem, whole_template, cost=cost)  # text: terminal-safe
        if output is None and fmt in ("card", "markdown") and to_terminal(sys.stdout):
            out = terminal_safe(out)
        _emit(out, output, model, card.card_path)
        if card.notice:
            click.echo(f"notice: {_line(card.notice)}", err=True)
        for _, line in problem_lines(card, every_problem):
            click.echo(_line(line), err=True)
    finite = _check_tensors(model) if check_tensors else True
    sys.exit(1 if card.errors or not finite else 0)


def _describe_card_cost(
    arg: str, fmt: str | None, ctx: int | None, sets: tuple[str, ...], output: str | None = None
) -> bool:
    """`describe CARD --flops`: the cost of a card (a path or a name) without a file, printed; False
    when `arg` names a GGUF file instead."""
    from toycards.cli.resolve import is_model_file, resolve_input

    path = resolve_input(arg)
    if is_model_file(path):
        if sets:
            raise ToycardsError(f"{arg}: --set goes with a card; a GGUF file's hyperparameters come from it")
        return False
    import json

    from toycards.inspect.cost import card_cost, cost_text
    from toycards.library import CARDS, library_card, read_card_file
    from toycards.models.start import parse_sets

    fmt = fmt or ("terminal" if sys.stdout.isatty() else "text")
    if fmt not in ("terminal", "text", "json"):
        raise ToycardsError(f"{arg}: --flops on a card prints as terminal, text or json, not {fmt}")
    shipped = path.resolve().parent == CARDS.resolve()
    cost = card_cost(library_card(path.stem) if shipped else read_card_file(path), parse_sets(sets), ctx)
    if fmt == "json":
        _emit(json.dumps(cost.to_json(), ensure_ascii=False, indent=1) + "\n", output, path)
    else:
        _emit(terminal_safe(cost_text(cost)), output, path)
    return True


def _one_ctx(ctx: str | None, flops: bool) -> int | None:
    """`--ctx` as --flops takes it: one number of tokens."""
    if ctx is None or not flops:
        return None
    if not ctx.strip().isdigit() or int(ctx) < 1:
        raise click.BadParameter(f"{ctx!r}: --flops takes one number of tokens", param_hint="--ctx")
    return int(ctx)


def _describe_memory(
    card, fmt: str | None, ctx: str | None, kv_type: str | None, batch: int, explain: bool, output: str | None
):
    """`describe FILE --memory`: the memory table (inspect/memory.py), or the JSON with its figures."""
    from toycards.inspect.formats import render_described
    from toycards.inspect.memory import memory_report, parse_contexts

    fmt = fmt or ("terminal" if sys.stdout.isatty() else "text")
    if fmt not in ("terminal", "text", "json"):
        raise ToycardsError(f"{card.file}: --memory prints as terminal, text or json, not {fmt}")
    report = memory_report(card, parse_contexts(ctx, card), kv_type, batch)
    if fmt == "json":
        _emit(render_described(card, "json", memory=report), output, card.file, card.card_path)
    else:
        _emit(terminal_safe(report.text(explain)), output, card.file, card.card_path)


def _file_cost(card, fmt: str | None, ctx: int | None):
    """`describe FILE --flops`: the cost of the bound card (inspect/cost.py), for the views that show it."""
    from toycards.inspect.cost import described_cost

    if fmt not in (None, "terminal", "text", "json"):
        raise ToycardsError(f"{card.file}: --flops prints as terminal, text or json, not {fmt}")
    return described_cost(card, ctx)


def _emit(text: str, output: str | None, *inputs: str | None) -> None:
    """`text` on stdout, or with `-o` into the file `output` as `render -o` and `gen -o` write
    (fileio.write_atomic: all of it or nothing, replacing what was there) with one line on stderr
    saying so; never over one of `inputs` (the model file, the card)."""
    if output is None:
        click.echo(text, nl=False)
        return
    from pathlib import Path

    from toycards.fileio import write_atomic
    from toycards.inspect.header import human_size

    target = Path(output)
    for path in inputs:
        if path and target.exists() and target.resolve() == Path(path).resolve():
            raise ToycardsError(f"{output}: is an input of describe; refusing to overwrite it")
    data = text.encode("utf-8")
    write_atomic(output, data)
    click.echo(_line(f"wrote {output} ({human_size(len(data))})"), err=True)


def _check_tensors(model: str) -> bool:
    """Stream every tensor of the file, print the report on stderr; True when all are finite."""
    sys.stdout.flush()  # the format's output first, then the report
    from toycards.gguf.finite import check_tensors

    report = check_tensors(model)
    for line in report.lines():
        click.echo(_line(line), err=True)
    return report.ok


def _describe_reports(model: str, reports: list[str], fmt: str, output: str | None = None) -> None:
    """`describe --metadata/--tensors/--quant-map`: those reports of the file instead of the card
    (inspect/listing.py, inspect/quantmap.py)."""
    from pathlib import Path

    from toycards.gguf.reader import open_gguf
    from toycards.inspect import listing

    if fmt not in ("terminal", "text", "json", "html"):
        raise click.UsageError(
            f"--metadata, --tensors and --quant-map print as terminal, text, json or html, not {fmt}"
        )
    with open_gguf(model) as f:
        if fmt == "terminal":
            from rich.console import Console

            console = Console(highlight=False, soft_wrap=True, markup=False, emoji=False)
            for part in listing.reports_rich(f, reports):
                console.print(part)
        elif fmt == "json":
            _emit(listing.dumps({"file": model} | listing.reports_json(f, reports)), output, model)
        elif fmt == "html":
            _emit(listing.reports_html(f, reports, Path(model).name), output, model)
        else:
            _emit(listing.reports_text(f, reports), output, model)


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
