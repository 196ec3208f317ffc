"""WordPiece (`tokenizer.ggml.model = "bert"`), as llama.cpp runs it (llama-vocab.cpp, WPM).

Owns: splitting a text into words as llama.cpp's `llm_tokenizer_wpm_session::preprocess` does
(BertNormalizer's options: accents stripped after NFD, lowercase; whitespace ends a word,
punctuation, ASCII symbols and CJK ideographs are words of their own, NUL, U+FFFD and control
characters are dropped) and the greedy longest-match of each word against the vocabulary.
Leaves out: the [CLS] … [SEP] around a text and special tokens inside it (tokenizer/tokenizer.py).

A file stores a BERT vocabulary in "phantom space" form (the converter's BertModel.set_vocab): the
first piece of a word carries `▁` (vocab.txt's `hello` is `▁hello`), a continuation drops its `##`
(`##ing` is `ing`). So a word is matched as `▁` + word, from the left, longest token first, in
bytes; a word with a position no token matches becomes one [UNK]::

    "Hello, playing!"  →  ["hello", ",", "playing", "!"]  →  ["▁hello", "▁,", "▁play", "ing", "▁!"]

Unicode facts come from Python's `unicodedata` (its Unicode version, not llama.cpp's tables): a
code point introduced between the two can differ.
"""

from __future__ import annotations

import unicodedata

from toycards.tokenizer.spm import SPACE

# llama.cpp's unicode whitespace (the White_Space property), which ends a word
WHITESPACE = frozenset(
    (*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F,
     0x3000)
)  # fmt: skip
# llama.cpp's is_chinese_char: CJK ideograph blocks (0x2B920 where the Rust tokenizers start it)
CJK = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)  # fmt: skip
CONTROL = ("Cc", "Cf", "Cs", "Co")  # llama.cpp's \p{C} flag: unassigned code points are not in it


def is_cjk(cpt: int) -> bool:
    return any(lo <= cpt <= hi for lo, hi in CJK)


def lower(ch: str) -> str:
    """One code point's lowercase, one code point (llama.cpp's `unicode_tolower`, the simple case
    mapping): `"İ"` is `"i"`, where `str.lower` adds a combining dot."""
    low = ch.lower()
    return low[0] if low else ch


def words(text: str, lowercase: bool = True, strip_accents: bool = True) -> list[str]:
    """The words WordPiece matches, by llama.cpp's `preprocess`.

    >>> words("Hello, Café  中文!")
    ['hello', ',', 'cafe', '中', '文', '!']
    >>> words("Café", lowercase=False, strip_accents=False)
    ['Café']
    """
    if strip_accents:
        text = unicodedata.normalize("NFD", text)
    out = [""]
    for ch in text:
        cpt = ord(ch)
        if cpt in WHITESPACE:
            if out[-1]:
                out.append("")
            continue
        category = unicodedata.category(ch)
        if cpt == 0 or cpt == 0xFFFD or category in CONTROL:
            continue
        if strip_accents and category.startswith("M"):  # llama.cpp's is_accent_mark: \p{M}
            continue
        s = lower(ch) if lowercase else ch
        if category.startswith("P") or (cpt < 0x7F and category.startswith("S")) or is_cjk(cpt):
            if out[-1]:
                out.append("")
            out[-1] = s
            out.append("")
        else:
            out[-1] += s
    if not out[-1]:
        out.pop()
    return out


class WordPiece:
    """Encode text with a WordPiece vocabulary stored in phantom-space form (module docstring).

    `lowercase` and `strip_accents` are BertNormalizer's options, as llama.cpp reads them from
    `tokenizer.ggml.normalizer.lowercase` and `.strip_accents` (both true when absent)."""

    def __init__(self, token_to_id: dict[str, int], unk_id: int | None, lowercase: bool = True,
                 strip_accents: bool = True):  # fmt: skip
        self.by_bytes = {text.encode("utf-8"): tid for text, tid in token_to_id.items()}
        self.max_len = max(map(len, self.by_bytes), default=0)  # llama.cpp's max_token_len, in bytes
        self.unk_id = unk_id
        self.lowercase, self.strip_accents = lowercase, strip_accents

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for word in words(text, self.lowercase, self.strip_accents):
            ids += self.word(word)
        return ids

    def word(self, word: str) -> list[int]:
        """One word's tokens: from the left, the longest token that starts there (`▁` + word, in
        bytes); [UNK] alone where some position starts no token (none without an unknown token)."""
        data = (SPACE + word).encode("utf-8")
        n, i, ids = len(data), 0, []
        while i < n:
            j = min(n, i + self.max_len)
            while j > i and data[i:j] not in self.by_bytes:
                j -= 1
            if j == i:  # llama.cpp discards the word's tokens so far
                return [self.unk_id] if self.unk_id is not None else []
            ids.append(self.by_bytes[data[i:j]])
            i = j
        return ids
