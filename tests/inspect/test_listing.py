"""`describe --tensors` and `describe --metadata`: every tensor and every key, as gguf-dump lists them.

The oracle is the `gguf` package's own reader, `gguf.GGUFReader` (the parser gguf-dump uses), on
tiny files written with `gguf.GGUFWriter`: tensor names, types, ggml dimensions, element and byte
counts and absolute data offsets; metadata keys in file order with their values and array lengths.
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
from toycards.inspect.listing import (
    metadata_html,
    metadata_json,
    metadata_text,
    reports_rich,
    tensors_html,
    tensors_json,
    tensors_text,
)
from toycards.render.escape import terminal_safe

V, Q = gguf.GGUFValueType, gguf.GGMLQuantizationType
EVIL = "\x1b]0;pwned\x07\x1b[2J<script>alert(1)</script>\u202e"
EVIL_TENSOR = "blk.0.<script>\x1b[31m\u202e.weight"
TEMPLATE = "\n".join(
    f"{{% if messages[{i}] %}}{{{{ messages[{i}]['content'] }}}}{{% endif %}}" for i in range(40)
)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A file with tensors of several types and sizes, a 64-byte alignment and every kind of value."""
    rng = np.random.default_rng(0)
    tensors = {
        "token_embd.weight": (random_blocks(Q.Q6_K, (48, 256), rng), Q.Q6_K),
        "blk.0.attn_norm.weight": rng.standard_normal(256).astype(np.float32),
        "blk.0.attn_q.weight": (random_blocks(Q.Q4_K, (64, 256), rng), Q.Q4_K),
        "blk.0.attn_k.weight": (random_blocks(Q.Q8_0, (16, 256), rng), Q.Q8_0),
        "blk.0.attn_v.weight": (random_blocks(Q.Q4_0, (16, 256), rng), Q.Q4_0),
        "blk.0.ffn_up.weight": rng.standard_normal((3, 5, 32)).astype(np.float16),
        "output.weight": rng.standard_normal((48, 256)).astype(np.float32),
        EVIL_TENSOR: rng.standard_normal(32).astype(np.float32),
    }
    kv = {
        "general.name": "tiny",
        "general.file_type": typed(7, V.UINT32),
        "llama.block_count": typed(1, V.UINT32),
        "llama.attention.layer_norm_rms_epsilon": typed(1e-5, V.FLOAT32),
        "llama.rope.freq_base": typed(500000.0, V.FLOAT64),
        "llama.use_parallel_residual": typed(True, V.BOOL),
        "llama.offset": typed(-7, V.INT64),
        "tokenizer.ggml.tokens": typed([f"tok{i}" for i in range(1000)], V.ARRAY, V.STRING),
        "tokenizer.ggml.scores": typed([float(i) / 4 for i in range(1000)], V.ARRAY, V.FLOAT32),
        "tokenizer.ggml.token_type": typed([1, 2, 3], V.ARRAY, V.INT32),
        "general.flags": typed([True, False, True], V.ARRAY, V.BOOL),
        "general.offsets": typed([-(2**40), 5] * 6, V.ARRAY, V.INT64),
        "tokenizer.chat_template": TEMPLATE,
        "general.description": "x" * 500,
        f"general.{EVIL}": EVIL,
        "general.tags": typed([EVIL, "b"], V.ARRAY, V.STRING),
    }
    return write_gguf(tmp_path_factory.mktemp("listing") / "model.gguf", kv=kv, tensors=tensors, alignment=64)


def listed(path, what):
    with open_gguf(path) as f:
        return what(f)


def test_tensors_match_gguf_reader(model):
    rows = listed(model, tensors_json)
    reader = gguf.GGUFReader(model)
    expected = [
        {"name": t.name, "type": t.tensor_type.name, "ne": [int(d) for d in t.shape], "elements": int(t.n_elements),
         "bytes": int(t.n_bytes), "offset": int(t.data_offset)}
        for t in reader.tensors
    ]  # fmt: skip
    assert [{k: r[k] for k in expected[0]} for r in rows] == expected
    assert [r["shape"] for r in rows] == [e["ne"][::-1] for e in expected]
    data_start = min(e["offset"] for e in expected)  # the first tensor sits at relative offset 0
    assert [r["relative_offset"] for r in rows] == [e["offset"] - data_start for e in expected]
    assert all(r["relative_offset"] % 64 == 0 for r in rows)


def test_tensor_text_lines_match_gguf_reader(model):
    text = listed(model, tensors_text)
    header, *rows = [ln for ln in text.splitlines() if ln.startswith("    ")]
    at_ne, at_shape = header.index("  ne  ") + 2, header.index("  shape  ") + 2  # the columns' starts
    reader = gguf.GGUFReader(model)
    assert len(rows) == len(reader.tensors)
    for i, (line, t) in enumerate(zip(rows, reader.tensors), 1):
        cells = line.split()
        assert cells[:3] == [str(i), terminal_safe(t.name), t.tensor_type.name]
        assert cells[-3:] == [str(t.n_elements), str(t.n_bytes), str(t.data_offset)]
        ne, shape = ", ".join(str(int(d)) for d in t.shape), " × ".join(str(int(d)) for d in t.shape[::-1])
        assert line[at_ne:at_shape].strip() == ne and line[at_shape:].split("  ")[0] == shape
    assert f"{len(reader.tensors)} tensors: {sum(int(t.n_elements) for t in reader.tensors)} elements" in text


def test_metadata_lists_every_key_in_order(model):
    reader = gguf.GGUFReader(model)
    keys = [k for k in reader.fields if not k.startswith("GGUF.")]
    rows = listed(model, metadata_json)
    assert [r["key"] for r in rows] == keys
    for r in rows:
        field = reader.fields[r["key"]]
        if field.types[0] == V.ARRAY:
            assert r["length"] == len(field.data)
            n = len(r["first"])  # the first 5 strings, 8 numbers or bools
            assert n == min(r["length"], 5 if field.types[1] == V.STRING else 8)
            assert r["first"] == field.contents(slice(n))
        elif field.types[0] == V.FLOAT32:
            assert r["value"] == pytest.approx(field.contents())
        else:
            assert r["value"] == field.contents()
    text = listed(model, metadata_text)
    numbered = [
        line.split()[:2]
        for line in text.splitlines()
        if line.startswith("    ") and line.split()[0].isdigit()
    ]
    assert [int(n) for n, _ in numbered] == list(range(1, len(keys) + 1))
    assert f"{len(keys)} keys" in text.splitlines()[0]


def test_metadata_values_in_text(model):
    text = listed(model, metadata_text)
    line = {
        ln.split()[1]: ln for ln in text.splitlines() if ln.startswith("    ") and ln.split()[0].isdigit()
    }
    assert line["general.name"].split()[2:] == ["string", "'tiny'"]
    assert line["llama.attention.layer_norm_rms_epsilon"].endswith(" 1e-05")  # the float32 as written
    assert line["llama.rope.freq_base"].endswith(" 500000.0")
    assert line["llama.use_parallel_residual"].endswith(" true")
    assert line["llama.offset"].endswith(" -7")
    assert line["tokenizer.ggml.tokens"].endswith("1000 items: ['tok0', 'tok1', 'tok2', 'tok3', 'tok4', …]")
    assert line["tokenizer.ggml.token_type"].endswith("3 items: [1, 2, 3]")
    assert line["general.flags"].endswith("3 items: [true, false, true]")
    assert line["general.offsets"].endswith(
        f"12 items: [{-(2**40)}, 5, {-(2**40)}, 5, {-(2**40)}, 5, {-(2**40)}, 5, …]"
    )
    assert line["tokenizer.ggml.scores"].endswith(
        "1000 items: [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, …]"
    )
    assert "(500 characters; --format json has it whole)" in line["general.description"]


def test_chat_template_in_full(model):
    text = listed(model, metadata_text)
    shown = [ln.removeprefix("        ") for ln in text.splitlines() if ln.startswith("        {%")]
    assert shown == TEMPLATE.split("\n")
    assert [r["value"] for r in listed(model, metadata_json) if r["key"] == "tokenizer.chat_template"] == [
        TEMPLATE
    ]


def test_hostile_strings_are_escaped(model):
    text = listed(model, metadata_text) + listed(model, tensors_text)
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert "\\x1b]0;pwned\\x07\\x1b[2J<script>alert(1)</script>\\u202e" in text
    assert "blk.0.<script>\\x1b[31m\\u202e.weight" in text
    console = Console(file=io.StringIO(), force_terminal=True, width=300)
    for part in listed(model, lambda f: reports_rich(f, ["metadata", "tensors"])):
        console.print(part)
    shown = console.file.getvalue()
    assert "\x1b]0;pwned" not in shown and "\u202e" not in shown and "\\x1b]0;pwned" in shown
    page = listed(model, metadata_html) + listed(model, tensors_html)
    assert "<script>" not in page and html.escape("<script>alert(1)</script>") in page
    assert html.escape(EVIL_TENSOR) in page
    assert f"<pre>{html.escape(TEMPLATE)}</pre>" in page


# ── the command line ────────────────────────────────────────────────────────────────────
def test_cli_tensors_alone_prints_the_tensor_table_only(model):
    result = cli("describe", model, "--tensors", "--format", "text")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("GGUF v3: ") and lines[-1].startswith("8 tensors: ")
    assert "Hyperparameters" not in result.stdout and "chat template" not in result.stdout
    assert result.stderr == ""  # the card is not bound: no problems to report


def test_cli_metadata_and_tensors_json(model):
    data = json.loads(cli("describe", model, "--metadata", "--tensors", "--format", "json").stdout)
    assert list(data) == ["file", "metadata", "tensors"]
    assert data["tensors"] == listed(model, tensors_json)
    assert data["metadata"] == listed(model, metadata_json)
    full = json.loads(cli("describe", model, "--format", "json").stdout)
    assert full["tensors"] == data["tensors"] and full["metadata"] == data["metadata"] and "card" in full


def test_cli_reports_come_in_one_order(model):
    out = cli("describe", model, "--quant-map", "--tensors", "--metadata", "--format", "text").stdout
    starts = [out.index(s) for s in ("tokenizer.chat_template", "token_embd.weight  ", "quant map of ")]
    assert starts == sorted(starts)


def test_cli_bad_file_is_one_line(tmp_path):
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00")
    result = cli("describe", path, "--tensors")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip().splitlines()[0].startswith("error: ") and "bad.gguf" in result.stderr


@pytest.mark.parametrize(
    "flags", [("--memory", "--flops"), ("--memory", "--tensors"), ("--flops", "--quant-map")]
)
def test_views_that_replace_the_card_are_asked_for_one_at_a_time(flags):
    """Each of these views prints instead of the card; two of them at once is one line, exit 1."""
    result = cli("describe", "examples/tiny-llama.gguf", *flags)
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0 and "one at a time" in result.output
