"""SentencePiece BPE (`tokenizer.ggml.model = "llama"`), as llama.cpp runs it.

Owns: merging the characters of an escaped text by token score (`llm_tokenizer_spm_session`),
byte fallback to `<0xNN>` tokens, and turning a token back into bytes.
Leaves out: the leading-space rule and special tokens (tokenizer/tokenizer.py decides what text
reaches `SentencePiece.encode`), and the unigram (T5) model.

The text handed in is already escaped: spaces are `▁` (U+2581), and llama.cpp prefixes one
`▁` when the text starts a fragment (`add_space_prefix`). Merging starts from single
characters; at each step the adjacent pair whose concatenation is the *highest-scoring* token
merges (leftmost on ties). A final symbol that is no token is written as its UTF-8 bytes.
Example with the Llama 2 vocabulary::

    "▁Hello▁world"  →  ["▁Hello", "▁world"]  →  [15043, 3186]
    "▁😁"          →  ["▁", "😁"]  →  [29871, <0xF0>, <0x9F>, <0x98>, <0x81>]
"""

from __future__ import annotations

from toycards.tokenizer.merge import merge_pairs

SPACE = "\u2581"  # ▁, SentencePiece's visible space


def byte_token_text(byte: int) -> str:
    """'<0x0A>' for byte 10: the text of a SentencePiece byte-fallback token."""
    return f"<0x{byte:02X}>"


def parse_byte_token(text: str) -> int | None:
    """Inverse of `byte_token_text`; None when `text` is not of that form.

    >>> parse_byte_token("<0x0A>"), parse_byte_token("<s>")
    (10, None)
    """
    if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
        try:
            return int(text[3:5], 16)
        except ValueError:
            return None
    return None


class SentencePiece:
    """Encode escaped text with a SentencePiece BPE vocabulary of token texts and scores."""

    def __init__(self, token_to_id: dict[str, int], scores: list[float], unk_id: int | None):
        self.token_to_id = token_to_id
        self.scores = scores
        self.unk_id = unk_id
        self.byte_ids = [self._byte_id(b) for b in range(256)]

    def _byte_id(self, byte: int) -> int | None:
        """llama.cpp's `byte_to_token`: the `<0xNN>` token, else the one-byte token, else none."""
        tid = self.token_to_id.get(byte_token_text(byte))
        if tid is None and byte < 0x80:
            tid = self.token_to_id.get(chr(byte))
        return tid

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for symbol in self.merge(text):
            tid = self.token_to_id.get(symbol)
            if tid is not None:
                ids.append(tid)
                continue
            for byte in symbol.encode("utf-8"):
                tid = self.byte_ids[byte]
                if tid is None:
                    tid = self.unk_id
                if tid is not None:
                    ids.append(tid)
        return ids

    def merge(self, text: str) -> list[str]:
        """Merge characters, highest token score first, leftmost on ties
        (llama.cpp's `llm_tokenizer_spm_session`)."""
        token_to_id, scores = self.token_to_id, self.scores

        def priority(a: str, b: str) -> float | None:
            tid = token_to_id.get(a + b)
            return None if tid is None else -scores[tid]

        return merge_pairs(list(text), priority)
