"""What a user wants to see of a GGUF file at a glance: the header of `toycards describe`.

Owns: `Header` (general.* metadata, file size, tensor types with counts, the exact parameter
count, context length, RoPE type and scaling, tokenizer summary, chat template presence) and
`read_header(f)`, plus `ROPE_TYPES`, llama.cpp's table of how each architecture rotates
(`llama_model_rope_type`): NORM on adjacent pairs, NEOX on halves, none.
Leaves out: which card describes the file and binding it (describe.py), rendering (formats.py).

Arrays are read lazily: a vocabulary is measured by its length, and token texts are decoded
only for the special tokens shown. The chat template is kept as text; it is never rendered.

The repository's example file (examples/make_example.py: a tiny Llama with GPT-2's
tokenizer cut to 1,024 tokens):

>>> from toycards.gguf.reader import open_gguf
>>> with open_gguf("examples/tiny-llama.gguf") as f:
...     h = read_header(f)
>>> h.architecture, h.rope["type"], h.tokenizer["model"], h.tokenizer["vocab_size"], h.n_params
('llama', 'norm', 'gpt2', 1024, 139584)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from toycards.gguf.facts import ARCH_NAMES, SPECIAL_TOKEN_KEYS, Keys, file_type_name

# llama.cpp's llama_model_rope_type, by gguf.MODEL_ARCH member name (GLM4 and GLM4_MOE switch
# to multi-section RoPE when `rope.dimension_sections` is set; the table shows their text type)
_ROPE_BY_MEMBER: dict[str, tuple[str, ...]] = {
    "none": (
        "MMPROJ", "GPT2", "GPTJ", "MPT", "REFACT", "BLOOM", "MAMBA", "MAMBA2", "JAMBA", "JINA_BERT_V2",
        "T5", "T5ENCODER", "JAIS", "RWKV6", "RWKV6QWEN2", "RWKV7", "ARWKV7", "WAVTOKENIZER_DEC",
        "NEMOTRON_H", "NEMOTRON_H_MOE", "KIMI_LINEAR",
    ),
    "norm": (
        "LLAMA", "LLADA", "LLAMA4", "DECI", "BAICHUAN", "STARCODER", "INTERNLM2", "MINICPM", "XVERSE",
        "COMMAND_R", "COHERE2", "OLMO", "ARCTIC", "DEEPSEEK", "DEEPSEEK2", "PLM", "CHATGLM", "GLM4",
        "GRANITE", "GRANITE_MOE", "GRANITE_HYBRID", "CHAMELEON", "BAILINGMOE", "NEO_BERT", "SMOLLM3",
        "ARCEE", "ERNIE4_5", "ERNIE4_5_MOE", "MISTRAL3", "LLAMA_EMBED", "MAINCODER", "GLM_DSA",
    ),
    "neox": (
        "FALCON", "FALCON_H1", "GROK", "DBRX", "BERT", "JINA_BERT_V3", "MODERN_BERT", "NOMIC_BERT",
        "NOMIC_BERT_MOE", "EUROBERT", "STABLELM", "BITNET", "QWEN", "QWEN2", "DREAM", "QWEN2MOE",
        "QWEN3", "QWEN3MOE", "LLADA_MOE", "RND1", "OLMO2", "OLMOE", "PHI2", "PHI3", "PHIMOE", "PLAMO",
        "PLAMO2", "PLAMO3", "GEMMA", "GEMMA2", "GEMMA3", "GEMMA3N", "GEMMA_EMBEDDING", "STARCODER2",
        "OPENELM", "GPTNEOX", "CODESHELL", "ORION", "NEMOTRON", "EXAONE", "EXAONE4", "EXAONE_MOE",
        "MINICPM3", "BAILINGMOE2", "DOTS1", "HUNYUAN_MOE", "JAIS2", "GPT_OSS", "HUNYUAN_DENSE", "LFM2",
        "LFM2MOE", "SMALLTHINKER", "SEED_OSS", "GROVEMOE", "APERTUS", "MINIMAXM2", "COGVLM",
        "PANGU_EMBED", "AFMOE", "QWEN3NEXT", "MIMO2", "STEP35", "GLM4_MOE",
    ),
    "mrope": ("QWEN2VL", "PADDLEOCR"),
    "imrope": ("QWEN3VL", "QWEN3VLMOE", "QWEN35", "QWEN35MOE"),
}  # fmt: skip
ROPE_TYPES: dict[str, str] = {
    ARCH_NAMES[member]: rope
    for rope, members in _ROPE_BY_MEMBER.items()
    for member in members
    if member in ARCH_NAMES
}
"""general.architecture → "norm" (adjacent pairs), "neox" (halves), "mrope", "imrope" or "none"."""

ROPE_MEANING = {
    "norm": "NORM: rotates adjacent pairs",
    "neox": "NEOX: rotates the two halves",
    "mrope": "MROPE: multi-section",
    "imrope": "IMROPE: interleaved multi-section",
    "none": "none: no rotary embedding",
}

Tk, R, LLM = Keys.Tokenizer, Keys.Rope, Keys.LLM
SPECIAL_TOKENS: dict[str, str] = dict(SPECIAL_TOKEN_KEYS)
MAX_SHOWN_ARRAY = 32  # general.* arrays (tags, languages) longer than this are shown by length
MAX_TEXT = 200  # general.* strings are clipped to this many characters in the header


@dataclass
class Header:
    """The at-a-glance facts of one GGUF file (JSON-ready: plain values only)."""

    path: str
    file_size: int
    version: int
    architecture: str | None
    general: dict[str, object]  # general.* keys (file_type with its llama.cpp name)
    n_tensors: int
    tensor_types: dict[str, int]  # ggml type → tensor count, most frequent first
    n_params: int  # elements of every tensor in the file
    context_length: int | None
    rope: dict[str, object]  # type, meaning, dimension_count, freq_base, scaling…, factor tensors
    tokenizer: dict[str, object]  # model, pre, vocab_size, merges, special tokens, add_bos/eos
    chat_template: str | None  # the template text (never rendered)
    n_keys: int = 0
    other_keys: list[str] = field(default_factory=list)  # neither general.*, {arch}.* nor tokenizer.*
    tensors: dict[str, dict[str, object]] = field(default_factory=dict)  # name → {type, shape}

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) pairs for text views, in reading order."""
        return header_rows(self)


def _plain(value: object) -> object:
    """Metadata values as JSON-ready Python values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _clip(text: str, n: int = MAX_TEXT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _general(f) -> dict[str, object]:
    out: dict[str, object] = {}
    for key in f.metadata:
        if not key.startswith("general."):
            continue
        vtype = f.value_type(key)
        if vtype.startswith("array"):
            n = f.array_len(key)
            out[key] = _plain(f.metadata[key]) if n <= MAX_SHOWN_ARRAY else f"[{n} values]"
        else:
            out[key] = f.metadata[key]
    code = out.get(Keys.General.FILE_TYPE)
    if isinstance(code, int) and not isinstance(code, bool):
        out[Keys.General.FILE_TYPE] = f"{code} ({file_type_name(code) or 'unknown'})"
    return out


def _scalar(f, key: str) -> object:
    if key not in f.metadata or f.value_type(key).startswith("array"):
        return None
    return f.metadata[key]


def _rope(f, arch: str) -> dict[str, object]:
    rope_type = ROPE_TYPES.get(arch, "unknown")
    out: dict[str, object] = {
        "type": rope_type,
        "meaning": ROPE_MEANING.get(rope_type, "not in toycards' table of llama.cpp architectures"),
    }
    for name, template in [
        ("dimension_count", R.DIMENSION_COUNT),
        ("freq_base", R.FREQ_BASE),
        ("scaling_type", R.SCALING_TYPE),
        ("scaling_factor", R.SCALING_FACTOR),
        ("original_context_length", R.SCALING_ORIG_CTX_LEN),
    ]:
        value = _scalar(f, template.format(arch=arch))
        if value is not None:
            out[name] = value
    tensors = [t for t in ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")]
    present = [t for t in tensors if t in f.tensors]
    if present:
        out["factor_tensors"] = present
    return out


def _token_texts(f, ids: dict[str, int]) -> dict[str, str]:
    """Texts of the special tokens, decoding only those entries of the token list."""
    if not ids or Tk.LIST not in f.metadata:
        return {}
    texts = f.string_items(Tk.LIST, set(ids.values()))
    return {name: texts[i] for name, i in ids.items() if i in texts}


def _tokenizer(f) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, key in [("model", Tk.MODEL), ("pre", Tk.PRE)]:
        value = _scalar(f, key)
        if value is not None:
            out[name] = value
    for name, key in [("vocab_size", Tk.LIST), ("merges", Tk.MERGES), ("scores", Tk.SCORES)]:
        if key in f.metadata and f.value_type(key).startswith("array"):
            out[name] = f.array_len(key)
    ids = {
        name: v
        for name, key in SPECIAL_TOKENS.items()
        if isinstance(v := _scalar(f, key), int) and not isinstance(v, bool)
    }
    texts = _token_texts(f, ids)
    if ids:
        out["special"] = {name: {"id": i, "text": texts.get(name)} for name, i in ids.items()}
    for name, key in [("add_bos", Tk.ADD_BOS), ("add_eos", Tk.ADD_EOS)]:
        value = _scalar(f, key)
        if value is not None:
            out[name] = bool(value)
    return out


def read_header(f) -> Header:
    """The at-a-glance facts of an open `runtime.gguf.GGUFFile`."""
    arch = f.get(Keys.General.ARCHITECTURE)
    arch = arch if isinstance(arch, str) else None
    types = Counter(t.type_name for t in f.tensors.values())
    template = _scalar(f, Tk.CHAT_TEMPLATE)
    prefixes = ("general.", "tokenizer.") + ((f"{arch}.",) if arch else ())
    return Header(
        path=str(f.path),
        file_size=f.file_size,
        version=f.version,
        architecture=arch,
        general=_general(f),
        n_tensors=len(f.tensors),
        tensor_types=dict(sorted(types.items(), key=lambda kv: (-kv[1], kv[0]))),
        n_params=sum(int(t.n_elements) for t in f.tensors.values()),
        context_length=_int_or_none(_scalar(f, LLM.CONTEXT_LENGTH.format(arch=arch))) if arch else None,
        rope=_rope(f, arch or ""),
        tokenizer=_tokenizer(f),
        chat_template=template if isinstance(template, str) else None,
        n_keys=len(f.metadata),
        other_keys=[k for k in f.metadata if not k.startswith(prefixes)],
        tensors={t.name: {"type": t.type_name, "shape": list(t.shape)} for t in f.tensors.values()},
    )


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# ── text ────────────────────────────────────────────────────────────────────────────────
def human_size(n: int) -> str:
    """Bytes in decimal units, as file managers show them.

    >>> human_size(742912), human_size(1_234_567_890), human_size(512)
    ('742.9 kB', '1.23 GB', '512 B')
    """
    for unit, scale, digits in (("GB", 1e9, 2), ("MB", 1e6, 1), ("kB", 1e3, 1)):
        if n >= scale:
            return f"{n / scale:.{digits}f} {unit}"
    return f"{n} B"


def human_count(n: int) -> str:
    """A parameter count, exact and rounded.

    >>> human_count(124439808), human_count(999)
    ('124,439,808 (124.4M)', '999')
    """
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n:,} ({n / scale:.1f}{unit})"
    return str(n)


def _rope_text(rope: dict[str, object]) -> str:
    parts = [str(rope["meaning"])]
    if "freq_base" in rope:
        parts.append(f"θ = {rope['freq_base']:g}")
    if "dimension_count" in rope:
        parts.append(f"{rope['dimension_count']} rotated dims")
    scaling = rope.get("scaling_type")
    if scaling not in (None, "none") or "scaling_factor" in rope:
        parts.append(f"scaling {scaling or '?'} × {rope.get('scaling_factor', '?')}")
    if "original_context_length" in rope:
        parts.append(f"original context {rope['original_context_length']}")
    if "factor_tensors" in rope:
        parts.append("factors from " + ", ".join(rope["factor_tensors"]))
    return "; ".join(parts)


def _tokenizer_text(tok: dict[str, object]) -> str:
    if not tok:
        return "none in the file"
    parts = [f"{tok.get('model', '?')} (pre {tok.get('pre', '?')})"]
    if "vocab_size" in tok:
        parts.append(f"{tok['vocab_size']:,} tokens")
    if "merges" in tok:
        parts.append(f"{tok['merges']:,} merges")
    return ", ".join(parts)


def _special_text(special: dict[str, dict]) -> str:
    return ", ".join(
        f"{name} {v['id']}" + (f" {v['text']!r}" if v.get("text") is not None else "")
        for name, v in special.items()
    )


def header_rows(h: Header) -> list[tuple[str, str]]:
    """(label, value) rows in reading order; every value is one line."""
    g = h.general
    rows = [("file", f"{Path(h.path).name} ({human_size(h.file_size)}, GGUF v{h.version})")]
    if "general.name" in g:
        rows.append(("name", _clip(str(g["general.name"]))))
    rows.append(("architecture", h.architecture or "(missing)"))
    rows.append(("parameters", human_count(h.n_params) + f" in {h.n_tensors} tensors"))
    if h.tensor_types:
        rows.append(("tensor types", ", ".join(f"{t} ×{n}" for t, n in h.tensor_types.items())))
    if h.context_length is not None:
        rows.append(("context length", f"{h.context_length:,}"))
    rows.append(("RoPE", _rope_text(h.rope)))
    rows.append(("tokenizer", _tokenizer_text(h.tokenizer)))
    if "special" in h.tokenizer:
        rows.append(("special tokens", _clip(_special_text(h.tokenizer["special"]), 400)))
    template = "none" if h.chat_template is None else f"present ({len(h.chat_template):,} characters)"
    rows.append(("chat template", template))
    shown = {"general.name", "general.architecture"}
    rows += [(k.removeprefix("general."), _clip(str(v))) for k, v in g.items() if k not in shown]
    return rows
