"""Tokenizer speed: loading a vocabulary and encoding text, toycards against Hugging Face.

Run: `.venv/bin/python bench/tokenizer_speed.py [VOCAB_DIR]` (default ../shared/vocab). For each of
llama.cpp's test vocabularies it times loading the GGUF vocabulary and encoding a ~90 kB text
(llama.cpp's test strings, repeated), by toycards and by `transformers` (Rust `tokenizers`
where available) loaded from the same GGUF file, and prints the ratios. It also counts the
lines on which the two disagree (informational: llama.cpp, not Hugging Face, is our oracle).
toycards' byte-level BPE caches words, and the text repeats, as real text does.
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from pathlib import Path

from toycards.tokenizer.tokenizer import load_tokenizer

NAMES = ["gpt-2", "starcoder", "llama-spm", "phi-3"]


def _timed(fn, repeat: int = 3):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _encode_all(encode, lines: list[str]) -> list[list[int]]:
    return [encode(t) for t in lines]


def main(vocab_dir: Path) -> None:
    from transformers import AutoTokenizer
    from transformers.utils import logging

    logging.set_verbosity_error()
    print(
        f"{'vocab':<10} {'load ours':>10} {'load HF':>9} {'ratio':>6}   {'enc ours':>9} {'enc HF':>8} {'ratio':>6}  differ"
    )
    for name in NAMES:
        gguf_file = vocab_dir / f"ggml-vocab-{name}.gguf"
        texts = (
            gguf_file.with_suffix(".gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
        )
        lines = [t for t in texts if t] * 40
        load_ours, ours = _timed(partial(load_tokenizer, gguf_file))
        load_hf, hf = _timed(
            partial(AutoTokenizer.from_pretrained, str(vocab_dir), gguf_file=gguf_file.name), 1
        )
        enc_ours, ids_ours = _timed(partial(_encode_all, partial(ours.encode, add_bos=False), lines), 1)
        enc_hf, ids_hf = _timed(partial(_encode_all, partial(hf.encode, add_special_tokens=False), lines), 1)
        differ = sum(a != b for a, b in zip(ids_ours, ids_hf)) // 40
        print(
            f"{name:<10} {load_ours:>9.3f}s {load_hf:>8.3f}s {load_hf / load_ours:>5.1f}×   "
            f"{enc_ours:>8.3f}s {enc_hf:>7.3f}s {enc_hf / enc_ours:>5.2f}×  {differ}/{len(texts)}"
        )
    print(f"({sum(len(t) for t in lines)} characters per encode run; ratio > 1 means toycards is faster)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "vocab_dir", nargs="?", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "vocab",
        help="llama.cpp's test vocabularies (ggml-vocab-*.gguf and their .inp files); default ../shared/vocab",
    )  # fmt: skip
    vocab_dir = parser.parse_args().vocab_dir
    if not vocab_dir.is_dir():
        parser.error(f"{vocab_dir}: no such folder")
    main(vocab_dir)
