"""The named tiny oracle cases the test suite shares, and a cache that builds each file once.

Owns: `CASES` (case name → architecture and config overrides), `OracleFile` (one written GGUF
file with the Hugging Face models it stands for) and `OracleFiles` (builds each case's model and
each (case, file type) file once per session). Leaves out: how models are built and written
(`hf_gguf`).

Example (the `oracle_files` fixture in `tests/conftest.py` is an `OracleFiles`):

    f = oracle_files("llama-tied", "Q8_0")
    expected = f.expected_logits([1, 5, 9])   # what a correct loader of f.path must produce
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .hf_gguf import hf_from_gguf, hf_logits, quantized_copy, tiny_model, write_gguf

# LongRoPE as in Phi-3-mini-128k, tiny: ℓ_max 128 over an original context of 32, θ = 100 so that every
# one of the 8 frequencies of d_h = 16 turns within 64 positions; long and short factors far apart
PHI3_LONGROPE = dict(
    original_max_position_embeddings=32,
    rope_parameters={
        "rope_type": "longrope", "rope_theta": 100.0, "original_max_position_embeddings": 32,
        "long_factor": [1.0, 1.25, 1.6, 2.0, 3.0, 4.0, 6.0, 8.0],
        "short_factor": [1.0, 1.0, 1.05, 1.1, 1.2, 1.3, 1.4, 1.5],
    },
)  # fmt: skip

# Phi-4-mini's partial rotary (it rotates 3/4 of each head), tiny: half of d_h = 16, so 4 LongRoPE factors
PHI3_PARTIAL = dict(
    original_max_position_embeddings=32,
    rope_parameters={
        "rope_type": "longrope", "rope_theta": 100.0, "original_max_position_embeddings": 32,
        "partial_rotary_factor": 0.5, "long_factor": [1.0, 1.5, 3.0, 6.0], "short_factor": [1.0, 1.1, 1.2, 1.4],
    },
)  # fmt: skip

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "gpt2": ("gpt2", {}),  # LayerNorm, learned positions, fused attn_qkv, tied output, GELU(tanh)
    "llama": ("llama", {}),  # GQA 4/2, untied output.weight, rope θ = 1e4, ε = 1e-5
    "llama-tied": ("llama", {"tie_word_embeddings": True, "rope_theta": 5e5, "rms_norm_eps": 1e-6}),
    "qwen2": ("qwen2", {}),  # q/k/v biases, NEOX rope, tied output, θ = 1e6
    "qwen3": ("qwen3", {}),  # per-head q/k RMSNorm, head_dim 128 ≠ d_e/H = 16, untied
    "starcoder2": ("starcoder2", {}),  # LayerNorm, biases everywhere, GQA, NEOX rope, GELU(tanh) MLP, tied
    "granite": ("granite", {}),  # llama + embedding ×12, residual ×0.22, scores ×0.15, logits ÷2.5; tied
    "smollm3": ("smollm3", {}),  # llama without RoPE in layer 4 (every 4th), 4 layers, θ = 1e5, tied
    "gemma": ("gemma", {}),  # embeddings · √d_e, norms stored + 1, MQA, head_dim 32 ≠ d_e/H, GeGLU
    "olmo2": ("olmo2", {}),  # norms after attention and MLP only, q/k RMSNorm over the whole width
    "gemma2": ("gemma2", {}),  # soft-capped scores (1) and logits (2), post-norms, window 4 on layer 1
    "gemma3": ("gemma3", {}),  # q/k norms, window 4 on layers 1–5, layer 6 global: θ = 1e6, linear ×4
    "olmoe": ("olmoe", {}),  # 8 experts of 32, top-2 not renormalised, q/k RMSNorm over the whole width
    "qwen3moe": ("qwen3moe", {}),  # qwen3 attention, 8 experts of 32, top-2 renormalised, untied
    "qwen2moe": ("qwen2moe", {}),  # qwen2 attention, 8 experts of 32, top-2 + a gated shared expert
    "mixtral": ("mixtral", {}),  # arch llama with experts: Q/K permuted, 8 experts of 32, top-2 renormalised
    "phi3": ("phi3", {}),  # fused attn_qkv and gate/up ffn_up, NEOX rope, untied; original context 4096 > 128
    # LongRoPE factors and attention factor, original context 32; then the same on half of each head
    "phi3-longrope": ("phi3", {**PHI3_LONGROPE}),
    "phi3-partial": ("phi3", {**PHI3_PARTIAL}),  # (Phi-4-mini rotates 3/4 of each head)
    # parallel attention and MLP, biases, RoPE on 8 of 16 entries, GELU(tanh), an output bias
    "phi2": ("phi2", {}),
    # LayerNorm, q/k/v biases (StableLM 2), GQA, RoPE on 4 of 16 entries, SwiGLU; and without biases
    "stablelm": ("stablelm", {}),
    "stablelm-nobias": ("stablelm", {"use_qkv_bias": False}),  # StableLM-3B-4E1T
    # llama.cpp reads phi2 and phi3 with one fused attn_qkv or with attn_q/k/v: the other layout
    "phi2-fused": ("phi2-fused", {}),  # phi-2 files of older converters (TheBloke's, 2023)
    "phi3-split": ("phi3-split", {}),
    # OLMo 3 (an olmo2 file with a sliding window): 3 blocks of 4 see the last 4 tokens
    "olmo3": ("olmo3", {}),
    # StableLM 2 12B: per-head q/k LayerNorms, attention and MLP in parallel from one LayerNorm, no biases
    "stablelm2-12b": ("stablelm2-12b", {}),
    # Mamba: selective state-space blocks, no attention; d_inner 64, d_state 8, d_conv 4, dt_rank 4, tied
    "mamba": ("mamba", {}),
    "mamba-untied": ("mamba", {"tie_word_embeddings": False}),  # output.weight written
    # Mamba-2: 8 heads of 8 channels in 2 groups, d_state 16, d_conv 4, d_inner 64, tied
    "mamba2": ("mamba2", {}),
    # Command R: attention and SwiGLU MLP in parallel from one bias-free LayerNorm, RoPE on adjacent
    # pairs (θ = 1000), tied, logits × 0.5; Command R+: the same with per-head q/k LayerNorms, 64 blocks
    "command-r": ("command-r", {}),
    "command-r-plus": ("command-r-plus", {}),
    # Command R7B: Command R's block, 3 sliding layers (window 4) with RoPE to 1 global without
    "cohere2": ("cohere2", {}),
    # granite's multipliers with 8 experts of 32, top-2 renormalised (input_linear split), untied
    "granitemoe": ("granitemoe", {}),
    "granitemoeshared": ("granitemoeshared", {}),  # the same file with a shared expert of 64 (ffn_*_shexp)
    "arcee": ("arcee", {}),  # llama with an ungated ReLU² MLP (ffn_up, ffn_down), untied
    # EXAONE 4.0: norms after attention and MLP only, per-head q/k RMSNorm; the 1.2B's shape (no
    # window, every block rotated, tied), and the 32B's: 64 blocks, 3 of every 4 sliding (window 4)
    # with RoPE, the 4th global without, llama3 rope_freqs, untied
    "exaone4": ("exaone4", {}),
    "exaone4-swa": ("exaone4-swa", {}),
    "seed_oss": ("seed_oss", {}),  # llama with q/k/v biases, head_dim 32 ≠ d_e/H = 16, NEOX rope, untied
    "ernie4_5": ("ernie4_5", {}),  # llama with unpermuted Q/K (adjacent-pair rope), head_dim 32 ≠ d_e/H, tied
    # GLM-4.5(-Air): q/k/v biases, RoPE on halves of 16 of 32 entries, block 1 dense, then 8 experts of 32,
    # top-2 by sigmoid + selection bias, renormalised, × 2.5, a shared expert; a NextN block not run
    "glm4moe": ("glm4moe", {}),
    # gpt-oss: q/k/v/o biases, per-head attention sinks, YaRN ×4 on halves, blocks alternating sliding
    # (window 4) and full, 4 experts of 32, top-2 by the softmax of their biased logits, clamped SwiGLU
    "gpt-oss": ("gpt-oss", {}),
    # ERNIE 4.5 MoE: ernie4_5's attention, block 1 dense, then softmax-routed top-2 of 8 experts of 32
    # with a selection bias, renormalised, plus a shared expert of 64; tied
    "ernie4_5-moe": ("ernie4_5-moe", {}),
    # Llama 4: blocks 1–3 chunked with RoPE (llama3 rope_freqs) and q/k L2 norms, block 4 NoPE with the
    # attention temperature; blocks 2 and 4 top-1 of 4 sigmoid-gated experts weighing their inputs + a
    # shared expert, 1 and 3 a SwiGLU MLP; untied
    "llama4": ("llama4", {}),
    # Apertus: per-head q/k RMSNorm, NEOX rope with llama3 rope_freqs, an ungated MLP with xIELU whose
    # per-block numbers are metadata arrays; untied
    "apertus": ("apertus", {}),
    # RoPE on halves, then per-head q/k RMSNorm; NTK-alpha RoPE folded into the base (α = 4); tied
    "hunyuan-dense": ("hunyuan-dense", {}),
    # BERT: an encoder (each token's embedding is the output), every token sees every other, learned
    # positions and token types, post-LayerNorm blocks with biases, GELU(tanh); WordPiece; mean pooling
    "bert": ("bert", {}),
    # Nomic BERT: bert with RoPE on halves (θ = 1000) in place of positions, one attn_qkv, a SwiGLU MLP,
    # no biases
    "nomic-bert": ("nomic-bert", {}),
    # ModernBERT: pre-LayerNorm blocks without offsets (none before block 1's attention), one attn_qkv,
    # RoPE on halves, block 2 of 3 local (window 4, θ = 1e4) between global ones (θ = 1.6e5), GeGLU
    "modern-bert": ("modern-bert", {}),
    # LFM2: blocks of a gated short convolution (width 3) or GQA with per-head q/k RMSNorm, as the
    # per-block head_count_kv says (0, 2, 0, 2); RoPE on halves, SwiGLU, tied
    "lfm2": ("lfm2", {}),
    # Jamba: Mamba blocks with RMSNorms of dt, B and C, and GQA blocks without positions, as the
    # per-block head_count_kv says (2, 0, 0, 2); a SwiGLU MLP in blocks 1 and 3, 4 experts of 64,
    # top-2 not renormalised, in blocks 2 and 4; SentencePiece, untied
    "jamba": ("jamba", {}),
    # DeepSeek V2: multi-head latent attention (q through rank 32; a latent of 32 + a rope part of 8
    # cached per token), block 1 dense, block 2 softmax-routed top-2 of 8 experts × 2 + a shared one;
    # V3: the same with sigmoid routing, a selection bias, 2 groups of which 1 is used, renormalised
    "deepseek2": ("deepseek2", {}),
    "deepseek3": ("deepseek3", {}),
    # Granite 4.0 hybrid: Mamba-2 blocks (8 heads in 2 groups) and GQA 4/2 without RoPE, as the per-block
    # head_count_kv says (0, 2, 0, 2); top-2 of 4 experts with a shared one; Granite's multipliers
    "granitehybrid": ("granitehybrid", {}),
    # the same with no experts, as granite-4.0-h-1b (shared_mlp written as ffn_gate, ffn_up, ffn_down; 0
    # experts per token, else llama.cpp's loader asserts), blocks attention, mamba, mamba
    "granitehybrid-dense": (
        "granitehybrid",
        {
            "num_local_experts": 0,
            "num_experts_per_tok": 0,
            "intermediate_size": 64,
            "num_hidden_layers": 3,
            "layer_types": ["attention", "mamba", "mamba"],
        },
    ),
    # Falcon-H1: GQA 4/2 (head_dim 8 ≠ d_e/H, RoPE on halves) and a Mamba-2 mixer (6 heads in 2 groups,
    # d_inner 96 ≠ 2·d_e) side by side in both blocks, a SwiGLU MLP; every µP multiplier ≠ 1; untied
    "falcon-h1": ("falcon-h1", {}),
    # Qwen3-Next: gated DeltaNet blocks (2 key heads, 4 value heads of 32, a width-4 convolution) and gated
    # GQA 4/2 with q/k RMSNorm and RoPE on 8 of 32 entries, every 2nd block (full_attention_interval 2);
    # top-2 of 4 experts renormalised plus a sigmoid-gated shared expert; norms stored + 1; untied
    "qwen3next": ("qwen3next", {}),
    # Nemotron-H: blocks "M-*-M-", each one mixer: Mamba-2 (8 heads in 2 groups), a squared-ReLU MLP, GQA 4/2
    # without positions (head_dim 8 ≠ d_e/H), as the per-block head_count_kv and feed_forward_length say
    "nemotron_h": ("nemotron_h", {}),
}


# cases whose files transformers' GGUF loader reads, but not all of: it drops LongRoPE's factor
# tensors, its attention factor and rope.dimension_count (partial rotary), so its model of these
# files is not the one they came from (llama.cpp's is: tests/models/test_phi3.py)
NOT_READ_BACK = frozenset({"phi3-longrope", "phi3-partial"})


@dataclass(frozen=True)
class OracleFile:
    """A GGUF file written by the oracle and the Hugging Face models it stands for."""

    case: str
    arch: str  # general.architecture
    ftype: str  # "F32", "F16" or "Q8_0"
    path: Path
    model: torch.nn.Module  # the float32 model the file was written from
    config: Any
    reference: torch.nn.Module  # the model whose weights are exactly the stored values (dequantized)

    def expected_logits(self, ids: list[int]) -> np.ndarray:
        """Logits `[len(ids), N_V]` that a correct loader of `path` reproduces to float rounding."""
        return hf_logits(self.reference, ids)


class OracleFiles:
    """`files(case, ftype="F32") → OracleFile`, each model built and each file written once."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._models: dict[str, tuple[torch.nn.Module, Any]] = {}
        self._files: dict[tuple[str, str], OracleFile] = {}
        self._reloaded: dict[tuple[str, str], torch.nn.Module] = {}

    def model(self, case: str) -> tuple[torch.nn.Module, Any]:
        """The float32 Hugging Face model and config of `case` (seed 0)."""
        if case not in self._models:
            arch, overrides = CASES[case]
            self._models[case] = tiny_model(arch, seed=0, **overrides)
        return self._models[case]

    def __call__(self, case: str, ftype: str = "F32") -> OracleFile:
        key = (case, ftype)
        if key not in self._files:
            arch = CASES[case][0]
            model, config = self.model(case)
            path = write_gguf(model, config, self.root / f"{case}-{ftype}.gguf", arch, ftype)
            reference = model if ftype == "F32" else quantized_copy(model, config, arch, ftype)
            self._files[key] = OracleFile(case, arch, ftype, path, model, config, reference)
        return self._files[key]

    def reloaded(self, case: str, ftype: str = "F32") -> torch.nn.Module:
        """The model `transformers` itself loads from the file (cached)."""
        key = (case, ftype)
        if key not in self._reloaded:
            self._reloaded[key] = hf_from_gguf(self(case, ftype).path)
        return self._reloaded[key]
