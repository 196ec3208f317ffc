"""Special tokens as llama.cpp treats them (`llama_vocab::impl::load`, `tokenizer_st_partition`).

Owns: the roles llama.cpp finds by token text (eot, eom, fill-in-the-middle), the
end-of-generation set, the token-type adjustments that come with them (an end-of-generation
token becomes a control token, whatever the file says), per-model strip rules (Phi-3), and
cutting special tokens out of a text before it is encoded.
Leaves out: reading ids and flags from metadata, and encoding the text between special
tokens (tokenizer/tokenizer.py).

Cutting, as llama.cpp does it: special tokens are tried longest first; each one splits every
remaining text fragment at all its occurrences. User-defined tokens (type 4) are always cut;
control (3) and unknown (2) tokens only when the caller parses special tokens::

    "<|user|>\\nHi<|end|>"  →  [32010, "\\nHi", 32007]    (Phi-3 also drops the "\\n")
"""

from __future__ import annotations

from collections.abc import Callable

from toycards.gguf.facts import TokenType

T = TokenType

# roles llama.cpp finds by token text when the file leaves them unset (first listed text wins)
ROLE_TEXTS = {
    "eot": ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
            "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"),
    "eom": ("<|eom_id|>",),
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}  # fmt: skip
# tokens that end generation, by text (llama.cpp's `special_eog_ids`)
EOG_TEXTS = frozenset(
    "<|eot_id|> <|im_end|> <|end|> <|return|> <|call|> <|flush|> <|calls|> <end_of_turn> <|endoftext|> "
    "</s> <|eom_id|> <EOT> _<EOT> [EOT] [EOS] <|end_of_text|> <end_of_utterance> <eos> <turn|> "
    "<|tool_response> <｜end▁of▁sentence｜> [e~[".split()
)
EOG_ROLES = ("eos", "eot", "eom", "fim_pad", "fim_rep", "fim_sep")
ALWAYS_RENDERED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")  # gpt-oss: user-defined
SPECIAL_TYPES = (T.CONTROL, T.USER_DEFINED, T.UNKNOWN)
C_SPACE = " \t\n\v\f\r"  # C isspace(), what llama.cpp's lstrip/rstrip attributes strip


def assign_roles_by_text(
    special: dict[str, int | None], token_to_id: dict[str, int], token_type: list[int]
) -> None:
    """Fill unset eot/eom/fim roles in `special` from well-known texts; they become control tokens."""
    for role, texts in ROLE_TEXTS.items():
        if special.get(role) is None:
            special[role] = tid = next((token_to_id[t] for t in texts if t in token_to_id), None)
            if tid is not None:
                token_type[tid] = T.CONTROL


def end_of_generation(
    special: dict[str, int | None], token_to_id: dict[str, int], token_type: list[int]
) -> frozenset[int]:
    """llama.cpp's end-of-generation set (EOG texts, eos/eot/eom, fim pad/rep/sep), adjusting types."""
    eog = {token_to_id[text] for text in EOG_TEXTS if text in token_to_id}
    for tid in eog:
        token_type[tid] = T.CONTROL
    for text in ALWAYS_RENDERED:
        if text in token_to_id:
            token_type[token_to_id[text]] = T.USER_DEFINED
    eog |= {tid for role in EOG_ROLES if (tid := special.get(role)) is not None}
    have = {text for text in EOG_TEXTS if text in token_to_id and token_to_id[text] in eog}
    if "<|end|>" in have and ({"<|return|>", "<|call|>"} <= have or {"<|calls|>", "<|flush|>"} <= have):
        eog.discard(token_to_id["<|end|>"])  # harmony, solar-open: <|end|> ends a message, not the turn
        token_type[token_to_id["<|end|>"]] = T.USER_DEFINED
    if {"<|tool_response>", "</s>"} <= have:  # Gemma 4: </s> is ordinary text
        eog.discard(token_to_id["</s>"])
        token_type[token_to_id["</s>"]] = T.NORMAL
    return frozenset(eog)


def _phi3_rstrip(specials: list[int], token_to_id: dict[str, int]) -> set[int]:
    """Phi-3: whitespace right of every special token and </s> is dropped, except <unk> <s> <|endoftext|>."""
    ids = set(specials) | {token_to_id[t] for t in ("</s>",) if t in token_to_id}
    return ids - {token_to_id[t] for t in ("<unk>", "<s>", "<|endoftext|>") if t in token_to_id}


# lower-cased `general.name` substring → token ids with llama.cpp's RSTRIP attribute
RSTRIP_RULES: dict[str, Callable[[list[int], dict[str, int]], set[int]]] = {
    "phi-3": _phi3_rstrip,
    "phi3": _phi3_rstrip,
}


def _by_first_char(ids: list[int], tokens: list[str]) -> dict[str, list[tuple[int, int]]]:
    """(position in `ids`, id) of each token, grouped by the token's first character."""
    groups: dict[str, list[tuple[int, int]]] = {}
    for at, tid in enumerate(ids):
        groups.setdefault(tokens[tid][0], []).append((at, tid))
    return groups


class SpecialSplitter:
    """Cuts special tokens out of text; built once per vocabulary (after types are adjusted)."""

    def __init__(
        self, tokens: list[str], token_type: list[int], token_to_id: dict[str, int], model_name: str
    ):
        self.tokens = tokens
        normal, special = int(T.NORMAL), frozenset(map(int, SPECIAL_TYPES))
        self.specials = sorted(  # longest first by UTF-8 length, as llama.cpp sorts them
            (i for i, t in enumerate(token_type) if t != normal and t in special),
            key=lambda i: (-len(tokens[i].encode()), i),
        )
        self.user_defined = [i for i in self.specials if token_type[i] == T.USER_DEFINED]
        rule = next((r for name, r in RSTRIP_RULES.items() if name in model_name.lower()), None)
        self.rstrip = rule(self.specials, token_to_id) if rule else set()
        self._by_first = {
            True: _by_first_char(self.specials, tokens),
            False: _by_first_char(self.user_defined, tokens),
        }

    def split(self, text: str, parse_special: bool = False) -> list[str | int]:
        """Raw-text fragments (str) and special token ids (int), in order."""
        fragments: list[str | int] = [text]
        order = self.specials if parse_special else self.user_defined
        if len(order) > 32:  # many tokens (DeepSeek LLM: 2,400): try those whose first character occurs
            by_first = self._by_first[parse_special]
            order = [tid for _, tid in sorted(x for c in set(text) if c in by_first for x in by_first[c])]
        for tid in order:
            piece = self.tokens[tid]
            if any(isinstance(f, str) and piece in f for f in fragments):
                fragments = [g for f in fragments for g in self._cut(f, piece, tid)]
        return fragments

    def _cut(self, fragment: str | int, piece: str, tid: int) -> list[str | int]:
        if isinstance(fragment, int) or piece not in fragment:
            return [fragment]
        out: list[str | int] = []
        start = 0
        while (at := fragment.find(piece, start)) >= 0:
            if at > start:
                out.append(fragment[start:at])
            out.append(tid)
            start = at + len(piece)
            if tid in self.rstrip:
                while start < len(fragment) and fragment[start] in C_SPACE:
                    start += 1
        if start < len(fragment):
            out.append(fragment[start:])
        return out
