"""`toycards.load`: a card (or a GGUF file's card) plus weights → a runnable model.

Owns: choosing the card for a GGUF file (library.card_for_file: its embedded `toycards.card`,
else a TOYCARDS_CARDS card, else the library card for `general.architecture`), binding it
(binding.py), generating the module source (codegen; cached on disk: `module_source`),
executing it and putting the target's kernels in place of the prelude algorithms the card runs
as the library wrote them (models/kernel_table.py, with what the cache plan says of each:
`kernel_sites`, cached on disk too; a module written by `toycards gen` gets them at `from_gguf`)
or, for `target="reference"`, handing the card to the reference interpreter (reference.py), reading
each bound tensor (a quantized, F16 or BF16 matrix or stack of matrices kept in its GGUF blocks
for the kernels behind `ops.linear`, an F32 tensor memory-mapped (copied for the reference
target), anything else or everything under `dequantize=True` dequantised to float32) or
initialising it randomly from the card, and attaching the file's tokenizer. A model that reads the
file's pages gets the file's `engine.FileWatch` (its forward passes raise once the file has changed
on disk), and a load that fails stops the threads it started (engine.stopped_on_failure).
Leaves out: the meaning of cards (checker/, lang/interpret/), code text (codegen/), file parsing (gguf/).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import linecache
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from toycards import engine
from toycards.errors import ToycardsError
from toycards.lang import ir
from toycards.lang.scale import collector_paused
from toycards.models.binding import Bound, BoundParam, bind, bind_values

if TYPE_CHECKING:
    from toycards.models.kernel_table import Site

TARGETS = ("numpy", "torch", "reference")  # reference: the interpreter running the card (slow, float64)


def _as_card(card: ir.Card | str | os.PathLike) -> ir.Card:
    from toycards.lang.parse import parse

    if isinstance(card, ir.Card):
        return card
    return parse(Path(card) if isinstance(card, os.PathLike) else card)


def _is_gguf_path(source: str | os.PathLike) -> bool:
    """A GGUF file rather than a card: named *.gguf, or a file that starts with the GGUF magic
    whatever its name (Ollama's blobs are `sha256-HEX`)."""
    if str(source).endswith(".gguf"):
        return True
    try:
        with open(source, "rb") as fh:
            return fh.read(4) == b"GGUF"
    except (OSError, ValueError):  # card text, not a path (ValueError: a NUL in it)
        return False


def card_for_file(f, given: str | os.PathLike | None = None) -> ir.Card:
    """The card describing an open GGUF file (library.card_for_file: `given`, else embedded, else
    TOYCARDS_CARDS, else the library), or a one-line error."""
    from toycards.library import card_for_file as choose

    choice = choose(f, given)
    if choice.card is None:
        raise ToycardsError(f"{f.path}: {choice.reason} (toycards describe shows what the file holds)")
    return choice.card


def _raise_problems(bound: Bound, card: ir.Card, path: str | os.PathLike | None) -> None:
    """The binding's first error as one line naming the file (and the card line), with a count
    of the rest: `describe` lists them all. Without a file, the card's own diagnostics."""
    errors = [d for d in bound.problems if d.severity == "error"]
    if not errors:
        return
    if path is None:
        raise ToycardsError.from_diagnostics(errors, {card.algorithms[-1].span.file: card.source})
    first = errors[0]
    where = f" (card {first.span.file}:{first.span.line})" if first.span.line > 0 else ""
    more = len(errors) - 1
    rest = f"; {more} more problem{'s' * (more != 1)}: `toycards describe {path}` lists them" if more else ""
    raise ToycardsError(f"{path}: {first.message}{where}{rest}")


def check_fits(card: ir.Card, f) -> None:
    """Raise every binding error of `card` against an open file: missing tensor or key, wrong shape."""
    _raise_problems(bind(card.main, f), card, str(f.path))


PACKAGE = Path(__file__).resolve().parents[1]
# what a generated module depends on besides its card and the card language (library.language_key):
# the checker, the code generator and its template, the prelude's algorithms (a card calls them)
GENERATOR = (
    *sorted((PACKAGE / "checker").glob("*.py")), *sorted((PACKAGE / "codegen").glob("*.py")),
    *sorted((PACKAGE / "codegen" / "templates").glob("*.jinja")), PACKAGE / "library" / "cards" / "prelude.card",
)  # fmt: skip


def _generated_key(card: ir.Card, *what: str) -> str:
    """The cache key of what is generated from `card`: the card itself (its IR as repr writes it,
    which is everything but the spans, and its file name and text, which the spans come from: a
    card changed in code after it was parsed is a new key), `what`, the version and the card
    language's sources (the key of parsed cards, library.language_key) and the text of every
    GENERATOR source, so an edited card or an edited toycards generates afresh."""
    from toycards import cache
    from toycards.library import language_key

    sources = [p.read_text(encoding="utf-8") if p.is_file() else "" for p in GENERATOR]
    return cache.cache_key(*language_key(), *what, repr(card), card.file, card.source, *sources)


def module_source(card: ir.Card, target: str) -> str:
    """codegen.generate_source(card, target), kept in the disk cache (toycards/cache.py) between
    processes under `_generated_key`. A hit never imports the generator (jinja2, lark, the
    checker), which would be a large share of a fresh process's load time and memory."""
    from toycards import cache

    path = cache.cache_file(f"module-{target}", _generated_key(card, target))
    source = cache.load(path)
    if isinstance(source, str):
        return source
    from toycards.codegen import generate_source

    source = generate_source(card, target)
    cache.store(path, source)
    return source


def kernel_sites(card: ir.Card) -> dict[str, Site]:
    """The prelude algorithms `card` runs as the library wrote them (a card that defines its own
    `softmax` runs that one), each with what the cache plan (checker/tokenflow.py) says of it: the
    dimensions that hold a pass's tokens and the inputs its calls extend the KV cache with. What
    models/kernel_table.py needs to put a kernel in place of the algorithm's steps; kept in the
    disk cache as module_source is (a hit never imports the checker)."""
    from toycards import cache
    from toycards.models.kernel_table import Site

    path = cache.cache_file("module-kernels", _generated_key(card))
    facts = cache.load(path)
    if not _are_sites(facts):
        facts = _plan_facts(card)
        cache.store(path, facts)
    return {
        name: Site(frozenset(windowed), frozenset(extended)) for name, (windowed, extended) in facts.items()
    }


def _are_sites(facts: object) -> bool:
    """Whether a cache entry has the form `_plan_facts` gives: {name: ((dim, …), ((index, …), …))}."""
    return isinstance(facts, dict) and all(
        isinstance(name, str)
        and isinstance(site, tuple)
        and len(site) == 2
        and all(isinstance(d, str) for d in site[0])
        and all(isinstance(e, tuple) and all(isinstance(i, int) for i in e) for e in site[1])
        for name, site in facts.items()
    )


def _plan_facts(card: ir.Card) -> dict[str, tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]]:
    """kernel_sites' facts, computed: the checker's cache plan of the card, read for each prelude
    algorithm the card does not redefine (the code generator's own rule: `library[name] == algo`)."""
    from toycards.checker import check_card, check_prelude
    from toycards.checker.tokenflow import CachePlan, cache_plan
    from toycards.library import library_algorithms

    library = library_algorithms()
    result = check_card(card)
    plan = cache_plan(card, result, check_prelude()) if result.ok else CachePlan("the card does not check")
    runs = {**library, **{a.name: a for a in card.algorithms}}
    facts = {}
    for name, algo in library.items():
        if runs[name] != algo:
            continue
        calls = [n for n in ir.walk(runs[name].body) if isinstance(n, ir.Call)]
        extended = {plan.extend.get(id(c), ()) for c in calls} - {()}
        facts[name] = (tuple(sorted(plan.query_dims.get(name, ()))), tuple(sorted(extended)))
    return facts


def module_namespace(card: ir.Card, target: str) -> dict[str, object]:
    """Generate (or read from the cache), verify and execute the module for `card`, then put the
    target's kernels in place of the prelude algorithms it runs as the library wrote them
    (models/kernel_table.py); the module's namespace."""
    if target == "torch":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise ToycardsError("the torch target needs PyTorch: pip install 'toycards[torch]'") from None
    from toycards.codegen.verify import verify_source

    source = module_source(card, target)
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    filename = f"<toycards {digest} {target}>"  # no card text: the name shows in tracebacks
    verify_source(source, filename)  # a cached module too: the cache is a file anyone could edit
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, object] = {"__name__": f"toycards_generated_{digest}"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our emitter's output, verified above
    put_kernels(namespace, card, target)
    return namespace


def put_kernels(namespace: dict, card: ir.Card, target: str) -> list[str]:
    """The target's kernels in a generated module's namespace (kernel_table.substitute); the
    algorithms that run one."""
    from toycards.library import library_algorithms
    from toycards.models import kernel_table

    return kernel_table.substitute(namespace, target, kernel_sites(card), library_algorithms())


def module_class(card: ir.Card, target: str):
    """The `Model` class of the module for `card` (module_namespace)."""
    return module_namespace(card, target)["Model"]


def _const_fallback(p) -> str | None:
    """The constant alternative (`or 1`) of a parameter's binding, if it has one."""
    sources = p.decl.binding.sources if p.decl.binding else ()
    alts = sources[min(p.decl.names.index(p.name), len(sources) - 1)] if sources else ()
    return next((s.const for s in alts if s.const), None)


def _random_weights(bound: Bound, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for p in bound.params:
        if p.key in out:
            continue
        shape = p.stored_shape
        const = p.const if p.const is not None else _const_fallback(p)
        if const is not None:  # `from "rope_freqs.weight" or 1`: the card's own fill, never random
            out[p.key] = np.full(shape, float(const), dtype=np.float32)
        elif p.name.startswith("γ"):
            out[p.key] = np.ones(shape, dtype=np.float32)
        elif len(shape) == 1:
            out[p.key] = np.zeros(shape, dtype=np.float32)
        else:
            out[p.key] = rng.normal(0.0, 0.02, size=shape).astype(np.float32)
    return out


SMALL_F32 = 1 << 20  # bytes: an F32 tensor up to this size is read into the process's memory, not mapped


def filled(shape: tuple[int, ...], const: str | float) -> np.ndarray:
    """A tensor the file leaves out, as the card fills it (`from "ffn_gate_exps.weight" or 0`): past
    SMALL_F32 bytes, one float32 number broadcast to its shape, read-only, with no memory of its own
    whatever the shape (every stride 0; the torch target makes it an expanded tensor,
    runtime/torch/model.py); a smaller one (a bias, a norm's scale) in memory, where the C kernels
    and the replayed decoding steps, which read contiguous tensors only, take it.

    >>> z = filled((256, 2048, 7168), "0")
    >>> z.shape, z.strides, z.base.nbytes
    ((256, 2048, 7168), (0, 0, 0), 4)
    >>> filled((4096,), 1).flags.c_contiguous
    True
    """
    value = np.float32(float(const))
    if value.nbytes * math.prod(shape) <= SMALL_F32:
        return np.full(shape, value, dtype=np.float32)
    return np.broadcast_to(value, shape)


def _kept(f, p: BoundParam, target: str, read):
    """Parameter p's tensor as the target keeps it, or None when it is dequantized to float32
    instead (other types and ranks, and every larger tensor of the reference target):
    - a quantized (or F16/BF16) matrix in its blocks, a read-only view of the file (the kernels
      only read them, and either target hands the pages of a weight it has packed back to the
      page cache); a stack of matrices [E, n, k] (a layer's experts) likewise, as a `QuantStack`
      over one QuantWeight of E·n rows;
    - a small F32 tensor (norm scales, biases) as a copy, `read(name)`: mapping it would map
      its neighbours' bytes too (see `GGUFFile.read`);
    - a larger F32 tensor, for torch, as a read-only view of the file, which the model copies into
      memory of its own (`engine.resident_float32`), or with `TOYCARDS_WEIGHTS=mapped` as a
      copy-on-write view (numpy: None, and the caller keeps the read-only view `f.tensor` gives).
    A part of a fused tensor is its rows' blocks (a row's blocks never cross into the next row)."""
    name = p.tensor
    info = f.tensor_info(name)
    if info.type_name == "F32" and info.n_bytes <= SMALL_F32:
        return p.part(read(name))
    if target == "torch" and info.type_name == "F32":  # copied by the model, or copy-on-write
        return p.part(f.raw(name, private=not engine.resident()))
    if target not in ("torch", "numpy") or len(info.shape) > 3 or info.ggml_type not in engine.SUPPORTED:
        return None
    blocks = p.part(f.raw(name))  # [n, row_bytes], or [E, n, row_bytes] for a stack
    blocks = blocks.view(np.uint8) if blocks.dtype != np.uint8 else blocks  # F16: its bytes
    kernels, k = engine.backend(target), info.shape[-1]
    if blocks.ndim not in (2, 3):
        return None
    if blocks.ndim == 2:
        return kernels.QuantWeight(blocks, info.ggml_type, (blocks.shape[0], k), name)
    E, n, row_bytes = blocks.shape  # as stored, one block matrix of E·n rows: matrix e is rows e·n …
    whole = kernels.QuantWeight(blocks.reshape(E * n, row_bytes), info.ggml_type, (E * n, k), name)
    return kernels.QuantStack(whole, E)


def _file_weights(
    bound: Bound, f, keep: str | None = None, copy: bool = False
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The bound tensors by module name, and the tied ones (name → the name they share). `keep`: the
    target whose kernels multiply by weights in their blocks (None: everything dequantized); `copy`:
    nothing a view of the file (an F32 tensor is one, unless kept or copied)."""
    weights: dict[str, np.ndarray] = {}
    shared: dict[str, str] = {}
    by_tensor: dict[tuple[str, tuple[int, int] | None], str] = {}  # (tensor, rows) → module name
    read = functools.cache(f.read)  # a fused tensor's parts share one copy
    for p in bound.params:
        if p.key in weights or p.key in shared:
            continue
        if p.tensor is None:
            weights[p.key] = filled(p.stored_shape, p.const or 0)
        elif (p.tensor, p.rows) in by_tensor:
            shared[p.key] = by_tensor[p.tensor, p.rows]
            weights[p.key] = weights[by_tensor[p.tensor, p.rows]]
        else:
            kept = _kept(f, p, keep, read) if keep else None
            weights[p.key] = kept if kept is not None else p.part(f.tensor(p.tensor, copy=copy))
            by_tensor[p.tensor, p.rows] = p.key
    return weights, shared


def _check_vocabulary(model, path) -> None:
    """llama.cpp refuses a vocabulary with more tokens than the embedding has rows: so do we."""
    n_vocab, n_tokens = model.hp.get("N_V"), len(model.tokenizer.tokens)
    if isinstance(n_vocab, int) and n_tokens > n_vocab:
        raise ToycardsError(
            f"{path}: the vocabulary has {n_tokens} tokens but the model only N_V = {n_vocab} "
            "(rows of the token embedding)"
        )


def torch_device(device, what: str = "device"):
    """`device` as a `torch.device` that torch can use here, or a one-line error naming it as
    `what` does (a name torch does not know, CUDA or MPS where this torch sees none)."""
    import torch

    try:
        d = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ToycardsError(f"{what} {device}: not a device torch knows (cpu, cuda, cuda:1, mps …)") from None
    if d.type == "cuda" and not torch.cuda.is_available():
        raise ToycardsError(
            f"{what} {device}: this torch has no CUDA device (torch.cuda.is_available() is false)"
        )
    if d.type == "cuda" and d.index is not None and d.index >= torch.cuda.device_count():
        raise ToycardsError(f"{what} {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if d.type == "mps" and not torch.backends.mps.is_available():
        raise ToycardsError(
            f"{what} {device}: this torch has no MPS device (torch.backends.mps.is_available() is false)"
        )
    return d


def load(source, weights=None, target: str = "numpy", seed: int = 0, dequantize: bool = False,
         device: str | None = None, model_class=None):  # fmt: skip
    """A runnable model: `load("m.gguf")`, `load(card, weights="m.gguf")`, or `load(card)` (random weights).

    Quantized matrices stay in their GGUF blocks (multiplied by kernels behind `ops.linear`) and
    F32 matrices stay memory-mapped; `dequantize=True` makes float32 copies of every tensor
    instead (training: quantized weights are not trainable). `device` (torch target: "cuda",
    "cuda:1", "mps" …): the model's parameters and forward passes there, every weight float32
    (the block kernels run on the CPU alone). `model_class`: the `Model` class of a module generated
    from this card for this target, to make the model of instead of the module generated here
    (what its `from_gguf` passes)."""
    # loading makes tens of thousands of objects that live on (the tokenizer's tables, the module, its
    # parameters), which would set off a full collection of every object the process holds
    with collector_paused():
        return _load(source, weights, target, seed, dequantize, device, model_class)


def _load(source, weights, target: str, seed: int, dequantize: bool, device, model_class=None):
    from toycards.gguf.reader import open_gguf

    if target not in TARGETS:
        raise ToycardsError(f"unknown target {target!r}: choose {', '.join(TARGETS[:-1])} or {TARGETS[-1]}")
    if device is not None and target != "torch":
        raise ToycardsError(
            f"device {device}: only the torch target runs on a device; the {target} target runs on the CPU"
        )
    if device is not None:
        device = torch_device(device)
        dequantize = dequantize or device.type != "cpu"
    if isinstance(source, str | os.PathLike) and _is_gguf_path(source):
        if weights is not None:
            raise ToycardsError("give either a GGUF file or a card with weights=, not both")
        path, card = source, None
    else:
        card, path = _as_card(source), weights
    f = open_gguf(path) if path is not None else None
    # the model reads the file's pages (the reference target: copies of them)
    mapped = f is not None and target != "reference"
    try:
        with _threads_of(mapped):
            # the file as it was opened, to tell whether it changes under the model
            watch = engine.FileWatch(f.path, f.identity) if mapped else None
            if mapped:  # the weights into the page cache as the card loads
                engine.read_ahead(f.path)
            card = card_for_file(f) if card is None else card
            bound = bind(card.main, f) if f is not None else bind_values(card.main)
            _raise_problems(bound, card, path)
            cls = model_class or (module_class(card, target) if target != "reference" else None)
            if model_class is not None:  # a module written by `toycards gen`: its kernels too
                put_kernels(getattr(model_class.forward, "__globals__", {}), card, target)
            if f is not None:
                tensors, shared = _file_weights(bound, f, None if dequantize else target, copy=not mapped)
            else:
                tensors, shared = _random_weights(bound, seed), {}
            if watch is not None:  # before the model is made: its packing thread looks its weights' file up
                watch.watch(f.mappings())
            if target == "reference":
                from toycards.models.reference import ReferenceModel

                model = ReferenceModel(card, bound, tensors)
            else:
                model = cls(bound.hyper, tensors, shared) if target == "torch" else cls(bound.hyper, tensors)
            model.bound = bound
            model._file_watch = watch
            if f is not None and f.get("tokenizer.ggml.model") is not None:
                from toycards.tokenizer.tokenizer import tokenizer_of

                model.tokenizer = tokenizer_of(f)
                _check_vocabulary(model, path)
            model.path = str(path) if path is not None else None
            if device is not None:
                model.to(device)
    finally:
        if f is not None:
            f.close()
    return model


def _threads_of(mapped: bool):
    """Where the model reads a file's pages: the threads that read or pack them ahead as it loads,
    stopped and joined if the load fails (engine.stopped_on_failure); else nothing to stop."""
    return engine.stopped_on_failure() if mapped else contextlib.nullcontext()
