"""Which ggml type llama.cpp's `llama-quantize` gives each tensor of a file, for a file type.

Owns: `rule_types(f, file_type)`, the types `llama-quantize` writes for `general.file_type`
`file_type` ("Q4_K_M", "Q8_0", "F16", …) as llama.cpp's llama-quant.cpp decides them
(`llama_tensor_get_type`: the default type of the file type, the tensors it never quantises,
more bits for `attn_v` and `ffn_down` in some layers, Q6_K for the output, the fallback for rows
that blocks do not fit), `CHECKED_FILE_TYPES` (the file types it knows) and `load_order`.
Leaves out: the grid, bits per weight and the verdict shown to a user (quantmap.py).

The rule is replayed, not guessed: tensors are visited in llama.cpp's order (by layer, then by
name) with its counters, and the facts it reads of the model come from the metadata (head
counts, experts, an importance matrix). Where releases of llama.cpp differ, every type one of
them writes is accepted, the current one first: `attn_qkv` (Q5_K in Q4_K_M before it shared
`attn_v`'s rule), the fallback of Q2_K and Q3_K rows (IQ4_NL before Q4_0), and `attn_v` of an
80-layer model, which llama.cpp's per-architecture size table may call 70B (Q5_K for Q3_K and Q4_K).
The IQ, TQ and FP4 file types are not in the table.

A 1-layer Llama in Q4_K_M, its rows of 256 weights (Q4_K blocks fit): `attn_v` and `ffn_down`
of the last eighth of the layers get Q6_K, the output Q6_K, the norms stay as converted:

>>> import types
>>> t = lambda name, shape, kind="Q4_K": types.SimpleNamespace(name=name, shape=shape, type_name=kind)
>>> f = types.SimpleNamespace(metadata={"general.architecture": "llama"}, tensors={n: t(n, s) for n, s in [
...     ("token_embd.weight", (32, 256)), ("blk.0.attn_v.weight", (32, 256)),
...     ("blk.0.attn_norm.weight", (256,)), ("blk.0.ffn_down.weight", (256, 256)),
...     ("blk.0.ffn_up.weight", (256, 256)), ("output.weight", (32, 256))]})
>>> f.get = lambda key, default=None: f.metadata.get(key, default)
>>> rule_types(f, "Q4_K_M")  # doctest: +NORMALIZE_WHITESPACE
{'output.weight': ('Q6_K',), 'token_embd.weight': ('Q4_K',), 'blk.0.attn_norm.weight': ('F32', 'F16', 'BF16'),
 'blk.0.attn_v.weight': ('Q6_K',), 'blk.0.ffn_down.weight': ('Q6_K',), 'blk.0.ffn_up.weight': ('Q4_K',)}
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from toycards.gguf.facts import QUANT_NAMES, QUANT_SIZES, Keys

# file type (gguf.LlamaFileType's name without MOSTLY_/ALL_) → the type of most tensors
# (llama_ftype_get_default_type); its order is the order in which a file without
# general.file_type is matched against the rules
DEFAULT_TYPES: dict[str, str] = {
    "F32": "F32", "F16": "F16", "BF16": "BF16", "Q8_0": "Q8_0", "Q4_0": "Q4_0", "Q4_1": "Q4_1",
    "Q5_0": "Q5_0", "Q5_1": "Q5_1", "Q2_K": "Q2_K", "Q2_K_S": "Q2_K", "Q3_K_S": "Q3_K",
    "Q3_K_M": "Q3_K", "Q3_K_L": "Q3_K", "Q4_K_S": "Q4_K", "Q4_K_M": "Q4_K", "Q5_K_S": "Q5_K",
    "Q5_K_M": "Q5_K", "Q6_K": "Q6_K",
}  # fmt: skip
CHECKED_FILE_TYPES = tuple(DEFAULT_TYPES)
FLOAT_TYPES = frozenset({"F32", "F16", "BF16"})
# what a tensor llama-quantize copies may hold: the type the converter gave it
AS_CONVERTED = ("F32", "F16", "BF16")

# tensors llama-quantize copies as they are (tensor_allows_quantization): parts of names …
KEPT_NAME_PARTS = (
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
    "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
    "indexer.q_proj.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.",
    "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
    *(f"time_mix_{part}.weight" for part in (
        "first", "w0", "w1", "w2", "v0", "v1", "v2", "a0", "a1", "a2", "g1", "g2", "decay_w1",
        "decay_w2", "lerp_fused",
    )),
)  # fmt: skip
# … and whole names (LLM_TENSOR_POS_EMBD, LLM_TENSOR_TOKEN_TYPES)
KEPT_NAMES = frozenset({"position_embd.weight", "token_types.weight"})

# llama.cpp's tensor categories (tensor_get_category): (category, test), the first that matches
CATEGORIES: tuple[tuple[str, object], ...] = (
    ("output", lambda n: n == "output.weight"),
    ("token_embd", lambda n: n in ("token_embd.weight", "per_layer_token_embd.weight")),
    ("attn_qkv", lambda n: "attn_qkv.weight" in n),
    ("attn_kv_b", lambda n: "attn_kv_b.weight" in n),
    ("attn_v", lambda n: "attn_v.weight" in n),
    ("attn_k", lambda n: "attn_k.weight" in n),
    ("attn_q", lambda n: "attn_q.weight" in n),
    ("attn_output", lambda n: "attn_output.weight" in n),
    ("ffn_up", lambda n: "ffn_up" in n),
    ("ffn_gate", lambda n: "ffn_gate" in n),
    ("ffn_down", lambda n: "ffn_down" in n),
)
ATTN_V_LIKE = frozenset({"attn_v", "attn_qkv", "attn_kv_b"})  # category_is_attn_v
# a type whose blocks do not fit a row → what llama.cpp writes instead (tensor_type_fallback),
# the current release first; a type not here (Q8_0, Q4_0, …) becomes F16, as convert_hf_to_gguf.py
# writes such a tensor
FALLBACKS: dict[str, tuple[str, ...]] = {
    "Q2_K": ("Q4_0", "IQ4_NL"), "Q3_K": ("Q4_0", "IQ4_NL"), "Q4_K": ("Q5_0",), "Q5_K": ("Q5_1",),
    "Q6_K": ("Q8_0",),
}  # fmt: skip
_BLOCK = {name: QUANT_SIZES[code][0] for code, name in QUANT_NAMES.items() if code in QUANT_SIZES}
_LAYER = re.compile(r"blk\.(\d+)\.")


@dataclass(frozen=True)
class _Model:
    """What llama-quantize reads of the model besides the tensor itself."""

    arch: str
    n_layer: int  # hparams.n_layer: the per-layer counters run against it
    n_gqa: int  # query heads per key/value head, of the first layer
    n_expert: int
    tied: bool  # no output.weight: token_embd gets the output's type
    has_imatrix: bool
    n_attention_wv: int  # tensors of an attn_v-like category
    maybe_70b: bool  # 80 layers: the size table may say 70B


def load_order(name: str) -> tuple[int, str]:
    """llama.cpp's order of tensors (weight_name_comparer): by layer (-1 outside), then by name."""
    m = _LAYER.match(name)
    return (int(m.group(1)) if m else -1, name)


def quantizable(name: str, shape: tuple[int, ...]) -> bool:
    """Whether llama-quantize quantises a tensor (tensor_allows_quantization): a matrix or more
    (ggml_n_dims, trailing ones not counted), named `….weight`, not a norm nor one it keeps."""
    n_dims = len(shape) - next((i for i, d in enumerate(shape) if d != 1), len(shape) - 1)
    if n_dims < 2 or not name.endswith("weight") or name in KEPT_NAMES:
        return False
    return not any(part in name for part in KEPT_NAME_PARTS)


def category(name: str) -> str:
    """llama.cpp's category of a tensor name: `blk.0.attn_v.weight` → "attn_v"; else "other"."""
    return next((cat for cat, test in CATEGORIES if test(name)), "other")


def rule_types(f, file_type: str) -> dict[str, tuple[str, ...]] | None:
    """Tensor name → the types llama-quantize writes for `file_type`, the current release's
    first (then those of earlier releases); None for a file type not in the table. `f` is an
    open GGUFFile (its `tensors` and metadata)."""
    default = DEFAULT_TYPES.get(file_type)
    if default is None:
        return None
    model, counters = _model(f), Counter()
    out: dict[str, tuple[str, ...]] = {}
    for name in sorted(f.tensors, key=load_order):
        t = f.tensors[name]
        if not quantizable(name, tuple(t.shape)):
            out[name] = AS_CONVERTED
        elif default in FLOAT_TYPES:
            out[name] = (default,)
        else:
            ncols = t.shape[-1]
            chosen = _chosen(name, ncols, file_type, default, model, counters)
            out[name] = tuple(dict.fromkeys(fb for c in chosen for fb in _fallback(c, ncols)))
    return out


def _model(f) -> _Model:
    arch = f.get(Keys.General.ARCHITECTURE) or ""
    key = lambda template: template.format(arch=arch)  # noqa: E731
    layers = [load_order(name)[0] for name in f.tensors]
    n_layer = _first_int(f.get(key(Keys.LLM.BLOCK_COUNT))) or max(layers, default=-1) + 1
    n_head = _first_int(f.get(key(Keys.Attention.HEAD_COUNT)))
    n_head_kv = _first_int(f.get(key(Keys.Attention.HEAD_COUNT_KV)), n_head)
    return _Model(
        arch=arch,
        n_layer=n_layer,
        n_gqa=n_head // n_head_kv if n_head_kv else 0,
        n_expert=_first_int(f.get(key(Keys.LLM.EXPERT_COUNT))),
        tied="output.weight" not in f.tensors,
        has_imatrix=any(k.startswith("quantize.imatrix.") for k in f.metadata),
        n_attention_wv=sum(category(name) in ATTN_V_LIKE for name in f.tensors),
        maybe_70b=n_layer == 80,
    )


def _first_int(value: object, default: int = 0) -> int:
    """A count from the metadata: a scalar, or the first entry of a per-layer array."""
    if hasattr(value, "__len__") and not isinstance(value, str):
        value = value[0] if len(value) else default
    if hasattr(value, "item"):
        value = value.item()
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _fallback(chosen: str, ncols: int) -> tuple[str, ...]:
    """`chosen`, or what llama.cpp writes when its blocks do not fit a row of `ncols`."""
    if ncols % _BLOCK.get(chosen, 1) == 0:
        return (chosen,)
    return tuple(t if ncols % _BLOCK[t] == 0 else "F16" for t in FALLBACKS.get(chosen, ("F16",)))


def _use_more_bits(i: int, n: int) -> bool:
    """The layers Q4_K_M and Q5_K_M give more bits: the first and last eighth, every third between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _chosen(name: str, ncols: int, ftype: str, new: str, m: _Model, i: Counter) -> tuple[str, ...]:
    """llama_tensor_get_type_impl for the file types of DEFAULT_TYPES; counts as it does."""
    cat = category(name)
    if cat == "output" or (m.tied and cat == "token_embd"):
        if m.arch == "falcon" or ncols % _BLOCK[new]:
            return ("Q8_0",)
        return (new if new == "Q8_0" else "Q6_K",)
    if cat in ATTN_V_LIKE:
        i["attn_v"] += 1
        chosen = _attn_v(ftype, new, m, i["attn_v"] - 1)
        return chosen + (_qkv_before(ftype, new),) if cat == "attn_qkv" else chosen
    if cat == "attn_k":
        return ("Q8_0" if m.n_expert == 8 else new,)
    if cat == "ffn_down":
        i["ffn_down"] += 1
        layer = i["ffn_down"] - 1
        if m.n_expert > 1:  # experts are not in layer order: llama.cpp reads the layer from the name
            layer = load_order(name)[0]
        return (_ffn_down(ftype, new, m, layer),)
    if cat == "attn_output":
        return (_attn_output(ftype, new, m),)
    return (new,)


def _attn_v(ftype: str, new: str, m: _Model, i: int) -> tuple[str, ...]:
    if ftype == "Q2_K":
        new = "Q4_K" if m.n_gqa >= 4 else "Q3_K"
    elif ftype == "Q2_K_S" and m.n_gqa >= 4:
        new = "Q4_K"
    elif ftype == "Q3_K_M":
        new = "Q5_K" if i < 2 else "Q4_K"
    elif ftype == "Q3_K_L":
        new = "Q5_K"
    elif ftype in ("Q4_K_M", "Q5_K_M") and _use_more_bits(i, m.n_attention_wv):
        new = "Q6_K"
    elif ftype == "Q4_K_S" and i < 4:
        new = "Q5_K"
    chosen = (new, "Q5_K") if m.maybe_70b and new in ("Q3_K", "Q4_K") else (new,)
    return ("Q8_0",) if m.n_expert == 8 else chosen


def _qkv_before(ftype: str, new: str) -> str:
    """attn_qkv as llama.cpp chose it before attn_v's rule covered it."""
    return {"Q3_K_M": "Q4_K", "Q3_K_L": "Q4_K", "Q4_K_M": "Q5_K", "Q5_K_M": "Q6_K"}.get(ftype, new)


def _ffn_down(ftype: str, new: str, m: _Model, i: int) -> str:
    n, falcon = m.n_layer, m.arch == "falcon"
    more = _use_more_bits(i, n)
    if ftype == "Q2_K":
        return "Q3_K"
    if ftype == "Q2_K_S":
        return "Q4_K" if i < n // 8 else new
    if ftype == "Q3_K_M":
        return "Q5_K" if i < n // 16 else "Q4_K" if not falcon or more else "Q3_K"
    if ftype == "Q3_K_L":
        return "Q4_K" if falcon else "Q5_K"
    if ftype == "Q4_K_M":
        if falcon:
            return "Q6_K" if i < n // 16 else "Q5_K" if more else "Q4_K"
        return "Q6_K" if more else new
    if ftype == "Q5_K_M" and more:
        return "Q6_K"
    if ftype == "Q4_K_S" and not falcon and i < n // 8:
        return "Q5_K"
    if ftype in ("Q4_0", "Q5_0") and m.has_imatrix and i < n // 8:
        return "Q4_1" if ftype == "Q4_0" else "Q5_1"
    return new


def _attn_output(ftype: str, new: str, m: _Model) -> str:
    if m.arch == "falcon":
        return "Q4_K" if ftype == "Q3_K_L" else new
    if m.n_expert == 8:
        return "Q5_K" if ftype in ("Q2_K", "Q3_K_S", "Q3_K_M", "Q4_K_S", "Q4_K_M") else new
    return {"Q2_K": "Q3_K", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K"}.get(ftype, new)
