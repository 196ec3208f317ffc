"""`toycards describe FILE --format html [-o FILE]`: the report page of inspect/report.py.

The file's own numbers are checked against the `gguf` package's reader (`gguf.GGUFReader`, the
parser gguf-dump uses): the tensor count, each tensor's type, elements and bytes, the number of
metadata keys. The memory, FLOPs and quant-map tables are checked cell by cell against the library
calls that own those figures, and one cell of each by hand. Hostile metadata must reach the page as
text only. Headless Chromium, where installed, opens the page and must report no console error.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import gguf
import numpy as np
import pytest
from cli_run import cli
from gguf_factory import llama_hparams, llama_inventory, typed, write_gguf

from toycards.inspect.cost import described_cost
from toycards.inspect.describe import describe
from toycards.inspect.formats import render_described
from toycards.inspect.memory import memory_report
from toycards.inspect.report import SECTIONS, report_contexts, report_html

V, Q = gguf.GGUFValueType, gguf.GGMLQuantizationType
L, D_E, D_FF, H, H_KV, N_V, N_CTX = 2, 32, 64, 2, 1, 64, 64
NAME = "evil <script>alert(1)</script> \"quoted\" 'single' </details> \u202eRLO"
TEMPLATE = (
    '{%- for m in messages %}</details></pre><script>alert(2)</script>{{ m["content"] }}\n'
    "{%- if loop.last %}'<|end|>'{% endif %}\n{%- endfor %}"
)
EVIL_KEY = 'general.<b onclick="x">"k"</b>'
EVIL_VALUE = "</td></tr></table></details><script>alert(3)</script>"
EVIL_TOKEN = "<script>alert(4)</script>"
VOID = {"meta", "br", "hr", "img", "input", "link", "wbr", "col", "source"}


class Node:
    def __init__(self, tag: str, attrs: dict[str, str | None]) -> None:
        self.tag, self.attrs, self.children = tag, attrs, []

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def walk(self):
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.walk()

    def find(self, tag: str, cls: str | None = None) -> list[Node]:
        return [
            n for n in self.walk() if n.tag == tag and (cls is None or cls in (n.attrs.get("class") or ""))
        ]


class Page(HTMLParser):
    """A strict tree: every element closed by its own end tag (no implied ends), else a `mismatch`."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root, self.mismatches = Node("#root", {}), []
        self.stack = [self.root]
        self.feed(text)
        self.close()
        self.ids = {n.attrs["id"]: n for n in self.root.walk() if n.attrs.get("id")}

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs))
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Node(tag, dict(attrs)))

    def handle_endtag(self, tag):
        if self.stack[-1].tag != tag:
            self.mismatches.append(f"</{tag}> closes <{self.stack[-1].tag}> at {self.getpos()}")
            return
        self.stack.pop()

    def handle_data(self, data):
        self.stack[-1].children.append(data)


def rows(table: Node) -> list[list[str]]:
    return [[c.text().strip() for c in tr.children if isinstance(c, Node)] for tr in table.find("tr")]


def cells(table: Node) -> list[list[Node]]:
    return [[c for c in tr.children if isinstance(c, Node)] for tr in table.find("tr")]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A two-layer Llama: attn_q in Q8_0, the embedding in F16, the rest F32; hostile metadata."""
    rng = np.random.default_rng(0)
    tensors = {}
    for name, shape in llama_inventory(L, D_E, D_FF, N_V, H, H_KV):
        data = rng.normal(size=shape).astype(np.float32)
        tensors[name] = (
            (data, Q.Q8_0) if "attn_q" in name else data.astype(np.float16) if "embd" in name else data
        )
    kv = {k.key: typed(k.value, k.vtype) for k in llama_hparams(L, D_E, D_FF, H, H_KV, n_ctx=N_CTX)}
    kv.pop("general.architecture")
    kv |= {
        "general.name": typed(NAME, V.STRING),
        "tokenizer.ggml.model": typed("gpt2", V.STRING),
        "tokenizer.ggml.tokens": typed([EVIL_TOKEN] + [f"t{i}" for i in range(1, N_V)], V.ARRAY, V.STRING),
        "tokenizer.ggml.bos_token_id": typed(0, V.UINT32),
        "tokenizer.chat_template": typed(TEMPLATE, V.STRING),
        EVIL_KEY: typed(EVIL_VALUE, V.STRING),
    }
    return write_gguf(tmp_path_factory.mktemp("report") / "model.gguf", kv=kv, tensors=tensors)


@pytest.fixture(scope="module")
def page(model) -> tuple[str, Page]:
    text = report_html(describe(model))
    return text, Page(text)


# ── structure ───────────────────────────────────────────────────────────────────────────
def test_the_page_parses_and_holds_every_section_in_order(page):
    text, parsed = page
    assert text.startswith("<!DOCTYPE html>") and text.endswith("</html>\n")
    assert not parsed.mismatches and parsed.stack == [parsed.root], parsed.mismatches[:5]
    keys = [key for key, _ in SECTIONS]
    sections = [n.attrs["id"] for n in parsed.root.find("section", "part")]
    assert sections == keys
    toc = parsed.root.find("nav")[0]
    assert [a.attrs["href"] for a in toc.find("a")] == [f"#{k}" for k in keys]
    assert [a.text() for a in toc.find("a")] == [name for _, name in SECTIONS]


def test_the_page_works_offline_without_scripts(page):
    _, parsed = page
    nodes = list(parsed.root.walk())
    assert not [n for n in nodes if n.tag in ("script", "link", "iframe", "img", "object", "embed")]
    assert not [(n.tag, k) for n in nodes for k in n.attrs if k.startswith("on")]
    links = {v for n in nodes for k, v in n.attrs.items() if k in ("href", "src", "xlink:href")}
    assert links and all(v.startswith("#") for v in links), sorted(links)[:5]


def test_describe_html_is_the_report(model):
    card = describe(model)
    assert render_described(card, "html") == report_html(card)


# ── the numbers ─────────────────────────────────────────────────────────────────────────
def test_summary_and_tensor_table_match_gguf_reader(model, page):
    _, parsed = page
    reader = gguf.GGUFReader(model)
    facts = {
        dt.text(): dd.text() for dt, dd in zip(parsed.root.find("dt"), parsed.root.find("dd"), strict=True)
    }
    assert facts["tensors"] == str(len(reader.tensors)) == "21"  # 1 + 9 per layer · 2 + output norm, output
    total = sum(int(t.n_elements) for t in reader.tensors)
    assert facts["parameters"].startswith(f"{total:,}") and facts["architecture"] == "llama"
    table = parsed.ids["tensors"].find("table", "toycards-tensors")[0]
    body = rows(table)[1:]
    assert [r[1] for r in body] == [t.name for t in reader.tensors]
    for r, t in zip(body, reader.tensors, strict=True):
        assert (r[2], int(r[5]), int(r[6])) == (t.tensor_type.name, int(t.n_elements), int(t.n_bytes))
    q = next(r for r in body if r[1] == "blk.0.attn_q.weight")
    assert int(q[6]) == (D_E * D_E // 32) * 34  # Q8_0: 34 bytes per block of 32 weights
    keys = reader.fields["GGUF.kv_count"].parts[-1][0]
    assert len(rows(parsed.ids["metadata"].find("table", "toycards-metadata")[0])) - 1 == keys


def test_memory_table_is_memory_reports(model, page):
    _, parsed = page
    card = describe(model)
    contexts = report_contexts(card)
    assert contexts == (N_CTX, 2048, 8192)  # 2048, 8192 and the file's context length
    report = memory_report(card, contexts)
    table = parsed.ids["memory"].find("table", "memory")[0]
    assert rows(table)[0][1:] == [f"ℓ = {n:,}" for n in contexts]
    shown = {}
    for tr in cells(table)[1:]:
        if len(tr) > 1:
            shown[tr[0].text()] = [td.attrs["title"] for td in tr[1:]]
    weights = [f"{c.toycards['weights']:,} bytes" for c in report.columns]
    assert shown["weights (file pages and copies)"] == weights
    assert shown["KV cache"] == [f"{c.llama_cpp['kv']:,} bytes" for c in report.columns]
    # llama.cpp at ℓ = 2048: K and V · L layers · 2048 cells · H_kv·d_h · 2 bytes (f16)
    assert shown["KV cache"][1] == f"{2 * L * 2048 * H_KV * (D_E // H) * 2:,} bytes"


def test_cost_table_is_described_cost(model, page):
    _, parsed = page
    cost = described_cost(describe(model))
    section = parsed.ids["cost"]
    pairs = {r[0]: r[1] for r in rows(section.find("table")[0])}
    assert pairs == {k: v for k, v in cost.rows() if k != "note"}
    d_h, n = D_E // H, N_CTX  # 2·d_e·(L·(2·d_h·(H + H_kv) + 3·d_ff) + N_V)·N + 4·L·H·d_h·N²
    prefill = 2 * D_E * (L * (2 * d_h * (H + H_KV) + 3 * D_FF) + N_V) * n + 4 * L * H * d_h * n * n
    assert pairs[f"prefill FLOPs, N = {n}"].startswith(f"{prefill:,} ")
    parts = rows(section.find("table")[1])[1:]
    assert [(r[0], int(r[3].replace(",", ""))) for r in parts] == [
        (p["kind"], p["value"]) for p in cost.to_json()["parameters"]["parts"]
    ]
    total = sum(int(t.n_elements) for t in gguf.GGUFReader(model).tensors)  # the card uses every tensor
    assert sum(int(r[3].replace(",", "")) for r in parts) == total


def test_quant_map_bytes_match_gguf_reader(model, page):
    _, parsed = page
    roles = {r[0]: r for r in rows(parsed.ids["quant-map"].find("table", "toycards-quantroles")[0])[1:]}
    reader = gguf.GGUFReader(model)
    q_bytes = sum(int(t.n_bytes) for t in reader.tensors if t.name.endswith("attn_q.weight"))
    assert roles["attn_q"][2] == "Q8_0" and int(roles["attn_q"][4].replace(",", "")) == q_bytes
    grid = rows(parsed.ids["quant-map"].find("table", "toycards-quantmap")[0])
    assert grid[1][grid[0].index("attn_q")] == "Q8_0"


def test_tokenizer_and_whole_chat_template(page):
    _, parsed = page
    tok = parsed.ids["tokenizer"]
    assert {r[0]: r[1] for r in rows(tok.find("table")[0])}["tokens"] == str(N_V)
    assert rows(tok.find("table")[1])[1] == ["bos", "0", repr(EVIL_TOKEN)]
    pre = parsed.ids["chat-template"].find("pre")
    assert [p.text() for p in pre] == [TEMPLATE]


# ── hostile metadata ────────────────────────────────────────────────────────────────────
def test_hostile_metadata_reaches_the_page_as_text(page):
    text, parsed = page
    for raw in ("<script>alert", EVIL_KEY, '"quoted"', "\u202e"):
        assert raw not in text
    assert text.count("<details>") == text.count("</details>")
    assert parsed.root.find("h1")[0].text() == "model.gguf"
    header = {r[0]: r[1] for r in rows(parsed.ids["summary"].find("table", "header")[0])}
    assert header["name"] == NAME.replace("\u202e", "\\u202e")
    metadata = {r[1]: r[3] for r in rows(parsed.ids["metadata"].find("table", "toycards-metadata")[0])[1:]}
    assert metadata[EVIL_KEY] == EVIL_VALUE and metadata["tokenizer.chat_template"] == TEMPLATE


# ── files without every figure ──────────────────────────────────────────────────────────
def test_a_file_without_a_card_with_steps_still_gets_every_section(tmp_path):
    path = write_gguf(
        tmp_path / "odd.gguf",
        kv={"odd.embedding_length": typed(4, V.UINT32)},
        tensors={"blk.0.mix.weight": np.zeros((4, 4), np.float32)},
        arch="odd",
    )
    parsed = Page(report_html(describe(path)))
    assert not parsed.mismatches
    assert [n.attrs["id"] for n in parsed.root.find("section", "part")] == [key for key, _ in SECTIONS]
    assert "no card with steps" in parsed.ids["memory"].text()
    assert "no steps to draw" in parsed.ids["diagram"].text()
    assert "no chat template" in parsed.ids["chat-template"].text()


def test_a_file_its_card_does_not_fit_says_why(tmp_path, model):
    inventory = dict(llama_inventory(L, D_E, D_FF, N_V, H, H_KV))
    inventory.pop("blk.1.ffn_up.weight")
    kv = {k.key: typed(k.value, k.vtype) for k in llama_hparams(L, D_E, D_FF, H, H_KV, n_ctx=N_CTX)}
    kv.pop("general.architecture")
    tensors = {n: np.zeros(s, np.float32) for n, s in inventory.items()}
    parsed = Page(report_html(describe(write_gguf(tmp_path / "m.gguf", kv=kv, tensors=tensors))))
    assert "blk.1.ffn_up.weight" in parsed.ids["problems"].text() + parsed.ids["summary"].text()
    assert "Memory not known" in parsed.ids["memory"].text()
    assert not parsed.mismatches


# ── the command line ────────────────────────────────────────────────────────────────────
def test_describe_writes_the_report_with_o(model, tmp_path):
    out = tmp_path / "report.html"
    out.write_text("old")  # replaced, as `render -o` and `gen -o` replace theirs
    result = cli("describe", str(model), "--format", "html", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert result.stdout == "" and f"wrote {out}" in result.stderr
    assert out.read_text(encoding="utf-8") == report_html(describe(model))
    before = model.read_bytes()
    refused = cli("describe", str(model), "--format", "html", "-o", str(model))
    assert refused.exit_code == 1 and "refusing to overwrite" in refused.stderr
    assert model.read_bytes() == before
    assert cli("describe", str(model), "--format", "terminal", "-o", str(out)).exit_code == 2
    text = tmp_path / "m.txt"
    assert cli("describe", str(model), "-o", str(text)).exit_code == 0  # -o alone: the text format
    assert text.read_text(encoding="utf-8") == render_described(describe(model), "text")


# ── a browser ───────────────────────────────────────────────────────────────────────────
CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None
)


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium binary (chromium, chromium-browser, google-chrome)")
def test_chromium_renders_the_report_without_console_errors(page, tmp_path):
    text, _ = page
    probe = tmp_path / "probe.html"  # a page that does log, so that a silent browser cannot pass
    probe.write_text("<!DOCTYPE html><title>p</title><script>console.error('probe-error')</script>")
    report = tmp_path / "report.html"
    report.write_text(text, encoding="utf-8")
    dom, log = _chromium(probe)
    assert "probe-error" in log
    dom, log = _chromium(report)
    console = [line for line in log.splitlines() if re.search(r"CONSOLE|Uncaught|ERR_FILE|net::", line)]
    assert not console, console[:5]
    assert all(f'id="{key}"' in dom for key, _ in SECTIONS) and "<svg" in dom


def _chromium(path: Path) -> tuple[str, str]:
    args = [CHROMIUM, "--headless", "--disable-gpu", "--no-first-run", "--enable-logging=stderr", "--v=0"]
    args += ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium refuses its sandbox as root
    env = {**os.environ, "HOME": str(path.parent)}  # a profile of its own, never the user's
    done = subprocess.run(
        [*args, "--dump-dom", path.as_uri()], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr
