"""A GGUF file changed under a loaded model: an error on the model's next use, never a crash.

The weights read the file's pages through a memory mapping, so a read past the end of a file that
was truncated after loading kills the process (SIGBUS). The file is compared with the file as it
was opened before each forward pass and before each packing step (engine/packing.py's module
docstring states the rule): a truncation, or a rewrite in place with a new modification time, is
one ToycardsError naming the file; a file renamed over it leaves the model reading the old one.
The cases that would crash run in a child process, so that a crash fails the test instead of
killing pytest. The packing thread a load starts stops when the load fails, when the model is
dropped and when the file changes, and copies nothing after.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf_factory import llama_inventory, typed, write_gguf

import toycards
from toycards import engine
from toycards.engine import ckernels as quant_kernels
from toycards.engine import packing
from toycards.errors import ToycardsError

Q = GGMLQuantizationType
ROOT = Path(__file__).resolve().parents[2]
IDS = [3, 17, 5, 30, 11, 2, 8, 21, 13, 1, 34, 9]  # 12 tokens: more than FEW_FLOAT_TOKENS
CHANGED = "changed on disk while loaded; load it again"
PACKS = quant_kernels.pack_rows(Q.Q8_0) > 0 and quant_kernels.packs_at_first_decoding(Q.Q8_0)
THREADS = ("toycards-pack-ahead", "toycards-read-ahead")


def tiny_model(path: Path, qtype: Q, n_tokens: int = 0, seed: int = 3) -> Path:
    """A 2-layer Llama GGUF (d_e 64, 40 tokens) of random weights drawn from `seed`, its matrices
    stored as `qtype`; `n_tokens`: a vocabulary of that many tokens (more than 40: one llama.cpp
    refuses)."""
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape in llama_inventory(n_layer=2, d_e=64, d_ff=128, n_vocab=40, n_head=4, n_head_kv=2):
        if len(shape) == 1:
            tensors[name] = np.ones(shape, np.float32)
        else:
            tensors[name] = (rng.normal(0.0, 0.2, size=shape).astype(np.float32), qtype)
    u32 = 4  # GGUFValueType.UINT32
    kv = {
        "llama.block_count": typed(2, u32), "llama.context_length": typed(64, u32),
        "llama.embedding_length": typed(64, u32), "llama.feed_forward_length": typed(128, u32),
        "llama.attention.head_count": typed(4, u32), "llama.attention.head_count_kv": typed(2, u32),
        "llama.attention.layer_norm_rms_epsilon": typed(1e-5, 6),
    }  # fmt: skip
    if n_tokens:
        kv["tokenizer.ggml.model"] = "gpt2"
        kv["tokenizer.ggml.tokens"] = [chr(0x100 + i) for i in range(n_tokens)]
        kv["tokenizer.ggml.merges"] = [f"{chr(0x100)} {chr(0x101)}"]
    return write_gguf(path, kv=kv, tensors=tensors)


def in_child(code: str, path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """Run `code` (with `path` in sys.argv[1]) in a new interpreter; its result is the JSON object
    on the last line of its stdout ({} where there is none: it died)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env, cwd=ROOT,
        timeout=300,
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    return done, json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}


TRUNCATED = """
import json, os, sys
import toycards
from toycards.errors import ToycardsError
path = sys.argv[1]
model = toycards.load(path, target=TARGET)
if model._packing_ahead is not None:
    model._packing_ahead.join()
before = model.logits([1, 2, 3]).tolist()
os.truncate(path, os.path.getsize(path) // 2)
said = []
for _ in range(2):  # every use after the change, not only the first
    try:
        model.logits([1, 2, 3])
    except ToycardsError as e:
        said.append(str(e))
print(json.dumps({"before": len(before), "said": said}))
"""


@pytest.mark.skipif(quant_kernels.library() is None, reason="no C kernels: nothing reads the file in place")
@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_a_file_truncated_after_load_is_an_error_not_a_crash(tmp_path, target):
    """F16 matrices are read in the file's pages by the few-token products: truncating the file to
    half and running the model again read past its end (SIGBUS, the process gone); now each later
    use is one ToycardsError naming the file."""
    path = tiny_model(tmp_path / "m.gguf", Q.F16)
    done, out = in_child(TRUNCATED.replace("TARGET", repr(target)), path)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert out["before"] == 3
    assert out["said"] == [f"{path}: {CHANGED}"] * 2


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_a_file_rewritten_in_place_is_an_error(tmp_path, target):
    """A rewrite that keeps the size but not the modification time (other weights, same layout) is
    a change: the model would read a mix of the two files."""
    path = tiny_model(tmp_path / "m.gguf", Q.F16)
    model = toycards.load(path, target=target)
    model.logits(IDS)
    data = bytearray(path.read_bytes())
    data[-64:] = bytes(64)  # the last weights' bytes, in place
    with open(path, "r+b") as fh:
        fh.write(data)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a coarse clock may not have moved
    with pytest.raises(ToycardsError, match=f"^{path}: {CHANGED}$"):
        model.logits(IDS)


def test_a_file_renamed_over_keeps_the_model_whole(tmp_path):
    """A new file renamed over the loaded one (as downloads and atomic writers replace files) is not
    a change of the loaded file: the model keeps the old inode's pages and its logits."""
    path = tiny_model(tmp_path / "m.gguf", Q.F16)
    model = toycards.load(path, target="numpy")
    want = model.logits(IDS)
    other = tiny_model(tmp_path / "other.gguf", Q.F16, seed=4)
    os.replace(other, path)
    np.testing.assert_array_equal(model.logits(IDS), want)
    fresh = toycards.load(path, target="numpy").logits(IDS)
    assert np.abs(fresh - want).max() > 0.1 * np.abs(want).max()  # it is another file


HELD = """
import json, os, sys
import toycards
from toycards.errors import ToycardsError
from toycards.engine import packing
path = sys.argv[1]
with packing.PACKING:  # the pack-ahead thread waits for it
    model = toycards.load(path, target=TARGET)
    thread = model._packing_ahead
    os.truncate(path, os.path.getsize(path) // 2)
thread.join(60)
weights = model.w._quantized.values() if TARGET == "torch" else model.w.values()
kept = [w for w in weights if hasattr(w, "_packed")]
try:
    model.logits([1, 2, 3])
    said = ""
except ToycardsError as e:
    said = str(e)
print(json.dumps({"alive": thread.is_alive(), "packed": sum(w._packed is not None for w in kept),
                  "kept": len(kept), "said": said}))
"""


@pytest.mark.skipif(not PACKS, reason="no packed copies on this CPU: no pack-ahead thread")
@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_the_packing_thread_stops_at_a_changed_file(tmp_path, target):
    """The file is truncated while the pack-ahead thread waits to start: it looks at the file before
    copying, copies nothing (copying read the vanished pages: SIGBUS) and ends; the model's next
    use is the error."""
    path = tiny_model(tmp_path / "m.gguf", Q.Q8_0)
    done, out = in_child(HELD.replace("TARGET", repr(target)), path)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert out["kept"] > 0 and out["packed"] == 0 and not out["alive"], out
    assert out["said"] == f"{path}: {CHANGED}"


@pytest.fixture
def copies_counted(monkeypatch):
    """The packed_copies calls made on the pack-ahead thread, counted."""
    calls = []
    real = packing.packed_copies

    def counted(items, one_thread=False):
        if threading.current_thread().name == "toycards-pack-ahead":
            calls.append(len(items))
        return real(items, one_thread)

    monkeypatch.setattr(packing, "packed_copies", counted)
    return calls


def ours() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name in THREADS]


@pytest.mark.skipif(not PACKS, reason="no packed copies on this CPU: no pack-ahead thread")
@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_a_failed_load_leaves_no_thread(tmp_path, target, copies_counted):
    """A file whose vocabulary has more tokens than its embedding has rows fails to load after its
    model was made, and so after the pack-ahead thread started (held here, waiting for the packing
    lock): the load stops and joins it before it raises, and it copied nothing."""
    path = tiny_model(tmp_path / "m.gguf", Q.Q8_0, n_tokens=50)
    assert not ours()
    started = []
    real = packing.pack_ahead
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine, "pack_ahead", lambda weights: started.append(real(weights)) or started[-1])
        with packing.PACKING, pytest.raises(ToycardsError, match="the vocabulary has 50 tokens"):
            toycards.load(path, target=target)
    assert started and started[0] is not None  # it had started
    assert not ours() and not started[0].is_alive()
    assert copies_counted == []


@pytest.mark.skipif(not PACKS, reason="no packed copies on this CPU: no pack-ahead thread")
def test_a_dropped_model_stops_its_packing_thread(tmp_path, copies_counted):
    """The thread holds the weights by weak references: a model dropped before it ran copies
    nothing, and the thread ends."""
    path = tiny_model(tmp_path / "m.gguf", Q.Q8_0)
    with packing.PACKING:
        model = toycards.load(path, target="numpy")
        thread = model._packing_ahead
        assert thread is not None
        del model
        gc.collect()
    thread.join(60)
    assert not thread.is_alive()
    assert copies_counted == []


@pytest.mark.skipif(not PACKS, reason="no packed copies on this CPU: no pack-ahead thread")
def test_the_packing_thread_copies_in_steps(tmp_path, monkeypatch, copies_counted):
    """With a step smaller than one weight, each weight is a step of its own (one C call each, the
    file looked at before each), and every weight ends packed, reading the same floats."""
    path = tiny_model(tmp_path / "m.gguf", Q.Q8_0)
    want = toycards.load(path, target="numpy", dequantize=True).logits(IDS)
    monkeypatch.setattr(packing, "AHEAD_STEP_BYTES", 1)
    model = toycards.load(path, target="numpy")
    model._packing_ahead.join()
    kept = [w for w in model.w.values() if getattr(w, "_pack_first", False)]
    assert kept and all(w._packed is not None for w in kept)
    assert copies_counted == [1] * len(kept)
    got = model.logits(IDS)
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_background_threads_are_stopped_and_joined_before_the_interpreter_exits(tmp_path):
    """A daemon thread left in a C call while the process tears down can abort its exit ("terminate
    called without an active exception", seen after a load and an immediate exit): at exit each
    Background thread is told to stop and is joined. Here the thread's work waits to be told, then
    writes a mark; a daemon thread abandoned at exit would never write it."""
    mark = tmp_path / "stopped"
    code = f"""
from toycards.engine.mapped import Background, started
def work(halt):
    halt.wait()
    open({str(mark)!r}, "w").write("stopped")
started(Background("waits", work))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert mark.read_text() == "stopped"
