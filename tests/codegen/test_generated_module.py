"""A module written by `toycards gen` runs on its own: `Model.from_gguf(path)` in a fresh process.

For examples/tiny-llama.gguf on both targets: `toycards gen` (the command, in a subprocess) writes
the module; a fresh Python process imports it from its folder, builds `Model.from_gguf(FILE)`
and writes its logits and a greedy continuation; these must equal `toycards.load(FILE)`'s, and
the model must be an instance of the module's own `Model` (its forward pass is the module's
code, not one generated afresh). A module whose card does not fit the file is refused with
one line naming the file.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import toycards
from toycards.errors import ToycardsError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-llama.gguf"
IDS = [1023, 15, 300, 7, 999, 42, 5]

RUN_THE_MODULE = """
import json, sys
import numpy as np
import tiny_llama
model = tiny_llama.Model.from_gguf(sys.argv[1])
np.save("logits.npy", model.logits(json.loads(sys.argv[2])))
text = "".join(model.generate("Hello", max_tokens=8))
print(json.dumps({"class": type(model).__module__ + "." + type(model).__name__, "text": text}))
"""


def gen(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "toycards", "gen", *args], capture_output=True, text=True, cwd=cwd
    )


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_a_generated_module_loads_a_file_by_itself(target, tmp_path):
    if target == "torch":
        pytest.importorskip("torch")
    made = gen(str(EXAMPLE), "--target", target, "-o", "tiny_llama.py", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    ran = subprocess.run(
        [sys.executable, "-c", RUN_THE_MODULE, str(EXAMPLE), json.dumps(IDS)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    said = json.loads(ran.stdout)
    assert said["class"] == "tiny_llama.Model"
    reference = toycards.load(EXAMPLE, target=target)
    want, got = reference.logits(IDS), np.load(tmp_path / "logits.npy")
    assert got.shape == (len(IDS), 1024)
    np.testing.assert_array_equal(got, want)
    assert said["text"] == "".join(reference.generate("Hello", max_tokens=8))


def test_a_module_whose_card_does_not_fit_the_file_is_one_line(tmp_path):
    made = gen(str(ROOT / "toycards" / "library" / "cards" / "gpt2.card"), "--target", "numpy", "-o", "gpt2.py",
               cwd=tmp_path)  # fmt: skip
    assert made.returncode == 0, made.stderr
    spec = importlib.util.spec_from_file_location("gpt2_module", tmp_path / "gpt2.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(ToycardsError) as e:
        module.Model.from_gguf(EXAMPLE)
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"{EXAMPLE}: tensor 'position_embd.weight' is missing from the file")


def test_only_a_generated_class_has_a_card_to_bind():
    from toycards.runtime.numpy.model import NumpyModel

    with pytest.raises(ToycardsError, match="only the Model class of a generated module"):
        NumpyModel.from_gguf(EXAMPLE)
