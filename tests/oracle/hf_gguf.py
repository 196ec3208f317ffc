"""Oracle: tiny Hugging Face models, written to GGUF the way llama.cpp's converter does.

Owns: building tiny `transformers` causal LMs with every weight randomised (`tiny_model`), turning
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
"""

from __future__ import annotations

import copy
import math
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

from .vocab import bpe_vocab_kv, spm_vocab_kv  # noqa: E402

VT = gguf.GGUFValueType
QT = gguf.GGMLQuantizationType

FILE_TYPES = {  # ftype name → (general.file_type, the type of quantizable 2-D weights)
    "F32": (gguf.LlamaFileType.ALL_F32, QT.F32),
    "F16": (gguf.LlamaFileType.MOSTLY_F16, QT.F16),
    "Q8_0": (gguf.LlamaFileType.MOSTLY_Q8_0, QT.Q8_0),
}


@dataclass(frozen=True)
class ArchSpec:
    """How one architecture is built tiny and written the llama.cpp way."""

    gguf_arch: gguf.MODEL_ARCH
    config_cls: type
    defaults: dict[str, Any]  # tiny config; `tiny_model(**overrides)` replaces entries
    permute_qk: bool  # rope type NORM: llama.cpp interleaves each Q/K head's halves
    rms_norm: bool  # RMSNorm (ε under attention.layer_norm_rms_epsilon) vs LayerNorm
    vocab: str  # "spm" (SentencePiece, tokenizer.ggml.model = llama) or "bpe" (byte-level, gpt2)
    tokenizer_pre: str
    rope: bool = True  # rotary positions and grouped-query heads (everything here but GPT-2)
    arch_kv: Callable[[Any], dict[str, tuple[Any, VT]]] | None = None  # the arch's own keys, from the config
    norm_shift: float = 0.0  # added to every `*norm.weight` by the converter (Gemma: RMSNorm scales by 1 + w)
    absent_keys: tuple[str, ...] = ()  # gguf.Keys templates the converter does not write for this arch
    hf_reads: bool = (
        True  # False: transformers' GGUF loader builds another model from the file, or drops keys it needs
    )
    extra_tensors: Callable[[Any], dict[str, np.ndarray]] | None = None  # tensors made from the config
    controls: tuple[str, ...] = ()  # control tokens at the end of an "spm" vocabulary
    # "": q/k/v as the converter writes them; "fused": one attn_qkv (rows q; k; v) as older
    # converters wrote phi2; "split": attn_q/k/v where the converter writes attn_qkv (llama.cpp
    # reads either for phi2 and phi3: wqkv when present, else wq, wk, wv)
    qkv: str = ""
    # the model keys of a converter with its own set_gguf_parameters (Mamba): none of the common ones
    model_kv: Callable[[Any], dict[str, tuple[Any, VT]]] | None = None
    # parameter name suffix → σ of its N(0, σ²) draw, where _randomise's 0.1 would leave a block too
    # small to move the logits (Mamba: its blocks are products of five projections)
    init_std: tuple[tuple[str, float], ...] = ()


_GQA_SHAPE = dict(
    hidden_size=64,  # d_e
    num_attention_heads=4,  # H
    num_key_value_heads=2,  # H_kv: two query heads share each K/V head
    num_hidden_layers=2,  # L
    intermediate_size=96,  # d_mlp, a multiple of 32 so ffn_down can be Q8_0
    max_position_embeddings=128,  # ℓ_max
    rope_theta=10000.0,
)
_ROPE_GQA = dict(_GQA_SHAPE, rms_norm_eps=1e-5)
# what every Gemma config here shares (SentencePiece ids 0/1/2 = pad/bos/eos, a tied 128-token
# vocabulary), and how Gemma's converter writes every generation: unpermuted Q/K, norms + 1
_GEMMA_SHAPE = dict(rms_norm_eps=1e-6, vocab_size=128, tie_word_embeddings=True)
_GEMMA_TOKENS = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
_GEMMA_FILE = dict(permute_qk=False, rms_norm=True, vocab="spm", tokenizer_pre="default", norm_shift=1.0)
# what the OLMo converters (Olmo2Model, OlmoeModel) leave out: no vocab_size, no rope.dimension_count,
# no key/value_length
_OLMO_ABSENT = (
    gguf.Keys.LLM.VOCAB_SIZE,
    gguf.Keys.Rope.DIMENSION_COUNT,
    gguf.Keys.Attention.KEY_LENGTH,
    gguf.Keys.Attention.VALUE_LENGTH,
)
_NO_HEAD_DIM = (
    gguf.Keys.Attention.KEY_LENGTH,
    gguf.Keys.Attention.VALUE_LENGTH,
)  # no attention.key/value_length


def _granite_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """GraniteModel.set_gguf_parameters: each multiplier under its `_scale` name, only when non-zero.

    >>> sorted(_granite_kv(transformers.GraniteConfig(logits_scaling=0.0)))  # a 0 is not written
    ['{arch}.attention.scale', '{arch}.embedding_scale', '{arch}.residual_scale']
    """
    K, Att = gguf.Keys.LLM, gguf.Keys.Attention
    values = {
        K.EMBEDDING_SCALE: config.embedding_multiplier,
        K.RESIDUAL_SCALE: config.residual_multiplier,
        Att.SCALE: config.attention_multiplier,
        K.LOGIT_SCALE: config.logits_scaling,
    }
    return {key: (float(v), VT.FLOAT32) for key, v in values.items() if v}


def _gemma2_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """Gemma2Model.set_gguf_parameters: both soft-caps and the sliding window, always written.

    >>> sorted(_gemma2_kv(transformers.Gemma2Config(sliding_window=4)).items())[2]
    ('{arch}.final_logit_softcapping', (30.0, <GGUFValueType.FLOAT32: 6>))
    """
    K, Att = gguf.Keys.LLM, gguf.Keys.Attention
    return {
        K.ATTN_LOGIT_SOFTCAPPING: (float(config.attn_logit_softcapping), VT.FLOAT32),
        K.FINAL_LOGIT_SOFTCAPPING: (float(config.final_logit_softcapping), VT.FLOAT32),
        Att.SLIDING_WINDOW: (int(config.sliding_window), VT.UINT32),
    }


def _gemma3_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """Gemma3Model / TextModel.set_gguf_parameters: the global layers' RoPE (base, linear scaling)
    from `rope_parameters["full_attention"]`, the local base as `rope.freq_base_swa`, the window
    (unless every layer is global), the final soft-cap only when the config has one.

    >>> kv = _gemma3_kv(transformers.Gemma3TextConfig(sliding_window=4))
    >>> kv["{arch}.rope.freq_base"][0], kv["{arch}.rope.freq_base_swa"][0], "{arch}.rope.scaling.type" in kv
    (1000000.0, 10000.0, False)
    """
    K, Att, Rope = gguf.Keys.LLM, gguf.Keys.Attention, gguf.Keys.Rope
    full, local = config.rope_parameters["full_attention"], config.rope_parameters["sliding_attention"]
    kv: dict[str, tuple[Any, VT]] = {
        Rope.FREQ_BASE: (float(full["rope_theta"]), VT.FLOAT32),
        Rope.FREQ_BASE_SWA: (float(local["rope_theta"]), VT.FLOAT32),
        Att.SLIDING_WINDOW: (int(config.sliding_window), VT.UINT32),
    }
    if full.get("rope_type") == "linear":
        kv[Rope.SCALING_TYPE] = ("linear", VT.STRING)
        kv[Rope.SCALING_FACTOR] = (float(full["factor"]), VT.FLOAT32)
    if config.final_logit_softcapping:
        kv[K.FINAL_LOGIT_SOFTCAPPING] = (float(config.final_logit_softcapping), VT.FLOAT32)
    return kv


def _moe_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """The expert keys of llama.cpp's converter (TextModel and Qwen2MoeModel.set_gguf_parameters):
    expert_count, expert_used_count, and where the config has them the experts' own width
    (`moe_intermediate_size`) and the shared expert's (`shared_expert_intermediate_size`).

    >>> sorted(_moe_kv(transformers.OlmoeConfig(num_experts=8, num_experts_per_tok=2)).items())[:1]
    [('{arch}.expert_count', (8, <GGUFValueType.UINT32: 4>))]
    """
    K = gguf.Keys.LLM
    experts = getattr(config, "num_experts", None) or config.num_local_experts
    kv = {K.EXPERT_COUNT: (experts, VT.UINT32), K.EXPERT_USED_COUNT: (config.num_experts_per_tok, VT.UINT32)}
    if getattr(config, "moe_intermediate_size", None):
        kv[K.EXPERT_FEED_FORWARD_LENGTH] = (config.moe_intermediate_size, VT.UINT32)
    if getattr(config, "shared_expert_intermediate_size", None):
        kv[K.EXPERT_SHARED_FEED_FORWARD_LENGTH] = (config.shared_expert_intermediate_size, VT.UINT32)
    return kv


_MOE_SHAPE = dict(  # 8 experts, 2 per token, each 32 wide (a multiple of 32: ffn_down_exps can be Q8_0)
    _ROPE_GQA, num_experts_per_tok=2, vocab_size=288, tie_word_embeddings=False
)
# what the two Qwen MoE generations share: their config's ε, base and expert widths; the
# converter's facts (Qwen2MoeModel for both: unpermuted Q/K, byte-level BPE, the expert keys)
_QWEN_MOE_SHAPE = dict(_MOE_SHAPE, rms_norm_eps=1e-6, rope_theta=1e6, num_experts=8, moe_intermediate_size=32)
_QWEN_MOE_FILE = dict(permute_qk=False, rms_norm=True, vocab="bpe", tokenizer_pre="qwen2", arch_kv=_moe_kv)


# Olmo3Config keeps a RoPE dict per layer type, and a lone rope_theta reaches the global layers only
# (the sliding ones take its default 5e5): both given, one base, as OLMo 3's own configs have
_OLMO3_ROPE = {
    t: {"rope_type": "default", "rope_theta": 5e5} for t in ("full_attention", "sliding_attention")
}


def _olmo3_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """Olmo2Model on an OLMo 3 config: the sliding window, and rope.freq_base from the global
    layers' RoPE (the only base the converter writes; llama.cpp's sliding layers take it too).

    >>> sorted(_olmo3_kv(transformers.Olmo3Config(sliding_window=4, rope_parameters=_OLMO3_ROPE)).values())
    [(4, <GGUFValueType.UINT32: 4>), (500000.0, <GGUFValueType.FLOAT32: 6>)]
    """
    return {
        gguf.Keys.Attention.SLIDING_WINDOW: (int(config.sliding_window), VT.UINT32),
        gguf.Keys.Rope.FREQ_BASE: (float(config.rope_parameters["full_attention"]["rope_theta"]), VT.FLOAT32),
    }


def _phi3_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """Phi3MiniModel.set_gguf_parameters: the original context always, the sliding window (0 when
    the config has none), and for LongRoPE the attention factor √(1 + ln(scale) / ln(original)).

    >>> sorted(_phi3_kv(transformers.Phi3Config(sliding_window=None)))  # doctest: +NORMALIZE_WHITESPACE
    ['tokenizer.ggml.padding_token_id', '{arch}.attention.sliding_window', '{arch}.rope.dimension_count',
     '{arch}.rope.scaling.original_context_length']
    """
    Att, Rope = gguf.Keys.Attention, gguf.Keys.Rope
    original = (
        config.rope_parameters.get("original_max_position_embeddings")
        or config.original_max_position_embeddings
    )
    rotary = config.rope_parameters.get("partial_rotary_factor", 1.0)  # Phi-4-mini: 0.75
    kv = {
        Rope.DIMENSION_COUNT: (int(rotary * config.hidden_size) // config.num_attention_heads, VT.UINT32),
        Rope.SCALING_ORIG_CTX_LEN: (int(original), VT.UINT32),
        Att.SLIDING_WINDOW: (int(config.sliding_window or 0), VT.UINT32),
        # the special vocabulary's padding id: Phi-3's <|endoftext|>, last here (ARCHS["phi3"].controls)
        gguf.Keys.Tokenizer.PAD_ID: (config.vocab_size - 1, VT.UINT32),
    }
    if config.rope_parameters.get("long_factor"):
        scale = config.max_position_embeddings / original
        factor = math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1 else 1.0
        kv[Rope.SCALING_ATTN_FACTOR] = (factor, VT.FLOAT32)
    return kv


def _phi3_tensors(config: Any) -> dict[str, np.ndarray]:
    """Phi3MiniModel.generate_extra_tensors: LongRoPE's factors as two global F32 tensors."""
    long, short = (config.rope_parameters.get(k) for k in ("long_factor", "short_factor"))
    if not long:
        return {}
    names = gguf.TENSOR_NAMES
    return {
        names[gguf.MODEL_TENSOR.ROPE_FACTORS_LONG] + ".weight": np.asarray(long, np.float32),
        names[gguf.MODEL_TENSOR.ROPE_FACTORS_SHORT] + ".weight": np.asarray(short, np.float32),
    }


def _phi2_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """Phi2Model.set_gguf_parameters: rope.dimension_count = int(partial_rotary_factor · d_e) // H.

    >>> _phi2_kv(transformers.PhiConfig(hidden_size=64, num_attention_heads=4, partial_rotary_factor=0.5))
    {'{arch}.rope.dimension_count': (8, <GGUFValueType.UINT32: 4>)}
    """
    rotary = config.rope_parameters.get("partial_rotary_factor", 1.0)
    return {
        gguf.Keys.Rope.DIMENSION_COUNT: (
            int(rotary * config.hidden_size) // config.num_attention_heads,
            VT.UINT32,
        )
    }


def _stablelm_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """StableLMModel.set_gguf_parameters: rope.dimension_count = int(partial_rotary_factor · d_h), and
    use_parallel_residual (true when the config does not say), which llama.cpp does not read.

    >>> sorted(_stablelm_kv(transformers.StableLmConfig(hidden_size=64, num_attention_heads=4)).items())
    [('{arch}.rope.dimension_count', (4, <GGUFValueType.UINT32: 4>)), ('{arch}.use_parallel_residual', (False, <GGUFValueType.BOOL: 7>))]
    """
    rotary = config.rope_parameters.get("partial_rotary_factor", 1.0)
    d_h = config.hidden_size // config.num_attention_heads
    return {
        gguf.Keys.Rope.DIMENSION_COUNT: (int(rotary * d_h), VT.UINT32),
        gguf.Keys.LLM.USE_PARALLEL_RESIDUAL: (bool(config.use_parallel_residual), VT.BOOL),
    }


def _mamba_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """MambaModel.set_gguf_parameters: the model keys it writes, and no others.

    >>> kv = _mamba_kv(transformers.MambaConfig(hidden_size=32, state_size=8, time_step_rank="auto"))
    >>> kv["{arch}.ssm.inner_size"][0], kv["{arch}.ssm.time_step_rank"][0], kv["{arch}.attention.head_count"][0]
    (64, 2, 0)
    """
    K, Att, SSM = gguf.Keys.LLM, gguf.Keys.Attention, gguf.Keys.SSM
    return {
        K.CONTEXT_LENGTH: (2**20, VT.UINT32),  # the converter's stand-in: a recurrence has no trained length
        K.EMBEDDING_LENGTH: (config.hidden_size, VT.UINT32),
        K.FEED_FORWARD_LENGTH: (0, VT.UINT32),
        Att.HEAD_COUNT: (0, VT.UINT32),
        K.BLOCK_COUNT: (config.num_hidden_layers, VT.UINT32),
        SSM.CONV_KERNEL: (config.conv_kernel, VT.UINT32),
        SSM.INNER_SIZE: (config.intermediate_size, VT.UINT32),
        SSM.STATE_SIZE: (config.state_size, VT.UINT32),
        SSM.TIME_STEP_RANK: (int(config.time_step_rank), VT.UINT32),
        Att.LAYERNORM_RMS_EPS: (config.layer_norm_epsilon, VT.FLOAT32),
        SSM.DT_B_C_RMS: (False, VT.BOOL),  # Falcon-Mamba's RMS norms of dt, B and C: not in Mamba
    }


ARCHS: dict[str, ArchSpec] = {
    "gpt2": ArchSpec(
        gguf.MODEL_ARCH.GPT2,
        transformers.GPT2Config,
        dict(n_embd=64, n_head=4, n_layer=2, n_positions=1024, vocab_size=288, layer_norm_epsilon=1e-5),
        permute_qk=False,
        rms_norm=False,
        vocab="bpe",
        tokenizer_pre="gpt-2",
        rope=False,
    ),
    "llama": ArchSpec(
        gguf.MODEL_ARCH.LLAMA,
        transformers.LlamaConfig,
        dict(_ROPE_GQA, vocab_size=128, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
        permute_qk=True,
        rms_norm=True,
        vocab="spm",
        tokenizer_pre="default",
    ),
    "qwen2": ArchSpec(
        gguf.MODEL_ARCH.QWEN2,
        transformers.Qwen2Config,
        dict(_ROPE_GQA, vocab_size=288, rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=True),
        permute_qk=False,
        rms_norm=True,
        vocab="bpe",
        tokenizer_pre="qwen2",
    ),
    "qwen3": ArchSpec(
        gguf.MODEL_ARCH.QWEN3,
        transformers.Qwen3Config,
        dict(
            _ROPE_GQA,
            head_dim=128,
            vocab_size=288,
            rms_norm_eps=1e-6,
            rope_theta=1e6,
            tie_word_embeddings=False,
        ),
        permute_qk=False,
        rms_norm=True,
        vocab="bpe",
        tokenizer_pre="qwen2",
    ),
    "starcoder2": ArchSpec(
        gguf.MODEL_ARCH.STARCODER2,
        transformers.Starcoder2Config,
        dict(_GQA_SHAPE, norm_epsilon=1e-5, vocab_size=288, tie_word_embeddings=True),
        permute_qk=False,
        rms_norm=False,
        vocab="bpe",
        tokenizer_pre="starcoder",
    ),
    "granite": ArchSpec(
        gguf.MODEL_ARCH.GRANITE,
        transformers.GraniteConfig,
        dict(
            _ROPE_GQA,
            rms_norm_eps=1e-6,
            vocab_size=288,
            tie_word_embeddings=True,
            embedding_multiplier=12.0,  # Granite 3.x values are 12, 0.22, 1/d_h and 8 or 16
            residual_multiplier=0.22,
            attention_multiplier=0.15,  # ≠ 1/√d_h = 0.25
            logits_scaling=2.5,
        ),
        permute_qk=True,  # GraniteModel is a LlamaModel: Q/K rows permuted, rope type NORM
        rms_norm=True,
        vocab="bpe",
        tokenizer_pre="refact",
        absent_keys=_NO_HEAD_DIM,  # GraniteModel pops head_dim before LlamaModel writes the keys
        arch_kv=_granite_kv,
    ),
    "smollm3": ArchSpec(
        gguf.MODEL_ARCH.SMOLLM3,
        transformers.SmolLM3Config,
        dict(
            _ROPE_GQA,
            num_hidden_layers=4,
            rope_theta=1e5,
            vocab_size=288,
            pad_token_id=None,
            tie_word_embeddings=True,
        ),
        permute_qk=True,  # SmolLM3Model is a LlamaModel: Q/K rows permuted, rope type NORM
        rms_norm=True,
        vocab="bpe",
        tokenizer_pre="llama-bpe",
        absent_keys=_NO_HEAD_DIM,  # SmolLM3's config has no head_dim
    ),
    # conversion/gemma.py GemmaModel: its own set_gguf_parameters (no rope.freq_base, no
    # rope.dimension_count, no vocab_size; key_length = head_dim), `*norm.weight` + 1, lm_head skipped.
    "gemma": ArchSpec(
        gguf.MODEL_ARCH.GEMMA,
        transformers.GemmaConfig,
        dict(
            _ROPE_GQA,
            num_key_value_heads=1,  # multi-query attention, as Gemma 2B
            head_dim=32,  # ≠ d_e/H = 16, as Gemma 7B's 256 ≠ 3072/16
            **_GEMMA_SHAPE,
            hidden_act="gelu_pytorch_tanh",
            **_GEMMA_TOKENS,
        ),
        **_GEMMA_FILE,
        absent_keys=(gguf.Keys.LLM.VOCAB_SIZE, gguf.Keys.Rope.DIMENSION_COUNT, gguf.Keys.Rope.FREQ_BASE),
    ),
    # conversion/olmo.py Olmo2Model: TextModel's keys (rope.freq_base from rope_theta; no
    # key_length, the config has no head_dim; no rope.dimension_count, no vocab_size), no permutation.
    "olmo2": ArchSpec(
        gguf.MODEL_ARCH.OLMO2,
        transformers.Olmo2Config,
        dict(_ROPE_GQA, vocab_size=288, rms_norm_eps=1e-6, rope_theta=5e5, tie_word_embeddings=False),
        permute_qk=False,
        rms_norm=True,
        vocab="bpe",
        tokenizer_pre="dbrx",
        absent_keys=_OLMO_ABSENT,
    ),
    # conversion/gemma.py Gemma2Model: Gemma's keys plus both soft-caps and the sliding window;
    # `*norm.weight` + 1; lm_head skipped. Window 4 (< the tests' sequences) and soft-caps that bite.
    "gemma2": ArchSpec(
        gguf.MODEL_ARCH.GEMMA2,
        transformers.Gemma2Config,
        dict(
            _ROPE_GQA,
            head_dim=32,  # ≠ d_e/H = 16, as Gemma 2's 256
            query_pre_attn_scalar=32,  # = head_dim: llama.cpp scales by 1/√n_embd_head_k, not by this
            **_GEMMA_SHAPE,
            hidden_activation="gelu_pytorch_tanh",
            sliding_window=4,  # layer 1 (and 3, …) sees the last 4 tokens only
            attn_logit_softcapping=1.0,  # scores are O(1): 50 would leave them unchanged
            final_logit_softcapping=2.0,  # logits are O(2)
            **_GEMMA_TOKENS,
        ),
        **_GEMMA_FILE,
        absent_keys=(gguf.Keys.LLM.VOCAB_SIZE, gguf.Keys.Rope.DIMENSION_COUNT, gguf.Keys.Rope.FREQ_BASE),
        arch_kv=_gemma2_kv,
        hf_reads=False,  # its loader reads neither soft-cap nor query_pre_attn_scalar (256)
    ),
    # conversion/gemma.py Gemma3Model over TextModel: key/value length = head_dim, RoPE keys from
    # rope_parameters, `*norm.weight` + 1 (q/k norms too); a tied checkpoint writes no output.weight.
    # Six layers: the sixth is the first global one (llama.cpp's pattern 6).
    "gemma3": ArchSpec(
        gguf.MODEL_ARCH.GEMMA3,
        transformers.Gemma3TextConfig,
        dict(
            _GQA_SHAPE,
            num_hidden_layers=6,
            head_dim=32,
            query_pre_attn_scalar=32,
            **_GEMMA_SHAPE,
            hidden_activation="gelu_pytorch_tanh",
            sliding_window=4,
            rope_parameters={
                "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
            **_GEMMA_TOKENS,
        ),
        **_GEMMA_FILE,
        absent_keys=(gguf.Keys.LLM.VOCAB_SIZE, gguf.Keys.Rope.DIMENSION_COUNT),
        arch_kv=_gemma3_kv,
        hf_reads=False,  # its loader reads no RoPE scaling, and 256 for query_pre_attn_scalar
    ),
    # conversion: OlmoeModel (TextModel's keys, experts stacked; feed_forward_length is the experts'
    # width, which llama.cpp's olmoe reads as n_ff). llama.cpp requires attn_k_norm of n_embd: H_kv = H.
    "olmoe": ArchSpec(
        gguf.MODEL_ARCH.OLMOE,
        transformers.OlmoeConfig,
        dict(_MOE_SHAPE, num_key_value_heads=4, intermediate_size=32, num_experts=8, norm_topk_prob=False),
        permute_qk=False,
        rms_norm=True,
        vocab="bpe",
        tokenizer_pre="olmo",
        arch_kv=_moe_kv,
        absent_keys=_OLMO_ABSENT,
    ),
    # conversion: Qwen3MoeModel (a Qwen2MoeModel: expert_feed_forward_length from moe_intermediate_size);
    # head_dim 128 as the tiny Qwen3 (transformers' loader takes the class default); llama.cpp
    # renormalises the chosen weights, so the model does too (norm_topk_prob).
    "qwen3moe": ArchSpec(
        gguf.MODEL_ARCH.QWEN3MOE,
        transformers.Qwen3MoeConfig,
        dict(
            _QWEN_MOE_SHAPE,
            head_dim=128,
            norm_topk_prob=True,
        ),
        **_QWEN_MOE_FILE,
    ),
    # conversion: Qwen2MoeModel (expert and shared-expert widths; shared_expert_gate written as
    # stored, [1, d_e]); q/k/v biases; llama.cpp does not renormalise the chosen weights and requires
    # output.weight (untied).
    "qwen2moe": ArchSpec(
        gguf.MODEL_ARCH.QWEN2MOE,
        transformers.Qwen2MoeConfig,
        dict(
            _QWEN_MOE_SHAPE,
            shared_expert_intermediate_size=64,
            norm_topk_prob=False,
        ),
        **_QWEN_MOE_FILE,
    ),
    # Mixtral as llama.cpp converts it (LlamaModel: arch llama, Q/K permuted, experts stacked; the
    # chosen weights renormalised); feed_forward_length is the experts' width.
    "mixtral": ArchSpec(
        gguf.MODEL_ARCH.LLAMA,
        transformers.MixtralConfig,
        dict(
            _MOE_SHAPE,
            intermediate_size=32,
            num_local_experts=8,
            bos_token_id=1,
            eos_token_id=2,
            vocab_size=128,
        ),
        permute_qk=True,
        rms_norm=True,
        vocab="spm",
        tokenizer_pre="default",
        arch_kv=_moe_kv,
        hf_reads=False,  # transformers reads a llama file as a dense LlamaForCausalLM: no experts
    ),
    # conversion: Phi3MiniModel writes its own keys (no vocab_size, no key/value_length; the original
    # context always, the sliding window, LongRoPE's attention factor) and LongRoPE's factor tensors;
    # qkv_proj and gate_up_proj stay fused (attn_qkv, ffn_up), Q/K unpermuted (rope type NEOX).
    "phi3": ArchSpec(
        gguf.MODEL_ARCH.PHI3,
        transformers.Phi3Config,
        dict(
            _ROPE_GQA,
            vocab_size=128,
            sliding_window=None,
            pad_token_id=None,
            tie_word_embeddings=False,
            bos_token_id=1,
            eos_token_id=2,
        ),  # fmt: skip
        permute_qk=False,
        rms_norm=True,
        vocab="spm",
        tokenizer_pre="default",
        absent_keys=(
            gguf.Keys.LLM.VOCAB_SIZE,
            gguf.Keys.Attention.KEY_LENGTH,
            gguf.Keys.Attention.VALUE_LENGTH,
        ),
        arch_kv=_phi3_kv,
        extra_tensors=_phi3_tensors,
        controls=("<|endoftext|>",),  # llama.cpp marks it by name in a model named phi3 (llama-vocab.cpp)
    ),
    # conversion: Phi2Model writes its own keys (feed_forward_length 4·d_e, head_count_kv = H, the
    # LayerNorm ε, rope.dimension_count of the rotated entries; no freq_base, vocab_size or
    # key/value_length); q/k/v stay separate, with biases, unpermuted (rope type NEOX).
    "phi2": ArchSpec(
        gguf.MODEL_ARCH.PHI2,
        transformers.PhiConfig,
        dict(
            _GQA_SHAPE,
            num_key_value_heads=4,
            intermediate_size=256,
            partial_rotary_factor=0.5,
            layer_norm_eps=1e-5,
            vocab_size=288,
            tie_word_embeddings=False,
        ),  # fmt: skip
        permute_qk=False,
        rms_norm=False,
        vocab="bpe",
        tokenizer_pre="phi-2",
        absent_keys=(
            gguf.Keys.LLM.VOCAB_SIZE,
            gguf.Keys.Attention.KEY_LENGTH,
            gguf.Keys.Attention.VALUE_LENGTH,
            gguf.Keys.Rope.FREQ_BASE,
        ),  # fmt: skip
        arch_kv=_phi2_kv,
    ),
    # conversion: StableLMModel writes its own keys (rope.dimension_count of the rotated entries,
    # use_parallel_residual, the LayerNorm ε; no freq_base, vocab_size or key/value_length).
    "stablelm": ArchSpec(
        gguf.MODEL_ARCH.STABLELM,
        transformers.StableLmConfig,
        dict(
            _GQA_SHAPE,
            partial_rotary_factor=0.25,
            layer_norm_eps=1e-5,
            use_qkv_bias=True,
            use_parallel_residual=False,
            vocab_size=288,
            tie_word_embeddings=False,
        ),  # fmt: skip
        permute_qk=False,
        rms_norm=False,
        vocab="bpe",
        tokenizer_pre="stablelm2",
        absent_keys=(
            gguf.Keys.LLM.VOCAB_SIZE,
            gguf.Keys.Attention.KEY_LENGTH,
            gguf.Keys.Attention.VALUE_LENGTH,
            gguf.Keys.Rope.FREQ_BASE,
        ),  # fmt: skip
        arch_kv=_stablelm_kv,
    ),
}
# StableLM 2 12B as StableLMModel converts it: the stablelm keys (use_parallel_residual true), per-head
# q/k LayerNorms stacked into attn_q_norm [H, d_h] and attn_k_norm [H_kv, d_h] (_stack_qk_norm), no
# ffn_norm (the parallel block has no post_attention_layernorm), no q/k/v biases. transformers'
# loader sets use_parallel_residual from the tensors but never qk_layernorm: it cannot read it back.
# OLMo 3 as llama.cpp converts it (Olmo2Model, arch olmo2): OLMo 2's tensors plus the sliding
# window, which llama.cpp gives to 3 blocks of every 4 (set_swa_pattern(4), as Olmo3Config's
# layer_types); 4 blocks, so that one is global, and a window of 4 that the tests' sequences pass.
# transformers' GGUF loader reads an olmo2 file as OLMo 2: no window.
ARCHS["olmo3"] = replace(
    ARCHS["olmo2"],
    config_cls=transformers.Olmo3Config,
    defaults=dict(
        ARCHS["olmo2"].defaults, num_hidden_layers=4, sliding_window=4, rope_parameters=_OLMO3_ROPE
    ),
    arch_kv=_olmo3_kv,
    hf_reads=False,
)
ARCHS["stablelm2-12b"] = replace(
    ARCHS["stablelm"],
    defaults=dict(
        ARCHS["stablelm"].defaults, use_qkv_bias=False, qk_layernorm=True, use_parallel_residual=True
    ),
    hf_reads=False,
)
ARCHS["phi2-fused"] = replace(ARCHS["phi2"], qkv="fused", hf_reads=False)
ARCHS["phi3-split"] = replace(ARCHS["phi3"], qkv="split", hf_reads=False)
# Mamba as MambaModel converts it: its own keys, tensors under gguf's mamba names (A stored as
# −exp(A_log), the convolution squeezed: _CONVERSIONS), tied output. d_inner = 2·d_e, which the
# converter requires; a vocabulary of 288 (a multiple of 8: the converter pads to one).
ARCHS["mamba"] = ArchSpec(
    gguf.MODEL_ARCH.MAMBA,
    transformers.MambaConfig,
    dict(
        hidden_size=32,  # d_e
        num_hidden_layers=2,  # L
        state_size=8,  # d_state
        conv_kernel=4,  # d_conv
        expand=2,  # d_inner = 64
        time_step_rank=4,  # dt_rank (the config's "auto" gives ⌈d_e / 16⌉ = 2)
        layer_norm_epsilon=1e-5,
        vocab_size=288,
        use_bias=False,  # llama.cpp's mamba reads no ssm_in / ssm_out bias
        use_conv_bias=True,
        tie_word_embeddings=True,
        use_cache=False,
    ),
    permute_qk=False,
    rms_norm=True,
    vocab="bpe",
    tokenizer_pre="gpt-2",  # a byte-level BPE (Mamba's own is GPT-NeoX-20B's)
    rope=False,
    model_kv=_mamba_kv,
    # each stage O(1) (in_proj's rows ~1, the convolution's output ~1, x_proj's dt, B and C ~0.7, the
    # step sizes softplus(N(0, 0.7²)): selective), decay rates exp(N(0, 1)) from slow to fast, D ~ 1,
    # so that a block moves the residual as much as the embedding and the state spans many tokens
    init_std=(
        ("in_proj.weight", 0.2),
        ("conv1d.weight", 0.5),
        ("x_proj.weight", 0.15),
        ("dt_proj.weight", 0.5),
        ("A_log", 1.0),
        (".D", 1.0),
    ),
)


# ---------------------------------------------------------------------------------------------
# tiny models


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
    model = transformers.AutoModelForCausalLM.from_config(
        config,
        dtype=torch.float32,
        attn_implementation="eager",  # the naive reference
    )
    _randomise(model, seed, spec.norm_shift, dict(spec.init_std))
    return model.eval(), config


def _randomise(
    model: torch.nn.Module, seed: int, norm_shift: float = 0.0, init_std: dict[str, float] | None = None
) -> None:
    """Redraw every parameter so that no weight keeps its default (ones, zeros, tiny normals).

    As the model applies them: embeddings ~ N(0, 0.5²) (logits of a few units; Gemma multiplies
    its embeddings by √d_e, so its table is drawn √d_e times smaller), norm weights ~ 1 + N(0, 0.1²)
    (Gemma applies 1 + w: w ~ N(0, 0.1²)); other matrices and biases ~ N(0, 0.1²), or N(0, σ²)
    where `init_std` has σ for the end of the parameter's name. Tied tensors are drawn once.
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
            elif p.ndim == 1 and name.endswith("weight"):
                p.copy_(1.0 - norm_shift + 0.1 * noise)
            else:
                std = next((v for end, v in init_std.items() if name.endswith(end)), 0.1)
                p.copy_(std * noise)


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
    part: tuple[int, int] | None = None  # rows [a, b) of each expert (gate_up_proj's gate, up), else all
    stack: tuple[str, ...] = ()  # parameters stacked as rows, in order (StableLM's per-head norms), else none
    convert: str = ""  # a key of _CONVERSIONS: the converter stores another form of the parameter


# What a converter stores in place of a checkpoint's parameter, by GGUF name without "blk.N.":
# (to the stored form, back to the checkpoint's). Mamba (MambaModel.modify_tensors): A = −exp(A_log),
# and the depthwise convolution's [d_inner, 1, d_conv] squeezed to [d_inner, d_conv].
_CONVERSIONS: dict[str, tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]] = {
    "ssm_a": (lambda w: -np.exp(w), lambda a: np.log(-a)),
    "ssm_conv1d.weight": (lambda w: w[:, 0, :], lambda w: w[:, None, :]),
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
    state = model.state_dict()
    for hf_name in state:
        if hf_name == "lm_head.weight" and config.tie_word_embeddings:
            continue  # a tied checkpoint has no lm_head, so llama.cpp writes no output.weight
        experts = _expert_tensors(hf_name, state[hf_name].shape)
        if experts is not None:
            plan.extend(experts)
            continue
        head = _PER_HEAD.fullmatch(hf_name)
        if head is not None:  # one stacked tensor, written where head 0's norm comes
            if head.group(2) == "0":
                plan.append(_stacked_heads(head.group(1), state, name_map))
            continue
        name = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise ValueError(f"no GGUF name for {arch} parameter {hf_name!r}")
        leaf = name.split(".")[-2]  # blk.0.attn_q.weight → attn_q
        qk = heads.get(leaf) if spec.permute_qk and permute else None
        shift = spec.norm_shift if hf_name.endswith("norm.weight") else 0.0
        convert = name.split(".", 2)[-1] if name.startswith("blk.") else name
        convert = convert if convert in _CONVERSIONS else ""
        plan.append(_Tensor(hf_name, name, hf_name in conv1d, qk, shift, convert=convert))
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


_EXPERTS = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)")


def _expert_tensors(hf_name: str, shape: tuple[int, ...]) -> list[_Tensor] | None:
    """transformers 5 keeps a layer's experts as 3-D tensors, gate and up fused:
    `experts.gate_up_proj` [E, 2·d_ff, d_e] (rows: gate; up) and `experts.down_proj` [E, d_e, d_ff].
    llama.cpp's converter writes them as `ffn_gate_exps`, `ffn_up_exps` [E, d_ff, d_e] and
    `ffn_down_exps` [E, d_e, d_ff] (NumPy order); None for any other parameter.

    >>> [(t.name, t.part) for t in _expert_tensors("model.layers.1.mlp.experts.gate_up_proj", (8, 64, 32))]
    [('blk.1.ffn_gate_exps.weight', (0, 32)), ('blk.1.ffn_up_exps.weight', (32, 64))]
    """
    m = _EXPERTS.fullmatch(hf_name)
    if m is None:
        return None
    blk = f"blk.{m.group(1)}."
    if m.group(2) == "down_proj":
        return [_Tensor(hf_name, blk + "ffn_down_exps.weight", False, None)]
    d_ff = shape[1] // 2
    return [
        _Tensor(hf_name, blk + "ffn_gate_exps.weight", False, None, part=(0, d_ff)),
        _Tensor(hf_name, blk + "ffn_up_exps.weight", False, None, part=(d_ff, 2 * d_ff)),
    ]


def _to_gguf(t: _Tensor, w: np.ndarray) -> np.ndarray:
    w = _CONVERSIONS[t.convert][0](w) if t.convert else w
    w = w[:, t.part[0] : t.part[1]] if t.part else w
    w = w.T if t.transpose else w
    w = w + np.float32(t.shift) if t.shift else w
    return permute_qk(w, t.qk_heads) if t.qk_heads else w


def _from_gguf(t: _Tensor, w: np.ndarray) -> np.ndarray:
    w = unpermute_qk(w, t.qk_heads) if t.qk_heads else w
    w = w - np.float32(t.shift) if t.shift else w  # exact for stored values in [0.5, 2] (Sterbenz)
    w = w.T if t.transpose else w
    return _CONVERSIONS[t.convert][1](w) if t.convert else w  # log(−A): A_log to float rounding


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
    return np.stack(values) if t.stack else values[0]


def tensor_type(name: str, shape: tuple[int, ...], ftype: str) -> QT:
    """The GGML type llama.cpp's converter gives tensor `name` in a file of type `ftype`.

    >>> tensor_type("blk.0.attn_norm.weight", (64,), "Q8_0").name, tensor_type("token_embd.weight", (128, 64), "Q8_0").name
    ('F32', 'Q8_0')
    """
    qtype = FILE_TYPES[ftype][1]
    pos_embd = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.POS_EMBD] + ".weight"
    if len(shape) <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight") or name == pos_embd:
        return QT.F32
    if name.endswith(".ssm_conv1d.weight"):  # the converter keeps every SSM_CONV1D in F32
        return QT.F32
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
            w = _to_gguf(t, _hf_value(t, params))
            data, qtype = _quantize(t.name, w, ftype)
            restored = torch.from_numpy(
                np.ascontiguousarray(_from_gguf(t, gguf.quants.dequantize(data, qtype).reshape(w.shape)))
            )
            if t.part:  # one block of rows of each expert
                params[t.hf_name][:, t.part[0] : t.part[1]].copy_(restored)
            elif t.stack:  # row h back to head h's parameter
                for row, n in zip(restored, t.stack, strict=True):
                    params[n].copy_(row)
            else:
                params[t.hf_name].copy_(restored)
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


def head_dim(config: Any) -> int:
    """d_h: the config's `head_dim` where it has one (Qwen2's has none), else d_e / H."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


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
    else:
        vocab_kv = bpe_vocab_kv(config, spec.tokenizer_pre)
    kv = _hparams_kv(config, arch, ftype) | vocab_kv
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
    """Logits of a causal LM for one sequence: float32 `[len(ids), N_V]`."""
    with torch.no_grad():
        out = model(torch.tensor([list(ids)], dtype=torch.long), use_cache=False)
    return out.logits[0].float().numpy()


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
