"""One training step of toycards' Llama against transformers' LlamaForCausalLM with the same weights.

The oracle file (`tests/oracle`: a tiny LlamaForCausalLM with random weights, written to GGUF as
llama.cpp's converter does, Q/K rows permuted) is loaded by toycards for training; the trainer
takes one step on windows of a token stream, and transformers scores the same windows
(`labels=` shifts them itself). The losses agree, and so does the gradient of every tensor, once
transformers' gradient is laid out as the file stores its weight (the same row permutation: it
is linear).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from oracle.hf_gguf import _tensor_plan, _to_gguf

from toycards.models.load import load

torch = pytest.importorskip("torch")


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
