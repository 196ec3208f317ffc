"""A conversation with a model through its chat template, kept in one KV cache across turns.

Owns: `ChatSession` (the system prompt and the turns so far, the token ids the cache holds, the
reply loop: sampling, streaming, stopping at the end of the turn, the reply cap or the model's
context) and `turn_end` (the token that ends a turn in a template, found by rendering one).
Leaves out: rendering templates (tokenizer/chat.py, sandboxed), sampling itself
(runtime/sampling.py), and terminals (cli/chat.py).

Each turn renders the whole conversation with `add_generation_prompt=True` and encodes it with
special tokens parsed. The cache already holds the ids of the earlier turns, so only the new ids
are fed: for most templates the new encoding starts with everything the cache holds (the last
reply, its end-of-turn token still unfed, is fed with the next user turn). Where it does not (a
template that renders earlier turns differently once there are more, or a reply whose text
encodes to other tokens than were sampled), the cache keeps the common prefix and the rest is
fed again, with one note. Either way, the logits of each turn are those of a full pass over the
encoding of the conversation as rendered now.

>>> chat = ChatSession(toycards.load("SmolLM2-135M-Instruct.Q4_1.gguf"), system="Be brief.")  # doctest: +SKIP
>>> "".join(chat.reply("What is the capital of France?")), chat.stop_reason          # doctest: +SKIP
('The capital of France is Paris.', 'end')
>>> "".join(chat.reply("And of Italy?"))   # the cache holds the first turn: fed once  # doctest: +SKIP
'The capital of Italy is Rome.'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import numpy as np

from toycards.errors import ToycardsError
from toycards.runtime.model_base import require_finite
from toycards.runtime.sampling import sample

_PROBE = "toycards-probe-5b1e"  # a reply no template changes (no space to trim); what follows it ends a turn
# A turn end that reads like an HTML tag (`</s>`) ends a reply as a token only: replies quote tags.
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9]*>")


def turn_end(tok, messages: list[dict]) -> int | None:
    """The special token a template writes right after an assistant message (`<|im_end|>`,
    `<end_of_turn>`, `</s>`), or None: found by rendering `messages` with one user turn and one
    assistant turn; None where the template fails on them or writes text first.

    >>> turn_end(smollm2.tokenizer, [])  # ChatML: "…assistant\\n{reply}<|im_end|>\\n"  # doctest: +SKIP
    2
    """
    probe = [*messages, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": _PROBE}]
    try:
        text = tok.apply_chat_template(probe, add_generation_prompt=False)
    except ToycardsError:  # the real turn's rendering says what is wrong
        return None
    at = text.rfind(_PROBE)
    if at < 0:
        return None
    for fragment in tok.split_special(text[at + len(_PROBE) :], parse_special=True):
        if isinstance(fragment, int):
            return fragment
        if fragment.strip():
            return None
    return None


class _StopText:
    """Holds back streamed text that may be the start of `stop` (a turn-end token's text that the
    model spells with ordinary tokens); `hit` once the text reaches it, which is then cut off.

    >>> s = _StopText("<|im_end|>"); s.push("Hi<|im"), s.push("_end|> more"), s.hit
    ('Hi', '', True)
    """

    def __init__(self, stop: str | None) -> None:
        self.stop, self.held, self.hit = stop, "", False

    def push(self, text: str) -> str:
        if not self.stop:
            return text
        text = self.held + text
        at = text.find(self.stop)
        if at >= 0:
            self.hit, self.held = True, ""
            return text[:at]
        keep = next((k for k in range(min(len(self.stop) - 1, len(text)), 0, -1)
                     if text.endswith(self.stop[:k])), 0)  # fmt: skip
        self.held = text[len(text) - keep :]
        return text[: len(text) - keep]

    def flush(self) -> str:
        held, self.held = self.held, ""
        return held


class ChatSession:
    """A conversation with `model` (a loaded GGUF model whose file has a chat template).

    `reply(text)` adds a user turn and yields the assistant's reply as text pieces; the reply joins
    the conversation when the generator ends, is closed, or is interrupted (the text yielded so
    far), and `stop_reason` says why it ended, as `Generation.stop_reason` does ("end", "max_tokens",
    "context"; None for a reply stopped early). Sampling as `generate` takes it (greedy at
    temperature 0; one random generator for the whole conversation, seeded by `seed`). `n_ctx`:
    the context length, the most tokens the conversation holds, as `generate` takes it (default:
    the model's trained context). `kv_type`: the cache's, as `new_cache` takes it. `on_note(text)`
    hears what a user should be told once (a conversation read again).
    """

    def __init__(self, model, system: str | None = None, *, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                 n_ctx: int | None = None, kv_type: str = "f32",
                 on_note: Callable[[str], None] | None = None) -> None:  # fmt: skip
        where = f"{model.path}: " if model.path else ""
        tok = model.tokenizer
        if tok is None:
            raise ToycardsError(f"{where}no vocabulary (tokenizer.ggml.*) to chat with; use `toycards run`")
        if not tok.chat_template:
            raise ToycardsError(f"{where}no chat template (tokenizer.chat_template); use `toycards run`")
        self.model, self.tok, self._where = model, tok, where
        self.system = system
        self.sampling = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
        self._rng = np.random.default_rng(seed)
        self._cache = model.new_cache(kv_type)
        self._fed: list[int] = []  # the ids the cache holds, in order
        self._messages: list[dict] = self._start()
        self._on_note = on_note or (lambda text: None)
        self._noted = False
        self.n_ctx, _ = model.context_length.resolve(n_ctx, "n_ctx")  # (None: no limit)
        self.encode([*self._messages, {"role": "user", "content": "Hi"}])  # a template that fails, at once
        end = turn_end(tok, self._messages)
        self._stop_ids = tok.eog_ids | ({end} if end is not None else set())
        self._stop_text = tok.tokens[end] if end is not None and not _TAG.fullmatch(tok.tokens[end]) else None
        self.stop_reason: str | None = None  # why the last reply ended

    def _start(self) -> list[dict]:
        return [{"role": "system", "content": self.system}] if self.system is not None else []

    @property
    def messages(self) -> list[dict]:
        """The conversation so far: {"role": "system" | "user" | "assistant", "content": text}."""
        return [dict(m) for m in self._messages]

    @property
    def fed(self) -> int:
        """How many token ids the KV cache holds."""
        return len(self._fed)

    def reset(self) -> None:
        """Forget every turn (the system prompt stays) and empty the cache."""
        self._messages = self._start()
        self._fed = []
        self._cache.reset()
        self.stop_reason = None

    def encode(self, messages: list[dict]) -> list[int]:
        """The ids of `messages` rendered with the generation prompt: special tokens parsed, one
        BOS where the vocabulary adds one (not a second where the template writes it), no EOS."""
        text = self.tok.apply_chat_template(messages, add_generation_prompt=True)
        ids = self.tok.encode(text, add_bos=False, add_eos=False, parse_special=True)
        bos = self.tok.bos_id
        if self.tok.add_bos and bos is not None and ids[:1] != [bos]:
            ids.insert(0, bos)
        if not ids:
            raise ToycardsError(f"{self._where}the chat template renders the conversation as no tokens")
        return ids

    def reply(self, text: str, max_tokens: int = 512) -> Iterator[str]:
        """The reply to the user turn `text`, at most `max_tokens` tokens, as an iterator over its
        text pieces (the turn joins the conversation once the first piece is asked for; iterate
        each reply to its end, or close it, before the next). Raises ToycardsError at once, and
        leaves the conversation as it was, where the template fails or where the conversation would
        leave no room for a reply in the context length; while iterating, where the logits are not
        finite."""
        messages = [*self._messages, {"role": "user", "content": text}]
        ids = self.encode(messages)
        limit = self.n_ctx
        if limit is not None and len(ids) >= limit:
            raise ToycardsError(
                f"{self._where}with this turn the conversation is {len(ids)} tokens, which leaves no room"
                f" for a reply in the context length {limit} ({self.model.context_length.hint(limit)})"
            )
        return self._reply(messages, ids, max_tokens)

    def _reply(self, messages: list[dict], ids: list[int], max_tokens: int) -> Iterator[str]:
        said: list[str] = []
        self.stop_reason = None
        # room for the conversation and the whole reply (held to the context)
        self._cache.expect(min(len(ids) + max_tokens, self.n_ctx) if self.n_ctx else len(ids) + max_tokens)
        logits = self._prefill(ids)  # (N_V,): the next token's
        self._messages = messages
        try:
            for piece in self._decode(logits, len(ids), max_tokens, self.n_ctx):
                said.append(piece)
                yield piece
        finally:  # also when the caller stops early: the conversation has what was said
            self._messages.append({"role": "assistant", "content": "".join(said)})

    def _decode(self, logits: np.ndarray, n_prompt: int, max_tokens: int, limit: int | None) -> Iterator[str]:
        """The reply's text pieces from the prompt's logits; sets `stop_reason`."""
        decoder = self.tok.decoder(at_start=False)
        stop = _StopText(self._stop_text)
        reason = "max_tokens"
        for k in range(1, max_tokens + 1):  # token k goes to position n_prompt + k
            tid = sample(logits, **self.sampling, rng=self._rng)
            if tid in self._stop_ids:
                reason = "end"
                break
            piece = stop.push(decoder.push(tid))
            if piece:
                yield piece
            if stop.hit:
                reason = "end"
                break
            if k == max_tokens:
                break
            if limit is not None and n_prompt + k + 1 > limit:
                reason = "context"
                break
            logits = self._feed([tid])
        if not stop.hit:
            tail = stop.push(decoder.flush())  # (a character cut short: U+FFFD)
            tail += "" if stop.hit else stop.flush()
            if tail:
                yield tail
        self.stop_reason = reason

    def _prefill(self, ids: list[int]) -> np.ndarray:
        """Feed what the cache lacks of `ids`: after the longest common prefix with what it holds
        (at least the last id, whose logits are wanted); the next token's logits (N_V,)."""
        common = 0
        for a, b in zip(self._fed, ids):
            if a != b:
                break
            common += 1
        if common < len(self._fed) and not self._noted:
            self._noted = True
            self._on_note(
                f"the conversation's tokens differ from those in the KV cache from token {common + 1} on"
                " (the template renders an earlier turn otherwise, or a reply encodes to other tokens);"
                " the rest is read again"
            )
        common = min(common, len(ids) - 1)
        if not self._cache.can_keep(min(common, self._cache.length)):
            common = 0  # a model's state holds every token it read: read them all again
        # also where a pass was cut short (Ctrl-C): its rows past `common` are dropped
        self._cache.truncate(min(common, self._cache.length))
        del self._fed[common:]
        return self._feed(ids[common:])

    def _feed(self, ids: list[int]) -> np.ndarray:
        """Run the model over `ids` after those the cache holds; the last one's logits (N_V,)."""
        x = np.asarray([ids], dtype=np.int64)  # (1, T)
        self.model._check_ids(x)
        logits = self.model.feed(x, self._cache)  # (1, N_V)
        self._fed.extend(ids)
        require_finite(logits, len(self._fed), self.model.path)
        return logits[-1]
