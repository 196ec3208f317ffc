"""Tensors a file leaves out and the card fills in (`from "ffn_gate_exps.weight" or 0`).

A card may declare a tensor that a file need not hold, with a constant in its place: DeepSeek's
selection bias `exp_probs_b` (absent in V2 files), llama's `rope_freqs`, a bias. The loader
(models/load.py `filled`) gives such a tensor one float32 number broadcast to its declared shape,
which takes no memory of its own whatever the shape, on both targets and through to the products
that read it; the torch target keeps it as an expanded tensor, not trained (a fill of at most
SMALL_F32 bytes is made in memory instead). Here an expert stack of 15 GB (DeepSeek V3's 256
experts of 2048 × 7168) that the file leaves out: loading allocates none of it, and the forward
pass reads it as the zeros it stands for.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from gguf_factory import write_gguf

from toycards.models.load import load

N_V = 16
BIG = (256, 2048, 7168)  # E, d_x, d_e: the stack E × d_x × d_e float32 is 15 GB if allocated


def card_text(E: int, d_x: int, d_e: int) -> str:
    return f"""toycards 1

Algorithm: P ← Filled(x | θ)
/* an embedding, one product by a matrix of an expert stack the file may leave out, the unembedding */
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{{N_V×ℓ}}
Hyperparameters:
  d_e ∈ ℕ = {d_e}
  E ∈ ℕ = {E}
  d_x ∈ ℕ = {d_x}
  N_V ∈ ℕ
Parameters:
  W_e ∈ ℝ^{{d_e×N_V}}    from "token_embd.weight"^⊺
  W_g ∈ ℝ^{{E×d_x×d_e}}  from "ffn_gate_exps.weight" or 0
  W_u ∈ ℝ^{{N_V×d_e}}    from "output.weight"
1  ℓ ← length(x)
2  for t ∈ [ℓ]: e_t ← W_e[:, x[t]]
3  X ← [e_1, …, e_ℓ]
4  X ← X + W_g[1, :, :]^⊺ · (W_g[E, :, :] · X)
5  return P = softmax(W_u · X)
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """For (E, d_x, d_e): the card, and a file with its embedding and unembedding but no expert stack."""
    folder, made = tmp_path_factory.mktemp("filled"), {}

    def get(E: int, d_x: int, d_e: int):
        if (E, d_x, d_e) not in made:
            rng = np.random.default_rng(0)
            W_e, W_u = (rng.standard_normal((N_V, d_e)).astype(np.float32) for _ in range(2))
            stem = folder / f"filled-{E}-{d_x}-{d_e}"
            path = write_gguf(
                stem.with_suffix(".gguf"), tensors={"token_embd.weight": W_e, "output.weight": W_u}
            )
            card = stem.with_suffix(".card")
            card.write_text(card_text(E, d_x, d_e), encoding="utf-8")
            made[E, d_x, d_e] = str(card), str(path), W_e, W_u
        return made[E, d_x, d_e]

    return get


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_an_absent_expert_stack_takes_no_memory(files, target):
    card, path, W_e, W_u = files(*BIG)
    small_card, small_path, _, _ = files(4, 8, 8)
    load(small_card, weights=small_path, target=target)  # the imports and caches a first load makes
    tracemalloc.start()  # NumPy's allocations (torch's own are not traced: its storage is checked)
    try:
        model = load(card, weights=path, target=target)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # what loading allocates besides the stack (the card's module generated, the prelude checked) is
    # tens of MB at most; the stack would be 15 GB
    assert peak < 64 << 20, f"loading allocated {peak / 1e6:.0f} MB at its peak"
    stack = model.w["ffn_gate_exps.weight"]
    assert tuple(stack.shape) == BIG
    if target == "torch":
        assert stack.stride() == (0, 0, 0) and stack.untyped_storage().nbytes() == 4
        assert not stack.requires_grad  # a constant the card fills in: not trained
    else:
        assert stack.strides == (0, 0, 0) and not stack.flags.writeable
    ids = [3, 1, 4, 1, 5]
    want = W_e[ids] @ W_u.T  # the zeros add nothing: the logits of the embedding alone
    np.testing.assert_allclose(model.logits(ids), want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_a_checkpoint_loads_into_a_filled_tensor(files):
    """load_state_dict (a resumed checkpoint) first gives a filled-in constant memory of its own:
    one expanded number cannot be copied into."""
    import torch

    shape = (4, 256, 512)  # 2 MiB: past SMALL_F32, so expanded
    card, path, W_e, W_u = files(*shape)
    model = load(card, weights=path, target="torch")
    assert model.w["ffn_gate_exps.weight"].stride() == (0, 0, 0)
    weights = model.state_dict()
    weights["ffn_gate_exps.weight"] = torch.full(shape, 0.5)
    model.load_state_dict(weights)
    stack = model.w["ffn_gate_exps.weight"]
    assert stack.is_contiguous() and bool((stack == 0.5).all())
    ids = [3, 1, 4]
    X, W = W_e[ids].astype(np.float64), np.full(shape[1:], 0.5)  # W_g[1] and W_g[E]: d_x × d_e
    want = (X + X @ W.T @ W) @ W_u.T
    np.testing.assert_allclose(model.logits(ids), want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_a_small_filled_tensor_is_in_memory(files):
    """A fill of at most SMALL_F32 bytes is made in memory, contiguous: the C kernels and the
    replayed decoding steps read such tensors only (a bias `or 0` costs nothing worth sparing)."""
    card, path, _, _ = files(4, 8, 8)
    for target in ("numpy", "torch"):
        stack = load(card, weights=path, target=target).w["ffn_gate_exps.weight"]
        assert stack.is_contiguous() if target == "torch" else stack.flags.c_contiguous, target
