"""Run-time context of one forward pass: token positions and the KV cache.

Owns: `KVCache` (per call that reads a context, such as attention, the keys and values of
every token seen so far, grown in place by doubling, or for an attention whose mask is a sliding
window (`windowed`), of the tokens the window can still reach; per stateful call (a `State:` block), the
state it left; or, for a card the cache cannot follow, the token ids so far), `Context` (the
absolute 1-based positions of the tokens in this pass and a cursor over the cache's slots), the
helpers generated code calls: `positions(ctx, n)`, `extend(ctx, K, V, …)`, `windowed(mask, w)` (with
`reached_from`, the rows a window has left behind) and
`state_slot`/`recall`/`keep` (decoder state), and the context-length policy: `ContextLength`
(the context a model was trained for, read from its bound card, and whether its positions stop
there) with the limit `run`, `eval`, `generate` and `logits` hold a sequence to.
Leaves out: array maths (runtime/numpy/ops.py / runtime/torch/ops.py); which arguments are a call's context
(the checker decides: toycards/checker/tokenflow.py); windowed scoring (models/evaluate.py); a pass
whose batch rows are sequences with caches of their own (runtime/rows.py: `Context.rows`, where
`positions` and `extend` refuse and `recall`/`keep` go row by row).

Generated code makes the same context-reading and stateful calls in the same order on every
pass, so the i-th such call of a pass owns slot i of the cache (of its keys and values, or of
its state).
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass

from toycards.errors import ToycardsError
from toycards.runtime import rows

KV_TYPES = ("f32", "f16")  # what a cache keeps its floating rows as (llama.cpp's --cache-type-k names)
LAZY_BYTES = 1 << 16  # cache buffers from this size on are zero pages mapped on demand


def zero_pages(nbytes: int) -> mmap.mmap | None:
    """`nbytes` of zeros that take memory only where written (an anonymous mapping: the kernel maps
    a zeroed page at its first write), for a cache buffer of at least LAZY_BYTES, else None (the
    caller allocates as usual). A cache grows by doubling, so half a buffer is rows not yet used:
    zeros from the allocator are written out at once (malloc reuses pages, torch fills them), and
    every layer would hold its unused rows in memory."""
    return mmap.mmap(-1, nbytes) if nbytes >= LAZY_BYTES else None


class KVCache:
    """Keys and values per attention call; `length` tokens are stored.

    `kv_type` "f16" keeps every floating row in float16, as llama.cpp's cache does by default: each
    key and value rounded to the nearest half once, as it is stored, for half the memory and half the
    bytes a decoding step reads; they are read back as the dtype they came in (float32). "f32" (the
    default) keeps them as they came, so that cached decoding computes what a full pass computes."""

    def __init__(self, kv_type: str = "f32") -> None:
        if kv_type not in KV_TYPES:
            raise ToycardsError(f"KV cache type {kv_type!r}: expected one of {', '.join(KV_TYPES)}")
        self.kv_type = kv_type
        self.half = kv_type == "f16"
        self.length = 0
        # [buffers (one per extended array), used, a kernel's note on the buffers (engine/torch/glue.py)]
        self.slots: list[list] = []
        self.ids = None  # the token ids so far, for a model that recomputes (`Model.RECOMPUTE`)
        # decoder state (`State:` blocks): per stateful call of a pass, in order, what it left; a
        # pass's new states are staged and kept only when the pass ends (`advance`), so that a pass
        # cut short (Ctrl-C) leaves the states of the tokens the cache holds
        self.states: list[tuple] = []
        self.staged: dict[int, tuple] = {}
        self.prepared: dict = {}  # what a target's kernels prepared for this cache's passes (their keys)
        self.expected = 0  # the tokens the sequence is expected to reach (`expect`): rows to make room for
        # sliding windows: slot → the window w of the mask that reads it, where a kernel keeps only
        # the rows its queries can still reach (`window_slot`), and slot → the rows dropped ahead of
        # its buffers' first row: the slot's row i holds the token at position first + i + 1
        self.windows: dict[int, int] = {}
        self.firsts: dict[int, int] = {}

    def reset(self) -> None:
        """Forget every token. The buffers stay, and the next tokens are written over the old rows
        (only rows written since the reset are ever read), as llama.cpp keeps its KV cache's memory
        across sequences: a new sequence then faults in no fresh pages (a cost on its prefill), and
        nothing is freed only to be mapped again."""
        self.length = 0
        for entry in self.slots:
            entry[1] = 0
        self.firsts = {}
        self.expected = 0
        self.ids = None
        self.states, self.staged = [], {}

    def truncate(self, n: int) -> None:
        """Keep the first `n` tokens and forget the rest, as `reset` forgets all of them (a chat
        whose conversation renders differently from token n + 1 on). Also after a pass that was cut
        short: its slots may hold rows past `length`, and this sets every slot back to n."""
        if not 0 <= n <= self.length:
            raise ValueError(f"cannot keep {n} tokens of a cache that holds {self.length}")
        if not self.can_keep(n):
            raise ValueError(f"cannot go back to {n} tokens: the model's state holds all {self.length}")
        self.staged = {}
        if n == 0:
            self.states = []
        self.length = n
        for slot, entry in enumerate(self.slots):
            entry[1] = n - self.firsts.get(slot, 0)  # every slot holds one row per token so far
            # (less those a window dropped, which can_keep checked no later query reads)
        if self.ids is not None:
            self.ids = self.ids[..., :n] if n else None

    def advance(self, n: int) -> None:
        """A pass over n more tokens ended: they are held, and the states it left are kept."""
        self.length += n
        for slot, values in sorted(self.staged.items()):
            if slot == len(self.states):
                self.states.append(values)
            else:
                self.states[slot] = values
        self.staged = {}

    def can_keep(self, n: int) -> bool:
        """Whether `truncate(n)` can keep the first n tokens: a state (`State:`) sums up every token
        so far, so a cache holding one can only keep all of them or none; a sliding window's slot
        keeps no row its window has left behind, so n must leave it every row the next token reads."""
        if n in (0, self.length):
            return True
        if self.states:
            return False
        return all(first <= reached_from(n, self.windows[slot]) for slot, first in self.firsts.items())

    def expect(self, n: int) -> None:
        """The sequence will hold n tokens (a prompt and the tokens to generate after it): a buffer that
        grows makes room for that many rows at once, instead of doubling (each doubling holds the old
        buffer and its copy at once; a buffer's rows not yet written take no memory, `zero_pages`)."""
        self.expected = max(self.expected, int(n))

    def window_slot(self, slot: int, window: int) -> int:
        """Slot `slot` (this pass's next, or one that exists) is read by an attention whose mask lets
        a query at position p see no key at position p − window or before (`windowed`): from the next
        pass on the cache keeps only the rows later queries can reach. Its rows dropped so far."""
        if self.windows.setdefault(slot, window) != window:
            raise ValueError(
                f"slot {slot} is read through windows of {self.windows[slot]} and {window} tokens"
            )
        return self.firsts.get(slot, 0)

    def begin_pass(self) -> None:
        """Before a pass over more tokens: each sliding window's slot drops the rows no query from
        position length + 1 on can read (the token at position p is read by queries before
        p + window alone) and moves the rest to the front of its buffers."""
        for slot, window in self.windows.items():
            if slot >= len(self.slots):
                continue
            first = self.firsts.get(slot, 0)
            drop = reached_from(self.length, window) - first
            if drop <= 0:
                continue
            entry = self.slots[slot]
            used = entry[1]
            for buf in entry[0]:
                if buf is not None and used > drop:
                    buf[..., : used - drop, :] = _copy(buf[..., drop:used, :])
            entry[1] = max(0, used - drop)
            self.firsts[slot] = first + drop

    def append(self, slot: int, ops, *arrays):
        """Store the new columns (rows in code) of each array; all columns so far, per array (those a
        sliding window dropped as zeros: its mask gives them no weight)."""
        n_new = arrays[0].shape[-2]
        buffers, used = self.reserve(slot, ops, arrays, n_new)
        for buf, a in zip(buffers, arrays, strict=True):
            buf[..., used : used + n_new, :] = a  # (rounded to float16 in a half cache)
        self.slots[slot][1] = used + n_new
        held = [ops.cast_like(buf[..., : used + n_new, :], a) for buf, a in zip(buffers, arrays, strict=True)]
        first = self.firsts.get(slot, 0)
        if first:
            held = [ops.cat_cols([ops.zeros_rows(h, first), h]) for h in held]
        return tuple(held)

    def reserve(self, slot: int, ops, likes, n_new: int):
        """Room for n_new more rows in each of slot's buffers (shaped like `likes` but for the row
        count, grown by doubling): the buffers and the rows already used. The caller writes rows
        used … used + n_new − 1 and then sets `slots[slot][1]` (as `append` does)."""
        if slot == len(self.slots):
            self.slots.append([[None] * len(likes), 0, None])
        buffers, used, _ = self.slots[slot]
        for k, a in enumerate(likes):
            buf = buffers[k]
            if buf is not None and (buf.shape[:-2] != a.shape[:-2] or buf.shape[-1] != a.shape[-1]):
                if used:
                    raise ValueError(
                        "the cached rows changed shape within one cache (batch, heads or head size);"
                        " start a new cache"
                    )
                buf = buffers[k] = None  # after a reset: a buffer of the new shape below
                self.slots[slot][2] = None  # and no kernel's note on the old one
            if buf is None or buf.shape[-2] < used + n_new:
                rows = max(2 * (used + n_new), 16) if self.expected < used + n_new else self.expected
                if slot in self.windows:  # the most a window's slot holds during a pass of n_new
                    rows = max(used + n_new, min(rows, self.windows[slot] - 1 + n_new))
                buffers[k] = _grow(ops, buf, a, used, rows, self.half)
        return buffers, used


def reached_from(n: int, window: int) -> int:
    """The rows a window's slot drops after n tokens: the next query, at position n + 1, reads no key
    at position n + 1 − window or before."""
    return max(0, n + 1 - window)


def _copy(rows):
    """A copy of `rows` (NumPy or torch), to be written over memory it overlaps."""
    return rows.clone() if hasattr(rows, "clone") else rows.copy()


def _grow(ops, old, like, used: int, capacity: int, half: bool):
    """A buffer of `capacity` rows shaped like `like` otherwise (float16 when `half` and `like` is
    floating), holding the `used` rows of `old`."""
    new = ops.zeros_rows(like, capacity, half)
    if old is not None and used:
        new[..., :used, :] = old[..., :used, :]
    return new


class Context:
    """Positions of this pass's tokens (1-based, after those already cached)."""

    def __init__(self, n_new: int, cache: KVCache | None, ops) -> None:
        self.cache, self.ops = cache, ops
        self.n_new = n_new
        # a pass whose batch rows are sequences at positions of their own (runtime/rows.py): positions [B, n_new]
        self.rows = cache if getattr(cache, "RAGGED", False) else None
        if self.rows is not None:
            self.offset, self.pos = None, self.rows.positions(n_new)
        else:
            self.offset = cache.length if cache is not None else 0
            self.pos = Context.positions_after(self.offset, n_new, ops)
        self.slot = 0
        self.state_slot = 0
        self.memo: dict = {}  # what the layers of this pass share (RoPE angles, masks): kernels' own keys

    @staticmethod
    def positions_after(offset: int, n_new: int, ops):
        """The 1-based positions of n_new tokens after `offset` cached ones (what a replayed decoding
        step takes for its own too: engine/torch/replay.py)."""
        return ops.arange(offset + 1, offset + n_new + 1)

    def keep_last(self) -> None:
        """From here on the pass computes its last token alone (generated code, `last=True`)."""
        self.pos = self.pos[..., -1:]

    def finish(self) -> None:
        if self.cache is not None:
            self.cache.advance(self.offset + self.n_new - self.cache.length)


_MASK_VALUES = (int, float, str, bool)  # what a mask shared by the layers of a pass may close over


def gqa_site(ctx: Context | None, kind: str, mask, rho, t, values: tuple, make):
    """What the GQAttention calls of one pass share (RoPE's angles at its positions, the mask, a
    kernel's prepared call), kept in `ctx.memo`: the calls with the same RoPE (ρ, positions t), the
    same `values` (θ, layout, hyperparameters) and the same mask share the object `make()` made for
    the first of them. Generated code makes a new mask lambda each layer, so a mask is the same when
    its code, the values its closure holds and its default arguments are (plain values only; else,
    or where `values` do not hash, nothing is shared)."""
    memo = ctx.memo if ctx is not None else None
    key = site = None
    code = getattr(mask, "__code__", None)
    if memo is not None and code is not None:
        cells, defaults, named = mask.__closure__, mask.__defaults__, mask.__kwdefaults__
        held: tuple | None = ()
        if cells is not None or defaults is not None or named is not None:  # (a causal mask holds none)
            pairs = (named or {}).items()  # keyword-only defaults: their names and values
            held = (
                *(c.cell_contents for c in cells or ()),
                *(defaults or ()),
                *(v for p in pairs for v in p),
            )
            if not all(isinstance(v, _MASK_VALUES) for v in held):
                held = None
        if held is not None:
            key = (kind, code, held, id(rho), id(t), *values)
            try:
                site = memo.get(key)
            except TypeError:  # a value that does not hash (θ as a 0-d array, say): nothing shared
                key = None
    if site is None or site.rho is not rho or site.t is not t:  # the ids of dead objects can recur
        site = make()
        if key is not None:
            memo[key] = site
    return site


def windowed(mask, window):
    """The mask function `mask` (generated code's `lambda t_z, t_x: …`), noted as one that lets a query
    at position p see no key at p − window or before, where `window` is a whole number ≥ 1: a conjunct
    of its card text says so (codegen reads `t_x − t_z < w` and its other spellings,
    toycards/lang/masks.py). A kernel may then keep only the rows later queries can reach."""
    w = _whole_window(window)
    if w is not None:
        mask.window = w
    return mask


def _whole_window(window) -> int | None:
    """`window` as an int where it is a whole number ≥ 1 (a hyperparameter's value), else None."""
    whole = isinstance(window, int | float) and not isinstance(window, bool) and window == int(window)
    return int(window) if whole and window >= 1 else None


def positions(ctx: Context | None, n: int):
    """Absolute positions 1…n of a windowed sequence (1…n itself without a context)."""
    if ctx is None:
        import numpy as np

        return np.arange(1, n + 1)
    if ctx.rows is not None:
        rows.refuse("the card's steps read the token positions")
    return ctx.pos


def extend(ctx: Context | None, *arrays, mask=None, window=None):
    """Each array with the columns of every token so far: the cached ones, then its new ones. `mask`
    (its `window`, noted by `windowed`) or `window`: the one mask through which the call reads these
    arrays states a sliding window (codegen's WINDOW_READING), so the cache keeps the rows it still
    reaches, and those before come back as zeros, which the mask gives no weight."""
    if ctx is None or ctx.cache is None:
        return arrays
    if ctx.rows is not None:
        rows.refuse("the card's steps extend the KV cache")
    slot = ctx.slot
    ctx.slot += 1
    w = getattr(mask, "window", None) if mask is not None else _whole_window(window)
    if w is not None:
        ctx.cache.window_slot(slot, w)
    return ctx.cache.append(slot, ctx.ops, *arrays)


def state_slot(ctx: Context | None) -> int | None:
    """The cache's slot for the state of this stateful call (the i-th of the pass owns slot i), or
    None when there is no cache: every state then starts at zeros."""
    if ctx is None or ctx.cache is None:
        return None
    slot = ctx.state_slot
    ctx.state_slot += 1
    return slot


def recall(ctx: Context | None, slot: int | None, k: int, zeros):
    """State k of `slot` as the same call of the previous pass left it; `zeros` at the start."""
    if slot is None:
        return zeros
    if ctx.rows is not None:
        return ctx.rows.recall(slot, k, zeros)
    if slot >= len(ctx.cache.states):
        return zeros
    kept = ctx.cache.states[slot][k]
    if tuple(kept.shape) != tuple(zeros.shape):
        raise ValueError("the batch changed within one cache; start a new cache")
    return kept


def keep(ctx: Context | None, slot: int | None, *values) -> None:
    """The state `slot` leaves for the next pass over this sequence."""
    if slot is not None and ctx.rows is not None:
        ctx.rows.keep(slot, values)
    elif slot is not None:
        ctx.cache.staged[slot] = values  # kept when the pass ends (KVCache.advance)


# ── the context length ──────────────────────────────────────────────────────────────────
CONTEXT_KEY = ".context_length"  # the metadata key ("{arch}.context_length") a card binds its context to
CONTEXT_NAME = "ℓ_max"  # the paper's name for it, for a card that binds it to no key


@dataclass(frozen=True)
class ContextLength:
    """The context length a model was trained for, from its bound card: `trained` is the value of
    the hyperparameter bound to "{arch}.context_length" (else of one named ℓ_max), None for a card
    without one (no limit). `learned`: a parameter has that many position columns
    (`W_p ∈ ℝ^{d_e×ℓ_max}`), so no position past it exists; positions computed on the fly (RoPE)
    go on past it, untrained.

    >>> rope, learned = ContextLength(256, "ℓ_max", False), ContextLength(64, "ℓ_max", True)
    >>> rope.resolve(None), rope.resolve(512)
    ((256, None), (512, 'warning: --ctx 512 is past the context length 256 the model was trained for; what it computes past 256 tokens may be poor'))
    >>> learned.resolve(128)
    Traceback (most recent call last):
    toycards.errors.ToycardsError: --ctx 128: the model has 64 learned positions (ℓ_max = 64) and cannot read past them
    """

    trained: int | None
    name: str | None = None  # the card's name for it
    learned: bool = False

    def resolve(self, n_ctx: int | None, option: str = "--ctx") -> tuple[int | None, str | None]:
        """The limit to hold a sequence to for a requested `n_ctx` (None: the trained context), and a
        one-line warning when it goes past the trained context of a model that can (else None).
        Raises ToycardsError for an `n_ctx` below 1 or past a learned-position model's positions."""
        if n_ctx is None:
            return self.trained, None
        if isinstance(n_ctx, bool) or int(n_ctx) != n_ctx or n_ctx < 1:
            raise ToycardsError(f"{option} {n_ctx}: expected a whole number of tokens, at least 1")
        n_ctx = int(n_ctx)
        if self.trained is None or n_ctx <= self.trained:
            return n_ctx, None
        if self.learned:
            raise ToycardsError(
                f"{option} {n_ctx}: the model has {self.trained} learned positions"
                f" ({self.name} = {self.trained}) and cannot read past them"
            )
        return n_ctx, (
            f"warning: {option} {n_ctx} is past the context length {self.trained} the model was trained"
            f" for; what it computes past {self.trained} tokens may be poor"
        )

    def hint(self, limit: int) -> str:
        """What changes `limit`, for a message: `--ctx`, unless the model's positions end there."""
        if self.learned and limit == self.trained:
            return f"the model has {self.trained} learned positions"
        return "--ctx N to change"

    def check_fits(self, n: int, path: str | None = None) -> None:
        """Raise ToycardsError when `n` tokens are more than a learned-position model has positions
        for (its forward pass would index past them); any `n` for other models."""
        if self.learned and self.trained is not None and n > self.trained:
            where = f"{path}: " if path else ""
            raise ToycardsError(
                f"{where}{n} tokens do not fit the model's {self.trained} learned positions"
                f" ({self.name} = {self.trained}); a longer text goes in windows of at most {self.trained}"
            )


def context_length(bound) -> ContextLength:
    """The ContextLength of a bound card (`models.binding.Bound`; None: no limit)."""
    if bound is None:
        return ContextLength(None)
    algorithm = bound.algorithm
    name = next((d.names[0] for d in algorithm.hyper_decls if _binds_context(d)), None)
    if name is None and CONTEXT_NAME in bound.hyper:
        name = CONTEXT_NAME
    value = bound.hyper.get(name) if name is not None else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return ContextLength(None)
    learned = any(_names_dim(dim, name) for d, _ in algorithm.all_params() for dim in _dims(d.type))
    return ContextLength(value, name, learned)


def _binds_context(decl) -> bool:
    binding = decl.binding
    if binding is None or binding.kind != "from" or len(decl.names) != 1:
        return False
    return any(src.tensor.endswith(CONTEXT_KEY) for alternatives in binding.sources for src in alternatives)


def _dims(typ) -> tuple:
    return tuple(getattr(typ, "dims", None) or ())


def _names_dim(dim, name: str) -> bool:
    """Whether the dimension expression `dim` (lang.ir.Dim) involves the dimension `name`."""
    if getattr(dim, "name", None) == name:
        return True
    return any(
        _names_dim(part, name) for part in (getattr(dim, "left", None), getattr(dim, "right", None)) if part
    )
