"""An output never replaces an existing file unless asked: `toycards train --out` and `toycards.save`.

What each test shows:
- `train` to an --out that exists is refused with one line (exit 1) before any training, and the
  file keeps its bytes; `--force` replaces it with the new run's model;
- a file that appears at --out while training is not written over either: the run writes its
  checkpoint instead and says so, and `--resume --force` finishes it to the very bytes of a run
  never stopped;
- `toycards.save` to an existing path is refused (one line naming it), `force=True` replaces it,
  and a folder is refused even with `force=True`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from test_train import counting_text, one_thread  # noqa: F401 - one_thread: autouse, module-wide

import toycards
from toycards.cli import main
from toycards.errors import ToycardsError

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "examples" / "tiny-llama.gguf"
TINY = ["--set", "L=1", "--set", "H=2", "--set", "H_kv=1", "--set", "d_e=16", "--set", "d_ff=16",
        "--set", "ell_max=16", "--set", "epsilon=1e-5"]  # fmt: skip
RUN = ["llama", "--tokenizer", TOKENIZER, *TINY, "--batch", "2", "--seq", "8"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text") / "count.txt"
    path.write_text(counting_text(), encoding="utf-8")
    return path


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def test_train_refuses_an_existing_out_and_force_replaces_it(data, tmp_path):
    out = tmp_path / "ck.gguf"
    first = cli("train", *RUN, "--data", data, "--out", out, "--steps", 4)
    assert first.exit_code == 0, first.output
    kept = out.read_bytes()

    again = cli("train", *RUN, "--data", data, "--out", out, "--steps", 1)
    assert again.exit_code == 1, again.output
    assert error_lines(again) == [
        f"error: --out {out}: already exists; refusing to overwrite it (--force replaces it)"
    ]
    assert again.stdout == "" and "step" not in again.stderr, "refused before any training"
    assert out.read_bytes() == kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.gguf"], "no checkpoint, no temporary file"

    forced = cli("train", *RUN, "--data", data, "--out", out, "--steps", 1, "--force")
    assert forced.exit_code == 0, forced.output
    assert out.read_bytes() != kept
    one_step = tmp_path / "one-step.gguf"
    assert cli("train", *RUN, "--data", data, "--out", one_step, "--steps", 1).exit_code == 0
    assert out.read_bytes() == one_step.read_bytes(), "--force wrote the new run's model"


def test_a_file_that_appears_while_training_is_kept_and_the_run_is_not_lost(data, tmp_path, monkeypatch):
    from toycards.models import train as training

    out, ckpt = tmp_path / "late.gguf", tmp_path / "late.ckpt"
    real_run = training.run

    def run_then_someone_writes_out(*args, **kwargs):
        done = real_run(*args, **kwargs)
        out.write_bytes(b"written by someone else meanwhile")
        return done

    monkeypatch.setattr(training, "run", run_then_someone_writes_out)
    result = cli("train", *RUN, "--data", data, "--out", out, "--steps", 3)
    monkeypatch.undo()
    assert result.exit_code == 1, result.output
    assert error_lines(result)[-1:] == [  # after the progress bar
        f"error: --out {out}: appeared while training; refusing to overwrite it. Wrote {ckpt}: continue "
        "with --resume (and --force to replace it)"
    ]
    assert out.read_bytes() == b"written by someone else meanwhile" and ckpt.is_file()

    assert cli("train", *RUN, "--data", data, "--out", out, "--steps", 3, "--resume").exit_code == 1
    resumed = cli("train", *RUN, "--data", data, "--out", out, "--steps", 3, "--resume", "--force")
    assert resumed.exit_code == 0, resumed.output
    assert not ckpt.exists(), "the checkpoint this run resumed from is removed once OUT is written"
    whole = tmp_path / "whole.gguf"
    assert cli("train", *RUN, "--data", data, "--out", whole, "--steps", 3).exit_code == 0
    assert out.read_bytes() == whole.read_bytes()


@pytest.fixture(scope="module")
def model():
    return toycards.load(TOKENIZER, dequantize=True)


def test_save_refuses_an_existing_path_and_force_replaces_it(model, tmp_path):
    path = tmp_path / "copy.gguf"
    path.write_bytes(b"my notes")
    with pytest.raises(ToycardsError) as e:
        toycards.save(model, path)
    assert str(e.value) == f"{path}: already exists; refusing to overwrite it (force=True replaces it)"
    assert path.read_bytes() == b"my notes"

    assert toycards.save(model, path, force=True) == path
    ids = [1, 2, 3, 4]
    np.testing.assert_array_equal(toycards.load(path).logits(ids), model.logits(ids))


def test_save_refuses_a_folder_even_with_force(model, tmp_path):
    with pytest.raises(ToycardsError, match="is a folder"):
        toycards.save(model, tmp_path, force=True)
    assert list(tmp_path.iterdir()) == []


def test_save_never_writes_over_the_models_own_file_even_with_force(tmp_path):
    own = tmp_path / "own.gguf"
    own.write_bytes(TOKENIZER.read_bytes())
    m = toycards.load(own, dequantize=True)
    with pytest.raises(ToycardsError, match="is an input of this model"):
        toycards.save(m, own, force=True)
    assert own.read_bytes() == TOKENIZER.read_bytes()
