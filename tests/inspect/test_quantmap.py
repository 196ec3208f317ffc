"""`describe --quant-map`: the type of every tensor role in every layer, bits per weight, the mix.

Checked against what the tests wrote: tiny files built with `gguf.GGUFWriter` from a chosen table
of types; bits per weight computed by hand from ggml's block sizes (Q4_K: 144 bytes per 256
weights, Q6_K: 210, Q8_0: 34 per 32); and the mixes of llama.cpp's llama-quantize written out by
hand, layer by layer, from its src/llama-quant.cpp (an 8-layer Q4_K_M gives attn_v and ffn_down
Q6_K in layers 0, 3, 6 and 7: the first and last eighth and every third layer between).
"""

from __future__ import annotations

import html
import io
import json

import gguf
import numpy as np
import pytest
from cli_run import cli
from gguf_factory import random_blocks, typed, write_gguf
from rich.console import Console

from toycards.gguf.reader import open_gguf
from toycards.inspect.quantmap import (
    quant_map,
    quant_map_html,
    quant_map_rich,
    quant_map_text,
    role_table_html,
)

V, Q = gguf.GGUFValueType, gguf.GGMLQuantizationType
MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
NORMS = ("attn_norm", "ffn_norm")
N_LAYER = 8
MORE_BITS = {0, 3, 6, 7}  # 8 layers: i < 8/8, i >= 7·8/8, (i - 1) % 3 == 2


def tensor(qtype: str, shape: tuple[int, ...], rng: np.random.Generator):
    """Data of `shape` stored as `qtype`, in the form write_gguf takes."""
    if qtype == "F32":
        return rng.standard_normal(shape).astype(np.float32)
    if qtype == "F16":
        return rng.standard_normal(shape).astype(np.float16)
    if qtype == "BF16":
        return (rng.standard_normal(shape).astype(np.float32), Q.BF16)
    return (random_blocks(Q[qtype], shape, rng), Q[qtype])


def write_types(path, types: dict[str, str], kv: dict | None = None, width: int = 256, rows: int = 32):
    """A GGUF file with one tensor per entry of `types` (name → ggml type): matrices (rows, width),
    norms (width,)."""
    rng = np.random.default_rng(0)
    tensors = {
        name: tensor(qtype, (width,) if "_norm" in name else (rows, width), rng)
        for name, qtype in types.items()
    }
    return write_gguf(path, kv=kv, tensors=tensors)


def llama_types(base: str, out: str, embd: str, more: dict | None = None) -> dict[str, str]:
    """name → type of an 8-layer Llama: `base` for the matrices, `more[role] = (type, layers)`."""
    types, more = {"token_embd.weight": embd}, more or {}
    for i in range(N_LAYER):
        for role in NORMS:
            types[f"blk.{i}.{role}.weight"] = "F32"
        for role in MATRICES:
            special, layers = more.get(role, (base, set()))
            types[f"blk.{i}.{role}.weight"] = special if i in layers else base
    types["output_norm.weight"] = "F32"
    types["output.weight"] = out
    return types


# llama-quantize's mix for each file type, by hand from src/llama-quant.cpp
MIXES: dict[str, dict[str, str]] = {
    "Q4_K_M": llama_types("Q4_K", "Q6_K", "Q4_K", {"attn_v": ("Q6_K", MORE_BITS), "ffn_down": ("Q6_K", MORE_BITS)}),
    "Q5_K_M": llama_types("Q5_K", "Q6_K", "Q5_K", {"attn_v": ("Q6_K", MORE_BITS), "ffn_down": ("Q6_K", MORE_BITS)}),
    # attn_v of the first 4 attn_v tensors, ffn_down of the first eighth of the layers
    "Q4_K_S": llama_types("Q4_K", "Q6_K", "Q4_K", {"attn_v": ("Q5_K", {0, 1, 2, 3}), "ffn_down": ("Q5_K", {0})}),
    "Q6_K": llama_types("Q6_K", "Q6_K", "Q6_K"),
    "Q8_0": llama_types("Q8_0", "Q8_0", "Q8_0"),
    "Q4_0": llama_types("Q4_0", "Q6_K", "Q4_0"),
    "Q4_1": llama_types("Q4_1", "Q6_K", "Q4_1"),
    "F16": llama_types("F16", "F16", "F16"),
    "BF16": llama_types("BF16", "BF16", "BF16"),
    "F32": llama_types("F32", "F32", "F32"),
}  # fmt: skip


def file_type(name: str) -> dict:
    """The metadata of llama.cpp's file type `name`."""
    code = gguf.LlamaFileType["ALL_F32" if name == "F32" else f"MOSTLY_{name}"]
    return {"general.file_type": typed(int(code), V.UINT32)}


def describe_map(path):
    with open_gguf(path) as f:
        return quant_map(f)


def test_grid_cells_are_the_types_written(tmp_path):
    # every type in some cell, by (layer, role), and a role missing from one layer
    chosen = ["F32", "F16", "Q8_0", "Q4_0", "Q4_K", "Q6_K", "Q5_K", "Q2_K", "Q3_K", "BF16", "Q5_0", "Q4_1"]
    types = {"token_embd.weight": "Q8_0", "output.weight": "Q6_K", "output_norm.weight": "F32"}
    for i in range(3):
        for j, role in enumerate(MATRICES):
            if (i, role) != (1, "attn_k"):
                types[f"blk.{i}.{role}.weight"] = chosen[(i * len(MATRICES) + j) % len(chosen)]
        types[f"blk.{i}.attn_norm.weight"] = "F32"
    qm = describe_map(write_types(tmp_path / "m.gguf", types))
    written = {(int(n.split(".")[1]), n.split(".")[2]): t for n, t in types.items() if n.startswith("blk.")}
    shown = {(i, role): t for i, row in qm.grid.items() for role, t in row.items()}
    assert shown == written
    assert qm.outside == {"token_embd": "Q8_0", "output": "Q6_K", "output_norm": "F32"}
    assert qm.layers == (0, 1, 2)
    assert qm.grid_roles == ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_down", "ffn_up")
    grid = [line.split() for line in quant_map_text(qm).splitlines() if line[:1].isdigit()]
    assert grid[1][2] == "·"  # layer 1 has no attn_k
    assert [row[0] for row in grid] == ["0", "1", "2"]


def test_runs_of_identical_layers_are_one_row(tmp_path):
    qm = describe_map(write_types(tmp_path / "m.gguf", MIXES["Q4_K_M"], file_type("Q4_K_M")))
    assert qm.runs() == [(0, 0), (1, 2), (3, 3), (4, 5), (6, 7)]
    rows = [line.split() for line in quant_map_text(qm).splitlines() if line[:1].isdigit()]
    assert [r[0] for r in rows] == ["0", "1–2", "3", "4–5", "6–7"]
    assert rows[1] == ["1–2", "Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K"]
    assert rows[2][3] == "Q6_K" and rows[2][6] == "Q6_K"  # attn_v, ffn_down of layer 3


def test_bits_per_weight_by_hand(tmp_path):
    types = {
        "token_embd.weight": "Q6_K",  # 32 × 256: 32 blocks of 210 bytes = 6,720 bytes, 8,192 weights
        "blk.0.attn_q.weight": "Q4_K",  # 32 × 256: 32 blocks of 144 bytes = 4,608 bytes, 8,192 weights
        "blk.1.attn_q.weight": "Q8_0",  # 32 × 256: 256 blocks of 34 bytes = 8,704 bytes, 8,192 weights
        "blk.0.attn_norm.weight": "F32",  # 256: 1,024 bytes
        "blk.0.ffn_up.weight": "F16",  # 32 × 256: 16,384 bytes
    }
    qm = describe_map(write_types(tmp_path / "m.gguf", types))
    by_role = {s.role: s for s in qm.roles}
    assert by_role["token_embd"].bits_per_weight == 6.5625
    assert by_role["attn_q"].n_bytes == 4608 + 8704 and by_role["attn_q"].n_elements == 16384
    assert by_role["attn_q"].bits_per_weight == (4608 + 8704) * 8 / 16384  # 6.5
    assert by_role["attn_norm"].bits_per_weight == 32.0
    assert by_role["ffn_up"].bits_per_weight == 16.0
    total_bytes, total_weights = 6720 + 4608 + 8704 + 1024 + 16384, 4 * 8192 + 256
    assert (qm.n_bytes, qm.n_elements) == (total_bytes, total_weights)
    assert qm.bits_per_weight == total_bytes * 8 / total_weights
    text = quant_map_text(qm)
    assert f"bits per weight: {total_bytes * 8 / total_weights:.2f}" in text
    assert by_role["attn_q"].types == {"Q4_K": 1, "Q8_0": 1}


@pytest.mark.parametrize("name", list(MIXES))
def test_llama_quantize_mixes_get_their_label(tmp_path, name):
    qm = describe_map(write_types(tmp_path / "m.gguf", MIXES[name], file_type(name)))
    assert (qm.mix.label, qm.mix.file_type, qm.mix.rule, qm.mix.differences) == (name, name, name, ())
    assert qm.mix.checked


@pytest.mark.parametrize("name", ["Q4_K_M", "Q4_K_S", "Q8_0", "F16"])
def test_without_file_type_the_mix_is_recognised(tmp_path, name):
    qm = describe_map(write_types(tmp_path / "m.gguf", MIXES[name]))
    assert (qm.mix.label, qm.mix.file_type, qm.mix.rule) == (f"{name}-like", None, name)


def test_one_tensor_off_the_rule_is_custom(tmp_path):
    types = dict(MIXES["Q4_K_M"], **{"blk.3.attn_v.weight": "Q4_K"})
    qm = describe_map(write_types(tmp_path / "m.gguf", types, file_type("Q4_K_M")))
    assert qm.mix.label == "custom" and qm.mix.file_type == "Q4_K_M" and qm.mix.rule is None
    assert qm.mix.differences == (("blk.3.attn_v.weight", "Q4_K", "Q6_K"),)
    assert "blk.3.attn_v.weight is Q4_K; the Q4_K_M rule gives Q6_K" in quant_map_text(qm)


def test_uniform_q4_k_without_file_type_is_custom(tmp_path):
    # llama-quantize --pure: every matrix Q4_K, the output too; no rule gives that
    qm = describe_map(write_types(tmp_path / "m.gguf", llama_types("Q4_K", "Q4_K", "Q4_K")))
    assert (qm.mix.label, qm.mix.rule) == ("custom", None)


def test_file_type_that_says_otherwise(tmp_path):
    # Q5_K_M's types under general.file_type Q4_K_M: every Q5_K differs from the Q4_K_M rule
    qm = describe_map(write_types(tmp_path / "m.gguf", MIXES["Q5_K_M"], file_type("Q4_K_M")))
    assert (qm.mix.label, qm.mix.file_type, qm.mix.rule) == ("Q5_K_M-like", "Q4_K_M", "Q5_K_M")
    assert len(qm.mix.differences) == 1 + N_LAYER * len(MATRICES) - 2 * len(MORE_BITS)


def test_rows_that_k_blocks_do_not_fit_fall_back(tmp_path):
    # ffn_down rows of 288 weights: Q6_K (256 a block) falls back to Q8_0, Q4_K to Q5_0
    types = MIXES["Q4_K_M"]
    rng = np.random.default_rng(1)
    tensors = {}
    for name, qtype in types.items():
        shape = (256,) if "_norm" in name else (32, 288 if "ffn_down" in name else 256)
        if "ffn_down" in name:
            qtype = "Q8_0" if int(name.split(".")[1]) in MORE_BITS else "Q5_0"
        tensors[name] = tensor(qtype, shape, rng)
    path = write_gguf(tmp_path / "m.gguf", kv=file_type("Q4_K_M"), tensors=tensors)
    qm = describe_map(path)
    assert (qm.mix.label, qm.mix.differences) == ("Q4_K_M", ())
    assert {qm.grid[i]["ffn_down"] for i in MORE_BITS} == {"Q8_0"}


def test_unchecked_file_type_says_so(tmp_path):
    qm = describe_map(write_types(tmp_path / "m.gguf", MIXES["Q4_K_M"], file_type("IQ2_XXS")))
    assert (qm.mix.label, qm.mix.checked) == ("IQ2_XXS", False)
    assert "not checked" in qm.mix.note


# ── hostile names ──────────────────────────────────────────────────────────────────────
EVIL_ROLE = "<script>x\x1b]0;pwned\x07"


def test_hostile_names_are_escaped(tmp_path):
    types = {f"blk.0.{EVIL_ROLE}.weight": "Q8_0", "blk.0.attn_q.weight": "Q4_0"}
    qm = describe_map(write_types(tmp_path / "evil\x1b[2J.gguf", types))
    assert EVIL_ROLE in qm.grid_roles
    text = quant_map_text(qm)
    assert "\x1b" not in text and "\\x1b]0;pwned\\x07" in text and "\\x1b[2J" in text
    console = Console(file=io.StringIO(), force_terminal=True, width=200)
    for part in quant_map_rich(qm):
        console.print(part)
    shown = console.file.getvalue()
    assert "\x1b]0;pwned" not in shown and "\x1b[2J" not in shown and "\\x1b]0;pwned\\x07" in shown
    for fragment in (quant_map_html(qm), role_table_html(qm)):
        assert "<script>" not in fragment and html.escape(EVIL_ROLE) in fragment
        assert fragment.startswith("<table") and fragment.endswith("</table>")


def test_hostile_names_off_the_rule_are_escaped(tmp_path):
    types = {f"blk.0.{EVIL_ROLE}.weight": "Q4_0", "blk.0.attn_q.weight": "Q8_0"}
    kv = file_type("Q8_0") | {"general.name": typed(EVIL_ROLE, V.STRING)}
    qm = describe_map(write_types(tmp_path / "m.gguf", types, kv))
    assert qm.mix.differences == ((f"blk.0.{EVIL_ROLE}.weight", "Q4_0", "Q8_0"),)
    text = quant_map_text(qm)
    assert "\x1b" not in text and "blk.0.<script>x\\x1b]0;pwned\\x07.weight is Q4_0" in text


def test_hostile_file_type_is_clipped_and_escaped(tmp_path):
    qm = describe_map(
        write_types(tmp_path / "m.gguf", MIXES["Q8_0"], {"general.file_type": EVIL_ROLE * 1000})
    )
    assert qm.mix.label == "Q8_0-like" and len(qm.mix.note) < 200
    assert "\x1b" not in quant_map_text(qm) and "<script>" not in quant_map_html(qm)


# ── the command line ────────────────────────────────────────────────────────────────────
def test_cli_quant_map_text_json_html(tmp_path):
    path = write_types(tmp_path / "m.gguf", MIXES["Q4_K_M"], file_type("Q4_K_M"))
    result = cli("describe", path, "--quant-map", "--format", "text")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("quant map of ") and "mix: Q4_K_M (" in result.stdout
    assert "Hyperparameters" not in result.stdout  # the report instead of the card
    data = json.loads(cli("describe", path, "--quant-map", "--format", "json").stdout)
    assert set(data) == {"file", "quant_map"}
    assert data["quant_map"]["mix"]["label"] == "Q4_K_M"
    assert data["quant_map"]["grid"]["attn_v"] == [
        "Q6_K" if i in MORE_BITS else "Q4_K" for i in range(N_LAYER)
    ]
    page = cli("describe", path, "--quant-map", "--format", "html").stdout
    assert page.startswith("<!DOCTYPE html>") and '<table class="toycards-quantmap">' in page
    full = json.loads(cli("describe", path, "--format", "json").stdout)
    assert full["quant_map"]["mix"]["label"] == "Q4_K_M" and "card" in full


def test_cli_report_refuses_a_document_format(tmp_path):
    path = write_types(tmp_path / "m.gguf", {"blk.0.attn_q.weight": "Q8_0"})
    result = cli("describe", path, "--quant-map", "--format", "markdown")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "--quant-map print as terminal, text, json or html" in result.output
