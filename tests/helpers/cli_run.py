"""Running `toycards ARGS…` in process for the CLI tests, and reading its one error line.

`cli(*args)` invokes the click group with CliRunner (exceptions propagate, so a bug fails the test
with its traceback); `one_error(result, code=1)` checks the exit status, that there is no
traceback, and returns the one line on stderr.
"""

from __future__ import annotations

from click.testing import CliRunner


def cli(*args: object):
    """`toycards ARGS…`, in process."""
    from toycards.cli import main

    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def one_error(result, code: int = 1) -> str:
    """The one line a failed command printed on stderr (no traceback), its exit status checked."""
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.stderr
    return lines[0]
