"""Tokenizers built from a GGUF file's `tokenizer.ggml.*` metadata, matching llama.cpp.

Owns: reading the vocabulary (tokens, token types, scores, merges, special token ids, the
add-BOS/EOS and space-prefix flags, with llama.cpp's defaults per model type; at most
`MAX_TOKENS` tokens and `MAX_MERGES` merges, checked before a file's arrays are read:
`check_vocabulary_size`), splitting
special tokens out of the text, encoding with the model's algorithm, decoding (all at once or
streamed token by token), the end-of-generation set, and `load_tokenizer(path)`.
Leaves out: the BPE, SentencePiece and WordPiece algorithms themselves (bpe.py, spm.py,
wpm.py), chat templates (chat.py), and the unigram (T5) and RWKV models, which raise
ToycardsError naming the model.

llama.cpp conventions kept here, so that ids equal `llama_tokenize(..., parse_special)`:
- Special tokens are cut out of the text first, longest first (`tokenizer_st_partition`).
  User-defined tokens (type 4) are always cut out; control (3) and unknown (2) tokens only
  with `parse_special=True`. Phi-3 strips whitespace to the right of its special tokens.
- SentencePiece: each text fragment that starts the input or follows a special token gets a
  leading space (`add_space_prefix`), then spaces become `▁`. Decoding removes one leading
  space from the first token's text, so `decode(encode(s)) == s`; after a BOS the space stays
  (`decode(encode("Hi", add_bos=True)) == " Hi"`, as `llama_detokenize` gives).
- WordPiece (BERT): `add_bos` stands for llama.cpp's `add_special`, which puts the BOS ([CLS])
  before the text and the SEP after it whatever add_bos/add_eos_token say; spaces are `▁`
  in the vocabulary (`▁hello`), so decoding keeps the space before each word.
- Control and unknown tokens decode to "" unless `special=True`; user-defined tokens decode
  to their text; byte tokens `<0xNN>` to their byte.

>>> tok = load_tokenizer("ggml-vocab-llama-spm.gguf")      # doctest: +SKIP
>>> tok.encode("Hello world"), tok.encode("Hello world", add_bos=False)   # doctest: +SKIP
([1, 15043, 3186], [15043, 3186])
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from toycards.errors import ToycardsError
from toycards.gguf.facts import DEPRECATED_SPECIAL_TOKEN_KEYS, SPECIAL_TOKEN_KEYS, Keys, TokenType
from toycards.tokenizer.bpe import PRE_TOKENIZERS, ByteBPE, PreTokenizer, parse_merges, token_bytes
from toycards.tokenizer.special import SpecialSplitter, assign_roles_by_text, end_of_generation
from toycards.tokenizer.spm import SPACE, SentencePiece, parse_byte_token
from toycards.tokenizer.wpm import WordPiece

K = Keys.Tokenizer
T = TokenType
MetadataGet = Callable[..., object]  # get(key, default=None) -> value


@dataclass(frozen=True)
class _ModelDefaults:
    """llama.cpp's settings for a `tokenizer.ggml.model` before the file's own keys."""

    bos: int | None
    eos: int | None
    unk: int | None
    add_space_prefix: bool
    sep: int | None = None


# tokenizer.ggml.model names a tokenizer kind, not a model family: "llama" is SentencePiece, "gpt2"
# byte-level BPE, "bert" WordPiece (llama.cpp's LLAMA_VOCAB_TYPE_SPM, _BPE and _WPM)
SPM, BYTE_BPE, WPM = "llama", "gpt2", "bert"
MODELS = {
    SPM: _ModelDefaults(bos=1, eos=2, unk=0, add_space_prefix=True),
    BYTE_BPE: _ModelDefaults(bos=11, eos=11, unk=None, add_space_prefix=False),
    WPM: _ModelDefaults(bos=101, eos=None, unk=100, add_space_prefix=False, sep=102),
}
# SPM and WPM have no pre-tokenizer (llama.cpp reads no tokenizer.ggml.pre for them): their settings
_OWN_PRE = {
    SPM: PreTokenizer("default", clean_spaces=False, add_bos=True),
    WPM: PreTokenizer("default", clean_spaces=True, add_bos=True),
}
# BertNormalizer's options (llama.cpp: lowercase true when absent, strip_accents as lowercase when absent)
NORMALIZER_KEYS = ("tokenizer.ggml.normalizer.lowercase", "tokenizer.ggml.normalizer.strip_accents")

# special-token roles and their keys; later keys win (the deprecated prefix/suffix/middle ids)
_SPECIAL_KEYS = SPECIAL_TOKEN_KEYS + DEPRECATED_SPECIAL_TOKEN_KEYS
_HIDDEN_TYPES = (T.CONTROL, T.UNKNOWN)  # decode to "" unless special=True


_FLAG_KEYS = [("add_bos", K.ADD_BOS), ("add_eos", K.ADD_EOS), ("add_space_prefix", K.ADD_PREFIX)]

# The most entries toycards builds a vocabulary from, 16x the largest vocabularies in use (262,144
# tokens): a file's arrays are checked against it before they are read, so that what a file claims
# cannot make toycards build Python lists and dicts of any size.
MAX_TOKENS = 1 << 22
MAX_MERGES = 1 << 22
_LIMITS = {K.LIST: MAX_TOKENS, K.TOKEN_TYPE: MAX_TOKENS, K.SCORES: MAX_TOKENS, K.MERGES: MAX_MERGES}


def check_vocabulary_size(f) -> None:
    """Refuse an open `GGUFFile` whose vocabulary arrays hold more than `MAX_TOKENS` tokens or
    `MAX_MERGES` merges, by the lengths its header gives, before any of them is read."""
    for key in _LIMITS:
        if key in f.metadata and f.value_type(key).startswith("array"):
            _check_size(key, f.array_len(key), f"{f.path}: ")


def _check_size(key: str, n: int, where: str = "") -> None:
    if n > _LIMITS[key]:
        raise ToycardsError(
            f"{where}{key} holds {n} entries, more than toycards reads ({_LIMITS[key]}, far above any "
            "real vocabulary)"
        )


def _as_list(value: object) -> list:
    return value.tolist() if hasattr(value, "tolist") else list(value)  # type: ignore[call-overload]


def _as_strings(values: object) -> list[str]:
    """A list of str: a GGUF file's string array as it is, anything else converted (bytes as UTF-8)."""
    values = _as_list(values)
    if set(map(type, values)) <= {str}:
        return values
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values]


def _read_vocab(get: MetadataGet) -> tuple[list[str], list[int], list[float] | None]:
    """Token texts, types and scores (None when absent), checked to cover every token."""
    tokens = get(K.LIST)
    if tokens is None or isinstance(tokens, (str, bytes)) or len(tokens) == 0:  # type: ignore[arg-type]
        raise ToycardsError(f"{K.LIST} is missing, empty or not an array of strings")
    _check_size(K.LIST, len(tokens))  # type: ignore[arg-type]
    tokens = _as_strings(tokens)
    if "" in tokens:  # llama.cpp renames empty tokens
        tokens = [t or f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
    n = len(tokens)
    types, scores = get(K.TOKEN_TYPE), get(K.SCORES)
    for key, values in ((K.TOKEN_TYPE, types), (K.SCORES, scores)):
        if values is not None:
            _check_size(key, len(values))  # type: ignore[arg-type]
    types = list(map(int, _as_list(types))) if types is not None else [int(T.NORMAL)] * n
    scores = [float(s) for s in _as_list(scores)] if scores is not None else None
    if len(types) < n or (scores is not None and len(scores) < n):
        raise ToycardsError(f"{K.TOKEN_TYPE} or {K.SCORES} is shorter than {K.LIST} ({n} tokens)")
    return tokens, types[:n], scores[:n] if scores is not None else None


class Tokenizer:
    """A llama.cpp-compatible tokenizer. Build with `from_metadata(get)` or `load_tokenizer(path)`."""

    def __init__(
        self,
        model: str,
        tokens: list[str],
        token_type: list[int],
        *,
        scores: list[float] | None = None,
        merges: list[str] | None = None,
        pre: str = "default",
        special: dict[str, int | None],
        add_bos: bool | None = None,
        add_eos: bool = False,
        add_space_prefix: bool | None = None,
        model_name: str = "",
        chat_template: str | None = None,
        normalizer: tuple[bool, bool] = (True, True),  # WordPiece: lowercase, strip accents
    ):
        if model not in MODELS:
            raise ToycardsError(
                f"unsupported tokenizer.ggml.model {model!r} (supported: {', '.join(MODELS)})"
            )
        self.model, self.pre, self.chat_template = model, pre, chat_template
        self.source: str | None = None  # the file read, named in chat-template errors
        self.tokens, self.token_type = tokens, list(token_type)  # token types are adjusted below
        self.token_to_id: dict[str, int] = dict(zip(tokens, range(len(tokens))))
        if len(self.token_to_id) != len(tokens):  # a text twice: name the first one repeated
            seen: dict[str, int] = {}
            for tid, text in enumerate(tokens):
                if seen.setdefault(text, tid) != tid:
                    raise ToycardsError(
                        f"duplicate token {text!r} in tokenizer.ggml.tokens (ids {seen[text]}, {tid})"
                    )
        defaults = MODELS[model]
        pre_tokenizer = self._pre_tokenizer(pre)
        self.special = {
            r: t if t is not None and t < len(tokens) else None
            for r, t in (("bos", defaults.bos), ("eos", defaults.eos), ("unk", defaults.unk))
        }
        if defaults.sep is not None:  # WordPiece: the [SEP] after a text, unless the file names another
            self.special["sep"] = defaults.sep if defaults.sep < len(tokens) else None
        if not pre_tokenizer.has_bos:
            self.special["bos"] = None
        self.special.update(special)
        self.add_bos = pre_tokenizer.add_bos if add_bos is None else add_bos
        self.add_eos = add_eos
        self.add_space_prefix = defaults.add_space_prefix if add_space_prefix is None else add_space_prefix
        self.clean_spaces = pre_tokenizer.clean_spaces
        assign_roles_by_text(self.special, self.token_to_id, self.token_type)
        self.eog_ids = end_of_generation(self.special, self.token_to_id, self.token_type)
        self._splitter = SpecialSplitter(tokens, self.token_type, self.token_to_id, model_name)
        self._pieces: dict[int, bytes] = {}
        if model == SPM:
            self._spm = SentencePiece(
                self.token_to_id, scores or [0.0] * len(tokens), self.special.get("unk")
            )
        elif model == WPM:
            self._wpm = WordPiece(self.token_to_id, self.special.get("unk"), *normalizer)
        else:
            if not merges:
                raise ToycardsError("byte-level BPE vocabulary without tokenizer.ggml.merges")
            self._bpe = ByteBPE(self.token_to_id, parse_merges(merges), pre_tokenizer)

    def _pre_tokenizer(self, pre: str) -> PreTokenizer:
        if self.model in _OWN_PRE:
            return _OWN_PRE[self.model]
        if pre not in PRE_TOKENIZERS:
            raise ToycardsError(f"unsupported tokenizer.ggml.pre {pre!r} for a byte-level BPE vocabulary")
        return PRE_TOKENIZERS[pre]

    @classmethod
    def from_metadata(cls, get: MetadataGet) -> Tokenizer:
        """Build from a metadata getter `get(key, default=None)`, e.g. `open_gguf(path).get`."""
        model = get(K.MODEL)
        if model is None:
            raise ToycardsError(f"no tokenizer in this file ({K.MODEL} is missing)")
        if model not in MODELS:
            raise ToycardsError(f"unsupported {K.MODEL} {model!r} (supported: {', '.join(MODELS)})")
        try:
            tokens, types, scores = _read_vocab(get)
            merges = get(K.MERGES)
            if merges is not None:
                _check_size(K.MERGES, len(merges))  # type: ignore[arg-type]
            merges = _as_strings(merges) if merges is not None else None
            n = len(tokens)
            special = {
                r: int(v) for r, key in _SPECIAL_KEYS if (v := get(key)) is not None and 0 <= int(v) < n
            }
            flags = {name: None if (v := get(key)) is None else bool(v) for name, key in _FLAG_KEYS}
            lowercase = bool(get(NORMALIZER_KEYS[0], True))
            strip_accents = bool(get(NORMALIZER_KEYS[1], lowercase))
        except (TypeError, ValueError, AttributeError) as e:
            raise ToycardsError(f"malformed tokenizer metadata: {e}") from None
        template = get(K.CHAT_TEMPLATE)
        return cls(
            model, tokens, types, scores=scores, merges=merges, pre=str(get(K.PRE) or "default"),
            special=special, add_bos=flags["add_bos"], add_eos=bool(flags["add_eos"]),
            add_space_prefix=flags["add_space_prefix"], model_name=str(get("general.name") or ""),
            chat_template=template if isinstance(template, str) else None,
            normalizer=(lowercase, strip_accents),
        )  # fmt: skip

    # --- vocabulary facts -------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    @property
    def bos_id(self) -> int | None:
        return self.special.get("bos")

    @property
    def eos_id(self) -> int | None:
        return self.special.get("eos")

    @property
    def eot_id(self) -> int | None:
        return self.special.get("eot")

    @property
    def eot_ids(self) -> frozenset[int]:
        """Alias of `eog_ids`: every token that ends generation."""
        return self.eog_ids

    def is_eog(self, tid: int) -> bool:
        return tid in self.eog_ids

    def __repr__(self) -> str:
        return f"Tokenizer(model={self.model!r}, pre={self.pre!r}, vocab_size={self.vocab_size})"

    # --- encoding ---------------------------------------------------------------------------

    def encode(
        self,
        text: str,
        add_bos: bool | None = None,
        *,
        add_eos: bool | None = None,
        parse_special: bool = False,
    ) -> list[int]:
        """Token ids of `text`; `add_bos`/`add_eos` None means as the file says.

        >>> tok.encode(" Hello", add_bos=False)   # Llama 2: "▁" + "▁Hello"    # doctest: +SKIP
        [29871, 15043]
        """
        if not isinstance(text, str):
            raise ToycardsError(f"encode() takes a str, not {type(text).__name__}")
        if self.model == WPM:  # llama.cpp's add_special: [CLS] … [SEP], whatever the file's flags say
            add_bos = add_eos = add_bos is None or add_bos
        ids = [self._required("bos")] if (self.add_bos if add_bos is None else add_bos) else []
        try:
            ids += self._encode_fragments(self.split_special(text, parse_special) if text else [])
        except UnicodeEncodeError as e:
            raise ToycardsError(
                f"text is not valid Unicode: lone surrogate {e.object[e.start : e.end]!r}"
            ) from None
        if self.add_eos if add_eos is None else add_eos:
            ids.append(self._required("sep" if self.model == WPM else "eos"))
        return ids

    def _encode_fragments(self, fragments: list[str | int]) -> list[int]:
        ids: list[int] = []
        starts_fragment = True  # SentencePiece: a fragment after BOS/special gets a leading space
        for fragment in fragments:
            if isinstance(fragment, int):
                ids.append(fragment)
                starts_fragment = True
                continue
            if self.model == SPM:
                prefix = " " if self.add_space_prefix and starts_fragment else ""
                ids += self._spm.encode((prefix + fragment).replace(" ", SPACE))
            elif self.model == WPM:
                ids += self._wpm.encode(fragment)
            else:
                ids += self._bpe.encode(fragment)
            starts_fragment = False
        return ids

    def _required(self, role: str) -> int:
        tid = self.special.get(role)
        if tid is None:
            raise ToycardsError(f"this vocabulary has no {role.upper()} token to add")
        return tid

    def split_special(self, text: str, parse_special: bool = False) -> list[str | int]:
        """Cut special tokens out of `text`, longest first: raw-text fragments and token ids.

        >>> phi3.split_special("<|user|>\\nHi<|end|>", parse_special=True)   # doctest: +SKIP
        [32010, 'Hi', 32007]
        """
        return self._splitter.split(text, parse_special)

    # --- decoding ---------------------------------------------------------------------------

    def token_to_piece(self, tid: int, special: bool = False) -> bytes:
        """The bytes token `tid` stands for ('▁Hello' → b' Hello', '<0x0A>' → b'\\n')."""
        if not 0 <= tid < len(self.tokens):
            raise ToycardsError(f"token id {tid} is out of range for a vocabulary of {len(self.tokens)}")
        kind = self.token_type[tid]
        if kind in _HIDDEN_TYPES:
            return self.tokens[tid].encode() if special else b""
        piece = self._pieces.get(tid)
        if piece is None:
            piece = self._pieces[tid] = self._piece(tid, kind)
        return piece

    def _piece(self, tid: int, kind: int) -> bytes:
        text = self.tokens[tid]
        if kind == T.USER_DEFINED:
            return text.encode()
        if kind == T.NORMAL:
            return text.replace(SPACE, " ").encode() if self.model in (SPM, WPM) else token_bytes(text)
        if kind == T.BYTE and (byte := parse_byte_token(text)) is not None:
            return bytes([byte])
        return b""  # unused and undefined types are suppressed, as in llama.cpp

    def decode(self, ids: Iterable[int], special: bool = False, clean_up: bool = False) -> str:
        """Text of `ids`. `special=True` shows control tokens; `clean_up=True` applies
        llama_detokenize's space clean-up (" ," → ",") where the vocabulary asks for it.
        Invalid UTF-8 (a token sequence cut mid-character) becomes U+FFFD."""
        data = b"".join(self._pieces_of(ids, special))
        if clean_up and self.clean_spaces:
            data = clean_up_spaces(data)
        return data.decode("utf-8", errors="replace")

    def _pieces_of(self, ids: Iterable[int], special: bool) -> Iterable[bytes]:
        strip = self.add_space_prefix  # the first token loses one leading space
        for tid in ids:
            piece = self.token_to_piece(int(tid), special)
            yield piece[1:] if strip and piece[:1] == b" " else piece
            strip = False

    def decoder(self, special: bool = False, at_start: bool = True) -> StreamDecoder:
        """A streaming decoder; `at_start=False` when the ids continue earlier text (generation)."""
        return StreamDecoder(self, special, at_start)

    def apply_chat_template(
        self, messages: list[dict], add_generation_prompt: bool = True, **kw: object
    ) -> str:
        """Render `tokenizer.chat_template` (sandboxed) with this vocabulary's BOS/EOS texts."""
        from toycards.tokenizer.chat import render_chat

        if not self.chat_template:
            raise ToycardsError(f"this file has no {K.CHAT_TEMPLATE}")
        texts = {
            f"{r}_token": self.tokens[t] if (t := self.special.get(r)) is not None else ""
            for r in ("bos", "eos")
        }
        return render_chat(
            self.chat_template,
            messages,
            source=self.source,
            add_generation_prompt=add_generation_prompt,
            **{**texts, **kw},
        )


class StreamDecoder:
    """Decode ids one at a time; `push(id)` returns the text completed so far, holding back the
    bytes of a character split across tokens. `"".join(push(i) for i in ids) + flush()`
    equals `tok.decode(ids)`."""

    def __init__(self, tok: Tokenizer, special: bool = False, at_start: bool = True):
        self._tok, self._special = tok, special
        self._strip = at_start and tok.add_space_prefix
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, tid: int) -> str:
        piece = self._tok.token_to_piece(int(tid), self._special)
        if self._strip and piece[:1] == b" ":
            piece = piece[1:]
        self._strip = False
        return self._utf8.decode(piece)

    def flush(self) -> str:
        """Whatever is held back at the end (an incomplete character becomes U+FFFD)."""
        return self._utf8.decode(b"", final=True)


def clean_up_spaces(data: bytes) -> bytes:
    """llama_detokenize's `clean_spaces` passes: " ?" " !" " ." " ," lose the space, a lone
    " ' " loses both, and " 's" " 'm" " 're" " 've" lose the space.

    >>> clean_up_spaces(b"Hi , it ' s you 're here .")
    b"Hi, it's you're here."
    """
    out = bytearray(data[:1])
    for i in range(1, len(data)):
        if data[i - 1] == 0x20 and data[i] in b"?!.,":
            out.pop()
        out.append(data[i])
    src, out, i = out, bytearray(out[:1]), 1
    while i < len(src):
        x = src[i]
        if x == 0x27 and i + 1 < len(src) and src[i - 1] == 0x20 and src[i + 1] == 0x20:
            out.pop()
            i += 1
            src[i] = 0  # the space after is dropped, and no longer counts as a space
        out.append(x)
        i += 1
    src, out = out, bytearray(out[:1])
    for i in range(1, len(src)):
        if src[i - 1] == 0x20 and src[i] == 0x27 and i + 1 < len(src):
            nxt = src[i + 1 : i + 3]
            if nxt[:1] in (b"s", b"m") or (len(nxt) == 2 and nxt in (b"re", b"ve")):
                out.pop()
        out.append(src[i])
    return bytes(out)


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """The tokenizer of any GGUF file, vocabulary-only files included."""
    from toycards.gguf.reader import open_gguf

    with open_gguf(path) as f:
        return tokenizer_of(f)


def tokenizer_of(f) -> Tokenizer:
    """The tokenizer of an open `GGUFFile`; an error in its vocabulary names the file."""
    check_vocabulary_size(f)
    try:
        tok = Tokenizer.from_metadata(f.get)
    except ToycardsError as e:
        if e.diagnostics or e.message.startswith(f"{f.path}: "):
            raise
        raise ToycardsError(f"{f.path}: {e.message}") from None
    tok.source = str(f.path)
    return tok
