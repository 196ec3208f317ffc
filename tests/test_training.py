"""The torch target trains: random init from a card's hyperparameters, autograd, an optimizer.

The models come from library cards with concrete `= value` hyperparameters (`load(card,
target="torch")`, no file); their parameters carry the GGUF tensor names the card binds, so a
trained `state_dict()` can be written back to GGUF under the same names.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_models_oracle import CARD_VALUES, bound_library_card

from toycards.models.load import load

torch = pytest.importorskip("torch")


def gguf_names(model) -> set[str]:
    """The tensor names the bound card asks for (one per parameter, per layer)."""
    return {p.key for p in model.bound.params}


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_parameters_are_named_after_gguf_tensors(name):
    model = load(bound_library_card(name), target="torch")
    names = set(model.state_dict())
    assert names == gguf_names(model)
    L = CARD_VALUES["L"]
    assert {f"blk.{i}.ffn_up.weight" for i in range(L)} <= names
    assert "token_embd.weight" in names and f"blk.{L}.ffn_up.weight" not in names
    for key, param in model.named_parameters():
        assert tuple(param.shape) == next(p.stored_shape for p in model.bound.params if p.key == key), key


def test_tied_output_is_one_parameter(oracle_files):
    """A file without output.weight: the unembedding *is* the token embedding, trained as one."""
    model = load(oracle_files("llama-tied", "F32").path, target="torch")
    state = model.state_dict()
    assert "token_embd.weight" in state
    shared = [n for n, _ in model.named_parameters() if n in ("token_embd.weight", "output.weight")]
    assert len(shared) == 1, shared
    if "output.weight" in state:
        assert state["output.weight"].data_ptr() == state["token_embd.weight"].data_ptr()


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_few_optimizer_steps_lower_the_loss(name):
    torch.manual_seed(0)
    model = load(bound_library_card(name), target="torch", seed=1)
    model.train()
    n_vocab = model.hp["N_V"]
    ids = torch.from_numpy(np.random.default_rng(0).integers(0, n_vocab, size=(4, 16)))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    def loss_fn():
        logits = model(ids)  # [B, T, N_V]
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, n_vocab), ids[:, 1:].reshape(-1))

    losses = []
    for _ in range(12):
        optimizer.zero_grad()
        loss = loss_fn()
        loss.backward()
        if not losses:
            no_grad = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
            assert not no_grad, f"parameters without a gradient: {no_grad}"
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(np.log(n_vocab), rel=0.05), "random init should predict ~uniformly"
    assert losses[-1] < 0.5 * losses[0], f"loss {losses[0]:.3f} → {losses[-1]:.3f}: {losses}"
