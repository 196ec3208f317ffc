"""The context length as a policy: `run`, `generate`, `logits` and `eval` hold a sequence to it.

A learned-position model (docs/train.md's TinyLM card, ℓ_max cut to 16, random weights, the
example file's vocabulary) has no position past ℓ_max: `run` stops there with one line on
stderr, a prompt that does not fit is one line and exit 1, `--ctx` past ℓ_max is refused, and
`logits` of more ids is a ToycardsError. A RoPE model (examples/tiny-llama.gguf, trained for 256
tokens) is held to its trained context by default and goes past it with `--ctx` and a warning.
The expected texts are greedy decoding by hand: the argmax of `model.logits` of the whole
sequence, token after token.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import toycards
from toycards.cli import main
from toycards.runtime.context import ContextLength

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-llama.gguf"
ELL_MAX = 16
PROMPT = "one two three"


def tinylm_card(ell_max: int = ELL_MAX) -> str:
    """docs/train.md's card with ℓ_max = `ell_max` and the example file's 1,024-token vocabulary."""
    doc = (ROOT / "docs" / "train.md").read_text(encoding="utf-8")
    (card,) = re.findall(r"^```card\n(.*?)^```$", doc, re.S | re.M)
    for old, new in (("ℓ_max ∈ ℕ = 64", f"ℓ_max ∈ ℕ = {ell_max}"), ("N_V ∈ ℕ  ▷", "N_V ∈ ℕ = 1024  ▷")):
        assert old in card, old
        card = card.replace(old, new)
    return card


def write_learned_model(path: Path, ell_max: int = ELL_MAX) -> Path:
    """A GGUF file of the TinyLM card (learned positions W_p ∈ ℝ^{d_e×ℓ_max}), random weights."""
    return toycards.save(toycards.load(tinylm_card(ell_max), seed=1), path, tokenizer=EXAMPLE)


@pytest.fixture(scope="module")
def learned(tmp_path_factory) -> Path:
    return write_learned_model(tmp_path_factory.mktemp("context") / "tinylm.gguf")


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_error(result, *fragments: str) -> str:
    """Exit 1, nothing on stdout, one line on stderr naming every fragment, no traceback."""
    assert result.exit_code == 1, (result.exit_code, result.output)
    assert result.stdout == "" and "Traceback" not in result.output, result.output
    (line,) = result.stderr.splitlines()
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def greedy(model, prompt: str, n_total: int) -> str:
    """The text greedy decoding adds to `prompt` until the sequence holds `n_total` tokens, each
    token the argmax of a full pass over the sequence so far."""
    tok = model.tokenizer
    ids = tok.encode(prompt)
    start = len(ids)
    while len(ids) < n_total:
        next_id = int(np.argmax(model.logits(ids)[-1]))
        assert not tok.is_eog(next_id), "the random weights chose an end-of-generation token"
        ids.append(next_id)
    return tok.decode(ids[start:])


def long_text(model, n_tokens: int) -> str:
    """A counting text of more than `n_tokens` tokens."""
    words = "one two three four five six seven eight nine ten".split()
    text = ""
    while len(model.tokenizer.encode(text)) <= n_tokens:
        text += " ".join(words) + ". "
    return text


# ── what the card says ──────────────────────────────────────────────────────────────────
def test_the_context_length_comes_from_the_card(learned):
    assert toycards.load(learned).context_length == ContextLength(ELL_MAX, "ℓ_max", True)
    assert toycards.load(EXAMPLE).context_length == ContextLength(256, "ℓ_max", False)
    # found by its key ("{arch}.context_length"), whatever the card calls it
    renamed = tinylm_card().replace("ℓ_max", "T_max")
    assert toycards.load(renamed).context_length == ContextLength(ELL_MAX, "T_max", True)


def test_a_card_without_a_context_length_has_no_limit():
    card = tinylm_card().replace('  ℓ_max ∈ ℕ = 16  from "{arch}.context_length"\n', "")
    card = card.replace('  W_p ∈ ℝ^{d_e×ℓ_max}         from "position_embd.weight"^⊺\n', "")
    card = card.replace(" + W_p[:, t]", "")
    model = toycards.load(card, seed=1)
    assert model.context_length == ContextLength(None)
    model.tokenizer = toycards.load_tokenizer(EXAMPLE)
    assert model.logits(list(range(3 * ELL_MAX))).shape == (3 * ELL_MAX, 1024)
    pieces = model.generate("one", max_tokens=2 * ELL_MAX)
    text = "".join(pieces)
    assert pieces.stop_reason == "max_tokens" and text == greedy(model, "one", 1 + 2 * ELL_MAX)


# ── the learned-position model ──────────────────────────────────────────────────────────
def test_run_stops_at_the_learned_context_with_one_line(learned):
    """Through a fresh process: the text up to ℓ_max tokens, one line on stderr, exit 0."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "toycards", "run", str(learned), "-p", PROMPT, "-n", "100"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"stopped at the context length {ELL_MAX} (the model has 16 learned positions)"
    ]
    model = toycards.load(learned)
    assert done.stdout == PROMPT + greedy(model, PROMPT, ELL_MAX) + "\n"


def test_run_within_the_context_says_nothing(learned):
    result = cli("run", learned, "-p", PROMPT, "-n", 4)
    assert result.exit_code == 0 and result.stderr == "", result.output
    n_prompt = len(toycards.load_tokenizer(learned).encode(PROMPT))
    assert result.stdout == PROMPT + greedy(toycards.load(learned), PROMPT, n_prompt + 4) + "\n"


def test_a_prompt_longer_than_the_learned_context_is_one_line(learned):
    model = toycards.load(learned)
    prompt = long_text(model, ELL_MAX)
    n = len(model.tokenizer.encode(prompt))
    one_error(cli("run", learned, "-p", prompt), f"the prompt is {n} tokens", f"context length {ELL_MAX}")


def test_ctx_past_the_learned_positions_is_refused_and_a_shorter_one_holds(learned):
    one_error(cli("run", learned, "-p", PROMPT, "--ctx", ELL_MAX + 1), "--ctx 17", "16 learned positions")
    one_error(cli("eval", learned, "-p", PROMPT, "--ctx", ELL_MAX + 1), "--ctx 17", "16 learned positions")
    result = cli("run", learned, "-p", PROMPT, "--ctx", 8, "-n", 100)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == ["stopped at the context length 8 (--ctx N to change)"]
    assert result.stdout == PROMPT + greedy(toycards.load(learned), PROMPT, 8) + "\n"


@pytest.mark.parametrize("target", ["numpy", "torch", "reference"])
def test_logits_past_the_learned_positions_name_the_limit(learned, target):
    if target == "torch":
        pytest.importorskip("torch")
    model = toycards.load(learned, target=target)
    assert model.logits(list(range(ELL_MAX))).shape == (ELL_MAX, 1024)
    with pytest.raises(
        toycards.ToycardsError, match=r"17 tokens do not fit the model's 16 learned positions"
    ):
        model.logits(list(range(ELL_MAX + 1)))


def test_generate_says_why_it_stopped(learned):
    model = toycards.load(learned)
    n_prompt = len(model.tokenizer.encode(PROMPT))
    pieces = model.generate(PROMPT, max_tokens=100)
    assert pieces.stop_reason is None
    assert "".join(pieces) == greedy(model, PROMPT, ELL_MAX) and pieces.stop_reason == "context"
    pieces = model.generate(PROMPT, max_tokens=ELL_MAX - n_prompt)  # exactly the room left
    assert "".join(pieces) == greedy(model, PROMPT, ELL_MAX) and pieces.stop_reason == "max_tokens"
    pieces = model.generate(PROMPT, max_tokens=100, n_ctx=n_prompt + 2)
    assert "".join(pieces) == greedy(model, PROMPT, n_prompt + 2) and pieces.stop_reason == "context"
    with pytest.raises(toycards.ToycardsError, match="n_ctx 17: the model has 16 learned positions"):
        model.generate(PROMPT, n_ctx=ELL_MAX + 1)
    with pytest.raises(toycards.ToycardsError, match=f"the prompt is {n_prompt} tokens"):
        model.generate(PROMPT, n_ctx=n_prompt)  # refused at the call, before any piece


def test_eval_of_a_text_longer_than_the_learned_context(learned):
    """Through a fresh process: windows of ℓ_max tokens, the summary line, exit 0."""
    model = toycards.load(learned)
    text = long_text(model, 3 * ELL_MAX)
    n = len(model.tokenizer.encode(text))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "toycards", "eval", str(learned), "-p", text],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    (line,) = done.stdout.splitlines()
    assert line.startswith(f"tokens {n - 1}  mean NLL ") and "(ctx 16, stride 8," in line, line


# ── the RoPE model ──────────────────────────────────────────────────────────────────────
@pytest.fixture(scope="module")
def rope_prompt():
    """A prompt of more than the example model's 256 trained tokens."""
    model = toycards.load(EXAMPLE)
    prompt = long_text(model, 256)
    return prompt, len(model.tokenizer.encode(prompt))


def test_rope_model_is_held_to_its_trained_context_by_default(rope_prompt):
    prompt, n = rope_prompt
    one_error(cli("run", EXAMPLE, "-p", prompt, "-n", 2), f"the prompt is {n} tokens", "256", "--ctx")
    result = cli("run", EXAMPLE, "-p", "Hello", "--ctx", 12, "-n", 100)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == ["stopped at the context length 12 (--ctx N to change)"]
    assert result.stdout == "Hello" + greedy(toycards.load(EXAMPLE), "Hello", 12) + "\n"


def test_rope_model_goes_past_its_context_with_ctx_and_a_warning(rope_prompt):
    prompt, n = rope_prompt
    result = cli("run", EXAMPLE, "-p", prompt, "--ctx", n + 8, "-n", 3)
    assert result.exit_code == 0, result.output
    (warning,) = result.stderr.splitlines()
    assert warning.startswith(f"warning: --ctx {n + 8} is past the context length 256"), warning
    assert result.stdout == prompt + greedy(toycards.load(EXAMPLE), prompt, n + 3) + "\n"
    scored = cli("eval", EXAMPLE, "-p", prompt, "--ctx", n + 8)
    assert scored.exit_code == 0, scored.output
    assert scored.stderr.splitlines() == [warning]
    assert scored.stdout.startswith(f"tokens {n - 1}  ") and "1 window;" in scored.stdout
