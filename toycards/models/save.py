"""`toycards.save`: a model (its card, hyperparameters and weights) → a GGUF file.

Owns: writing a model as llama.cpp would read it. Tensors go under the names the card binds
(a torch model's parameters already carry them; a tied output is written once, as the tensor
it came from) in the layout GGUF stores (`gguf` NumPy order, float32); each hyperparameter read
`from "{arch}.…"` goes under the first key the card names (ℕ as uint32, ℝ as float32, choices
as strings); the tokenizer's `tokenizer.*` keys are copied from a GGUF file that has them;
`general.*` names the architecture, the model and the file type; and the card itself, with a
`= value` on every hyperparameter, is embedded under `toycards.card`, which the loader and
describe prefer to any other card. The file is written atomically and never over an input, nor
over any existing file unless the caller says `force=True`.
Leaves out: training (train.py), choosing a card for a file (library.card_for_file).

A parameter with a constant fallback (`ρ from "rope_freqs.weight" or 1`) is written only when
its values differ from the constant, so a file stays what llama.cpp's converter would write.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

import numpy as np

from toycards.errors import ToycardsError
from toycards.fileio import atomic_output
from toycards.gguf.facts import CARD_KEY
from toycards.inspect.literals import number_expr, round_float32
from toycards.lang import ir
from toycards.models.binding import Bound

__all__ = ["card_with_values", "hyperparameter_keys", "save"]


def _value_expr(value: object, typ: ir.Type) -> ir.Expr:
    """The card literal of a hyperparameter's value: a choice's name, a string, or a number
    (a float32 value with the fewest digits that read back to it, any other float exactly)."""
    if isinstance(typ, ir.EnumType):
        return ir.Name(str(value))
    if isinstance(typ, ir.StrType):
        return ir.Str(str(value))
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float):
        return number_expr(value, float32=round_float32(value) == value)
    return number_expr(value)


def card_with_values(card: ir.Card, hyper: dict[str, object]) -> ir.Card:
    """`card` with `= value` on each hyperparameter of its main algorithm that `hyper` gives and
    that is not derived (`≔`), one declaration per name, so that the card alone determines the
    model: `L, H ∈ ℕ` with {L: 2, H: 4} becomes `L ∈ ℕ = 2` and `H ∈ ℕ = 4`."""
    main, decls = card.main, []
    for d in main.hyper_decls:
        derived = d.binding is not None and d.binding.kind == "derived"
        if derived or not any(n in hyper for n in d.names):
            decls.append(d)
            continue
        for name in d.names:
            value = _value_expr(hyper[name], d.type) if name in hyper else d.value
            decls.append(dataclasses.replace(d, names=(name,), value=value))
    main = dataclasses.replace(main, hyper_decls=tuple(decls))
    return dataclasses.replace(card, algorithms=(*card.algorithms[:-1], main))


def hyperparameter_keys(algo: ir.Algorithm, hyper: dict[str, object], arch: str) -> dict[str, tuple]:
    """Each hyperparameter bound `from "{arch}.…"` under the first key the card names, with its
    GGUF type: {"llama.block_count": (2, UINT32), "llama.attention.layer_norm_rms_epsilon": (1e-5, FLOAT32)}."""
    from gguf import GGUFValueType as V

    from toycards.models.binding import expand_template

    out: dict[str, tuple] = {}
    for d in algo.hyper_decls:
        if d.binding is None or d.binding.kind != "from":
            continue
        keys = [s.tensor for s in d.binding.sources[0] if s.tensor] if d.binding.sources else []
        for name in d.names:
            if name not in hyper or not keys:
                continue
            key, value = expand_template(keys[0], arch), hyper[name]
            if isinstance(d.type, ir.EnumType | ir.StrType) or isinstance(value, str):
                out[key] = (str(value), V.STRING)
            elif isinstance(d.type, ir.TensorType) and d.type.field == "N":
                out[key] = (int(value), V.UINT32)
            elif isinstance(d.type, ir.TensorType) and d.type.field == "Z":
                out[key] = (int(value), V.INT32)
            else:
                out[key] = (float(value), V.FLOAT32)
    return out


def tokenizer_fields(path: str | os.PathLike) -> list[tuple[str, object, object, object]]:
    """Every `tokenizer.*` key of a GGUF file as (key, value, type, array item type)."""
    import gguf

    out = []
    for name, field in gguf.GGUFReader(path).fields.items():
        if name.startswith("tokenizer."):
            types = [gguf.GGUFValueType(t) for t in field.types]
            out.append((name, field.contents(), types[0], types[1] if len(types) > 1 else None))
    return out


def _as_array(value) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor or parameter
        value = value.detach().float().cpu().numpy()
    return np.ascontiguousarray(np.asarray(value, dtype=np.float32))


def _is_constant_fill(p, value: np.ndarray) -> bool:
    sources = p.decl.binding.sources if p.decl.binding else ()
    alts = sources[min(p.decl.names.index(p.name), len(sources) - 1)] if sources else ()
    const = next((s.const for s in alts if s.const), None)
    return const is not None and bool(np.all(value == np.float32(float(const))))


def model_tensors(model, bound: Bound, weights=None) -> dict[str, np.ndarray]:
    """The file's tensors in card order: name → float32 array as GGUF stores it, from `weights`
    (name → tensor) or else the model's own."""
    weights = model.w if weights is None else weights
    out: dict[str, np.ndarray] = {}
    for p in bound.params:
        if p.tensor is None and p.const is None:
            continue
        value = _as_array(weights[p.key])
        if p.rows is not None:  # a part of a fused tensor is saved under the card's own name for it
            out[p.key] = value
            continue
        if p.tensor is not None and p.tensor in out:  # a tied output: the tensor it came from
            if np.array_equal(value, out[p.tensor]):
                continue
            if p.key == p.tensor or p.key in out:
                raise ToycardsError(
                    f"save: {p.key} no longer equals {p.tensor}, and the card has no name of its own for it"
                )
            out[p.key] = value  # untied since loading (its values were changed): its own name
            continue
        if tuple(value.shape) != p.stored_shape:
            raise ToycardsError(f"save: {p.key} has shape {value.shape}, the card binds {p.stored_shape}")
        if not _is_constant_fill(p, value):  # a constant fallback (`or 1`) changed: its own name
            out[p.tensor or p.key] = value
    return out


def model_card(model) -> ir.Card:
    """The card a model was built from (its generated class keeps the card text)."""
    from toycards.lang.parse import parse

    card = getattr(model, "card", None)
    if isinstance(card, ir.Card):
        return card
    text = getattr(model, "CARD", None)
    if not isinstance(text, str):
        raise ToycardsError("save: the model carries no card (use a model from toycards.load)")
    return parse(text, file="<model card>")


def default_arch(card: ir.Card) -> str:
    """The general.architecture for a card without a file: the library's name for its algorithm,
    else the algorithm's name in lower case (`Toyformer` → `toyformer`)."""
    from toycards.library import ARCH_CARDS, library_card

    for arch, stem in ARCH_CARDS.items():
        if library_card(stem).main.name == card.main.name:
            return arch
    return card.main.name.lower()


def _refuse_inputs(path: Path, *inputs) -> None:
    for other in inputs:
        if other is not None and path.exists() and path.resolve() == Path(other).resolve():
            raise ToycardsError(f"{path}: is an input of this model; refusing to overwrite it")


def refuse_existing(
    path: str | os.PathLike, force: bool, how: str = "force=True", name: str | None = None
) -> None:
    """A one-line error when something is at `path` and `force` is false: an output never replaces
    what is there unless asked (`how` says how to ask; `name` is how the error names the path). A
    folder is refused even so."""
    name = name or str(path)
    if os.path.isdir(path):
        raise ToycardsError(f"{name}: is a folder; give the path of a .gguf file to write")
    if not force and os.path.lexists(path):
        raise ToycardsError(f"{name}: already exists; refusing to overwrite it ({how} replaces it)")


def save(
    model,
    path: str | os.PathLike,
    *,
    tokenizer: str | os.PathLike | None = None,
    arch: str | None = None,
    name: str | None = None,
    weights=None,
    force: bool = False,
) -> Path:
    """Write `model` (from `toycards.load`, either target) to a GGUF file at `path`, atomically.

    `tokenizer`: a GGUF file whose `tokenizer.*` keys to copy (default: the file the model was
    loaded from, when it has a vocabulary). `arch`: general.architecture (default: the file's,
    else the library's name for the card). `name`: general.name (default: the card's algorithm).
    `weights`: the tensors to write by name instead of the model's own, e.g. the whole state dict
    gathered from a model that FSDP shards. Refuses a `path` that exists unless `force` (a file is
    then replaced all at once), and the model's own file or the tokenizer's even so.
    """
    import gguf

    bound: Bound | None = getattr(model, "bound", None)
    if bound is None:
        raise ToycardsError("save: the model carries no binding (use a model from toycards.load)")
    out = Path(path)
    _refuse_inputs(out, getattr(model, "path", None), tokenizer)
    refuse_existing(out, force)
    card = card_with_values(model_card(model), bound.hyper)
    arch = arch or bound.arch or default_arch(card)
    if tokenizer is None and model.path is not None and model.tokenizer is not None:
        tokenizer = model.path
    from toycards.lang.printer import render_card

    fields = tokenizer_fields(tokenizer) if tokenizer is not None else []
    tensors = model_tensors(model, bound, weights)
    keys = hyperparameter_keys(card.main, bound.hyper, arch)
    with atomic_output(out) as part:
        w = gguf.GGUFWriter(str(part), arch)
        try:
            w.add_string("general.name", name or f"{card.main.name} (toycards)")
            w.add_uint32("general.file_type", int(gguf.LlamaFileType.ALL_F32))
            for key, (value, vtype) in keys.items():
                w.add_key_value(key, value, vtype)
            for key, value, vtype, sub in fields:
                w.add_key_value(key, value, vtype, sub)
            w.add_string(CARD_KEY, render_card(card))
            for tensor, value in tensors.items():
                w.add_tensor(tensor, value)
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
        except BaseException:
            # close the half-written file now: an open one holds its disk space after its removal
            with contextlib.suppress(OSError):
                w.close()
            raise
        w.close()  # flushes: a full disk fails here too, and atomic_output makes that one line
    return out
