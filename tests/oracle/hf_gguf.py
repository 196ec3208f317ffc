"""Oracle: tiny Hugging Face models, written to GGUF the way llama.cpp's converter does.

Owns: building tiny `transformers` models (the architectures: archs.py) with every weight randomised (`tiny_model`), turning
their weights into llama.cpp's tensor names and layouts (`gguf_tensors`), writing them to a GGUF
file with the metadata and a minimal tokenizer (`write_gguf`), the float model that a quantized
file stands for (`quantized_copy`), and logits from `transformers` (`hf_logits`,
`hf_logits_from_gguf`). Leaves out: anything from `toycards`; this module is what toycards is
checked against, so it must not import it.

Facts relied on (llama.cpp `convert_hf_to_gguf.py`, transformers 5.x `modeling_gguf_pytorch_utils.py`
and `integrations/ggml.py`, gguf-py 0.19):

- Names: llama.cpp maps Hugging Face module names through `gguf.get_tensor_name_map(arch, L)`
  (`model.layers.0.self_attn.q_proj` → `blk.0.attn_q`, `transformer.h.0.attn.c_attn` →
  `blk.0.attn_qkv`, `lm_head` → `output`); suffixes `.weight` / `.bias` are kept.
- Layout: a linear weight keeps PyTorch's `(n_out, n_in)`, which is GGUF's NumPy shape (ggml
  `ne = [n_in, n_out]`). GPT-2's `Conv1D` stores `(n_in, n_out)`, so the converter transposes
  `c_attn`, `c_proj`, `c_fc`; `attn_qkv` rows are q; k; v (each `d_e` rows).
- Q/K permutation (rope type NORM: llama): each head's `d_h` rows, read as two halves
  `[x_0..x_{d_h/2-1} | y_0..y_{d_h/2-1}]` (HF rotates `x_i` with `y_i`), are interleaved to
  `x_0 y_0 x_1 y_1 …`, so that llama.cpp rotates adjacent pairs `(2i, 2i+1)`:
  `W.reshape(n, 2, d_h/2, d_e).swapaxes(1, 2).reshape(W.shape)` with `n = H` for Q and `n = H_kv`
  for K (biases likewise). transformers undoes it with `reshape(n, d_h/2, 2, …).swapaxes(1, 2)`.
  Qwen2/Qwen3 (rope type NEOX) are written unpermuted: their rotation pairs `i` with `i + d_h/2`.
- Tied output: llama.cpp writes no `output.weight` when the checkpoint has no `lm_head` (tied);
  transformers sets `tie_word_embeddings` from the *absence* of `output.weight`.
- Types: 1-D tensors, `*_norm.weight`, tensors not ending in `.weight` (biases) and
  `position_embd` stay F32; every other 2-D weight, `token_embd` and `output` included, takes the
  file type (F16 or Q8_0); a Q8_0 row whose length is not a multiple of 32 falls back to F16.
- transformers' loader (the legacy path for gpt2/llama/qwen2/qwen3/starcoder2) dequantizes every tensor with
  `gguf.dequantize` into a plain float model; the config comes from metadata alone:
  llama `rope.dimension_count` → `head_dim`; qwen2/qwen3 ignore `rope.dimension_count` and
  `attention.key_length`, so the reloaded `head_dim` is the config class default (Qwen3: 128) —
  the tiny Qwen3 therefore uses `head_dim = 128`. GPT-2 ignores `feed_forward_length` (the model
  uses 4·d_e; llama.cpp writes 4·d_e too) and reads `context_length` into `n_ctx`, not
  `n_positions`, so the reloaded position table has the class default 1024 rows — the tiny GPT-2
  therefore has `n_positions = 1024`. Without `{arch}.vocab_size` the vocabulary size is the
  length of `tokenizer.ggml.tokens`. StarCoder2 ignores `rope.freq_base` (the reloaded θ is the
  class default 10000, which llama.cpp also assumes when the key is absent), so the tiny
  StarCoder2 keeps θ = 10000; the file still carries the key, as llama.cpp's converter writes it.
- Granite and SmolLM3 (`conversion/granite.py`, `conversion/smollm3.py` of llama.cpp's converter):
  both are `LlamaModel`s, so Q/K rows are permuted (rope type NORM) and `rope.dimension_count` is
  d_e / H. GraniteModel pops the config's head_dim (no `attention.key_length`) and writes
  embedding_multiplier, residual_multiplier, attention_multiplier and logits_scaling as
  `{arch}.embedding_scale`, `.residual_scale`, `.attention.scale`, `.logit_scale`, each only when
  non-zero. SmolLM3 writes nothing about its NoPE layers (llama.cpp fixes the step at 4) and its
  config has no head_dim. transformers' GGUF loader reads neither architecture, so their files are
  checked against the in-memory model (and llama.cpp, where installed: test_granite_smollm3.py).
- Gemma (llama.cpp `conversion/gemma.py` GemmaModel): its own `set_gguf_parameters` writes
  context/embedding/feed-forward lengths, block and head counts, `head_count_kv`, the RMS ε and
  `key_length` = `value_length` = `head_dim`, and no `rope.freq_base`, `rope.dimension_count` or
  `vocab_size`; `modify_tensors` adds 1 to every `*norm.weight` (transformers' GemmaRMSNorm scales by
  1 + w); `lm_head.weight` is skipped (llama.cpp's gemma unembeds with `token_embd`); Q/K unpermuted.
- OLMo 2 (`conversion/olmo.py` Olmo2Model): TextModel's keys (`rope.freq_base` from rope_theta; no
  `key_length`, as OLMo 2's config.json has no head_dim; no `rope.dimension_count`, no
  `vocab_size`), tensors as named by gguf's map (`post_attention_norm`, `post_ffw_norm`,
  `attn_q_norm` of H·d_h and `attn_k_norm` of H_kv·d_h entries), Q/K unpermuted, untied `output`.
- Gemma 2 (`Gemma2Model`): Gemma's keys plus `attn_logit_softcapping`, `final_logit_softcapping` and
  `attention.sliding_window`, always; `*norm.weight` + 1 (post_attention_norm, post_ffw_norm too).
  Gemma 3 (`Gemma3Model` over TextModel): `rope.freq_base` from the full-attention RoPE parameters,
  `rope.freq_base_swa` from the sliding ones, `rope.scaling.type`/`.factor` when the global layers'
  RoPE is linear, the window unless every layer is global, `final_logit_softcapping` only when set,
  `key_length` = head_dim; `*norm.weight` + 1 (q/k norms too).
- transformers' GGUF loader reads neither gemma (v1) nor olmo2; gemma2 and gemma3 it loads but
  drops what makes them Gemma 2/3 (the soft-caps and query_pre_attn_scalar revert to its defaults,
  50, 30 and 256; the global layers' RoPE scaling is not read): `transformers_reads` is False for
  all four, so these
  files are checked against llama.cpp where llama-cpp-python is installed
  (tests/models/test_models_oracle.py), and toycards against the in-memory model always.
- Mamba (`conversion/mamba.py` MambaModel): its own `set_gguf_parameters` (context_length 2^20,
  feed_forward_length and head_count 0, the four `ssm.*` sizes, the RMS ε, `ssm.dt_b_c_rms` false;
  no vocab_size); `A_log` is stored as `ssm_a` = −exp(A_log) [d_inner, d_state], the depthwise
  convolution [d_inner, 1, d_conv] squeezed to `ssm_conv1d.weight` [d_inner, d_conv] and kept F32
  like every SSM_CONV1D; `ssm_a` and `ssm_d` have no `.weight` suffix; output.weight is omitted when
  it equals token_embd. transformers' loader reads it back (`MambaTensorProcessor`: log(−A)).
- Mamba-2 (`Mamba2Model`): its own keys (Mamba's, with time_step_rank = d_inner / head_dim, the
  head count, and `ssm.group_count`; no `ssm.dt_b_c_rms`); `dt_bias` renamed `dt_proj.bias`
  (`ssm_dt.bias`), A stored as −exp(A_log) and D, both reshaped to [H, 1], the gated norm's scales to
  [n_groups, d_inner / n_groups], the convolution squeezed; a tied checkpoint has no output.weight.
  transformers' GGUF loader reads no mamba2.
- Falcon-H1 (`conversion/falcon_h1.py` FalconH1Model over Mamba2Model): Mamba-2's tensors with d_inner =
  mamba_d_ssm, attention unpermuted (rope type NEOX), the pre-MLP norm written as `blk.N.ffn_norm` with
  no `.weight` (gguf's FFN_PRE_NORM maps the whole name); every µP multiplier folded into the weight it
  follows (`ArchSpec.scaled`: ssm_in row by row with ssm_multipliers) and none written as metadata;
  Mamba-2's stand-in context_length, feed_forward_length and head_count overwritten with the real
  ones, plus head_count_kv, key_length = value_length = head_dim, vocab_size and rope.freq_base.
  transformers' GGUF loader reads no falcon-h1.
- Qwen3-Next (`conversion/qwen.py` Qwen3NextModel over Qwen2MoeModel): the expert keys, the DeltaNet
  sizes under `ssm.*`, `full_attention_interval` and `rope.dimension_count` = int(head_dim ·
  partial_rotary_factor); `in_proj_qkvz`, per key head rows q, k, v, z, written as `attn_qkv` (the q
  rows of every key head, then k, then v) and `attn_gate` (z); `in_proj_ba` as `ssm_ba`, unchanged;
  A = −exp(A_log), the convolution squeezed, `dt_bias` as `ssm_dt.bias`; every `*norm.weight` + 1 except
  `linear_attn.norm.weight` (transformers applies that one as w, the others as 1 + w). transformers'
  GGUF loader reads no qwen3next.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the hub, even by accident

import gguf  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers.pytorch_utils import Conv1D  # noqa: E402

from .archs import ARCHS, FILE_TYPES, QT, VT, ArchSpec, head_dim  # noqa: E402, F401 - ArchSpec: the oracle's API
from .vocab import bpe_vocab_kv, spm_vocab_kv, wpm_vocab_kv  # noqa: E402


def tiny_model(arch: str, seed: int = 0, **overrides: Any) -> tuple[torch.nn.Module, Any]:
    """A float32 `transformers` causal LM of `arch` with random weights, in eval mode.

    >>> model, config = tiny_model("llama", tie_word_embeddings=True, rope_theta=5e5)
    >>> model.model.embed_tokens.weight.shape, config.num_key_value_heads
    (torch.Size([128, 64]), 2)
    """
    spec = ARCHS[arch]
    kwargs = {**spec.defaults, **overrides}
    if spec.vocab == "bpe":  # bos = eos = the one special token, which the vocabulary puts last
        kwargs.setdefault("bos_token_id", kwargs["vocab_size"] - 1)
        kwargs.setdefault("eos_token_id", kwargs["vocab_size"] - 1)
    config = spec.config_cls(**kwargs)
    auto = transformers.AutoModel if spec.encoder else transformers.AutoModelForCausalLM
    model = auto.from_config(
        config,
        dtype=torch.float32,
        attn_implementation="eager",  # the naive reference
    )
    _randomise(model, seed, spec.norm_shift, dict(spec.init_std), spec.unshifted)
    return model.eval(), config


_HEAD_NORMS = (".q_norm.weight", ".k_norm.weight")  # 2-D in Cohere: one row of scales per head


def _randomise(
    model: torch.nn.Module,
    seed: int,
    norm_shift: float = 0.0,
    init_std: dict[str, float] | None = None,
    unshifted: tuple[str, ...] = (),
) -> None:
    """Redraw every parameter so that no weight keeps its default (ones, zeros, tiny normals).

    As the model applies them: embeddings ~ N(0, 0.5²) (logits of a few units; Gemma multiplies
    its embeddings by √d_e, so its table is drawn √d_e times smaller), norm weights ~ 1 + N(0, 0.1²)
    (Cohere's per-head q/k norms [H, d_h] too; Gemma applies 1 + w: w ~ N(0, 0.1²), except the norms
    `unshifted` ends, which the model applies as w); other matrices
    and biases ~ N(0, 0.1²), or N(0, σ²) where `init_std` has σ for the end of the parameter's name.
    Tied tensors are drawn once.
    """
    init_std = init_std or {}
    gen = torch.Generator().manual_seed(seed)
    embeddings = {  # table → the factor the model multiplies looked-up rows by (Gemma: √d_e)
        id(m.weight): float(getattr(m, "scalar_embed_scale", 1.0))
        for m in model.modules()
        if isinstance(m, torch.nn.Embedding)
    }
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied parameters are listed once
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if id(p) in embeddings:
                p.copy_(0.5 / embeddings[id(p)] * noise)
            elif name.endswith("weight") and (p.ndim == 1 or name.endswith(_HEAD_NORMS)):
                shift = 0.0 if name.endswith(unshifted or ("\0",)) else norm_shift
                p.copy_(1.0 - shift + 0.1 * noise)
            else:
                std = next((v for end, v in init_std.items() if name.endswith(end)), 0.1)
                p.copy_(std * noise)
        for name, b in model.named_buffers():  # a buffer the file holds: DeepSeek V3's selection bias
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=gen, dtype=torch.float32))


# ---------------------------------------------------------------------------------------------
# tensors: names, layouts, types


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's Q/K row permutation: per head, halves `[x… | y…]` → interleaved `x0 y0 x1 y1 …`.

    >>> permute_qk(np.arange(8), n_head=2).tolist()  # two heads of d_h = 4
    [0, 2, 1, 3, 4, 6, 5, 7]
    """
    d_h = w.shape[0] // n_head
    return w.reshape(n_head, 2, d_h // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of `permute_qk` (what transformers applies when it reads a llama GGUF).

    >>> unpermute_qk(permute_qk(np.arange(8), 2), 2).tolist()
    [0, 1, 2, 3, 4, 5, 6, 7]
    """
    d_h = w.shape[0] // n_head
    return w.reshape(n_head, d_h // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@dataclass(frozen=True)
class _Tensor:
    hf_name: str  # the parameter in `model.state_dict()`
    name: str  # the GGUF tensor name
    transpose: bool  # GPT-2 Conv1D
    qk_heads: int | None  # heads to permute over (llama Q: H, K: H_kv), else None
    shift: float = 0.0  # the converter's norm offset (Gemma: + 1), else 0
    part: tuple[int, int] | None = None  # rows [a, b) (of each expert): gate_up_proj's gate, up; else all
    stack: tuple[str, ...] = ()  # parameters stacked as rows, in order (StableLM's per-head norms), else none
    convert: str = ""  # a key of _CONVERSIONS: the converter stores another form of the parameter
    # (n_head, a, b, swap): rows [a, b) of each head's block (DeepSeek's kv_b_proj → attn_k_b, attn_v_b),
    # stacked [n_head, b − a, n_in], each head's block transposed when swap; else None
    per_head: tuple[int, int, int, bool] | None = None
    shape: tuple[int, ...] | None = None  # the converter's reshape (ArchSpec.reshaped), else none
    scale: tuple[Any, ...] = ()  # the converter's factors (ArchSpec.scaled): numbers, or one per row
    # the checkpoint keeps [E, n_in, n_out] (Llama4TextExperts): its last two axes swapped first
    swap: bool = False
    # the GGUF tensor as a NumPy view of the parameter (strided columns, swapped axes: gpt-oss's experts),
    # through which quantized_copy writes back; else None
    view: Callable[[np.ndarray], np.ndarray] | None = None
    rows: tuple[int, ...] | None = None  # the rows it takes, in order (ArchSpec.gathered), else all


# What a converter stores in place of a checkpoint's parameter, by GGUF name without "blk.N.":
# (to the stored form, back to the checkpoint's). Mamba (MambaModel.modify_tensors): A = −exp(A_log),
# and the depthwise convolution's [d_inner, 1, d_conv] squeezed to [d_inner, d_conv].
_CONVERSIONS: dict[str, tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]] = {
    # torch's exp, as the converter computes it (NumPy's differs from it in the last bit)
    "ssm_a": (lambda w: -torch.exp(torch.as_tensor(w)).numpy(), lambda a: np.log(-a)),
    "ssm_conv1d.weight": (lambda w: w[:, 0, :], lambda w: w[:, None, :]),
    "shortconv.conv.weight": (lambda w: w[:, 0, :], lambda w: w[:, None, :]),  # LFM2Model: squeeze(1)
}


def _tensor_plan(model: torch.nn.Module, config: Any, arch: str, permute: bool = True) -> list[_Tensor]:
    """Which HF parameter becomes which GGUF tensor, and how its layout changes.

    `permute=False` skips llama's Q/K permutation: the classic conversion bug, for negative tests.
    """
    spec = ARCHS[arch]
    name_map = gguf.get_tensor_name_map(spec.gguf_arch, config.num_hidden_layers)
    conv1d = {f"{m}.weight" for m, mod in model.named_modules() if isinstance(mod, Conv1D)}
    heads = {
        "attn_q": getattr(config, "num_attention_heads", None),  # Mamba has none
        "attn_k": getattr(config, "num_key_value_heads", None),
    }
    plan = []
    reshaped = spec.reshaped(config) if spec.reshaped else {}
    scaled = spec.scaled(config) if spec.scaled else {}
    gathered = spec.gathered(config) if spec.gathered else {}
    state = model.state_dict()
    for hf_name in state:
        if hf_name == "lm_head.weight" and config.tie_word_embeddings:
            continue  # a tied checkpoint has no lm_head, so llama.cpp writes no output.weight
        if hf_name.startswith(spec.dropped or ("\0",)):
            continue  # BertModel.filter_tensors: "we are only using BERT for embeddings"
        if spec.weight_kv and hf_name.endswith(spec.weight_kv[0]):
            continue  # written as metadata (ApertusModel: the xIELU numbers)
        experts = (
            _interleaved_experts(hf_name)
            if spec.interleaved_experts
            else _expert_tensors(hf_name, state[hf_name].shape, spec.experts_in_out)
        )
        if experts is not None:
            plan.extend(experts)
            continue
        if hf_name.endswith("self_attn.kv_b_proj.weight"):
            plan.extend(_mla_kv_b(hf_name, config))
            continue
        gather = next((g for end, g in gathered.items() if hf_name.endswith(end)), None)
        if gather is not None:  # rows of one parameter into several tensors (Qwen3-Next's in_proj_qkvz)
            blk = "blk." + hf_name.split(".")[2] + "."
            plan.extend(_Tensor(hf_name, blk + leaf, False, None, rows=rows) for leaf, rows in gather)
            continue
        head = _PER_HEAD.fullmatch(hf_name)
        if head is not None:  # one stacked tensor, written where head 0's norm comes
            if head.group(2) == "0":
                plan.append(_stacked_heads(head.group(1), state, name_map))
            continue
        split = _SPLIT_ON_LOAD.fullmatch(hf_name)
        if split is not None:  # one fused tensor, rows q; k; v, written where q comes
            if split.group(2) == "q":
                plan.append(_fused_qkv(split.group(1), name_map))
            continue
        name = name_map.get_name(_checkpoint_name(hf_name), try_suffixes=(".weight", ".bias"))
        if name is None:
            raise ValueError(f"no GGUF name for {arch} parameter {hf_name!r}")
        leaf = name.split(".")[-2]  # blk.0.attn_q.weight → attn_q
        qk = heads.get(leaf) if spec.permute_qk and permute else None
        shifted = hf_name.endswith("norm.weight") and not hf_name.endswith(spec.unshifted or ("\0",))
        shift = spec.norm_shift if shifted else 0.0
        convert = name.split(".", 2)[-1] if name.startswith("blk.") else name
        convert = convert if convert in _CONVERSIONS else ""
        leaf_name = name.split(".", 2)[-1] if name.startswith("blk.") else name
        shape, scale = reshaped.get(leaf_name), scaled.get(leaf_name, ())
        plan.append(
            _Tensor(hf_name, name, hf_name in conv1d, qk, shift, convert=convert, shape=shape, scale=scale)
        )
    if getattr(config, "num_local_experts", None) == 0:  # GraniteMoeModel.modify_tensors: with no experts,
        plan = [replace(t, name=t.name.replace("_shexp.", ".")) for t in plan]  # shared_mlp is the MLP
    return plan


_PER_HEAD = re.compile(r"(model\.layers\.\d+\.self_attn\.[qk]_layernorm)\.norms\.(\d+)\.weight")


def _stacked_heads(module: str, state: dict, name_map: Any) -> _Tensor:
    """StableLMModel._stack_qk_norm: transformers keeps one LayerNorm per head
    (`self_attn.q_layernorm.norms.{h}.weight`, d_h each); the converter stacks them in head order into
    `self_attn.q_layernorm.weight` [n_head, d_h], which gguf's map names `attn_q_norm`.

    >>> import collections
    >>> state = collections.OrderedDict((f"model.layers.1.self_attn.k_layernorm.norms.{h}.weight", None) for h in (1, 0))
    >>> t = _stacked_heads("model.layers.1.self_attn.k_layernorm", state, gguf.get_tensor_name_map(gguf.MODEL_ARCH.STABLELM, 2))
    >>> t.name, t.stack
    ('blk.1.attn_k_norm.weight', ('model.layers.1.self_attn.k_layernorm.norms.0.weight', 'model.layers.1.self_attn.k_layernorm.norms.1.weight'))
    """
    heads = sorted(
        (int(m.group(2)), n)
        for n in state
        if (m := _PER_HEAD.fullmatch(n)) is not None and m.group(1) == module
    )
    name = name_map.get_name(f"{module}.weight", try_suffixes=(".weight",))
    if name is None:
        raise ValueError(f"no GGUF name for the stacked {module!r}")
    return _Tensor(heads[0][1], name, False, None, stack=tuple(n for _, n in heads))


# Parameters transformers 5 splits on load (conversion_mapping.py's Chunk(dim=0)): NomicBert's
# `encoder.layers.{i}.attn.Wqkv` [3·d_e, d_e] into `layers.{i}.self_attn.q_proj`, `k_proj`, `v_proj`.
_SPLIT_ON_LOAD = re.compile(r"(layers\.\d+\.)self_attn\.([qkv])_proj\.weight")


def _fused_qkv(layer: str, name_map: Any) -> _Tensor:
    """The checkpoint's fused Wqkv of a NomicBert layer (`layer` = "layers.{i}."), which the converter
    writes as `attn_qkv`: the q, k and v parameters stacked as rows, in that order.

    >>> t = _fused_qkv("layers.1.", gguf.get_tensor_name_map(gguf.MODEL_ARCH.NOMIC_BERT, 2))
    >>> t.name, t.stack[2]
    ('blk.1.attn_qkv.weight', 'layers.1.self_attn.v_proj.weight')
    """
    name = name_map.get_name(f"encoder.{layer}attn.Wqkv.weight", try_suffixes=(".weight",))
    if name is None:
        raise ValueError(f"no GGUF name for the fused q/k/v of {layer!r}")
    parts = tuple(f"{layer}self_attn.{p}_proj.weight" for p in "qkv")
    return _Tensor(parts[0], name, False, None, stack=parts)


_EXPERTS = re.compile(
    r"model\.layers\.(\d+)\.(?:mlp|block_sparse_moe|feed_forward)\.experts\.(gate_up_proj|down_proj)"
)  # feed_forward: Jamba


# NomicBert's leaves (transformers' name → the checkpoint's, under encoder.layers.{i}.)
_NOMIC_BERT_LEAVES = {
    "self_attn.o_proj": "attn.out_proj", "post_attention_layernorm": "norm1", "post_mlp_layernorm": "norm2",
    "mlp.up_proj": "mlp.fc11", "mlp.gate_proj": "mlp.fc12", "mlp.down_proj": "mlp.fc2",
}  # fmt: skip
# Parameters transformers 5 renames on load (conversion_mapping.py), back to the checkpoint's name that
# the converter and gguf's name map read: GraniteMoE's `block_sparse_moe.router.layer` (its experts'
# input_linear and output_linear are the 3-D experts above).
_RENAMED_ON_LOAD = (
    (re.compile(r"(\.block_sparse_moe\.router)(\.weight)$"), r"\1.layer\2"),
    (re.compile(r"\.mlp\.gate\.moe_statics\."), ".mlp.moe_statics."),  # ERNIE 4.5 MoE's selection bias
    (re.compile(r"\.e_score_correction_bias$"), ".e_score_correction.bias"),  # DeepSeek V3's router bias
    # NemotronH's checkpoint keeps backbone.layers.{i}.mixer.*, which transformers 5 loads as model.layers
    (re.compile(r"^model\.layers\.(\d+)\.mixer\."), r"backbone.layers.\1.mixer."),
    # NomicBert (its model's tree starts at `layers.`): the checkpoint's encoder.layers.{i}.attn.out_proj,
    # norm1, norm2 and mlp.fc11 (up), fc12 (gate), fc2 (down)
    (
        re.compile(r"^layers\.(\d+)\.(" + "|".join(map(re.escape, _NOMIC_BERT_LEAVES)) + r")\."),
        lambda m: f"encoder.layers.{m[1]}.{_NOMIC_BERT_LEAVES[m[2]]}.",
    ),
)
# Parameters the converter renames before gguf's map reads them (Mamba2Model.filter_tensors: dt_bias,
# under Mamba-2's `mixer`, granitehybrid's `mamba` and Qwen3-Next's `linear_attn`).
_RENAMED_BY_CONVERTER = (
    (re.compile(r"\.(mixer|mamba|linear_attn)\.dt_bias$"), r".\1.dt_proj.bias"),
    (re.compile(r"\.self_attn\.sinks$"), ".self_attn.sinks.weight"),  # GptOssModel.filter_tensors
)


def _checkpoint_name(hf_name: str) -> str:
    """The checkpoint's name of a transformers parameter, as the converter hands it to gguf's map.

    >>> _checkpoint_name("model.layers.3.block_sparse_moe.router.weight")
    'model.layers.3.block_sparse_moe.router.layer.weight'
    """
    for pattern, checkpoint in _RENAMED_ON_LOAD + _RENAMED_BY_CONVERTER:
        hf_name = pattern.sub(checkpoint, hf_name)
    return hf_name


def _expert_tensors(hf_name: str, shape: tuple[int, ...], in_out: bool = False) -> list[_Tensor] | None:
    """transformers 5 keeps a layer's experts as 3-D tensors, gate and up fused:
    `experts.gate_up_proj` [E, 2·d_ff, d_e] (rows: gate; up) and `experts.down_proj` [E, d_e, d_ff];
    Llama 4 (`in_out`) keeps their transposes, [E, d_e, 2·d_ff] and [E, d_ff, d_e], which
    Llama4Model.modify_tensors swaps back before it splits gate and up.
    llama.cpp's converter writes them as `ffn_gate_exps`, `ffn_up_exps` [E, d_ff, d_e] and
    `ffn_down_exps` [E, d_e, d_ff] (NumPy order). GraniteMoeShared's shared expert fuses its gate and
    up the same way in one Linear, `shared_mlp.input_linear` [2·d_s, d_e], which GraniteMoeModel
    splits into `ffn_gate_shexp` and `ffn_up_shexp`. None for any other parameter.

    >>> [(t.name, t.part) for t in _expert_tensors("model.layers.1.mlp.experts.gate_up_proj", (8, 64, 32))]
    [('blk.1.ffn_gate_exps.weight', (0, 32)), ('blk.1.ffn_up_exps.weight', (32, 64))]
    >>> [t.name for t in _expert_tensors("model.layers.0.shared_mlp.input_linear.weight", (128, 64))]
    ['blk.0.ffn_gate_shexp.weight', 'blk.0.ffn_up_shexp.weight']
    """
    shared = _SHARED_GATE_UP.fullmatch(hf_name)
    if shared is not None:
        return _gate_up(hf_name, f"blk.{shared.group(1)}.", "shexp", shape[0] // 2)
    m = _EXPERTS.fullmatch(hf_name)
    if m is None:
        return None
    blk = f"blk.{m.group(1)}."
    if m.group(2) == "down_proj":
        return [_Tensor(hf_name, blk + "ffn_down_exps.weight", False, None, swap=in_out)]
    if in_out:
        return [replace(t, swap=True) for t in _gate_up(hf_name, blk, "exps", shape[2] // 2)]
    return _gate_up(hf_name, blk, "exps", shape[1] // 2)


_SHARED_GATE_UP = re.compile(r"model\.layers\.(\d+)\.shared_mlp\.input_linear\.weight")


_OAI_EXPERTS = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)(_bias)?")


def _interleaved_experts(hf_name: str) -> list[_Tensor] | None:
    """GptOssModel.modify_tensors: transformers keeps gpt-oss's experts as `gate_up_proj` [E, d_e, 2·d_x]
    whose last axis alternates gate, up (`gate_up_proj_bias` [E, 2·d_x] likewise) and `down_proj`
    [E, d_x, d_e]; the converter writes `ffn_gate_exps`, `ffn_up_exps` [E, d_x, d_e] (the even and the odd
    columns, transposed), `ffn_down_exps` [E, d_e, d_x] and the biases `ffn_{gate,up,down}_exps.bias`.
    None for any other parameter.

    >>> gate_up = _interleaved_experts("model.layers.1.mlp.experts.gate_up_proj")
    >>> [(t.name, t.view(np.zeros((4, 64, 64))).shape) for t in gate_up]  # [E, d_e, 2·d_x]
    [('blk.1.ffn_gate_exps.weight', (4, 32, 64)), ('blk.1.ffn_up_exps.weight', (4, 32, 64))]
    """
    m = _OAI_EXPERTS.fullmatch(hf_name)
    if m is None:
        return None
    blk, bias = f"blk.{m.group(1)}.", m.group(3) is not None
    leaf = "bias" if bias else "weight"
    if m.group(2) == "down_proj":
        view = None if bias else (lambda w: w.swapaxes(-1, -2))
        return [_Tensor(hf_name, f"{blk}ffn_down_exps.{leaf}", False, None, view=view)]
    out = []
    for kind, first in (("gate", 0), ("up", 1)):
        if bias:
            view = lambda w, a=first: w[..., a::2]  # noqa: E731
        else:
            view = lambda w, a=first: w.swapaxes(-1, -2)[..., a::2, :]  # noqa: E731
        out.append(_Tensor(hf_name, f"{blk}ffn_{kind}_exps.{leaf}", False, None, view=view))
    return out


def _gate_up(hf_name: str, blk: str, kind: str, d: int) -> list[_Tensor]:
    """A fused gate; up weight (its rows before the last axis) as ffn_gate_{kind} and ffn_up_{kind}."""
    return [
        _Tensor(hf_name, f"{blk}ffn_gate_{kind}.weight", False, None, part=(0, d)),
        _Tensor(hf_name, f"{blk}ffn_up_{kind}.weight", False, None, part=(d, 2 * d)),
    ]


def _mla_kv_b(hf_name: str, config: Any) -> list[_Tensor]:
    """DeepseekV2Model.modify_tensors: `kv_b_proj` [H·(d_n + d_v), d_c], head by head k rows then v
    rows, becomes `attn_k_b` [H, d_c, d_n] (each head's k rows transposed) and `attn_v_b` [H, d_v, d_c].

    >>> [(t.name, t.per_head) for t in _mla_kv_b("model.layers.0.self_attn.kv_b_proj.weight",
    ...     transformers.DeepseekV2Config(num_attention_heads=2, qk_nope_head_dim=4, v_head_dim=3))]
    [('blk.0.attn_k_b.weight', (2, 0, 4, True)), ('blk.0.attn_v_b.weight', (2, 4, 7, False))]
    """
    blk = "blk." + hf_name.split(".")[2] + "."
    h, d_n, d_v = config.num_attention_heads, config.qk_nope_head_dim, config.v_head_dim
    return [
        _Tensor(hf_name, blk + "attn_k_b.weight", False, None, per_head=(h, 0, d_n, True)),
        _Tensor(hf_name, blk + "attn_v_b.weight", False, None, per_head=(h, d_n, d_n + d_v, False)),
    ]


def _factor(f: Any, w: np.ndarray) -> np.ndarray:
    """A factor of `_Tensor.scale` as float32, shaped to multiply `w`: a number, or one per row."""
    f = np.asarray(f, dtype=np.float32)
    return f.reshape(-1, *[1] * (w.ndim - 1)) if f.ndim else f


def _to_gguf(t: _Tensor, w: np.ndarray) -> np.ndarray:
    w = np.swapaxes(w, -1, -2) if t.swap else w
    if t.view:
        return t.view(w)
    w = _CONVERSIONS[t.convert][0](w) if t.convert else w
    for f in t.scale:  # in float32, one factor after another, as the converter multiplies torch tensors
        w = w * _factor(f, w)
    w = w[list(t.rows)] if t.rows else w
    if t.per_head:
        h, a, b, swap = t.per_head
        w = w.reshape(h, -1, w.shape[-1])[:, a:b, :]
        w = w.swapaxes(1, 2) if swap else w
    w = w.reshape(t.shape) if t.shape else w
    w = w[..., t.part[0] : t.part[1], :] if t.part else w
    w = w.T if t.transpose else w
    w = w + np.float32(t.shift) if t.shift else w
    return permute_qk(w, t.qk_heads) if t.qk_heads else w


def _from_gguf(t: _Tensor, w: np.ndarray) -> np.ndarray:
    if t.per_head:  # [H, b − a, n_in]: each head's rows, for quantized_copy to put back
        return w.swapaxes(1, 2) if t.per_head[3] else w
    w = unpermute_qk(w, t.qk_heads) if t.qk_heads else w
    w = w - np.float32(t.shift) if t.shift else w  # exact for stored values in [0.5, 2] (Sterbenz)
    w = w.T if t.transpose else w
    for f in reversed(t.scale):
        w = w / _factor(f, w)
    w = _CONVERSIONS[t.convert][1](w) if t.convert else w  # log(−A): A_log to float rounding
    return np.swapaxes(w, -1, -2) if t.swap else w


def gguf_tensors(
    model: torch.nn.Module, config: Any, arch: str, permute: bool = True
) -> dict[str, np.ndarray]:
    """The float32 tensors llama.cpp would write for `model`, by GGUF name, in GGUF NumPy layout.

    >>> model, config = tiny_model("gpt2")
    >>> gguf_tensors(model, config, "gpt2")["blk.0.attn_qkv.weight"].shape  # (3·d_e, d_e)
    (192, 64)
    """
    state = model.state_dict()
    extra = ARCHS[arch].extra_tensors
    return {
        t.name: np.ascontiguousarray(_to_gguf(t, _hf_value(t, state)))
        for t in _tensor_plan(model, config, arch, permute)
    } | (extra(config) if extra else {})


def _hf_value(t: _Tensor, params: dict) -> np.ndarray:
    """The HF parameter(s) behind `t` as one float32 array (a stack: its parameters as rows)."""
    names = t.stack or (t.hf_name,)
    values = [params[n].detach().float().numpy() for n in names]
    return np.concatenate([np.atleast_2d(v) for v in values]) if t.stack else values[0]


def tensor_type(name: str, shape: tuple[int, ...], ftype: str) -> QT:
    """The GGML type llama.cpp's converter gives tensor `name` in a file of type `ftype`.

    >>> tensor_type("blk.0.attn_norm.weight", (64,), "Q8_0").name, tensor_type("token_embd.weight", (128, 64), "Q8_0").name
    ('F32', 'Q8_0')
    """
    qtype = FILE_TYPES[ftype][1]
    kept = (gguf.MODEL_TENSOR.POS_EMBD, gguf.MODEL_TENSOR.TOKEN_TYPES)  # the converter's "always in float32"
    always_f32 = {gguf.TENSOR_NAMES[t] + ".weight" for t in kept}
    if len(shape) <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight") or name in always_f32:
        return QT.F32
    if name.endswith(".ssm_conv1d.weight"):  # the converter keeps every SSM_CONV1D in F32
        return QT.F32
    if ftype == "MXFP4_MOE" and name.endswith("_exps.weight"):
        return QT.MXFP4
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    return qtype if shape[-1] % block == 0 else QT.F16  # llama.cpp's QuantError fallback


def _quantize(name: str, w: np.ndarray, ftype: str) -> tuple[np.ndarray, QT]:
    qtype = tensor_type(name, w.shape, ftype)
    return gguf.quants.quantize(w.astype(np.float32), qtype), qtype


def quantized_copy(model: torch.nn.Module, config: Any, arch: str, ftype: str) -> torch.nn.Module:
    """A copy of `model` whose weights are exactly what a file of type `ftype` stores, dequantized.

    Quantization blocks run along GGUF rows, so each tensor is taken to GGUF layout, quantized,
    dequantized with `gguf.quants.dequantize`, and taken back.
    """
    twin = copy.deepcopy(model)
    params = dict(twin.named_parameters(remove_duplicate=False))
    with torch.no_grad():
        for t in _tensor_plan(model, config, arch):
            if t.hf_name not in params:  # a buffer (e_score_correction_bias): 1-D, F32, stored exactly
                continue
            w = _to_gguf(t, _hf_value(t, params))
            data, qtype = _quantize(t.name, w, ftype)
            if t.view:  # written back through the view
                stored = gguf.quants.dequantize(data, qtype).reshape(w.shape)
                t.view(params[t.hf_name].detach().numpy())[...] = stored
                continue
            restored = torch.from_numpy(
                np.ascontiguousarray(_from_gguf(t, gguf.quants.dequantize(data, qtype).reshape(w.shape)))
            )
            if t.per_head:  # each head's block of rows
                param = params[t.hf_name]
                param.view(t.per_head[0], -1, param.shape[-1])[:, t.per_head[1] : t.per_head[2], :].copy_(restored)
            elif t.part and t.swap:  # one block of columns (of each expert): Llama 4's gate_up_proj
                params[t.hf_name][..., t.part[0] : t.part[1]].copy_(restored)
            elif t.rows:  # rows gathered from the parameter, back to where they came from
                params[t.hf_name][list(t.rows)] = restored
            elif t.part:  # one block of rows (of each expert)
                params[t.hf_name][..., t.part[0] : t.part[1], :].copy_(restored)
            elif t.stack:  # each parameter's rows back to it (a per-head norm: one row)
                for rows, n in zip(restored.chunk(len(t.stack)), t.stack, strict=True):
                    params[n].copy_(rows.reshape(params[n].shape))
            else:  # a reshaped tensor (Mamba-2's A, D, norm) back to the checkpoint's shape
                params[t.hf_name].copy_(restored.reshape(params[t.hf_name].shape) if t.shape else restored)
    return twin


# ---------------------------------------------------------------------------------------------
# metadata


def _hparams_kv(config: Any, arch: str, ftype: str) -> dict[str, tuple[Any, VT]]:
    """The model keys llama.cpp's converter writes for `arch`, as (value, GGUF type)."""
    spec = ARCHS[arch]
    a = gguf.MODEL_ARCH_NAMES[spec.gguf_arch]
    K, Att, Rope, Gen = gguf.Keys.LLM, gguf.Keys.Attention, gguf.Keys.Rope, gguf.Keys.General
    general: dict[str, tuple[Any, VT]] = {
        Gen.TYPE: ("model", VT.STRING),
        Gen.NAME: (f"toycards oracle {arch}", VT.STRING),  # never "mistral": transformers renames those
        Gen.FILE_TYPE: (int(FILE_TYPES[ftype][0]), VT.UINT32),
        Gen.QUANTIZATION_VERSION: (gguf.GGML_QUANT_VERSION, VT.UINT32),
    }
    if spec.model_kv is not None:  # a converter with its own set_gguf_parameters (Mamba)
        return {k.format(arch=a): v for k, v in (general | spec.model_kv(config)).items()}
    d_mlp = getattr(config, "intermediate_size", None) or 4 * config.hidden_size  # GPT-2: n_inner or 4·d_e
    kv = general | {
        K.BLOCK_COUNT: (config.num_hidden_layers, VT.UINT32),
        K.CONTEXT_LENGTH: (config.max_position_embeddings, VT.UINT32),
        K.EMBEDDING_LENGTH: (config.hidden_size, VT.UINT32),
        K.FEED_FORWARD_LENGTH: (d_mlp, VT.UINT32),
        Att.HEAD_COUNT: (config.num_attention_heads, VT.UINT32),
    }
    if spec.rms_norm:
        kv[Att.LAYERNORM_RMS_EPS] = (config.rms_norm_eps, VT.FLOAT32)
    else:  # GPT-2's layer_norm_epsilon, StarCoder2's norm_epsilon
        eps = getattr(config, "layer_norm_epsilon", None) or getattr(config, "layer_norm_eps", None)
        eps = eps or config.norm_epsilon  # Phi's layer_norm_eps
        kv[Att.LAYERNORM_EPS] = (eps, VT.FLOAT32)
    if spec.rope:
        d_h = head_dim(config)
        kv |= {
            K.VOCAB_SIZE: (config.vocab_size, VT.UINT32),
            Att.HEAD_COUNT_KV: (config.num_key_value_heads, VT.UINT32),
            Att.KEY_LENGTH: (d_h, VT.UINT32),
            Att.VALUE_LENGTH: (d_h, VT.UINT32),
            Rope.DIMENSION_COUNT: (d_h, VT.UINT32),
            Rope.FREQ_BASE: (rope_theta(config), VT.FLOAT32),
        }
    for key in spec.absent_keys:
        kv.pop(key, None)
    if spec.arch_kv is not None:
        kv |= spec.arch_kv(config)
    return {k.format(arch=a): v for k, v in kv.items()}


def rope_theta(config: Any) -> float:
    """RoPE base θ, from `rope_parameters` (transformers 5) or a plain `rope_theta`."""
    params = getattr(config, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


_PY_TO_VT = ((bool, VT.BOOL), (int, VT.UINT32), (float, VT.FLOAT32), (str, VT.STRING))


def _typed(value: Any) -> tuple[Any, VT] | None:
    """`extra_kv` values: `(value, GGUFValueType)` as given, else typed from the Python value.

    >>> _typed(True), _typed(3), _typed(-1), _typed(0.5)[1].name, _typed(["a"])[1].name
    ((True, <GGUFValueType.BOOL: 7>), (3, <GGUFValueType.UINT32: 4>), (-1, <GGUFValueType.INT32: 5>), 'FLOAT32', 'ARRAY')
    """
    if value is None or (isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], VT)):
        return value
    if isinstance(value, (list, tuple)):
        return (list(value), VT.ARRAY)
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        return (value, VT.INT32)
    for py, vt in _PY_TO_VT:
        if isinstance(value, py):
            return (value, vt)
    raise TypeError(f"cannot write {value!r} ({type(value).__name__}) as GGUF metadata")


# ---------------------------------------------------------------------------------------------
# writing and reading back


def _qkv_layout(tensors: dict[str, np.ndarray], mode: str, config: Any) -> dict[str, np.ndarray]:
    """Each block's q/k/v tensors fused into attn_qkv (rows q; k; v) or split out of it, in place
    of the first of them; `mode` "" leaves them as they are."""
    if not mode:
        return tensors
    d_h = config.hidden_size // config.num_attention_heads
    sizes = [config.num_attention_heads * d_h, *[config.num_key_value_heads * d_h] * 2]
    out: dict[str, np.ndarray] = {}
    for name, w in tensors.items():
        block, _, leaf = name.partition(".attn_")
        part, _, kind = leaf.partition(".")
        if mode == "fused" and part in ("q", "k", "v"):
            if part == "q":
                rows = [tensors[f"{block}.attn_{p}.{kind}"] for p in ("q", "k", "v")]
                out[f"{block}.attn_qkv.{kind}"] = np.concatenate(rows, axis=0)
        elif mode == "split" and part == "qkv":
            for p, piece in zip(("q", "k", "v"), np.split(w, np.cumsum(sizes)[:2], axis=0), strict=True):
                out[f"{block}.attn_{p}.{kind}"] = np.ascontiguousarray(piece)
        else:
            out[name] = w
    return out


def write_gguf(
    model: torch.nn.Module,
    config: Any,
    path: str | os.PathLike,
    arch: str,
    ftype: str = "F32",
    extra_kv: dict[str, Any] | None = None,
    permute: bool = True,
) -> Path:
    """Write `model` to `path` as llama.cpp's converter would with `--outtype {ftype}`.

    `extra_kv` adds or replaces metadata (`{"llama.rope.freq_base": 5e5}`, or `(value,
    GGUFValueType)` for an exact type); a value of None removes the key, e.g. to test defaults.
    `permute=False` omits llama's Q/K permutation (a deliberately wrong file). Returns `path`.
    """
    spec = ARCHS[arch]
    path = Path(path)
    writer = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[spec.gguf_arch])
    if spec.vocab == "spm":
        vocab_kv = spm_vocab_kv(config, spec.tokenizer_pre, spec.controls)
    elif spec.vocab == "wpm":
        vocab_kv = wpm_vocab_kv(config, spec.tokenizer_pre)
    else:
        vocab_kv = bpe_vocab_kv(config, spec.tokenizer_pre)
    kv = _hparams_kv(config, arch, ftype) | vocab_kv
    if spec.weight_kv is not None:
        kv |= spec.weight_kv[1](model.state_dict())
    kv |= {k: _typed(v) for k, v in (extra_kv or {}).items()}
    for key, typed in kv.items():
        if typed is None:
            writer.kv_data[0].pop(key, None)  # also removes general.architecture if asked
        else:
            writer.add_key_value(key, *typed)
    for name, w in _qkv_layout(gguf_tensors(model, config, arch, permute), spec.qkv, config).items():
        data, qtype = _quantize(name, w, ftype)
        writer.add_tensor(name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def transformers_reads(arch: str) -> bool:
    """Whether transformers' GGUF loader can rebuild the model of `arch` from a file (gemma: no;
    gemma2 and gemma3 it loads, but without the keys that make them what they are).

    >>> transformers_reads("llama"), transformers_reads("gemma"), transformers_reads("gemma2")
    (True, False, False)
    """
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    spec = ARCHS[arch]
    return spec.hf_reads and gguf.MODEL_ARCH_NAMES[spec.gguf_arch] in GGUF_SUPPORTED_ARCHITECTURES


def hf_logits(model: torch.nn.Module, ids: list[int]) -> np.ndarray:
    """Logits of a causal LM for one sequence: float32 `[len(ids), N_V]`; of an encoder (BERT), each
    token's last hidden state, `[len(ids), d_e]`, what its card returns."""
    with torch.no_grad():
        out = model(torch.tensor([list(ids)], dtype=torch.long), use_cache=False)
    return (out.logits if hasattr(out, "logits") else out.last_hidden_state)[0].float().numpy()


def hf_from_gguf(path: str | os.PathLike) -> torch.nn.Module:
    """The model `transformers` builds from a GGUF file alone (no config.json, no network)."""
    path = Path(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, attn_implementation="eager"
    )
    return model.eval()


def hf_logits_from_gguf(path: str | os.PathLike, ids: list[int]) -> np.ndarray:
    """`hf_logits` of the model `transformers` loads from the GGUF file at `path`."""
    return hf_logits(hf_from_gguf(path), ids)
