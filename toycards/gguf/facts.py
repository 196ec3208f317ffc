"""The `gguf` package's tables of GGUF facts, without importing the package.

Owns: the facts a header reader needs from `gguf.constants` (value types, ggml tensor
types and their block sizes, the default alignment, file types, architecture names,
metadata keys and token types), copied from the installed `gguf` package on first use and cached on
disk (toycards/cache.py) under a key made from that package's constants file, so an
upgraded `gguf` is read afresh. Importing `gguf` (NumPy with it) is a large share of a fresh
process's start: `toycards describe` and `list` read headers without either, and
`toycards.load` reads a file and its tokenizer without `gguf` or its memory (bench/describe.py
times the imports alone beside `describe`).
Leaves out: what the facts mean (gguf/header.py, gguf/metadata.py,
inspect/header.py); tensor data (gguf/dequant.py, which imports `gguf.quants` only for the
types it has no code of its own for).

>>> QUANT_NAMES[8], QUANT_SIZES[8], ValueType.STRING, Keys.General.ARCHITECTURE
('Q8_0', (32, 34), 8, 'general.architecture')
"""

from __future__ import annotations

import importlib.util
import os
from types import SimpleNamespace

from toycards import cache

_SCHEMA = "2"  # bump when the tables below change shape


def _from_gguf() -> dict[str, object]:
    """Read the tables from the `gguf` package itself (the slow path: imports it)."""
    import gguf

    def namespace(cls: type) -> SimpleNamespace:
        return SimpleNamespace(
            **{
                k: namespace(v) if isinstance(v, type) else v
                for k, v in vars(cls).items()
                if not k.startswith("_") and isinstance(v, str | type)
            }
        )

    return {
        "value_types": {t.name: int(t) for t in gguf.GGUFValueType},
        "quant_sizes": {int(t): tuple(s) for t, s in gguf.GGML_QUANT_SIZES.items()},
        "quant_names": {int(t): t.name for t in gguf.GGMLQuantizationType},
        "default_alignment": int(gguf.GGUF_DEFAULT_ALIGNMENT),
        "file_types": {int(t): t.name for t in gguf.LlamaFileType},
        "arch_names": {m.name: gguf.MODEL_ARCH_NAMES[m] for m in gguf.MODEL_ARCH},
        "keys": namespace(gguf.Keys),
        "token_types": {t.name: int(t) for t in gguf.TokenType},
    }


_TABLES = {
    "value_types",
    "quant_sizes",
    "quant_names",
    "default_alignment",
    "file_types",
    "arch_names",
    "keys",
    "token_types",
}


def _load() -> dict[str, object]:
    """The tables from the disk cache, else from `gguf` (then cached under the package's key)."""
    spec = importlib.util.find_spec("gguf")
    folders = list(spec.submodule_search_locations or []) if spec else []
    constants = os.path.join(folders[0], "constants.py") if folders else ""
    try:
        st = os.stat(constants)
    except OSError:
        return _from_gguf()
    key = cache.cache_key(_SCHEMA, constants, str(st.st_size), str(st.st_mtime_ns))
    path = cache.cache_file("ggml-facts", key)
    facts = cache.load(path)
    if not isinstance(facts, dict) or facts.keys() != _TABLES:
        facts = _from_gguf()
        cache.store(path, facts)
    return facts


_facts = _load()

ValueType = SimpleNamespace(**_facts["value_types"])
"""GGUF metadata value types by name: `ValueType.UINT32 == 4`, `ValueType.ARRAY == 9`."""
VALUE_TYPE_NAMES: dict[int, str] = {code: name.lower() for name, code in _facts["value_types"].items()}
QUANT_SIZES: dict[int, tuple[int, int]] = _facts["quant_sizes"]
"""ggml tensor type → (elements per block, bytes per block)."""
QUANT_NAMES: dict[int, str] = _facts["quant_names"]
TYPE_IDS: dict[str, int] = {name: t for t, name in QUANT_NAMES.items()}
"""`gguf.GGMLQuantizationType` as a table: a ggml type's name → its id (`"Q8_0"` → 8)."""
DEFAULT_ALIGNMENT: int = _facts["default_alignment"]
FILE_TYPE_NAMES: dict[int, str] = _facts["file_types"]
"""`general.file_type` → llama.cpp's name for it (`MOSTLY_Q8_0`)."""
ARCH_NAMES: dict[str, str] = _facts["arch_names"]
"""`gguf.MODEL_ARCH` member name → `general.architecture` (`"QWEN2"` → `"qwen2"`)."""
Keys = _facts["keys"]
"""`gguf.Keys` as nested namespaces: `Keys.LLM.BLOCK_COUNT == "{arch}.block_count"`."""
TokenType = SimpleNamespace(**_facts["token_types"])
"""`tokenizer.ggml.token_type` values by name: `TokenType.CONTROL == 3`."""
del _facts


def file_type_name(code: int) -> str | None:
    """`15` → `"Q4_K_M"`: llama.cpp's name of a `general.file_type`; None for a code it lacks."""
    name = FILE_TYPE_NAMES.get(code)
    return name.removeprefix("MOSTLY_").removeprefix("ALL_") if name else None


# ── facts derived from the tables above, each written once ───────────────────────────────
CARD_KEY = "toycards.card"
"""The metadata key of a card embedded in a GGUF file (written by toycards, preferred on read)."""

INT_VALUE_TYPES = frozenset(name for name in VALUE_TYPE_NAMES.values() if name.startswith(("uint", "int")))
"""Metadata value types that hold integers: `uint8` … `int64`."""

INT_TENSOR_TYPES = frozenset(name for name in QUANT_NAMES.values() if name in ("I8", "I16", "I32", "I64"))
"""ggml tensor types that hold integers (as opposed to real numbers, plain or quantized)."""

SPECIAL_TOKEN_KEYS: tuple[tuple[str, str], ...] = (
    ("bos", Keys.Tokenizer.BOS_ID), ("eos", Keys.Tokenizer.EOS_ID), ("eot", Keys.Tokenizer.EOT_ID),
    ("eom", Keys.Tokenizer.EOM_ID), ("unk", Keys.Tokenizer.UNK_ID), ("sep", Keys.Tokenizer.SEP_ID),
    ("pad", Keys.Tokenizer.PAD_ID), ("mask", Keys.Tokenizer.MASK_ID),
    ("fim_pre", Keys.Tokenizer.FIM_PRE_ID), ("fim_suf", Keys.Tokenizer.FIM_SUF_ID),
    ("fim_mid", Keys.Tokenizer.FIM_MID_ID), ("fim_pad", Keys.Tokenizer.FIM_PAD_ID),
    ("fim_rep", Keys.Tokenizer.FIM_REP_ID), ("fim_sep", Keys.Tokenizer.FIM_SEP_ID),
)  # fmt: skip
"""Special-token roles and the metadata keys of their ids, in llama.cpp's order."""

DEPRECATED_SPECIAL_TOKEN_KEYS: tuple[tuple[str, str], ...] = (
    ("fim_pre", Keys.Tokenizer.PREFIX_ID), ("fim_suf", Keys.Tokenizer.SUFFIX_ID),
    ("fim_mid", Keys.Tokenizer.MIDDLE_ID),
)  # fmt: skip
"""Older spellings of the fill-in-the-middle ids; where both are present these win, as in llama.cpp."""
