"""Small things a user of the command line meets, each through the CLI.

- `run -p -` and `eval -p -` read the text from stdin (as `check -` and `fmt -` read a card): the
  same output as the text given on the command line; stdin that is not UTF-8 is one line, exit 1.
- `run` builds the native code decoding needs before it prints anything, so that the line saying
  so (stderr, on a terminal) never lands inside the generated text.
- Ctrl-C in `run` and `eval`, while loading or while working, is one line and exit 130 (as in
  `train`), and a real SIGINT to `toycards run` is too.
- `--top-k` / `--top-p` without `--temperature` warn in one line that decoding is greedy, and the
  text is the greedy text; with a temperature there is no warning.
- `describe --card` with a card that does not fit lists the first 10 problems and a count (errors
  first); `--all` lists every one; stderr follows the same rule for the other formats.
- `describe` explains its `toycards 1` line in the comment under it, and the card still parses.
- `describe` shows the start of the chat template, terminal-safe, with the number of characters
  left out; `--show-template` shows all of it.
- `describe --format html` and `--format latex` are complete documents in `render`'s page and
  preamble; the LaTeX is ASCII whatever the file's strings hold (pdflatex reads it; compiled
  when pdflatex is installed).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from gguf import GGUFValueType as V
from gguf_factory import llama_hparams, llama_inventory, typed, write_gguf
from test_render import _assert_balanced_latex, _html_parse

from toycards.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-llama.gguf"
GPT2_CARD = ROOT / "toycards" / "library" / "cards" / "gpt2.card"
LLAMA_CARD = ROOT / "toycards" / "library" / "cards" / "llama.card"


def cli(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


def stderr_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


# ── `-p -` ──────────────────────────────────────────────────────────────────────────────
def test_run_reads_the_prompt_from_stdin():
    given = cli("run", EXAMPLE, "-p", "Once upon a time", "-n", 6)
    piped = cli("run", EXAMPLE, "-p", "-", "-n", 6, input="Once upon a time")
    assert given.exit_code == 0 and piped.exit_code == 0, piped.output
    assert piped.stdout == given.stdout and piped.stdout.startswith("Once upon a time")
    assert cli("run", EXAMPLE, "-p", "-", "-n", 2, input="-").stdout.startswith("-"), "`-` itself, piped"


def test_eval_reads_the_text_from_stdin():
    text = "one two three four five six seven"
    given = json.loads(cli("eval", EXAMPLE, "-p", text, "--json").stdout)
    piped = json.loads(cli("eval", EXAMPLE, "-p", "-", "--json", input=text).stdout)
    for result in (given, piped):
        del result["tokens_per_second"], result["seconds"]
    assert piped == given and given["n_tokens"] > 0


@pytest.mark.parametrize("command", ["run", "eval"])
def test_stdin_that_is_not_utf8_is_one_line(command):
    result = CliRunner().invoke(main, [command, str(EXAMPLE), "-p", "-"], input=b"caf\xe9\n")
    assert result.exit_code == 1
    assert stderr_lines(result) == ["error: --prompt -: stdin is not UTF-8 text (byte 3)"]


# ── the native code is built before the text is printed ─────────────────────────────────
@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_the_native_code_is_built_before_any_text_is_printed(target, monkeypatch):
    if target == "torch":
        pytest.importorskip("torch")
        from toycards.engine.torch import native

        name = "module"
    else:
        from toycards.engine import ckernels as native

        name = "library"
    printed_before: list[str] = []

    def building():  # what a cold cache does: say so on stderr, then hand the code over
        if not printed_before:
            sys.stdout.flush()
            printed_before.append(sys.stdout.buffer.getvalue().decode())
            print("toycards: building the native code, once for this machine ... done", file=sys.stderr)
        return None  # the Python path runs instead

    monkeypatch.setattr(native, name, building)
    result = cli("run", EXAMPLE, "-p", "Hello", "-n", 4, "--target", target)
    assert result.exit_code == 0, result.output
    assert printed_before == [""], "built before the prompt was printed"
    assert "building" in result.stderr and "building" not in result.stdout


# ── Ctrl-C ──────────────────────────────────────────────────────────────────────────────
def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    "command, where",
    [
        (["run", EXAMPLE, "-p", "Hello"], "toycards.cli.models.load_model"),
        (["run", EXAMPLE, "-p", "Hello"], "toycards.runtime.model_base.ModelAPI._continue"),
        (["eval", EXAMPLE, "-p", "Hello world"], "toycards.cli.models.load_model"),
        (["eval", EXAMPLE, "-p", "Hello world"], "toycards.models.evaluate.evaluate"),
    ],
)
def test_ctrl_c_is_one_line_and_exit_130(command, where, monkeypatch):
    monkeypatch.setattr(where, _interrupt)
    result = cli(*command)
    assert result.exit_code == 130, result.output
    assert stderr_lines(result) == ["interrupted"]
    assert "Aborted" not in result.output and "Traceback" not in result.output


def test_a_real_sigint_stops_run_with_exit_130():
    run = ["run", str(EXAMPLE), "-p", "Hi", "-n", "100000", "--ctx", "100000"]  # would go on for minutes
    cmd = [sys.executable, "-m", "toycards", *run]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.read(2) == b"Hi"  # printed: generating now
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    lines = err.decode().splitlines()
    assert lines[-1] == "interrupted" and "Traceback" not in err.decode(), err


# ── --top-k / --top-p at temperature 0 ──────────────────────────────────────────────────
def test_top_k_without_temperature_warns_that_decoding_is_greedy():
    greedy = cli("run", EXAMPLE, "-p", "Hello", "-n", 8)
    topk = cli("run", EXAMPLE, "-p", "Hello", "-n", 8, "--top-k", 5, "--top-p", 0.9)
    assert topk.exit_code == 0, topk.output
    assert stderr_lines(topk) == [
        "warning: --top-k 5 and --top-p 0.9 do nothing at temperature 0: decoding is greedy;"
        " add --temperature T (0.8 is llama.cpp's default) to sample"
    ]
    assert topk.stdout == greedy.stdout
    alone = cli("run", EXAMPLE, "-p", "Hello", "-n", 8, "--top-k", 40, "--temperature", 0)
    assert stderr_lines(alone) == [
        "warning: --top-k 40 does nothing at temperature 0: decoding is greedy;"
        " add --temperature T (0.8 is llama.cpp's default) to sample"
    ]
    sampled = cli("run", EXAMPLE, "-p", "Hello", "-n", 8, "--top-k", 5, "--temperature", 0.8, "--seed", 1)
    assert sampled.exit_code == 0 and "warning" not in sampled.stderr


# ── describe: many problems ─────────────────────────────────────────────────────────────
def _problems(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(("error: ", "warning: ", "… and "))]


def test_describe_with_a_card_that_does_not_fit_sums_the_problems_up():
    short = cli("describe", EXAMPLE, "--card", GPT2_CARD)
    every = cli("describe", EXAMPLE, "--card", GPT2_CARD, "--all")
    assert short.exit_code == 1 and every.exit_code == 1
    listed = _problems(every.stdout)
    errors = [line for line in listed if line.startswith("error: ")]
    warnings = [line for line in listed if line.startswith("warning: ")]
    assert len(listed) == 24 and listed == errors + warnings, "every one, errors first"
    assert len(errors) == 16 and "'position_embd.weight' is missing" in errors[0]
    assert _problems(short.stdout) == [
        *errors[:10],
        "… and 14 more (6 errors, 8 warnings); --all lists every one",
    ]
    assert _problems(short.stderr) == _problems(short.stdout)
    assert _problems(every.stderr) == listed
    json_ = cli("describe", EXAMPLE, "--card", GPT2_CARD, "--format", "json")
    assert len(json.loads(json_.stdout)["problems"]) == 24, "a document keeps every problem"
    assert len(_problems(json_.stderr)) == 11


def test_a_few_problems_are_all_listed(tmp_path):
    path = _llama_file(tmp_path / "m.gguf", drop=("blk.1.ffn_up.weight",))
    result = cli("describe", path)
    assert result.exit_code == 1
    assert [line for line in _problems(result.stdout) if line.startswith("error")] == [
        f"error: tensor 'blk.1.ffn_up.weight' is missing from the file (card parameter W_up^l) (card "
        f"{LLAMA_CARD.relative_to(ROOT)}:{_card_line(LLAMA_CARD, 'W_up^l')})"
    ]
    assert not any(line.startswith("… and") for line in _problems(result.stdout))


def _card_line(card: Path, name: str) -> int:
    return next(n for n, line in enumerate(card.read_text().splitlines(), 1) if line.strip().startswith(name))


# ── describe: the version line ─────────────────────────────────────────────────────────
def test_describe_explains_the_version_line_and_the_card_still_parses():
    import toycards

    out = cli("describe", EXAMPLE, "--format", "card").stdout
    first, second = out.splitlines()[:2]
    assert first == "toycards 1"
    assert second == "▷ toycards 1: the version of the card language this card is written in."
    card = toycards.parse(out)
    assert card.version == 1 and toycards.check(card) == []


# ── describe: the chat template ─────────────────────────────────────────────────────────
def _llama_file(path: Path, kv: dict | None = None, drop: tuple[str, ...] = ()) -> Path:
    rng = np.random.default_rng(0)
    inventory = dict(llama_inventory(n_layer=2, d_e=8, d_ff=16, n_vocab=32, n_head=2, n_head_kv=1))
    meta = {k.key: typed(k.value, k.vtype) for k in llama_hparams(2, 8, 16, 2, 1, n_ctx=64)}
    meta.pop("general.architecture")
    meta.update(kv or {})
    arrays = {n: rng.normal(size=s).astype(np.float32) for n, s in inventory.items() if n not in drop}
    return write_gguf(path, kv=meta, tensors=arrays)


TEMPLATE = "".join(
    f"{{% if messages[{i}] %}}{{{{ messages[{i}].content }}}}{{% endif %}}\n" for i in range(40)
)


def test_describe_shows_the_start_of_the_chat_template(tmp_path):
    evil = "\x1b]0;pwned\x07\u202e"
    template = f"{{# {evil} #}}\n" + TEMPLATE
    path = _llama_file(tmp_path / "chat.gguf", kv={"tokenizer.chat_template": typed(template, V.STRING)})
    out = cli("describe", path).stdout
    lines = template.split("\n")[:12]
    shown = "\n".join(lines)
    heading = f"chat template (the first {len(shown):,} of {len(template):,} characters; --show-template shows it all):"
    assert heading in out
    block = out[out.index(heading) + len(heading) + 1 :].split("\n\n")[0]
    assert block.split("\n") == [
        "  " + line.replace("\x1b", "\\x1b").replace("\x07", "\\x07").replace("\u202e", "\\u202e")
        for line in lines
    ]
    assert "\x1b" not in out and "\u202e" not in out

    whole = cli("describe", path, "--show-template").stdout
    assert f"chat template ({len(template):,} characters):" in whole
    assert "{{ messages[39].content }}" in whole and "{{ messages[39].content }}" not in out


@pytest.mark.parametrize("fmt", ["terminal", "text"])
def test_the_terminal_view_shows_the_template_too(tmp_path, fmt):
    path = _llama_file(tmp_path / "chat.gguf", kv={"tokenizer.chat_template": typed(TEMPLATE, V.STRING)})
    out = cli("describe", path, "--format", fmt, "--show-template").stdout
    assert f"chat template ({len(TEMPLATE):,} characters):" in out
    assert "  {% if messages[39] %}{{ messages[39].content }}{% endif %}" in out


# ── describe: complete documents ────────────────────────────────────────────────────────
def _style(page: str) -> str:
    return page[page.index("<style>") : page.index("</style>")]


def test_describe_html_is_a_complete_page_styled_like_render(tmp_path):
    name = "<script>alert(1)</script> & 50% 中文"
    path = _llama_file(tmp_path / "m.gguf", kv={"general.name": typed(name, V.STRING)})
    page = cli("describe", path, "--format", "html").stdout
    assert page.startswith('<!DOCTYPE html>\n<html lang="en">') and page.endswith("</body>\n</html>\n")
    parsed = _html_parse(page)
    assert "script" not in parsed.tags and name in "".join(parsed.text)
    assert {"title", "style", "h1", "table", "section"} <= set(parsed.tags)
    rendered = cli("render", LLAMA_CARD, "--format", "html").stdout
    assert _style(page) == _style(rendered)
    assert "<title>m.gguf</title>" in page and '<section class="algorithm" id="alg-Llama">' in page


def test_describe_latex_is_a_complete_document_in_renders_preamble(tmp_path):
    name = "Café_50% #1 ~ 中文 ▷ θ"
    path = _llama_file(tmp_path / "m.gguf", kv={"general.name": typed(name, V.STRING)})
    tex = cli("describe", path, "--format", "latex").stdout
    rendered = cli("render", LLAMA_CARD, "--format", "latex").stdout
    preamble = rendered[: rendered.index("\\begin{document}\n") + len("\\begin{document}\n")]
    assert tex.startswith(preamble) and tex.endswith("\\end{document}\n")
    assert tex.count("\\begin{document}") == 1 and tex.count("\\end{document}") == 1
    _assert_balanced_latex(tex)  # every line ASCII, braces and environments balanced
    assert r"name & Cafe\_50\% \#1 \textasciitilde{} ?? \ensuremath{\triangleright} $\theta$ \\" in tex


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
def test_describe_latex_compiles(tmp_path):
    (tmp_path / "m.tex").write_text(cli("describe", EXAMPLE, "--format", "latex").stdout, encoding="utf-8")
    run = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "m.tex"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, [line for line in run.stdout.splitlines() if line.startswith("!")]
