"""A training step on the torch target: parameters, gradients and an optimizer.

Random init: models from library cards with concrete `= value` hyperparameters (`load(card,
target="torch")`, no file); their parameters carry the GGUF tensor names the card binds, so a
trained `state_dict()` can be written back to GGUF under the same names, and a few optimizer
steps lower the loss.

One step against transformers: the oracle file (`tests/oracle`: a tiny LlamaForCausalLM with
random weights, written to GGUF as llama.cpp's converter does, Q/K rows permuted) is loaded for
training; the trainer takes one step on windows of a token stream, and transformers scores the same
windows (`labels=` shifts them itself). The losses agree, and so does the gradient of every tensor,
once transformers' gradient is laid out as the file stores its weight (the same row permutation:
it is linear).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from oracle.hf_gguf import _tensor_plan, _to_gguf
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


def test_one_step_gives_transformers_loss_and_gradients(oracle_files):
    from toycards.models import train as training

    f = oracle_files("llama", "F32")
    hf = copy.deepcopy(f.model).float().eval()
    config = training.TrainConfig(steps=1, batch=2, seq=16, grad_clip=0.0, seed=7)
    stream = np.random.default_rng(0).integers(0, f.config.vocab_size, size=200).astype(np.int64)
    data = training.TokenData(stream, None, "oracle")
    model = load(f.path, target="torch")
    trainer = training.Trainer(model, config, data, {})
    weights_before = {n: p.detach().clone() for n, p in model.named_parameters()}
    loss = trainer.train_step()

    starts = training.window_starts(config, 1, len(stream))
    ids = torch.from_numpy(np.stack([stream[s : s + config.seq + 1] for s in starts]))
    ids = ids[:, :-1]  # transformers shifts the labels itself: windows of seq tokens, seq - 1 targets
    x, y = training.windows(stream, starts, config.seq)
    assert torch.equal(x, ids)
    hf_out = hf(input_ids=torch.cat([x, y[:, -1:]], dim=1), labels=torch.cat([x, y[:, -1:]], dim=1))
    hf_out.loss.backward()
    assert loss == pytest.approx(hf_out.loss.item(), abs=1e-5)

    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert not model.w["rope_freqs.weight"].requires_grad, "a constant fallback (or 1) is not trained"
    hf_params = dict(hf.named_parameters())
    plan = _tensor_plan(hf, f.config, "llama")
    assert {t.name for t in plan} == set(grads)
    for t in plan:
        want = _to_gguf(t, hf_params[t.hf_name].grad.numpy())
        got = grads[t.name].numpy()
        scale = float(np.abs(want).max())
        assert np.abs(got - want).max() <= 1e-5 + 1e-4 * scale, (
            f"{t.name}: max |Δ| {np.abs(got - want).max():.3g}"
        )
        assert np.array_equal(
            weights_before[t.name].numpy(), _to_gguf(t, hf_params[t.hf_name].detach().numpy())
        )
