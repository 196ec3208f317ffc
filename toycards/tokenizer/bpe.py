"""Byte-level BPE (`tokenizer.ggml.model = "gpt2"`), as llama.cpp runs it.

Owns: the table of pre-tokenizers keyed by `tokenizer.ggml.pre` (llama.cpp's regex lists
and per-family flags), splitting text into words with them, GPT-2's byte ↔ unicode
alphabet, merging each word by merge rank, and turning a normal token's text back into bytes.
Leaves out: special tokens, BOS/EOS and the public API (tokenizer/tokenizer.py), and the
SentencePiece-style BPE of Gemma 3n/4 (`escape_whitespaces`), which llama.cpp treats apart.

How llama.cpp pre-tokenizes (`unicode_regex_split`): the regexes of a family are applied in
turn; each one splits every piece left by the previous one into its matches *and* the gaps
between matches. Each regex sees one piece at a time, so a look-ahead like `\\s+(?!\\S)`
cannot look past the end of its piece. Example for "starcoder" (`\\p{N}` first, then GPT-2's)::

    "ab  12"  →  ["ab  ", "1", "2"]  →  ["ab", "  ", "1", "2"]

llama.cpp derives its `\\p{L}`, `\\p{N}`, … tables from the `regex` package, so running the
same expressions through `regex` gives the same splits, with two of llama.cpp's own rules kept
here: its regexes see non-ASCII whitespace as "\\v" (`_NON_ASCII_SPACE`), and its `\\p{S}` has
no "~" (`_SYMBOL`). tests/tokenizer/test_tokenizer_pre.py checks every family against llama.cpp's rules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial

import regex

from toycards.tokenizer.merge import merge_pairs

_CONTRACTIONS = r"'s|'t|'re|'ve|'m|'ll|'d"
_CONTRACTIONS_ANY_CASE = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

# GPT-2's expression; llama.cpp spells it without the final `|\s+` but its hand-written matcher
# for it ends with that alternative, so it is written out here.
_GPT2 = _CONTRACTIONS + r"| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (
    _CONTRACTIONS_ANY_CASE
    + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    _CONTRACTIONS_ANY_CASE
    + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN35 = (
    _CONTRACTIONS_ANY_CASE
    + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# "upper* lower+ | upper+ lower*" where a letter outside a-z counts as both, as in llama.cpp
_UPPER, _LOWER = r"(?:(?=\p{L})[^a-z])", r"(?:(?=\p{L})[^A-Z])"


def _cased_words(suffix: str) -> str:
    lead = r"[^\r\n\p{L}\p{N}]?"
    return f"{lead}{_UPPER}*{_LOWER}+{suffix}|{lead}{_UPPER}+{_LOWER}*{suffix}"


_GPT4O = (
    _cased_words(_CONTRACTIONS_ANY_CASE + "?")
    + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_TEKKEN = _cased_words("") + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_BLOOM = r" ?[^(\s|.,!?…。，、।۔،)]+"


def _char_class(items: str) -> str:
    """A regex character class from hex code points and ranges, as regex text.

    >>> _char_class("0041-005A 00B5")
    '[A-Zµ]'
    """

    def one(item: str) -> str:
        lo, _, hi = item.partition("-")
        return chr(int(lo, 16)) + (f"-{chr(int(hi, 16))}" if hi else "")

    return "[" + "".join(one(item) for item in items.split()) + "]"


# DeepSeek LLM's letters, as its tokenizer.json lists them: the cased letters of an older Unicode,
# incomplete (no lower-case Armenian or Georgian; Latin Extended-D only to U+A78E).
_DEEPSEEK_LETTERS = _char_class(
    """
    0041-005A 0061-007A 00B5 00C0-00D6 00D8-00F6 00F8-01BA 01BC-01BF 01C4-0293 0295-02AF 0370-0373
    0376 0377 037B-037D 037F 0386 0388-038A 038C 038E-03A1 03A3-03F5 03F7-0481 048A-052F 0531-0556
    10A0-10C5 13A0-13F5 13F8-13FD 1C90-1CBA 1CBD-1CBF 1D00-1D2B 1D6B-1D77 1D79-1D9A 1E00-1F15
    1F18-1F1D 1F20-1F45 1F48-1F4D 1F50-1F57 1F59 1F5B 1F5D 1F5F-1F7D 1F80-1FB4 1FB6-1FBC 1FBE
    1FC2-1FC4 1FC6-1FCC 1FD0-1FD3 1FD6-1FDB 1FE0-1FEC 1FF2-1FF4 1FF6-1FFC 2102 2107 210A-2113 2115
    2119-211D 2124 2126 2128 212A-212D 212F-2134 2139 213C-213F 2145-2149 214E 2183 2184 2C00-2C7B
    2C7E-2CE4 2CEB-2CEE 2CF2 2CF3 A640-A66D A680-A69B A722-A76F A771-A787 A78B-A78E AB70-ABBF
    FB00-FB06 FB13-FB17 FF21-FF3A FF41-FF5A 10400-1044F 104B0-104D3 104D8-104FB 10C80-10CB2
    10CC0-10CF2 118A0-118DF 1E900-1E943
    """
)
# DeepSeek's "CJK" ranges, verbatim: 4E00–9FA5, everything from U+0800 to U+4E00, Hangul syllables
_DEEPSEEK_CJK = r"[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
# llama.cpp's \p{S} leaves out "~": for a regex with \p{…} it matches a "collapsed" copy of the text
# in which \p{S} becomes the ASCII symbols it lists, $+<=>^`| (unicode.cpp, k_ucat_map)
_SYMBOL = r"[^\P{S}~]"

# regex lists per pre-tokenizer family (llama.cpp's LLAMA_VOCAB_PRE_TYPE_*), applied in order
REGEX_FAMILIES: dict[str, tuple[str, ...]] = {
    "default": (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"),
    "gpt2": (_GPT2,),
    "starcoder": (r"\p{N}", _GPT2),
    "falcon": (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]"),
    "llama3": (_LLAMA3,),
    "qwen2": (_QWEN2,),
    "qwen35": (_QWEN35,),
    "gpt4o": (_GPT4O,),
    "tekken": (_TEKKEN,),
    "bloom": (_BLOOM,),
    "viking": (_BLOOM, r"\p{N}"),
    "deepseek-llm": (
        r"[\r\n]",
        r"\s?" + _DEEPSEEK_LETTERS + "+",
        r"\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
        r"\s+$",
        _DEEPSEEK_CJK,
        r"\p{N}+",
    ),
    "deepseek-coder": (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _DEEPSEEK_CJK, r"\p{N}"),
    "deepseek-v3": (
        r"\p{N}{1,3}",
        r"[一-龥぀-ゟ゠-ヿ]+",
        # llama.cpp's [^\r\n\p{L}\p{P}\p{S}] and [\p{P}\p{S}], with its \p{S} (no "~")
        r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|(?:[^\r\n\p{L}\p{P}\p{S}]|~)?[\p{L}\p{M}]+"
        rf"| ?(?:\p{{P}}|{_SYMBOL})+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "seed-coder": (
        _CONTRACTIONS_ANY_CASE
        + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "bailingmoe": (
        r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
    ),
}


@dataclass(frozen=True)
class PreTokenizer:
    """What one `tokenizer.ggml.pre` value selects in llama.cpp (`llama_vocab::impl::load`)."""

    family: str  # key of REGEX_FAMILIES
    clean_spaces: bool = True  # llama_detokenize's clean-up of " ," " 's" … (HF clean_up_tokenization_spaces)
    ignore_merges: bool = False  # a word that is itself a token is taken whole (Llama 3, Tekken)
    add_bos: bool = False  # default for tokenizer.ggml.add_bos_token
    has_bos: bool = True  # False: the family has no BOS token (ChatGLM)


def _rows(names: str, pre: PreTokenizer) -> dict[str, PreTokenizer]:
    return dict.fromkeys(names.split(), pre)


_NO_CLEAN = {"clean_spaces": False}
# tokenizer.ggml.pre → pre-tokenizer; an absent or empty value means "default"
PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    **_rows("default", PreTokenizer("default")),
    **_rows(
        "gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert "
        "jina-v1-en jina-v2-code roberta-bpe exaone4 mpt olmo jais",
        PreTokenizer("gpt2"),
    ),
    **_rows("trillion granite-docling", PreTokenizer("gpt2", **_NO_CLEAN)),
    **_rows("starcoder refact codeshell exaone minerva-7b mellum2", PreTokenizer("starcoder")),
    **_rows("command-r smollm", PreTokenizer("starcoder", **_NO_CLEAN)),
    **_rows("falcon", PreTokenizer("falcon")),
    **_rows(
        "llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
        PreTokenizer("llama3", ignore_merges=True, add_bos=True),
    ),
    **_rows("dbrx smaug-bpe", PreTokenizer("llama3")),
    **_rows("glm4 chatglm-bpe", PreTokenizer("llama3", has_bos=False)),
    **_rows(
        "qwen2 deepseek-r1-qwen kormo f2llmv2 hunyuan solar-open grok-2", PreTokenizer("qwen2", **_NO_CLEAN)
    ),
    **_rows("megrez stablelm2", PreTokenizer("qwen2")),
    **_rows("qwen35", PreTokenizer("qwen35", **_NO_CLEAN)),
    **_rows("gpt-4o llama4 kanana2 talkie minimax-m2", PreTokenizer("gpt4o", **_NO_CLEAN)),
    **_rows("tekken", PreTokenizer("tekken", clean_spaces=False, ignore_merges=True, add_bos=True)),
    **_rows("bloom gpt3-finnish", PreTokenizer("bloom")),
    **_rows("poro-chat", PreTokenizer("bloom", **_NO_CLEAN)),
    **_rows("viking", PreTokenizer("viking", **_NO_CLEAN)),
    **_rows("deepseek-llm", PreTokenizer("deepseek-llm", **_NO_CLEAN)),
    **_rows("deepseek-coder", PreTokenizer("deepseek-coder", **_NO_CLEAN)),
    **_rows("deepseek-v3 hunyuan-dense joyai-llm hy_v4", PreTokenizer("deepseek-v3", **_NO_CLEAN)),
    **_rows("seed-coder", PreTokenizer("seed-coder", **_NO_CLEAN)),
    **_rows("bailingmoe bailingmoe2 llada-moe", PreTokenizer("bailingmoe", **_NO_CLEAN)),
}


# llama.cpp matches a regex that has no \p{…} with std::wregex, whose \s is ASCII-only, so it first
# turns every non-ASCII whitespace character into "\v"; its collapsed text (see _SYMBOL) does the
# same. Only where a regex names such a character does it matter: DeepSeek's ranges U+0800–U+4E00
# and U+3000–U+3002 hold U+3000, U+2003, …, which llama.cpp therefore never matches with them. The
# other families' regexes cannot tell such a space from "\v" (\s takes both, \p{…} neither), so
# they skip the substitution; the oracle tests, which substitute for every family, check that.
_NON_ASCII_SPACE = regex.compile(r"[^\x00-\x7f\S]")
_SPACE_SENSITIVE = frozenset({"deepseek-llm", "deepseek-coder"})


def _split(patterns: tuple[regex.Pattern, ...], text: str) -> list[str]:
    pieces = [text] if text else []
    for pattern in patterns:
        out: list[str] = []
        for piece in pieces:
            end = 0
            for m in pattern.finditer(piece):
                if m.start() > end:
                    out.append(piece[end : m.start()])
                if m.end() > m.start():
                    out.append(m.group())
                end = max(end, m.end())
            if end < len(piece):
                out.append(piece[end:])
        pieces = out
    return pieces


def _split_seeing_spaces_as_vt(patterns: tuple[regex.Pattern, ...], text: str) -> list[str]:
    """`_split` on a copy of `text` with non-ASCII whitespace as "\\v"; the pieces come from `text`."""
    view, folded = (text, 0) if text.isascii() else _NON_ASCII_SPACE.subn("\v", text)
    pieces = _split(patterns, view)
    if not folded:
        return pieces
    out, start = [], 0
    for piece in pieces:
        out.append(text[start : start + len(piece)])
        start += len(piece)
    return out


@cache
def splitter(family: str) -> Callable[[str], list[str]]:
    """The function that pre-tokenizes text with a regex family (see `split_words`)."""
    patterns = tuple(regex.compile(expr) for expr in REGEX_FAMILIES[family])
    return partial(_split_seeing_spaces_as_vt if family in _SPACE_SENSITIVE else _split, patterns)


def split_words(text: str, family: str) -> list[str]:
    """Pre-tokenize `text` with a regex family: matches and the gaps between them, in order.

    >>> split_words("Hello, world!  12", "gpt2")
    ['Hello', ',', ' world', '!', ' ', ' 12']
    >>> split_words("Hello, world!  12", "starcoder")
    ['Hello', ',', ' world', '!', '  ', '1', '2']
    """
    return splitter(family)(text)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable alphabet: bytes 0x21–0x7E, 0xA1–0xAC, 0xAE–0xFF map to themselves,
    the other 68 bytes to U+0100, U+0101, … in order.

    >>> m = bytes_to_unicode(); m[ord("A")], m[ord(" ")], m[ord("\\n")]
    ('A', 'Ġ', 'Ċ')
    """
    kept = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    moved = [b for b in range(256) if b not in kept]
    table = {b: chr(b) for b in kept}
    table.update({b: chr(0x100 + n) for n, b in enumerate(moved)})
    return table


BYTE_TO_UNICODE = bytes_to_unicode()
UNICODE_TO_BYTE = {c: b for b, c in BYTE_TO_UNICODE.items()}
_BYTE_CHARS = [BYTE_TO_UNICODE[b] for b in range(256)]


def token_bytes(text: str) -> bytes:
    """The bytes a normal byte-level BPE token stands for: 'Ġworld' → b' world'.

    Characters outside the GPT-2 alphabet (malformed vocabularies) are kept as UTF-8.
    """
    return b"".join(bytes([UNICODE_TO_BYTE[c]]) if c in UNICODE_TO_BYTE else c.encode() for c in text)


def parse_merges(merges: list[str]) -> dict[str, int]:
    """Rank of each merge by its own text ("left right"), the first rank where one repeats
    (llama.cpp's `emplace` keeps the first). Keyed by the file's strings themselves, not by a pair
    of new ones: a vocabulary of tens of thousands of merges then costs one dict, not a tuple of two
    new strings a merge.
    `merge_rank` looks a pair up.

    >>> parse_merges(["Ġ t", "h e", "Ġ t"])
    {'Ġ t': 0, 'h e': 1}
    """
    return dict(zip(reversed(merges), range(len(merges) - 1, -1, -1)))  # built last to first: the first stays


def merge_rank(ranks: dict[str, int], left: str, right: str) -> int | None:
    """The rank of merging `left` and `right`, or None. llama.cpp splits a merge at its first space
    after the first character, so the pair's merge is the text "left right" exactly when `left` is
    not empty and has no space after its first character; otherwise that text splits into another
    pair, and this pair is no merge.

    >>> ranks = parse_merges(["Ġ t", "a b c"])
    >>> merge_rank(ranks, "Ġ", "t"), merge_rank(ranks, "a", "b c"), merge_rank(ranks, "a b", "c")
    (0, 1, None)
    """
    if not left or " " in left[1:]:
        return None
    return ranks.get(f"{left} {right}")


# The word cache's bounds: a long-running process (`toycards serve`) meets new words without end,
# and one word can be a whole request's text; repeated words are short and few.
CACHED_WORDS = 1 << 15
CACHED_WORD_CHARS = 64


class ByteBPE:
    """Encode raw text (no special tokens) with a byte-level BPE vocabulary.

    `token_to_id` maps token text to id; `ranks` maps a merge's text to its rank (`parse_merges`);
    `pre` is the pre-tokenizer. Words are cached (up to CACHED_WORDS words of at most
    CACHED_WORD_CHARS characters), so repeated words cost a dict lookup.
    """

    def __init__(self, token_to_id: dict[str, int], ranks: dict[str, int], pre: PreTokenizer):
        self.token_to_id = token_to_id
        self.ranks = ranks
        self.pre = pre
        self._split_words = splitter(pre.family)
        self._cache: dict[str, list[int]] = {}

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for word in self._split_words(text):
            cached = self._cache.get(word)
            if cached is None:
                cached = self._encode_word(word)
                if len(word) <= CACHED_WORD_CHARS and len(self._cache) < CACHED_WORDS:
                    self._cache[word] = cached
            ids += cached
        return ids

    def _encode_word(self, word: str) -> list[int]:
        encoded = "".join(_BYTE_CHARS[b] for b in word.encode("utf-8"))
        if self.pre.ignore_merges and encoded in self.token_to_id:
            return [self.token_to_id[encoded]]
        ids: list[int] = []
        for symbol in self.merge(encoded):
            if symbol in self.token_to_id:
                ids.append(self.token_to_id[symbol])
            else:  # llama.cpp looks each byte up as a one-byte string; only ASCII can match
                ids += [
                    self.token_to_id[chr(c)]
                    for c in symbol.encode()
                    if c < 0x80 and chr(c) in self.token_to_id
                ]
        return ids

    def merge(self, word: str) -> list[str]:
        """Merge the symbols of one byte-encoded word, lowest rank first, leftmost on ties
        (llama.cpp's `llm_tokenizer_bpe_session`)."""
        ranks = self.ranks
        return merge_pairs(list(word), lambda a, b: merge_rank(ranks, a, b))
