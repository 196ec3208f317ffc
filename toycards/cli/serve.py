"""The `toycards serve` command: one GGUF model behind an OpenAI-compatible HTTP API.

Owns: the command's options, the checks that need no server (the `serve` extra installed, `--ctx`
against the model's context length), the order of start-up (bind the address, load the model,
listen, one line on stderr with the URL), and the warning for an address other machines can reach.
Leaves out: the server itself (toycards/serve/).
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from toycards.cli.options import card_option, device_option, threads_option, ubatch_option
from toycards.errors import ToycardsError

DEFAULT_CTX = 4096  # tokens, for a card that names no context length


def _need_extra() -> None:
    try:
        import anyio  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise ToycardsError("toycards serve needs: pip install 'toycards[serve]'") from None


def _context(model, ctx: int | None) -> int:
    """The server's context: `--ctx`, else the model's trained context length, else DEFAULT_CTX
    (`ContextLength.resolve`: past the trained length only where positions go on, with a warning)."""
    from toycards.render.escape import terminal_safe

    limit, warning = model.context_length.resolve(ctx, "--ctx")
    if warning is not None:
        click.echo(terminal_safe(warning, newlines=False), err=True)
    return limit if limit is not None else DEFAULT_CTX


@click.command("serve")
@click.argument("model")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="0: any free port."
)
@click.option("--target", type=click.Choice(["numpy", "torch"]), default="numpy", show_default=True)
@threads_option
@ubatch_option
@device_option
@card_option
@click.option("--ctx", type=click.IntRange(1), default=None,
              help="Tokens of prompt and reply together [default: the model's trained context length].")  # fmt: skip
@click.option("--max-tokens-limit", "max_tokens_limit", type=click.IntRange(1), default=4096, show_default=True,
              help="The most tokens one reply may have, whatever a request asks.")  # fmt: skip
@click.option("--parallel", type=click.IntRange(1, 256), default=4, show_default=True,
              help="Replies generated at once, in turns of one token each; more requests wait in order.")  # fmt: skip
@click.option("--max-waiting", "max_waiting", type=click.IntRange(0), default=64, show_default=True,
              help="Requests that may wait for a turn; one more is answered 503.")  # fmt: skip
@click.option(
    "--alias", default=None, metavar="NAME", help="The model's id in the API [default: the file's stem]."
)
@click.option("-v", "--verbose", is_flag=True, help="uvicorn's log, one line per request.")
def serve_cmd(model: str, host: str, port: int, target: str, device, card, ctx, max_tokens_limit: int,
              parallel: int, max_waiting: int, alias, verbose: bool) -> None:  # fmt: skip
    """Serve MODEL.gguf over HTTP with OpenAI's API (/v1/completions, /v1/chat/completions,
    /v1/models, /health) until Ctrl-C or SIGTERM, which let the replies in progress finish.

    The server has no authentication: keep it on a loopback address (the default), or put it
    behind a proxy that checks who connects.
    """
    _need_extra()
    from toycards.render.escape import terminal_safe
    from toycards.serve.server import bind, exposure_warning, serve, url_of

    warning = exposure_warning(host)
    if warning is not None:
        click.echo(terminal_safe(warning, newlines=False), err=True)
    sock = bind(host, port)
    try:
        try:
            served = _served(model, target, card, device, ctx, max_tokens_limit, parallel, max_waiting, alias)
            served.loopback = warning is None
        except KeyboardInterrupt:  # Ctrl-C before serving: interrupted, the shell's 130 (after: a stop, 0)
            raise click.exceptions.Exit(130) from None

        def ready() -> None:
            line = (
                f"toycards serve: {served.model_id} at {url_of(sock)} (context {served.limits.ctx} tokens,"
                f" {target} target, {parallel} at once); Ctrl-C stops"
            )
            click.echo(terminal_safe(line, newlines=False), err=True)

        serve(served, sock, verbose, on_ready=ready)
    finally:
        sock.close()


def _served(model: str, target: str, card, device, ctx, max_tokens_limit: int, parallel: int,
            max_waiting: int, alias):  # fmt: skip
    """The loaded model, its id, limits and scheduler (toycards.serve.app.Served)."""
    from toycards.cli.running import load_model
    from toycards.serve.app import Served
    from toycards.serve.protocol import Limits
    from toycards.serve.scheduler import Scheduler

    m = load_model(model, target, card, device)
    if m.tokenizer is None:
        raise ToycardsError(
            f"{model}: the file carries no vocabulary (tokenizer.ggml.*); it cannot be served"
        )
    limits = Limits(ctx=_context(m, ctx), max_tokens=max_tokens_limit)
    scheduler = Scheduler(m, parallel, max_waiting)
    return Served(m, alias or Path(model).stem, limits, scheduler, int(os.path.getmtime(model)))
