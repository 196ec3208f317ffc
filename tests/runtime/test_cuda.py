"""The torch target on a CUDA device: every test here is skipped where torch sees no GPU (CI), and
runs on a machine with one (`python -m pytest tests/runtime/test_cuda.py`).

What each test shows, against the same oracles as the CPU tests:
- every oracle family's F32 file loaded with `device="cuda"` gives transformers' logits (computed
  on the CPU) within the CPU tests' 1e-4, its parameters and logits made on the GPU; a Q8_0 file
  gives its dequantized reference (the weights become float32 on the device: the block kernels
  run on the CPU alone);
- `model.to("cuda")` of a model whose weights are kept in their blocks makes them float32
  parameters (tied names one parameter) and gives the CPU model's dequantized logits;
- cached decoding on the GPU (one token at a time, `last=True`) gives the full pass's logits,
  sliding windows, soft caps and experts included; a batch of two gives each sequence's logits;
- `toycards run --device cuda` writes the CPU run's greedy text; `toycards train --device cuda`
  follows the CPU run's loss curve up to float32 rounding (bfloat16 autocast too, within its
  rounding), and under torchrun with NCCL and `--fsdp` the one-process run's.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from test_models_oracle import FAMILIES, assert_logits_close, ids_for
from test_train import FAST, LLAMA, TOKENIZER, counting_text, json_lines

from toycards.cli import main
from toycards.models.load import load

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")

ROOT = Path(__file__).resolve().parents[2]
ATOL = 1e-4
DECODED = ("gpt2", "llama", "gemma2", "gemma3", "phi3", "qwen3moe", "stablelm", "olmo3")


@pytest.fixture(autouse=True, scope="module")
def exact_float32():
    """No TF32 in float32 products (torch's default for matmuls; cuDNN's is on): the CPU tests' 1e-4."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def on_gpu(model) -> None:
    kinds = {p.device.type for p in model.parameters()}
    assert kinds == {"cuda"}, f"parameters on {kinds}"
    assert not model.w._quantized, "no weight is left in its blocks on the CPU"


@pytest.mark.parametrize("case", FAMILIES)
def test_f32_logits_on_cuda_match_transformers(oracle_files, case):
    from oracle.hf_gguf import hf_logits

    f = oracle_files(case, "F32")
    model = load(f.path, target="torch", device="cuda")
    on_gpu(model)
    for length in (1, 7, 64):
        ids = ids_for(f.config.vocab_size, length)
        with torch.inference_mode():
            raw = model(torch.tensor([ids]))
        assert raw.device.type == "cuda"
        assert_logits_close(model.logits(ids), hf_logits(f.model, ids), ATOL, f"{case} cuda, {length} tokens")


@pytest.mark.parametrize("case", ("llama", "gemma2", "qwen3moe", "phi3"))
def test_a_q8_0_file_on_cuda_gives_its_dequantized_reference(oracle_files, case):
    f = oracle_files(case, "Q8_0")
    ids = ids_for(f.config.vocab_size, 64)
    model = load(f.path, target="torch", device="cuda")
    on_gpu(model)
    assert_logits_close(model.logits(ids), f.expected_logits(ids), ATOL, f"{case} Q8_0 on cuda")


def test_moving_a_model_with_kept_blocks_to_cuda(oracle_files):
    f = oracle_files("llama", "Q8_0")
    model = load(f.path, target="torch")
    assert model.w._quantized, "the CPU model keeps its Q8_0 matrices in their blocks"
    want = load(f.path, target="torch", dequantize=True).logits(ids_for(f.config.vocab_size, 9))
    model.to("cuda")
    on_gpu(model)
    assert model.device.type == "cuda"
    assert_logits_close(model.logits(ids_for(f.config.vocab_size, 9)), want, ATOL, "llama Q8_0 moved")
    model.cpu()
    assert model.device.type == "cpu"
    assert_logits_close(model.logits(ids_for(f.config.vocab_size, 9)), want, ATOL, "llama Q8_0 moved back")


def test_tied_weights_stay_one_parameter_on_cuda():
    """The example's unembedding is its token embedding (no output.weight): one parameter on the GPU."""
    model = load(TOKENIZER, target="torch")
    assert model.w._quantized["output.weight"] is model.w._quantized["token_embd.weight"]
    model.to("cuda")
    params = dict(model.named_parameters(remove_duplicate=False))
    assert params["output.weight"] is params["token_embd.weight"]
    assert params["output.weight"].device.type == "cuda"
    want = load(TOKENIZER, target="torch", dequantize=True).logits(list(range(1, 20)))
    assert_logits_close(model.logits(list(range(1, 20))), want, ATOL, "the example moved to cuda")


@pytest.mark.parametrize("case", DECODED)
def test_cached_decoding_on_cuda_gives_the_full_pass(oracle_files, case):
    """A 5-token prompt, then 11 tokens one at a time on one cache: each step's last-token logits
    are the full pass's at that position (16 tokens cross the windows of 4 of gemma2, gemma3, olmo3)."""
    f = oracle_files(case, "F32")
    model = load(f.path, target="torch", device="cuda")
    ids = ids_for(f.config.vocab_size, 16)
    full = model.logits(ids)
    cache = model.new_cache()
    with torch.inference_mode():
        steps = [model(torch.tensor([ids[:5]]), cache, last=True)[0, -1]]
        steps += [model(torch.tensor([[i]]), cache, last=True)[0, -1] for i in ids[5:]]
    got = torch.stack(steps).float().cpu().numpy()
    assert cache.length == 16
    assert_logits_close(got, full[4:], ATOL, f"{case} cached decoding on cuda")


@pytest.mark.parametrize("case", ("llama", "gemma3", "olmoe"))
def test_a_batch_on_cuda_gives_each_sequence(oracle_files, case):
    f = oracle_files(case, "F32")
    model = load(f.path, target="torch", device="cuda")
    a, b = ids_for(f.config.vocab_size, 12), ids_for(f.config.vocab_size, 64)[:12]
    with torch.inference_mode():
        both = model(torch.tensor([a, b])).float().cpu().numpy()
    assert_logits_close(both[0], model.logits(a), ATOL, f"{case} batch row 0")
    assert_logits_close(both[1], model.logits(b), ATOL, f"{case} batch row 1")


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_run_on_cuda_writes_the_cpu_runs_text():
    args = ("run", TOKENIZER, "--prompt", "one two three", "-n", 12, "--target", "torch")
    cpu, gpu = cli(*args), cli(*args, "--device", "cuda")
    assert cpu.exit_code == 0 and gpu.exit_code == 0, (cpu.output, gpu.output)
    assert gpu.stdout == cpu.stdout


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text") / "count.txt"
    path.write_text(counting_text(), encoding="utf-8")
    return path


def train(data, out, *extra):
    result = cli("train", "llama", "--tokenizer", TOKENIZER, "--data", data, "--out", out, *LLAMA, *FAST,
                 "--steps", 20, "--json", *extra)  # fmt: skip
    assert result.exit_code == 0, result.output
    return np.array([e["loss"] for e in json_lines(result.stdout) if "step" in e])


def test_training_on_cuda_follows_the_cpu_run(data, tmp_path):
    cpu = train(data, tmp_path / "cpu.gguf")
    gpu = train(data, tmp_path / "gpu.gguf", "--device", "cuda")
    assert cpu[0] == pytest.approx(math.log(1024), abs=0.1) and cpu[-1] < cpu[0] - 2, cpu
    np.testing.assert_allclose(gpu, cpu, rtol=1e-3, err_msg="cuda's loss curve against the CPU's")
    ids = ids_for(1024, 16)
    assert_logits_close(
        load(tmp_path / "gpu.gguf", target="numpy").logits(ids),
        load(tmp_path / "cpu.gguf", target="numpy").logits(ids),
        1e-2,
        "the file trained on cuda against the one trained on the CPU",
    )
    low = train(data, tmp_path / "bf16.gguf", "--device", "cuda", "--dtype", "bfloat16")
    gap = np.abs(low - cpu)
    assert 0 < gap.max() < 0.05, f"bfloat16 on cuda: worst |Δ| {gap.max():.3g} at step {gap.argmax() + 1}"


def test_fsdp_under_torchrun_with_nccl(data, tmp_path):
    """One process, NCCL, `--fsdp`: the loss curve of the run without torchrun (the same windows and
    mean gradient; a reduce-scatter over one process is the identity)."""
    alone = train(data, tmp_path / "alone.gguf", "--device", "cuda")
    out = tmp_path / "fsdp.gguf"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
    }
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "-m", "toycards", "train",
           "llama", "--tokenizer", str(TOKENIZER), "--data", str(data), "--out", str(out), *LLAMA, *FAST,
           "--steps", "20", "--json", "--device", "cuda", "--fsdp"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    fsdp = np.array([e["loss"] for e in lines if "step" in e])
    np.testing.assert_allclose(fsdp, alone, rtol=1e-4, err_msg="fsdp over NCCL against one process")
    assert out.is_file()
