"""`toycards gen`, `run` and `eval` through the command line, checked against transformers.

The example GGUF (examples/tiny-llama.gguf) is loaded by transformers as the oracle: `eval`'s
log-probabilities must equal log-softmax of transformers' logits, and `run`'s greedy text must be
the decoding of transformers' greedy continuation.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from toycards.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-llama.gguf"


def cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def hf():
    pytest.importorskip("transformers")
    from oracle.hf_gguf import hf_from_gguf

    return hf_from_gguf(EXAMPLE)


@pytest.fixture(scope="module")
def tok():
    from toycards.tokenizer.tokenizer import load_tokenizer

    return load_tokenizer(EXAMPLE)


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_gen_from_gguf_and_card_to_stdout_and_file(tmp_path, target):
    out = cli("gen", str(EXAMPLE), "--target", target)
    assert out.exit_code == 0, out.output
    ast.parse(out.output)
    assert f"from toycards.runtime.{target} import ops" in out.output
    dest = tmp_path / "llama_module.py"
    out = cli("gen", str(ROOT / "toycards/library/cards/llama.card"), "--target", target, "-o", str(dest))
    assert out.exit_code == 0, out.output
    assert (
        dest.read_text(encoding="utf-8")
        == cli("gen", str(ROOT / "toycards/library/cards/llama.card"), "--target", target).output
    )


def test_gen_never_overwrites_its_input(tmp_path):
    card = tmp_path / "m.card"
    text = (ROOT / "toycards/library/cards/llama.card").read_text(encoding="utf-8")
    card.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(main, ["gen", str(card), "-o", str(card)])
    assert result.exit_code == 1 and "refusing to overwrite" in result.output
    assert card.read_text(encoding="utf-8") == text


def test_gen_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.card"
    bad.write_text(
        "Algorithm: y ← f(x)\nInput: x ∈ ℝ^{n}\nOutput: y ∈ ℝ^{n}\n1  return y = x · z\n", encoding="utf-8"
    )
    for args, fragment in [
        (("gen", str(bad)), "bad.card:4:"),  # an unknown name: the checker's diagnostic
        (("gen", str(ROOT / "toycards/library/cards/prelude.card")), "entry point"),
        (("gen", str(tmp_path / "missing.card")), "no such file"),
        (("gen", str(ROOT / "README.md")), ""),
    ]:
        result = CliRunner().invoke(main, list(args))
        assert result.exit_code == 1, (args, result.output)
        assert fragment in result.output
        assert "Traceback" not in result.output
    assert CliRunner().invoke(main, ["gen", str(bad), "--target", "jax"]).exit_code == 2
    # the reference target is the interpreter itself: there is no module to generate
    assert CliRunner().invoke(main, ["gen", str(bad), "--target", "reference"]).exit_code == 2


@pytest.mark.parametrize("target", ["numpy", "reference"])
def test_eval_equals_transformers_log_softmax(hf, tok, target):
    import torch

    text = "Hello world, the cat sat on the mat."
    out = cli("eval", str(EXAMPLE), "--prompt", text, "--json", "--top-k", "3", "--target", target)
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    ids = tok.encode(text)
    with torch.no_grad():
        logits = hf(torch.tensor([ids])).logits[0].double()
    expected = torch.log_softmax(logits, -1)[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].numpy()
    got = np.array([t["logprob"] for t in result["tokens"]])
    assert len(got) == len(ids) - 1
    worst = np.abs(got - expected).max()
    assert worst < 1e-4, f"max |Δ log-prob| {worst:.3g} at token {int(np.abs(got - expected).argmax()) + 1}"
    assert result["perplexity"] == pytest.approx(float(np.exp(-expected.mean())), rel=1e-4)
    top_ids = torch.topk(logits[0], 3).indices.tolist()
    assert [t[0] for t in result["tokens"][0]["top"]] == top_ids


@pytest.mark.parametrize(("target", "n"), [("numpy", 12), ("reference", 5)])  # the interpreter is slow
def test_run_greedy_equals_transformers(hf, tok, target, n):

    prompt = "The quick brown fox"
    out = cli("run", str(EXAMPLE), "--prompt", prompt, "-n", str(n), "--target", target)
    assert out.exit_code == 0, out.output
    assert out.output == _greedy_text(hf, tok, prompt, n)


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_run_with_a_half_cache_equals_transformers(hf, tok, target):
    """`--kv-cache f16` (keys and values kept as float16, llama.cpp's default): the greedy text is
    still transformers' greedy continuation on the example."""

    if target == "torch":
        pytest.importorskip("torch")
    prompt, n = "Once upon a time", 12
    out = cli("run", str(EXAMPLE), "--prompt", prompt, "-n", str(n), "--target", target, "--kv-cache", "f16")
    assert out.exit_code == 0, out.output
    assert out.output == _greedy_text(hf, tok, prompt, n)


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_half_cache_decoding_against_full_passes(hf, tok, target):
    """Cached decoding with a float16 cache, token by token: each step's logits within float16's
    precision of transformers' full pass over the same tokens (float32), and not equal to the float32
    cache's (the cache did keep halves)."""
    import torch

    import toycards

    model = toycards.load(str(EXAMPLE), target=target)
    ids = tok.encode("The quick brown fox jumps over the lazy dog")
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0].numpy()
    got = {}
    for kv_type in ("f32", "f16"):
        cache = model.new_cache(kv_type)
        rows = [model._forward_numpy(np.array([ids[:3]]), cache)[0]]
        rows += [model._forward_numpy(np.array([[i]]), cache)[0] for i in ids[3:]]
        got[kv_type] = np.concatenate(rows)
    span = want.max() - want.min()
    assert np.abs(got["f32"] - want).max() < 1e-4 * span
    assert 1e-6 * span < np.abs(got["f16"] - got["f32"]).max() < 5e-3 * span


def test_half_cache_usage_errors():
    bad = CliRunner().invoke(main, ["run", str(EXAMPLE), "--prompt", "x", "--kv-cache", "f8"])
    assert bad.exit_code == 2 and "f8" in bad.output
    ref = CliRunner().invoke(main, ["run", str(EXAMPLE), "-p", "x", "--kv-cache", "f16", "--target", "reference"])
    assert ref.exit_code == 1 and "reference target keeps no KV cache" in ref.output
    assert "Traceback" not in ref.output


def _greedy_text(hf, tok, prompt: str, n: int) -> str:
    """What `run` prints for transformers' greedy continuation of `prompt` (n tokens at most)."""
    import torch

    ids = tok.encode(prompt)
    with torch.no_grad():
        for _ in range(n):
            nxt = int(hf(torch.tensor([ids])).logits[0, -1].argmax())
            if tok.is_eog(nxt):
                break
            ids.append(nxt)
    return prompt + "".join(_stream(tok, ids[len(tok.encode(prompt)) :])) + "\n"


def _stream(tok, ids):
    d = tok.decoder(at_start=False)
    pieces = [d.push(i) for i in ids]
    return [*pieces, d.flush()]


def test_run_and_eval_usage_errors():
    assert CliRunner().invoke(main, ["eval", str(EXAMPLE)]).exit_code == 2  # neither --text nor --prompt
    assert CliRunner().invoke(main, ["run", str(EXAMPLE), "--prompt", "x", "--top-p", "0"]).exit_code == 2
    result = CliRunner().invoke(main, ["eval", str(EXAMPLE), "--text", "/nonexistent/file.txt"])
    assert result.exit_code == 1 and "cannot read" in result.output
