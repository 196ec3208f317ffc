"""Declaration-only cards: what a GGUF file holds, for architectures the library has no card for.

Owns: `declaration_only_card(f, header, reason)`: a card whose one algorithm declares every
`{arch}.*` metadata value as a hyperparameter (`L ∈ ℕ = 30 from "{arch}.block_count"`) and
every tensor as a parameter bound to its name, per-layer tensors in `for l ∈ [L]` groups, each
with its role from `gguf.constants` (`MODEL_TENSOR.ATTN_Q` → "attention query") and its ggml
types as a comment; the algorithm has no steps (its description starts with
`DECLARATION_ONLY`). `tensor_role(name, arch)` names the role of one tensor.
Leaves out: choosing between library, embedded and declaration-only cards (describe.py).

Names follow the paper where the metadata key is a well-known one (`L`, `H`, `d_e`, `ε`, …);
other keys become snake-case names (`rope.scaling.yarn_log_multiplier` →
`rope_scaling_yarn_log_multiplier`); tensors become `W_attnQ^l` (weights), `b_attnQ^l`
(biases), `γ_attnNorm^l`/`β_attnNorm^l` (norm weights and biases), `θ_ssmA^l` (anything else).

>>> tensor_role("blk.3.attn_q.weight", "llama"), tensor_role("token_embd.weight", "qwen2")
('attention query (ATTN_Q)', 'token embedding (TOKEN_EMBD)')
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from typing import TYPE_CHECKING

from toycards.gguf.facts import INT_TENSOR_TYPES, INT_VALUE_TYPES
from toycards.inspect.literals import number_expr
from toycards.lang import ir
from toycards.lang.names import canonical_name

if TYPE_CHECKING:
    from gguf import MODEL_TENSOR

DECLARATION_ONLY = "declaration-only"

# {arch}.* key → the paper's name (others get a snake-case name made from the key)
HYPER_NAMES: dict[str, str] = {
    "block_count": "L", "context_length": "ℓ_max", "embedding_length": "d_e",
    "feed_forward_length": "d_ff", "vocab_size": "N_V", "attention.head_count": "H",
    "attention.head_count_kv": "H_kv", "attention.key_length": "d_k", "attention.value_length": "d_v",
    "attention.layer_norm_epsilon": "ε", "attention.layer_norm_rms_epsilon": "ε",
    "rope.freq_base": "θ_base", "rope.dimension_count": "d_rot", "rope.scaling.factor": "s",
    "expert_count": "E", "expert_used_count": "E_used", "expert_feed_forward_length": "d_ff_exp",
}  # fmt: skip
DIM_NAMES = ("d_e", "d_ff", "N_V", "ℓ_max")  # hyperparameters that may name a tensor dimension

# role of a tensor: whole MODEL_TENSOR names first, else word by word
ROLE_NAMES: dict[str, str] = {
    "TOKEN_EMBD": "token embedding", "POS_EMBD": "position embedding", "OUTPUT": "unembedding",
    "OUTPUT_NORM": "final norm", "ATTN_QKV": "fused query/key/value", "ATTN_OUT": "attention output",
    "FFN_GATE_INP": "expert router", "FFN_GATE_INP_SHEXP": "shared-expert gate",
    "ROPE_FREQS": "RoPE frequency factors", "TOKEN_EMBD_NORM": "embedding norm",
    "TOKEN_TYPES": "token-type embedding",
}  # fmt: skip
ROLE_WORDS: dict[str, str] = {
    "ATTN": "attention", "Q": "query", "K": "key", "V": "value", "KV": "key/value", "O": "output",
    "OUT": "output", "NORM": "norm", "FFN": "feed-forward", "EXP": "experts", "SHEXP": "shared expert",
    "CHEXP": "chunk experts", "INP": "input", "EMBD": "embedding", "TOKEN": "token", "POS": "position",
    "ROPE": "RoPE", "FREQS": "frequencies", "FACTORS": "factors", "SSM": "SSM", "DT": "Δt",
    "LN": "layer norm", "ROT": "rotary", "EMB": "embedding", "ENC": "encoder", "DEC": "decoder",
    "PROJ": "projection", "POST": "post", "PRE": "pre", "SUB": "sub", "REL": "relative",
    "B": "bias", "MIX": "mix", "LERP": "lerp", "W": "weight",
}  # fmt: skip
_RESERVED = frozenset(
    "for in or if then do end return from default and not x sum sqrt mod R N Z S V T "
    "Input Output Hyperparameters Parameters Algorithm".split()
)
_NAME_OK = re.compile(r"[A-Za-zα-ωΑ-Ωℓ]\w*")
_LAYER = re.compile(r"(?P<pre>(?:[^.]+\.)*?blk\.)(?P<i>\d+)\.(?P<rest>.+)")
_DIGIT_PART = re.compile(r"(?<=\.)\d+(?=\.|$)")


# ── roles ───────────────────────────────────────────────────────────────────────────────
@functools.cache
def _templates(arch: str) -> dict[str, MODEL_TENSOR]:
    """TENSOR_NAMES reversed; where two enums share a name, the architecture's own wins.
    (`gguf` is imported here: only files without a library card need its tensor tables.)"""
    from gguf import MODEL_ARCH, MODEL_ARCH_NAMES, MODEL_TENSORS, TENSOR_NAMES

    out: dict[str, MODEL_TENSOR] = {}
    own = set()
    for member in MODEL_ARCH:
        if MODEL_ARCH_NAMES[member] == arch:
            own = set(MODEL_TENSORS.get(member, ()))
    for tensor, name in TENSOR_NAMES.items():
        if name not in out or tensor in own:
            out[name] = tensor
    return out


def model_tensor(name: str, arch: str) -> MODEL_TENSOR | None:
    """The gguf.constants enum of a tensor name (`blk.3.attn_q.weight` → MODEL_TENSOR.ATTN_Q)."""
    table = _templates(arch)
    base = name
    for _ in range(2):  # the name itself, then without its suffix (.weight, .bias, .scale, …)
        template = _DIGIT_PART.sub("{bid}", base, count=1)
        if template in table:
            return table[template]
        base = base.rsplit(".", 1)[0]
    return None


def tensor_role(name: str, arch: str) -> str:
    """A human-readable role, with the gguf.constants name in parentheses."""
    tensor = model_tensor(name, arch)
    if tensor is None:
        return "role unknown to gguf.constants"
    words = ROLE_NAMES.get(tensor.name) or " ".join(
        ROLE_WORDS.get(w, w.lower()) for w in tensor.name.split("_")
    )
    return f"{words} ({tensor.name})"


# ── names ───────────────────────────────────────────────────────────────────────────────
def _camel(stem: str) -> str:
    """`ffn_gate_exps` → `ffnGateExps` (a subscript without underscores)."""
    words = [w for w in re.split(r"[^0-9A-Za-z]+", stem) if w]
    return "".join(w if i == 0 else w[:1].upper() + w[1:] for i, w in enumerate(words)) or "t"


class _Names:
    """Hands out unique, valid, canonical card names."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def take(self, want: str) -> str:
        """`want` if it is a free, valid name; else a made-valid variant with a number."""
        if not _NAME_OK.fullmatch(want) or want in _RESERVED:
            want = f"k_{_camel(want)}"
        name = canonical_name(want)
        unique, n = name, 2
        while unique in self.used:
            unique, n = f"{name}{n}", n + 1
        self.used.add(unique)
        return unique


def _param_name(stem: str, kind: str, names: _Names, sup: str = "") -> str:
    is_norm = stem.endswith("norm")
    base = {"weight": "γ" if is_norm else "W", "bias": "β" if is_norm else "b"}.get(kind, "θ")
    sub = _camel(stem if kind in ("weight", "bias") else f"{stem}_{kind}")
    name = canonical_name(f"{base}_{sub}" + (f"^{sup}" if sup else ""))
    unique, n = name, 2
    while unique in names.used:
        unique, n = canonical_name(f"{base}_{sub}{n}" + (f"^{sup}" if sup else "")), n + 1
    names.used.add(unique)
    return unique


# ── hyperparameters ─────────────────────────────────────────────────────────────────────
def _hyper_decl(f, key: str, arch: str, name: str, n_layer: int | None) -> ir.Decl | None:
    vtype = f.value_type(key)
    source = ir.Binding("from", ((ir.Source(key.replace(f"{arch}.", "{arch}.", 1)),),))
    if '"' in key or "\n" in key:
        return None
    if vtype.startswith("array["):
        sub = vtype[6:-1]
        if sub not in INT_VALUE_TYPES | {"float32", "float64"}:
            return None
        n = f.array_len(key)
        dim = ir.DimName("L") if n_layer is not None and n == n_layer else ir.DimNum(n)
        values = list(f.metadata[key][:8]) if n else []
        shown = ", ".join(f"{v:g}" for v in values) + (", …" if n > 8 else "")
        field = "Z" if sub in INT_VALUE_TYPES else "R"
        return ir.Decl((name,), ir.TensorType(field, (dim,)), source, comment=f"per layer: {shown}")
    value = f.metadata[key]
    typ, expr = _scalar_type(value, vtype)
    if typ is None:
        return None
    return ir.Decl((name,), typ, source, value=expr)


def _scalar_type(value: object, vtype: str) -> tuple[ir.Type | None, ir.Expr | None]:
    if vtype == "bool":
        return ir.TensorType("B"), ir.Num("1" if value else "0")
    if vtype in INT_VALUE_TYPES:
        return ir.TensorType("N" if value >= 0 else "Z"), number_expr(value, False)
    if vtype in ("float32", "float64"):
        finite = value == value and abs(value) != float("inf")
        return ir.TensorType("R"), number_expr(value, vtype == "float32") if finite else None
    if vtype == "string":
        ok = len(value) <= 80 and '"' not in value and value.isprintable()
        return ir.StrType(), ir.Str(value) if ok else None
    return None, None


def _hyperparameters(f, arch: str, names: _Names) -> list[ir.Decl]:
    prefix = f"{arch}."
    keys = [k for k in f.metadata if arch and k.startswith(prefix)]
    keys.sort(key=lambda k: k != f"{arch}.block_count")  # L first: per-layer arrays use it
    n_layer = f.get(f"{arch}.block_count")
    n_layer = n_layer if isinstance(n_layer, int) else None
    decls = []
    for key in keys:
        suffix = key[len(prefix) :]
        want = HYPER_NAMES.get(suffix, suffix.replace(".", "_"))
        if want in names.used and suffix in HYPER_NAMES:
            want = suffix.replace(".", "_")
        decl = _hyper_decl(f, key, arch, names.take(want), n_layer)
        if decl is not None:
            decls.append(decl)
    return decls


def _vocabulary_decl(f, decls: list[ir.Decl], names: _Names) -> ir.Decl | None:
    """`N_V` from the token list when no `{arch}.vocab_size` key gives it."""
    key = "tokenizer.ggml.tokens"
    if any("N_V" in d.names for d in decls) or key not in f.metadata:
        return None
    if not f.value_type(key).startswith("array"):
        return None
    value = ir.Num(str(f.array_len(key)))
    return ir.Decl((names.take("N_V"),), ir.TensorType("N"), value=value, comment=f"tokens in {key}")


# ── parameters ──────────────────────────────────────────────────────────────────────────
def _dim_table(decls: list[ir.Decl]) -> dict[int, str]:
    """Values of d_e, d_ff, N_V, ℓ_max that may name tensor dimensions: only values that no
    other natural-number hyperparameter shares, so that a coincidence never names a dimension."""
    seen: dict[int, list[str]] = {}
    for d in decls:
        if isinstance(d.value, ir.Num) and d.value.text.isdigit():
            seen.setdefault(int(d.value.text), []).append(d.names[0])
    return {v: ns[0] for v, ns in seen.items() if len(ns) == 1 and ns[0] in DIM_NAMES and v > 1}


def _type(info, dims: dict[int, str]) -> ir.TensorType:
    field = "Z" if info.type_name in INT_TENSOR_TYPES else "R"
    return ir.TensorType(field, tuple(ir.DimName(dims[n]) if n in dims else ir.DimNum(n) for n in info.shape))


def _split(name: str) -> tuple[str, str]:
    """`attn_q.weight` → (`attn_q`, `weight`); `ssm_a` → (`ssm_a`, ``)."""
    stem, _, kind = name.partition(".")
    return stem, kind


def _types_text(infos: list) -> str:
    counts = Counter(i.type_name for i in infos)
    return ", ".join(t if len(counts) == 1 else f"{t} ×{n}" for t, n in counts.most_common())


def _param_decl(name: str, infos: list, tensor: str, dims: dict[int, str], arch: str) -> ir.Decl:
    role = tensor_role(infos[0].name, arch)
    binding = ir.Binding("from", ((ir.Source(tensor),),))
    return ir.Decl((name,), _type(infos[0], dims), binding, comment=f"{role}, {_types_text(infos)}")


def _layer_tables(f) -> tuple[dict[str, dict[str, dict[int, object]]], list]:
    """Per-layer tensors by group prefix and name rest; the others in file order."""
    groups: dict[str, dict[str, dict[int, object]]] = {}
    loose = []
    for info in f.tensors.values():
        m = _LAYER.fullmatch(info.name)
        if m is None or '"' in info.name or "{" in info.name:
            loose.append(info)
            continue
        groups.setdefault(m["pre"], {}).setdefault(m["rest"], {})[int(m["i"])] = info
    return groups, loose


def _parameters(f, arch: str, dims, names: _Names, n_layer: int | None) -> list:
    groups, loose = _layer_tables(f)
    out: list = []
    for info in loose:
        if '"' in info.name or "{" in info.name:
            continue  # a name the card language cannot quote; the header still counts it
        stem, kind = _split(info.name)
        out.append(_param_decl(_param_name(stem, kind, names), [info], info.name, dims, arch))
    for pre, rests in groups.items():
        n = 1 + max(i for layers in rests.values() for i in layers)
        members = []
        for rest, layers in rests.items():
            infos = [layers.get(i) for i in range(n)]
            stem, kind = _split(rest)
            if all(infos) and len({i.shape for i in infos}) == 1:
                members.append(_param_decl(_param_name(stem, kind, names, "l"), infos, rest, dims, arch))
                continue
            for i, info in sorted(layers.items()):  # not in every layer, or shapes differ
                decl_name = _param_name(stem, kind, names, str(i + 1))
                out.append(_param_decl(decl_name, [info], info.name, dims, arch))
        if members:
            bound = ir.DimName("L") if n == n_layer else ir.DimNum(n)
            out.append(ir.ParamGroup("l", bound, pre + "{l-1}.", tuple(members), comment=f"{n} layers"))
    return out


# ── the card ────────────────────────────────────────────────────────────────────────────
def algorithm_name(arch: str | None) -> str:
    """`qwen2` → `Qwen2`, `gpt-oss` → `GptOss`; `Model` when there is no usable name."""
    words = [w for w in re.split(r"[^0-9A-Za-z]+", arch or "") if w]
    name = "".join(w[:1].upper() + w[1:] for w in words)
    return name if name[:1].isalpha() else "Model" + name


def declaration_only_card(f, arch: str | None, reason: str, preamble: tuple[str, ...] = ()) -> ir.Card:
    """The declaration-only card of an open GGUF file (see the module docstring)."""
    names = _Names()
    names.used.update({"x", "ℓ", "P", "y", "θ", "l"})
    hyper = _hyperparameters(f, arch or "", names)
    vocab = _vocabulary_decl(f, hyper, names)
    hyper += [vocab] if vocab else []
    dims = _dim_table(hyper)
    n_layer = f.get(f"{arch}.block_count") if arch else None
    params = _parameters(f, arch or "", dims, names, n_layer if isinstance(n_layer, int) else None)
    declared = {n for d in hyper for n in d.names}
    if "N_V" in declared:
        output = ir.Decl(("P",), ir.TensorType("P", (ir.DimName("N_V"), ir.DimName("ℓ"))))
    else:
        output = ir.Decl(("y",), ir.TensorType("R"), comment="unknown: the file does not say")
    algo = ir.Algorithm(
        name=algorithm_name(arch),
        number="",
        output=output.names[0],
        inputs=("x",),
        params=("θ",),
        description=f"{DECLARATION_ONLY}: {reason}; hyperparameters and tensors as the file holds them, no steps",
        input_decls=(ir.Decl(("x",), ir.TensorType("V", (ir.DimName("ℓ"),)), comment="token ids"),),
        output_decls=(output,),
        hyper_decls=tuple(hyper),
        param_decls=tuple(params),
        body=(),
    )
    return ir.Card((algo,), preamble=preamble)


def is_declaration_only(card: ir.Card) -> bool:
    return bool(card.algorithms) and card.main.description.startswith(DECLARATION_ONLY)
