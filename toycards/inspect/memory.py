"""`toycards describe FILE --memory`: the memory a GGUF file takes at each context, for toycards'
runtime and for what llama.cpp would allocate, every figure derived from the bound card.

Owns: `memory_report(card, contexts, kv_type, batch) -> MemoryReport` (per context: the weights,
the KV cache or decoder state, the activations of a prefill, the totals; for the NumPy target
and for llama.cpp), `cache_bytes(card, n, kv_type, batch)` (what `Model.new_cache()` allocates
after a prefill of n tokens), `weight_memory(path, card)` (the weights as stored, by GGML type,
and how the runtime holds them), `kept_sites` (what each call site keeps), `parse_contexts`
(`--ctx 2048,8192,max`) and the report's text, explanation and JSON.
Leaves out: reading the card (footprint.py walks it), llama.cpp's rules (llama_cpp_memory.py),
the runtime's rules themselves (called where they live: KVCache's growth in runtime/context.py,
through cache_rows.py,
which weights get packed copies in engine/packing.py, how the loader keeps each tensor in
models/load.py), the command line (cli/files.py).

toycards (numpy target). A prompt goes through the model `ubatch` tokens a pass (runtime/model_base.py
UBATCH). The cache keeps, per call its plan extends, the arrays of every token (rows made for the
prompt the cache is told to expect, `KVCache.expect`, grown by doubling past it: `KVCache.reserve`; buffers of LAZY_BYTES or more are zero pages mapped as they are
written, so "resident" counts the pages the rows written so far touch), a sliding window's layers
the rows their window still reaches (`KVCache.begin_pass`), and per stateful call its state. The
activations are those of the prompt's last pass of at most `ubatch` tokens. llama.cpp's figures
follow its own rules (llama_cpp_memory.py); its compute buffer (sized by ggml's graph allocator)
and its output buffer are left out.

>>> from toycards.inspect.describe import describe
>>> report = memory_report(describe("examples/tiny-llama.gguf"), (64,), "f16")
>>> report.columns[0].toycards["kv_allocated"]  # K, V · L = 2 · 2 · 64 rows (as told to expect) · 32 · 2 bytes
16384
>>> report.columns[0].llama_cpp["kv"]  # K, V · L = 2 · 256 cells (64 padded) · 32 · 2 bytes
65536
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from toycards.errors import ToycardsError
from toycards.inspect.cache_rows import prefill_passes, slot_after, touched_bytes
from toycards.inspect.footprint import FIELD_BYTES, Footprint, Kept, footprint, footprints
from toycards.inspect.header import human_size
from toycards.inspect.llama_cpp_memory import LLAMA_CPP_UBATCH, llama_cpp_cache, llama_cpp_recurrent


def _ubatch() -> int:
    """The tokens a prefill pass takes (runtime/model_base.py UBATCH, imported when asked)."""
    from toycards.runtime.model_base import UBATCH

    return UBATCH


KV_CACHE_TYPES = ("f16", "f32", "q8_0")  # what --kv-cache takes (llama.cpp's --cache-type-k names)
TOYCARDS_DEFAULT_KV, LLAMA_CPP_DEFAULT_KV = "f32", "f16"
DEFAULT_CONTEXTS = (2048, 8192, 32768, "max")


@dataclass
class WeightMemory:
    """The file's tensors as stored (`stored`: GGML type → bytes, `tensors`: type → count) and how
    the runtime holds those the card binds: read in the file's pages (`mapped`), copied into memory
    of its own (`copies`: small F32 tensors, those dequantised to float32, constants), and packed
    copies (`packed_first`: made as the model loads or at its first decoding step; `packed_later`:
    after some decoding), each in place of its file pages."""

    stored: dict[str, int] = field(default_factory=dict)
    tensors: dict[str, int] = field(default_factory=dict)
    mapped: int = 0
    copies: int = 0
    packed_first: int = 0
    packed_later: int = 0

    @property
    def total_stored(self) -> int:
        return sum(self.stored.values())

    @property
    def resident(self) -> int:
        """Bytes the runtime holds for its weights once every copy is made."""
        return self.mapped + self.copies + self.packed_first + self.packed_later


@dataclass
class Column:
    """The figures at one context: `toycards` and `llama_cpp` map a row name to bytes (None: not
    applicable, such as a q8_0 cache toycards does not keep)."""

    context: int
    toycards: dict[str, int | None]
    llama_cpp: dict[str, int | None]


@dataclass
class MemoryReport:
    path: str
    batch: int
    kv_types: dict[str, str]  # "toycards", "llama.cpp" → the cache type each keeps
    weights: WeightMemory
    columns: list[Column]
    formulas: list[tuple[str, str]]  # (what, card expression)
    notes: list[str]
    sites: list[dict] = field(default_factory=list)  # what each call site keeps (`kept_sites`)

    def text(self, explain: bool = False) -> str:
        """The table, one column per context (and with `explain`, the formulas)."""
        return _table(self, explain)

    def to_json(self) -> dict:
        return {
            "batch": self.batch,
            "kv_cache": dict(self.kv_types),
            "weights": {
                "stored": dict(self.weights.stored),
                "tensors": dict(self.weights.tensors),
                "file_pages": self.weights.mapped,
                "copies": self.weights.copies,
                "packed_first": self.weights.packed_first,
                "packed_later": self.weights.packed_later,
            },
            "contexts": [
                {"context": c.context, "toycards": dict(c.toycards), "llama.cpp": dict(c.llama_cpp)}
                for c in self.columns
            ],
            "kept": list(self.sites),
            "formulas": [{"what": w, "formula": f} for w, f in self.formulas],
            "notes": list(self.notes),
        }


# ── contexts ────────────────────────────────────────────────────────────────────────────
def parse_contexts(text: str | None, card) -> tuple[int, ...]:
    """The contexts of `--ctx` ("2048,8192,max"; None: DEFAULT_CONTEXTS, without those past a
    learned-position model's positions), `max` being the file's context length.

    >>> from toycards.inspect.describe import describe
    >>> parse_contexts("max,1k,64", describe("examples/tiny-llama.gguf"))
    (64, 256, 1024)
    """
    from toycards.runtime.context import context_length

    limit = context_length(card.bound)
    items = DEFAULT_CONTEXTS if text is None else [t.strip() for t in text.split(",") if t.strip()]
    out = set()
    for item in items:
        if item == "max":
            if limit.trained is None:
                raise ToycardsError(f"{card.file}: --ctx max: the file gives no context length")
            out.add(limit.trained)
            continue
        n = _count(item)
        if text is None and limit.learned and n > limit.trained:
            continue
        limit.resolve(n, "--ctx")  # a learned-position model cannot go past its positions
        out.add(n)
    if not out:
        raise ToycardsError("--ctx: give at least one context length (2048,8192,max)")
    return tuple(sorted(out))


def _count(item) -> int:
    if isinstance(item, int):
        return item
    scale = {"k": 1024, "K": 1024}.get(item[-1:], 1)
    digits = item[:-1] if scale > 1 else item
    if not digits.isdigit() or int(digits) < 1:
        raise ToycardsError(f"--ctx {item}: expected a whole number of tokens (2048, 8k) or max")
    return int(digits) * scale


# ── weights ─────────────────────────────────────────────────────────────────────────────
def weight_memory(path, card) -> WeightMemory:
    """The weights of the file at `path` as stored, and as the NumPy target holds those `card`
    (a DescribedCard) binds: each tensor as the loader keeps it (models/load.py), the packed
    copies as engine/packing.py decides them."""
    from toycards import engine
    from toycards.gguf.reader import open_gguf
    from toycards.models.load import _kept

    out = WeightMemory()
    with open_gguf(path) as f:
        for info in f.tensors.values():
            out.stored[info.type_name] = out.stored.get(info.type_name, 0) + info.n_bytes
            out.tensors[info.type_name] = out.tensors.get(info.type_name, 0) + 1
        seen: set = set()
        for p in card.bound.params:
            if p.key in seen or (p.tensor, p.rows) in seen:
                continue
            seen |= {p.key, (p.tensor, p.rows)}
            if p.tensor is None:
                out.copies += math.prod(p.stored_shape) * FIELD_BYTES["R"]  # a constant fill
                continue
            kept = _kept(f, p, "numpy", f.read)
            if getattr(kept, "is_quantized_weight", False):
                kept = engine.block_matrix(kept)  # a stack of experts: its blocks, one matrix
                size = kept.blocks.nbytes
                if engine.copy_due(kept):
                    out.packed_first += _on_cache_line(size)
                elif engine.LaterPacking([kept]).waiting:
                    out.packed_later += _on_cache_line(size)
                else:
                    out.mapped += size
            elif kept is not None:  # a small F32 tensor, read into memory of its own
                out.copies += kept.nbytes
            elif f.tensor_info(p.tensor).type_name == "F32":
                out.mapped += math.prod(p.stored_shape) * FIELD_BYTES["R"]  # a view of the file
            else:
                out.copies += math.prod(p.stored_shape) * FIELD_BYTES["R"]  # dequantised to float32
    return out


def _on_cache_line(n: int) -> int:
    return -(-n // 64) * 64  # packing.py puts each copy on a cache line of its own


# ── the KV cache ────────────────────────────────────────────────────────────────────────
def _entry_bytes(k: Kept, kv_type: str) -> int:
    """Bytes of one entry of a kept array: float16 in an f16 cache where it is floating."""
    if k.kind == "kv" and kv_type == "f16" and k.floating:
        return 2
    return FIELD_BYTES.get(k.field, 4)


def _kv_toycards(fp: Footprint, n: int, kv_type: str, batch: int) -> dict[str, int | None]:
    """What the runtime's cache holds after a prefill of n tokens of `batch` sequences."""
    from toycards.runtime.context import LAZY_BYTES

    kv = [k for k in fp.kept if k.kind == "kv"]
    states = [k for k in fp.kept if k.kind == "state"]
    out: dict[str, int | None] = {"kv_allocated": 0, "kv_resident": 0}
    if kv and kv_type not in ("f16", "f32"):
        out = {"kv_allocated": None, "kv_resident": None}  # a cache type the runtime does not keep
    elif kv and not fp.recompute:
        passes = prefill_passes(n)
        for k in kv:
            window = k.window if k.drops else None
            rows, held = slot_after(passes, window, expected=n)
            s = _entry_bytes(k, kv_type)
            nbytes = batch * k.elements.value * rows * s
            out["kv_allocated"] += nbytes
            lazy = nbytes >= LAZY_BYTES
            # (a window's slot moves its rows to the front: the pages of its first `rows` rows)
            touched = rows if window is not None and held < n else held
            out["kv_resident"] += (
                touched_bytes(batch * k.elements.value // k.row, rows, min(touched, rows), k.row * s)
                if lazy
                else nbytes
            )
    out["state"] = (
        sum(batch * k.elements.value * _entry_bytes(k, kv_type) for k in states) if not fp.recompute else 0
    )
    out["token_ids"] = batch * n * FIELD_BYTES["V"] if fp.recompute else 0
    return out


# ── the report ──────────────────────────────────────────────────────────────────────────
def _checked(card) -> None:
    if card.bound is None or card.declaration_only:
        raise ToycardsError(f"{card.file}: no card with steps describes this file, so its memory is unknown")
    if card.errors:
        raise ToycardsError(f"{card.file}: {card.errors[0].message} (`toycards describe` lists the problems)")


def cache_bytes(card, n: int, kv_type: str = "f32", batch: int = 1) -> int:
    """Bytes of the arrays `Model.new_cache(kv_type)` holds after a prefill of n tokens of `batch`
    sequences of the file `card` (a DescribedCard) describes: keys and values, states, token ids."""
    _checked(card)
    kv = _kv_toycards(footprint(card, card.bound.hyper, 1), n, kv_type, batch)
    return kv["kv_allocated"] + kv["state"] + kv["token_ids"]


def memory_report(card, contexts, kv_type: str | None = None, batch: int = 1) -> MemoryReport:
    """The memory of the file `card` (a DescribedCard) describes at each of `contexts`, a prefill
    of that many tokens of `batch` sequences; `kv_type` for both caches (None: each one's default,
    toycards f32, llama.cpp f16). Raises ToycardsError for a file its card does not fit."""
    _checked(card)
    if kv_type is not None and kv_type not in KV_CACHE_TYPES:
        raise ToycardsError(f"--kv-cache {kv_type}: expected one of {', '.join(KV_CACHE_TYPES)}")
    if batch < 1:
        raise ToycardsError(f"--batch {batch}: expected at least 1 sequence")
    types = {"toycards": kv_type or TOYCARDS_DEFAULT_KV, "llama.cpp": kv_type or LLAMA_CPP_DEFAULT_KV}
    weights = weight_memory(card.file, card)
    recurrent = llama_cpp_recurrent(card.file)
    layer_state = recurrent[0] if recurrent is not None else None
    columns, notes = [], []
    first = None
    ubatch = _ubatch()
    # a prompt's passes take `ubatch` tokens at most (all of them where the cache cannot follow)
    lengths = sorted({*contexts, *(min(n, ubatch) for n in contexts)})
    walked = dict(zip(lengths, footprints(card, card.bound.hyper, lengths), strict=True))
    for n in contexts:
        fp = walked[n]
        first = first or fp
        mine = _kv_toycards(fp, n, types["toycards"], batch) | {"weights": weights.resident}
        mine["activations_estimate"] = (fp if fp.recompute else walked[min(n, ubatch)]).activations * batch
        resident = [mine[k] for k in ("weights", "kv_resident", "state", "token_ids", "activations_estimate")]
        mine["total"] = None if None in resident else sum(resident)
        theirs = llama_cpp_cache(fp, n, types["llama.cpp"], batch, layer_state)
        theirs["weights"] = weights.total_stored
        parts = [theirs[k] for k in ("weights", "kv", "kv_sliding", "recurrent")]
        theirs["total"] = None if None in parts else sum(parts)
        columns.append(Column(n, mine, theirs))
        notes += [x for x in fp.notes if x not in notes]
    if first.recompute:
        notes.append(f"the cache cannot follow this card, so it keeps the token ids: {first.recompute}")
    if types["toycards"] not in ("f16", "f32") and any(k.kind == "kv" for k in first.kept):
        notes.append(f"toycards keeps its cache as f32 or f16, not {types['toycards']}")
    formulas = _formulas(first, types, weights, recurrent, card.bound.hyper)
    report = MemoryReport(str(card.file), batch, types, weights, columns, formulas, notes)
    report.sites = kept_sites(first)
    return report


def kept_sites(fp: Footprint) -> list[dict]:
    """What each call site keeps per sequence, in the order a pass runs them: `kind` ("kv": per
    token; "state": in all), the callee and its input or state `name`, the `caller`, `elements`
    and the card `expression` they come from, the `window` of its mask, and the `layers` (the
    iterations of the entry point's outermost loop) it runs in.

    >>> from toycards.inspect.describe import describe
    >>> from toycards.inspect.footprint import footprint
    >>> card = describe("examples/tiny-llama.gguf")
    >>> first = kept_sites(footprint(card, card.bound.hyper, 1))[0]
    >>> [first[k] for k in ("kind", "callee", "name", "elements", "expression", "window", "layers")]
    ['kv', 'attention', 'K', 32, 'H_kv·d_h', None, [1, 2]]
    """
    sites: dict[tuple, dict] = {}
    for k in fp.kept:
        key = (k.kind, k.callee, k.name, k.caller, k.elements.value, str(k.elements), k.window)
        site = sites.get(key)
        if site is None:
            site = sites[key] = {"kind": k.kind, "callee": k.callee, "name": k.name, "caller": k.caller}
            site |= {
                "elements": k.elements.value,
                "expression": str(k.elements),
                "window": k.window,
                "layers": [],
            }
        site["layers"].append(k.layer)
    return list(sites.values())


# ── text ────────────────────────────────────────────────────────────────────────────────
ROWS = {
    "toycards": (
        ("weights", "weights (file pages and copies)"),
        ("kv_allocated", "KV cache, allocated"),
        ("kv_resident", "KV cache, resident"),
        ("state", "decoder state"),
        ("token_ids", "token ids (recomputing cache)"),
        ("activations_estimate", "activations at peak (estimate)"),
        ("total", "total resident"),
    ),
    "llama.cpp": (
        ("weights", "weights (mmap)"),
        ("kv", "KV cache"),
        ("kv_sliding", "KV cache, sliding-window layers"),
        ("recurrent", "recurrent state"),
        ("total", "total (no compute buffer)"),
    ),
}


def _table(report: MemoryReport, explain: bool) -> str:
    from pathlib import Path

    heads = [f"ℓ = {c.context:,}" for c in report.columns]
    lines = [f"memory of {Path(report.path).name}: a prefill of ℓ tokens, batch {report.batch}"]
    rows: list[tuple[str, list[str]]] = []
    for side, title in (
        ("toycards", f"toycards (numpy target, KV cache {report.kv_types['toycards']})"),
        ("llama.cpp", f"llama.cpp (KV cache {report.kv_types['llama.cpp']}, n_ubatch {LLAMA_CPP_UBATCH})"),
    ):
        rows.append((title, []))
        for key, label in ROWS[side]:
            values = [(c.toycards if side == "toycards" else c.llama_cpp).get(key) for c in report.columns]
            if key not in ("weights", "total") and all(v == 0 for v in values):
                continue  # a row this file has nothing in (no state for a transformer)
            rows.append(("  " + label, ["—" if v is None else human_size(v) for v in values]))
    width = max(len(label) for label, _ in rows)
    col = max(max(len(h) for h in heads), max((len(v) for _, vs in rows for v in vs), default=0))
    lines.append(" " * width + "".join(f"  {h:>{col}}" for h in heads))
    for label, values in rows:
        lines.append((f"{label:<{width}}" + "".join(f"  {v:>{col}}" for v in values)).rstrip())
    w = report.weights
    stored = ", ".join(
        f"{t} {human_size(b)} ({w.tensors[t]})" for t, b in sorted(w.stored.items(), key=lambda x: -x[1])
    )
    lines += ["", f"weights as stored: {human_size(w.total_stored)}: {stored}"]
    held = [
        ("file pages", w.mapped),
        ("copies", w.copies),
        ("packed copies, made ahead or at the first decoding step", w.packed_first),
        ("packed copies, after some decoding", w.packed_later),
    ]
    lines.append("toycards holds them as " + "; ".join(f"{what} {human_size(b)}" for what, b in held if b))
    lines.append(
        "llama.cpp: compute and output buffers left out (ggml's graph allocator sizes the compute buffer)"
    )
    lines += [f"note: {n}" for n in report.notes]
    if explain:
        lines += ["", "how (ℓ: tokens, B: batch, card names as bound):"]
        lines += [f"  {what}: {formula}" for what, formula in report.formulas]
    return "\n".join(lines) + "\n"


def _formulas(fp: Footprint, types: dict, weights: WeightMemory, recurrent, hyper: dict) -> list:
    """(what, card expression) for each figure: the kept arrays grouped by call site and size."""
    out = [("weights", f"Σ tensor bytes = {weights.total_stored:,} bytes")]
    groups: dict[tuple, list[Kept]] = {}
    for k in fp.kept:
        groups.setdefault((k.kind, k.callee, k.caller, str(k.elements), k.window), []).append(k)
    names = set()
    for (kind, callee, caller, elements, window), ks in groups.items():
        names |= ks[0].elements.dim.names() | {ks[0].count_text}
        count = _count_text(ks)
        what = f"{callee}'s {', '.join(dict.fromkeys(k.name for k in ks))} (in {caller})"
        if kind == "state":
            out.append(
                (f"toycards state, {what}", f"{count} · B · {elements} · {_entry_bytes(ks[0], 'f32')} bytes")
            )
            continue
        what += f", window {window}" if window else ""
        if types["toycards"] in ("f16", "f32"):
            s = _entry_bytes(ks[0], types["toycards"])
            # KVCache.reserve, told to expect the prompt (feed): its rows, or a window's and a pass's
            rows = "ℓ" if window is None else f"min(ℓ, {window} − 1 + min(ℓ, {_ubatch()}))"
            out.append((f"toycards KV cache, {what}", f"{count} · B · {rows} · {elements} · {s} bytes"))
        cells = "⌈ℓ/256⌉·256"
        if window is not None:
            cells = f"⌈min(⌈ℓ/256⌉·256, {window} + min(ℓ, {LLAMA_CPP_UBATCH}))/256⌉·256"
        size = {"f16": "2 bytes", "f32": "4 bytes", "q8_0": "34/32 bytes"}[types["llama.cpp"]]
        out.append((f"llama.cpp KV cache, {what}", f"{count} · B · {cells} · {elements} · {size}"))
    states = [k for k in fp.kept if k.kind == "state"]
    if states:
        out.append(("llama.cpp recurrent state", _recurrent_formula(states, recurrent)))
    out.append(
        ("activations", "an estimate: the values a prefill holds at once at its peak, from the card's steps")
    )
    values = [f"{n} = {hyper[n]}" for n in sorted(names) if n in hyper]
    if values:
        out.append(("where", ", ".join(values)))
    return out


def _recurrent_formula(states: list[Kept], recurrent: tuple[int, str] | None) -> str:
    if recurrent is None:
        return "unknown: the file has no ssm.* keys"
    layers = len({k.layer for k in states})
    count = states[0].count_text if states[0].count_text and layers == states[0].runs else str(layers)
    return (
        f"{count} · B · (n_embd_r + n_embd_s) · 4 bytes,"
        " n_embd_r = (d_conv − 1)·(d_inner + 2·n_group·d_state),"
        f" n_embd_s = d_state·d_inner (llama.cpp's names for the file's ssm.* keys: {recurrent[1]})"
    )


def _count_text(ks: list[Kept]) -> str:
    """How many of these arrays a pass keeps: `2 · L` (K and V in each of L layers), `5`."""
    kinds = len({k.name for k in ks})
    per = len(ks) // kinds
    loop = ks[0].count_text if ks[0].count_text and per == ks[0].runs else str(per)
    return f"{kinds} · {loop}" if kinds > 1 else loop
