"""The commands that turn cards and GGUF files into running code: `gen`, `run` and `eval`.

Owns: argument parsing and output of `toycards gen` (a generated module to stdout or, written
atomically, to a file), `toycards run` (streamed text generation, held to the context length:
`--ctx`; `--chat` is chat.py's `one_reply`) and `toycards eval` (perplexity in sliding windows:
a summary, a per-token TSV table or JSON, and a progress line on a terminal); each is one
library call (codegen, loader, evaluate) plus printing. `toycards.cli` adds them to its group.
In `run` and `eval`, `-p -` reads the text from stdin, and Ctrl-C is one line and exit 130
(`interruptible_command`); `run` says when --top-k or --top-p is given to greedy decoding, and has the
native code built before it prints (`native_code_ready`).
What a file or a card says reaches the terminal terminal-safe (render/escape.py): a generated
module shown on a terminal, notes; `eval` escapes token texts (`tsv_text`); `run`'s
generated text is the model's output and is printed as it comes.
Leaves out: the work itself, the card-file and GGUF-inspection commands (cards.py, files.py).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from toycards.cli.options import (
    card_option,
    device_option,
    given_card,
    run_target_option,
    threads_option,
    ubatch_option,
)
from toycards.cli.running import (
    context_limit,
    ctx_option,
    interruptible_command,
    load_model,
    native_code_ready,
    sampling_options,
    say_greedy,
    text_or_stdin,
)
from toycards.errors import ToycardsError, visible
from toycards.fileio import write_atomic
from toycards.render.escape import terminal_safe, to_terminal


def _checked(card) -> None:
    """Raise the checker's errors for `card`, against its own file and lines."""
    from toycards.checker import check

    errors = [d for d in check(card) if d.severity == "error"]
    if errors:
        raise ToycardsError.from_diagnostics(errors, {card.main.span.file: card.source})


def _card_or_file(source: str, given: str | None):
    """The card to generate from: a card file, or the card of a GGUF file (`given`, else the
    file's own), checked, and checked to fit the file."""
    from toycards.cli.resolve import is_model_file

    if not is_model_file(source):
        if given is not None:
            raise click.UsageError("--card goes with a GGUF file: gen MODEL.gguf --card FILE")
        from toycards.lang.parse import parse

        card = parse(Path(source))
        _checked(card)
        return card
    from toycards.gguf.reader import open_gguf
    from toycards.models.load import card_for_file, check_fits

    with open_gguf(source) as f:
        card = card_for_file(f, given)
        _checked(card)
        check_fits(card, f)
    return card


def _refuse_overwriting(output: str, *inputs: str | None) -> None:
    for path in inputs:
        if path is not None and Path(output).exists() and Path(output).resolve() == Path(path).resolve():
            raise ToycardsError(f"{output}: is an input; refusing to overwrite it with generated code")


@click.command("gen")
@click.argument("source")
@click.option("--target", type=click.Choice(["torch", "numpy"]), default="torch", show_default=True)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="Write the module here (atomically) instead of stdout.",
)
@card_option
def gen_cmd(source: str, target: str, output: str | None, card: str | None) -> None:
    """Generate a runnable module from CARD or from the card of MODEL.gguf (or `--card FILE`,
    checked to fit MODEL.gguf)."""
    from toycards.cli.resolve import resolve_input
    from toycards.codegen import generate_source

    given = given_card(card)
    source = str(resolve_input(source))  # a path, a card name or a model name
    if output is not None:
        _refuse_overwriting(output, source, given)
    card = _card_or_file(source, given)
    text = generate_source(card, target)
    if output is None:
        click.echo(terminal_safe(text) if to_terminal(sys.stdout) else text, nl=False)
        return
    write_atomic(output, text)
    click.echo(f"wrote {output} ({target}, {len(text.splitlines())} lines)", err=True)


@click.command("run")
@click.argument("model")
@click.option("-p", "--prompt", required=True, help="Text to continue (`-`: read it from stdin).")
@click.option(
    "--chat",
    is_flag=True,
    help="Send the prompt as a user turn through the file's chat template and print the reply"
    " (`toycards chat` keeps a conversation).",
)
@click.option("--system", default=None, help="With --chat: the system prompt.")
@click.option(
    "-n", "--max-tokens", "max_tokens", type=click.IntRange(0, 100_000), default=64, show_default=True
)
@sampling_options
@click.option(
    "--kv-cache",
    "kv_type",
    type=click.Choice(["f32", "f16"]),
    default="f32",
    show_default=True,
    help="What the KV cache keeps keys and values as: f16 (llama.cpp's default) halves its memory and"
    " the bytes each token reads; f32 decodes exactly as a full pass computes.",
)
@ctx_option
@run_target_option
@device_option
@card_option
@threads_option
@ubatch_option
@interruptible_command
def run_cmd(
    model: str,
    prompt: str,
    chat: bool,
    system: str | None,
    max_tokens: int,
    temperature: float,
    top_k,
    top_p,
    seed,
    kv_type: str,
    ctx: int | None,
    target: str,
    device,
    card,
) -> None:
    """Generate text from MODEL.gguf, streaming it as it comes.

    The prompt and the text together hold at most the context length (--ctx; default: the one
    the model was trained for): generation stops there with one line on stderr.
    Exit status 1 when the file cannot be run, when the prompt does not fit the context, or when
    its logits become NaN or infinite (`toycards describe MODEL.gguf --check-tensors` finds the
    tensors that hold them); 130 after Ctrl-C. With --chat the reply alone is printed, stopped
    at the template's end of turn.
    """
    import numpy as np

    if system is not None and not chat:
        raise click.UsageError("--system goes with --chat")
    if kv_type != "f32" and target == "reference":
        raise ToycardsError(
            f"--kv-cache {kv_type}: the reference target keeps no KV cache (add --target numpy or torch)"
        )
    prompt = text_or_stdin(prompt, "--prompt")
    say_greedy(temperature, top_k, top_p)
    m = load_model(model, target, card, device)
    native_code_ready(target)
    if m.RECOMPUTE:  # said once, as a note line rather than a Python warning
        m._recompute_said = True
        note = f"note: decoding recomputes the whole sequence at each step: {m.RECOMPUTE}"
        click.echo(terminal_safe(note, newlines=False), err=True)
    limit = context_limit(m, ctx)
    if chat:
        from toycards.cli.chat import one_reply

        sampling = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed}
        one_reply(m, prompt, system, max_tokens, n_ctx=limit, kv_type=kv_type, **sampling)
        return
    pieces = m.generate(  # a prompt that does not fit is refused here, before anything is printed
        prompt,
        max_tokens=max_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        kv_type=kv_type,
        n_ctx=limit,
    )
    sys.stdout.write(prompt)
    sys.stdout.flush()
    try:  # NumPy's warnings stay quiet: non-finite logits stop generation with one line instead
        with np.errstate(all="ignore"):
            for piece in pieces:
                sys.stdout.write(piece)
                sys.stdout.flush()
    finally:  # end the text's line, also before an error (non-finite logits) on stderr
        sys.stdout.write("\n")
        sys.stdout.flush()
    if pieces.stop_reason == "context":
        click.echo(f"stopped at the context length {limit} ({m.context_length.hint(limit)})", err=True)


@click.command("eval")
@click.argument("model")
@click.option("--text", "text_file", type=click.Path(dir_okay=False), help="Score the text of this file.")
@click.option("-p", "--prompt", help="Score this text (`-`: read it from stdin).")
@ctx_option
@click.option(
    "--stride",
    type=click.IntRange(1),
    default=None,
    metavar="S",
    help="Start a window every S tokens (default: half the window); each scores the tokens no earlier"
    " window scored.",
)
@click.option(
    "--per-token", "per_token", is_flag=True, help="Every scored token: a TSV table (the summary on stderr)."
)
@click.option(
    "--top-k",
    "top_k",
    type=click.IntRange(0),
    default=0,
    help="Also show the model's k likeliest tokens at each position (implies --per-token).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@run_target_option
@device_option
@card_option
@threads_option
@ubatch_option
@interruptible_command
def eval_cmd(
    model: str,
    text_file: str | None,
    prompt: str | None,
    ctx: int | None,
    stride: int | None,
    per_token: bool,
    top_k: int,
    as_json: bool,
    target: str,
    device,
    card,
) -> None:
    """Perplexity of a text under MODEL.gguf, scored in sliding windows.

    Windows of --ctx tokens start every --stride tokens; each scores, from the tokens before it
    in the window, every token no earlier window scored (the first: all but its first token).
    Prints the summary (tokens scored, mean NLL, perplexity, tokens/s); --per-token adds each
    token's log-probability; --json prints them as JSON. Exit status 130 after Ctrl-C.
    """
    from toycards.models.evaluate import default_context, evaluate

    if (text_file is None) == (prompt is None):
        raise click.UsageError("give exactly one of --text FILE or --prompt TEXT")
    if prompt is not None:
        prompt = text_or_stdin(prompt, "--prompt")
    if text_file is not None:
        try:
            prompt = Path(text_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ToycardsError(
                f"{text_file}: cannot read the text ({getattr(e, 'strerror', None) or e})"
            ) from None
    import numpy as np

    m = load_model(model, target, card, device)
    n_ctx = context_limit(m, ctx) if ctx is not None else default_context(m.context_length)
    if n_ctx < 2:
        said = f"--ctx {n_ctx}" if ctx is not None else f"the model's context length is {n_ctx}"
        raise ToycardsError(f"{said}: a window of one token scores nothing (--ctx N, at least 2)")
    if stride is not None and stride > n_ctx:
        raise ToycardsError(
            f"--stride {stride}: longer than the window (--ctx {n_ctx}); the tokens between windows"
            " would not be scored"
        )
    per_token = per_token or top_k > 0
    shown = _EvalProgress() if to_terminal(sys.stderr) else None
    try:
        with np.errstate(all="ignore"):  # non-finite logits are one error line, not NumPy's warnings
            result = evaluate(
                m, text=prompt, top_k=top_k, n_ctx=n_ctx, stride=stride, per_token=per_token, progress=shown
            )
    finally:
        if shown is not None:
            shown.close()
    if as_json:
        click.echo(json.dumps(result.to_json(), ensure_ascii=False, indent=1))
        return
    summary = (
        f"tokens {result.n_tokens}  mean NLL {result.mean_nll:.4f}  perplexity {result.perplexity:.3f}"
        f"  (ctx {result.n_ctx}, stride {result.stride}, {result.windows} window"
        f"{'s' if result.windows != 1 else ''}; {result.tokens_per_second:,.1f} tokens/s)"
    )
    if not per_token:
        click.echo(summary)
        return
    for line in _per_token_table(result, top_k):
        click.echo(line)
    click.echo(summary, err=True)  # stdout stays a table


class _EvalProgress:
    """eval's progress on stderr (a terminal): `done/total tokens  rate tokens/s`, one line kept
    up to date, cleared at the end."""

    def __init__(self) -> None:
        self.began = time.perf_counter()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        rate = done / max(time.perf_counter() - self.began, 1e-9)
        sys.stderr.write(f"\r{done:,}/{total:,} tokens  {rate:,.0f} tokens/s\x1b[K")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def _per_token_table(result, top_k: int):
    """The TSV lines of `eval --per-token`: a header, then position (0-based), token id, token text
    (tsv_text), log-probability, and the top-k alternatives' id, text and log-probability."""
    head = ["position", "id", "token", "logprob"]
    shown = len(result.tokens[0].top) if result.tokens else top_k  # at most the vocabulary's size
    for k in range(1, shown + 1):
        head += [f"top{k}_id", f"top{k}_token", f"top{k}_logprob"]
    yield "\t".join(head)
    for s in result.tokens:
        row = [str(s.position), str(s.id), tsv_text(s.piece), f"{s.logprob:.6f}"]
        for i, piece, lp in s.top:
            row += [str(i), tsv_text(piece), f"{lp:.6f}"]
        yield "\t".join(row)


def tsv_text(text: str) -> str:
    """A token's text as one TSV field, safe on a terminal: a backslash doubled, then tabs, line
    ends and every terminal or bidi control spelled as a Python escape (errors.visible).

    >>> print(tsv_text("a\\tb\\n\\\\x"))
    a\\tb\\n\\\\x
    """
    return visible(text.replace("\\", "\\\\"))
