"""Plausibility checks on the GGUF hyperparameters that later code relies on.

Owns: `check_hparams(f)`: a list of problems (one line each, naming the key and its
value) with the sizes, counts and epsilons that loaders, cards and kernels use to
allocate and index: `{arch}.block_count` from 1 to 512, head counts ≥ 1 dividing each
other, per-layer arrays of length block_count, vocabulary arrays of one length and
special token ids inside it. Opening a file never fails on these; callers decide.
Leaves out: the header's validity (gguf/header.py) and whether a card binds the
values (inspect/describe.py, checker/).

A file with 100,000 layers and 32 query heads shared among 5 key/value heads:

>>> import gguf, os, tempfile
>>> from toycards.gguf.reader import open_gguf
>>> tmp = tempfile.TemporaryDirectory()
>>> path = os.path.join(tmp.name, "broken.gguf")
>>> w = gguf.GGUFWriter(path, "llama")
>>> w.add_block_count(100_000); w.add_head_count(32); w.add_head_count_kv(5)
>>> w.write_header_to_file(); w.write_kv_data_to_file(); w.close()
>>> with open_gguf(path) as f:
...     check_hparams(f)
['llama.block_count = 100000 is out of range 1…512',
 'llama.attention.head_count = 32 is not a multiple of llama.attention.head_count_kv = 5']
>>> tmp.cleanup()
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from toycards.gguf.facts import (
    ARCH_NAMES,
    DEPRECATED_SPECIAL_TOKEN_KEYS,
    INT_VALUE_TYPES,
    SPECIAL_TOKEN_KEYS,
    Keys,
)

if TYPE_CHECKING:
    from toycards.gguf.reader import GGUFFile

A, L, R, Tk = Keys.Attention, Keys.LLM, Keys.Rope, Keys.Tokenizer

# integer hyperparameters: (key, smallest, largest); a per-layer array may also hold 0
INT_RANGES: tuple[tuple[str, int, int], ...] = (
    (L.BLOCK_COUNT, 1, 512),
    (L.CONTEXT_LENGTH, 1, 1 << 27),
    (L.EMBEDDING_LENGTH, 1, 1 << 17),
    (L.FEED_FORWARD_LENGTH, 0, 1 << 20),
    (L.EXPERT_FEED_FORWARD_LENGTH, 1, 1 << 20),
    (L.VOCAB_SIZE, 1, 1 << 22),
    (L.EXPERT_COUNT, 0, 1024),
    (L.EXPERT_USED_COUNT, 0, 1024),
    (A.HEAD_COUNT, 1, 1024),
    (A.HEAD_COUNT_KV, 1, 1024),
    (A.KEY_LENGTH, 1, 4096),
    (A.VALUE_LENGTH, 1, 4096),
    (A.SLIDING_WINDOW, 0, 1 << 27),
    (R.DIMENSION_COUNT, 0, 4096),
)
# float hyperparameters: (key, exclusive lower bound, exclusive upper bound)
FLOAT_RANGES: tuple[tuple[str, float, float], ...] = (
    (A.LAYERNORM_EPS, 0.0, 1.0),
    (A.LAYERNORM_RMS_EPS, 0.0, 1.0),
    (R.FREQ_BASE, 0.0, math.inf),
    (R.SCALING_FACTOR, 0.0, math.inf),
)
# recurrent architectures write head_count 0: they have no attention
ATTENTION_FREE = frozenset(ARCH_NAMES[a] for a in ("MAMBA", "MAMBA2", "RWKV6", "RWKV7"))


def check_hparams(f: GGUFFile) -> list[str]:
    """Every implausible hyperparameter of `f`, as one line each; [] when all is well."""
    arch = f.get(Keys.General.ARCHITECTURE)
    if not isinstance(arch, str):
        return [f"{Keys.General.ARCHITECTURE} is missing or not a string"]
    problems: list[str] = []
    values: dict[str, int] = {}  # scalar ints that passed, by key template
    n_layer = f.get(L.BLOCK_COUNT.format(arch=arch))
    for template, lo, hi in INT_RANGES:
        if template in (A.HEAD_COUNT, A.HEAD_COUNT_KV) and arch in ATTENTION_FREE:
            lo = 0
        value = _check_int(f, template.format(arch=arch), lo, hi, n_layer, problems)
        if value is not None:
            values[template] = value
    for template, lo, hi in FLOAT_RANGES:
        key = template.format(arch=arch)
        value = f.get(key)
        if value is not None and not (isinstance(value, float) and lo < value < hi):
            problems.append(f"{key} = {value!r} is not a number between {lo} and {hi} (exclusive)")
    problems += _relations(arch, values)
    problems += _vocabulary(f)
    return problems


def _check_int(f: GGUFFile, key: str, lo: int, hi: int, n_layer: object, problems: list[str]) -> int | None:
    """Check a scalar or per-layer integer; return it if it is a valid scalar."""
    if key not in f.metadata:
        return None
    vtype = f.value_type(key)
    if vtype in INT_VALUE_TYPES:
        value = f.metadata[key]
        if lo <= value <= hi:
            return value
        problems.append(f"{key} = {value} is out of range {lo}…{hi}")
    elif vtype.startswith("array[") and vtype[6:-1] in INT_VALUE_TYPES:  # one value per layer
        values = [int(v) for v in f.metadata[key]]
        if isinstance(n_layer, int) and len(values) != n_layer:
            problems.append(f"{key} has {len(values)} per-layer values for {n_layer} layers")
        if len(values) and not (min(values) >= min(lo, 0) and max(values) <= hi):
            problems.append(f"{key} has values out of range 0…{hi} ({min(values)}…{max(values)})")
    else:
        problems.append(f"{key} should be an integer, not {vtype}")
    return None


def _relations(arch: str, v: dict[str, int]) -> list[str]:
    """Head counts that divide, head sizes that fit, experts that exist."""
    out, name = [], lambda t: t.format(arch=arch)
    h, h_kv, d_e = v.get(A.HEAD_COUNT), v.get(A.HEAD_COUNT_KV), v.get(L.EMBEDDING_LENGTH)
    if h and h_kv and h % h_kv:
        out.append(f"{name(A.HEAD_COUNT)} = {h} is not a multiple of {name(A.HEAD_COUNT_KV)} = {h_kv}")
    if h and d_e and A.KEY_LENGTH not in v and d_e % h:
        out.append(f"{name(L.EMBEDDING_LENGTH)} = {d_e} is not divisible by {name(A.HEAD_COUNT)} = {h}")
    d_head = v.get(A.KEY_LENGTH) or (d_e // h if h and d_e else None)
    n_rot = v.get(R.DIMENSION_COUNT)
    if n_rot is not None and (n_rot % 2 or (d_head and n_rot > d_head)):
        out.append(f"{name(R.DIMENSION_COUNT)} = {n_rot} must be even and at most the head size {d_head}")
    n_exp, n_used = v.get(L.EXPERT_COUNT, 0), v.get(L.EXPERT_USED_COUNT)
    if n_used is not None and (n_used > n_exp or (n_exp and not n_used)):
        out.append(f"{name(L.EXPERT_USED_COUNT)} = {n_used} does not fit {name(L.EXPERT_COUNT)} = {n_exp}")
    return out


def _vocabulary(f: GGUFFile) -> list[str]:
    """Token arrays of one length, special ids inside it, an embedding with one row per token."""
    if Tk.LIST not in f.metadata or not f.value_type(Tk.LIST).startswith("array"):
        return []
    n_vocab, out = f.array_len(Tk.LIST), []
    for key in (Tk.SCORES, Tk.TOKEN_TYPE):
        if key in f.metadata and f.value_type(key).startswith("array") and f.array_len(key) != n_vocab:
            out.append(f"{key} has {f.array_len(key)} entries for {n_vocab} tokens")
    for _, key in SPECIAL_TOKEN_KEYS + DEPRECATED_SPECIAL_TOKEN_KEYS:
        value = f.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value < n_vocab:
            out.append(f"{key} = {value} is not a token id (the vocabulary has {n_vocab} tokens)")
    embd = f.tensors.get("token_embd.weight")
    if embd is not None and embd.shape[0] != n_vocab:
        out.append(f"token_embd.weight has {embd.shape[0]} rows for {n_vocab} tokens")
    return out
