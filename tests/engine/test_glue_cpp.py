"""The C++ glue (engine/kernels/glue.cpp) against the Python glue it stands in for, and the reference.

Each of its functions either returns what the Python path returns for the same arguments, to the
bit (both call the same C kernel on the same bytes), or declines with None, where the
Python path then runs: so the cases it must decline are tested as carefully as the ones it takes.
The products are also held to gguf.quants.dequantize and a float64 matmul (within the rounding of
x to int8 blocks, as tests/engine/test_quant_kernels.py bounds it), and a whole model decodes to the same
logits with and without it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType
from test_quant_kernels import NO_KERNELS, check_product, llama_file, small_blocks

import toycards
from toycards.engine import ckernels as quant_kernels
from toycards.engine.torch import glue as glue_torch
from toycards.engine.torch import native as glue_cpp
from toycards.engine.torch import quant as quant_torch
from toycards.runtime.torch import ops as ops_torch

Q = GGMLQuantizationType
TYPES = [Q.F32, Q.F16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q4_K, Q.Q6_K]
FEW = quant_torch.FEW_TOKENS

pytestmark = pytest.mark.skipif(
    NO_KERNELS or os.environ.get(glue_cpp.SWITCH, "").lower() == "off",
    reason="no C kernels, or the C++ glue turned off",
)


@pytest.fixture(scope="module")
def cx():
    """The module; without a C++ compiler there is none (the Python glue then runs everywhere)."""
    if glue_cpp.build.compiler("c++", "g++", "clang++") is None:
        pytest.skip("no C++ compiler")
    module = glue_cpp.module()
    assert module is not None, f"{glue_cpp.SOURCE.name} did not build: {glue_cpp.build_error}"
    return module


@contextlib.contextmanager
def python_glue():
    """The Python path alone: glue_cpp.module() gives None in here."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(glue_cpp, "module", lambda: None)
        yield


def weight_of(qtype: Q, shape: tuple[int, int], seed: int):
    """A weight as the torch target holds it: a float32 tensor for F32, else a QuantWeight, packed
    (a first product made) where its type packs."""
    blocks = small_blocks(qtype, shape, np.random.default_rng(seed))
    if qtype == Q.F32:
        return torch.from_numpy(blocks), blocks
    W = quant_torch.QuantWeight(blocks, qtype, shape)
    W.linear(torch.zeros(1, shape[1]))  # packs where the type packs
    return W, blocks


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("lead", [(1,), (1, 1), (3,), (2, 4), (FEW,)], ids=str)
def test_linear_is_the_python_product(cx, qtype, lead):
    W, blocks = weight_of(qtype, (37, 256), 1)
    x = torch.randn(*lead, 256)
    y = cx.linear(x, W)
    assert y is not None and y.shape == (*lead, 37)
    with python_glue():
        python = W.linear(x) if qtype != Q.F32 else quant_torch.float_linear(x, W)
    assert torch.equal(y, python)
    t = int(np.prod(lead))
    w = blocks if qtype == Q.F32 else quant_torch.reference_dequantize(blocks, qtype, (37, 256))
    check_product(y.reshape(t, 37), x.reshape(t, 256).numpy(), w, qtype, t)


@pytest.mark.parametrize("qtype", [Q.F32, Q.Q8_0, Q.Q4_K], ids=lambda t: t.name)
def test_linears_and_swiglu_are_the_python_calls(cx, qtype):
    d, f = 256, 96 if qtype != Q.Q4_K else 256
    Wq, _ = weight_of(qtype, (d, d), 2)
    Wk, _ = weight_of(qtype, (64, d), 3)
    Wv, _ = weight_of(qtype, (64, d), 4)
    Wg, _ = weight_of(qtype, (f, d), 5)
    Wu, _ = weight_of(qtype, (f, d), 6)
    Wd, _ = weight_of(qtype, (d, f), 7)
    for lead in [(1, 1), (1, 3), (FEW,)]:
        x = torch.randn(*lead, d)
        for Ws in [(Wq, Wk, Wv), (Wk, Wv)]:
            ys = cx.linears(x, *Ws)
            assert isinstance(ys, tuple) and len(ys) == len(Ws)
            with python_glue():
                python = quant_torch.linears(x, Ws)
            for y, p in zip(ys, python, strict=True):
                assert torch.equal(y, p)
        with python_glue():  # (tied to the card's steps by tests/engine/test_kernels.py)
            python = quant_torch.swiglu(x, Wg, Wu, Wd)
        assert torch.equal(cx.swiglu(x, Wg, Wu, Wd), python)


@pytest.mark.parametrize("lead", [(1,), (1, 1, 1), (5, 3), (1, 130)], ids=str)
def test_rms_norm_is_the_python_kernel_and_torchs(cx, lead):
    e, gamma = torch.randn(*lead, 576), torch.randn(576)
    y = cx.rms_norm(e, gamma, 1e-5)
    with python_glue():
        assert torch.equal(y, glue_torch.rms_norm(e, gamma, 1e-5))
        assert torch.equal(cx.rms_norm(e, gamma, 1), glue_torch.rms_norm(e, gamma, 1))  # an int ε
    torch.testing.assert_close(y, F.rms_norm(e, (576,), gamma, 1e-5), rtol=2e-6, atol=2e-6)


class Sub(torch.Tensor):
    pass


def test_declines_what_the_python_path_must_take(cx):
    """Each case the kernels do not take returns None (and then the Python path runs)."""
    W, _ = weight_of(Q.Q8_0, (32, 64), 8)
    x = torch.randn(1, 64)
    declined = {
        "more tokens than FEW_TOKENS": (x.expand(FEW + 1, 64).contiguous(), W),
        "no tokens": (torch.randn(0, 64), W),
        "not contiguous": (torch.randn(64, 2)[:, 0].reshape(1, 64), W),
        "float64": (x.double(), W),
        "bfloat16": (x.bfloat16(), W),
        "a subclass": (x.as_subclass(Sub), W),
        "another width": (torch.randn(1, 65), W),
        "a 0-d x": (torch.tensor(1.0), W),
        "an array, not a tensor": (x.numpy(), W),
        "a 3-d float weight": (x, torch.randn(2, 32, 64)),
        "a float64 weight": (x, torch.randn(32, 64, dtype=torch.float64)),
        "a weight that is no weight": (x, "W"),
    }
    for why, (a, b) in declined.items():
        assert cx.linear(a, b) is None, why
    with torch.enable_grad():
        assert cx.linear(x.clone().requires_grad_(), W) is None, "autograd to record"
        assert cx.linear(x, torch.randn(32, 64, requires_grad=True)) is None, "a trainable float weight"
        assert cx.rms_norm(x, torch.ones(64, requires_grad=True), 1e-5) is None
    assert cx.rms_norm(x, torch.ones(63), 1e-5) is None
    assert cx.rms_norm(x, torch.ones(1, 64), 1e-5) is None
    assert cx.rms_norm(x, torch.ones(64), "1e-5") is None
    assert cx.linears(x, W) is None and cx.linears(x, W, W, W, W) is None
    assert cx.swiglu(x, W, W, W) is None  # W_down [32, 64] does not take the 32-wide hidden layer back


def test_a_weight_packs_at_its_first_product_then_the_glue_reads_it(cx):
    if not quant_kernels.pack_rows(Q.Q8_0):
        pytest.skip("no packed layout on this CPU")
    blocks = small_blocks(Q.Q8_0, (32, 64), np.random.default_rng(9))
    W = quant_torch.QuantWeight(blocks, Q.Q8_0, (32, 64))
    x = torch.randn(1, 64)
    assert W._cplan == 0 and cx.linear(x, W) is None  # not packed: the Python product packs it
    with python_glue():
        y = ops_torch.linear(x, W)
    assert W._cplan != 0 and torch.equal(cx.linear(x, W), y)


def test_a_model_decodes_to_the_same_logits_with_and_without_it(cx, tmp_path, monkeypatch):
    def qtype_of(i, name, shape):
        return (Q.Q8_0, Q.Q4_K if shape[-1] % 256 == 0 else Q.Q4_0, Q.F32)[i % 3]

    model = toycards.load(llama_file(tmp_path / "m.gguf", (2, 64, 96, 120, 4, 2), qtype_of), target="torch")

    def decode(glue) -> list[torch.Tensor]:
        monkeypatch.setattr(glue_cpp, "module", lambda: glue)
        cache, out = model.new_cache(), []
        with torch.inference_mode():
            out.append(model(torch.tensor([[5, 17, 3, 99]]), cache, last=True))
            for tok in (7, 11, 2, 64, 1):
                out.append(model(torch.tensor([[tok]]), cache, last=True))
        return out

    calls = []
    counted = {n: _counted(getattr(cx, n), calls) for n in ("linear", "linears", "swiglu", "rms_norm", "gqa")}
    counting = type("Counting", (), {**counted, "__getattr__": lambda self, n: getattr(cx, n)})()
    with_glue, without = decode(counting), decode(None)
    assert {c for c, taken in calls if taken} == {"linear", "linears", "swiglu", "rms_norm", "gqa"}
    for a, b in zip(with_glue, without, strict=True):
        assert torch.equal(a, b)


def _counted(fn, calls):
    def call(*args):
        y = fn(*args)
        calls.append((fn.__name__, y is not None))
        return y

    return staticmethod(call)


def test_turned_off_there_is_no_module():
    code = "from toycards import engine; print(engine.native() is None)"
    env = {**os.environ, glue_cpp.SWITCH: "off"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_attention_refuses_buffers_that_do_not_fit(cx):
    """gqa completes a call glue_torch has prepared and decided: anything that does not fit the
    prepared shapes is an error (never a write past a buffer), and a fitting call is tc_gqa's."""
    H, H_kv, d, T = 4, 2, 16, 1
    Q, K, V = torch.randn(1, T, H * d), torch.randn(1, T, H_kv * d), torch.randn(1, T, H_kv * d)
    call = glue_torch._prepare(Q, K, V, H, H_kv, "pairs", 0.0)
    Kc, Vc = torch.zeros(1, H_kv, 4, d), torch.zeros(1, H_kv, 4, d)
    with pytest.raises(ValueError, match="not prepared"):  # no angles or mask yet
        cx.gqa(call.addr, Q, K, V, Kc, Vc, 0)
    cos, sin = torch.ones(T, d // 2), torch.zeros(T, d // 2)  # position 1: no rotation
    mask = torch.ones(T, 4, dtype=torch.bool)
    a = call.args
    a.cos, a.sin, a.half, a.allowed = cos.data_ptr(), sin.data_ptr(), d // 2, mask.data_ptr()
    for why, args in {
        "a cache without room": (Q, K, V, Kc, Vc, 4),
        "a cache of other heads": (Q, K, V, torch.zeros(1, 3, 4, d), Vc, 0),
        "a cache of another head size": (Q, K, V, Kc, torch.zeros(1, H_kv, 4, d + 1), 0),
        "Q of other heads": (torch.randn(1, T, 2 * H * d), K, V, Kc, Vc, 0),
        "V unlike K": (Q, K, torch.randn(1, T, 2 * H_kv * d), Kc, Vc, 0),
        "a float64 Q": (Q.double(), K, V, Kc, Vc, 0),
        "negative rows used": (Q, K, V, Kc, Vc, -1),
    }.items():
        with pytest.raises(ValueError):
            cx.gqa(call.addr, *args)
            pytest.fail(why)
    out = cx.gqa(call.addr, Q, K, V, Kc, Vc, 3)  # three keys already there (zeros), the new one
    assert torch.equal(Kc[0, :, 3], K.view(H_kv, d)) and torch.equal(Vc[0, :, 3], V.view(H_kv, d))
    scores = torch.einsum("hd,jsd->hjs", Q.view(H, d), Kc[0])[torch.arange(H), torch.arange(H) // 2] / d**0.5
    want = torch.einsum("hs,hsd->hd", scores.softmax(-1), Vc[0][torch.arange(H) // 2])
    torch.testing.assert_close(out.view(H, d), want, rtol=1e-5, atol=1e-6)


def test_plain_answers_as_the_python_check(cx):
    x = torch.randn(2, 3)
    cases = [
        x, torch.nn.Parameter(x.clone(), requires_grad=False), x.T, x.double(), x.half(), x.as_subclass(Sub), torch.tensor(1.0),
        torch.empty(0, 4), x[:, :2], x.to_sparse(), x.numpy(), "x", None, torch.randn(3, requires_grad=True),
    ]  # fmt: skip
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            for case in cases:
                with python_glue():
                    want = (
                        glue_torch.plain(case)
                        if torch.is_tensor(case) and case.layout == torch.strided
                        else False
                    )
                assert cx.plain(case) == want, (grad, case)
            with python_glue():
                assert glue_torch.plain(*cases[:2]) and not glue_torch.plain(*cases[:3])
            assert cx.plain(*cases[:2]) and not cx.plain(*cases[:3]) and cx.plain()
