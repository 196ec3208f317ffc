"""Loading a 1B-class quantized file stays lazy: memory-mapped blocks, no page of weights read.

Issue 11's Must-show: `toycards.load(path, target="torch")` of a Llama-3.2-1B-shaped Q4_K file
(tests/helpers/llama_1b.py, ~0.7 GB) peaks under ×1.2 of the file's size before the first token, and
`toycards describe` of it reads the header only. Each is measured in a fresh process (its own peak
RSS, VmHWM, so that torch's import counts the same way every time and nothing of pytest's does).
The facts checked against: the file's size from the OS, and Llama 3.2 1B's published parameter
count (1,235,814,400, plus the 32 RoPE factors of `rope_freqs.weight`). The file itself is checked
against gguf.quants (its random blocks decode to small finite weights) and, where llama-cpp-python
is installed (TOYCARDS_LLAMA_CPP_PYTHON, a benchmark dependency), against llama.cpp: it reads a
narrow file of the same depth and vocabulary to toycards' logits, and its own Q4_K_M quantizer
picks the mix that `mix="Q4_K_M"` writes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import gguf
import numpy as np
import pytest
from file_pages import cached_fraction, mapped_kib
from gguf import quants
from gguf_factory import Q, llama_hparams, llama_inventory, typed, write_gguf
from llama_1b import SHAPE, random_k_blocks, specs, with_changes, write_llama_1b

import toycards
from toycards.engine import ckernels as quant_kernels

ROOT = Path(__file__).resolve().parents[2]
N_PARAMS = 1_235_814_400 + 32  # Llama-3.2-1B (tied embeddings) and rope_freqs.weight
IDS = [17, 300, 4000, 9, 128255]

PEAK = "next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')) * 1024"
LOAD = f"""
import json, sys
import numpy as np, torch
import toycards
torch.set_num_threads(1)
model = toycards.load(sys.argv[1], target="torch")
peak = {PEAK}  # bytes: torch imported, the model loaded, nothing run yet
ahead = model._packing_ahead is not None  # a thread copying weights as the process goes on
with torch.inference_mode():
    logits = model.logits([17, 300, 4000])
print(json.dumps({{"peak": peak, "ahead": ahead, "shape": list(logits.shape), "finite": bool(np.isfinite(logits).all()),
                  "std": float(logits[-1].std())}}))
"""
DESCRIBE = f"""
import runpy, sys
sys.argv = ["toycards", "describe", sys.argv[1]]
try:
    runpy.run_module("toycards", run_name="__main__")
finally:
    print("peak", {PEAK}, file=sys.stderr)
"""


def _fresh(code: str, path: Path, cache: Path | None = None) -> subprocess.CompletedProcess:
    """Run `code` on `path` in a new interpreter; `cache`: an empty TOYCARDS_CACHE (else the user's,
    where the quantized kernels are already built)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    if cache is not None:
        env["TOYCARDS_CACHE"] = str(cache)
    return subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.fixture
def llama_1b_file(tmp_path):
    """The Q4_K file, removed as soon as the test ends (pytest keeps its last temporary folders)."""
    path = write_llama_1b(tmp_path / "llama-1b.Q4_K.gguf")
    yield path
    path.unlink()


def test_load_and_describe_of_a_1b_q4_k_file_touch_no_weights(llama_1b_file, tmp_path):
    pytest.importorskip("torch")
    size = os.stat(llama_1b_file).st_size
    assert size > 0.6e9  # a 1B-class file: 1.24 B weights at 4.5 bits

    done = _fresh(LOAD, llama_1b_file)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["peak"] < 1.2 * size, (
        f"load peaked at {got['peak'] / 2**20:.0f} MiB, file {size / 2**20:.0f} MiB"
    )
    # nor does any weight pack ahead after it (on AVX2 all of them would: packing.PACK_AHEAD_BYTES)
    assert not got["ahead"]
    # the weights are usable: the same process then ran a forward pass over all 16 layers
    assert got["shape"] == [3, SHAPE.n_vocab] and got["finite"] and got["std"] > 0

    done = _fresh(DESCRIBE, llama_1b_file, tmp_path / "cache")  # cold: the card parsed too
    assert done.returncode == 0, done.stderr[-2000:]
    peak = int(done.stderr.rsplit("peak", 1)[1])
    assert peak < 0.2 * size, f"describe peaked at {peak / 2**20:.0f} MiB, file {size / 2**20:.0f} MiB"
    assert f"{N_PARAMS:,}" in done.stdout and f"{SHAPE.n_vocab:,} tokens" in done.stdout, done.stdout[:2000]


@pytest.mark.skipif(
    not (
        sys.platform.startswith("linux")
        and hasattr(os, "posix_fadvise")
        and quant_kernels.library() is not None
    ),
    reason="reading ahead needs Linux and the C kernels",
)
def test_load_reads_the_file_into_the_page_cache_not_into_the_process(tmp_path):
    """`load` has the OS read the file ahead into its page cache (as llama.cpp's loader asks): a file
    out of the cache is back in it soon after, far past what the loader itself touched, while this
    process maps next to none of it (float32 weights on the NumPy target: read in place)."""
    meta = {k.key: typed(k.value, k.vtype) for k in llama_hparams(2, 768, 2048, 4, 2, n_ctx=64)}
    meta.pop("general.architecture")
    rng = np.random.default_rng(3)
    inventory = llama_inventory(n_layer=2, d_e=768, d_ff=2048, n_vocab=4096, n_head=4, n_head_kv=2)
    arrays = {name: rng.normal(0, 0.02, size=shape).astype(np.float32) for name, shape in inventory}
    path = write_gguf(tmp_path / "floats.gguf", kv=meta, tensors=arrays)  # ~69 MB of float32
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # written back, so that the OS may drop its pages
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    if cached_fraction(path) > 0.1:
        pytest.skip("this file system keeps the file's pages in memory")
    model = toycards.load(path, target="numpy")
    for _ in range(200):  # the reads are the OS's, in the background
        if cached_fraction(path) >= 0.95:
            break
        time.sleep(0.05)
    assert cached_fraction(path) >= 0.95
    assert mapped_kib(path) * 1024 < 0.05 * os.stat(path).st_size, mapped_kib(path)
    assert model.logits([1, 2, 3]).shape == (3, 4096)


@pytest.mark.parametrize("ggml_type", [Q.Q4_K, Q.Q5_K, Q.Q6_K], ids=lambda t: t.name)
def test_random_k_blocks_decode_to_small_finite_weights(ggml_type):
    """gguf.quants (the oracle) decodes the blocks to finite weights of about N(0, 0.02²)'s spread."""
    w = quants.dequantize(random_k_blocks(ggml_type, 4096, np.random.default_rng(1)), ggml_type)
    assert w.size == 4096 * 256 and np.isfinite(w).all()
    assert 0.015 < w.std() < 0.03 and abs(w.mean()) < 0.1 * w.std(), (w.mean(), w.std())


def _llama_cpp_python() -> str | None:
    given = os.environ.get("TOYCARDS_LLAMA_CPP_PYTHON")
    if given:
        return given
    return sys.executable if importlib.util.find_spec("llama_cpp") is not None else None


QUANTIZE = """
import sys, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + sys.argv[3])
p.allow_requantize = True
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))
"""


@pytest.mark.skipif(
    _llama_cpp_python() is None, reason="llama-cpp-python is not installed (a benchmark dependency)"
)
def test_llama_cpp_reads_the_file_and_would_quantize_it_to_the_same_k_m_mixes(tmp_path):
    """On a narrow model of the same depth and vocabulary: llama.cpp loads the file (its metadata and
    vocabulary included) and gives toycards' greedy tokens, and its own Q4_K_M and Q5_K_M quantizers
    pick the Q6_K tensors that `mix="Q4_K_M"` and `mix="Q5_K_M"` write."""
    torch = pytest.importorskip("torch")
    hp = with_changes(d_e=256, n_head=4, n_head_kv=1, d_ff=512)  # Llama 3.2 1B's GQA ratio, 4
    path = write_llama_1b(tmp_path / "narrow.Q4_K.gguf", hp=hp)
    out = tmp_path / "llama_cpp.npy"
    script = ROOT / "tests" / "peers" / "llama_cpp_logits.py"
    subprocess.run([_llama_cpp_python(), script, path, json.dumps(IDS), out], check=True, timeout=300)
    theirs = np.load(out)
    with torch.inference_mode():
        ours = toycards.load(path, target="torch").logits(IDS)
    assert ours.shape == theirs.shape == (len(IDS), SHAPE.n_vocab) and np.isfinite(ours).all()
    worst = float(np.abs(ours - theirs).max())
    assert worst < 0.05 * float(np.ptp(theirs)), f"max |Δ logit| {worst:.3g}"  # measured: 1.1% of it
    assert ours.argmax(axis=1).tolist() == theirs.argmax(axis=1).tolist()

    for mix in ("Q4_K_M", "Q5_K_M"):
        mixed = tmp_path / f"narrow.{mix}.gguf"
        done = subprocess.run(
            [_llama_cpp_python(), "-c", QUANTIZE, path, mixed, mix], capture_output=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-2000:]
        got = {t.name: int(t.tensor_type) for t in gguf.GGUFReader(mixed).tensors}
        assert got == {name: ggml_type for name, _, ggml_type in specs(mix, hp)}, mix
