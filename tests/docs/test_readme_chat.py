"""The README's chat example, run as it reads, on the real SmolLM2-135M-Instruct file.

README.md's Commands block shows one turn piped into `toycards chat` on
SmolLM2-135M-Instruct.Q4_1.gguf. The line is found in README.md and split as a shell would split
it; the printf text becomes stdin and the file's name the cached file's path (tests/helpers/real_model.py:
skipped without the package registry, fetched under CI). The run must exit 0 with a reply on
stdout and nothing on stderr but the notes a run may print.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from real_model import smollm2_q4_1

README = Path(__file__).resolve().parents[2] / "README.md"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# what stderr may hold besides nothing: a note of the chat command, a native build's fallback line
KNOWN = re.compile(r"note: .+|toycards: .+ cannot be used \(.+\); the slower path runs instead")
ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}


def readme_chat() -> tuple[str, list[str]]:
    """(stdin, the toycards argv) of README.md's `printf '…' | toycards chat …` line."""
    lines = [
        line
        for line in README.read_text(encoding="utf-8").splitlines()
        if line.startswith("printf ") and "| toycards chat " in line
    ]
    assert len(lines) == 1, f"README.md should have one `printf … | toycards chat` line, has {len(lines)}"
    words = shlex.split(lines[0], comments=True)
    bar = words.index("|")
    printf, command = words[:bar], words[bar + 1 :]
    assert len(printf) == 2 and "%" not in printf[1], f"a printf of one plain text: {printf}"
    return re.sub(r"\\(.)", lambda m: ESCAPES[m.group(1)], printf[1]), command


def test_the_readme_pipes_one_turn_into_chat_on_the_smollm2_file():
    stdin, command = readme_chat()
    assert command[:2] == ["toycards", "chat"]
    assert command.count(FILE) == 1
    assert stdin.endswith("\n") and stdin.count("\n") == 1 and stdin.strip(), repr(stdin)


def test_the_readmes_chat_example_replies():
    stdin, command = readme_chat()
    path = str(smollm2_q4_1())
    argv = [sys.executable, "-m", "toycards", *(path if word == FILE else word for word in command[1:])]
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, encoding="utf-8", timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("\n") and done.stdout.strip(), repr(done.stdout)
    unknown = [line for line in done.stderr.splitlines() if not KNOWN.fullmatch(line)]
    assert not unknown, f"stderr: {unknown}"
