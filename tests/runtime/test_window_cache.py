"""Sliding-window layers keep only their window in the KV cache, as llama.cpp's SWA cache does.

A mask whose text states a window (`t_x − t_z < w`, lang/masks.py) lets the cache drop every row no
later query can read; the logits stay those of the full pass (which the oracle tests tie to
transformers), through prefills in micro-batches, decoding steps (replayed on torch), a batch,
a half cache, the card's own steps where a kernel declines, and a cache cut back for a chat.
The oracle files' windows are 4 tokens wide.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_kv_cache import TARGETS, token_ids, tol

from toycards.codegen.code import parse_expr
from toycards.lang import ir
from toycards.lang.masks import mask_window
from toycards.models.load import load
from toycards.runtime import context

WINDOWED = ("gemma2", "gemma3", "olmo3", "cohere2")  # sliding layers beside global ones
WINDOW = 4


@pytest.fixture(scope="module")
def model(oracle_files):
    loaded: dict[tuple[str, str], object] = {}

    def get(case: str, target: str):
        if (case, target) not in loaded:
            loaded[case, target] = load(oracle_files(case, "F32").path, target=target)
        return loaded[case, target]

    return get


def decode(m, ids: np.ndarray, prompt: int, cache) -> np.ndarray:
    """The logits [B, n − prompt + 1, N_V] of the prompt's last token and of each token after it, fed
    one at a time, after the prompt in micro-batches."""
    out = [m.feed(ids[:, :prompt], cache)]
    for i in range(prompt, ids.shape[-1]):
        out.append(m.feed(ids[:, i : i + 1], cache))
    return np.stack(out, axis=1)


def rows_held(cache) -> tuple[list[int], list[int]]:
    """Per slot of the cache: the rows it holds, and the rows its buffers have room for."""
    return [e[1] for e in cache.slots], [e[0][0].shape[-2] for e in cache.slots]


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
@pytest.mark.parametrize("case", WINDOWED)
@pytest.mark.parametrize("target", TARGETS)
def test_sliding_layers_keep_their_window_and_the_logits_of_the_full_pass(model, target, case, kv_type):
    m = model(case, target)
    m.ubatch = 5
    n, prompt = 40, 17
    ids = token_ids(m.hp["N_V"], 2, n)
    cache = m.new_cache(kv_type)
    got = decode(m, ids, prompt, cache)
    held, room = rows_held(cache)
    windowed = sorted(cache.windows)
    assert windowed and all(cache.windows[s] == WINDOW for s in windowed)
    assert len(windowed) < len(cache.slots)  # the global layers keep every token
    for slot, (h, r) in enumerate(zip(held, room, strict=True)):
        if slot in cache.windows:  # the last pass's one token and the w − 1 before it
            assert (h, cache.firsts[slot]) == (WINDOW, n - WINDOW)
            assert r <= WINDOW - 1 + m.ubatch
        else:
            assert h == n and slot not in cache.firsts
    for b in range(2):
        want = np.asarray(m.logits(ids[b]), dtype=np.float32)[prompt - 1 :]
        atol = tol(want) if kv_type == "f32" else max(1e-4, 1e-3 * float(np.abs(want).max()))
        np.testing.assert_allclose(got[b], want, rtol=0, atol=atol)


@pytest.mark.parametrize("target", TARGETS)
def test_a_window_over_4096_tokens_holds_its_window_alone(model, target):
    """The issue's figure: after 4,096 tokens a sliding layer's buffers hold w − 1 + ubatch rows at
    most, the global layer's every token."""
    m = model("gemma3", target)
    m.ubatch = 512
    cache = m.new_cache("f16")
    ids = token_ids(m.hp["N_V"], 1, 4096)
    m.feed(ids, cache)
    held, room = rows_held(cache)
    sliding = [s for s in range(len(cache.slots)) if s in cache.windows]
    assert {held[s] for s in sliding} == {WINDOW - 1 + 512} and {room[s] for s in sliding} == {
        WINDOW - 1 + 512
    }
    assert all(held[s] == 4096 for s in range(len(held)) if s not in cache.windows)
    one = cache.slots[sliding[0]][0][0]
    assert one.dtype.itemsize == 2 and one.shape[-2] * one.shape[-1] * 2 < 4096 * one.shape[-1] * 2 / 7


@pytest.mark.parametrize("target", TARGETS)
def test_a_cut_back_cache_keeps_what_its_window_still_reaches(model, target):
    m = model("olmo3", target)
    ids = token_ids(m.hp["N_V"], 1, 30)
    cache = m.new_cache()
    m.ubatch = 512
    m.feed(ids[:, :24], cache)
    m.feed(ids[:, 24:25], cache)  # a pass drops the rows position 25's window left behind
    first = max(cache.firsts.values())
    assert first == 25 - WINDOW
    assert not cache.can_keep(first + WINDOW - 2)  # the next token would read a dropped row
    assert cache.can_keep(first + WINDOW - 1) and cache.can_keep(0) and cache.can_keep(25)
    cache.truncate(first + WINDOW - 1)
    got = m.feed(ids[:, first + WINDOW - 1 : 30], cache)[0]
    want = np.asarray(m.logits(ids[0]), dtype=np.float32)[-1]
    np.testing.assert_allclose(got, want, rtol=0, atol=tol(want))
    with pytest.raises(ValueError, match="cannot go back"):
        cache.truncate(first)


@pytest.mark.parametrize("target", TARGETS)
def test_the_steps_read_a_window_slot_where_the_kernel_declines(model, target, monkeypatch):
    """The dropped rows come back as zeros, which the window's mask gives no weight."""
    m = model("gemma2", target)
    ids = token_ids(m.hp["N_V"], 1, 30)
    cache = m.new_cache()
    m.ubatch = 512
    m.feed(ids[:, :20], cache)
    m.feed(ids[:, 20:21], cache)
    assert cache.firsts
    if target == "torch":
        from toycards.engine.torch import glue

        monkeypatch.setattr(glue, "_library", lambda: None)
        monkeypatch.setattr(glue.native, "module", lambda: None)
    else:
        from toycards.runtime.numpy import ops

        monkeypatch.setattr(ops.kernels, "gq_attention", lambda *args: None)
    got = decode(m, ids[:, 21:], 3, cache)[0]
    monkeypatch.undo()
    want = np.asarray(m.logits(ids[0]), dtype=np.float32)[23:]
    np.testing.assert_allclose(got, want, rtol=0, atol=tol(want))


def window(text: str) -> str | None:
    w = mask_window(ir.MaskDef("Mask", ("t_z", "t_x"), parse_expr(text)))
    return None if w is None else str(w)


@pytest.mark.parametrize(
    "text",
    [
        "⟦t_z ≤ t_x ∧ t_x − t_z < w⟧",
        "⟦t_z > t_x − w ∧ t_z ≤ t_x⟧",
        "⟦t_x < t_z + w ∧ t_z ≤ t_x⟧",
        "⟦t_z ≤ t_x ∧ t_x − w < t_z⟧",
        "⟦t_z ≤ t_x ∧ −t_z + t_x < w⟧",
    ],
)
def test_each_spelling_of_a_window_is_read(text):
    assert mask_window(ir.MaskDef("Mask", ("t_z", "t_x"), parse_expr(text))) is not None


@pytest.mark.parametrize(
    "text",
    [
        "⟦t_z ≤ t_x⟧",
        "⟦t_z = 1 ∨ t_x − t_z < w⟧",  # a sink: the first token stays in reach
        "⟦t_z ≤ t_x ∧ t_z − t_x < w⟧",  # reaches every earlier token
        "⟦t_z ≤ t_x ∧ 2 · (t_x − t_z) < w⟧",  # a window, but not in a form read here: kept whole
        "⟦¬(t_x − t_z ≥ w)⟧",
    ],
)
def test_a_mask_that_states_no_window_keeps_every_row(text):
    assert window(text) is None


def test_windowed_notes_whole_windows_alone():
    def mask(t_z, t_x):
        return t_z <= t_x

    assert getattr(context.windowed(mask, 4.0), "window", None) == 4
    for w in (0, 2.5, -1, True, np.ones(2)):
        f = lambda t_z, t_x: t_z <= t_x  # noqa: E731 - a fresh function each time
        assert not hasattr(context.windowed(f, w), "window")
