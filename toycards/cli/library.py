"""The `toycards cards` command: the cards a name stands for, and the files each is chosen for.

Owns: the listing, one line per card (a table on stdout, or `--json`): its name, the llama.cpp
architectures whose files get it (`general.architecture`; a variant with the tensor that picks
it, e.g. `llama (with blk.0.ffn_gate_exps.weight)`), where it comes from (`TOYCARDS_CARDS` or
the library) and its file. The cards of TOYCARDS_CARDS come first, as a name means theirs first
(resolve.py); the prelude and the paper's cards are read by no file.
Leaves out: which card a file gets (library.card_for_file), reading the cards.
"""

from __future__ import annotations

import sys

import click


def _rows() -> list[dict]:
    from toycards.library import CARDS, card_architectures, card_names, user_cards

    rows = [
        {"name": name, "architectures": [{"architecture": name, "with_tensor": ""}],
         "source": "TOYCARDS_CARDS", "file": str(path)}
        for name, path in user_cards().items()
    ]  # fmt: skip
    for name in card_names():
        archs = [{"architecture": a, "with_tensor": t} for a, t in card_architectures(name)]
        rows.append(
            {"name": name, "architectures": archs, "source": "library", "file": str(CARDS / f"{name}.card")}
        )
    return rows


def _architectures_text(archs: list[dict]) -> str:
    """`llama`, `llama (with blk.0.ffn_gate_exps.weight)`, or `-` for a card no file gets."""
    parts = [a["architecture"] + (f" (with {a['with_tensor']})" if a["with_tensor"] else "") for a in archs]
    return ", ".join(parts) or "-"


@click.command("cards")
@click.option("--json", "as_json", is_flag=True, help="one JSON array on stdout")
def cards_cmd(as_json: bool) -> None:
    """The cards a name stands for (`toycards render llama`, `--card gpt2`): TOYCARDS_CARDS's, then the
    library's, each with the architectures whose GGUF files it reads and its file."""
    import json

    rows = _rows()
    if as_json:
        click.echo(json.dumps(rows, ensure_ascii=False, indent=1))
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from toycards.render.escape import terminal_safe

    console = Console(width=None if sys.stdout.isatty() else 100_000, markup=False, emoji=False)
    table = Table("name", "architectures", "source", "file", box=None, pad_edge=False)
    for row in rows:
        cells = (row["name"], _architectures_text(row["architectures"]), row["source"], row["file"])
        table.add_row(*(Text(terminal_safe(c, newlines=False)) for c in cells))
    console.print(table)
