"""Choosing where the torch target runs, as far as a machine without a GPU can show it (the GPU
itself: tests/runtime/test_cuda.py).

- `load(..., device="cpu")` is the plain CPU model (weights kept in their blocks, same logits);
- a move off the CPU (`model.to("meta")` here, which needs no GPU) first turns every weight kept
  in its GGUF blocks into a float32 parameter at its GGUF name, tied names sharing one, with the
  values the blocks hold; `model.device` follows the parameters there and back;
- a device torch does not know, CUDA where torch sees none, or a device for the NumPy or reference
  target is one line and exit 1 from `run` and `eval` (`train --device cuda` too, writing
  nothing), and a ToycardsError from `load`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import toycards
from toycards.cli import main
from toycards.errors import ToycardsError

torch = pytest.importorskip("torch")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny-llama.gguf"
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this torch sees a CUDA device")


def test_device_cpu_is_the_plain_model():
    plain = toycards.load(EXAMPLE, target="torch")
    on_cpu = toycards.load(EXAMPLE, target="torch", device="cpu")
    assert on_cpu.w._quantized.keys() == plain.w._quantized.keys() != set()
    assert on_cpu.device == torch.device("cpu")
    np.testing.assert_array_equal(on_cpu.logits([1, 2, 3]), plain.logits([1, 2, 3]))


def test_a_move_off_the_cpu_makes_kept_weights_parameters():
    model = toycards.load(EXAMPLE, target="torch")
    kept = dict(model.w._quantized)
    assert kept and not kept.keys() & {name for name, _ in model.named_parameters()}
    model.to("meta")
    assert model.device == torch.device("meta") and not model.w._quantized
    params = dict(model.named_parameters(remove_duplicate=False))
    for name, q in kept.items():
        assert params[name].device.type == "meta" and params[name].shape == q.shape
        assert model.w[name] is params[name]
    model.to_empty(device="cpu")  # (meta tensors hold no values to copy back)
    assert model.device == torch.device("cpu")


def test_kept_weights_become_the_parameters_their_blocks_hold():
    """What a move off the CPU does first, done on the CPU: the blocks' values, tied names sharing
    one parameter, and the dequantized model's logits."""
    model = toycards.load(EXAMPLE, target="torch")
    kept = dict(model.w._quantized)
    model._float_kept()
    assert not model.w._quantized
    params = dict(model.named_parameters(remove_duplicate=False))
    for name, q in kept.items():
        assert model.w[name] is params[name] and params[name].requires_grad
        torch.testing.assert_close(params[name].detach(), q.dequantize(), rtol=0, atol=0)
    for a in kept:
        for b in kept:
            assert (params[a] is params[b]) == (kept[a] is kept[b]), (a, b)
    want = toycards.load(EXAMPLE, target="torch", dequantize=True).logits(list(range(1, 12)))
    np.testing.assert_allclose(model.logits(list(range(1, 12))), want, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "device, target, message",
    [
        ("gpu7", "torch", "device gpu7: not a device torch knows"),
        ("cuda", "numpy", "device cuda: only the torch target runs on a device"),
        ("cpu", "reference", "device cpu: only the torch target runs on a device"),
        pytest.param("cuda", "torch", "device cuda: this torch has no CUDA device", marks=NO_CUDA),
    ],
)
def test_load_refuses_a_device_it_cannot_use(device, target, message):
    with pytest.raises(ToycardsError, match=message):
        toycards.load(EXAMPLE, target=target, device=device)


@pytest.mark.parametrize("command", ["run", "eval"])
@pytest.mark.parametrize(
    "args, message",
    [
        (["--device", "gpu7", "--target", "torch"], "--device gpu7: not a device torch knows"),
        (["--device", "cuda"], "--device cuda: only the torch target runs on a device (add --target torch)"),
        pytest.param(
            ["--device", "cuda:0", "--target", "torch"],
            "--device cuda:0: this torch has no CUDA device",
            marks=NO_CUDA,
        ),
    ],
)
def test_the_cli_refuses_a_device_in_one_line(command, args, message):
    result = CliRunner().invoke(main, [command, str(EXAMPLE), "--prompt", "one two", *args])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.output


def test_run_on_the_cpu_device_is_the_torch_run():
    args = ["run", str(EXAMPLE), "--prompt", "one two three", "-n", "8", "--target", "torch"]
    plain, on_cpu = CliRunner().invoke(main, args), CliRunner().invoke(main, [*args, "--device", "cpu"])
    assert plain.exit_code == on_cpu.exit_code == 0, on_cpu.output
    assert on_cpu.stdout == plain.stdout


@NO_CUDA
def test_train_refuses_cuda_without_one(tmp_path):
    data = tmp_path / "count.txt"
    data.write_text("one two three four.\n" * 50, encoding="utf-8")
    out = tmp_path / "out.gguf"
    args = ["train", "llama", "--tokenizer", str(EXAMPLE), "--data", str(data), "--out", str(out)]
    result = CliRunner().invoke(main, [*args, "--set", "L=1", "--steps", "1", "--device", "cuda"])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--device cuda: this torch has no CUDA device" in lines[0], result.stderr
    assert not out.exists()
