"""The card library: which card describes which GGUF architecture, and the prelude.

Owns: `ARCH_CARDS` (general.architecture → card file in toycards/library/cards/, a table: several
architectures may share a card), `library_card(name)` (parsed once, cached on disk between
processes), `library_algorithms()` (the prelude's algorithms by name), `card_architectures(name)`
(the files a library card is chosen for), the user card folders (`TOYCARDS_CARDS`: a path list of
folders holding `ARCH.card` files, `user_card_dirs()`, `user_cards()`) and
`card_for_file(f, given)`, the one rule for which card describes a GGUF file, used by describe,
diff, load, gen, run and eval alike:

    1. `given`, a card file the caller names (`--card FILE`);
    2. the card embedded in the file under `toycards.card`, held to a card file's limits
       (lang/reading.py: its size is checked before it is hashed or parsed);
    3. `ARCH.card` in the first folder of TOYCARDS_CARDS that has one (ARCH: general.architecture);
    4. the library card for ARCH: none, with the reason, when the file holds every tensor of an
       entry of `CARDS_REFUSED_BY_TENSORS[ARCH]` (a layout no card models); else the first entry of
       `CARDS_BY_TENSOR[ARCH]` whose tensor the file holds (a llama file with experts gets
       llama_moe.card), else `ARCH_CARDS[ARCH]`;
    5. none, with the reason.

An embedded card comes before the user folders because it is the most specific: it was written
with these weights (toycards save/train) and describes this one file, while a folder card is
chosen by architecture name alone, which many files share. `given` overrides both.
Leaves out: parsing (lang/parse.py), binding to files (models/binding.py).
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from toycards import cache
from toycards.errors import ToycardsError
from toycards.lang import ir

PACKAGE = Path(__file__).parent
CARDS = PACKAGE / "cards"
LANG = PACKAGE.parent / "lang"  # the grammar, parser and IR sources key the on-disk cache


def library_card_file(name: str) -> str:
    """The name a library card's diagnostics and describe show: `toycards/library/cards/NAME.card`."""
    return f"toycards/library/cards/{name}.card"


def parse_library_card(name: str) -> ir.Card:
    """Parse a shipped card by file stem, e.g. "prelude" (imports the parser, and lark, only here)."""
    from toycards.lang.parse import parse

    text = (CARDS / f"{name}.card").read_text(encoding="utf-8")
    return parse(text, file=library_card_file(name))


ARCH_CARDS: dict[str, str] = {
    "gpt2": "gpt2",
    "llama": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "starcoder2": "starcoder2",
    "granite": "granite",
    "smollm3": "smollm3",
    "gemma": "gemma",
    "olmo2": "olmo2",
    "gemma2": "gemma2",
    "gemma3": "gemma3",
    "olmoe": "olmoe",
    "qwen3moe": "qwen3moe",
    "qwen2moe": "qwen2moe",
    "phi3": "phi3",
    "phi2": "phi2",
    "stablelm": "stablelm",
    "mamba": "mamba",
    "mamba2": "mamba2",
    "command-r": "command-r",
    "cohere2": "cohere2",
    "granitemoe": "granitemoe",
    "arcee": "arcee",
    "exaone4": "exaone4",
    "seed_oss": "seed_oss",
    "ernie4_5": "ernie4_5",
    "apertus": "apertus",  # per-head q/k RMSNorm, an ungated MLP with xIELU (its numbers per block, in metadata)
    "ernie4_5-moe": "ernie4_5-moe",  # dense or expert blocks by leading_dense_block_count and the interleave step
    "glm4moe": "glm4moe",  # GLM-4.5: leading dense blocks, then sigmoid-routed experts; NextN blocks not run
    "llama4": "llama4",  # Llama 4 (text): chunked RoPE and NoPE blocks, dense and input-weighted expert blocks
    "hunyuan-dense": "hunyuan-dense",
    "lfm2": "lfm2",  # convolution and attention blocks, told apart by the per-block head_count_kv
    "jamba": "jamba",  # Mamba and attention blocks (per-block head_count_kv); dense and expert MLPs
    "granitehybrid": "granitehybrid",  # Granite 4.0 hybrid: Mamba-2 and attention blocks, experts or an MLP
    "falcon-h1": "falcon-h1",  # attention and a Mamba-2 mixer side by side in every block
    "qwen3next": "qwen3next",  # gated DeltaNet and gated attention blocks (full_attention_interval), experts
    "deepseek2": "deepseek2",  # DeepSeek V2 and V3: latent attention (one cached latent per token), experts
    "bert": "bert",  # an encoder: its card outputs each token's embedding (ModelAPI.embed pools them)
    "nomic-bert": "nomic-bert",  # an encoder like bert, with RoPE and a SwiGLU MLP
    "modern-bert": "modern-bert",  # an encoder: pre-norm blocks, global and symmetric sliding-window ones
    "gpt-oss": "gpt-oss",  # attention sinks, sliding and full blocks alternating, clamped SwiGLU experts
    "nemotron_h": "nemotron_h",  # Mamba-2, attention and squared-ReLU MLP blocks (per-block kv heads, MLP width)
}


# Architectures whose files come in variants that llama.cpp tells apart by the tensors present:
# general.architecture → ((a tensor the variant has, its card), …), tried in order before ARCH_CARDS.
CARDS_BY_TENSOR: dict[str, tuple[tuple[str, str], ...]] = {
    "llama": (("blk.0.ffn_gate_exps.weight", "llama_moe"),),  # Mixtral converted as llama: experts
    "stablelm": (("blk.0.attn_q_norm.weight", "stablelm_parallel"),),  # StableLM 2 12B: per-head q/k norms
}

# Variants no library card models, told apart the same way: general.architecture → ((tensors the
# file holds, every one of them; why no card fits), …), tried before CARDS_BY_TENSOR. Such a file
# gets no library card and that reason (one line), rather than a card that would pass over one of
# its tensors and run it wrong.
CARDS_REFUSED_BY_TENSORS: dict[str, tuple[tuple[tuple[str, ...], str], ...]] = {
    "stablelm": (
        (
            ("blk.0.attn_q_norm.weight", "blk.0.ffn_norm.weight"),
            "per-head q/k norms (attn_q_norm) in a sequential block (ffn_norm): stablelm_parallel.card "
            "models q/k norms only with the parallel block (no ffn_norm), stablelm.card neither",
        ),
    ),
    "deepseek2": (
        (
            ("blk.0.attn_kv_b.weight",),
            "an unsplit attn_kv_b (a file converted before llama.cpp split it into attn_k_b and attn_v_b): "
            "deepseek2.card models the absorbed attention over attn_k_b and attn_v_b only",
        ),
    ),
    "falcon-h1": (
        (
            ("blk.0.ffn_up.bias",),
            "MLP biases (mlp_bias): llama.cpp adds them when present, and falcon-h1.card's SwiGLU has none",
        ),
    ),
    "seed_oss": (
        (
            ("blk.0.attn_output.bias",),
            "an output-projection bias (attention_out_bias): llama.cpp's seed_oss loads no "
            "attn_output.bias and refuses the file",
        ),
    ),
}


def library_card_name(arch: str, tensors: object = ()) -> str | None:
    """The library card's stem for a file of `arch` holding `tensors` (names), or None.

    >>> library_card_name("llama", {"blk.0.ffn_gate.weight"}), library_card_name("llama", {"blk.0.ffn_gate_exps.weight"})
    ('llama', 'llama_moe')
    """
    variant = next((card for tensor, card in CARDS_BY_TENSOR.get(arch, ()) if tensor in tensors), None)
    return variant or ARCH_CARDS.get(arch)


def refused_variant(arch: str, tensors: object = ()) -> str | None:
    """Why no library card runs a file of `arch` holding `tensors` (CARDS_REFUSED_BY_TENSORS), or None.

    >>> refused_variant("stablelm", {"blk.0.attn_q_norm.weight"}) is None
    True
    >>> refused_variant("stablelm", {"blk.0.attn_q_norm.weight", "blk.0.ffn_norm.weight"})[:40]
    'per-head q/k norms (attn_q_norm) in a se'
    """
    refused = CARDS_REFUSED_BY_TENSORS.get(arch, ())
    return next((why for needed, why in refused if all(t in tensors for t in needed)), None)


def card_names() -> list[str]:
    """Stems of every card shipped in toycards/library/cards/."""
    return sorted(p.stem for p in CARDS.glob("*.card"))


def card_architectures(name: str) -> list[tuple[str, str]]:
    """The files the library card `name` is chosen for: (general.architecture, the tensor such a
    file holds, or "" for any file of it), from ARCH_CARDS and CARDS_BY_TENSOR.

    >>> card_architectures("llama"), card_architectures("llama_moe"), card_architectures("prelude")
    ([('llama', '')], [('llama', 'blk.0.ffn_gate_exps.weight')], [])
    """
    out = [(arch, "") for arch, card in ARCH_CARDS.items() if card == name]
    variants = [
        (arch, tensor) for arch, cards in CARDS_BY_TENSOR.items() for tensor, card in cards if card == name
    ]
    return out + variants


@functools.cache
def library_card(name: str) -> ir.Card:
    """A library card, parsed once per process and cached on disk between processes.

    The on-disk cache (toycards/cache.py) is keyed by the card text, the toycards version and
    every source of the card language (lang/: grammar, parser, IR), so an edited card, or a
    changed parser or IR, is parsed afresh.
    """
    text = (CARDS / f"{name}.card").read_text(encoding="utf-8")
    path = cache.cache_file(name, cache.cache_key(*language_key(), text))
    card = cache.load(path)
    if isinstance(card, ir.Card) and card.source == text:
        return card
    card = parse_library_card(name)
    cache.store(path, card)
    return card


def language_key() -> list[str]:
    """What a parsed card depends on besides its text: the version and the card language's sources."""
    from toycards.version import __version__

    return [__version__] + [
        p.read_text(encoding="utf-8") for p in sorted(LANG.glob("*.py")) + [LANG / "card.lark"]
    ]


@functools.cache
def library_algorithms() -> dict[str, ir.Algorithm]:
    """Algorithms a card may call without defining them: the prelude's."""
    return {a.name: a for a in library_card("prelude").algorithms}


USER_CARDS_ENV = "TOYCARDS_CARDS"
_ARCH_STEM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,99}")  # an architecture usable as a file stem


def user_card_dirs(value: str | None = None) -> list[Path]:
    """The folders of TOYCARDS_CARDS (or of `value`), in order; empty entries are skipped.

    An entry that is not a folder is an error (one line), not silently skipped, so that a typo
    cannot quietly fall back to another card:

    >>> user_card_dirs("")
    []
    >>> user_card_dirs("/nonexistent/cards")
    Traceback (most recent call last):
    toycards.errors.ToycardsError: TOYCARDS_CARDS entry '/nonexistent/cards' does not exist (it should be a folder of ARCH.card files)
    """
    value = os.environ.get(USER_CARDS_ENV, "") if value is None else value
    dirs = []
    for entry in value.split(os.pathsep):
        if not entry:
            continue
        path = Path(entry).expanduser()
        if not path.is_dir():
            what = "is not a folder" if path.exists() else "does not exist"
            raise ToycardsError(
                f"{USER_CARDS_ENV} entry {entry!r} {what} (it should be a folder of ARCH.card files)"
            )
        dirs.append(path)
    return dirs


def user_card_path(arch: str, dirs: list[Path]) -> Path | None:
    """`ARCH.card` in the first of `dirs` that has one; None for a name that is no file stem."""
    if not _ARCH_STEM.fullmatch(arch):  # general.architecture comes from the file: never a path
        return None
    return next((d / f"{arch}.card" for d in dirs if (d / f"{arch}.card").exists()), None)


def user_cards(dirs: list[Path] | None = None) -> dict[str, Path]:
    """The cards of the TOYCARDS_CARDS folders (or of `dirs`) by stem, in name order; where two
    folders hold one name, the first folder's (the one `user_card_path` picks)."""
    out: dict[str, Path] = {}
    for d in user_card_dirs() if dirs is None else dirs:
        for path in sorted(d.glob("*.card")):
            if _ARCH_STEM.fullmatch(path.stem) and path.is_file():
                out.setdefault(path.stem, path)
    return dict(sorted(out.items()))


def read_card_file(path: str | os.PathLike) -> ir.Card:
    """A card file named by the user, cached on disk like the library's (keyed by its text and
    name too); errors name the file (`my.card:3:7: error: …`) and are never cached."""
    from toycards.lang.reading import read

    text, file = read(Path(path), None)
    return parse_cached(text, file, f"user-{Path(file).stem[:40]}")


def parse_cached(text: str, file: str, entry: str) -> ir.Card:
    """`parse(text, file=file)`, cached on disk as `entry` (keyed by the card language's sources,
    the file name and the text); errors are never cached."""
    where = cache.cache_file(entry, cache.cache_key(*language_key(), file, text))
    card = cache.load(where)
    if isinstance(card, ir.Card) and card.source == text and card.file == file:
        return card
    from toycards.lang.parse import parse

    card = parse(text, file=file)
    cache.store(where, card)
    return card


@dataclass(frozen=True)
class CardChoice:
    """Which card describes a file: `card`, its `origin` ("given", "embedded", "user" or
    "library") and `path`, where it came from (the card file; for an embedded card
    `FILE:toycards.card`); or no card (None) and the `reason`, one line naming the file's
    architecture."""

    card: ir.Card | None
    origin: str = ""
    reason: str = ""
    path: str = ""


def card_for_file(f, given: str | os.PathLike | None = None) -> CardChoice:
    """The card for an open GGUF file, by the rule of the module docstring, or none and why."""
    from toycards.gguf.facts import ARCH_NAMES, CARD_KEY

    if given is not None:
        return CardChoice(read_card_file(given), "given", path=os.fspath(given))
    embedded = f.get(CARD_KEY)
    if isinstance(embedded, str) and embedded and not embedded.isspace():  # no copy, as strip() makes
        where = f"{f.path}:{CARD_KEY}"
        _check_embedded_size(embedded, where)
        return CardChoice(parse_cached(embedded, where, "embedded"), "embedded", path=where)
    arch = f.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        return CardChoice(None, reason="the file has no general.architecture")
    if not f.tensors:
        return CardChoice(
            None,
            reason=f"the file holds no tensors (a vocabulary-only file of architecture {safe_text(arch)})",
        )
    user = user_card_path(arch, user_card_dirs())
    if user is not None:
        return CardChoice(read_card_file(user), "user", path=str(user))
    refused = refused_variant(arch, f.tensors)
    if refused is not None:
        return CardChoice(None, reason=f"no library card for this {safe_text(arch)} file: {refused}")
    name = library_card_name(arch, f.tensors)
    if name is not None:
        return CardChoice(library_card(name), "library", path=library_card_file(name))
    member = next((m for m, name in ARCH_NAMES.items() if name == arch), None)
    known = f"gguf knows it as MODEL_ARCH.{member}" if member else "unknown to gguf too"
    return CardChoice(
        None,
        reason=f"no card for architecture {safe_text(arch)} in the library ({known}); "
        f"pass a card (--card FILE), or put {_stem(arch)}.card in a folder of {USER_CARDS_ENV}",
    )


def _check_embedded_size(text: str, where: str) -> None:
    """Refuse an embedded card larger than a card file may be, before it is hashed or parsed: the
    card comes with the file, from whoever made it, and is read like any card file."""
    from toycards.lang.reading import MAX_BYTES, utf8_size

    size = utf8_size(text)
    if size > MAX_BYTES:
        raise ToycardsError(
            f"{where}: the embedded card is {size} bytes, too large for a card (limit {MAX_BYTES})"
        )


def _stem(arch: str) -> str:
    return arch if _ARCH_STEM.fullmatch(arch) else "ARCH"


def safe_text(text: str) -> str:
    """Text from a file made safe for one line of a message or card comment, quoted: 'llama'."""
    text = "".join(c if c.isprintable() else "?" for c in text).replace("*/", "* /")
    return f"'{text[:60]}'"
