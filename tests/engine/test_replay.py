"""Replayed decoding steps (engine/torch/replay.py, kernels/glue.cpp's tape) against the forward pass.

The oracle is the same model's forward pass with replay turned off (TOYCARDS_REPLAY=off), which the
KV-cache and oracle tests tie to the full pass and to transformers: every step's logits must be equal
bit for bit (the same kernels on the same bytes), kept across steps (a replay must not write into what
an earlier step returned, nor into the caller's ids). Cards whose steps do something the tape cannot
hold must be refused, with the reason, and then run their forward pass; a recording that misses a write
must be caught by the replay of the recorded step that checks each tape.
"""

from __future__ import annotations

import inspect
import os
import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType
from test_quant_kernels import NO_KERNELS, llama_file

import toycards
from toycards import engine
from toycards.engine import ckernels as quant_kernels
from toycards.engine import packing
from toycards.engine.torch import glue as glue_torch
from toycards.engine.torch import native as glue_cpp
from toycards.engine.torch import replay as replay_torch
from toycards.library import library_card
from toycards.runtime.torch import ops as ops_torch

Q = GGMLQuantizationType

pytestmark = pytest.mark.skipif(
    NO_KERNELS or os.environ.get(glue_cpp.SWITCH, "").lower() == "off",
    reason="no C kernels, or the C++ glue turned off",
)

# qwen2: q/k/v biases; granite: products and a quotient by numbers (embedding, residuals, logits);
# olmo3: a window of 4 over the cache; smollm3: a layer without RoPE; gemma, gemma3: GeGLU (torch's
# GELU, a product of two tensors); starcoder2: LayerNorm with biases, GELU; gemma2: soft-capped
# scores and logits (tanh), a window on alternate layers; phi2, phi3, stablelm: μ ⊙ Q and μ ⊙ K, μ a
# constant of the model (its hyperparameters' magnitude vector: ModelAPI.constant); phi3: the gate and
# up rows of one fused weight (views of an F32 parameter), torch's SiLU outside SwiGLU
REPLAYED = ("llama", "qwen2", "qwen3", "granite", "smollm3", "olmo2", "olmo3")
REPLAYED += ("gemma", "gemma2", "gemma3", "starcoder2", "phi2", "phi3", "stablelm")
REPLAYED += ("exaone4", "exaone4-swa", "seed_oss")  # post-norms, NoPE global blocks, windows; biases
REPLAYED += ("ernie4_5",)  # unpermuted Q/K, adjacent-pair rope, head_dim ≠ d_e/H
REPLAYED += ("command-r", "cohere2")  # bias-free LayerNorm, parallel block, logits × m_z; NoPE global layers
REFUSED = {  # a card, and what its step does that the tape does not hold
    "gpt2": "an addition read a tensor no recorded call made",  # the learned positions' rows, in torch
    "olmoe": "torch's linear",  # the router's choice of experts
    "granitemoe": "torch's linear",  # the same, with granite's multipliers
    "ernie4_5-moe": "torch's linear",  # the same: MoE_biased's router (softmax, selection bias)
    "glm4moe": "torch's linear",  # the same: MoE_biased's router (sigmoid gates, selection bias)
    "llama4": "a γ that is not a weight",  # the q/k L2 norms: rms_norm with the card's ones, not a tensor
    # its attention (GQAttention with sinks) is recorded; the router's choice of experts, in the card's
    # own steps (topk of the biased logits), is not
    "gpt-oss": "torch's sort computed from an activation",
    "apertus": "torch's gt computed from an activation",  # xIELU's ⟦x > 0⟧, which the tape has no op for
    "arcee": "torch's clamp_min computed from an activation",  # ReLU (of ReLU²), which the tape has no op for
    # RoPE in the card's own steps (q/k RMSNorm after it), outside an attention site: its C kernel
    "hunyuan-dense": "torch's data_ptr read an activation",
    # the convolution blocks' State (its window of the last k_c inputs), made as zeros like the activations
    "lfm2": "torch's new_zeros computed from an activation",
    "mamba2": "torch's new_zeros computed from an activation",  # a State's zeros, shaped like its input
    # RoPE on the rope parts of the latent and the queries, in the card's steps (as hunyuan-dense)
    "deepseek2": "torch's data_ptr read an activation",
    "deepseek3": "torch's data_ptr read an activation",
    "jamba": "torch's new_zeros computed from an activation",  # the Mamba blocks' States, as mamba2's
    "granitehybrid": "torch's new_zeros computed from an activation",  # the Mamba-2 blocks' State, as mamba2's
    "falcon-h1": "torch's new_zeros computed from an activation",  # its Mamba-2 mixers' State, as mamba2's
    "qwen3next": "torch's new_zeros computed from an activation",  # the DeltaNet blocks' States
    "nemotron_h": "torch's new_zeros computed from an activation",  # the Mamba-2 blocks' State, as mamba2's
}


@pytest.fixture(scope="module")
def cx():
    module = glue_cpp.module()
    if module is None:
        pytest.skip(f"no C++ glue: {glue_cpp.build_error}")
    return module


def decode(model, ids: np.ndarray, prefill: int, replay: bool, kv_type="f32", cache=None):
    """Logits of each pass: ids[:, :prefill], then one token at a time (under no_grad); the cache."""
    os.environ[replay_torch.SWITCH] = "on" if replay else "off"
    try:
        cache = model.new_cache(kv_type) if cache is None else cache
        with torch.no_grad():
            out = [model(ids[:, :prefill], cache)]
            out += [model(ids[:, t : t + 1], cache) for t in range(prefill, ids.shape[1])]
    finally:
        del os.environ[replay_torch.SWITCH]
    return out, cache


def assert_same(got, want):
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert torch.equal(a, b), f"pass {i}: max |Δ| {float((a - b).abs().max())}"


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("case", REPLAYED)
def test_replayed_steps_equal_the_forward_pass(cx, oracle_files, case, batch, kv_type):
    model = toycards.load(oracle_files(case, "F32").path, target="torch")
    ids = np.random.default_rng(1).integers(0, model.hp["N_V"], size=(batch, 24))
    held = ids.copy()
    got, cache = decode(model, ids, 5, True, kv_type)  # 19 steps: past the buffers' 16 rows
    want, _ = decode(model, ids, 5, False, kv_type)
    assert_same(got, want)
    kept = cache.prepared.get(replay_torch.KEY)
    assert kept is not None and kept.replays >= 2, model.replay_why  # the last steps were replays
    assert (ids == held).all(), "a replay wrote into the caller's ids"


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_card_the_tape_cannot_hold_is_refused_and_runs_its_steps(cx, oracle_files, case):
    model = toycards.load(oracle_files(case, "F32").path, target="torch")
    ids = np.random.default_rng(2).integers(0, model.hp["N_V"], size=(1, 9))
    got, cache = decode(model, ids, 3, True)
    want, _ = decode(model, ids, 3, False)
    assert_same(got, want)
    assert replay_torch.KEY not in cache.prepared
    assert REFUSED[case] in model.replay_why
    assert model._replay_tries == 0  # it stopped recording


def test_a_constant_of_the_model_is_made_once_and_read_by_the_replay(cx, oracle_files):
    """Phi-3's μ (its RoPE magnitude on the rotated entries of a head) follows from the hyperparameters
    alone: the generated pass makes it at the model's first pass and keeps it (`self.constant`), the
    tape reads that tensor, and a per-pass value is still refused (test above: GPT-2's positions). Made
    in inference mode, it is no inference tensor: a pass with autograd saves it for its backward. Moved
    (`to`), the model makes it again."""
    model = toycards.load(oracle_files("phi3", "F32").path, target="torch")
    assert "mu = self.constant(" in inspect.getsource(type(model).forward)
    ids = np.random.default_rng(5).integers(0, model.hp["N_V"], size=(1, 12))
    with torch.inference_mode():
        got, cache = decode(model, ids, 4, True)
    kept = dict(model._constants)
    mu = next(v for v in kept.values() if torch.is_tensor(v) and v.dim() == 1)
    assert not mu.is_inference() and cache.prepared[replay_torch.KEY].replays >= 5
    want, _ = decode(model, ids, 4, False)
    assert_same(got, want)
    assert all(model._constants[k] is v for k, v in kept.items())  # the same objects, pass after pass
    model(torch.from_numpy(ids[:, :5])).sum().backward()  # autograd through μ ⊙ Q
    assert model.w["blk.0.attn_norm.weight"].grad is not None
    model.to("cpu")
    assert not getattr(model, "_constants", {})


class _Glue:
    """The C++ glue with some of its functions declining (the Python path then runs) or replaced."""

    def __init__(self, module, *declined, **replaced):
        self._module, self._declined, self._replaced = module, declined, replaced

    def __getattr__(self, name):
        if name in self._declined:
            return lambda *args: None
        return self._replaced.get(name) or getattr(self._module, name)


def quantized_llama(tmp_path, tied=False):
    """A 2-layer Llama of mixed block types: Q8_0, Q4_0, Q4_1 (which pack at their first decoding step), Q4_K
    and Q6_K (which pack after some decoding with the AVX-512 kernels, at their first decoding step with
    the AVX2 ones), F16 and F32."""
    kinds = (Q.Q8_0, Q.Q4_K, Q.Q4_0, Q.F16, Q.Q6_K, Q.Q4_1, Q.F32)
    return llama_file(
        tmp_path / "m.gguf", (2, 256, 512, 160, 4, 2), lambda i, name, shape: kinds[i % 7], tied=tied
    )


@pytest.mark.parametrize("tied", [False, True])
def test_weights_in_their_blocks_packed_between_replays(cx, tmp_path, monkeypatch, tied):
    """Products of every block type, the embedding's rows from its blocks (or, tied, from the output's
    packed copy), and weights that pack after a few decoding steps, between replays: the tape reads
    their new plans, and the logits stay the forward pass's."""
    monkeypatch.setattr(packing.LaterPacking, "AFTER", 3)
    monkeypatch.delenv(packing.WEIGHTS, raising=False)  # (resident weights all pack ahead)
    path = quantized_llama(tmp_path, tied)
    ids = np.random.default_rng(3).integers(0, 160, size=(1, 40))
    got_model, want_model = toycards.load(path, target="torch"), toycards.load(path, target="torch")
    for thread in threading.enumerate():  # packed ahead before decoding: a copy adopted by any model's
        if thread.name == "toycards-pack-ahead":  # thread (these two's, an earlier test's) between
            thread.join()  # replays would have the tape refresh (quant_torch.plans_adopted counts them all)
    refreshed = []

    def refresh(tape):
        refreshed.append(cx.tape_refresh(tape))
        return refreshed[-1]

    monkeypatch.setattr(glue_cpp, "module", lambda: _Glue(cx, tape_refresh=refresh))
    got, cache = decode(got_model, ids, 4, True)
    later = [
        t
        for t in (Q.Q4_K, Q.Q6_K)
        if quant_kernels.pack_rows(t) and not quant_kernels.packs_at_first_decoding(t)
    ]
    if later:  # (the AVX-512 kernels pack the K-quants after some steps)
        assert refreshed.count(True) >= 3  # weights packed between replays of one tape
    else:  # (the AVX2 kernels pack what they pack at its first decoding step)
        assert not refreshed  # no new plans, nothing to refresh
    want, _ = decode(want_model, ids, 4, False)
    assert_same(got, want)
    assert cache.prepared[replay_torch.KEY].replays >= 5, got_model.replay_why
    # a new prompt on the same cache: the tape goes with the old sequence, and comes back
    cache.reset()
    again, _ = decode(got_model, ids[:, :12], 6, True, cache=cache)
    assert_same(again, decode(want_model, ids[:, :12], 6, False)[0])


def test_steps_with_autograd_are_not_recorded(cx, oracle_files):
    model = toycards.load(oracle_files("llama", "F32").path, target="torch")
    cache = model.new_cache()
    model(torch.tensor([[1, 2, 3]]), cache)
    for t in (4, 5, 6):
        out = model(torch.tensor([[t]]), cache)
    assert out.requires_grad and replay_torch.KEY not in cache.prepared


def test_an_unseen_write_is_caught_by_the_replay_that_checks_a_tape(cx, oracle_files, monkeypatch):
    """SwiGLU through its Python path writes SiLU·up in place with a kernel the tape does not see:
    silu_mul says so (and the watch refuses the pointer it takes); were it silent, the replay of the
    recorded step would differ from its forward pass, and the tape would go (the step's cache rows
    and logits the forward pass's)."""
    path = oracle_files("llama", "F32").path
    ids = np.random.default_rng(4).integers(0, 100, size=(1, 10))
    monkeypatch.setattr(glue_cpp, "module", lambda: _Glue(cx, "swiglu"))
    monkeypatch.setattr(engine.backend("torch"), "swiglu", lambda *args: None)
    model = toycards.load(path, target="torch")
    want, _ = decode(model, ids, 3, False)
    got, cache = decode(model, ids, 3, True)
    assert_same(got, want)
    assert model.replay_why == "SiLU·up wrote in place" and replay_torch.KEY not in cache.prepared

    def silent_silu_mul(g, u):
        glue_torch._library().tc_silu_mul(
            glue_torch._P(g.data_ptr()), glue_torch._P(u.data_ptr()), glue_torch._I(g.numel())
        )
        return g

    monkeypatch.setattr(engine.backend("torch"), "silu_mul", silent_silu_mul)
    # (the watch refuses a pointer to an activation taken in Python too: let this one through)
    monkeypatch.setattr(replay_torch, "_ABOUT", replay_torch._ABOUT | {"data_ptr"})
    model = toycards.load(path, target="torch")
    got, cache = decode(model, ids, 3, True)
    assert_same(got, want)
    assert model.replay_why == "a replayed step differed from the forward pass"
    assert replay_torch.KEY not in cache.prepared and model._replay_tries == 0


@pytest.mark.parametrize(
    ("scale", "why"),
    [
        (lambda c, x: x.mul_(c), "torch's mul_ wrote to an activation"),
        (lambda c, x: (x, x.reshape(-1)[0].item())[0], "torch's item read an activation"),
        (lambda c, x: x.clone(), "torch's clone computed from an activation"),
        (lambda c, x: F.hardtanh(x, -1e30, 1e30, inplace=True), "torch's hardtanh wrote to an activation"),
    ],
)
def test_torch_reading_an_activation_spoils_the_recording(cx, oracle_files, monkeypatch, scale, why):
    """`m · Q` (ops.scale, 1 here) done otherwise: in place, through a Python number, or as a copy
    (torch's own, not a product the tape takes); each is refused, and the steps are the forward
    pass's."""
    model = toycards.load(oracle_files("llama", "F32").path, target="torch")
    ids = np.random.default_rng(5).integers(0, 100, size=(1, 8))
    want, _ = decode(model, ids, 3, False)
    monkeypatch.setattr(ops_torch, "scale", scale)
    got, cache = decode(model, ids, 3, True)
    assert_same(got, want)
    assert model.replay_why == why and replay_torch.KEY not in cache.prepared


def test_turned_off_nothing_is_recorded(cx, oracle_files, monkeypatch):
    model = toycards.load(oracle_files("llama", "F32").path, target="torch")
    ids = np.random.default_rng(6).integers(0, 100, size=(1, 6))
    _, cache = decode(model, ids, 2, False)
    assert replay_torch.KEY not in cache.prepared and model.replay_why == ""


def test_greedy_decoding_in_inference_mode_replays(cx, oracle_files):
    """Decoding as generate() does it (inference mode, the last token's logits) replays its steps, to
    the same greedy tokens."""
    from toycards.runtime.context import KVCache

    path = oracle_files("llama", "F32").path
    model = toycards.load(path, target="torch")
    ids = np.random.default_rng(7).integers(0, model.hp["N_V"], size=(1, 5))

    def greedy(replay: bool):
        os.environ[replay_torch.SWITCH] = "on" if replay else "off"
        try:
            cache, out = KVCache(), []
            logits = model._forward_numpy(ids, cache, last=True)[0, -1]
            for _ in range(10):  # (not past the 16 rows: a step past them records anew)
                out.append(int(np.argmax(logits)))
                logits = model._forward_numpy(np.array([[out[-1]]]), cache, last=True)[0, -1]
            return out, cache
        finally:
            del os.environ[replay_torch.SWITCH]

    (got, cache), (want, _) = greedy(True), greedy(False)
    assert got == want and cache.prepared[replay_torch.KEY].replays == 9  # all steps but the first


def test_two_threads_decoding_at_once(cx, oracle_files):
    """Two models decoding on two threads: a step recorded on one thread while the other calls kernels
    is refused or records as it may, and neither thread's logits change."""
    import threading

    path = oracle_files("llama", "F32").path
    ids = np.random.default_rng(8).integers(0, 100, size=(2, 1, 14))
    want = [decode(toycards.load(path, target="torch"), ids[i], 3, False)[0] for i in range(2)]
    models = [toycards.load(path, target="torch") for _ in range(2)]
    got: list = [None, None]
    errors: list = []

    def run(i: int) -> None:
        try:
            cache, out = models[i].new_cache(), []
            with torch.no_grad():
                out.append(models[i](ids[i][:, :3], cache))
                out += [models[i](ids[i][:, t : t + 1], cache) for t in range(3, 14)]
            got[i] = out
        except BaseException as e:  # (reported below, on the test's thread)
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(2):
        assert_same(got[i], want[i])


@pytest.mark.parametrize("how", ["in place", "moved"])
def test_a_weight_changed_between_steps(cx, oracle_files, how):
    """A float weight changed between decoding steps, in place (read where it is) or moved to new
    memory (`param.data = …`: the tape records anew): the steps after it are the forward pass's."""
    path = oracle_files("llama", "F32").path
    ids = np.random.default_rng(9).integers(0, 100, size=(1, 12))
    outs = []
    for replay in (True, False):
        model = toycards.load(path, target="torch")
        os.environ[replay_torch.SWITCH] = "on" if replay else "off"
        try:
            cache, out = model.new_cache(), []
            with torch.no_grad():
                out.append(model(ids[:, :3], cache))
                for t in range(3, 12):
                    if t == 8:
                        gamma = model.w["output_norm.weight"]
                        if how == "in place":
                            gamma.mul_(1.5)
                        else:
                            gamma.data = gamma.data * 1.5
                    out.append(model(ids[:, t : t + 1], cache))
        finally:
            del os.environ[replay_torch.SWITCH]
        outs.append(out)
        if replay:
            assert cache.prepared[replay_torch.KEY].replays >= 2
    assert_same(*outs)


def test_attention_sinks_are_weights_the_replay_reads(cx, oracle_files):
    """gpt-oss's blocks without their experts (whose router the tape does not hold): GQAttention with
    a sink per query head is recorded, the sinks read where the weight is; replayed steps equal the
    forward pass's, also after the sinks change in place."""
    source = library_card("gpt-oss").source
    lines = source.splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if "rms_norm(X[:, t] | γ_l^2, ε)" in line)
    last = next(i for i, line in enumerate(lines) if line.startswith("32  end"))
    card = "".join(lines[:first] + ["19  end\n"] + lines[last + 1 :])  # (the formatter renumbers)
    path = oracle_files("gpt-oss", "F32").path
    ids = np.random.default_rng(4).integers(0, 100, size=(1, 14))
    outs = []
    for replay in (True, False):
        model = toycards.load(card, weights=str(path), target="torch")
        os.environ[replay_torch.SWITCH] = "on" if replay else "off"
        try:
            cache, out = model.new_cache(), []
            with torch.no_grad():
                out.append(model(ids[:, :3], cache))
                for t in range(3, 14):
                    if t == 10:
                        model.w["blk.1.attn_sinks.weight"].add_(2.0)
                    out.append(model(ids[:, t : t + 1], cache))
        finally:
            del os.environ[replay_torch.SWITCH]
        outs.append(out)
        if replay:
            assert cache.prepared[replay_torch.KEY].replays >= 2, model.replay_why
    assert_same(*outs)


def test_tapes_that_never_fit_stop_the_recording(cx, oracle_files):
    """Were every recorded step unfit for the next one (a weight's memory moving at each step, as a
    sharded model's gathered weights do), a model would record at every step: after two such tapes
    it stops, and its steps are the forward pass's."""
    path = oracle_files("llama", "F32").path
    ids = np.random.default_rng(10).integers(0, 100, size=(1, 10))
    model = toycards.load(path, target="torch")
    want, _ = decode(toycards.load(path, target="torch"), ids, 3, False)
    gamma = model.w["output_norm.weight"]
    cache, got = model.new_cache(), []
    with torch.no_grad():
        got.append(model(ids[:, :3], cache))
        for t in range(3, 10):
            gamma.data = gamma.data.clone()  # the same numbers in new memory
            got.append(model(ids[:, t : t + 1], cache))
    assert_same(got, want)
    assert model._replay_tries == 0 and model.replay_why == "a recorded step did not fit the next one"


def test_a_cache_with_a_tape_is_freed(cx, oracle_files):
    """A tape holds no way back to its cache that the garbage collector cannot see (a site holds its
    pass's context, which holds the cache): a cache that replayed is freed with its buffers."""
    import gc
    import weakref

    model = toycards.load(oracle_files("llama", "F32").path, target="torch")
    ids = np.random.default_rng(11).integers(0, 100, size=(1, 8))
    _, cache = decode(model, ids, 3, True)
    assert cache.prepared[replay_torch.KEY].replays >= 2
    buffer = weakref.ref(cache.slots[0][0][0])
    gone = weakref.ref(cache)
    del cache
    gc.collect()
    assert gone() is None and buffer() is None
