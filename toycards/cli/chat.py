"""`toycards chat`: a conversation with a GGUF model through its chat template, and `run --chat`.

Owns: the command's arguments, its two modes and their output. On a terminal (stdin is one): a
`> ` prompt, each reply streamed, `/reset` (forget the conversation), `/exit` or Ctrl-D (leave),
Ctrl-C during a reply (stop it; the conversation keeps what was shown), Ctrl-C at the prompt
(leave, exit 130), and an error in a turn printed as one line before the next prompt. Otherwise
(a pipe or a file): one user turn per line, each reply printed on stdout followed by a newline
(`/reset` and `/exit` lines as on a terminal, empty lines skipped), and an error ends the command
(exit 1). `one_reply` is `toycards run --chat`: one user turn, its reply streamed.
Notes (a re-read conversation, a reply stopped at the model's context) go to stderr, one line each.
Leaves out: the conversation itself (models/chat.py); loading the model and the lines `run` also
prints (running.py's `load_model`, `say_greedy`, `native_code_ready`, `context_limit`).

A reply is printed as it comes: exactly to a pipe or a file; on a terminal with its control
characters spelled out (render/escape.py), since a file's token texts can hold any bytes, and an
escape sequence among them could retitle, clear or recolour the terminal.
"""

from __future__ import annotations

import sys

import click

from toycards.cli.options import card_option, device_option, run_target_option, threads_option, ubatch_option
from toycards.cli.running import (
    EXIT_INTERRUPTED,
    context_limit,
    ctx_option,
    load_model,
    native_code_ready,
    sampling_options,
    say_greedy,
)
from toycards.errors import ToycardsError
from toycards.render.escape import terminal_safe, to_terminal

COMMANDS = {"/reset": "forget the conversation (the system prompt stays)", "/exit": "leave (also Ctrl-D)"}


def _note(text: str) -> None:
    click.echo(terminal_safe(f"note: {text}", newlines=False), err=True)


def _say_recompute(model) -> None:
    """Say once, as a note line rather than a Python warning, that decoding reruns the sequence."""
    if model.RECOMPUTE:
        model._recompute_said = True
        _note(f"decoding recomputes the whole sequence at each step: {model.RECOMPUTE}")


def _stream(session, text: str, max_tokens: int) -> None:
    """Print the reply to `text` as it comes, then a newline (also when it stops early); a note
    where it stopped at the model's context. On a terminal, control characters are spelled out."""
    import numpy as np

    pieces = session.reply(text, max_tokens)
    shown = terminal_safe if to_terminal(sys.stdout) else str
    try:  # NumPy's warnings stay quiet: non-finite logits stop the reply with one line instead
        with np.errstate(all="ignore"):
            for piece in pieces:
                sys.stdout.write(shown(piece))
                sys.stdout.flush()
    finally:
        pieces.close()  # (a reply stopped by Ctrl-C joins the conversation as far as it went)
        sys.stdout.write("\n")
        sys.stdout.flush()
    if session.stop_reason == "context":
        limit = session.n_ctx
        click.echo(
            f"stopped at the context length {limit} ({session.model.context_length.hint(limit)})", err=True
        )


def _session(model, system, temperature, top_k, top_p, seed, n_ctx, kv_type: str = "f32"):
    from toycards.models.chat import ChatSession

    return ChatSession(
        model, system, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, n_ctx=n_ctx,
        kv_type=kv_type, on_note=_note,
    )  # fmt: skip


def one_reply(model, prompt: str, system: str | None, max_tokens: int, **sampling) -> None:
    """`toycards run --chat`: `prompt` as the one user turn; the reply streamed (exit 130 on Ctrl-C)."""
    session = _session(model, system, **sampling)
    try:
        _stream(session, prompt, max_tokens)
    except KeyboardInterrupt:
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None


def _command(line: str) -> str | None:
    """The chat command a line is (`/reset`, `/exit`), or None for a user turn."""
    word = line.strip()
    return word if word in COMMANDS else None


def _script(session, max_tokens: int) -> None:
    """One user turn per line of stdin, each reply on stdout followed by a newline."""
    for line in sys.stdin:
        line = line.rstrip("\r\n")
        command = _command(line)
        if command == "/exit":
            return
        if command == "/reset":
            session.reset()
        elif line.strip():
            _stream(session, line, max_tokens)


def _interactive(session, max_tokens: int) -> None:
    """The prompt loop on a terminal."""
    from toycards.render.terminal import print_error

    try:  # line editing and history for input(), where Python has them
        import readline  # noqa: F401
    except ImportError:
        pass
    help_line = ", ".join(f"{name} {what}" for name, what in COMMANDS.items())
    click.echo(f"{help_line}; Ctrl-C stops a reply", err=True)
    while True:
        try:
            line = input("> ")
        except EOFError:  # Ctrl-D
            sys.stdout.write("\n")
            return
        except KeyboardInterrupt:
            sys.stdout.write("\n")
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
        command = _command(line)
        if command == "/exit":
            return
        if command == "/reset":
            session.reset()
            click.echo("(the conversation is empty)", err=True)
            continue
        if not line.strip():
            continue
        try:
            _stream(session, line, max_tokens)
        except KeyboardInterrupt:
            continue  # the reply stops here; its newline is written
        except ToycardsError as e:
            print_error(e, sys.stderr)


@click.command("chat")
@click.argument("model")
@click.option(
    "--system", default=None, help="The system prompt: what the model is told before the conversation."
)
@click.option(
    "-n",
    "--max-tokens",
    "max_tokens",
    type=click.IntRange(1, 100_000),
    default=512,
    show_default=True,
    help="The most tokens of one reply.",
)
@sampling_options
@ctx_option
@run_target_option
@threads_option
@ubatch_option
@device_option
@card_option
def chat_cmd(
    model: str,
    system: str | None,
    max_tokens: int,
    temperature: float,
    top_k,
    top_p,
    seed,
    ctx: int | None,
    target: str,
    device,
    card,
) -> None:
    """Chat with MODEL.gguf through its chat template, the conversation kept in one KV cache.

    On a terminal: a `> ` prompt; /reset forgets the conversation, /exit or Ctrl-D leaves, Ctrl-C
    stops a reply (at the prompt it leaves, exit 130). From a pipe or a file: one user turn per
    line, each reply printed followed by a newline.

    A reply stops at the context length (--ctx) with one line on stderr; a turn that leaves no
    room for a reply is refused. Exit status 1 when the file has no chat template or cannot be
    run, and (from a pipe) when a turn fails, as when the conversation no longer fits the context;
    130 after Ctrl-C at the prompt (or from a pipe).
    """
    say_greedy(temperature, top_k, top_p)
    try:
        m = load_model(model, target, card, device)
        native_code_ready(target)  # (its build line, if any, before the prompt)
        _say_recompute(m)
        session = _session(m, system, temperature, top_k, top_p, seed, context_limit(m, ctx))
        if hasattr(sys.stdin, "reconfigure"):  # bytes that are not text: the tokenizer's error line
            sys.stdin.reconfigure(errors="surrogateescape")
        if sys.stdin.isatty():
            _interactive(session, max_tokens)
        else:
            _script(session, max_tokens)
    except KeyboardInterrupt:
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
