"""`ModelAPI.step`: one decoding step of several sequences at once, each in its own cache at its own
length, and `generate` over a list of prompts.

The oracle of each row is the same sequence decoded alone (`feed` through its own cache), which the
rest of the suite ties to transformers. Where the pass takes the rows together (GQAttention's
kernel the only step that reads positions or caches keys; decoder states row by row) a row equals
its sequence alone bit for bit for weights kept in their blocks, up to `engine.FEW_TOKENS` rows
and no state (the same few-token kernels on the same rows); float weights, more rows and the scans'
batched products sum in another order (float32 rounding). Families whose steps read positions
refuse such a pass, say why (`rows_why`), and step each sequence alone: then every row is exactly
its sequence's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

import toycards  # noqa: E402
from toycards import engine  # noqa: E402
from toycards.errors import ToycardsError  # noqa: E402
from toycards.models.load import load  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny-llama.gguf"  # a tokenizer, F32 weights
PROMPTS = (5, 9, 3, 12)  # prompt lengths: every row at its own position
STEPS = 6


def streams(model, lengths, seed=0):
    """Random prompts of `lengths` and STEPS tokens to feed after each."""
    rng = np.random.default_rng(seed)
    n_vocab = model.hp["N_V"]
    return [(rng.integers(0, n_vocab, n), rng.integers(0, n_vocab, STEPS)) for n in lengths]


def alone(model, prompt, tokens, kv):
    """The logits [1 + STEPS, N_V] of a sequence decoded by itself: the prompt's last, then each token's."""
    cache = model.new_cache(kv)
    rows = [model.feed(prompt[None], cache)[0]]
    rows += [model.feed(np.array([[t]]), cache)[0] for t in tokens]
    return np.stack(rows)


def together(model, pairs, kv):
    """The same logits for every sequence, its tokens fed in `step`s of all the sequences at once."""
    caches = [model.new_cache(kv) for _ in pairs]
    rows = [[model.feed(prompt[None], c)[0]] for (prompt, _), c in zip(pairs, caches, strict=True)]
    for k in range(STEPS):
        out = model.step([tokens[k] for _, tokens in pairs], caches)
        assert out.shape == (len(pairs), model.hp["N_V"]) and out.dtype == np.float32
        for b in range(len(pairs)):
            rows[b].append(out[b])
    for c, (prompt, tokens) in zip(caches, pairs, strict=True):
        assert c.length == len(prompt) + len(tokens)
    return [np.stack(r) for r in rows]


@pytest.mark.parametrize(
    "case, ftype, kv",
    [
        ("llama", "Q8_0", "f32"),
        ("llama", "Q8_0", "f16"),
        ("qwen3", "Q8_0", "f16"),  # q/k norms
        ("gemma3", "Q8_0", "f32"),  # sliding windows of 4 tokens: each cache drops its own rows
        ("gpt-oss", "Q8_0", "f16"),  # a sink per head, windows
    ],
)
def test_a_step_of_rows_at_their_own_positions_is_each_sequence_alone_bit_for_bit(
    oracle_files, case, ftype, kv
):
    model = load(oracle_files(case, ftype).path, target="torch")
    pairs = streams(model, PROMPTS)
    got = together(model, pairs, kv)
    assert model.rows_why == ""  # the rows went through one pass
    for (prompt, tokens), rows in zip(pairs, got, strict=True):
        np.testing.assert_array_equal(rows, alone(model, prompt, tokens, kv))


@pytest.mark.parametrize(
    "case, ftype, n",
    [
        ("llama", "F32", 4),
        ("llama", "Q8_0", engine.FEW_TOKENS + 3),
        ("qwen3moe", "Q8_0", 4),
    ],  # an expert's rows together
)
def test_float_weights_and_many_rows_are_each_sequence_alone_to_rounding(
    oracle_files, case, ftype, n, monkeypatch
):
    # more rows than FEW_TOKENS multiply as a prompt's: by the int8 GEMM, which rounds x to int8 as
    # decoding does (unless TOYCARDS_PREFILL=float32, which the suite sets for its prompts)
    monkeypatch.delenv("TOYCARDS_PREFILL", raising=False)
    model = load(oracle_files(case, ftype).path, target="torch")
    pairs = streams(model, [2 + 3 * b for b in range(n)], seed=1)
    got = together(model, pairs, "f32")
    assert model.rows_why == ""
    for (prompt, tokens), rows in zip(pairs, got, strict=True):
        np.testing.assert_allclose(rows, alone(model, prompt, tokens, "f32"), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", ["mamba", "falcon-h1", "qwen3next", "lfm2", "jamba"])
def test_decoder_states_go_row_by_row_to_each_sequence_cache(oracle_files, case):
    """A stateful call (a conv window, a scan's state) takes each row's state from its own cache and
    leaves it there; hybrids take their attention rows through the kernel beside it. The scans run
    the card's steps on the batch (torch's products), which sum in another order: float32 rounding."""
    model = load(oracle_files(case, "Q8_0").path, target="torch")
    pairs = streams(model, PROMPTS)
    got = together(model, pairs, "f32")
    assert model.rows_why == ""
    for (prompt, tokens), rows in zip(pairs, got, strict=True):
        np.testing.assert_allclose(rows, alone(model, prompt, tokens, "f32"), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "case, why",
    [
        ("gpt2", "read the token positions"),  # learned positions, picked by the main algorithm
        ("deepseek2", "read the token positions"),  # MLA's own attention steps
    ],
)
def test_a_family_that_cannot_share_a_pass_steps_each_sequence_alone(oracle_files, case, why):
    model = load(oracle_files(case, "F32").path, target="torch")
    pairs = streams(model, PROMPTS)
    got = together(model, pairs, "f32")
    assert why in model.rows_why
    for (prompt, tokens), rows in zip(pairs, got, strict=True):
        np.testing.assert_array_equal(rows, alone(model, prompt, tokens, "f32"))


def test_a_pass_refused_after_its_first_layer_leaves_the_caches_as_they_were(oracle_files, monkeypatch):
    """Where the attention kernel declines at the second layer, what the first wrote (keys, values,
    a state staged) is forgotten, and each sequence then takes its step alone."""
    from toycards.runtime.torch import ops

    model = load(oracle_files("falcon-h1", "F32").path, target="torch")  # attention beside a Mamba-2 mixer
    pairs = streams(model, PROMPTS[:3])
    caches = [model.new_cache() for _ in pairs]
    for (prompt, _), c in zip(pairs, caches, strict=True):
        model.feed(prompt[None], c)
    kernel, calls = ops.gq_attention_rows, []

    def declines_later(*args):
        calls.append(1)
        return kernel(*args) if len(calls) == 1 else None

    monkeypatch.setattr(ops, "gq_attention_rows", declines_later)
    out = model.step([tokens[0] for _, tokens in pairs], caches)
    assert len(calls) == 2 and "kernel does not take" in model.rows_why
    for (prompt, tokens), c, row in zip(pairs, caches, out, strict=True):
        assert c.length == len(prompt) + 1 and all(entry[1] == c.length for entry in c.slots)
        np.testing.assert_array_equal(row, alone(model, prompt, tokens[:1], "f32")[-1])


@pytest.mark.parametrize("case", ["llama", "gemma3"])
def test_the_numpy_target_takes_the_rows_in_one_pass_too(oracle_files, case):
    model = load(oracle_files(case, "Q8_0").path, target="numpy")
    pairs = streams(model, PROMPTS)
    got = together(model, pairs, "f16")
    assert model.rows_why == ""
    for (prompt, tokens), rows in zip(pairs, got, strict=True):
        np.testing.assert_array_equal(rows, alone(model, prompt, tokens, "f16"))


def test_step_refuses_a_cache_twice_mixed_kinds_and_a_count_that_differs(oracle_files):
    model = load(oracle_files("llama", "Q8_0").path, target="torch")
    c = model.new_cache()
    for ids, caches, what in (
        ([1, 2], [c, c], "a cache appears twice"),
        ([1, 2], [model.new_cache("f32"), model.new_cache("f16")], "use one kind"),
        ([1, 2, 3], [model.new_cache(), model.new_cache()], "one token id per cache"),
        ([], [], "one token id per cache"),
    ):
        with pytest.raises(ToycardsError, match=what):
            model.step(ids, caches)
    assert c.length == 0


@pytest.mark.parametrize("sampling", [{}, {"temperature": 0.8, "seed": 7}])
def test_generate_over_a_list_of_prompts_is_generate_of_each(sampling):
    model = toycards.load(str(EXAMPLE), target="torch")
    prompts = ["Once upon a time", "The", "A quick brown fox jumps over", "1 2 3"]
    many = model.generate(prompts, max_tokens=10, n_ctx=14, **sampling)
    assert isinstance(many, list) and len(many) == len(prompts)
    for prompt, g in zip(prompts, many, strict=True):
        one = model.generate(prompt, max_tokens=10, n_ctx=14, **sampling)
        assert "".join(g) == "".join(one) and g.stop_reason == one.stop_reason
    reasons = {g.stop_reason for g in many}
    assert "context" in reasons  # the longest prompt fills the 14-token context first
    with pytest.raises(ToycardsError, match="at least one prompt"):
        model.generate([])
