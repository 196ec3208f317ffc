"""Minimal, self-consistent tokenizer metadata for the oracle's tiny GGUF files.

Owns: the `tokenizer.ggml.*` keys of a SentencePiece-style ("llama"), a byte-level BPE ("gpt2") and
a WordPiece ("bert": `WPM_VOCAB`) vocabulary of exactly `config.vocab_size` tokens, laid out as
llama.cpp's converter lays them out (tokens, scores for SentencePiece, token types, merges for BPE,
special ids, padding with `[PAD{i}]` tokens of type UNUSED). Leaves out: real vocabularies (see
`../shared/vocab/`) and tokenization itself.
"""

from __future__ import annotations

from typing import Any

import gguf

VT = gguf.GGUFValueType
TT = gguf.TokenType
TK = gguf.Keys.Tokenizer

# Byte-level BPE merges over GPT-2's byte alphabet (Ġ is the space byte); each merge's parts are
# single bytes or earlier merges, so any prefix of this list is a valid merge table.
BPE_MERGES = (
    "Ġ t", "h e", "i n", "e r", "a n", "Ġ a", "r e", "o n", "Ġt he", "e n", "a t", "o r", "e s",
    "Ġ s", "Ġ w", "i s", "i t", "Ġ o", "Ġ c", "in g", "e d", "Ġ f", "n d", "Ġ b", "o u", "Ġ p",
    "a r", "Ġ m", "a l", "l e", "Ġ h",
)  # fmt: skip

# SentencePiece pieces after the specials, "▁" and the printable ASCII characters.
SPM_PIECES = (
    "▁t", "he", "▁a", "in", "er", "▁th", "▁the", "an", "re", "on", "▁s", "en", "at", "or", "▁w",
    "es", "is", "it", "▁o", "▁c", "ing", "ed", "▁f", "nd", "▁b", "ou", "▁p", "ar", "▁m", "al",
    "le", "▁h", "▁i", "▁to", "▁and",
)  # fmt: skip


def byte_alphabet() -> list[str]:
    """GPT-2's reversible byte → character map, as a list indexed by byte value.

    Printable Latin-1 bytes stand for themselves; the other 68 take code points 256, 257, … in
    byte order, so the space byte 32 becomes "Ġ" (U+0120).

    >>> alphabet = byte_alphabet()
    >>> alphabet[ord("A")], alphabet[32], alphabet[0], len(set(alphabet))
    ('A', 'Ġ', 'Ā', 256)
    """
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    shifted = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(shifted)) for b in range(256)]


def _pad(tokens: list[str], types: list[int], n: int) -> None:
    for i in range(len(tokens), n):
        tokens.append(f"[PAD{i}]")
        types.append(TT.UNUSED)


def bpe_vocab_kv(config: Any, pre: str) -> dict[str, tuple[Any, VT]]:
    """A byte-level BPE vocabulary: 256 bytes, merges, `[PAD…]`, and `<|endoftext|>` last.

    >>> kv = bpe_vocab_kv(type("C", (), {"vocab_size": 288, "bos_token_id": 287, "eos_token_id": 287}), "gpt-2")
    >>> tokens = kv["tokenizer.ggml.tokens"][0]
    >>> len(tokens), tokens[256], tokens[-1], kv["tokenizer.ggml.merges"][0][8]
    (288, 'Ġt', '<|endoftext|>', 'Ġt he')
    """
    n_vocab = config.vocab_size
    if n_vocab < 257:
        raise ValueError(f"a byte-level BPE vocabulary needs at least 257 tokens, not {n_vocab}")
    merges = list(BPE_MERGES[: n_vocab - 257])
    tokens = byte_alphabet() + [m.replace(" ", "") for m in merges]
    types = [TT.NORMAL] * len(tokens)
    _pad(tokens, types, n_vocab - 1)
    tokens.append("<|endoftext|>")
    types.append(TT.CONTROL)
    return {
        TK.MODEL: ("gpt2", VT.STRING),
        TK.PRE: (pre, VT.STRING),
        TK.LIST: (tokens, VT.ARRAY),
        TK.TOKEN_TYPE: ([int(t) for t in types], VT.ARRAY),
        TK.MERGES: (merges, VT.ARRAY),
        TK.BOS_ID: (config.bos_token_id, VT.UINT32),
        TK.EOS_ID: (config.eos_token_id, VT.UINT32),
    }


def spm_vocab_kv(config: Any, pre: str, controls: tuple[str, ...] = ()) -> dict[str, tuple[Any, VT]]:
    """A SentencePiece vocabulary: `<unk> <s> </s>`, "▁", printable ASCII, pieces, `[PAD…]`, and
    the control tokens `controls` as its last ids (Phi-3's `<|endoftext|>`, which llama.cpp looks up).

    Scores fall with the id (specials score 0), as in a trained SentencePiece model.

    >>> kv = spm_vocab_kv(type("C", (), {"vocab_size": 128, "bos_token_id": 1, "eos_token_id": 2}), "default")
    >>> tokens = kv["tokenizer.ggml.tokens"][0]
    >>> len(tokens), tokens[:4], tokens[98], kv["tokenizer.ggml.token_type"][0][:4]
    (128, ['<unk>', '<s>', '</s>', '▁'], '▁t', [2, 3, 3, 1])
    """
    n_vocab = config.vocab_size
    specials = ["<unk>", "<s>", "</s>"]
    pieces = ["▁", *(chr(c) for c in range(ord("!"), ord("~") + 1)), *SPM_PIECES]
    tokens = (specials + pieces)[:n_vocab]
    types = [TT.UNKNOWN, TT.CONTROL, TT.CONTROL][: len(tokens)] + [TT.NORMAL] * (len(tokens) - 3)
    _pad(tokens, types, n_vocab)
    if controls:
        tokens[-len(controls) :], types[-len(controls) :] = list(controls), [TT.CONTROL] * len(controls)
    scores = [0.0 if i < 3 else -float(i) for i in range(n_vocab)]
    return {
        TK.MODEL: ("llama", VT.STRING),
        TK.PRE: (pre, VT.STRING),
        TK.LIST: (tokens, VT.ARRAY),
        TK.SCORES: (scores, VT.ARRAY),
        TK.TOKEN_TYPE: ([int(t) for t in types], VT.ARRAY),
        TK.BOS_ID: (config.bos_token_id, VT.UINT32),
        TK.EOS_ID: (config.eos_token_id, VT.UINT32),
        TK.UNK_ID: (0, VT.UINT32),
        TK.ADD_BOS: (True, VT.BOOL),
        TK.ADD_EOS: (False, VT.BOOL),
    }


# A BERT (WordPiece) vocabulary as a vocab.txt lists it: the five specials, then punctuation, digits,
# letters and their `##` continuations, and a few whole words and suffixes (uncased, accents stripped,
# as BertTokenizer normalises: "café" reads as "cafe"); two CJK characters, which are words of their own.
WPM_VOCAB = (
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    *".,!?'-()$+:;", *"0123456789", *"abcdefghijklmnopqrstuvwxyz",
    *(f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz0123456789"),
    "the", "is", "hello", "world", "to", "and", "of", "un", "play", "cat", "dog", "cafe", "new",
    "york", "##able", "##ing", "##ed", "##er", "##ly", "中", "文",
)  # fmt: skip
WPM_SPECIALS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}


def wpm_phantom(token: str, special: bool) -> str:
    """BertModel.set_vocab's "phantom space" spelling: a word's first piece gains "▁", a `##`
    continuation loses its `##`, special tokens stay as they are.

    >>> wpm_phantom("hello", False), wpm_phantom("##ing", False), wpm_phantom("[CLS]", True)
    ('▁hello', 'ing', '[CLS]')
    """
    if special:
        return token
    return token[2:] if token.startswith("##") else "\u2581" + token


def wpm_vocab_kv(config: Any, pre: str) -> dict[str, tuple[Any, VT]]:
    """WPM_VOCAB as llama.cpp's BertModel writes a vocabulary (tokenizer.ggml.model "bert"): the
    phantom-space tokens, the specials as CONTROL (they are the tokenizer's added special tokens),
    the token-type count, and what gguf's SpecialVocab reads from a BERT tokenizer.json
    (TemplateProcessing `[CLS] $A [SEP]`): bos = [CLS], eos = [SEP] (the tokenizer has no bos/eos of
    its own), add_bos and add_eos true, and the unk, sep, pad and mask ids (gguf 0.19 writes no cls id).

    >>> kv = wpm_vocab_kv(type("C", (), {"vocab_size": len(WPM_VOCAB), "type_vocab_size": 2}), "bert-bge")
    >>> tokens = kv["tokenizer.ggml.tokens"][0]
    >>> tokens[:3], tokens[5], tokens[WPM_VOCAB.index("##ing")], kv["tokenizer.ggml.bos_token_id"][0]
    (['[PAD]', '[UNK]', '[CLS]'], '▁.', 'ing', 2)
    """
    if config.vocab_size != len(WPM_VOCAB):
        raise ValueError(f"the WordPiece vocabulary has {len(WPM_VOCAB)} tokens, not {config.vocab_size}")
    specials = set(WPM_SPECIALS.values())
    tokens = [wpm_phantom(t, t in specials) for t in WPM_VOCAB]
    types = [TT.CONTROL if t in specials else TT.NORMAL for t in WPM_VOCAB]
    ids = {role: WPM_VOCAB.index(text) for role, text in WPM_SPECIALS.items()}
    return {
        TK.MODEL: ("bert", VT.STRING),
        TK.PRE: (pre, VT.STRING),
        TK.LIST: (tokens, VT.ARRAY),
        TK.TOKEN_TYPE: ([int(t) for t in types], VT.ARRAY),
        TK.TOKEN_TYPE_COUNT: (config.type_vocab_size, VT.UINT32),
        TK.BOS_ID: (ids["cls"], VT.UINT32),
        TK.EOS_ID: (ids["sep"], VT.UINT32),
        TK.UNK_ID: (ids["unk"], VT.UINT32),
        TK.SEP_ID: (ids["sep"], VT.UINT32),
        TK.PAD_ID: (ids["pad"], VT.UINT32),
        TK.MASK_ID: (ids["mask"], VT.UINT32),
        TK.ADD_BOS: (True, VT.BOOL),
        TK.ADD_EOS: (True, VT.BOOL),
    }
