"""Benchmark: parse + check of the whole card library (`toycards/library/cards/*.card`).

Times, best of --repeat runs, in this process (the lark parser built once, as in a long-running
program): parse of every card, check of every parsed card, the canonical printer, and the
total; then `toycards check` on all cards in a fresh interpreter (start-up and imports
included), next to the bare import of the package as the floor. Per-card rows show where the
time goes (lines, parse ms, check ms, µs per line). Target: the library well under a second.

    .venv/bin/python bench/parse.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from toycards.lang.parse import parse  # noqa: E402
from toycards.lang.printer import render_card  # noqa: E402

CARDS = sorted((ROOT / "toycards" / "cards").glob("*.card"))


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    """Smallest wall time of `repeat` calls, in seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def checker() -> Callable | None:
    try:
        from toycards.checker import check
    except ImportError:
        return None
    return check


def in_process(repeat: int) -> None:
    texts = {p: p.read_text(encoding="utf-8") for p in CARDS}
    check = checker()
    parse(texts[CARDS[0]])  # build the lark parser once
    cards = {p: parse(t, file=str(p)) for p, t in texts.items()}
    if check:
        for c in cards.values():
            check(c)  # warm any caches (the prelude's signatures)
    print(f"{'card':<16}{'lines':>7}{'parse ms':>11}{'check ms':>11}{'µs/line':>10}")
    for p, t in texts.items():
        lines = t.count("\n")
        tp = best_of(repeat, lambda t=t, p=p: parse(t, file=str(p)))
        tc = best_of(repeat, lambda c=cards[p]: check(c)) if check else float("nan")
        print(f"{p.stem:<16}{lines:>7}{tp * 1e3:>11.2f}{tc * 1e3:>11.2f}{tp * 1e6 / max(lines, 1):>10.0f}")

    def all_parse():
        return [parse(t, file=str(p)) for p, t in texts.items()]

    def all_check():
        return [check(c) for c in cards.values()] if check else None

    def all_render():
        return [render_card(c) for c in cards.values()]

    tp, tc, tr = best_of(repeat, all_parse), best_of(repeat, all_check), best_of(repeat, all_render)
    n_lines = sum(t.count("\n") for t in texts.values())
    print(f"\nlibrary: {len(CARDS)} cards, {n_lines} lines (best of {repeat})")
    print(f"  parse         {tp * 1e3:8.1f} ms")
    print(f"  check         {tc * 1e3:8.1f} ms" + ("" if check else "  (no checker)"))
    print(f"  parse + check {(tp + tc) * 1e3:8.1f} ms   target: well under 1000 ms")
    print(f"  render_card   {tr * 1e3:8.1f} ms")


def fresh_process(repeat: int) -> None:
    def run(*args: str) -> None:
        subprocess.run([sys.executable, *args], cwd=ROOT, check=False, capture_output=True)

    floor = best_of(repeat, lambda: run("-c", "import toycards"))
    full = best_of(repeat, lambda: run("-m", "toycards", "check", *map(str, CARDS)))
    print(f"\nfresh process (best of {repeat})")
    print(f"  python -c 'import toycards'            {floor * 1e3:8.1f} ms")
    print(f"  python -m toycards check <library>     {full * 1e3:8.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    in_process(args.repeat)
    fresh_process(max(1, args.repeat // 2))


if __name__ == "__main__":
    main()
