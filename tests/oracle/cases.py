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
}


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
