"""Regenerate the golden files of generated code: `tests/golden/{card}_{target}.py`.

Run after any change to codegen, the runtime API it calls, or a library card, then review the
diff like source (`git diff tests/golden`): the golden files are what `toycards gen` prints for
the library's GPT-2 and Llama cards. `tests/codegen/test_generated_code.py` fails until they match.

    .venv/bin/python scripts/regen_golden.py          # rewrite the files
    .venv/bin/python scripts/regen_golden.py --check  # exit 1 if any is stale (CI)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "tests" / "golden"
CARDS = ("gpt2", "llama")
TARGETS = ("torch", "numpy")


def golden_sources() -> dict[Path, str]:
    """Each golden file's path and the source it must hold."""
    from toycards.codegen import generate_source
    from toycards.library import library_card

    return {
        GOLDEN_DIR / f"{card}_{target}.py": generate_source(library_card(card), target)
        for card in CARDS
        for target in TARGETS
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report stale files, write nothing")
    args = parser.parse_args(argv)
    stale = []
    for path, source in golden_sources().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == source:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source, encoding="utf-8", newline="\n")
    verb = "stale" if args.check else "rewrote"
    for path in stale:
        print(f"{verb}: {path.relative_to(GOLDEN_DIR.parent.parent)}")
    if not stale:
        print("golden files are up to date")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
