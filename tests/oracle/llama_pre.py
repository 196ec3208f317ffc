r"""Oracle: llama.cpp's pre-tokenizers, re-enacted on Hugging Face `tokenizers`' regex engine.

Owns: llama.cpp's pre-tokenizer facts, transcribed from its source (`src/llama-vocab.cpp` at
ggml-org/llama.cpp 00ad355e, `src/unicode.cpp` at 0c4093cc): the regex list of each
`LLAMA_VOCAB_PRE_TYPE_*` (`REGEXES`, verbatim, non-ASCII as escapes), which `tokenizer.ggml.pre`
names its loader maps to which type and with which flags (`LOADER`), and the names whose types
toycards does not implement (`UNSUPPORTED`); `llama_cpp_split(text, regexes)`, llama.cpp's
`unicode_regex_split` with every regex run by `tokenizers.pre_tokenizers.Split` (Oniguruma)
instead of std::regex; a byte-level BPE `tokenizers.Tokenizer` built from a GGUF vocabulary
(`hf_bpe`, through a small GGUF metadata reader of its own, `gguf_metadata`); and llama.cpp's
recorded test cases (`recorded_cases`). Leaves out: anything from `toycards`; this module is what
toycards is checked against, so it must not import it.

How llama.cpp applies a family's regexes (`unicode.cpp`, `unicode_regex_split`), kept here:

- In turn, each regex splits every piece left by the previous one into its matches and the
  gaps between them, seeing one piece at a time (a look-ahead stops at the piece's end).
- Two regexes have hand-written matchers, used when the text is exactly theirs: GPT-2's (its
  matcher ends with GPT-2's final `|\s+`, which llama.cpp's text omits) and Llama 3's.
- A regex with `\p{N}`, `\p{L}`, `\p{P}`, `\p{M}` or `\p{S}` runs on a "collapsed" text: ASCII
  stays, non-ASCII whitespace becomes "\v", any other character the one byte of its category
  (0xD1 N, 0xD2 L, 0xD3 P, 0xD4 M, 0xD5 S, 0xD0 other), and each `\p{X}` becomes that byte plus
  a fixed list of ASCII members. That list gives `\p{S}` only `$+<=>^`|`, so "~" is no symbol.
- Any other regex runs on the text with each non-ASCII whitespace character replaced by "\v"
  (std::wregex's `\s` is ASCII-only), so a literal range such as U+0800–U+4E00 skips U+3000.

Category and whitespace facts come from Python's `unicodedata` and the Unicode White_Space list
below, not from the `regex` package that toycards uses; Oniguruma's `$` also matches before a
"\n", which no piece that reaches a `$` regex here contains (DeepSeek LLM isolates "\r", "\n").
"""

from __future__ import annotations

import struct
import unicodedata
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import gguf
from tokenizers import Regex, Tokenizer, models, pre_tokenizers

# LLAMA_VOCAB_PRE_TYPE_* → its regexes, as llama_vocab's `llm_tokenizer_bpe` lists them
REGEXES: dict[str, tuple[str, ...]] = {
    "DEFAULT": (
        r"[\p{P}\$\+<=>\^~\|]+",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
        r"\p{N}+",
        r"[0-9][0-9][0-9]",
    ),
    "GPT2": (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",),
    "STARCODER": (
        r"\p{N}",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    ),
    "FALCON": (
        r"[\p{P}\$\+<=>\^~\|`]+",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
        r"[0-9][0-9][0-9]",
    ),
    "LLAMA3": (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
        r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "QWEN2": (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
        r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "QWEN35": (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
        r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "GPT4O": (
        r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|"
        r"'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|"
        r"'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|"
        r"\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "TEKKEN": (
        r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|"
        r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|"
        r"\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "BLOOM": (" ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+",),
    "VIKING": (
        " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+",
        r"\p{N}",
    ),
    "DEEPSEEK_LLM": (
        "[\r\n]",
        "\\s?[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
        "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481"
        "\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf"
        "\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d"
        "\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4"
        "\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
        "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f"
        "\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d"
        "\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17"
        "\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb"
        "\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+",
        "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
        r"\s+$",
        "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
        r"\p{N}+",
    ),
    "DEEPSEEK_CODER": (
        "[\r\n]",
        r"\s?\p{L}+",
        r"\s?\p{P}+",
        "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
        r"\p{N}",
    ),
    "DEEPSEEK3_LLM": (
        r"\p{N}{1,3}",
        "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
        " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    ),
    "SEED_CODER": (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}|"
        r" ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "BAILINGMOE": (
        r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
        r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
    ),
}
# types that share another type's regex list in llama.cpp's `switch`
SAME_REGEXES = {
    "MPT": "GPT2", "OLMO": "GPT2", "JAIS": "GPT2", "TRILLION": "GPT2", "GRANITE_DOCLING": "GPT2",
    "REFACT": "STARCODER", "COMMAND_R": "STARCODER", "SMOLLM": "STARCODER", "CODESHELL": "STARCODER",
    "EXAONE": "STARCODER", "MINERVA": "STARCODER", "MELLUM2": "STARCODER",
    "DBRX": "LLAMA3", "SMAUG": "LLAMA3", "CHATGLM4": "LLAMA3",
    "STABLELM2": "QWEN2", "HUNYUAN": "QWEN2", "SOLAR_OPEN": "QWEN2", "GROK_2": "QWEN2",
    "MINIMAX_M2": "GPT4O", "PORO": "BLOOM", "GPT3_FINNISH": "BLOOM",
    "HUNYUAN_DENSE": "DEEPSEEK3_LLM", "JOYAI_LLM": "DEEPSEEK3_LLM", "HY_V4": "DEEPSEEK3_LLM",
}  # fmt: skip

# `llama_vocab::impl::load`: (type, flags it sets besides the BPE defaults, tokenizer.ggml.pre names).
# Flags: no_clean (clean_spaces = false), ignore_merges, add_bos, no_bos (no BOS token), add_sep.
_LOADER_ROWS = [
    ("DEFAULT", "", "default"),
    ("LLAMA3", "ignore_merges add_bos",
     "llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano"),
    ("DEEPSEEK_LLM", "no_clean", "deepseek-llm"),
    ("DEEPSEEK_CODER", "no_clean", "deepseek-coder"),
    ("DEEPSEEK3_LLM", "no_clean", "deepseek-v3"),
    ("FALCON", "", "falcon"),
    ("MPT", "", "mpt"),
    ("STARCODER", "", "starcoder"),
    ("GPT2", "", "gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert"),
    ("GPT2", "add_sep", "jina-v1-en jina-v2-code roberta-bpe"),
    ("GPT2", "", "exaone4"),
    ("REFACT", "", "refact"),
    ("COMMAND_R", "no_clean", "command-r"),
    ("QWEN2", "no_clean", "qwen2 deepseek-r1-qwen kormo f2llmv2"),
    ("QWEN2", "", "megrez"),
    ("QWEN35", "no_clean", "qwen35"),
    ("STABLELM2", "", "stablelm2"),
    ("OLMO", "", "olmo"),
    ("DBRX", "", "dbrx"),
    ("SMAUG", "", "smaug-bpe"),
    ("PORO", "no_clean", "poro-chat"),
    ("CHATGLM4", "no_bos", "glm4 chatglm-bpe"),
    ("VIKING", "no_clean", "viking"),
    ("JAIS", "", "jais"),
    ("TEKKEN", "no_clean ignore_merges add_bos", "tekken"),
    ("SMOLLM", "no_clean", "smollm"),
    ("CODESHELL", "", "codeshell"),
    ("BLOOM", "", "bloom"),
    ("GPT3_FINNISH", "", "gpt3-finnish"),
    ("EXAONE", "", "exaone"),
    ("MINERVA", "", "minerva-7b"),
    ("GPT4O", "no_clean", "gpt-4o llama4 kanana2 talkie"),
    ("TRILLION", "no_clean", "trillion"),
    ("GRANITE_DOCLING", "no_clean", "granite-docling"),
    ("BAILINGMOE", "no_clean", "bailingmoe bailingmoe2 llada-moe"),
    ("SEED_CODER", "no_clean", "seed-coder"),
    ("HUNYUAN", "no_clean", "hunyuan"),
    ("HUNYUAN_DENSE", "no_clean", "hunyuan-dense"),
    ("HY_V4", "no_clean", "hy_v4"),
    ("JOYAI_LLM", "no_clean", "joyai-llm"),
    ("GROK_2", "no_clean", "grok-2"),
    ("MINIMAX_M2", "no_clean", "minimax-m2"),
    ("SOLAR_OPEN", "no_clean", "solar-open"),
    ("MELLUM2", "", "mellum2"),
]  # fmt: skip
LOADER: dict[str, tuple[str, frozenset[str]]] = {
    name: (kind, frozenset(flags.split())) for kind, flags, names in _LOADER_ROWS for name in names.split()
}
# names llama.cpp's loader knows whose regexes (or whole algorithm) toycards does not implement
UNSUPPORTED = frozenset(
    "minicpm5 spark2_5 youtu jais-2 gemma4 granite-embed-multi-311m sarvam-moe whitespace exaone-moe "
    "chameleon granite-embed-multi-97m tiny_aya cohere2moe superbpe kimi-k2 ufakzeka afmoe laguna".split()
)


def regexes_of(kind: str) -> tuple[str, ...]:
    return REGEXES[SAME_REGEXES.get(kind, kind)]


# the hand-written matchers (unicode_regex_split_custom) and the regex each one implements
_CUSTOM = {REGEXES["GPT2"][0]: REGEXES["GPT2"][0] + r"|\s+", REGEXES["LLAMA3"][0]: REGEXES["LLAMA3"][0]}
# Unicode's White_Space property (PropList.txt), which llama.cpp's is_whitespace holds
WHITE_SPACE = frozenset(
    [
        *range(0x09, 0x0E),
        0x20,
        0x85,
        0xA0,
        0x1680,
        *range(0x2000, 0x200B),
        0x2028,
        0x2029,
        0x202F,
        0x205F,
        0x3000,
    ]
)
# the collapsed text's byte for each category, and the ASCII members its `\p{X}` keeps (k_ucat_map)
_CATEGORY_BYTE = {"N": "\xd1", "L": "\xd2", "P": "\xd3", "M": "\xd4", "S": "\xd5"}
_ASCII_MEMBERS = {"N": "0-9", "L": "A-Za-z", "P": r"!-#%-*,-/:-;?-@\[-\]_\{\}", "M": "", "S": r"\$\+<->\^`\|"}


def _collapse_char(c: str) -> str:
    if ord(c) < 0x80:
        return c
    if ord(c) in WHITE_SPACE:
        return "\v"
    return _CATEGORY_BYTE.get(unicodedata.category(c)[0], "\xd0")


def collapse_text(text: str) -> str:
    """llama.cpp's collapsed copy of `text`, one character per character.

    >>> collapse_text("a é1٣ 。\\u3000~")
    'a Ò1Ñ Ó\\x0b~'
    """
    return "".join(map(_collapse_char, text))


def collapse_regex(expr: str) -> str:
    """llama.cpp's rewrite of a regex for the collapsed text: each `\\p{X}` becomes X's byte and
    ASCII members, in brackets unless it already stands in a bracket expression.

    >>> collapse_regex(r"\\p{N}+|[^\\s\\p{S}]")
    '[Ñ0-9]+|[^\\\\sÕ\\\\$\\\\+<->\\\\^`\\\\|]'
    """
    out, inside, i = [], False, 0
    while i < len(expr):
        c = expr[i]
        if c == "[" and (i == 0 or expr[i - 1] != "\\"):
            inside = True
        elif c == "]" and inside and expr[i - 1] != "\\":
            inside = False
        elif expr.startswith("\\p{", i) and expr[i + 4 : i + 5] == "}":
            members = _CATEGORY_BYTE[expr[i + 3]] + _ASCII_MEMBERS[expr[i + 3]]
            out.append(members if inside else f"[{members}]")
            i += 5
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _as_llama_cpp_runs_it(text: str, expr: str) -> tuple[str, str]:
    """The text and the regex that llama.cpp really matches when a family lists `expr`."""
    if expr in _CUSTOM:
        return text, _CUSTOM[expr]
    if any(f"\\p{{{x}}}" in expr for x in _CATEGORY_BYTE):
        return collapse_text(text), collapse_regex(expr)
    return "".join("\v" if ord(c) >= 0x80 and ord(c) in WHITE_SPACE else c for c in text), expr


@cache
def _splitter(pattern: str) -> pre_tokenizers.Split:
    return pre_tokenizers.Split(Regex(pattern), behavior="isolated")


def llama_cpp_split(text: str, regexes: Sequence[str]) -> list[str]:
    """Pre-tokenize `text` as llama.cpp does with a family's `regexes`, each run by `tokenizers`.

    >>> llama_cpp_split("Hi  12", REGEXES["STARCODER"])
    ['Hi', '  ', '1', '2']
    """
    spans = [(0, len(text))] if text else []
    for expr in regexes:
        view, split = _as_llama_cpp_runs_it(text, expr)
        splitter = _splitter(split)
        spans = [
            (start + a, start + b)
            for start, end in spans
            for _, (a, b) in splitter.pre_tokenize_str(view[start:end])
        ]
    return [text[a:b] for a, b in spans]


_FIXED = {
    gguf.GGUFValueType.UINT8: "B", gguf.GGUFValueType.INT8: "b", gguf.GGUFValueType.UINT16: "H",
    gguf.GGUFValueType.INT16: "h", gguf.GGUFValueType.UINT32: "I", gguf.GGUFValueType.INT32: "i",
    gguf.GGUFValueType.UINT64: "Q", gguf.GGUFValueType.INT64: "q", gguf.GGUFValueType.FLOAT32: "f",
    gguf.GGUFValueType.FLOAT64: "d", gguf.GGUFValueType.BOOL: "?",
}  # fmt: skip


class _Cursor:
    """Reads little-endian GGUF values from `data`, front to back."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        (value,) = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return value

    def string(self) -> str:
        n = self.take("Q")
        self.pos += n
        return self.data[self.pos - n : self.pos].decode("utf-8")

    def value(self, kind: int):
        if kind == gguf.GGUFValueType.STRING:
            return self.string()
        if kind == gguf.GGUFValueType.ARRAY:
            elem, n = self.take("I"), self.take("Q")
            return [self.value(elem) for _ in range(n)]
        return self.take(_FIXED[kind])


@cache
def gguf_metadata(path: Path) -> dict[str, object]:
    """The key-value section of a GGUF v2/v3 file (gguf-py's GGUFReader takes seconds to index a
    100k-token vocabulary; this reads only what the oracle needs, in a fraction of that)."""
    cursor = _Cursor(Path(path).read_bytes())
    assert cursor.take("4s") == b"GGUF" and cursor.take("I") in (2, 3), path
    _, n_kv = cursor.take("Q"), cursor.take("Q")  # tensor count, key-value count
    return {cursor.string(): cursor.value(cursor.take("I")) for _ in range(n_kv)}


@cache
def hf_bpe(path: Path, ignore_merges: bool = False) -> Tokenizer:
    """A byte-level BPE `tokenizers.Tokenizer` from a GGUF vocabulary: its tokens and merges (a merge
    splits at its first space after the first character, as llama.cpp reads it), no pre-tokenizer
    regex (`encode(pieces, is_pretokenized=True)` takes pieces from `llama_cpp_split`)."""
    meta = gguf_metadata(path)
    tokens, merges = meta[gguf.Keys.Tokenizer.LIST], meta[gguf.Keys.Tokenizer.MERGES]
    pairs = [(m[: m.find(" ", 1)], m[m.find(" ", 1) + 1 :]) for m in merges]  # type: ignore[union-attr]
    vocab = {t: i for i, t in enumerate(tokens)}  # type: ignore[arg-type]
    tok = Tokenizer(models.BPE(vocab, pairs, ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    return tok


def recorded_cases(path: Path) -> list[tuple[str, list[int]]]:
    """llama.cpp's test strings for a vocabulary file and the ids it recorded for each (`X.gguf.inp`:
    strings separated by a line `__ggml_vocab_test__`; `X.gguf.out`: one line of ids per string)."""
    texts = path.with_suffix(".gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    lines = path.with_suffix(".gguf.out").read_text(encoding="utf-8").split("\n")
    if len(texts) != len(lines):
        raise ValueError(f"{path.name}: {len(texts)} test strings but {len(lines)} lines of ids")
    return [(text, [int(x) for x in line.split()]) for text, line in zip(texts, lines)]


def hf_ids(tok: Tokenizer, pieces: list[str]) -> list[int]:
    """Token ids of pre-tokenized `pieces`, each merged on its own."""
    return tok.encode(pieces, is_pretokenized=True, add_special_tokens=False).ids if pieces else []
