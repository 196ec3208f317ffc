"""`eval` in sliding windows: which tokens each window scores, from what, and in how much memory.

The oracle scores by hand: window k holds tokens kS … kS + C − 1 (C the window, S the stride);
token t is scored by the first window that ends after it, and only if it is not that window's
first token, from numpy's log-softmax of `model.logits(window)`. With a window as long as the
text the scores are the full pass's. Only one window's logits are ever held: the model's
`logits` is wrapped to record the largest array it returns. The command line's outputs (the
summary, `--per-token`'s TSV table, `--json`) are checked against the library's numbers.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from test_context import EXAMPLE, long_text, write_learned_model

import toycards
from toycards.cli import main
from toycards.models import evaluate as evaluate_module
from toycards.models.evaluate import evaluate

WINDOW = 16  # the learned-position model's ℓ_max


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    return toycards.load(write_learned_model(tmp_path_factory.mktemp("windows") / "tinylm.gguf", WINDOW))


@pytest.fixture(scope="module")
def ids(learned) -> list[int]:
    """Ten windows' worth of tokens and then some."""
    return learned.tokenizer.encode(long_text(learned, 10 * WINDOW))


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    m = z.max(-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


def by_hand(model, ids: list[int], window: int, stride: int) -> dict[int, float]:
    """{t: log P(x_t | the tokens before it in the window that scores it)}."""
    out = {}
    for t in range(1, len(ids)):
        k = max(0, (t - window) // stride + 1)  # the first window that ends after t
        begin = k * stride
        if begin == t:
            continue  # the window's first token: nothing before it
        lp = log_softmax(model.logits(ids[begin : begin + window]))  # (≤ window, N_V)
        out[t] = float(lp[t - begin - 1, ids[t]])
    return out


def assert_scores_equal(result, expected: dict[int, float]) -> None:
    got = {s.position: s.logprob for s in result.tokens}
    assert sorted(got) == sorted(expected)
    diff = np.array([got[t] - expected[t] for t in sorted(got)])
    worst = int(np.abs(diff).argmax())
    assert np.abs(diff).max() < 1e-5, f"|Δ log-prob| {abs(diff[worst]):.3g} at token {sorted(got)[worst]}"
    mean = float(np.mean(list(expected.values())))
    assert result.n_tokens == len(expected) and result.mean_logprob == pytest.approx(mean, abs=1e-6)
    assert result.perplexity == pytest.approx(math.exp(-mean), rel=1e-6)


@pytest.mark.parametrize("stride", [WINDOW, 5, WINDOW // 2, 1])
def test_windows_score_what_the_rule_says(learned, ids, stride):
    result = evaluate(learned, ids=ids, n_ctx=WINDOW, stride=stride)
    expected = by_hand(learned, ids, WINDOW, stride)
    assert_scores_equal(result, expected)
    if stride == WINDOW:  # side by side: the first token of each window after the first goes unscored
        assert sorted(expected) == [t for t in range(1, len(ids)) if t % WINDOW]
    else:
        assert sorted(expected) == list(range(1, len(ids)))


def test_a_window_as_long_as_the_text_is_the_full_pass():
    model = toycards.load(EXAMPLE)
    ids = model.tokenizer.encode("The cat sat on the mat, and then the dog sat on the cat. The end.")
    full = log_softmax(model.logits(ids))[np.arange(len(ids) - 1), ids[1:]]
    expected = {t: float(full[t - 1]) for t in range(1, len(ids))}
    for n_ctx in (len(ids), 256):
        result = evaluate(model, ids=ids, n_ctx=n_ctx)
        assert_scores_equal(result, expected)
        assert result.windows == 1


def test_only_one_window_of_logits_is_ever_held(learned, ids, monkeypatch):
    calls, largest = [], []
    window_logits = learned.window_logits

    def recorded(window_ids, first):
        calls.append(len(window_ids))
        for row, block in window_logits(window_ids, first):
            largest.append(block.size)
            yield row, block

    monkeypatch.setattr(learned, "window_logits", recorded)
    result = evaluate(learned, ids=ids, n_ctx=WINDOW, stride=WINDOW // 2, per_token=False)
    assert len(ids) >= 10 * WINDOW and len(calls) == result.windows >= 19
    assert max(calls) < WINDOW  # the window's last token predicts nothing in it
    assert max(largest) <= WINDOW * learned.hp["N_V"]
    assert result.tokens is None and result.n_tokens == len(ids) - 1


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def text(learned) -> str:
    return long_text(learned, 4 * WINDOW) + "\n\tthe\\end"


def test_the_default_output_is_one_summary_line(learned, text):
    path = learned.path
    result = cli("eval", path, "-p", text)
    assert result.exit_code == 0 and result.stderr == "", result.output
    expected = evaluate(learned, text=text, n_ctx=WINDOW, stride=WINDOW // 2)
    (line,) = result.stdout.splitlines()
    assert line.startswith(
        f"tokens {expected.n_tokens}  mean NLL {expected.mean_nll:.4f}  perplexity {expected.perplexity:.3f}"
        f"  (ctx {WINDOW}, stride {WINDOW // 2}, {expected.windows} windows; "
    ), line
    assert line.endswith(" tokens/s)")


def test_json_is_the_summary_and_per_token_adds_the_records(learned, text):
    path = learned.path
    summary = json.loads(cli("eval", path, "-p", text, "--json", "--ctx", 12, "--stride", 12).stdout)
    expected = evaluate(learned, text=text, n_ctx=12, stride=12)
    assert "tokens" not in summary
    assert summary["n_tokens"] == expected.n_tokens and summary["windows"] == expected.windows
    assert summary["perplexity"] == pytest.approx(expected.perplexity, rel=1e-9)
    assert summary["mean_nll"] == pytest.approx(-expected.mean_logprob, rel=1e-9)
    assert (summary["n_ctx"], summary["stride"]) == (12, 12) and summary["tokens_per_second"] > 0
    full = json.loads(
        cli("eval", path, "-p", text, "--json", "--ctx", 12, "--stride", 12, "--per-token").stdout
    )
    assert [t["position"] for t in full["tokens"]] == [s.position for s in expected.tokens]
    assert [t["logprob"] for t in full["tokens"]] == pytest.approx([s.logprob for s in expected.tokens])


def test_per_token_is_a_tsv_table_with_the_summary_on_stderr(learned, text):
    result = cli("eval", learned.path, "-p", text, "--per-token", "--top-k", 2)
    assert result.exit_code == 0, result.output
    expected = evaluate(learned, text=text, top_k=2)
    head, *rows = result.stdout.splitlines()
    assert head.split("\t") == [
        "position", "id", "token", "logprob",
        "top1_id", "top1_token", "top1_logprob", "top2_id", "top2_token", "top2_logprob",
    ]  # fmt: skip
    assert len(rows) == expected.n_tokens
    escaped = {"\n": "\\n", "\t": "\\t", "\\": "\\\\"}
    for row, s in zip(rows, expected.tokens, strict=True):
        fields = row.split("\t")
        assert len(fields) == 10, row
        assert (int(fields[0]), int(fields[1]), float(fields[3])) == (
            s.position,
            s.id,
            pytest.approx(s.logprob),
        )
        assert fields[2] == "".join(escaped.get(c, c) for c in s.piece)
        assert [int(fields[4]), int(fields[7])] == [i for i, _, _ in s.top]
    pieces = {fields.split("\t")[2] for fields in rows}
    assert {"\\n", "\\t"} & pieces, "the text's line end and tab are tokens of their own, escaped"
    (summary,) = result.stderr.splitlines()
    assert summary.startswith(f"tokens {expected.n_tokens}  mean NLL {expected.mean_nll:.4f}")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--ctx", 8, "--stride", 9), "--stride 9: longer than the window (--ctx 8)"),
        (("--ctx", 1), "--ctx 1: a window of one token scores nothing"),
        (("--stride", WINDOW + 1), "--stride 17: longer than the window (--ctx 16)"),
    ],
)
def test_windows_that_cannot_score_are_one_line(learned, args, fragment):
    result = cli("eval", learned.path, "-p", "one two three", *args)
    assert result.exit_code == 1 and result.stdout == "", result.output
    (line,) = result.stderr.splitlines()
    assert fragment in line and "Traceback" not in result.output


def test_progress_on_a_terminal_is_one_line_cleared_at_the_end(learned, text, monkeypatch):
    monkeypatch.setattr("toycards.cli.models.to_terminal", lambda stream: True)
    result = cli("eval", learned.path, "-p", text, "--ctx", 8, "--stride", 8)
    assert result.exit_code == 0, result.output
    n_scored = evaluate(learned, text=text, n_ctx=8, stride=8).n_tokens
    updates = result.stderr.split("\r")[1:]
    assert updates[-1] == "\x1b[K" and "\n" not in result.stderr  # cleared, never a new line
    assert updates[0].startswith(f"0/{n_scored} tokens") and updates[-2].startswith(
        f"{n_scored}/{n_scored} tokens"
    )
    assert all(u.endswith(" tokens/s\x1b[K") for u in updates[:-1])


def test_ctrl_c_exits_130(learned, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(evaluate_module, "evaluate", interrupted)
    assert cli("eval", learned.path, "-p", "one two three").exit_code == 130
