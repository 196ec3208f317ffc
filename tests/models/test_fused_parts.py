"""Parameters read as rows of a fused tensor (`from "attn_q.weight" or "attn_qkv.weight"[1:H·d_h]`).

llama.cpp reads phi2 and phi3 files with one attn_qkv (rows q; k; v) or with attn_q, attn_k and
attn_v; the cards read both (their logits against transformers: tests/models/test_models_oracle.py,
cases phi2-fused and phi3-split). Here: a fused tensor must be read whole and in the card's sizes, and the parts are views of the
file, not copies (a part as a parameter's first source: tests/bad_cards/rows_first_source.card).
"""

from __future__ import annotations

import numpy as np
import pytest

from toycards.gguf.reader import open_gguf
from toycards.library import library_card
from toycards.models.binding import bind, bind_parameters

QKV = "blk.0.attn_qkv.weight"


@pytest.fixture(scope="module")
def fused(oracle_files):
    """phi2's card bound to the fused file, and the file's tensor shapes."""
    path = oracle_files("phi2-fused").path
    with open_gguf(path) as f:
        bound = bind(library_card("phi2").main, f)
        shapes = {n: tuple(i.shape) for n, i in f.tensors.items()}
    return path, bound, shapes


def _problems(bound, shapes) -> list[str]:
    _, problems = bind_parameters(bound.algorithm, bound.hyper, shapes, bound.arch)
    return [p.message for p in problems]


def test_the_fused_tensor_is_read_in_three_parts(fused):
    _, bound, shapes = fused
    assert bound.problems == [] and bound.unused_tensors == []
    parts = {p.name: p.rows for p in bound.params if p.tensor == QKV}
    d = bound.hyper["H"] * bound.hyper["d_h"]
    kv = bound.hyper["H_kv"] * bound.hyper["d_h"]
    assert parts == {"W_q^l": (0, d), "W_k^l": (d, d + kv), "W_v^l": (d + kv, d + 2 * kv)}
    assert shapes[QKV][0] == d + 2 * kv


def test_rows_no_parameter_reads_are_refused(fused):
    """A fused tensor with rows past v's: weights the card would silently drop."""
    _, bound, shapes = fused
    rows, cols = shapes[QKV]
    messages = _problems(bound, dict(shapes, **{QKV: (rows + 8, cols)}))
    assert messages == [f"rows {rows + 1}…{rows + 8} of tensor '{QKV}' are read by no parameter"]


def test_a_fused_tensor_too_short_for_its_parts_is_refused(fused):
    _, bound, shapes = fused
    rows, cols = shapes[QKV]
    messages = _problems(bound, dict(shapes, **{QKV: (rows - 8, cols)}))
    assert len(messages) == 1, messages  # v's rows run past the end; q's and k's still fit
    assert f"of tensor '{QKV}' [{rows - 8}×{cols}] are not the card's W_v^l" in messages[0]


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_parts_are_views_of_the_file(fused, target):
    """Each part shares the fused tensor's memory (numpy: the file's own pages; torch: the
    copy-on-write mapping): reading a fused file costs no more memory than a split one."""
    from toycards.models.load import load

    path, bound, _ = fused
    model = load(path, target=target)
    with open_gguf(path) as f:
        whole = np.array(f.tensor(QKV))
    parts = [model.w[f"blk.0.attn_{x}.weight"] for x in "qkv"]
    arrays = [p.detach().numpy() if target == "torch" else np.asarray(p) for p in parts]
    np.testing.assert_array_equal(np.concatenate(arrays), whole)
    for a, b in zip(arrays, arrays[1:]):  # one buffer: each part ends where the next begins
        assert a.ctypes.data + a.nbytes == b.ctypes.data
