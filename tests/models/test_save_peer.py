"""A saved file reads back as the model that wrote it, here and in llama.cpp.

`toycards.save` of a model whose weights changed since loading: the output projection that was
tied to the token embedding now differs from it, and the RoPE divisors (`or 1` in the card) are
no longer ones. The file must carry both under their own names: reloaded, it gives the in-memory
model's logits exactly; and llama.cpp itself (where llama-cpp-python is installed: the
interpreter named by TOYCARDS_LLAMA_CPP_PYTHON, or this one) gives them to float32 rounding.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

import toycards

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-llama.gguf"
IDS = [5, 17, 300, 2, 999, 64, 8]


@pytest.fixture(scope="module")
def changed(tmp_path_factory):
    """(in-memory logits, saved path): the example model with every weight moved a little."""
    model = toycards.load(EXAMPLE, target="numpy")
    rng = np.random.default_rng(0)
    for name, w in model.w.items():
        model.w[name] = w + 0.01 * rng.standard_normal(w.shape).astype(np.float32)
    path = toycards.save(model, tmp_path_factory.mktemp("save") / "changed.gguf")
    return model.logits(IDS), path


def test_an_untied_output_and_changed_constants_are_written_under_their_own_names(changed):
    logits, path = changed
    names = {t.name for t in gguf.GGUFReader(path).tensors}
    assert {"output.weight", "rope_freqs.weight", "token_embd.weight"} <= names
    assert np.array_equal(toycards.load(path, target="numpy").logits(IDS), logits)


def _llama_cpp_python() -> str | None:
    given = os.environ.get("TOYCARDS_LLAMA_CPP_PYTHON")
    if given:
        return given
    return sys.executable if importlib.util.find_spec("llama_cpp") is not None else None


@pytest.mark.skipif(
    _llama_cpp_python() is None, reason="llama-cpp-python is not installed (a benchmark dependency)"
)
def test_llama_cpp_reads_a_saved_file_as_toycards_wrote_it(changed, tmp_path):
    logits, path = changed
    out = tmp_path / "llama_cpp.npy"
    script = ROOT / "tests" / "peers" / "llama_cpp_logits.py"
    subprocess.run([_llama_cpp_python(), script, path, json.dumps(IDS), out], check=True, timeout=300)
    got = np.load(out)
    worst = float(np.abs(got - logits).max())
    assert worst < 2e-4 * max(1.0, float(np.abs(logits).max())), f"max |Δ logit| {worst:.3g}"
