"""The `toycards` command line (console script `toycards`, also `python -m toycards`: `console`).

Owns: the click group and its error policy (a message is printed terminal-safe: a file's string
in it cannot drive the terminal). The commands live one module per family: cards.py
(`check`, `fmt`, `render`), files.py (`describe`, `diff`, `list`), models.py (`gen`, `run`,
`eval`), chat.py (`chat`), serve.py (`serve`), train.py (`train`), library.py (`cards`), embed.py
(`embed`); each command is argument parsing, one library call, and output. What a model or card
argument names (a path, or a name) is resolve.py's one rule.
Leaves out: the work itself (every other sub-package).

Exit status: 0 ok; 1 the input is wrong (diagnostics or one line on stderr); 2 usage error
(click's); 3 an internal error (a bug: one line, the traceback with TOYCARDS_DEBUG=1).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import traceback

import click

from toycards.errors import ToycardsError
from toycards.version import __version__


class _Group(click.Group):
    """Turns every ToycardsError into its message (exit 1), any other exception into one line (exit 3)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except ToycardsError as e:
            from toycards.render.terminal import print_error

            print_error(e, sys.stderr)
            ctx.exit(1)
        except BrokenPipeError:  # `toycards render … | head`
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(1)
        except Exception as e:  # noqa: BLE001 - the one place that catches everything
            if os.environ.get("TOYCARDS_DEBUG"):
                traceback.print_exc(file=sys.stderr)
            from toycards.render.escape import terminal_safe

            detail = str(e).splitlines()[0] if str(e) else ""
            click.echo(
                terminal_safe(f"toycards: internal error: {type(e).__name__}: {detail}", newlines=False),
                err=True,
            )
            if not os.environ.get("TOYCARDS_DEBUG"):
                click.echo("  (a bug in toycards; TOYCARDS_DEBUG=1 shows the traceback)", err=True)
            ctx.exit(3)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="toycards")
def main() -> None:
    """Neural-network architectures as readable, checkable, runnable algorithm cards."""


def _add_commands() -> None:
    from toycards.cli.cards import check_cmd, fmt_cmd, render_cmd
    from toycards.cli.chat import chat_cmd
    from toycards.cli.embed import embed_cmd
    from toycards.cli.files import describe_cmd, diff_cmd, list_cmd
    from toycards.cli.library import cards_cmd
    from toycards.cli.models import eval_cmd, gen_cmd, run_cmd
    from toycards.cli.serve import serve_cmd
    from toycards.cli.train import train_cmd

    commands = (check_cmd, fmt_cmd, render_cmd, describe_cmd, diff_cmd, list_cmd, gen_cmd, run_cmd, eval_cmd)
    for cmd in (*commands, cards_cmd, chat_cmd, serve_cmd, train_cmd, embed_cmd):
        main.add_command(cmd)


_add_commands()


def console() -> None:
    """The console script and `python -m toycards`: `main`, then the interpreter's exit without a
    collection of every object the command left behind (`gc.freeze` takes them out of the
    collector's sight; buffers, files and atexit hooks close as ever). With torch imported those
    collections at exit are a wait the user sees after `toycards run` has printed its last token."""
    try:
        main()
    finally:
        gc.freeze()
