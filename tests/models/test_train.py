"""`toycards train` and `toycards.save`: a card → a trained GGUF file that runs, describes and reloads.

The text is made here (no downloads): short runs of counting words ("three four five six."),
which a 2-layer model with d_e = 32 learns within tens of steps; the vocabulary is the GPT-2 cut
shipped in examples/tiny-llama.gguf (1,024 tokens). Stated margins: a random init starts at
ln(1024) ≈ 6.93 nats; after 60 steps the loss is below 1.5 (and below a quarter of the start).

What each test shows:
- the library Llama card trains from the command line and the file it writes describes (the
  embedded card, its values, no problems), checks, evaluates (perplexity near the trained loss)
  and runs; `toycards.load` uses it;
- the reloaded file's logits equal the in-memory trained model's exactly (float32), and the
  file follows llama.cpp's names, keys and layouts;
- a run stopped at step k (by the API's stop event, and by a real SIGINT to the command) and
  resumed ends with the same weights, bit for bit, as a run never stopped;
- `--accumulate 2` leaves in `.grad` exactly the sum of halved micro-batch gradients that DDP's
  reducer computes from two processes, and trains like `--accumulate 1` up to float32 rounding;
- `--dtype bfloat16` trains on the CPU, its loss curve within bfloat16's rounding of float32's;
- a finished run leaves a checkpoint of another run, which it never wrote, where it was;
- every bad input is one line on stderr, exit 1, no traceback, and no file written, changed or
  removed (`--fsdp` without torchrun among them; a user's file as the checkpoint; a forged,
  foreign or random-bytes checkpoint given to `--resume`).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import gguf
import numpy as np
import pytest
from click.testing import CliRunner

import toycards
from toycards.cli import main

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "examples" / "tiny-llama.gguf"
WORDS = "one two three four five six seven eight nine ten".split()
LLAMA = ["--set", "L=2", "--set", "H=4", "--set", "H_kv=2", "--set", "d_e=32", "--set", "d_ff=48",
         "--set", "ell_max=64", "--set", "epsilon=1e-5"]  # fmt: skip
FAST = ["--batch", "8", "--seq", "32", "--lr", "1e-2"]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models train fastest on one thread; two workers × two threads on two cores crawl."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def counting_text(n_lines: int = 300, seed: int = 0) -> str:
    """Lines of 3–7 consecutive counting words from a random start: 'seven eight nine ten one.'"""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n_lines):
        k, n = int(rng.integers(10)), int(rng.integers(3, 8))
        lines.append(" ".join(WORDS[(k + j) % 10] for j in range(n)) + ".")
    return "\n".join(lines) + "\n"


def cli(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


def json_lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text") / "count.txt"
    path.write_text(counting_text(), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data):
    """The library Llama card trained from the command line: (OUT.gguf, the step lines)."""
    out = tmp_path_factory.mktemp("llama") / "llama.gguf"
    result = cli("train", "llama", "--tokenizer", TOKENIZER, "--data", data, "--out", out, *LLAMA, *FAST,
                 "--steps", 60, "--eval-every", 30, "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    return out, json_lines(result.stdout)


def test_a_library_card_learns_the_text(trained):
    out, lines = trained
    steps = [e for e in lines if "step" in e]
    assert [e["step"] for e in steps] == list(range(1, 61))
    first, last = steps[0]["loss"], steps[-1]["loss"]
    assert first == pytest.approx(math.log(1024), abs=0.1), "a random init predicts ~uniformly"
    assert last < 1.5 and last < first / 4, f"loss {first:.3f} → {last:.3f}"
    assert steps[-1]["eval_loss"] < 1.5, "the held-out tenth is learnt too"
    assert lines[-1]["done"] and lines[-1]["out"] == str(out)
    assert not out.with_suffix(".ckpt").exists(), "a finished run leaves no checkpoint"


def test_the_saved_file_describes_checks_evaluates_and_runs(trained, data):
    out, lines = trained
    described = cli("describe", out, "--format", "card")
    assert described.exit_code == 0, described.output
    assert "the card embedded in the file (toycards.card)" in described.stdout
    for value in ("L ∈ ℕ = 2 ", "H_kv ∈ ℕ = 2 ", "d_e ∈ ℕ = 32 ", "N_V ∈ ℕ = 1024"):
        assert value in described.stdout, value
    assert toycards.describe(out).problems == ()
    embedded = toycards.parse(gguf.GGUFReader(out).fields["toycards.card"].contents())
    assert toycards.check(embedded) == []
    text = data.read_text(encoding="utf-8")[:400]
    scored = cli("eval", out, "--prompt", text, "--json")
    assert scored.exit_code == 0, scored.output
    assert json.loads(scored.stdout)["perplexity"] < math.exp(2.0), "the trained model scores its text well"
    ran = cli("run", out, "--prompt", "one two three", "-n", 6)
    assert ran.exit_code == 0 and ran.stdout.startswith("one two three"), ran.output
    model = toycards.load(out, target="numpy")
    assert model.hp["L"] == 2 and model.tokenizer.vocab_size == 1024


def test_the_file_follows_llama_cpp_conventions(trained):
    out, _ = trained
    r = gguf.GGUFReader(out)
    fields = {name: f.contents() for name, f in r.fields.items()}
    assert fields["general.architecture"] == "llama" and fields["general.file_type"] == 0
    assert fields["llama.block_count"] == 2 and fields["llama.attention.head_count_kv"] == 2
    assert fields["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    assert r.fields["llama.embedding_length"].types == [gguf.GGUFValueType.UINT32]
    assert fields["tokenizer.ggml.model"] == "gpt2" and len(fields["tokenizer.ggml.tokens"]) == 1024
    shapes = {t.name: tuple(int(n) for n in t.shape) for t in r.tensors}  # ggml order: ne[0] first
    assert shapes["token_embd.weight"] == (32, 1024) and shapes["blk.1.ffn_gate.weight"] == (32, 48)
    assert shapes["blk.0.attn_k.weight"] == (32, 16), "H_kv · d_h rows"
    assert "rope_freqs.weight" not in shapes, "a constant fallback (or 1) is not written"
    assert {t.tensor_type for t in r.tensors} == {gguf.GGMLQuantizationType.F32}


# ── the API: exact round trip, interruption and resumption ──────────────────────────────────
def _trainer(data: Path, steps: int = 12, **options):
    from toycards.lang.printer import render_card
    from toycards.models import train as training
    from toycards.models.start import parse_sets, start

    config = training.TrainConfig(steps=steps, **{"batch": 4, "seq": 16, "lr": 1e-2, "seed": 3, **options})
    sets = parse_sets([LLAMA[i + 1] for i in range(0, len(LLAMA), 2)])
    begun = start("llama", sets, str(TOKENIZER), config.seed)
    tokens = training.token_data(data.read_text(encoding="utf-8"), begun.tokenizer, config, "text")
    fingerprint = {"card": render_card(begun.card), "tokenizer": training.vocabulary_digest(begun.tokenizer)}
    return training.Trainer(begun.model, config, tokens, fingerprint), begun


def test_the_reloaded_model_has_the_trained_models_logits_exactly(data, tmp_path):
    from toycards.models import train as training

    trainer, begun = _trainer(data)
    assert training.run(trainer, lambda e: None, str(tmp_path / "x.ckpt"))
    out = toycards.save(trainer.model, tmp_path / "m.gguf", tokenizer=begun.tokenizer_path, arch=begun.arch)
    ids = begun.tokenizer.encode(counting_text(4, seed=9), add_bos=False)
    want = trainer.model.logits(ids)
    got = toycards.load(out, target="torch").logits(ids)
    assert np.array_equal(got, want), f"max |Δ| = {np.abs(got - want).max():.3g}"
    np.testing.assert_allclose(toycards.load(out, target="numpy").logits(ids), want, atol=1e-4)


def test_an_interrupted_run_resumes_to_the_same_weights(data, tmp_path):
    from toycards.models import train as training

    whole, _ = _trainer(data)
    assert training.run(whole, lambda e: None, str(tmp_path / "whole.ckpt"))
    stop, ckpt = threading.Event(), str(tmp_path / "part.ckpt")
    part, _ = _trainer(data)
    done = training.run(part, lambda e: e["step"] == 5 and stop.set(), ckpt, stop)
    assert not done and part.step == 5 and os.path.isfile(ckpt)
    resumed, _ = _trainer(data)
    resumed.resume(ckpt)
    assert resumed.step == 5
    assert training.run(resumed, lambda e: None, ckpt)
    assert resumed.losses == whole.losses
    for (name, a), b in zip(
        whole.model.state_dict().items(), resumed.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name


def test_an_accumulated_gradient_is_the_sum_of_halves_that_ddp_computes(data):
    """`accumulate = 2` leaves in `.grad` exactly g₁·½ + g₂·½, g_m being micro-batch m's gradient
    from its own unscaled backward pass: what DDP's reducer makes of two processes' gradients
    (each multiplied by 1 / world size while copied into its bucket, then all-reduced by a sum;
    torch/csrc/distributed/c10d/reducer.cpp, mark_variable_ready_dense). Halving commutes with
    rounding, so (g₁ + g₂)·½ is the same bits; the plain sum g₁ + g₂ is not."""
    from toycards.models.train import window_starts, windows

    trainer, _ = _trainer(data, accumulate=2)
    starts = window_starts(trainer.config, 1, len(trainer.data.train))  # [4]
    halves = []
    for part in (starts[:2], starts[2:]):
        trainer.model.zero_grad(set_to_none=True)
        trainer._loss(trainer.model, *windows(trainer.data.train, part, 16)).backward()
        halves.append({n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None})
    trainer.accumulate_gradient(1)
    got = {n: p.grad for n, p in trainer.model.named_parameters() if p.grad is not None}
    assert got.keys() == halves[0].keys() == halves[1].keys() and len(got) > 10
    for name, g in got.items():
        g1, g2 = halves[0][name], halves[1][name]
        assert torch.equal(g, g1 * 0.5 + g2 * 0.5), (
            f"{name}: max |Δ| = {(g - g1 * 0.5 - g2 * 0.5).abs().max()}"
        )
        assert torch.equal(g, (g1 + g2) * 0.5), name
    assert not all(torch.equal(g, halves[0][n] + halves[1][n]) for n, g in got.items())


def test_accumulating_two_micro_batches_trains_like_one_batch(data, tmp_path):
    """Same seed and --batch, --accumulate 2 against 1: the same loss curve and weights up to
    float32 rounding (one backward pass over 4 windows sums in another order than two over 2)."""
    from toycards.models import train as training

    runs = []
    for accumulate in (1, 2):
        trainer, _ = _trainer(data, accumulate=accumulate)
        assert trainer.micro == 4 // accumulate
        assert training.run(trainer, lambda e: None, str(tmp_path / "unused.ckpt"))
        runs.append(trainer)
    one, two = runs
    assert one.losses[-1] < one.losses[0] - 2
    np.testing.assert_allclose(two.losses, one.losses, rtol=0, atol=1e-5)
    for (name, a), b in zip(one.model.state_dict().items(), two.model.state_dict().values(), strict=True):
        assert float((a - b).abs().max()) <= 1e-4, f"{name}: max |Δ| = {float((a - b).abs().max()):.3g}"


def test_bfloat16_autocast_trains_on_cpu(data, tmp_path):
    """`--dtype bfloat16` on the CPU: the loss falls from ln 1024 as it does in float32, within
    bfloat16's rounding (a few hundredths of a nat over 20 steps) but not bit for bit (autocast
    took effect); the weights stay float32."""
    from toycards.models import train as training

    curves = {}
    for dtype in ("float32", "bfloat16"):
        trainer, _ = _trainer(data, steps=20, dtype=dtype)
        assert training.run(trainer, lambda e: None, str(tmp_path / "unused.ckpt"))
        curves[dtype] = np.array(trainer.losses)
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    low = curves["bfloat16"]
    assert low[0] == pytest.approx(math.log(1024), abs=0.1) and low[-1] < low[0] - 2, low
    gap = np.abs(low - curves["float32"])
    assert 0 < gap.max() < 0.05, f"worst |Δ| {gap.max():.3g} at step {gap.argmax() + 1}"


def test_a_checkpoint_from_other_options_is_refused(data, tmp_path):
    from toycards.errors import ToycardsError

    trainer, _ = _trainer(data)
    trainer.save_checkpoint(str(tmp_path / "a.ckpt"))
    other, _ = _trainer(data, steps=13)
    with pytest.raises(ToycardsError, match="made with steps = 12, not 13"):
        other.resume(str(tmp_path / "a.ckpt"))
    torch.save({"format": "toycards-checkpoint 1"}, tmp_path / "old.ckpt")  # optimizer state keyed by index
    with pytest.raises(
        ToycardsError, match="a toycards-checkpoint 1 file; this toycards resumes toycards-checkpoint 2"
    ):
        trainer.resume(str(tmp_path / "old.ckpt"))


def test_ctrl_c_writes_a_checkpoint_and_resume_matches_an_uninterrupted_run(data, tmp_path):
    """A real SIGINT to `toycards train`: exit 130, a checkpoint, then --resume ends where a run
    never interrupted ends, byte for byte."""
    common = ["--tokenizer", TOKENIZER, "--data", data, *LLAMA, "--batch", 4, "--seq", 16, "--steps", 150]
    out = tmp_path / "stopped.gguf"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "toycards", "train", "llama", "--out", out, "--json", *common]
    proc = subprocess.Popen(
        [str(a) for a in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    for line in proc.stdout:
        if json.loads(line).get("step", 0) >= 3:
            proc.send_signal(signal.SIGINT)
            break
    rest, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    k = max(json.loads(x)["step"] for x in [line, *rest.splitlines()] if x.startswith("{"))
    assert 3 <= k < 150 and f"interrupted after step {k}" in err and "Traceback" not in err
    assert out.with_suffix(".ckpt").is_file() and not out.exists()
    resumed = cli("train", "llama", "--out", out, "--resume", *common)
    assert resumed.exit_code == 0, resumed.output
    whole = tmp_path / "whole.gguf"
    assert cli("train", "llama", "--out", whole, *common).exit_code == 0
    assert out.read_bytes() == whole.read_bytes()
    assert not out.with_suffix(".ckpt").exists()


def test_a_finished_run_leaves_another_runs_checkpoint_alone(data, tmp_path):
    """A toycards checkpoint of other options at OUT.ckpt: the run never writes it (no
    --save-every), so it is still there, byte for byte, once OUT is written."""
    trainer, _ = _trainer(data)  # steps = 12, seq = 16: not this run's options
    ckpt = tmp_path / "out.ckpt"
    trainer.save_checkpoint(str(ckpt))
    kept = ckpt.read_bytes()
    args = ["--tokenizer", TOKENIZER, *LLAMA, "--data", data, "--batch", 2, "--seq", 8, "--steps", 2]
    result = cli("train", "llama", "--out", tmp_path / "out.gguf", *args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out.gguf").is_file() and ckpt.read_bytes() == kept


# ── bad input: one line, exit 1, nothing written ────────────────────────────────────────────
BAD_CARD = """toycards 1
Algorithm: P ← Broken(x | θ)
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{N_V×ℓ}
Hyperparameters:
  d_e ∈ ℕ = 8
  N_V ∈ ℕ
Parameters:
  W_e ∈ ℝ^{d_e×N_V}  from "token_embd.weight"^⊺
  W_u ∈ ℝ^{d_e×d_e}  from "output.weight"
1  ℓ ← length(x)
2  for t ∈ [ℓ]: e_t ← W_e[:, x[t]]
3  X ← [e_1, …, e_ℓ]
4  return P = softmax(W_u · X)  ∷ ℝ^{N_V×ℓ}
"""


def _case(name: str, tmp: Path, data: Path) -> tuple[list, str]:
    """(arguments after `train`, a phrase the error line must hold)."""
    out = ["--out", tmp / "out.gguf"]
    card = ["llama", "--tokenizer", TOKENIZER, *LLAMA, *out]
    if name == "missing data":
        return [*card, "--data", tmp / "nope.txt"], "no such file"
    if name == "empty text":
        (tmp / "empty.txt").write_text("  \n", encoding="utf-8")
        return [*card, "--data", tmp / "empty.txt"], "the text is empty"
    if name == "text too short for --seq":
        (tmp / "short.txt").write_text("one two three four.", encoding="utf-8")
        return [*card, "--data", tmp / "short.txt", "--seq", 32], "--seq 32 needs at least 33"
    if name == "unknown hyperparameter":
        return [*card, "--data", data, "--set", "d_model=32"], "no hyperparameter d_model"
    if name == "missing hyperparameters":
        return ["llama", "--tokenizer", TOKENIZER, "--data", data, *out], "no value for L, H, H_kv, d_e"
    if name == "card does not check":
        (tmp / "broken.card").write_text(BAD_CARD, encoding="utf-8")
        return ["broken.card", "--tokenizer", TOKENIZER, "--data", data, *out], "does not check"
    if name == "vocabulary does not fit":
        return [*card, "--data", data, "--set", "N_V=512"], "1024 tokens but the card's N_V = 512"
    if name == "real vocabulary too big":
        vocab = ROOT.parent / "shared" / "vocab" / "ggml-vocab-gpt-2.gguf"
        if not vocab.is_file():
            pytest.skip(f"{vocab} not present")
        args = ["llama", "--tokenizer", vocab, *LLAMA, *out, "--data", data, "--set", "N_V=1024"]
        return args, "50257 tokens but the card's N_V = 1024"
    if name == "--seq beyond the context":
        return [*card, "--data", data, "--seq", 65], "longer than the card's context"
    if name == "--batch does not divide into micro-batches":
        args = [*card, "--data", data, "--batch", 6, "--accumulate", 4]
        return args, "--batch 6 does not divide into 4 equal micro-batches (--accumulate 4)"
    if name == "resume without a checkpoint":
        return [*card, "--data", data, "--resume"], "--resume: no checkpoint"
    if name == "out is the source":
        return [TOKENIZER, "--data", data, "--out", TOKENIZER], "refusing to overwrite"
    if name == "--checkpoint is a user's file":
        (tmp / "notes.txt").write_text("my notes\n", encoding="utf-8")
        args = [*card, "--data", data, "--checkpoint", tmp / "notes.txt", "--save-every", 1]
        return args, "--checkpoint " + str(tmp / "notes.txt") + ": not a toycards checkpoint"
    if name == "OUT.ckpt is a user's file":
        (tmp / "out.ckpt").write_text("not a checkpoint\n", encoding="utf-8")
        return [*card, "--data", data], "it is a text file; refusing to overwrite it"
    if name == "--checkpoint is --out":
        return [*card, "--data", data, "--checkpoint", tmp / "out.gguf"], "is --out"
    if name == "resume a torch file of another kind":
        torch.save({"weights": torch.zeros(3)}, tmp / "out.ckpt")
        return [*card, "--data", data, "--resume"], "it is a torch file holding a dict with keys 'weights'"
    if name == "resume a forged checkpoint":
        forged = {"format": "toycards-checkpoint 2", "step": 1, "losses": [], "model": {}, "optimizer": None}
        torch.save(forged, tmp / "out.ckpt")
        phrase = "out.ckpt: a damaged toycards-checkpoint 2 file: no 'identity'"
        return [*card, "--data", data, "--resume"], phrase
    if name == "resume random bytes":
        (tmp / "out.ckpt").write_bytes(bytes(range(256)) * 8)
        return [*card, "--data", data, "--resume"], "it is binary data that torch.load cannot read"
    if name == "--fsdp without torchrun":
        return [*card, "--data", data, "--fsdp"], "--fsdp shards the model over the processes torchrun starts"
    raise AssertionError(name)


BAD = ["missing data", "empty text", "text too short for --seq", "unknown hyperparameter",
       "missing hyperparameters", "card does not check", "vocabulary does not fit",
       "real vocabulary too big", "--seq beyond the context", "--batch does not divide into micro-batches",
       "resume without a checkpoint", "out is the source", "--fsdp without torchrun",
       "--checkpoint is a user's file", "OUT.ckpt is a user's file", "--checkpoint is --out",
       "resume a torch file of another kind", "resume a forged checkpoint",
       "resume random bytes"]  # fmt: skip


@pytest.mark.parametrize("name", BAD)
def test_bad_input_is_one_line_and_writes_nothing(name, tmp_path, data, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WORLD_SIZE", raising=False)  # not under torchrun
    (tmp_path / "out.gguf").write_bytes(b"an older file, kept")
    before = {p.name for p in tmp_path.iterdir()}
    source_bytes = TOKENIZER.read_bytes() if name == "out is the source" else None
    args, phrase = _case(name, tmp_path, data)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    result = cli("train", *args, "--force")  # the case's own error stops it, not the OUT that exists
    assert result.exit_code == 1, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and phrase in lines[0], result.stderr
    assert "Traceback" not in result.output and result.stdout == ""
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert after == before, "no file written, changed or removed"
    assert (tmp_path / "out.gguf").read_bytes() == b"an older file, kept"
    if source_bytes is not None:
        assert TOKENIZER.read_bytes() == source_bytes
