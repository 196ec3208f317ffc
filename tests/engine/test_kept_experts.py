"""Stacks of experts kept in their GGUF blocks (engine/stack.py; docs/performance.md, "Weights stay in
their blocks").

A stack W [E, n, k] of any type the kernels take is, as stored, one block matrix of E·n rows: `W[e]`
is matrix e as a weight over the same bytes (no copy), whose products are those of a weight made of
its rows alone, held to gguf.quants' dequantized matrix and a float64 product (test_quant_kernels'
`check_product`); `W.linear` multiplies matrix e by slice e of x (deepseek2's `W[h, :, :] · X^h`);
any other use gets gguf.quants' dequantized stack. Whole models: the oracle's quantized mixtures of
experts (olmoe, qwen3moe Q8_0, and gpt-oss with MXFP4 experts as released) keep every expert stack in
the file's bytes on both targets, and give the logits of the model whose weights are the stored
numbers within the oracle tests' 1e-4 (a prompt's expert products are a prompt's, however few tokens
an expert gets); their cached decoding gives the full pass's logits: to float32 rounding where the
few-token products multiply in float32 (F16, MXFP4), within the int8 rounding of x otherwise (Q8_0,
as llama.cpp's, test_quant_kernels' bound for whole models). A stack packs once, as its block
matrix, and each expert reads its rows of that copy. The torch model's move off the CPU makes each
stack a float32 parameter [E, n, k].
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants
from oracle.hf_gguf import hf_logits, quantized_copy, tiny_model, write_gguf
from test_kv_cache import decode_in_chunks, run, tol
from test_models_oracle import assert_logits_close, ids_for
from test_quant_kernels import K_QUANTS, NO_KERNELS, TYPES, check_product, small_blocks

from toycards import engine
from toycards.engine import ckernels, mapped
from toycards.gguf.reader import open_gguf
from toycards.models.load import load

Q = GGMLQuantizationType
TARGETS = ("numpy", "torch")
MOE_FILES = (("olmoe", "Q8_0"), ("qwen3moe", "Q8_0"), ("olmoe", "F16"), ("gpt-oss", "MXFP4_MOE"))
STACKS = ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight")


@pytest.fixture(scope="module")
def moe_file(oracle_files, tmp_path_factory):
    """`moe_file(case, ftype)`: (path, the model whose weights are the file's numbers, its config);
    gpt-oss with MXFP4 experts written as its converter writes them (tests/models/test_gpt_oss.py)."""
    made = {}

    def get(case: str, ftype: str):
        if (case, ftype) not in made:
            if ftype == "MXFP4_MOE":
                model, config = tiny_model(case)
                path = write_gguf(
                    model, config, tmp_path_factory.mktemp("mxfp4") / "gpt-oss.gguf", case, ftype
                )
                made[case, ftype] = path, quantized_copy(model, config, case, ftype), config
            else:
                f = oracle_files(case, ftype)
                made[case, ftype] = f.path, f.reference, f.config
        return made[case, ftype]

    return get


def as_numpy(a) -> np.ndarray:
    return a.numpy() if torch.is_tensor(a) else np.asarray(a)


def file_blocks(stack) -> np.ndarray:
    """The NumPy array of a stack's blocks (the torch target's QuantWeight holds it beside its tensor)."""
    return getattr(stack.whole, "_np", stack.whole.blocks)


# ── one stack of each type the kernels take ─────────────────────────────────────────────────
E, N_ROWS = 3, 12  # 12 rows: on the packed groups of 4


@pytest.fixture(scope="module", params=TYPES, ids=lambda t: t.name)
def stack_blocks(request):
    """(type, blocks uint8 [E·n, row_bytes], gguf.quants' dequantized stack [E, n, k])."""
    qtype = request.param
    k = 256 if qtype in K_QUANTS else 64
    blocks = small_blocks(qtype, (E * N_ROWS, k), np.random.default_rng(int(qtype) + 100))
    want = np.asarray(quants.dequantize(blocks, qtype), np.float32).reshape(E, N_ROWS, k)
    return qtype, blocks, want


@pytest.mark.skipif(NO_KERNELS, reason="no C compiler (or TOYCARDS_QUANT_KERNELS=off): no kernels")
@pytest.mark.parametrize("prefill", ["float32", "shipped"])
@pytest.mark.parametrize("target", TARGETS)
def test_a_stacks_matrices_are_weights_over_its_blocks(stack_blocks, target, prefill, monkeypatch):
    """Matrix e of a stack: its rows of the blocks, multiplied as a weight of those rows alone is; a
    prompt's few rows (`prompt`, an expert's share of a prompt) as a prompt's product: in float32 on
    dequantized tiles under TOYCARDS_PREFILL=float32, else rounding x to int8 as decoding does."""
    if prefill == "shipped":
        monkeypatch.delenv("TOYCARDS_PREFILL", raising=False)
    qtype, blocks, want = stack_blocks
    kernels = engine.backend(target)
    k = want.shape[-1]
    W = kernels.QuantStack(kernels.QuantWeight(blocks, qtype, (E * N_ROWS, k)), E)
    assert tuple(W.shape) == (E, N_ROWS, k) and W.nbytes == blocks.nbytes and len(W) == E
    assert np.array_equal(as_numpy(W.dequantize()), want)
    rng = np.random.default_rng(7)
    for e in range(E):
        matrix = W[e]
        assert matrix.__class__ is kernels.QuantWeight and matrix.shape == (N_ROWS, k)
        assert W[e, :, :] is matrix and W[e - E] is matrix  # made once, however it is indexed
        assert np.shares_memory(as_numpy(matrix.blocks), blocks)  # the same bytes, no copy
        alone = kernels.QuantWeight(blocks[e * N_ROWS : (e + 1) * N_ROWS].copy(), qtype, (N_ROWS, k))
        for n_tokens, prompt in ((1, False), (3, False), (3, True), (ckernels.FEW_TOKENS + 5, False)):
            x = rng.normal(size=(n_tokens, k)).astype(np.float32)
            xs = torch.from_numpy(x) if target == "torch" else x
            y = matrix.linear(xs, prompt)
            assert np.array_equal(as_numpy(y), as_numpy(alone.linear(xs, prompt)))
            tiles = prompt and not ckernels.int8_prefill(qtype)  # a prompt's product in float32
            check_product(y, x, want[e], qtype, ckernels.FEW_TOKENS + 1 if tiles else n_tokens)
    x = rng.normal(size=(2, E, 4, k)).astype(np.float32)  # (batch, E, ℓ, k): matrix e on x[:, e]
    xs = torch.from_numpy(x) if target == "torch" else x
    y = as_numpy(W.linear(xs))
    assert y.shape == (2, E, 4, N_ROWS)
    for e in range(E):
        assert np.array_equal(y[:, e], as_numpy(W[e].linear(xs[:, e])))
    shared = as_numpy(W.linear(xs[0, 0]))  # (ℓ, k): the same x for every matrix
    assert np.array_equal(shared, np.stack([as_numpy(W[e].linear(xs[0, 0])) for e in range(E)]))
    assert np.array_equal(as_numpy(W + 0), want) and np.array_equal(as_numpy(W[:, 1]), want[:, 1])
    with pytest.raises(IndexError):
        W[E]


def test_any_other_torch_use_gets_the_dequantized_stack():
    qtype = Q.Q8_0
    blocks = small_blocks(qtype, (E * N_ROWS, 64), np.random.default_rng(3))
    kernels = engine.backend("torch")
    W = kernels.QuantStack(kernels.QuantWeight(blocks, qtype, (E * N_ROWS, 64)), E)
    dense = W.dequantize()
    x = torch.randn(E, 5, 64)
    assert torch.equal(torch.matmul(x, W.transpose(-1, -2)), torch.matmul(x, dense.transpose(-1, -2)))
    assert torch.equal(W.detach(), dense) and W.dim() == 3 and W.size(0) == E


# ── whole models ─────────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize("case, ftype", MOE_FILES)
@pytest.mark.parametrize("target", TARGETS)
def test_a_mixture_of_experts_keeps_its_stacks_in_the_files_bytes(moe_file, case, ftype, target):
    """Every expert stack is a QuantStack whose bytes are the file's (a read-only view of its mapping,
    its size as stored: not float32's 4 bytes a weight), and the logits are those of the stored numbers."""
    path, reference, config = moe_file(case, ftype)
    model = load(path, target=target)
    QuantStack = engine.backend(target).QuantStack
    with open_gguf(path) as f:
        stacks = {n: info for n, info in f.tensors.items() if n.endswith(STACKS)}
        assert stacks
        for name, info in stacks.items():
            W = model.w[name]
            assert isinstance(W, QuantStack), f"{name}: {type(W).__name__}"
            assert W.ggml_type == info.ggml_type and tuple(W.shape) == tuple(info.shape)
            assert W.nbytes == info.n_bytes <= 2 * info.n_elements  # F16's 2 bytes a weight, or fewer
            assert mapped.file_view(file_blocks(W)), f"{name}: its blocks are not a view of the file"
    ids = ids_for(config.vocab_size, 64)
    want = hf_logits(reference, ids)
    assert_logits_close(model.logits(ids), want, what=f"{case} {ftype} {target}, experts in their blocks")


@pytest.mark.parametrize("case, ftype", MOE_FILES)
@pytest.mark.parametrize("target", TARGETS)
def test_cached_decoding_with_experts_in_their_blocks(moe_file, case, ftype, target):
    path, _, _ = moe_file(case, ftype)
    model = load(path, target=target)
    ids = np.random.default_rng(4).integers(0, model.hp["N_V"], size=(1, 20))
    full = run(model, ids)[0]
    got = decode_in_chunks(model, ids, [5] + [1] * 15)[0]
    types = {model.w[n].ggml_type for n in model.w if n.endswith(STACKS)}
    if any(ckernels.quantizes_x(t) for t in types):  # int8 x, as llama.cpp's: measured 1.1% of the range
        err = np.abs(got - full).max() / np.abs(full).max()
        assert err <= 0.1, (
            f"{case} {ftype} {target}: decoding {err:.3g} of the logits' range from the full pass"
        )
    else:
        assert_logits_close(got, full, tol(full), f"{case} {ftype} {target} prefill 5 then 1 by 1")


def test_a_move_off_the_cpu_makes_each_stack_a_float32_parameter(moe_file):
    path, reference, config = moe_file("olmoe", "Q8_0")
    model = load(path, target="torch")
    stacks = {n: w for n, w in model.w._quantized.items() if n.endswith(STACKS)}
    assert stacks
    model._float_kept()  # what `.to("cuda")` does first
    params = dict(model.named_parameters())
    for name, W in stacks.items():
        assert torch.equal(params[name].data, W.dequantize()) and params[name].shape == W.shape
    ids = ids_for(config.vocab_size, 7)
    assert_logits_close(model.logits(ids), hf_logits(reference, ids), what="olmoe Q8_0, float32 experts")


def test_a_move_to_another_device_takes_each_stack_there_as_a_float32_parameter(moe_file):
    path, _, _ = moe_file("gpt-oss", "MXFP4_MOE")
    model = load(path, target="torch")
    stacks = {n: tuple(w.shape) for n, w in model.w._quantized.items() if n.endswith(STACKS)}
    assert stacks
    model.to("meta")  # (no GPU needed: the same move, to tensors without values)
    params = dict(model.named_parameters())
    assert not model.w._quantized
    for name, shape in stacks.items():
        assert params[name].device.type == "meta" and tuple(params[name].shape) == shape
        assert model.w[name] is params[name]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_a_model_with_kept_experts_moved_to_cuda(moe_file):
    path, reference, config = moe_file("gpt-oss", "MXFP4_MOE")
    model = load(path, target="torch").to("cuda")
    assert not model.w._quantized and {p.device.type for p in model.parameters()} == {"cuda"}
    ids = ids_for(config.vocab_size, 9)
    assert_logits_close(model.logits(ids), hf_logits(reference, ids), what="gpt-oss MXFP4 moved to cuda")


@pytest.mark.skipif(NO_KERNELS, reason="no C compiler (or TOYCARDS_QUANT_KERNELS=off): no kernels")
@pytest.mark.parametrize("target", TARGETS)
def test_a_stack_packs_once_and_its_matrices_read_that_copy(moe_file, target):
    """A stack packs as the one block matrix it is stored as (a type that packs at its first decoding
    step: Q8_0), and each expert's matrix reads its rows of that copy: the stack costs its size once."""
    if not ckernels.packs_at_first_decoding(Q.Q8_0):
        pytest.skip("Q8_0 has no packed layout here")
    path, _, _ = moe_file("olmoe", "Q8_0")
    model = load(path, target=target)
    cache = model.new_cache()
    for token in (3, 7, 11):  # decoding steps: each chosen expert's few-token products
        run(model, np.array([[token]]), cache)
    for name in (n for n in model.w if n.endswith(STACKS)):
        W = model.w[name]
        assert W.whole._packed is not None, f"{name} did not pack"
        for e in range(len(W)):  # the experts the steps chose, and the others as they are first picked
            assert np.shares_memory(as_numpy(W[e]._packed), as_numpy(W.whole._packed)), (name, e)
