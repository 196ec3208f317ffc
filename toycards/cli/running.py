"""What the commands that run a model share: loading it, its context length, Ctrl-C, stdin.

Owns: `load_model` (a GGUF file by path or by name, with its own card or `--card`; an embedding
model refused where a command needs logits), `ctx_option` and `context_limit` (the context
`--ctx` asks for, checked against the model's), `sampling_options` (run's and chat's),
`native_code_ready` (the native code built before any text is printed), `interruptible_command`
(Ctrl-C as one line and exit 130), `text_or_stdin` (`-p -`) and `say_greedy` (the warning for
sampling options at temperature 0). Used by run and eval (models.py), chat (chat.py), serve
(serve.py) and embed (embed.py).
Leaves out: the commands themselves.
"""

from __future__ import annotations

import functools
import sys

import click

from toycards.cli.options import given_card
from toycards.errors import ToycardsError

EXIT_INTERRUPTED = 130  # the shell's convention for a command stopped by Ctrl-C

ctx_option = click.option(  # run, eval and chat
    "--ctx",
    "ctx",
    type=click.IntRange(1),
    default=None,
    metavar="N",
    help="The context length in tokens (run, chat: the prompt and text together; eval: the window)."
    " Default: the model's trained context (eval: at most 2048). Past it: refused for learned"
    " positions, a warning for RoPE.",
)


def sampling_options(command):
    """`--temperature`, `--top-k`, `--top-p` and `--seed`, as run and chat take them."""
    for option in reversed(
        (
            click.option(
                "--temperature",
                type=click.FloatRange(0.0),
                default=0.0,
                show_default=True,
                help="0 is greedy.",
            ),
            click.option("--top-k", "top_k", type=click.IntRange(1), default=None),
            click.option("--top-p", "top_p", type=click.FloatRange(0.0, 1.0, min_open=True), default=None),
            click.option(
                "--seed", type=int, default=None, help="Seed of the draws (chat: of the whole conversation)."
            ),
        )
    ):
        command = option(command)
    return command


def interruptible_command(command):
    """`command` where Ctrl-C, whenever it comes (loading, generating, scoring), is one line on
    stderr and exit 130, as in `train`, rather than click's "Aborted!" and exit 1."""

    @functools.wraps(command)
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None

    return run


def text_or_stdin(text: str, option: str) -> str:
    """`text`, or for `-` all of stdin as UTF-8 text, as `check -` and `fmt -` read a card."""
    if text != "-":
        return text
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ToycardsError(f"{option} -: stdin is not UTF-8 text (byte {e.start})") from None


def say_greedy(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """One line on stderr where --top-k or --top-p is given at temperature 0, which they do not
    change: decoding stays greedy (deterministic), as the default temperature says."""
    given = [f"--{name} {value}" for name, value in (("top-k", top_k), ("top-p", top_p)) if value is not None]
    if temperature == 0 and given:
        click.echo(
            f"warning: {' and '.join(given)} {'does' if len(given) == 1 else 'do'} nothing at temperature 0:"
            " decoding is greedy; add --temperature T (0.8 is llama.cpp's default) to sample",
            err=True,
        )


def native_code_ready(target: str) -> None:
    """Build (once for this machine) and load the native code that decoding calls before any text
    is printed: on a terminal, the line on stderr that says it is building would otherwise land
    in the middle of the generated text."""
    if target == "torch":
        from toycards import engine

        engine.native()  # the C++ glue, with the C kernels it binds
    elif target == "numpy":
        from toycards import engine

        engine.library()


def context_limit(m, ctx: int | None) -> int | None:
    """The context length `--ctx` asks for (None: the model's), checked against the model's
    positions; a warning line on stderr past the trained context of a RoPE model."""
    limit, warning = m.context_length.resolve(ctx, "--ctx")
    if warning is not None:
        click.echo(warning, err=True)
    return limit


def load_model(
    model: str, target: str, card: str | None, device: str | None = None, embeddings: bool = False
):
    """The model of a GGUF file, with its own card or with `--card FILE` bound to its weights
    (`--device`: the torch target's, checked before the file is read). A model whose card outputs
    embeddings (BERT) is refused in one line naming the command, unless `embeddings` (`embed`): run,
    eval, chat and serve need a distribution over the vocabulary."""
    from toycards.cli.resolve import resolve_model
    from toycards.library import read_card_file
    from toycards.models.load import load, torch_device

    model = str(resolve_model(model))  # a path, or a name `toycards list` shows
    if device is not None:
        if target != "torch":
            raise ToycardsError(
                f"--device {device}: only the torch target runs on a device (add --target torch)"
            )
        device = torch_device(device, "--device")
    given = given_card(card)
    if given is not None:
        m = load(read_card_file(given), weights=model, target=target, device=device)
    else:
        m = load(model, target=target, device=device)
    command = click.get_current_context(silent=True)
    if command is not None and "toycards.ubatch" in command.meta:
        m.ubatch = command.meta["toycards.ubatch"]
    if not embeddings:
        m.require_vocabulary_output(f"toycards {command.info_name}" if command else "this command")
    return m
