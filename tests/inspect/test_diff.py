"""`toycards diff`: semantic differences between cards and GGUF files, and git integration.

Each test edits a library card, or a small hand-written one, in one known way (by text) and
checks that the report names exactly that change (a number spelt otherwise is no change); the git tests run a real `git diff` in a temporary repository through the
diff driver and the textconv recipe of docs/describe-and-diff.md.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import string
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from toycards.inspect.diff import diff_cards, diff_paths, step_lines
from toycards.lang.parse import parse

CARDS = Path(__file__).resolve().parents[2] / "toycards" / "library" / "cards"
GPT2 = (CARDS / "gpt2.card").read_text(encoding="utf-8")
LLAMA = (CARDS / "llama.card").read_text(encoding="utf-8")


def cli(*args: str):
    """`toycards ARGS…`, in process."""
    from toycards.cli import main

    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def changes(a_text: str, b_text: str):
    return diff_cards(parse(a_text), parse(b_text)).changes


def only(items, **want):
    hits = [c for c in items if all(getattr(c, k) == v for k, v in want.items())]
    assert len(hits) == 1, (want, [c.line() for c in items])
    return hits[0]


# ── cards ───────────────────────────────────────────────────────────────────────────────
def test_a_card_equals_itself():
    d = diff_cards(parse(GPT2), parse(GPT2), "a", "b")
    assert d.equal and not d and d.text() == "a and b describe the same card\n"


def test_comments_descriptions_and_layout_are_ignored():
    edited = GPT2.replace("▷ token ids", "▷ the tokens").replace("/* GPT-2:", "/* Another description:")
    edited = edited.replace("▷ logits", "").replace(" 1  ℓ ← length(x)", "1 ℓ ← length(x)   ▷ a new comment")
    assert edited != GPT2
    assert changes(GPT2, edited) == []


def test_step_change_is_aligned_and_summarised():
    edited = GPT2.replace(
        "7    for t ∈ [ℓ]: X̃[:, t] ← layer_norm(X[:, t] | γ_l^2, β_l^2, ε)",
        "7    for t ∈ [ℓ]: X̃[:, t] ← rms_norm(X[:, t] | γ_l^2, ε)",
    )
    found = changes(GPT2, edited)
    step = only(found, section="step")
    assert (step.kind, step.name, step.what) == ("changed", "step 7", "layer_norm → rms_norm")
    assert step.line() == "~ GPT2 step 7: layer_norm → rms_norm"
    assert len(found) == 1


def test_inserted_step_renumbers_without_noise():
    lines = GPT2.splitlines(True)
    at = next(i for i, ln in enumerate(lines) if ln.startswith(" 3  X ← [e_1, …, e_ℓ]"))
    edited = "".join(lines[: at + 1] + ["3 X ← X · 2\n"] + lines[at + 1 :])
    found = changes(GPT2, edited)
    assert [(c.kind, c.name) for c in found] == [("added", "step 4")], [c.line() for c in found]
    assert found[0].new == "X ← X · 2"


def test_gpt2_against_llama():
    found = changes(GPT2, LLAMA)
    steps = {(c.name, c.what) for c in found if c.section == "step" and c.kind == "changed"}
    assert ("step 5 → 7", "layer_norm → rms_norm") in steps
    removed = {c.old for c in found if c.section == "step" and c.kind == "removed"}
    added = {c.new for c in found if c.section == "step" and c.kind == "added"}
    assert any("MHAttention_fused" in s for s in removed) and any(
        "GQAttention(m · Q, m · K, V" in s for s in added
    )
    assert ("step 8 → 14", "GELU_tanh → SwiGLU") in steps
    assert only(found, section="parameter", name="W_p").kind == "removed"
    assert only(found, section="parameter", name='W_q^l (in "blk.{l-1}.")').kind == "added"
    reshaped = only(found, section="parameter", name='W_o^l (in "blk.{l-1}.")')
    assert reshaped.what == "shape ℝ^{d_e×d_e} → ℝ^{d_e×H·d_h}"
    eps = only(found, section="hyperparameter", name="ε")
    assert eps.what.startswith('binding from "{arch}.attention.layer_norm_epsilon"')
    assert only(found, section="hyperparameter", name="H_kv").kind == "added"
    assert all(c.where == "GPT2 → Llama" for c in found)


@pytest.mark.parametrize(
    "old, new, section, name, what",
    [
        ('default 1e-5', 'default 1e-6', "hyperparameter", "ε",
         'binding from "{arch}.attention.layer_norm_epsilon" default 1e-5 → '
         'from "{arch}.attention.layer_norm_epsilon" default 1e-6'),
        ("d_mlp ∈ ℕ  ", "d_mlp ∈ ℤ  ", "hyperparameter", "d_mlp", "type ℕ → ℤ"),
        ("ℓ_max ∈ ℕ  from", "ℓ_max ∈ ℕ = 7 from", "hyperparameter", "ℓ_max", "value (no value) → 7"),
        ('from "attn_output.weight"', 'from "attn_out.weight"', "parameter", 'W_o^l (in "blk.{l-1}.")',
         'binding from "attn_output.weight" → from "attn_out.weight"'),
        ("W_qkv^l ∈ ℝ^{3·d_e×d_e}", "W_qkv^l ∈ ℝ^{d_e×d_e}", "parameter", 'W_qkv^l (in "blk.{l-1}.")',
         "shape ℝ^{3·d_e×d_e} → ℝ^{d_e×d_e}"),
    ],
)  # fmt: skip
def test_one_declaration_change(old, new, section, name, what):
    assert old in GPT2
    c = only(changes(GPT2, GPT2.replace(old, new, 1)), section=section, name=name)
    assert (c.kind, c.what) == ("changed", what)


def test_added_and_removed_algorithms():
    paper = (CARDS / "paper.card").read_text(encoding="utf-8")
    a, b = parse(paper), parse(paper)
    b = type(b)(b.algorithms[1:], b.version, b.preamble)
    found = diff_cards(a, b).changes
    removed = only(found, section="algorithm")
    assert removed.kind == "removed" and removed.where == a.algorithms[0].name


def test_step_lines_match_the_formatter():
    card = parse(GPT2)
    numbered = [(n, t) for n, t in step_lines(card.main)]
    assert numbered[0] == (1, "ℓ ← length(x)") and numbered[-1] == (12, "return P = softmax(Z)")
    assert (9, "end") in numbered


# ── numbers by value ────────────────────────────────────────────────────────────────────
SCALE = string.Template("""toycards 1
Algorithm: Y ← Scale(X | θ)
Input: X ∈ ℝ^{d}
Output: Y ∈ ℝ^{d}
Hyperparameters:
  d ∈ ℕ = $d
  ε ∈ ℝ = $eps  from "{arch}.eps"
  α ∈ ℝ  from "{arch}.alpha" default $alpha
Parameters:
  γ ∈ ℝ^{d}  from "w.weight" or $fallback
 1  Y ← γ ⊙ X · $half + ε
 2  return Y
""")


def scale(d="4", eps="1e-5", alpha="0.5", fallback="1", half="0.5") -> str:
    """A hand-written card whose every number is spelt as given."""
    return SCALE.substitute(d=d, eps=eps, alpha=alpha, fallback=fallback, half=half)


@pytest.mark.parametrize(
    "spelling",
    [
        {"eps": "1e-05"},
        {"eps": "0.00001"},
        {"eps": "9.999999747378752e-06"},  # the float32 nearest 1e-5, as a GGUF file holds ε
        {"d": "4.0"},
        {"alpha": "0.50"},
        {"alpha": "5e-1"},
        {"fallback": "1.0"},
        {"half": "5e-1"},
    ],
    ids=str,
)
def test_numbers_spelt_otherwise_are_the_same(spelling):
    assert changes(scale(), scale(**spelling)) == []


@pytest.mark.parametrize(
    "spelling, section, name, what",
    [
        ({"eps": "1e-6"}, "hyperparameter", "ε", "value 1e-5 → 1e-6"),
        ({"eps": "1.00001e-5"}, "hyperparameter", "ε", "value 1e-5 → 1.00001e-5"),
        ({"d": "4.0000001"}, "hyperparameter", "d", "value 4 → 4.0000001"),  # the same float32, not the same value
        ({"alpha": "0.25"}, "hyperparameter", "α", 'binding from "{arch}.alpha" default 0.5 → from "{arch}.alpha" default 0.25'),
        ({"fallback": "2"}, "parameter", "γ", 'binding from "w.weight" or 1 → from "w.weight" or 2'),
        ({"half": "0.25"}, "step", "step 1", "Y ← γ ⊙ X · 0.5 + ε → Y ← γ ⊙ X · 0.25 + ε"),
    ],
)  # fmt: skip
def test_numbers_of_other_values_differ(spelling, section, name, what):
    c = only(changes(scale(), scale(**spelling)), section=section, name=name)
    assert (c.kind, c.what) == ("changed", what)


def test_same_number_against_decimal_and_float32_arithmetic():
    """Hand-checked cases: decimal equality, and float32 values against their shortest spelling."""
    from toycards.inspect.diff import same_number

    assert same_number("1e-5", "1e-05") and same_number("0.00001", "1E-5") and same_number("4", "4.000")
    assert same_number("9.999999974752427e-07", "1e-6")  # float32(1e-6), in full
    assert same_number("0.10000000149011612", "0.1") and not same_number("0.1000000015", "0.1")
    assert not same_number("1e-5", "1e-50") and not same_number("3", "0.3")


def test_diff_command_of_number_spellings_exits_0(tmp_path):
    (tmp_path / "a.card").write_text(scale(), encoding="utf-8")
    (tmp_path / "b.card").write_text(scale(eps="0.00001", d="4.0"), encoding="utf-8")
    out = cli("diff", str(tmp_path / "a.card"), str(tmp_path / "b.card"))
    assert out.exit_code == 0 and "describe the same card" in out.stdout


def test_a_card_with_values_spelt_by_hand_against_its_gguf_file(tmp_path):
    """describe writes ε = 1e-05 and θ_base = 10000.0; a card that says 1e-5 and 1e4 is the same."""
    example = Path(__file__).resolve().parents[2] / "examples" / "tiny-llama.gguf"
    card = cli("describe", str(example), "--format", "card").stdout
    assert "ε ∈ ℝ = 1e-05 " in card and "θ_base ∈ ℝ = 10000.0 " in card and "H ∈ ℕ = 4 " in card
    by_hand = (
        card.replace("= 1e-05 ", "= 1e-5  ").replace("= 10000.0 ", "= 1e4     ").replace("= 4 ", "= 4.0")
    )
    (tmp_path / "m.card").write_text(by_hand, encoding="utf-8")
    assert cli("diff", str(tmp_path / "m.card"), str(example)).exit_code == 0
    (tmp_path / "m.card").write_text(card.replace("= 1e-05 ", "= 1e-6  "), encoding="utf-8")
    out = cli("diff", str(tmp_path / "m.card"), str(example))
    assert out.exit_code == 1 and "ε: value 1e-6 → 1e-05" in out.stdout


# ── GGUF files ──────────────────────────────────────────────────────────────────────────
def test_two_gguf_files(oracle_files):
    d = diff_paths(oracle_files("llama").path, oracle_files("llama-tied").path)
    assert only(d.changes, section="hyperparameter", name="θ_base").what == "value 10000.0 → 500000.0"
    assert only(d.changes, section="hyperparameter", name="ε").what == "value 1e-05 → 1e-06"
    assert only(d.changes, section="file", name="tensor types").new == "F32 ×20"
    assert diff_paths(oracle_files("llama").path, oracle_files("llama").path).equal


def test_card_against_gguf(oracle_files, tmp_path):
    path = oracle_files("gpt2").path
    out = cli("describe", str(path), "--format", "card")
    (tmp_path / "m.card").write_text(out.stdout, encoding="utf-8")
    assert diff_paths(tmp_path / "m.card", path).equal
    d = diff_paths(CARDS / "gpt2.card", path)
    assert {c.section for c in d.changes} == {"hyperparameter"}
    assert only(d.changes, name="L").what == "value (no value) → 2"


# ── command line ────────────────────────────────────────────────────────────────────────
def test_exit_codes_and_json(tmp_path):
    (tmp_path / "a.card").write_text(GPT2, encoding="utf-8")
    (tmp_path / "b.card").write_text(LLAMA, encoding="utf-8")
    same = cli("diff", str(tmp_path / "a.card"), str(CARDS / "gpt2.card"))
    assert same.exit_code == 0 and "same card" in same.stdout
    differ = cli("diff", str(tmp_path / "a.card"), str(tmp_path / "b.card"), "--format", "json")
    assert differ.exit_code == 1
    data = json.loads(differ.stdout)
    assert data["equal"] is False and any(c["what"] == "layer_norm → rms_norm" for c in data["changes"])
    missing = cli("diff", str(tmp_path / "a.card"), str(tmp_path / "nope.card"))
    assert missing.exit_code == 2 and "no such file" in missing.stderr and "Traceback" not in missing.output
    assert cli("diff", str(tmp_path / "a.card")).exit_code == 2  # usage


# ── git ─────────────────────────────────────────────────────────────────────────────────
def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo.parent), "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "GIT_PAGER": "cat",
    }  # fmt: skip
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def repo(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "model.card").write_text(GPT2, encoding="utf-8")
    git(repo, "add", "model.card")
    git(repo, "commit", "-q", "-m", "gpt2")
    return repo


def toycards_command(*args: str) -> str:
    """`toycards ARGS…` as the docs' recipes spell it, through this interpreter."""
    return " ".join([shlex.quote(sys.executable), "-m", "toycards", *args])


def test_git_diff_driver(repo):
    (repo / ".gitattributes").write_text("*.card diff=toycards\n")
    git(repo, "config", "diff.toycards.command", toycards_command("diff"))
    edited = GPT2.replace("layer_norm(X[:, t] | γ, β, ε)", "rms_norm(X[:, t] | γ, ε)")
    (repo / "model.card").write_text(edited, encoding="utf-8")
    out = git(repo, "diff")
    assert "diff --toycards a/model.card b/model.card" in out
    assert "~ GPT2 step 10: layer_norm → rms_norm" in out
    (repo / "model.card").write_text(GPT2.replace("▷ logits", "▷ scores"), encoding="utf-8")
    assert "describe the same card" in git(repo, "diff")
    (repo / "new.card").write_text(GPT2, encoding="utf-8")
    git(repo, "add", "new.card")
    added = git(repo, "diff", "--cached", "new.card")
    assert "+ GPT2 algorithm: P ← GPT2(x | θ) (12 steps)" in added
    (repo / "model.card").write_text("not a card\n", encoding="utf-8")
    broken = git(repo, "diff", "model.card")
    assert "not compared as cards" in broken and "+not a card" in broken


def test_git_textconv(repo):
    (repo / ".gitattributes").write_text("*.card diff=cardfmt\n")
    git(repo, "config", "diff.cardfmt.textconv", toycards_command("fmt", "--stdout"))
    ascii_spelling = GPT2.replace("ℓ ← length(x)", "ell <- length(x)").replace("  L ∈ ℕ   ", "  L in N   ")
    (repo / "model.card").write_text(ascii_spelling, encoding="utf-8")
    assert git(repo, "diff") == ""  # the same card in another spelling: no difference
    (repo / "model.card").write_text(GPT2.replace("GELU_tanh(", "GELU("), encoding="utf-8")
    out = git(repo, "diff")
    # the library card is in canonical form, so the one edited step is the one changed line
    (step,) = [line for line in GPT2.splitlines() if "GELU_tanh(" in line]
    changed = [
        ln for ln in out.splitlines() if ln.startswith(("-", "+")) and not ln.startswith(("---", "+++"))
    ]
    assert changed == ["-" + step, "+" + step.replace("GELU_tanh(", "GELU(")], out
