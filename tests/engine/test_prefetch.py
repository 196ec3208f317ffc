"""Whether the few-token products prefetch their weight stream: chosen per model by timing its first
decoding steps both ways (engine.ckernels.PrefetchChoice), or fixed by TOYCARDS_QUANT_PREFETCH; the
products are the same floats either way. The clock is faked: no test here times anything.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_quant_kernels import (  # noqa: F401 - prefill_as_shipped: the same products as shipped
    K_QUANTS,
    NO_KERNELS,
    TYPES,
    Q,
    float_blocks,
    prefill_as_shipped,
    small_blocks,
    tiny_llama,
)

import toycards
from toycards.engine import ckernels as quant_kernels
from toycards.engine.torch import quant as quant_torch


@pytest.fixture
def prefetch_restored():
    """The library's prefetch setting as it was again after the test."""
    lib = quant_kernels.library()
    was = lib.tc_prefetch()
    yield lib
    lib.tc_set_prefetch(was)


pytestmark = pytest.mark.skipif(
    NO_KERNELS, reason="no C compiler (or TOYCARDS_QUANT_KERNELS=off): no kernels"
)


@pytest.mark.parametrize("qtype", [Q.F32, *(t for t in TYPES if t not in K_QUANTS)], ids=lambda t: t.name)
def test_prefetch_setting_leaves_the_products_alone(qtype, prefetch_restored):
    """Whether the types other than the K-quants prefetch their weight stream is chosen per model
    by timing (quant_kernels.PrefetchChoice): their products are the same floats either way, packed
    or as stored, so the other tests, run under either setting, hold both."""
    lib = prefetch_restored
    rng = np.random.default_rng(11)
    shape = (37, 576)
    floats = qtype in (Q.F32, Q.F16, Q.BF16)
    blocks = float_blocks(qtype, shape, rng)[0] if floats else small_blocks(qtype, shape, rng)
    xs = [torch.from_numpy(rng.normal(size=(1, t, shape[1])).astype(np.float32)) for t in (1, 3)]
    ys = []
    for on in (0, 1):
        lib.tc_set_prefetch(on)
        if qtype == Q.F32:
            ys.append([quant_torch.float_linear(x, torch.from_numpy(blocks)) for x in xs])
        else:
            q = quant_torch.QuantWeight(
                blocks, qtype, shape
            )  # packed at its first (few-token) product, where it packs
            ys.append([q.linear(x) for x in xs])
    assert all(a is not None and torch.equal(a, b) for a, b in zip(*ys))


def test_prefetch_is_timed_unless_fixed(monkeypatch):
    monkeypatch.delenv(quant_kernels.PREFETCH, raising=False)
    assert quant_kernels.prefetch_others() is None
    for said, want in (("on", 1), (" ON\n", 1), ("off", 0), ("Off", 0), ("1", None), ("auto", None)):
        monkeypatch.setenv(quant_kernels.PREFETCH, said)
        assert quant_kernels.prefetch_others() == want


class _Clock:
    """A stand-in for PrefetchChoice's clock that only the steps below move (no scheduler in the timings)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = _Clock()
    monkeypatch.setattr(quant_kernels, "_clock", fake)
    return fake


def _steps_slower_when(slow_setting: int, lib, seen: list[int], clock, slow=(0.006,), fast=(0.001,)):
    """A stand-in for a decoding step: it notes the library's prefetch flag and takes the next of
    `slow` (cycled) on `clock` when the flag is `slow_setting`, else the next of `fast`."""
    taken = {0: 0, 1: 0}

    def step(token: int) -> int:
        flag = lib.tc_prefetch()
        seen.append(flag)
        times = slow if flag == slow_setting else fast
        clock.now += times[taken[flag] % len(times)]
        taken[flag] += 1
        return token + 1

    return step


def _decide(choice, step, steps: int) -> list:
    settings = []
    for i in range(steps):
        assert choice.run(step, i) == i + 1  # the step's result passes through
        settings.append(choice.setting)
    return settings


@pytest.mark.parametrize("slow_setting", [0, 1])
def test_prefetch_choice_keeps_the_faster_setting(slow_setting, monkeypatch, prefetch_restored, clock):
    """PrefetchChoice runs WARMUP steps, then steps each way (on, off, off, on …): with a clear gap
    (6 ms against 1 ms) it keeps the faster setting once each way has SURE steps, for good."""
    monkeypatch.delenv(quant_kernels.PREFETCH, raising=False)
    lib, seen = prefetch_restored, []
    choice = quant_kernels.PrefetchChoice()
    timed = choice.WARMUP + 2 * choice.SURE
    settings = _decide(choice, _steps_slower_when(slow_setting, lib, seen, clock), timed + 5)
    assert settings == [None] * (timed - 1) + [1 - slow_setting] * 6
    assert seen[choice.WARMUP : timed] == [1, 0, 0, 1, 1, 0][: 2 * choice.SURE]
    assert seen[timed:] == [1 - slow_setting] * 5


@pytest.mark.parametrize("slow_setting", [0, 1])
def test_prefetch_choice_by_medians_when_the_steps_overlap(
    slow_setting, monkeypatch, prefetch_restored, clock
):
    """Where the two ways' steps overlap (each way has an outlier past the other's), the choice
    waits for TRIALS steps each way and keeps the faster median."""
    monkeypatch.delenv(quant_kernels.PREFETCH, raising=False)
    lib, seen = prefetch_restored, []
    choice = quant_kernels.PrefetchChoice()
    slow, fast = (0.0005, 0.004, 0.004, 0.004), (0.009, 0.001, 0.001, 0.001)
    step = _steps_slower_when(slow_setting, lib, seen, clock, slow, fast)
    timed = choice.WARMUP + 2 * choice.TRIALS
    settings = _decide(choice, step, timed + 3)
    assert settings == [None] * (timed - 1) + [1 - slow_setting] * 4
    assert sum(seen[choice.WARMUP : timed]) == choice.TRIALS


@pytest.mark.parametrize(("said", "setting"), [("on", 1), ("off", 0)])
def test_prefetch_fixed_by_the_environment_is_not_timed(said, setting, monkeypatch, prefetch_restored, clock):
    monkeypatch.setenv(quant_kernels.PREFETCH, said)
    lib, seen = prefetch_restored, []
    choice = quant_kernels.PrefetchChoice()
    lib.tc_set_prefetch(1 - setting)
    step = _steps_slower_when(setting, lib, seen, clock)  # fixed, even where the other setting is faster
    for i in range(choice.WARMUP + 2 * choice.TRIALS + 2):
        choice.run(step, i)
    assert seen == [setting] * len(seen) and choice.times == ([], [])


def test_models_time_only_their_decoding_steps(tmp_path, monkeypatch, prefetch_restored):
    """Both targets time their few-token passes (decoding) for the choice, never a prompt's."""
    monkeypatch.delenv(quant_kernels.PREFETCH, raising=False)
    path = tiny_llama(tmp_path, "Q8_0")
    for target in ("torch", "numpy"):
        model = toycards.load(path, target=target)
        cache = model.new_cache()
        with torch.inference_mode():
            model(np.arange(20)[None], cache)  # a prompt of 20 tokens: not timed
            assert model._prefetch.steps == 0
            for t in range(3):
                model(np.array([[t]]), cache, last=True)
        assert model._prefetch.steps == 3
