"""The torch target's kernels, as its ops and model (runtime/torch/) call them. Each returns None
where it does not apply (a tensor that needs autograd, many tokens, a type without a kernel), and
the caller then takes its own torch path.

- Weights kept in their blocks and their products (quant.py): `QuantWeight`, `float_linear`,
  `float_gemm`, `linears` (several products of one x), `swiglu` (a gated MLP in one call); a stack
  of them (stack.py): `QuantStack`, whose `W[e]` is a QuantWeight.
- The per-token glue in C (glue.py): `available`, `plain`, `rms_norm`, `silu_mul`, `rope`,
  `attention`, `gq_attention`.
- The same calls from C++ (native.py): the engine's `native()`, the module or None.
- Replayed decoding steps (replay.py): `replay_step`, `replay_constant`, `REPLAY_KEY`,
  `REPLAY_TRIES`.
"""

from toycards.engine.torch.glue import (
    attention,
    available,
    gq_attention,
    gq_attention_rows,
    plain,
    rms_norm,
    rope,
    silu_mul,
)
from toycards.engine.torch.quant import QuantWeight, float_gemm, float_linear, linears, swiglu
from toycards.engine.torch.replay import KEY as REPLAY_KEY
from toycards.engine.torch.replay import TRIES as REPLAY_TRIES
from toycards.engine.torch.replay import constant as replay_constant
from toycards.engine.torch.replay import step as replay_step
from toycards.engine.torch.stack import QuantStack

__all__ = [
    "QuantWeight",
    "QuantStack",
    "float_linear",
    "float_gemm",
    "linears",
    "swiglu",
    "available",
    "plain",
    "rms_norm",
    "silu_mul",
    "rope",
    "attention",
    "gq_attention",
    "gq_attention_rows",
    "replay_step",
    "replay_constant",
    "REPLAY_KEY",
    "REPLAY_TRIES",
]
