"""What every generated model offers besides `forward`: logits for a list of ids, generation.

Owns: `ModelAPI` (`logits(ids)`, `new_cache()`, `generate(prompt, …)`, `context_length`,
`embed(texts)` and `outputs_embeddings` for a card whose output is an embedding per token (an
encoder; it refuses `generate`, which needs a distribution over the vocabulary), and
`feed(ids, cache)` (a prompt through a cache in micro-batches of `ubatch` tokens) and
`window_logits(ids, first)` (a window's logits from a row on, a micro-batch at a time), and
`Model.from_gguf(path)`, which binds a file's weights to a generated module's own card through
models/load.py), shared by the NumPy and torch base classes; `Generation` (what `generate`
returns: the text pieces, then why they ended); and `require_finite` (non-finite logits as one
error line, which `generate` and `evaluate` raise). Leaves out: the forward pass (generated),
weights (model_*.py), the context-length policy itself (context.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from toycards.errors import ToycardsError
from toycards.runtime.context import ContextLength, KVCache, context_length
from toycards.runtime.rows import Rows, RowsRefused

# tokens a forward pass takes of a longer input. Half llama.cpp's n_ubatch (512): a pass's activations
# come from the C heap, which they fragment (a pass holds more heap than it uses), and 256 tokens
# bound that at half with prefill as fast (bench/vs_llama_cpp.py --contexts)
UBATCH = 256


class CacheRecomputes(UserWarning):
    """A model decodes by recomputing the whole sequence: the KV cache cannot follow its card."""


class ModelAPI:
    TARGET = (
        ""  # "numpy" or "torch": the target of a base class (runtime/numpy/model.py, runtime/torch/model.py)
    )
    RECOMPUTE = ""  # set by a generated class whose card a KV cache cannot follow: why
    tokenizer = None  # set by the loader when the GGUF file carries a vocabulary
    bound = None  # toycards.binding.Bound: hyperparameters and where each tensor came from
    path = None  # the GGUF file the weights came from (set by the loader), named in errors
    _file_watch = None  # mapped.FileWatch of that file where the weights read its pages (set by the loader)
    # a longer input goes through the KV cache this many tokens a pass: a pass's work memory (its
    # activations, its attention's rows) grows with the tokens it takes, the cache alone with the input
    ubatch = UBATCH

    @classmethod
    def from_gguf(cls, path, *, dequantize: bool = False, device: str | None = None):
        """This generated module's `Model` with the weights of the GGUF file at `path`, bound through
        the module's own card (`CARD`) as `toycards.load(CARD, weights=path, target=...)` binds them:
        hyperparameters from the file's keys, every tensor checked against the card (one-line
        ToycardsError naming the file where one is missing or of another shape), tied weights shared,
        the file's tokenizer attached (for `generate`). `dequantize` and `device` (torch) are load's.

        >>> Model.from_gguf("tiny-llama.gguf").logits([1, 2, 3]).shape  # doctest: +SKIP
        (3, 1024)
        """
        from toycards.runtime import binder

        return binder.bind(cls, path, dequantize=dequantize, device=device)

    def _kernel_choices(self, kept) -> None:
        """The per-model state of the block kernels' decoding, for the weights `kept` in their GGUF
        blocks: whether the few-token products prefetch (timed on the model's first decoding steps),
        which weights pack now, on a thread of their own, and which after some decoding (engine/ckernels.py, packing)."""
        from toycards import engine

        kept = [engine.block_matrix(w) for w in kept]  # a stack of experts packs as its block matrix
        self._prefetch = engine.PrefetchChoice()
        self._later = engine.LaterPacking(kept)
        self._packing_ahead = engine.pack_ahead(kept)

    def _check_file(self) -> None:
        """Before a forward pass: a ToycardsError where the file whose pages the weights read has
        changed on disk since it was loaded (a read past a truncated file's end would kill the process)."""
        if self._file_watch is not None:
            self._file_watch.check()

    def constant(self, step: int, make):
        """The value of the card's entry-point `step` that follows from the hyperparameters alone
        (codegen's `StepEmitter._constant`: RoPE's divisors ρ, a magnitude vector μ): `make()` at the
        model's first pass, the same value at every later one (dropped where the weights move:
        `_apply`)."""
        made = self.__dict__.setdefault("_constants", {})
        if step not in made:
            made[step] = make()
        return made[step]

    def _decoding_step(self, forward, *args):
        """`forward(*args)` as one decoding step (few new tokens): under the model's prefetch choice,
        then the turn of a weight that packs after some decoding."""
        out = self._prefetch.run(forward, *args)
        self._later.step()
        return out

    def _forward_numpy(self, ids: np.ndarray, cache: KVCache | None, last: bool = False) -> np.ndarray:
        """float32 logits [..., ℓ, N_V] (`last`: [..., 1, N_V], the last token's alone)."""
        raise NotImplementedError

    def _passes(self, n: int) -> list[slice]:
        """The token ranges of the forward passes that run n new tokens through a cache: `ubatch`
        tokens each, or all n at once for a model whose cache cannot follow its card (each pass would
        recompute every token before it)."""
        step = n if self.RECOMPUTE else max(1, int(self.ubatch))
        return [slice(start, min(start + step, n)) for start in range(0, n, step)]

    def feed(self, ids: np.ndarray, cache) -> np.ndarray:
        """Run token ids [B, n] through `cache` (the new tokens after those it holds) in passes of at
        most `ubatch` tokens; the last token's float32 logits [B, N_V]. The cache then holds the n
        tokens too, as after one pass over them: a pass's keys and values are the same whatever the
        tokens after it."""
        ids = np.asarray(ids, dtype=np.int64)
        cache.expect(cache.length + ids.shape[-1])
        out = None
        for part in self._passes(ids.shape[-1]):
            out = self._forward_numpy(ids[..., part], cache, last=True)
        if out is None:
            raise ToycardsError("feed() needs at least one token id")
        return out[..., -1, :]

    def window_logits(self, ids, first: int = 0) -> Iterator[tuple[int, np.ndarray]]:
        """float32 logits of one sequence of ids at rows first … len(ids) − 1, as `logits(ids)[first:]`
        computes them, in blocks: (row of the block's first row, its logits [rows, N_V]). The ids go
        through an f32 cache in passes of `ubatch` tokens (a pass that ends before `first` gives its
        last row alone), so that no more than one pass's logits are ever held."""
        ids = np.asarray(ids, dtype=np.int64).reshape(1, -1)
        if ids.size == 0:
            raise ToycardsError("window_logits() needs at least one token id")
        self._check_ids(ids)
        self.context_length.check_fits(ids.shape[-1], self.path)
        passes = self._passes(ids.shape[-1])
        if len(passes) == 1:
            yield first, self._forward_numpy(ids, None)[0][first:]
            return
        cache = self.new_cache("f32")
        for part in passes:
            skipped = part.stop <= first
            out = self._forward_numpy(ids[:, part], cache, last=skipped)[0]
            if not skipped:
                start = max(first, part.start)
                yield start, out[start - part.start :]

    def _with_history(self, x, cache: KVCache, cat):
        """For a RECOMPUTE model: the ids so far (the cache's, then x), kept in the cache; says once
        (a CacheRecomputes warning) that decoding reruns the sequence."""
        if not getattr(self, "_recompute_said", False):
            import warnings

            self._recompute_said = True
            warnings.warn(
                f"decoding recomputes the whole sequence at each step: {self.RECOMPUTE}",
                CacheRecomputes,
                stacklevel=3,
            )
        cache.ids = x if cache.ids is None else cat([cache.ids, x], -1)
        return cache.ids

    def _check_ids(self, ids: np.ndarray) -> None:
        n_vocab = self.hp.get("N_V")
        if n_vocab is not None and (ids.min() < 0 or ids.max() >= n_vocab):
            raise ToycardsError(f"token id out of range 0…{n_vocab - 1}")

    @property
    def context_length(self) -> ContextLength:
        """The context the model was trained for (`.trained`, None: its card has none) and whether its
        positions end there (`.learned`), read from the bound card once."""
        known = self.__dict__.get("_context_length")
        if known is None:
            known = self.__dict__["_context_length"] = context_length(self.bound)
        return known

    def logits(self, ids) -> np.ndarray:
        """float32 logits [len(ids), N_V] for one sequence of token ids (NaN if the weights hold NaN);
        a card that outputs embeddings (`outputs_embeddings`) gives those, [len(ids), d_e].
        Raises ToycardsError for more ids than a learned-position model has positions."""
        ids = np.asarray(ids, dtype=np.int64).reshape(1, -1)
        if ids.size == 0:
            raise ToycardsError("logits() needs at least one token id")
        self._check_ids(ids)
        self.context_length.check_fits(ids.shape[-1], self.path)
        return self._forward_numpy(ids, None)[0]

    @property
    def outputs_embeddings(self) -> bool:
        """Whether the card outputs an embedding per token (`E ∈ ℝ^{d_e×ℓ}`: BERT) rather than a
        distribution over the vocabulary; `logits` then gives those embeddings, [len(ids), d_e]."""
        algorithm = getattr(self.bound, "algorithm", None)
        if algorithm is None:
            return False
        from toycards.lang.outputs import returns_distribution  # the card language only where asked

        return not returns_distribution(algorithm)

    def require_vocabulary_output(self, what: str) -> None:
        """A one-line ToycardsError where `what` (generate, run, eval, chat) needs next-token logits
        and the card outputs embeddings."""
        if self.outputs_embeddings:
            raise ToycardsError(
                f"{what}: this model's card outputs embeddings, not a distribution over the vocabulary;"
                " use embed (`toycards embed MODEL --text …`)"
            )

    def embed(self, inputs, pooling: str | None = None, normalize: int = 2):
        """float32 embeddings of a text or token ids (one sequence) or of a list of them, for a card
        that outputs an embedding per token: pooled by the card's `pooling` (the file's
        pooling_type; `pooling=` "none", "mean", "cls" or "last" overrides it) and normalised as
        llama.cpp's embedding example does by default (`normalize` 2: Euclidean, unit length; -1:
        as the model gives it). One sequence gives [d_e] ([ℓ, d_e] with pooling none), several [n,
        d_e]. Texts are tokenized with the model's specials ([CLS] … [SEP]); runtime/embedding.py."""
        from toycards.runtime import embedding

        if not self.outputs_embeddings:
            raise ToycardsError(
                "embed: this model's card outputs a distribution over the vocabulary, not embeddings"
            )
        return embedding.embed(self, inputs, pooling, normalize)

    rows_why = ""  # why `step` takes each sequence alone on this model (a batched pass was refused)

    def step(self, ids, caches) -> np.ndarray:
        """One decoding step of several sequences at once: `ids` [B] the next token of each sequence,
        after the tokens `caches[b]` holds (a cache per sequence, each at its own length); their
        float32 logits [B, N_V]. Each cache then holds its token too.

        On the CPU, where the steps that read other tokens are the prelude's GQAttention (its kernel
        built) and stateful calls (`State:`), the B tokens go through one forward pass, which reads
        each weight once for all of them; elsewhere (`rows_why` says why, after the first step)
        each sequence takes a step alone. Row b is what a step of sequence b alone gives: bit for
        bit for weights kept in their blocks, up to `engine.FEW_TOKENS` sequences, no state and no
        experts (the same kernels on the same rows); else to float32 rounding (docs/performance.md,
        "Many sequences at once").
        Raises ToycardsError for a cache given twice, caches of different kv types, or a sequence
        longer than a learned-position model's positions."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        caches = list(caches)
        if len(ids) != len(caches) or not caches:
            raise ToycardsError(f"step() takes one token id per cache: {len(ids)} ids, {len(caches)} caches")
        self._check_ids(ids)
        for cache in caches:
            self.context_length.check_fits(cache.length + 1, self.path)
        if len(caches) > 1 and not self.rows_why:
            try:
                return self._forward_rows(ids[:, None], Rows(caches))[:, -1, :]
            except RowsRefused as e:
                self.rows_why = str(e)
        return np.stack(
            [self._forward_numpy(ids[b : b + 1, None], c, last=True)[0, -1] for b, c in enumerate(caches)]
        )

    def _forward_rows(self, ids: np.ndarray, rows: Rows) -> np.ndarray:
        """float32 logits [B, T, N_V] of ids [B, T], row b's after the tokens `rows.caches[b]` holds,
        in one forward pass (runtime/rows.py); RowsRefused where the pass cannot take such rows,
        every cache then as it was."""
        if self.RECOMPUTE:
            raise RowsRefused("the model's cache recomputes the sequence")
        self._check_file()
        try:
            out = self._rows_pass(ids, rows)
        except BaseException:
            rows.restore()
            raise
        rows.advance(ids.shape[-1])
        self._later.step()  # (a weight that packs after some decoding counts this step)
        return out

    def _rows_pass(self, ids: np.ndarray, rows: Rows) -> np.ndarray:
        """The target's forward pass of `_forward_rows` (after each cache's `begin_pass`)."""
        raise NotImplementedError

    def new_cache(self, kv_type: str = "f32") -> KVCache:
        """An empty KV cache; `kv_type` "f16" keeps keys and values in float16 (context.KVCache)."""
        return KVCache(kv_type)

    def generate(self, prompt: str | list[str], max_tokens: int = 32, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                 parse_special: bool = False, kv_type: str = "f32",
                 n_ctx: int | None = None) -> Generation | list[Generation]:  # fmt: skip
        """The text pieces of a continuation of `prompt` (greedy at temperature 0), as a `Generation`:
        iterate it for the pieces; its `stop_reason` then says why they ended.

        A list of prompts gives a list of Generations, generated together: every sequence's
        next token in one `step`, until each has ended; each Generation is then complete (its
        pieces held, its `stop_reason` set), and is the one its prompt gets alone (`seed`
        seeds each sequence's sampling as it would alone).

        `n_ctx`: the context length, the most tokens the prompt and the continuation hold together
        (default: the trained context, `context_length.trained`; no limit when the card has none);
        past the trained context only where the positions go on (RoPE), never past a learned-position
        model's. Generation stops there with `stop_reason == "context"`. `parse_special`: special-token
        texts in the prompt (`<|im_start|>`, as a chat template writes them) are those tokens, not
        text. `kv_type`: the cache's, as `new_cache` takes it.
        Raises ToycardsError at once when the prompt leaves no room in the context, and while
        iterating when the logits are not finite (weights holding NaN or Inf)."""
        self.require_vocabulary_output("generate")
        tok = self.tokenizer
        if tok is None:
            raise ToycardsError("this model has no tokenizer (the GGUF file carries no vocabulary)")
        limit, _ = self.context_length.resolve(n_ctx, "n_ctx")
        many = isinstance(prompt, list | tuple)
        prompts = list(prompt) if many else [prompt]
        if not prompts:
            raise ToycardsError("generate() needs at least one prompt")
        encoded = [self._prompt_ids(p, parse_special, limit) for p in prompts]
        samplings = [
            {"temperature": temperature, "top_k": top_k, "top_p": top_p, "rng": np.random.default_rng(seed)}
            for _ in prompts
        ]  # fmt: skip
        if not many:
            return Generation(self._continue(encoded[0], max_tokens, limit, samplings[0], kv_type))
        return self._generate_rows(encoded, max_tokens, limit, samplings, kv_type)

    def _prompt_ids(self, prompt: str, parse_special: bool, limit: int | None) -> list[int]:
        """A prompt's ids, or a ToycardsError where it encodes to none or leaves no room in `limit`."""
        ids = self.tokenizer.encode(prompt, parse_special=parse_special)
        if not ids:
            raise ToycardsError("the prompt encodes to no tokens")
        if limit is not None and len(ids) >= limit:
            raise ToycardsError(
                f"the prompt is {len(ids)} tokens, which leaves no room to generate in the context length"
                f" {limit} ({self.context_length.hint(limit)})"
            )
        self._check_ids(np.asarray(ids, dtype=np.int64))
        return ids

    def _generate_rows(self, prompts: list[list[int]], max_tokens: int, limit: int | None,
                       samplings: list[dict], kv_type: str) -> list[Generation]:  # fmt: skip
        """`generate` of several prompts: each prompt fed through a cache of its own, then every
        sequence that goes on takes its next token in one `step` with the others."""
        seqs = [
            self._prefilled(ids, max_tokens, limit, s, kv_type)
            for ids, s in zip(prompts, samplings, strict=True)
        ]
        for i in range(max_tokens):
            going = [
                (seq, n)
                for seq in seqs
                if seq.reason is None and (n := seq.choose(i, max_tokens, limit)) is not None
            ]
            if not going:
                break
            logits = self.step([n for _, n in going], [seq.cache for seq, _ in going])
            for (seq, _), row in zip(going, logits, strict=True):
                seq.took(row, self.path)
        return [Generation(seq.finished()) for seq in seqs]

    def _continue(self, ids: list[int], max_tokens: int, limit: int | None, sampling: dict, kv_type: str):
        """The pieces of `generate`, each as it is made; returns its `stop_reason`."""
        seq = self._prefilled(ids, max_tokens, limit, sampling, kv_type)
        for i in range(max_tokens):
            next_id = seq.choose(i, max_tokens, limit)
            yield from (p for p in seq.pieces if p)
            seq.pieces.clear()
            if next_id is None:
                break
            step = np.asarray([[next_id]], dtype=np.int64)
            seq.took(self._forward_numpy(step, seq.cache, last=True)[0, -1], self.path)
        return (yield from seq.finished())

    def _prefilled(self, ids: list[int], max_tokens: int, limit: int | None, sampling: dict, kv_type: str):
        """A `_Row` for prompt `ids`, fed through a new cache with room for every token it may generate."""
        cache = self.new_cache(kv_type)
        cache.expect(len(ids) + max_tokens if limit is None else min(len(ids) + max_tokens, limit))
        logits = self.feed(np.asarray(ids, dtype=np.int64).reshape(1, -1), cache)[0]  # the last token's
        require_finite(logits[None], len(ids), self.path)
        return _Row(cache, logits, len(ids), self.tokenizer, sampling)


class _Row:
    """One sequence `generate` continues: its cache, the logits of its next token, its length, its
    text pieces not yet handed on and why it ended (None: it goes on)."""

    def __init__(self, cache: KVCache, logits: np.ndarray, position: int, tok, sampling: dict) -> None:
        self.cache, self.logits, self.position, self.tok, self.sampling = (
            cache,
            logits,
            position,
            tok,
            sampling,
        )
        self.decoder = tok.decoder(at_start=False)
        self.pieces: list[str] = []
        self.reason: str | None = None

    def choose(self, i: int, max_tokens: int, limit: int | None) -> int | None:
        """Sample the sequence's i-th new token (0-based) and add its text; the token to feed back,
        or None where the sequence ends here (`reason` set). A token is fed back only when a next
        one will be sampled, so the sequence never holds more than `limit` tokens (a prompt leaves
        room: `_prompt_ids`)."""
        from toycards.runtime.sampling import sample

        next_id = sample(self.logits, **self.sampling)
        if self.tok.is_eog(next_id):
            self.reason = "end"
            return None
        self.pieces.append(self.decoder.push(next_id))
        self.position += 1
        if i + 1 == max_tokens:
            self.reason = "max_tokens"
        elif limit is not None and self.position >= limit:
            self.reason = "context"
        return next_id if self.reason is None else None

    def took(self, logits: np.ndarray, path: str | None) -> None:
        """The logits (N_V,) of the token fed back: the next token's distribution."""
        require_finite(logits[None], self.position, path)
        self.logits = logits

    def finished(self) -> Iterator[str]:
        """Its pieces left (the decoder's tail last), returning why it ended: a Generation's iterator."""
        yield from (p for p in (*self.pieces, self.decoder.flush()) if p)
        return self.reason or "max_tokens"


class Generation(Iterator[str]):
    """What `ModelAPI.generate` returns: an iterator over the text pieces; once it is exhausted,
    `stop_reason` says why the text ended (None until then):

    - "end": the model chose an end-of-generation token;
    - "max_tokens": `max_tokens` tokens were generated;
    - "context": the prompt and the text filled the context length (`n_ctx`).
    """

    STOP_REASONS = ("end", "max_tokens", "context")

    def __init__(self, pieces: Iterator[str]) -> None:
        self._pieces = pieces
        self.stop_reason: str | None = None

    def __iter__(self) -> Generation:
        return self

    def __next__(self) -> str:
        try:
            return next(self._pieces)
        except StopIteration as done:
            if self.stop_reason is None:
                self.stop_reason = done.value
            raise


def require_finite(logits: np.ndarray, first_position: int, path: str | None = None) -> None:
    """Raise ToycardsError when a row of `logits` [T, N_V] holds NaN or ±Inf; row t is the token at
    1-based `first_position + t`. The message names the file and how to find the culprit tensor.

    >>> require_finite(np.array([[0.0, 1.0], [np.nan, 0.0]]), 1, "m.gguf")
    Traceback (most recent call last):
    toycards.errors.ToycardsError: m.gguf: the logits at position 2 are not finite (NaN); run `toycards describe m.gguf --check-tensors`
    """
    finite = np.isfinite(logits).all(axis=-1)  # (T,)
    if finite.all():
        return
    t = int(np.argmin(finite))
    row = logits[t]
    kind = " and ".join(k for k, bad in (("NaN", np.isnan(row).any()), ("Inf", np.isinf(row).any())) if bad)
    where = f"{path}: " if path else ""
    hint = f"run `toycards describe {path} --check-tensors`" if path else "the weights may hold NaN or Inf"
    raise ToycardsError(f"{where}the logits at position {first_position + t} are not finite ({kind}); {hint}")
