"""Long inputs in micro-batches: a prompt fed through the cache `ubatch` tokens a pass, and a window's
logits a pass at a time, equal one pass over the whole input.

The reference is the same model's full pass without a cache (which the oracle tests tie to
transformers). Each family runs with ubatch 3 against 11 tokens, so that passes split a sliding
window (olmo3, gemma2, cohere2: a window of 4) and the last pass is shorter than the others.
"""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from click.testing import CliRunner
from test_kv_cache import CASES, TARGETS, token_ids, tol

from toycards.cli import main
from toycards.models.evaluate import evaluate
from toycards.models.load import load

N = 11  # tokens: three passes of 3 and one of 2 at ubatch 3


@pytest.fixture(scope="module")
def model(oracle_files):
    loaded: dict[tuple[str, str], object] = {}

    def get(case: str, target: str):
        if (case, target) not in loaded:
            loaded[case, target] = load(oracle_files(case, "F32").path, target=target)
        return loaded[case, target]

    return get


def full_pass(m, ids: np.ndarray) -> np.ndarray:
    """float32 logits [T, N_V] of one sequence, one pass, no cache."""
    return np.asarray(m.logits(ids), dtype=np.float32)


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("target", TARGETS)
def test_a_prompt_fed_in_micro_batches_equals_one_pass(model, target, case, kv_type):
    m = model(case, target)
    ids = token_ids(m.hp["N_V"], 1, N)
    # a half cache rounds each key and value once as it is stored (2⁻¹¹ of it): a pass reads the earlier
    # passes' rows rounded where one pass reads them as computed
    atol = (
        tol(full_pass(m, ids[0]))
        if kv_type == "f32"
        else max(1e-4, 1e-3 * float(np.abs(full_pass(m, ids[0])).max()))
    )
    m.ubatch = N
    whole_cache = m.new_cache(kv_type)
    whole = m.feed(ids, whole_cache)  # one pass through the cache
    m.ubatch = 3
    cache = m.new_cache(kv_type)
    parts = m.feed(ids, cache)
    assert parts.shape == whole.shape == (1, m.hp["N_V"])
    assert cache.length == whole_cache.length == N
    np.testing.assert_allclose(parts, whole, rtol=0, atol=atol)
    if kv_type == "f32":  # as the definition computes it
        want = full_pass(m, ids[0])[-1:]
        np.testing.assert_allclose(parts, want, rtol=0, atol=tol(want))
    # and the cache goes on from there as after one pass
    step = np.asarray([[7]])
    np.testing.assert_allclose(m.feed(step, cache), m.feed(step, whole_cache), rtol=0, atol=atol)


@pytest.mark.parametrize("first", [0, 4, 9])
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", ["llama", "olmo3"])
def test_window_logits_come_a_pass_at_a_time_and_equal_logits(model, target, case, first):
    m = model(case, target)
    ids = token_ids(m.hp["N_V"], 1, N)[0]
    want = full_pass(m, ids)[first:]
    m.ubatch = 3
    blocks = list(m.window_logits(ids, first))
    assert [row for row, _ in blocks] == [first, *range(first // 3 * 3 + 3, N, 3)]
    assert all(len(b) <= 3 for _, b in blocks)
    got = np.concatenate([b for _, b in blocks])
    np.testing.assert_allclose(got, want, rtol=0, atol=tol(want))


@pytest.mark.parametrize("target", TARGETS)
def test_eval_in_micro_batches_scores_as_one_pass(model, target):
    m = model("llama", target)
    ids = token_ids(m.hp["N_V"], 1, 40)[0].tolist()
    m.ubatch = 512
    whole = evaluate(m, ids=ids, n_ctx=16, stride=8, top_k=2)
    m.ubatch = 5
    parts = evaluate(m, ids=ids, n_ctx=16, stride=8, top_k=2)
    assert parts.n_tokens == whole.n_tokens == 39
    assert [t.position for t in parts.tokens] == [t.position for t in whole.tokens] == list(range(1, 40))
    np.testing.assert_allclose(
        [t.logprob for t in parts.tokens], [t.logprob for t in whole.tokens], atol=1e-4
    )
    assert [[i for i, *_ in t.top] for t in parts.tokens] == [[i for i, *_ in t.top] for t in whole.tokens]


def test_a_pass_work_memory_grows_with_the_micro_batch_not_the_prompt(model):
    """NumPy's arrays are traced by tracemalloc: the peak of a long prompt's prefill, above the cache
    it leaves, is that of one micro-batch's pass. (Not a timing: a count of bytes.)"""
    m = model("llama", "numpy")
    ids = token_ids(m.hp["N_V"], 1, 192)

    def peak_above_cache(ubatch: int) -> int:
        m.ubatch = ubatch
        cache = m.new_cache("f32")
        m.feed(ids[:, :1], cache)  # the kernels' one-time tables, before the trace
        cache.reset()
        tracemalloc.start()
        try:
            m.feed(ids, cache)
            now, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        return peak - now

    small, large = peak_above_cache(16), peak_above_cache(192)
    assert small * 3 < large, (small, large)


def test_generate_in_micro_batches_gives_the_same_text(model):
    m = model("llama", "torch")
    if m.tokenizer is None:
        pytest.skip("the oracle file has no vocabulary")
    m.ubatch = 512
    whole = "".join(m.generate("a b c d e f g h", max_tokens=6))
    m.ubatch = 2
    assert "".join(m.generate("a b c d e f g h", max_tokens=6)) == whole


def test_the_ubatch_option_is_checked_in_one_line(oracle_files):
    path = oracle_files("llama", "F32").path
    r = CliRunner().invoke(main, ["run", str(path), "-p", "hi", "-n", "1", "--ubatch", "0"])
    assert r.exit_code == 2 and "--ubatch" in r.output and "Traceback" not in r.output
    text = "one two three four five six seven eight nine ten"
    runs = [
        CliRunner().invoke(main, ["eval", str(path), "-p", text, "--json", *more])
        for more in ([], ["--ubatch", "2"])
    ]
    assert [r.exit_code for r in runs] == [0, 0], [r.output for r in runs]
    whole, parts = (json.loads(r.output) for r in runs)
    assert parts["n_tokens"] == whole["n_tokens"] > 4
    assert parts["perplexity"] == pytest.approx(whole["perplexity"], rel=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_a_cache_told_what_to_expect_makes_room_once(model, target):
    """generate tells the cache the prompt and max_tokens: its buffers are made that long at the first
    pass and never copied into bigger ones (a doubling holds the old buffer and its copy at once)."""
    m = model("llama", target)
    m.ubatch = 16
    ids = token_ids(m.hp["N_V"], 1, 116)
    cache = m.new_cache("f16")
    cache.expect(116)
    m.feed(ids[:, :100], cache)
    first = [b for entry in cache.slots for b in entry[0]]
    assert {b.shape[-2] for b in first} == {116}
    for i in range(100, 116):
        m.feed(ids[:, i : i + 1], cache)
    assert all(a is b for a, b in zip(first, (b for entry in cache.slots for b in entry[0]), strict=True))
