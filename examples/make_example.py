"""Build `examples/tiny-llama.gguf`: a tiny Llama with random weights, made from the library card.

The file is what the README's quick start runs (`toycards describe examples/tiny-llama.gguf`,
`toycards run examples/tiny-llama.gguf --prompt "Hello"`). Everything in it comes from the Llama
card: the hyperparameters below are written as the card's `= value`s, binding that card gives the
GGUF name and shape of every tensor it needs (random weights are drawn for those), and each
hyperparameter goes to the metadata key the card reads it from. The output is tied (no
`output.weight`: the card falls back to `token_embd.weight`), matrices are stored as F16 and
vectors as F32, as llama.cpp's converter does.

The vocabulary is real: GPT-2's byte-level BPE cut to its first 1,023 tokens (the 256 byte symbols
and the first 767 merges, in merge order, so the cut is itself a valid BPE) plus `<|endoftext|>`,
copied from llama.cpp's vocab-only `ggml-vocab-gpt-2.gguf`. The output is deterministic: the same
command writes the same bytes.

    .venv/bin/python examples/make_example.py [--vocab ../shared/vocab/ggml-vocab-gpt-2.gguf] [-o FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import re
from pathlib import Path

import gguf
import numpy as np

import toycards
from toycards.lang import ir
from toycards.library import library_card
from toycards.models.binding import bind_values, eval_scalar

HERE = Path(__file__).resolve().parent
DEFAULT_VOCAB = HERE.parent.parent / "shared" / "vocab" / "ggml-vocab-gpt-2.gguf"
N_VOCAB = 1024  # 256 bytes + 767 merges + <|endoftext|>
HYPERPARAMETERS = {  # the Llama card's names
    "L": 2,  # layers
    "H": 4,  # query heads
    "H_kv": 2,  # key/value heads (grouped-query attention)
    "d_e": 64,  # embedding width; d_h = d_e / H = 16
    "d_ff": 128,  # SwiGLU hidden width
    "ℓ_max": 256,  # context length
    "ε": 1e-5,  # RMSNorm epsilon
    "θ_base": 10000.0,  # RoPE base
    "N_V": N_VOCAB,
}
SEED = 0
WEIGHT_STD = 0.5  # logits of a few units, so that generation is not a uniform draw


def bound_card(arch: str = "llama") -> ir.Card:
    """The library card with `= value` on each hyperparameter of HYPERPARAMETERS."""
    card = library_card(arch)
    main = card.main
    decls = tuple(
        dataclasses.replace(d, value=ir.Num(repr(HYPERPARAMETERS[d.names[0]])))
        if len(d.names) == 1 and d.names[0] in HYPERPARAMETERS
        else d
        for d in main.hyper_decls
    )
    return dataclasses.replace(
        card, algorithms=(*card.algorithms[:-1], dataclasses.replace(main, hyper_decls=decls))
    )


def truncated_vocab(
    path: Path, n_vocab: int
) -> dict[str, tuple[object, gguf.GGUFValueType, gguf.GGUFValueType | None]]:
    """GPT-2's tokenizer metadata cut to `n_vocab` tokens: bytes, the first merges, end-of-text."""
    if not path.exists():
        raise SystemExit(f"{path}: no such vocabulary file (pass --vocab PATH to ggml-vocab-gpt-2.gguf)")
    fields = gguf.GGUFReader(path).fields
    tokens = fields["tokenizer.ggml.tokens"].contents()
    merges = fields["tokenizer.ggml.merges"].contents()
    eot = fields["tokenizer.ggml.eos_token_id"].contents()
    n_merges = n_vocab - 1 - 256
    assert all("".join(m.split(" ")) == tokens[256 + i] for i, m in enumerate(merges[:n_merges])), (
        "GPT-2's token 256 + i is the result of merge i"
    )
    V = gguf.GGUFValueType
    types = [int(gguf.TokenType.NORMAL)] * (n_vocab - 1) + [int(gguf.TokenType.CONTROL)]
    return {
        "tokenizer.ggml.model": (fields["tokenizer.ggml.model"].contents(), V.STRING, None),
        "tokenizer.ggml.pre": (fields["tokenizer.ggml.pre"].contents(), V.STRING, None),
        "tokenizer.ggml.tokens": ([*tokens[: n_vocab - 1], tokens[eot]], V.ARRAY, V.STRING),
        "tokenizer.ggml.token_type": (types, V.ARRAY, V.INT32),
        "tokenizer.ggml.merges": (merges[:n_merges], V.ARRAY, V.STRING),
        "tokenizer.ggml.bos_token_id": (n_vocab - 1, V.UINT32, None),
        "tokenizer.ggml.eos_token_id": (n_vocab - 1, V.UINT32, None),
        "tokenizer.ggml.add_bos_token": (False, V.BOOL, None),
    }


def hyperparameter_keys(
    card: ir.Card, values: dict[str, object], arch: str
) -> dict[str, tuple[object, gguf.GGUFValueType]]:
    """Each bound hyperparameter under the first metadata key the card reads it from."""
    V = gguf.GGUFValueType
    out = {}
    for d in card.main.hyper_decls:
        if d.binding is None or d.binding.kind != "from" or d.names[0] not in values:
            continue
        key = d.binding.sources[0][0].tensor.replace("{arch}", arch)
        value = values[d.names[0]]
        if d.binding.default is not None and _default(d, values) == value:
            continue  # as llama.cpp's converter, write no key for a default (rope scaling none, …)
        if isinstance(d.type, ir.EnumType) or isinstance(value, str):
            out[key] = (str(value), V.STRING)
        elif isinstance(d.type, ir.TensorType) and d.type.field == "N":
            out[key] = (int(value), V.UINT32)
        else:
            out[key] = (float(value), V.FLOAT32)
    return out


def random_weights(card: ir.Card) -> dict[str, np.ndarray]:
    """A weight for every tensor the bound card asks for, by GGUF name, in GGUF layout.

    Matrices ~ N(0, WEIGHT_STD²) stored as F16; vectors (Llama's RMSNorm scales) are ones, F32.
    Not stored: `output.weight` (the card falls back to `token_embd.weight`: a tied output) and
    tensors with a constant fallback (`rope_freqs.weight` or 1).
    """
    bound = bind_values(card.main)
    if any(d.severity == "error" for d in bound.problems):
        raise SystemExit("; ".join(d.message for d in bound.problems))
    rng = np.random.default_rng(SEED)
    out: dict[str, np.ndarray] = {}
    for p in bound.params:
        alternatives = p.decl.binding.sources[p.decl.names.index(p.name)]
        if p.key in out or p.key == "output.weight" or any(s.const for s in alternatives):
            continue
        shape = p.stored_shape
        if len(shape) == 1:
            out[p.key] = np.ones(shape, dtype=np.float32)
        else:
            out[p.key] = (WEIGHT_STD * rng.standard_normal(shape)).astype(np.float16)
    return dict(sorted(out.items(), key=lambda item: _file_order(item[0])))


def _file_order(name: str) -> tuple[int, int]:
    """llama.cpp's order: token_embd, then block by block, then the rest (output_norm)."""
    m = re.match(r"blk\.(\d+)\.", name)
    return (1, int(m.group(1))) if m else (0 if name.startswith("token_embd") else 2, 0)


def _default(d: ir.Decl, values: dict[str, object]) -> object:
    options = frozenset(d.type.options) if isinstance(d.type, ir.EnumType) else frozenset()
    return eval_scalar(d.binding.default, values, options)


def build(out: Path, vocab: Path, arch: str = "llama") -> Path:
    card = bound_card(arch)
    values = bind_values(card.main).hyper
    w = gguf.GGUFWriter(str(out), arch)
    w.add_string("general.name", f"toycards tiny {arch} (random weights)")
    w.add_uint32("general.file_type", int(gguf.LlamaFileType.MOSTLY_F16))
    for key, (value, vtype) in hyperparameter_keys(card, values, arch).items():
        w.add_key_value(key, value, vtype)
    for key, (value, vtype, sub) in truncated_vocab(vocab, N_VOCAB).items():
        w.add_key_value(key, value, vtype, sub)
    for name, weight in random_weights(card).items():
        w.add_tensor(name, weight)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def self_check(path: Path) -> str:
    """Load the file as a user would and continue a prompt: it must run end to end."""
    model = toycards.load(path, target="numpy")
    ids = model.tokenizer.encode("Hello, world")
    assert model.tokenizer.decode(ids) == "Hello, world", ids
    assert np.isfinite(model.logits(ids)).all()
    return "".join(model.generate("Hello", max_tokens=8))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=Path, default=DEFAULT_VOCAB, help="llama.cpp's ggml-vocab-gpt-2.gguf")
    parser.add_argument("-o", "--output", type=Path, default=HERE / "tiny-llama.gguf")
    args = parser.parse_args()
    path = build(args.output, args.vocab)
    data = path.read_bytes()
    print(f"wrote {path} ({len(data) / 1024:.0f} KiB, sha256 {hashlib.sha256(data).hexdigest()[:16]})")
    print(f"greedy continuation of 'Hello': {self_check(path)!r}")


if __name__ == "__main__":
    main()
