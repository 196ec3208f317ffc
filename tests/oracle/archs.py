"""The architectures the oracle builds: one `ArchSpec` per case in `ARCHS` (the transformers class and
its tiny config, how llama.cpp's converter writes the file: Q/K permutation, norm offsets, its own
metadata keys and tensors), with the helpers that write each family's keys.
Leaves out: writing the file (hf_gguf.py, whose docstring lists the converter's facts relied on).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the hub, even by accident

import gguf  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from .vocab import WPM_VOCAB  # noqa: E402

VT = gguf.GGUFValueType
QT = gguf.GGMLQuantizationType

FILE_TYPES = {  # ftype name → (general.file_type, the type of quantizable 2-D weights)
    "F32": (gguf.LlamaFileType.ALL_F32, QT.F32),
    "F16": (gguf.LlamaFileType.MOSTLY_F16, QT.F16),
    "Q8_0": (gguf.LlamaFileType.MOSTLY_Q8_0, QT.Q8_0),
    # gpt-oss as released: the routed experts in MXFP4 (GptOssModel repacks the checkpoint's blocks as
    # they are), every other weight in float
    "MXFP4_MOE": (gguf.LlamaFileType.MOSTLY_MXFP4_MOE, QT.F32),
}


@dataclass(frozen=True)
class ArchSpec:
    """How one architecture is built tiny and written the llama.cpp way."""

    gguf_arch: gguf.MODEL_ARCH
    config_cls: type
    defaults: dict[str, Any]  # tiny config; `tiny_model(**overrides)` replaces entries
    permute_qk: bool  # rope type NORM: llama.cpp interleaves each Q/K head's halves
    rms_norm: bool  # RMSNorm (ε under attention.layer_norm_rms_epsilon) vs LayerNorm
    vocab: str  # "spm" (SentencePiece: tokenizer.ggml.model llama), "bpe" (byte-level: gpt2), "wpm" (bert)
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
    # an encoder (BERT): built with AutoModel, its output each token's last hidden state, not logits
    encoder: bool = False
    dropped: tuple[str, ...] = ()  # prefixes of parameters the converter drops (BERT's pooler)
    # GGUF name (without "blk.N.") → the shape the converter reshapes the parameter to, from the config
    # (Mamba-2: A and D to [H, 1], the gated norm's scales to [n_groups, d_inner / n_groups])
    reshaped: Callable[[Any], dict[str, tuple[int, ...]]] | None = None
    # metadata the converter makes from the checkpoint's parameters, which it writes as no tensor:
    # (ends of those parameters' names, the keys from the state dict) — Apertus's per-block xIELU numbers
    weight_kv: tuple[tuple[str, ...], Callable[[dict[str, Any]], dict[str, tuple[Any, VT]]]] | None = None
    # GGUF name (without "blk.N.") → the factors the converter multiplies the stored weight by, in order:
    # a number, or one per row (Falcon-H1's µP multipliers, folded into the weights they follow)
    scaled: Callable[[Any], dict[str, tuple[Any, ...]]] | None = None
    # the checkpoint keeps its experts transposed, [E, n_in, n_out] (Llama4TextExperts), which the converter swaps
    experts_in_out: bool = False
    # gpt-oss: experts stored [E, n_in, n_out], gate_up_proj's last axis alternating gate, up (biases
    # beside each), which GptOssModel.modify_tensors transposes and splits
    interleaved_experts: bool = False
    # ends of `*norm.weight` names that norm_shift passes over: norms the model applies as w, not 1 + w
    # (Qwen3-Next's gated norm, linear_attn.norm, which its converter leaves as it is)
    unshifted: tuple[str, ...] = ()
    # the converter's row gathers: HF parameter name end → ((GGUF name end, the rows it takes, in
    # order), …) from the config (Qwen3-Next's in_proj_qkvz, un-interleaved into attn_qkv and attn_gate)
    gathered: Callable[[Any], dict[str, tuple[tuple[str, tuple[int, ...]], ...]]] | None = None


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


def _mamba2_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """Mamba2Model.set_gguf_parameters: Mamba's keys, time_step_rank = d_inner / head_dim (the head
    count), and the group count; no ssm.dt_b_c_rms.

    >>> kv = _mamba2_kv(transformers.Mamba2Config(hidden_size=32, head_dim=8, num_heads=8, n_groups=2))
    >>> kv["{arch}.ssm.inner_size"][0], kv["{arch}.ssm.time_step_rank"][0], kv["{arch}.ssm.group_count"][0]
    (64, 8, 2)
    """
    K, Att, SSM = gguf.Keys.LLM, gguf.Keys.Attention, gguf.Keys.SSM
    d_inner = int(config.expand * config.hidden_size)
    return {
        K.CONTEXT_LENGTH: (2**20, VT.UINT32),  # the converter's stand-in, as for Mamba
        K.EMBEDDING_LENGTH: (config.hidden_size, VT.UINT32),
        K.FEED_FORWARD_LENGTH: (0, VT.UINT32),
        Att.HEAD_COUNT: (0, VT.UINT32),
        K.BLOCK_COUNT: (config.num_hidden_layers, VT.UINT32),
        SSM.CONV_KERNEL: (config.conv_kernel, VT.UINT32),
        SSM.INNER_SIZE: (d_inner, VT.UINT32),
        SSM.STATE_SIZE: (config.state_size, VT.UINT32),
        SSM.TIME_STEP_RANK: (d_inner // config.head_dim, VT.UINT32),
        SSM.GROUP_COUNT: (config.n_groups, VT.UINT32),
        Att.LAYERNORM_RMS_EPS: (config.layer_norm_epsilon, VT.FLOAT32),
    }


def _mamba2_reshaped(config: Any) -> dict[str, tuple[int, ...]]:
    """Mamba2Model.modify_tensors: A and D to [H, 1], the gated norm's scales to [n_groups, d_inner / n_groups]."""
    d_inner = int(config.expand * config.hidden_size)
    H = d_inner // config.head_dim
    return {
        "ssm_a": (H, 1),
        "ssm_d": (H, 1),
        "ssm_norm.weight": (config.n_groups, d_inner // config.n_groups),
    }


# Mamba-2 as Mamba2Model converts it (_mamba2_kv, _mamba2_reshaped, dt_bias renamed ssm_dt.bias);
# d_inner = 2·d_e, which the converter requires; 8 heads of 8 channels in 2 groups (heads 1–4 read
# group 1's B and C, heads 5–8 group 2's); d_state 16 ≠ head_dim, so that the state's two axes cannot
# be swapped unseen; tied output, as in the state-spaces/mamba2-* checkpoints.
ARCHS["mamba2"] = ArchSpec(
    gguf.MODEL_ARCH.MAMBA2,
    transformers.Mamba2Config,
    dict(
        hidden_size=32,  # d_e
        num_hidden_layers=2,  # L
        state_size=16,  # d_state
        conv_kernel=4,  # d_conv
        expand=2,  # d_inner = 64
        head_dim=8,  # p
        num_heads=8,  # H = d_inner / head_dim
        n_groups=2,  # G
        chunk_size=8,  # transformers' SSD chunks: sequences longer than one chunk cross chunk borders
        layer_norm_epsilon=1e-5,
        vocab_size=288,  # a multiple of 16: the converter pads to one
        use_bias=False,  # llama.cpp's mamba2 reads no ssm_in / ssm_out bias
        use_conv_bias=True,
        tie_word_embeddings=True,
        use_cache=False,
    ),
    permute_qk=False,
    rms_norm=True,
    vocab="bpe",
    tokenizer_pre="gpt-2",  # a byte-level BPE (Mamba-2's own is GPT-NeoX-20B's)
    rope=False,
    hf_reads=False,
    model_kv=_mamba2_kv,
    reshaped=_mamba2_reshaped,
    # as for Mamba: each stage O(1), step sizes softplus(N(0, 1)) (selective), decay rates exp(N(0, 1))
    init_std=(
        ("in_proj.weight", 0.2),
        ("conv1d.weight", 0.5),
        ("dt_bias", 1.0),
        ("A_log", 1.0),
        (".D", 1.0),
    ),
)


def _cohere_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """CommandR2Model and Cohere2Model.set_gguf_parameters: logit_scale and rope.scaling.type none,
    always; Cohere2Model also the sliding window (and no pattern: llama.cpp's default 4 is the config's).

    >>> [v for v, _ in _cohere_kv(transformers.CohereConfig(logit_scale=0.5)).values()]
    [0.5, 'none']
    >>> _cohere_kv(transformers.Cohere2Config(sliding_window=4))["{arch}.attention.sliding_window"][0]
    4
    """
    kv = {
        gguf.Keys.LLM.LOGIT_SCALE: (float(config.logit_scale), VT.FLOAT32),
        gguf.Keys.Rope.SCALING_TYPE: ("none", VT.STRING),
    }
    if getattr(config, "sliding_window", None) is not None:  # Cohere2Config
        kv[gguf.Keys.Attention.SLIDING_WINDOW] = (int(config.sliding_window), VT.UINT32)
    return kv


# Command R as CommandR2Model converts it (a TextModel): no vocab_size, key/value_length (Cohere's
# config has no head_dim) or rope.dimension_count; logit_scale; Q/K unpermuted (Cohere rotates
# interleaved pairs, which is rope type NORM); tied (llama.cpp's command-r reads no output.weight);
# LayerNorm weights without biases, no q/k/v biases (llama.cpp loads none). A logit scale ≠ 1 and a
# RoPE base ≠ llama.cpp's default, so that a card that skipped either would be seen.
ARCHS["command-r"] = ArchSpec(
    gguf.MODEL_ARCH.COMMAND_R,
    transformers.CohereConfig,
    dict(
        _GQA_SHAPE,
        rope_theta=1000.0,
        layer_norm_eps=1e-5,
        logit_scale=0.5,
        vocab_size=288,
        tie_word_embeddings=True,
        use_qk_norm=False,
    ),
    permute_qk=False,
    rms_norm=False,
    vocab="bpe",
    tokenizer_pre="command-r",
    absent_keys=(*_NO_HEAD_DIM, gguf.Keys.LLM.VOCAB_SIZE, gguf.Keys.Rope.DIMENSION_COUNT),
    arch_kv=_cohere_kv,
)
# Command R+ tiny: per-head q/k LayerNorms (use_qk_norm: q_norm [H, d_h], k_norm [H_kv, d_h], written
# as stored: attn_q_norm, attn_k_norm), which llama.cpp reads from 64 blocks on only; so 64 narrow
# blocks (d_e 32, H 2/1, d_ff 32).
ARCHS["command-r-plus"] = replace(
    ARCHS["command-r"],
    defaults=dict(
        ARCHS["command-r"].defaults,
        hidden_size=32,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=32,
        num_hidden_layers=64,
        use_qk_norm=True,
    ),
)
# Command R7B as Cohere2Model converts it: TextModel's keys with key/value_length (Cohere2Config has
# head_dim), vocab_size, rope.dimension_count (rotary_pct · d_h: all of it), logit_scale, the sliding
# window; no pattern key. Four blocks: three slide (window 4, which the tests' sequences pass) with
# RoPE, the fourth is global without RoPE.
ARCHS["cohere2"] = ArchSpec(
    gguf.MODEL_ARCH.COHERE2,
    transformers.Cohere2Config,
    dict(
        {k: v for k, v in ARCHS["command-r"].defaults.items() if k != "use_qk_norm"},  # not Cohere2's
        num_hidden_layers=4,
        sliding_window=4,
    ),
    permute_qk=False,
    rms_norm=False,
    vocab="bpe",
    tokenizer_pre="command-r",
    arch_kv=_cohere_kv,
)
# Granite MoE as GraniteMoeModel converts it (a GraniteModel: Q/K permuted, no head_dim keys, the
# multipliers under their `_scale` names; TextModel's expert keys; feed_forward_length is each
# expert's width, which llama.cpp's granite loader reads as n_ff; input_linear split into gate; up).
ARCHS["granitemoe"] = replace(
    ARCHS["granite"],
    gguf_arch=gguf.MODEL_ARCH.GRANITE_MOE,
    config_cls=transformers.GraniteMoeConfig,
    defaults=dict(
        ARCHS["granite"].defaults,
        intermediate_size=32,  # each expert's width (a multiple of 32: ffn_down_exps can be Q8_0)
        num_local_experts=8,
        num_experts_per_tok=2,
        tie_word_embeddings=False,  # output.weight written (the granite case is tied)
    ),
    arch_kv=lambda config: _granite_kv(config) | _moe_kv(config),
)
# GraniteMoeShared, which the same GraniteMoeModel converts to arch granitemoe: a shared SwiGLU expert
# (shared_mlp.input_linear split into ffn_gate_shexp; ffn_up_shexp) and its width as
# expert_shared_feed_forward_length
ARCHS["granitemoeshared"] = replace(
    ARCHS["granitemoe"],
    config_cls=transformers.GraniteMoeSharedConfig,
    defaults=dict(ARCHS["granitemoe"].defaults, shared_intermediate_size=64),
    arch_kv=lambda config: (
        _granite_kv(config)
        | _moe_kv(config)
        | {gguf.Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH: (config.shared_intermediate_size, VT.UINT32)}
    ),
)
# Arcee (AFM) as ArceeModel converts it: a LlamaModel (Q/K permuted, head_dim as key/value_length)
# with ffn_up and ffn_down only. Its tokenizer is a byte-level BPE whose hash the converter already
# knew (llama.cpp PR 14207 dropped AFM's own entry): llama-bpe, as its Llama 3 bos/eos ids suggest.
ARCHS["arcee"] = ArchSpec(
    gguf.MODEL_ARCH.ARCEE,
    transformers.ArceeConfig,
    dict(_ROPE_GQA, vocab_size=288, tie_word_embeddings=False),
    permute_qk=True,
    rms_norm=True,
    vocab="bpe",
    tokenizer_pre="llama-bpe",
)


def _exaone4_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """Exaone4Model.set_gguf_parameters: vocab_size always; the window and one flag per block
    (`layer_types[i] == "sliding_attention"`) only when the config has a window.

    >>> c = transformers.Exaone4Config(num_hidden_layers=4, sliding_window=4)
    >>> [v for v, _ in _exaone4_kv(c).values()][1:]
    [4, [True, True, True, False]]
    """
    Att = gguf.Keys.Attention
    kv = {gguf.Keys.LLM.VOCAB_SIZE: (config.vocab_size, VT.UINT32)}
    if config.sliding_window is not None:
        kv[Att.SLIDING_WINDOW] = (int(config.sliding_window), VT.UINT32)
        kv[Att.SLIDING_WINDOW_PATTERN] = ([t == "sliding_attention" for t in config.layer_types], VT.ARRAY)
    return kv


def _llama3_rope_freqs(config: Any) -> dict[str, np.ndarray]:
    """Exaone4Model's (and LlamaModel's) generate_extra_tensors: for llama3 RoPE scaling, each frequency's divisor as the
    F32 tensor rope_freqs.weight — 1 above the high-frequency wavelength, the factor below the low
    one, a smooth blend between (the scaling transformers applies to its inverse frequencies).

    >>> p = {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0, "low_freq_factor": 1.0,
    ...      "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    >>> c = transformers.Exaone4Config(hidden_size=64, num_attention_heads=4, rope_parameters=p)
    >>> [round(float(v), 2) for v in _llama3_rope_freqs(c)["rope_freqs.weight"]]
    [1.0, 1.29, 7.67, 8.0, 8.0, 8.0, 8.0, 8.0]
    """
    p = config.rope_parameters
    if p.get("rope_type", "").lower() != "llama3":
        return {}
    d_h = head_dim(config)
    freqs = 1.0 / (p["rope_theta"] ** (torch.arange(0, d_h, 2, dtype=torch.float32) / d_h))
    factor, old = p["factor"], p["original_max_position_embeddings"]
    lo, hi = p["low_freq_factor"], p["high_freq_factor"]
    divisors = []
    for freq in freqs.tolist():
        wavelen = 2 * math.pi / freq
        if wavelen < old / hi:
            divisors.append(1.0)
        elif wavelen > old / lo:
            divisors.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            divisors.append(1 / ((1 - smooth) / factor + smooth))
    return {gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight": np.asarray(divisors, np.float32)}


# EXAONE 4.0 as Exaone4Model converts it (conversion/exaone.py, over TextModel): vocab_size, no
# key/value_length (the config has no head_dim), no rope.dimension_count, Q/K unpermuted (NEOX), the
# window and per-block flags when the config has a window, rope_freqs for llama3 RoPE. The 1.2B's
# shape: no window (its layer_types all global; transformers' config divides by zero without them),
# tied output. transformers' GGUF loader does not read exaone4.
ARCHS["exaone4"] = ArchSpec(
    gguf.MODEL_ARCH.EXAONE4,
    transformers.Exaone4Config,
    dict(
        _ROPE_GQA,
        vocab_size=288,
        sliding_window=None,
        layer_types=["full_attention"] * _ROPE_GQA["num_hidden_layers"],
        tie_word_embeddings=True,
    ),
    permute_qk=False,
    rms_norm=True,
    vocab="bpe",
    tokenizer_pre="exaone4",
    absent_keys=(*_NO_HEAD_DIM, gguf.Keys.Rope.DIMENSION_COUNT),
    arch_kv=_exaone4_kv,
    extra_tensors=_llama3_rope_freqs,
)
# The 32B's shape, tiny: 64 blocks (llama.cpp gives windows to that block count only), 3 sliding
# blocks with RoPE to 1 global without (Exaone4Config's pattern 4, the same as llama.cpp's), a window
# of 4 that the tests' sequences pass, llama3 RoPE scaling whose divisors (1, 1.29, 7.67, 8, …) tell
# the 8 frequencies apart within 64 positions, untied output. Narrow (d_e 32, H 2/1, d_ff 32): 64 blocks.
ARCHS["exaone4-swa"] = replace(
    ARCHS["exaone4"],
    defaults=dict(
        ARCHS["exaone4"].defaults,
        hidden_size=32,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=32,
        num_hidden_layers=64,
        sliding_window=4,
        layer_types=None,  # the config's own: block i slides unless (i + 1) mod 4 = 0
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 1e4,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        tie_word_embeddings=False,
    ),
)
# Seed-OSS as SeedOssModel converts it (a plain TextModel): key/value_length = head_dim (which need
# not be d_e / H: 32 here, 128 in the 36B), no rope.dimension_count, no vocab_size, Q/K unpermuted
# (NEOX), q/k/v biases (attention_bias), none on the output (llama.cpp loads no attn_output.bias), the
# pre-MLP norm under gguf's post_attention_norm. llama.cpp's Seed-OSS support (PR 15490) added no
# pre-tokenizer row, so its tokenizer hashes as a known one: Seed-Coder's (the same 155,136 tokens),
# seed-coder.
ARCHS["seed_oss"] = ArchSpec(
    gguf.MODEL_ARCH.SEED_OSS,
    transformers.SeedOssConfig,
    dict(
        _ROPE_GQA,
        head_dim=32,
        vocab_size=288,
        rms_norm_eps=1e-6,
        attention_bias=True,
        attention_out_bias=False,
        pad_token_id=None,
        tie_word_embeddings=False,
    ),
    permute_qk=False,
    rms_norm=True,
    vocab="bpe",
    tokenizer_pre="seed-coder",
    absent_keys=(gguf.Keys.LLM.VOCAB_SIZE, gguf.Keys.Rope.DIMENSION_COUNT),
)
# ERNIE 4.5 (dense) as Ernie4_5Model converts it (a plain TextModel): key/value_length = head_dim
# (32 here ≠ d_e / H = 16; the 0.3B: 128 ≠ 64), no rope.dimension_count, no vocab_size; Q/K
# unpermuted, as transformers' Ernie 4.5 already rotates adjacent pairs (llama.cpp's rope type NORM);
# no biases (use_bias false, as in the released models: with it transformers would add MLP biases that
# llama.cpp's ernie4_5 does not load); tied output; a SentencePiece vocabulary (pre "default").
ARCHS["ernie4_5"] = ArchSpec(
    gguf.MODEL_ARCH.ERNIE4_5,
    transformers.Ernie4_5Config,
    dict(_ROPE_GQA, head_dim=32, vocab_size=128, use_bias=False, tie_word_embeddings=True),
    permute_qk=False,
    rms_norm=True,
    vocab="spm",
    tokenizer_pre="default",
    absent_keys=(gguf.Keys.LLM.VOCAB_SIZE, gguf.Keys.Rope.DIMENSION_COUNT),
)


def _ernie4_5_moe_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """Ernie4_5MoeModel.set_gguf_parameters: the expert keys from the config's own names, and the
    shared expert's width as intermediate_size // num_key_value_heads (not moe_intermediate_size ·
    moe_num_shared_experts: the two agree in ERNIE-4.5-21B-A3B, 12288 // 4 = 1536 · 2, and in the
    tiny model here), written only when there are shared experts.

    >>> kv = _ernie4_5_moe_kv(transformers.Ernie4_5_MoeConfig(intermediate_size=128, num_key_value_heads=2))
    >>> kv["{arch}.expert_shared_feed_forward_length"][0], kv["{arch}.interleave_moe_layer_step"][0]
    (64, 1)
    """
    K = gguf.Keys.LLM
    kv = {
        K.EXPERT_COUNT: (config.moe_num_experts, VT.UINT32),
        K.EXPERT_USED_COUNT: (config.moe_k, VT.UINT32),
        K.INTERLEAVE_MOE_LAYER_STEP: (config.moe_layer_interval, VT.UINT32),
        K.LEADING_DENSE_BLOCK_COUNT: (config.moe_layer_start_index, VT.UINT32),
        K.EXPERT_FEED_FORWARD_LENGTH: (config.moe_intermediate_size, VT.UINT32),
        K.EXPERT_SHARED_COUNT: (config.moe_num_shared_experts, VT.UINT32),
    }
    if config.moe_num_shared_experts > 0:
        shared = config.intermediate_size // config.num_key_value_heads
        kv[K.EXPERT_SHARED_FEED_FORWARD_LENGTH] = (shared, VT.UINT32)
    return kv


# ERNIE-4.5-21B-A3B's layout, tiny, as Ernie4_5MoeModel converts it (Ernie4_5Model's TextModel keys:
# key_length = head_dim 32 ≠ d_e / H, no rope.dimension_count, no vocab_size; Q/K unpermuted): block 1
# dense (moe_layer_start_index 1), blocks 2–3 with 8 experts of 32, top-2 by softmax plus the
# selection bias e_score_correction_bias (written [1, E], as the checkpoint holds it), renormalised,
# and 2 shared experts (one SwiGLU of 64 = intermediate_size // num_key_value_heads); tied output; a
# SentencePiece vocabulary (pre "default"). transformers' GGUF loader reads no ernie4_5-moe.
ARCHS["ernie4_5-moe"] = ArchSpec(
    gguf.MODEL_ARCH.ERNIE4_5_MOE,
    transformers.Ernie4_5_MoeConfig,
    dict(
        _ROPE_GQA,
        num_hidden_layers=3,
        intermediate_size=128,
        head_dim=32,
        vocab_size=128,
        use_bias=False,
        tie_word_embeddings=True,
        moe_num_experts=8,
        moe_k=2,
        moe_intermediate_size=32,
        moe_num_shared_experts=2,
        moe_layer_start_index=1,
        moe_layer_interval=1,
    ),
    permute_qk=False,
    rms_norm=True,
    vocab="spm",
    tokenizer_pre="default",
    arch_kv=_ernie4_5_moe_kv,
    absent_keys=(gguf.Keys.LLM.VOCAB_SIZE, gguf.Keys.Rope.DIMENSION_COUNT),
    hf_reads=False,
)


def _apertus_xielu_kv(state: dict[str, Any]) -> dict[str, tuple[Any, VT]]:
    """ApertusModel.modify_tensors: each block's act_fn.alpha_n, alpha_p, beta and eps (one number
    each, as stored: alpha_p and alpha_n before softplus) gathered in block order into the arrays
    xielu.alpha_n, xielu.alpha_p, xielu.beta, xielu.eps (float32), and no tensor.

    >>> state = {f"model.layers.{i}.mlp.act_fn.{n}": torch.tensor([i + 0.5]) for i in (1, 0) for n in
    ...          ("alpha_n", "alpha_p", "beta", "eps")}
    >>> _apertus_xielu_kv(state)["xielu.beta"]
    ([0.5, 1.5], <GGUFValueType.ARRAY: 9>)
    """
    out = {}
    for key, leaf in zip(
        (gguf.Keys.xIELU.ALPHA_N, gguf.Keys.xIELU.ALPHA_P, gguf.Keys.xIELU.BETA, gguf.Keys.xIELU.EPS),
        ("alpha_n", "alpha_p", "beta", "eps"),
        strict=True,
    ):
        blocks = sorted((int(n.split(".")[2]), v) for n, v in state.items() if n.endswith(f".act_fn.{leaf}"))
        out[key] = ([float(v.float().reshape(())) for _, v in blocks], VT.ARRAY)
    return out


# Apertus-8B's layout, tiny, as ApertusModel converts it (a LlamaModel with undo_permute = False: Q/K
# unpermuted, vocab_size, rope.dimension_count and key/value_length written): per-head q/k RMSNorm, an
# ungated MLP (up, xIELU, down) whose per-block numbers go to the xielu.* arrays (alpha_p, alpha_n drawn
# ~ N(0, 1) so that the blocks differ), llama3 RoPE scaling as rope_freqs (original context 64: the
# divisors differ within the tests' positions), no biases, untied output; a byte-level BPE vocabulary
# under Apertus's pre-tokenizer, tekken (Mistral-Nemo's tokenizer, whose hash the converter matches).
# transformers' GGUF loader reads no apertus.
ARCHS["apertus"] = ArchSpec(
    gguf.MODEL_ARCH.APERTUS,
    transformers.ApertusConfig,
    dict(
        _ROPE_GQA,
        vocab_size=288,
        head_dim=16,
        attention_bias=False,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 1e4,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    ),
    permute_qk=False,
    rms_norm=True,
    vocab="bpe",
    tokenizer_pre="tekken",
    extra_tensors=_llama3_rope_freqs,
    init_std=(("act_fn.alpha_p", 1.0), ("act_fn.alpha_n", 1.0)),
    weight_kv=((".act_fn.alpha_n", ".act_fn.alpha_p", ".act_fn.beta", ".act_fn.eps"), _apertus_xielu_kv),
)


def _glm4moe_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """Glm4MoeModel.set_gguf_parameters: block_count counts the NextN blocks (num_hidden_layers +
    num_nextn_predict_layers), rope.dimension_count is head_dim · partial_rotary_factor, the expert
    keys, expert_gating_func sigmoid (2) always, the scale and norm_topk_prob as written.

    >>> kv = _glm4moe_kv(transformers.Glm4MoeConfig(num_hidden_layers=3, head_dim=32))
    >>> kv["{arch}.block_count"][0], kv["{arch}.rope.dimension_count"][0], kv["{arch}.expert_gating_func"][0]
    (4, 16, 2)
    """
    K, Rope = gguf.Keys.LLM, gguf.Keys.Rope
    nextn = config.num_nextn_predict_layers
    return {
        K.BLOCK_COUNT: (config.num_hidden_layers + nextn, VT.UINT32),
        Rope.DIMENSION_COUNT: (int(head_dim(config) * config.rope_parameters["partial_rotary_factor"]), VT.UINT32),
        K.EXPERT_COUNT: (config.n_routed_experts, VT.UINT32),
        K.EXPERT_USED_COUNT: (config.num_experts_per_tok, VT.UINT32),
        K.EXPERT_FEED_FORWARD_LENGTH: (config.moe_intermediate_size, VT.UINT32),
        K.EXPERT_SHARED_COUNT: (config.n_shared_experts, VT.UINT32),
        K.LEADING_DENSE_BLOCK_COUNT: (config.first_k_dense_replace, VT.UINT32),
        K.EXPERT_GATING_FUNC: (2, VT.UINT32),
        K.EXPERT_WEIGHTS_SCALE: (float(config.routed_scaling_factor), VT.FLOAT32),
        K.EXPERT_WEIGHTS_NORM: (bool(config.norm_topk_prob), VT.BOOL),
        K.NEXTN_PREDICT_LAYERS: (nextn, VT.UINT32),
    }


# GLM-4.5-Air's layout, tiny, as Glm4MoeModel converts it (a TextModel: no vocab_size; key_length =
# head_dim 32 ≠ d_e / H = 16, as GLM-4.5's 128 ≠ 4096 / 96): q/k/v biases, half of each head rotated
# on halves (Q/K unpermuted: rope type NEOX), block 1 dense, blocks 2–3 with 8 experts of 32, top-2 by
# sigmoid plus e_score_correction_bias (exp_probs_b), renormalised, × 2.5, one shared expert; one
# NextN block counted in block_count whose tensors this file does not hold (transformers builds no
# MTP block): llama.cpp runs block_count − 1 blocks. No q/k norms (use_qk_norm false, as in the Air).
# transformers' GGUF loader reads no glm4moe.
ARCHS["glm4moe"] = ArchSpec(
    gguf.MODEL_ARCH.GLM4_MOE,
    transformers.Glm4MoeConfig,
    dict(
        _ROPE_GQA,
        num_hidden_layers=3,
        head_dim=32,
        vocab_size=288,
        attention_bias=True,
        use_qk_norm=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        first_k_dense_replace=1,
        n_routed_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        n_shared_experts=1,
        routed_scaling_factor=2.5,
        norm_topk_prob=True,
        n_group=1,
        topk_group=1,
        num_nextn_predict_layers=1,
        tie_word_embeddings=False,
    ),
    permute_qk=False,
    rms_norm=True,
    vocab="bpe",
    tokenizer_pre="glm4",
    arch_kv=_glm4moe_kv,
    absent_keys=(gguf.Keys.LLM.VOCAB_SIZE,),
    hf_reads=False,
)


def _hunyuan_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """HunYuanModel.set_gguf_parameters for a "dynamic" (NTK-alpha) RoPE: the base rewritten as
    rope_theta · α^(d_h/(d_h−2)), scaling type none with factor 1, and a 256k context (trained and
    original), in place of the config's max_position_embeddings.

    >>> kv = _hunyuan_kv(transformers.HunYuanDenseV1Config(head_dim=32, rope_parameters={
    ...     "rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 4.0, "factor": 1.0}))
    >>> round(kv["{arch}.rope.freq_base"][0]), kv["{arch}.context_length"][0]
    (43873, 262144)
    """
    K, Rope = gguf.Keys.LLM, gguf.Keys.Rope
    params = config.rope_parameters
    if params.get("rope_type") != "dynamic":
        return {}
    d_h = config.head_dim
    base = params["rope_theta"] * params.get("alpha", 50) ** (d_h / (d_h - 2))
    return {
        Rope.FREQ_BASE: (float(base), VT.FLOAT32),
        Rope.SCALING_TYPE: ("none", VT.STRING),
        Rope.SCALING_FACTOR: (1.0, VT.FLOAT32),
        Rope.SCALING_ORIG_CTX_LEN: (256 * 1024, VT.UINT32),
        K.CONTEXT_LENGTH: (256 * 1024, VT.UINT32),
    }


# Hunyuan dense as HunYuanModel converts it (a TextModel): key/value_length = head_dim (32 here ≠
# d_e / H = 16; the 4B: 128 = 3072 / 24), no rope.dimension_count, no vocab_size; Q/K unpermuted
# (NEOX); the NTK-alpha RoPE of the checkpoints (rope_scaling {"type": "dynamic", "alpha": 1000}) folded
# into the base (_hunyuan_kv; α = 4 here, so that the base, 43,873, still turns the middle pairs within a
# few tokens); its asserts (rope_theta 10000, max_position_embeddings 32k or 256k) hold; tied output, as
# in the released models. Its pre-tokenizer: hunyuan-dense. transformers' GGUF loader reads no hunyuan.
ARCHS["hunyuan-dense"] = ArchSpec(
    gguf.MODEL_ARCH.HUNYUAN_DENSE,
    transformers.HunYuanDenseV1Config,
    dict(
        _ROPE_GQA,
        head_dim=32,
        vocab_size=288,
        max_position_embeddings=32 * 1024,
        rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 4.0, "factor": 1.0},
        tie_word_embeddings=True,
    ),
    permute_qk=False,
    rms_norm=True,
    vocab="bpe",
    tokenizer_pre="hunyuan-dense",
    absent_keys=(gguf.Keys.LLM.VOCAB_SIZE, gguf.Keys.Rope.DIMENSION_COUNT),
    arch_kv=_hunyuan_kv,
    hf_reads=False,
)


def _bert_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """BertModel.set_gguf_parameters over TextModel's: attention.causal false, always, and the
    pooling type `_try_set_pooling_type` reads from a sentence-transformers Pooling module: mean
    here, as all-MiniLM's modules.json says (a checkpoint without modules.json gets no key).

    >>> sorted(v for v, _ in _bert_kv(transformers.BertConfig()).values())
    [False, 1]
    """
    return {
        gguf.Keys.Attention.CAUSAL: (False, VT.BOOL),
        gguf.Keys.LLM.POOLING_TYPE: (int(gguf.PoolingType.MEAN), VT.UINT32),
    }


# BERT as BertModel converts it (conversion for "BertModel"): TextModel's keys (context, embedding
# and feed-forward lengths, block and head counts, layer_norm_epsilon; no head_count_kv, key_length,
# rope or vocab_size: BertConfig has none of them), attention.causal false, the pooling type; the
# vocabulary as WordPiece (tokenizer.ggml.model "bert", tokens in phantom-space form, the token-type
# count); the pooler dropped, position_embd and token_types kept F32. Its pre-tokenizer is named by
# the tokenizer's hash (bge-small's and MiniLM's BERT vocabulary: bert-bge); llama.cpp reads no
# pre-tokenizer for a WordPiece vocabulary. hidden_act gelu_pytorch_tanh: llama.cpp's bert runs
# ggml_gelu, the tanh form, whatever the checkpoint says (BERT's own "gelu" is erf: test_bert.py).
# transformers' GGUF loader reads no bert: the in-memory model is the oracle.
ARCHS["bert"] = ArchSpec(
    gguf.MODEL_ARCH.BERT,
    transformers.BertConfig,
    dict(
        hidden_size=64,  # d_e
        num_attention_heads=4,  # H
        num_hidden_layers=2,  # L
        intermediate_size=96,  # d_mlp
        max_position_embeddings=128,  # ℓ_max
        type_vocab_size=2,  # N_T: sentence A and B
        vocab_size=len(WPM_VOCAB),
        layer_norm_eps=1e-12,  # BERT's
        hidden_act="gelu_pytorch_tanh",
        pad_token_id=0,
    ),
    permute_qk=False,
    rms_norm=False,
    vocab="wpm",
    tokenizer_pre="bert-bge",
    rope=False,
    arch_kv=_bert_kv,
    hf_reads=False,
    encoder=True,
    dropped=("pooler.",),
)


def _nomic_bert_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """NomicBertModel.set_gguf_parameters (BertModel's over TextModel's): BERT's keys (attention.causal
    false, the pooling type), and the RoPE base from rotary_emb_base; no head_count_kv, key_length or
    rope.dimension_count (nomic's config.json has none of them).

    >>> sorted(_nomic_bert_kv(transformers.NomicBertConfig()).items())[-1]
    ('{arch}.rope.freq_base', (1000.0, <GGUFValueType.FLOAT32: 6>))
    """
    return _bert_kv(config) | {gguf.Keys.Rope.FREQ_BASE: (float(config.rope_parameters["rope_theta"]), VT.FLOAT32)}


# Nomic BERT (nomic-embed-text v1.5) as NomicBertModel converts its checkpoint: transformers 5 renames
# the checkpoint's tensors on load and splits its attn.Wqkv (hf_gguf's _RENAMED_ON_LOAD, _SPLIT_ON_LOAD
# take them back), so the file has one attn_qkv (rows q; k; v), ffn_up = fc11, ffn_gate = fc12 (the one
# SiLU acts on), no biases (the converter asserts none), token_types, token_embd_norm; context_length
# 2048 as the converter writes for v1.5 (from n_positions 8192), which the tiny config keeps; θ = 1000.
# The WordPiece vocabulary is bert-base-uncased's, which hashes as bge-small's (bert-bge); llama.cpp reads
# no pre-tokenizer for WordPiece. transformers' GGUF loader reads no nomic-bert.
ARCHS["nomic-bert"] = ArchSpec(
    gguf.MODEL_ARCH.NOMIC_BERT,
    transformers.NomicBertConfig,
    dict(
        hidden_size=64,  # d_e
        num_attention_heads=4,  # H
        num_hidden_layers=2,  # L
        intermediate_size=96,  # d_ff
        max_position_embeddings=2048,  # ℓ_max: nomic-embed-text v1.5's, as the converter writes it
        type_vocab_size=2,  # N_T
        vocab_size=len(WPM_VOCAB),
        layer_norm_eps=1e-12,
        hidden_act="silu",  # the checkpoint's swiglu
        pad_token_id=0,
    ),
    permute_qk=False,
    rms_norm=False,
    vocab="wpm",
    tokenizer_pre="bert-bge",
    rope=False,  # no grouped-query keys; the RoPE base comes from _nomic_bert_kv
    arch_kv=_nomic_bert_kv,
    hf_reads=False,
    encoder=True,
)


def _modern_bert_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """ModernBertModel.set_gguf_parameters and set_vocab over BertModel's and TextModel's: BERT's keys
    (attention.causal false; the pooling type of a sentence-transformers checkpoint: CLS here, as
    gte-modernbert-base's modules.json says), the global and local RoPE bases from rope_parameters'
    full_attention and sliding_attention, norm_eps as the RMS ε (TextModel finds it under that name;
    llama.cpp's modern-bert reads layer_norm_epsilon, from the config's layer_norm_eps), the window
    (local_attention), its pattern (global_attn_every_n_layers), rope scaling "none", vocab_size, and
    add_bos, add_eos and add_sep true.

    >>> kv = _modern_bert_kv(transformers.ModernBertConfig(global_attn_every_n_layers=2, local_attention=4))
    >>> keys = ("rope.freq_base", "rope.freq_base_swa", "attention.sliding_window_pattern")
    >>> [kv["{arch}." + k][0] for k in keys]
    [160000.0, 10000.0, 2]
    """
    K, Att, Rope, TK = gguf.Keys.LLM, gguf.Keys.Attention, gguf.Keys.Rope, gguf.Keys.Tokenizer
    full, local = config.rope_parameters["full_attention"], config.rope_parameters["sliding_attention"]
    return {
        Att.CAUSAL: (False, VT.BOOL),
        K.POOLING_TYPE: (int(gguf.PoolingType.CLS), VT.UINT32),
        Rope.FREQ_BASE: (float(full["rope_theta"]), VT.FLOAT32),
        Rope.FREQ_BASE_SWA: (float(local["rope_theta"]), VT.FLOAT32),
        Att.LAYERNORM_RMS_EPS: (float(config.norm_eps), VT.FLOAT32),
        Att.SLIDING_WINDOW: (int(config.local_attention), VT.UINT32),
        Att.SLIDING_WINDOW_PATTERN: (int(config.global_attn_every_n_layers), VT.UINT32),
        Rope.SCALING_TYPE: ("none", VT.STRING),
        K.VOCAB_SIZE: (config.vocab_size, VT.UINT32),
        TK.ADD_BOS: (True, VT.BOOL),
        TK.ADD_EOS: (True, VT.BOOL),
        TK.ADD_SEP: (True, VT.BOOL),
    }


# ModernBERT as ModernBertModel converts it: the checkpoint's tensors under their own names (the
# converter drops a leading "model."): one attn_qkv (Wqkv, rows q; k; v, unpermuted: rope type NEOX),
# attn_output, attn_norm in every layer but the first (layer 0's is nn.Identity), ffn_norm (mlp_norm),
# ffn_up (Wi, rows gate; up), ffn_down, token_embd_norm, output_norm (final_norm); no biases (norm_bias,
# attention_bias and mlp_bias false). Tiny: 3 layers, global every 2nd (layers 0 and 2, counted from 0)
# with θ = 160000, layer 1 local with a window of 4 (|t − t'| ≤ 2) and θ = 10000. hidden_activation
# gelu_pytorch_tanh: llama.cpp's GEGLU is ggml_geglu, the tanh form (ModernBERT's own "gelu" is erf). The
# config keeps layer_norm_eps beside norm_eps, as ModernBERT's config.json does. Byte-level BPE,
# pre-tokenizer modern-bert. transformers' GGUF loader reads no modern-bert.
ARCHS["modern-bert"] = ArchSpec(
    gguf.MODEL_ARCH.MODERN_BERT,
    transformers.ModernBertConfig,
    dict(
        hidden_size=64,  # d_e
        num_attention_heads=4,  # H
        num_hidden_layers=3,  # L
        intermediate_size=96,  # d_ff: Wi has 2·d_ff rows
        max_position_embeddings=128,  # ℓ_max
        vocab_size=288,
        global_attn_every_n_layers=2,  # n_p
        local_attention=4,  # w: a local layer sees 2 tokens either side
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 160000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        },
        norm_eps=1e-5,
        layer_norm_eps=1e-5,
        hidden_activation="gelu_pytorch_tanh",
        pad_token_id=287,
        cls_token_id=287,
        sep_token_id=287,
    ),
    permute_qk=False,
    rms_norm=False,
    vocab="bpe",
    tokenizer_pre="modern-bert",
    rope=False,  # no head_count_kv, key_length or rope.dimension_count; the RoPE bases: _modern_bert_kv
    arch_kv=_modern_bert_kv,
    hf_reads=False,
    encoder=True,
)



def _lfm2_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """LFM2Model.set_gguf_parameters: the key/value heads per block (the config's count in an
    attention block, 0 in a "conv" one), vocab_size, the convolution's width, norm_eps as the RMS ε.

    >>> c = transformers.Lfm2Config(num_hidden_layers=3, layer_types=["conv", "full_attention", "conv"])
    >>> _lfm2_kv(c)["{arch}.attention.head_count_kv"][0]
    [0, 8, 0]
    """
    Att = gguf.Keys.Attention
    n_kv = [config.num_key_value_heads if t != "conv" else 0 for t in config.layer_types]
    return {
        Att.HEAD_COUNT_KV: (n_kv, VT.ARRAY),
        gguf.Keys.LLM.VOCAB_SIZE: (config.vocab_size, VT.UINT32),
        gguf.Keys.ShortConv.L_CACHE: (config.conv_L_cache, VT.UINT32),
        Att.LAYERNORM_RMS_EPS: (config.norm_eps, VT.FLOAT32),
    }


# LFM2 as LFM2Model converts it (conversion/lfm2.py, over TextModel): head_count_kv as one entry per
# block, the convolution squeezed to [d_e, l_cache] (_CONVERSIONS), the final norm as
# token_embd_norm, Q/K unpermuted (NEOX), no key/value_length (the config has no head_dim), tied.
# block_auto_adjust_ff_dim off: feed_forward_length is the config's intermediate_size. Four blocks,
# conv, attention, conv, attention, so that both kinds follow both kinds.
ARCHS["lfm2"] = ArchSpec(
    gguf.MODEL_ARCH.LFM2,
    transformers.Lfm2Config,
    dict(
        hidden_size=32,  # d_e
        num_attention_heads=4,  # H
        num_key_value_heads=2,  # H_kv in the attention blocks
        num_hidden_layers=4,  # L
        intermediate_size=64,  # d_ff
        max_position_embeddings=128,
        norm_eps=1e-5,
        rms_norm_eps=1e-5,  # what the common keys read (an Lfm2Config keeps it as given)
        conv_L_cache=3,  # k_c
        block_auto_adjust_ff_dim=False,
        layer_types=["conv", "full_attention", "conv", "full_attention"],
        vocab_size=288,
        tie_word_embeddings=True,
    ),
    permute_qk=False,
    rms_norm=True,
    vocab="bpe",
    tokenizer_pre="lfm2",
    absent_keys=(*_NO_HEAD_DIM, gguf.Keys.Rope.DIMENSION_COUNT),
    arch_kv=_lfm2_kv,
    # in_proj's B, C and x ~1.1 and the convolution's taps ~0.5: a convolution block moves the
    # residual as much as an attention block
    init_std=(("conv.in_proj.weight", 0.2), ("conv.conv.weight", 0.5)),
)

def _jamba_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """JambaModel.set_gguf_parameters: the keys it writes and no others (no vocab_size, no
    key/value_length, no rope): head_count_kv per block (num_key_value_heads in each attention layer
    of attn_layer_offset/attn_layer_period, 0 in each Mamba layer), d_inner = mamba_expand · d_e.

    >>> c = transformers.JambaConfig(num_hidden_layers=4, attn_layer_period=3, attn_layer_offset=0)
    >>> _jamba_kv(c)["{arch}.attention.head_count_kv"][0]
    [8, 0, 0, 8]
    """
    K, Att, SSM = gguf.Keys.LLM, gguf.Keys.Attention, gguf.Keys.SSM
    n_kv = [config.num_key_value_heads if t == "attention" else 0 for t in config.layers_block_type]
    return {
        K.BLOCK_COUNT: (config.num_hidden_layers, VT.UINT32),
        K.CONTEXT_LENGTH: (config.max_position_embeddings, VT.UINT32),
        K.EMBEDDING_LENGTH: (config.hidden_size, VT.UINT32),
        K.FEED_FORWARD_LENGTH: (config.intermediate_size, VT.UINT32),
        Att.HEAD_COUNT: (config.num_attention_heads, VT.UINT32),
        Att.HEAD_COUNT_KV: (n_kv, VT.ARRAY),
        SSM.CONV_KERNEL: (config.mamba_d_conv, VT.UINT32),
        SSM.INNER_SIZE: (config.mamba_expand * config.hidden_size, VT.UINT32),
        SSM.STATE_SIZE: (config.mamba_d_state, VT.UINT32),
        SSM.TIME_STEP_RANK: (config.mamba_dt_rank, VT.UINT32),
        Att.LAYERNORM_RMS_EPS: (config.rms_norm_eps, VT.FLOAT32),
        K.EXPERT_COUNT: (config.num_experts, VT.UINT32),
        K.EXPERT_USED_COUNT: (config.num_experts_per_tok, VT.UINT32),
    }


# Jamba as JambaModel converts it (_jamba_kv; A stored as −exp(A_log), the convolution squeezed:
# _CONVERSIONS; experts stacked). Four blocks, attention in 1 and 4 (attn_layer_period 3, offset 0)
# and experts in 2 and 4 (expert_layer_period 2, offset 1, as every Jamba checkpoint): a dense and
# a mixture block of each kind, and each kind after each kind. d_inner = 2·d_e, which llama.cpp's
# jamba requires; SentencePiece vocabulary (Jamba's tokenizer.model), untied.
ARCHS["jamba"] = ArchSpec(
    gguf.MODEL_ARCH.JAMBA,
    transformers.JambaConfig,
    dict(
        hidden_size=32,  # d_e
        num_attention_heads=4,  # H
        num_key_value_heads=2,  # H_kv in the attention blocks
        num_hidden_layers=4,  # L
        intermediate_size=64,  # d_ff, the dense MLP's and each expert's
        num_experts=4,  # E
        num_experts_per_tok=2,  # k
        expert_layer_period=2,
        expert_layer_offset=1,
        attn_layer_period=3,
        attn_layer_offset=0,
        mamba_d_state=8,  # d_state
        mamba_d_conv=4,  # d_conv
        mamba_expand=2,  # d_inner = 64
        mamba_dt_rank=4,  # dt_rank ("auto" gives ⌈d_e / 16⌉ = 2)
        mamba_conv_bias=True,
        mamba_proj_bias=False,  # llama.cpp's jamba reads no ssm_in / ssm_out bias
        rms_norm_eps=1e-6,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        vocab_size=128,
        **_GEMMA_TOKENS,
        use_cache=False,
    ),
    permute_qk=False,
    rms_norm=True,
    vocab="spm",
    tokenizer_pre="default",
    rope=False,
    hf_reads=False,
    model_kv=_jamba_kv,
    # as for Mamba: each stage O(1), the step sizes selective, decay rates exp(N(0, 1))
    init_std=(
        ("in_proj.weight", 0.2),
        ("conv1d.weight", 0.5),
        ("x_proj.weight", 0.15),
        ("dt_proj.weight", 0.5),
        ("A_log", 1.0),
        (".D", 1.0),
    ),
)


def _deepseek2_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """DeepseekV2Model.set_gguf_parameters (V2 and V3): MLA as MQA over the latent (head_count_kv 1,
    key_length d_c + d_r, value_length d_c) with the decompressed head sizes as key/value_length_mla,
    rope.dimension_count d_r, q_lora_rank only when set, the expert keys; expert_weights_norm only when
    norm_topk_prob, the group counts when the config has them, expert_gating_func from scoring_func.

    >>> kv = _deepseek2_kv(transformers.DeepseekV2Config(kv_lora_rank=32, qk_rope_head_dim=8))
    >>> kv["{arch}.attention.key_length"][0], kv["{arch}.attention.head_count_kv"][0]
    (40, 1)
    """
    K, Att, Rope = gguf.Keys.LLM, gguf.Keys.Attention, gguf.Keys.Rope
    d_c, d_r = config.kv_lora_rank, config.qk_rope_head_dim
    kv: dict[str, tuple[Any, VT]] = {
        Att.HEAD_COUNT_KV: (1, VT.UINT32),
        Att.KEY_LENGTH: (d_c + d_r, VT.UINT32),
        Att.VALUE_LENGTH: (d_c, VT.UINT32),
        Att.KEY_LENGTH_MLA: (config.qk_nope_head_dim + d_r, VT.UINT32),
        Att.VALUE_LENGTH_MLA: (config.v_head_dim, VT.UINT32),
        Att.KV_LORA_RANK: (d_c, VT.UINT32),
        Rope.DIMENSION_COUNT: (d_r, VT.UINT32),
        K.LEADING_DENSE_BLOCK_COUNT: (config.first_k_dense_replace, VT.UINT32),
        K.EXPERT_FEED_FORWARD_LENGTH: (config.moe_intermediate_size, VT.UINT32),
        K.EXPERT_COUNT: (config.n_routed_experts, VT.UINT32),
        K.EXPERT_USED_COUNT: (config.num_experts_per_tok, VT.UINT32),
        K.EXPERT_SHARED_COUNT: (config.n_shared_experts, VT.UINT32),
        K.EXPERT_WEIGHTS_SCALE: (float(config.routed_scaling_factor), VT.FLOAT32),
    }
    if config.q_lora_rank:
        kv[Att.Q_LORA_RANK] = (config.q_lora_rank, VT.UINT32)
    if config.norm_topk_prob:
        kv[K.EXPERT_WEIGHTS_NORM] = (True, VT.BOOL)
    if config.n_group is not None:
        kv[K.EXPERT_GROUP_COUNT] = (config.n_group, VT.UINT32)
    if config.topk_group is not None:
        kv[K.EXPERT_GROUP_USED_COUNT] = (config.topk_group, VT.UINT32)
    gating = {"softmax": 1, "sigmoid": 2}.get(getattr(config, "scoring_func", None) or "")
    if gating:
        kv[K.EXPERT_GATING_FUNC] = (gating, VT.UINT32)
    return kv


_DEEPSEEK_SHAPE = dict(  # MLA: 4 heads, q through rank 32, a latent of 32 + a rope part of 8 per token
    _ROPE_GQA,
    num_key_value_heads=4,
    rms_norm_eps=1e-6,
    q_lora_rank=32,
    kv_lora_rank=32,
    qk_nope_head_dim=16,  # d_n
    qk_rope_head_dim=8,  # d_r
    v_head_dim=16,  # d_v
    first_k_dense_replace=1,  # block 1 dense, block 2 experts
    n_routed_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    n_shared_experts=1,
    routed_scaling_factor=2.0,  # llama.cpp applies it (expert_weights_scale) as transformers does
    vocab_size=288,
    tie_word_embeddings=False,
)
# DeepSeek V2 as DeepseekV2Model converts it: no Q/K permutation (rope type NORM on DeepSeek's own
# interleaved layout), kv_b_proj split per head into attn_k_b (transposed) and attn_v_b, experts
# stacked; softmax routing with no expert_gating_func key (llama.cpp reads it as softmax), top-2 not
# renormalised, one group (n_group 1: no group limit). transformers' GGUF loader reads no deepseek2.
ARCHS["deepseek2"] = ArchSpec(
    gguf.MODEL_ARCH.DEEPSEEK2,
    transformers.DeepseekV2Config,
    dict(_DEEPSEEK_SHAPE, topk_method="greedy", n_group=1, topk_group=1, norm_topk_prob=False),
    permute_qk=False,
    rms_norm=True,
    vocab="bpe",
    tokenizer_pre="deepseek-llm",
    arch_kv=_deepseek2_kv,
    hf_reads=False,
)
# DeepSeek V3 (DeepseekV3ForCausalLM, written as deepseek2): sigmoid routing (scoring_func, which
# V3's config.json carries and DeepseekV3Config does not keep), e_score_correction_bias as
# exp_probs_b, 2 groups of 4 experts of which a token's experts come from 1, top-2 renormalised.
ARCHS["deepseek3"] = replace(
    ARCHS["deepseek2"],
    config_cls=transformers.DeepseekV3Config,
    defaults=dict(_DEEPSEEK_SHAPE, n_group=2, topk_group=1, norm_topk_prob=True),
    tokenizer_pre="deepseek-v3",
    arch_kv=lambda config: _deepseek2_kv(config) | {gguf.Keys.LLM.EXPERT_GATING_FUNC: (2, VT.UINT32)},
)

# ---------------------------------------------------------------------------------------------
# tiny models


def head_dim(config: Any) -> int:
    """d_h: the config's `head_dim` where it has one (Qwen2's has none), else d_e / H."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads

def _granitehybrid_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """GraniteHybridModel.set_gguf_parameters over GraniteMoeModel's: the multipliers, the expert keys
    (expert_count 0 in a file with no experts), the shared expert's width, the Mamba-2 sizes (d_inner
    = mamba_expand · d_e, time_step_rank = mamba_n_heads), the key/value heads per block (0 in a
    "mamba" block), and rope.scaling.finetuned, false for a GraniteMoeHybrid with Mamba blocks, which
    then gets the stand-in context_length 2^20.

    >>> c = transformers.GraniteMoeHybridConfig(num_hidden_layers=2, layer_types=["mamba", "attention"])
    >>> kv = _granitehybrid_kv(c)
    >>> kv["{arch}.attention.head_count_kv"][0], kv["{arch}.rope.scaling.finetuned"][0]
    ([0, 32], False)
    """
    K, Att, SSM = gguf.Keys.LLM, gguf.Keys.Attention, gguf.Keys.SSM
    kv = _granite_kv(config) | _moe_kv(config)
    if config.shared_intermediate_size:
        kv[K.EXPERT_SHARED_FEED_FORWARD_LENGTH] = (config.shared_intermediate_size, VT.UINT32)
    # the checkpoint's "mamba" / "attention", which transformers 5 reads as "linear_attention" / "full_attention"
    mamba = [t in ("mamba", "linear_attention") for t in config.layer_types]
    kv |= {
        SSM.CONV_KERNEL: (config.mamba_d_conv, VT.UINT32),
        SSM.STATE_SIZE: (config.mamba_d_state, VT.UINT32),
        SSM.GROUP_COUNT: (config.mamba_n_groups, VT.UINT32),
        SSM.INNER_SIZE: (int(config.mamba_expand * config.hidden_size), VT.UINT32),
        SSM.TIME_STEP_RANK: (config.mamba_n_heads, VT.UINT32),
        Att.HEAD_COUNT_KV: ([0 if m else config.num_key_value_heads for m in mamba], VT.ARRAY),
        gguf.Keys.Rope.SCALING_FINETUNED: (not any(mamba), VT.BOOL),
    }
    if any(mamba):
        kv[K.CONTEXT_LENGTH] = (2**20, VT.UINT32)
    return kv


def _granitehybrid_reshaped(config: Any) -> dict[str, tuple[int, ...]]:
    """Mamba2Model.modify_tensors, for the Mamba blocks: A and D to [H, 1], the norm to [G, d_inner / G]."""
    d_inner = int(config.mamba_expand * config.hidden_size)
    H, G = config.mamba_n_heads, config.mamba_n_groups
    return {"ssm_a": (H, 1), "ssm_d": (H, 1), "ssm_norm.weight": (G, d_inner // G)}


# Granite 4.0 hybrid as GraniteHybridModel converts it (Mamba2Model + GraniteMoeModel; conversion/granite.py):
# Q/K permuted (undo_permute), no head_dim keys, Granite's multipliers, the experts' input_linear split
# into gate; up and shared_mlp's into ffn_gate_shexp; ffn_up_shexp, the Mamba-2 tensors as mamba2's
# (dt_bias renamed, A = −exp(A_log) and D as [H, 1], the norm as [G, d_inner / G], the convolution
# squeezed). Four blocks, mamba, attention, mamba, attention; no RoPE ("nope", which the converter's
# rope.scaling.finetuned = false says); 4 experts of 32, top 2, a shared expert of 64; untied. Granite
# 4.0's tokenizer hashes to llama.cpp's dbrx pre-tokenizer (a cl100k-style byte-level BPE).
ARCHS["granitehybrid"] = ArchSpec(
    gguf.MODEL_ARCH.GRANITE_HYBRID,
    transformers.GraniteMoeHybridConfig,
    dict(
        hidden_size=32,  # d_e
        num_attention_heads=4,  # H
        num_key_value_heads=2,  # H_kv in the attention blocks
        num_hidden_layers=4,  # L
        layer_types=["mamba", "attention", "mamba", "attention"],
        intermediate_size=32,  # each expert's width (a multiple of 32: ffn_down_exps can be Q8_0)
        num_local_experts=4,
        num_experts_per_tok=2,
        shared_intermediate_size=64,  # d_sh
        mamba_n_heads=8,  # H_s: 8 heads of 8 channels (d_inner = 64) in 2 groups
        mamba_d_head=8,
        mamba_n_groups=2,
        mamba_d_state=16,  # ≠ the head size: the state's two axes cannot be swapped unseen
        mamba_d_conv=4,
        mamba_expand=2,
        mamba_chunk_size=8,  # transformers' SSD chunks: the tests' sequences cross chunk borders
        mamba_conv_bias=True,
        mamba_proj_bias=False,  # llama.cpp reads no ssm_in / ssm_out bias
        position_embedding_type="nope",
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        embedding_multiplier=2.0,  # Granite 4.0's 12 would leave the tiny blocks' outputs small
        residual_multiplier=0.22,
        attention_multiplier=0.15,  # ≠ 1/√d_h
        logits_scaling=2.5,
        vocab_size=288,  # a multiple of 8: the converter pads to one
        tie_word_embeddings=False,
        use_cache=False,
    ),
    permute_qk=True,
    rms_norm=True,
    vocab="bpe",
    tokenizer_pre="dbrx",
    absent_keys=_NO_HEAD_DIM,
    hf_reads=False,
    arch_kv=_granitehybrid_kv,
    reshaped=_granitehybrid_reshaped,
    # as for Mamba-2: each stage O(1), step sizes softplus(N(0, 1)), decay rates exp(N(0, 1)); queries and
    # keys large enough that scores (and RoPE, where a file asks for it) move the attention, its output
    # as large as a Mamba-2 block's
    init_std=(
        ("in_proj.weight", 0.2),
        ("conv1d.weight", 0.5),
        ("dt_bias", 1.0),
        ("A_log", 1.0),
        (".D", 1.0),
        ("q_proj.weight", 0.4),
        ("k_proj.weight", 0.4),
        ("v_proj.weight", 0.3),
        ("o_proj.weight", 0.3),
    ),
)


def _falcon_h1_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """FalconH1Model.set_gguf_parameters over Mamba2Model's (conversion/falcon_h1.py): Mamba-2's sizes
    with d_inner = mamba_d_ssm and time_step_rank = mamba_d_ssm / mamba_d_head, then the attention's
    keys (key_length = value_length = head_dim), the MLP width and the real context length over
    Mamba-2's stand-ins; no rope.dimension_count, no multiplier (every one is folded into a weight).

    >>> kv = _falcon_h1_kv(transformers.FalconH1Config(mamba_d_ssm=96, mamba_n_heads=6, head_dim=8))
    >>> [kv["{arch}." + k][0] for k in ("ssm.inner_size", "ssm.time_step_rank", "attention.key_length")]
    [96, 6, 8]
    """
    K, Att, SSM = gguf.Keys.LLM, gguf.Keys.Attention, gguf.Keys.SSM
    return {
        K.CONTEXT_LENGTH: (config.max_position_embeddings, VT.UINT32),
        K.EMBEDDING_LENGTH: (config.hidden_size, VT.UINT32),
        K.FEED_FORWARD_LENGTH: (config.intermediate_size, VT.UINT32),
        Att.HEAD_COUNT: (config.num_attention_heads, VT.UINT32),
        K.BLOCK_COUNT: (config.num_hidden_layers, VT.UINT32),
        SSM.CONV_KERNEL: (config.mamba_d_conv, VT.UINT32),
        SSM.INNER_SIZE: (config.mamba_d_ssm, VT.UINT32),
        SSM.STATE_SIZE: (config.mamba_d_state, VT.UINT32),
        SSM.TIME_STEP_RANK: (config.mamba_d_ssm // config.mamba_d_head, VT.UINT32),
        SSM.GROUP_COUNT: (config.mamba_n_groups, VT.UINT32),
        Att.LAYERNORM_RMS_EPS: (config.rms_norm_eps, VT.FLOAT32),
        K.VOCAB_SIZE: (config.vocab_size, VT.UINT32),
        Att.HEAD_COUNT_KV: (config.num_key_value_heads, VT.UINT32),
        Att.KEY_LENGTH: (config.head_dim, VT.UINT32),
        Att.VALUE_LENGTH: (config.head_dim, VT.UINT32),
        gguf.Keys.Rope.FREQ_BASE: (config.rope_parameters["rope_theta"], VT.FLOAT32),
    }


def _falcon_h1_scaled(config: Any) -> dict[str, tuple[Any, ...]]:
    """FalconH1Model.modify_tensors: each µP multiplier folded into the weight it follows. ssm_in's rows
    z, x (d_inner each), B, C (G·d_state each) and one step size per head take ssm_multipliers in
    that order, after ssm_in_multiplier; attn_k takes key_multiplier, then attention_in_multiplier.

    >>> s = _falcon_h1_scaled(transformers.FalconH1Config(mamba_d_ssm=4, mamba_n_heads=2, mamba_n_groups=1,
    ...     mamba_d_state=1, ssm_multipliers=[1.0, 2.0, 3.0, 4.0, 5.0]))
    >>> s["ssm_in.weight"][1].tolist()  # z, z, z, z, x, x, x, x, B, C, dt, dt
    [1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 3.0, 4.0, 5.0, 5.0]
    """
    d_i, gs, m = config.mamba_d_ssm, config.mamba_n_groups * config.mamba_d_state, config.ssm_multipliers
    sizes = (d_i, d_i, gs, gs, config.mamba_n_heads)
    rows = np.concatenate([np.full(n, f, dtype=np.float32) for n, f in zip(sizes, m, strict=True)])
    a_in = config.attention_in_multiplier
    return {
        "token_embd.weight": (config.embedding_multiplier,),
        "output.weight": (config.lm_head_multiplier,),
        "attn_q.weight": (a_in,),
        "attn_k.weight": (config.key_multiplier, a_in),
        "attn_v.weight": (a_in,),
        "attn_output.weight": (config.attention_out_multiplier,),
        "ssm_in.weight": (config.ssm_in_multiplier, rows),
        "ssm_out.weight": (config.ssm_out_multiplier,),
        "ffn_gate.weight": (config.mlp_multipliers[0],),
        "ffn_down.weight": (config.mlp_multipliers[1],),
    }


def _falcon_h1_reshaped(config: Any) -> dict[str, tuple[int, ...]]:
    """Mamba2Model.modify_tensors: A and D to [H, 1] (H = mamba_n_heads); the mixer's norm, where the
    config has one (mamba_rms_norm), to [G, d_inner / G]."""
    H, G = config.mamba_n_heads, config.mamba_n_groups
    return {"ssm_a": (H, 1), "ssm_d": (H, 1), "ssm_norm.weight": (G, config.mamba_d_ssm // G)}


# Falcon-H1 as FalconH1Model converts it (Mamba2Model's tensors, LlamaModel's names for attention but
# no Q/K permutation: llama.cpp rotates halves): attention and a Mamba-2 mixer side by side in every
# block, then a SwiGLU MLP; every µP multiplier ≠ 1 and folded into its weight (_falcon_h1_scaled);
# head_dim 8 ≠ d_e / H; d_inner = mamba_d_ssm = 96 ≠ 2·d_e, 6 heads of 16 channels in 2 groups;
# no mixer RMSNorm (mamba_rms_norm false, as in the released models: no ssm_norm tensor); untied.
ARCHS["falcon-h1"] = ArchSpec(
    gguf.MODEL_ARCH.FALCON_H1,
    transformers.FalconH1Config,
    dict(
        hidden_size=64,  # d_e
        num_attention_heads=4,  # H
        num_key_value_heads=2,  # H_kv
        head_dim=8,  # d_h ≠ d_e / H: llama.cpp reads it as attention.key_length
        num_hidden_layers=2,  # L
        intermediate_size=96,  # d_ff, a multiple of 32 so ffn_down can be Q8_0
        mamba_d_ssm=96,  # d_inner, independent of d_e in Falcon-H1
        mamba_n_heads=6,
        mamba_d_head=16,
        mamba_n_groups=2,  # heads 1–3 read group 1's B and C, heads 4–6 group 2's
        mamba_d_state=8,  # ≠ the head size
        mamba_d_conv=4,
        mamba_chunk_size=8,  # transformers' SSD chunks: the tests' sequences cross chunk borders
        mamba_conv_bias=True,
        mamba_proj_bias=False,  # llama.cpp reads no ssm_in / ssm_out bias
        mamba_rms_norm=False,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        embedding_multiplier=1.5,
        lm_head_multiplier=0.8,
        key_multiplier=0.7,
        attention_in_multiplier=1.2,
        attention_out_multiplier=0.9,
        ssm_in_multiplier=1.25,
        ssm_out_multiplier=0.8,
        mlp_multipliers=[0.6, 1.6],  # gate, down
        ssm_multipliers=[1.1, 0.9, 1.2, 0.8, 1.3],  # z, x, B, C, dt
        vocab_size=288,
        tie_word_embeddings=False,
        use_cache=False,
    ),
    permute_qk=False,
    rms_norm=True,
    vocab="bpe",
    tokenizer_pre="falcon-h1",
    hf_reads=False,
    model_kv=_falcon_h1_kv,
    reshaped=_falcon_h1_reshaped,
    scaled=_falcon_h1_scaled,
    init_std=(  # as for granitehybrid's Mamba-2 and attention blocks
        ("in_proj.weight", 0.2),
        ("conv1d.weight", 0.5),
        ("dt_bias", 1.0),
        ("A_log", 1.0),
        (".D", 1.0),
        ("q_proj.weight", 0.4),
        ("k_proj.weight", 0.4),
        ("v_proj.weight", 0.3),
        ("o_proj.weight", 0.3),
    ),
)


def _llama4_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """Llama4Model.set_gguf_parameters (over LlamaModel's and TextModel's): feed_forward_length is the
    dense blocks' width (intermediate_size_mlp, which its __init__ swaps in), the experts' own width
    (intermediate_size) as expert_feed_forward_length, the interleave step, the expert counts, and
    sliding_window 0 only when every layer of the config is full attention (MobileLLM).

    >>> kv = _llama4_kv(transformers.Llama4TextConfig(intermediate_size=32, intermediate_size_mlp=96))
    >>> kv["{arch}.feed_forward_length"][0], kv["{arch}.expert_feed_forward_length"][0], "{arch}.attention.sliding_window" in kv
    (96, 32, False)
    """
    K = gguf.Keys.LLM
    kv = {
        K.FEED_FORWARD_LENGTH: (config.intermediate_size_mlp, VT.UINT32),
        K.EXPERT_COUNT: (config.num_local_experts, VT.UINT32),
        K.EXPERT_USED_COUNT: (config.num_experts_per_tok, VT.UINT32),
        K.EXPERT_FEED_FORWARD_LENGTH: (config.intermediate_size, VT.UINT32),
        K.INTERLEAVE_MOE_LAYER_STEP: (config.interleave_moe_layer_step, VT.UINT32),
    }
    if all(t == "full_attention" for t in config.layer_types):
        kv[gguf.Keys.Attention.SLIDING_WINDOW] = (0, VT.UINT32)
    return kv


# Llama 4 (text) as Llama4Model converts it (conversion/llama4.py, a LlamaModel with undo_permute False):
# Q/K unpermuted (transformers' Llama 4 rotates adjacent pairs, llama.cpp's rope type NORM), the experts'
# gate_up_proj [E, d_e, 2·d_ff] swapped and split, down_proj swapped, byte-level BPE (pre "llama4"),
# rope_freqs for llama3 RoPE scaling as Scout's. Tiny: 4 blocks, 1–3 chunked with RoPE and q/k L2 norms,
# 4 NoPE (the config's no_rope_layer_interval 4, llama.cpp's fixed step); blocks 2 and 4 with 4 experts
# of 32, top-1, and a shared expert, 1 and 3 a SwiGLU of 96; chunks and the temperature's floor 8192
# as llama.cpp fixes them (tests/models/test_llama4.py shrinks both in card and model); untied.
ARCHS["llama4"] = ArchSpec(
    gguf.MODEL_ARCH.LLAMA4,
    transformers.Llama4TextConfig,
    dict(
        _ROPE_GQA,
        num_hidden_layers=4,
        head_dim=16,  # the config's default is 128
        intermediate_size=32,  # each expert's width, and the shared expert's
        intermediate_size_mlp=96,  # the dense blocks' width
        num_local_experts=4,
        num_experts_per_tok=1,
        interleave_moe_layer_step=2,
        no_rope_layer_interval=4,
        attention_chunk_size=8192,
        floor_scale=8192,
        attn_scale=0.1,
        attn_temperature_tuning=True,
        use_qk_norm=True,
        rope_parameters={  # llama3 scaling, as Scout's: divisors 1, 1.29, 7.67, 8, … (rope_freqs)
            "rope_type": "llama3",
            "rope_theta": 1e4,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        vocab_size=288,
        pad_token_id=None,  # the config's 200018 is past the tiny vocabulary
        tie_word_embeddings=False,
    ),
    permute_qk=False,
    rms_norm=True,
    vocab="bpe",
    tokenizer_pre="llama4",
    arch_kv=_llama4_kv,
    extra_tensors=_llama3_rope_freqs,
    hf_reads=False,
    experts_in_out=True,
)


def _gpt_oss_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """GptOssModel.set_gguf_parameters over TextModel's: the sliding window, the experts' width
    (intermediate_size), the expert keys; under YaRN its type, factor, original context and the betas
    the rope parameters hold (which llama.cpp's gpt-oss does not read).

    >>> kv = _gpt_oss_kv(transformers.GptOssConfig(sliding_window=4, intermediate_size=32))
    >>> kv["{arch}.attention.sliding_window"][0], kv["{arch}.expert_feed_forward_length"][0]
    (4, 32)
    """
    K, Att, Rope = gguf.Keys.LLM, gguf.Keys.Attention, gguf.Keys.Rope
    kv = _moe_kv(config) | {
        Att.SLIDING_WINDOW: (int(config.sliding_window), VT.UINT32),
        K.EXPERT_FEED_FORWARD_LENGTH: (config.intermediate_size, VT.UINT32),
    }
    rope = config.rope_parameters or {}
    if rope.get("rope_type") == "yarn":
        kv |= {
            Rope.SCALING_TYPE: ("yarn", VT.STRING),
            Rope.SCALING_FACTOR: (float(rope["factor"]), VT.FLOAT32),
            Rope.SCALING_ORIG_CTX_LEN: (int(rope["original_max_position_embeddings"]), VT.UINT32),
        }
        betas = {Rope.SCALING_YARN_BETA_FAST: "beta_fast", Rope.SCALING_YARN_BETA_SLOW: "beta_slow"}
        kv |= {key: (float(rope[n]), VT.FLOAT32) for key, n in betas.items() if rope.get(n) is not None}
    return kv


# gpt-oss tiny, as GptOssModel converts it (a TextModel: key_length = head_dim 32 ≠ d_e / H = 16):
# q/k/v/o biases, per-head sinks (drawn with σ = 1 so that they move the logits), RoPE on halves
# (Q/K unpermuted) under YaRN ×4 over an original context of 32 (the tests' 64 tokens pass it; no
# `truncate: false`, which transformers honours and llama.cpp does not), four blocks alternating
# sliding (window 4) and full, 4 experts of 32, top-2, in a Q8_0-able layout. transformers' GGUF
# loader reads no gpt-oss.
ARCHS["gpt-oss"] = ArchSpec(
    gguf.MODEL_ARCH.GPT_OSS,
    transformers.GptOssConfig,
    dict(
        _ROPE_GQA,
        num_hidden_layers=4,
        head_dim=32,
        vocab_size=288,
        intermediate_size=32,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=4,
        attention_bias=True,
        rope_parameters={
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32,
            "beta_fast": 32.0, "beta_slow": 1.0,
        },
        tie_word_embeddings=False,
    ),
    permute_qk=False,
    rms_norm=True,
    vocab="bpe",
    tokenizer_pre="gpt-4o",
    arch_kv=_gpt_oss_kv,
    hf_reads=False,
    init_std=(("self_attn.sinks", 1.0),),
    interleaved_experts=True,
)  # fmt: skip


def _qwen3next_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """Qwen3NextModel.set_gguf_parameters over Qwen2MoeModel's: the expert keys, the DeltaNet sizes
    under ssm.* (state_size = linear_key_head_dim, group_count = linear_num_key_heads, time_step_rank =
    linear_num_value_heads, inner_size = value heads × their size), full_attention_interval (the
    config.json key, which transformers turns into layer_types), and rope.dimension_count =
    int(head_dim · partial_rotary_factor).

    >>> c = transformers.Qwen3NextConfig(head_dim=32, full_attention_interval=2, linear_num_value_heads=4)
    >>> kv = _qwen3next_kv(c)
    >>> kv["{arch}.full_attention_interval"][0], kv["{arch}.rope.dimension_count"][0]
    (2, 8)
    """
    SSM = gguf.Keys.SSM
    interval = config.layer_types.index("full_attention") + 1
    kinds = ("linear_attention", "full_attention")
    pattern = [kinds[(i + 1) % interval == 0] for i in range(len(config.layer_types))]
    assert config.layer_types == pattern, "a Qwen3-Next config.json gives the layout by its interval only"
    rotary = config.rope_parameters.get("partial_rotary_factor", 0.25)
    return _moe_kv(config) | {
        SSM.CONV_KERNEL: (config.linear_conv_kernel_dim, VT.UINT32),
        SSM.STATE_SIZE: (config.linear_key_head_dim, VT.UINT32),
        SSM.GROUP_COUNT: (config.linear_num_key_heads, VT.UINT32),
        SSM.TIME_STEP_RANK: (config.linear_num_value_heads, VT.UINT32),
        SSM.INNER_SIZE: (config.linear_value_head_dim * config.linear_num_value_heads, VT.UINT32),
        gguf.Keys.LLM.FULL_ATTENTION_INTERVAL: (interval, VT.UINT32),
        gguf.Keys.Rope.DIMENSION_COUNT: (int(head_dim(config) * rotary), VT.UINT32),
    }


def _qwen3next_gathered(config: Any) -> dict[str, tuple[tuple[str, tuple[int, ...]], ...]]:
    """Qwen3NextModel.modify_tensors: in_proj_qkvz holds, per key head, rows q (d_k), k (d_k), v and z
    (r·d_v each, r value heads per key head); the converter writes the q rows of every key head, then
    their k rows, then the v rows as attn_qkv, and the z rows as attn_gate.

    >>> c = transformers.Qwen3NextConfig(linear_num_key_heads=2, linear_num_value_heads=2,
    ...     linear_key_head_dim=1, linear_value_head_dim=1)
    >>> _qwen3next_gathered(c)["linear_attn.in_proj_qkvz.weight"]
    (('attn_qkv.weight', (0, 4, 1, 5, 2, 6)), ('attn_gate.weight', (3, 7)))
    """
    G, H_s = config.linear_num_key_heads, config.linear_num_value_heads
    d_k, w = config.linear_key_head_dim, H_s // G * config.linear_value_head_dim
    per = 2 * d_k + 2 * w  # rows of one key head's group
    parts = [(0, d_k), (d_k, 2 * d_k), (2 * d_k, 2 * d_k + w), (2 * d_k + w, per)]  # q, k, v, z
    rows = [tuple(g * per + i for g in range(G) for i in range(a, b)) for a, b in parts]
    qkv, z = ("attn_qkv.weight", rows[0] + rows[1] + rows[2]), ("attn_gate.weight", rows[3])
    return {"linear_attn.in_proj_qkvz.weight": (qkv, z)}


# Qwen3-Next as Qwen3NextModel converts it (conversion/qwen.py: Qwen2MoeModel's keys and experts, then
# _qwen3next_kv; in_proj_qkvz un-interleaved into attn_qkv and attn_gate; A stored as −exp(A_log), the
# convolution squeezed, dt_bias renamed ssm_dt.bias; every norm but linear_attn.norm + 1). Four blocks,
# DeltaNet, attention, DeltaNet, attention (full_attention_interval 2); the DeltaNet blocks with 2 key
# heads and 4 value heads of 32; the attention's 4 heads of 32 (GQA 4/2), RoPE on 8 of them; top-2 of 4
# experts of 32 renormalised, a gated shared expert of 32; byte-level BPE (qwen2), untied.
ARCHS["qwen3next"] = ArchSpec(
    gguf.MODEL_ARCH.QWEN3NEXT,
    transformers.Qwen3NextConfig,
    dict(
        _QWEN_MOE_SHAPE,
        num_hidden_layers=4,  # L
        full_attention_interval=2,
        head_dim=32,  # d_h ≠ d_e / H
        num_experts=4,  # E
        moe_intermediate_size=32,  # d_x
        shared_expert_intermediate_size=32,  # d_sh
        norm_topk_prob=True,  # llama.cpp renormalises
        linear_num_key_heads=2,  # G
        linear_num_value_heads=4,  # H_s
        linear_key_head_dim=32,  # d_s
        linear_value_head_dim=32,  # d_v (llama.cpp requires d_v = d_s)
        linear_conv_kernel_dim=4,
        # the gated RMSNorm of a head whose memory reads near 0 (q ⊥ the keys so far) amplifies float32
        # rounding; Qwen3-Next's 1e-6 takes a cached pass past the kv-cache suite's 1e-5, 1e-5 does not
        rms_norm_eps=1e-5,
        use_cache=False,
    ),
    **_QWEN_MOE_FILE | dict(arch_kv=_qwen3next_kv),
    norm_shift=1.0,
    unshifted=("linear_attn.norm.weight",),
    gathered=_qwen3next_gathered,
    hf_reads=False,
    # decay rates exp(N(0, 1)) and their offsets dt_bias of a unit, as Mamba's; the convolution's output
    # O(1); β and the decays selective; queries and keys large enough that scores move the attention
    init_std=(
        ("A_log", 1.0),
        ("dt_bias", 1.0),
        ("conv1d.weight", 0.3),
        ("in_proj_ba.weight", 0.3),
        ("q_proj.weight", 0.3),
        ("k_proj.weight", 0.3),
    ),
)


def _nemotron_h_kv(config: Any) -> dict[str, tuple[Any, VT]]:
    """NemotronHModel.set_gguf_parameters over GraniteHybridModel's (conversion/nemotron.py, granite.py):
    TextModel's keys from the checkpoint's config.json (no rope_theta there: no rope.freq_base; its
    rms_norm_eps and layer_norm_epsilon, both), LlamaModel's vocab_size and rope.dimension_count = d_e / H
    (GraniteModel pops head_dim first), GraniteHybridModel's Mamba-2 sizes (d_inner = mamba_num_heads ·
    mamba_head_dim, time_step_rank = mamba_num_heads), the key/value heads per block (0 but in a "*"
    block), rope.scaling.finetuned false and the stand-in context_length 2^20; then NemotronHModel's
    key_length = value_length = head_dim and the MLP width per block (0 but in a "-" block). The dense
    converter also writes add_bos_token true (NemotronHModel.set_vocab).

    >>> c = transformers.NemotronHConfig(layers_block_type=["linear_attention", "mlp", "full_attention"])
    >>> kv = _nemotron_h_kv(c)
    >>> kv["{arch}.attention.head_count_kv"][0], kv["{arch}.feed_forward_length"][0]
    ([0, 0, 8], [0, 21504, 0])
    """
    K, Att, SSM = gguf.Keys.LLM, gguf.Keys.Attention, gguf.Keys.SSM
    kinds = config.layers_block_type
    return {
        K.BLOCK_COUNT: (len(kinds), VT.UINT32),
        K.CONTEXT_LENGTH: (2**20, VT.UINT32),
        K.EMBEDDING_LENGTH: (config.hidden_size, VT.UINT32),
        K.FEED_FORWARD_LENGTH: ([config.intermediate_size if k == "mlp" else 0 for k in kinds], VT.ARRAY),
        Att.HEAD_COUNT: (config.num_attention_heads, VT.UINT32),
        Att.HEAD_COUNT_KV: ([config.num_key_value_heads if k == "full_attention" else 0 for k in kinds], VT.ARRAY),
        Att.LAYERNORM_RMS_EPS: (config.layer_norm_epsilon, VT.FLOAT32),
        Att.LAYERNORM_EPS: (config.layer_norm_epsilon, VT.FLOAT32),
        K.VOCAB_SIZE: (config.vocab_size, VT.UINT32),
        gguf.Keys.Rope.DIMENSION_COUNT: (config.hidden_size // config.num_attention_heads, VT.UINT32),
        SSM.CONV_KERNEL: (config.conv_kernel, VT.UINT32),
        SSM.STATE_SIZE: (config.ssm_state_size, VT.UINT32),
        SSM.GROUP_COUNT: (config.n_groups, VT.UINT32),
        SSM.INNER_SIZE: (config.mamba_num_heads * config.mamba_head_dim, VT.UINT32),
        SSM.TIME_STEP_RANK: (config.mamba_num_heads, VT.UINT32),
        gguf.Keys.Rope.SCALING_FINETUNED: (False, VT.BOOL),
        Att.KEY_LENGTH: (config.head_dim, VT.UINT32),
        Att.VALUE_LENGTH: (config.head_dim, VT.UINT32),
        gguf.Keys.Tokenizer.ADD_BOS: (True, VT.BOOL),
    }


def _nemotron_h_reshaped(config: Any) -> dict[str, tuple[int, ...]]:
    """Mamba2Model.modify_tensors, for the Mamba-2 blocks: A and D to [H, 1], the norm to [G, d_inner / G]."""
    H, G = config.mamba_num_heads, config.n_groups
    return {"ssm_a": (H, 1), "ssm_d": (H, 1), "ssm_norm.weight": (G, H * config.mamba_head_dim // G)}


# Nemotron-H as NemotronHModel converts it (GraniteHybridModel: Q/K permuted by LlamaModel, the Mamba-2
# tensors as mamba2's, the MLP's up_proj and down_proj as they are), from a config.json without
# num_experts_per_tok (else it would be nemotron_h_moe). Six blocks, pattern "M-*-M-": Mamba-2 (8 heads
# of 8 channels, d_inner 64, in 2 groups, d_state 16), squared-ReLU MLPs of 96, GQA 4/2 with head_dim
# 8 ≠ d_e / H = 16; no biases (use_bias, mlp_bias false, as released); untied. Nemotron-H's tokenizer
# (Mistral NeMo's) hashes to llama.cpp's tekken pre-tokenizer.
ARCHS["nemotron_h"] = ArchSpec(
    gguf.MODEL_ARCH.NEMOTRON_H,
    transformers.NemotronHConfig,
    dict(
        hidden_size=64,  # d_e
        layers_block_type=["linear_attention", "mlp", "full_attention", "mlp", "linear_attention", "mlp"],
        num_attention_heads=4,  # H
        num_key_value_heads=2,  # H_kv in the attention block
        head_dim=8,  # d_h ≠ d_e / H: attention.key_length
        intermediate_size=96,  # the MLP's width (a multiple of 32: ffn_down can be Q8_0)
        mamba_num_heads=8,  # H_s: 8 heads of 8 channels (d_inner = 64) in 2 groups
        mamba_head_dim=8,
        n_groups=2,
        ssm_state_size=16,  # ≠ the head size: the state's two axes cannot be swapped unseen
        conv_kernel=4,
        chunk_size=8,  # transformers' SSD chunks: the tests' sequences cross chunk borders
        use_conv_bias=True,
        use_bias=False,  # llama.cpp reads no ssm_in / ssm_out bias
        mlp_bias=False,
        max_position_embeddings=128,
        layer_norm_epsilon=1e-5,
        vocab_size=288,  # a multiple of 8: the converter pads to one
        tie_word_embeddings=False,
        use_cache=False,
    ),
    permute_qk=True,
    rms_norm=True,
    vocab="bpe",
    tokenizer_pre="tekken",
    hf_reads=False,
    model_kv=_nemotron_h_kv,
    reshaped=_nemotron_h_reshaped,
    # as for granitehybrid's Mamba-2 blocks; queries and keys drawn smaller than its (d_e is twice its 32):
    # scores of a few units, where 0.4 made the softmax sharp enough that float32 rounding took cached
    # decoding past the kv-cache suite's 1e-5; the MLP's up_proj large enough that ReLU² moves the logits
    init_std=(
        ("in_proj.weight", 0.2),
        ("conv1d.weight", 0.5),
        ("dt_bias", 1.0),
        ("A_log", 1.0),
        (".D", 1.0),
        ("q_proj.weight", 0.25),
        ("k_proj.weight", 0.25),
        ("v_proj.weight", 0.3),
        ("o_proj.weight", 0.3),
        ("up_proj.weight", 0.2),
    ),
)
