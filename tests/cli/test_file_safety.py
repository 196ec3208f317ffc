"""Files toycards did not write are never deleted or overwritten, and a failed write is one line.

What each test shows:
- a writer killed with SIGKILL in the middle of `atomic_output` leaves its temporary file, and
  the next write of the same path removes it, while the temporary file of a live writer, one
  whose lock another process holds, another user's, another target's and every lookalike name
  stay;
- `fmt` refuses a read-only card and leaves it as it was; it rewrites a card with a second hard
  link in place (the same inode, both names show the new text), and refuses when the name it
  keeps the old text under is taken;
- on a full disk (a 64 KiB tmpfs) `write_atomic`, `rewrite_in_place` and a training checkpoint
  are one ToycardsError line naming the file, and leave no temporary file (the in-place rewrite:
  the old text back);
- an OSError without a message (numpy's short write of a GGUF tensor on a full disk, an errno
  alone) shows its text, not None;
- a checkpoint path holding a user's file is refused before training and never written over or
  removed; a finished run removes only the checkpoint it wrote, or one of this very run;
- `--resume` of a forged checkpoint (a torch file of another dict, one claiming the format
  without its fields, random bytes, an empty file, this run's identity over tensors of other
  names or shapes) says what the file is and what was expected.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from toycards.cli import main
from toycards.errors import ToycardsError
from toycards.fileio import atomic_output, remove_stale_temporaries, rewrite_in_place, write_atomic

ROOT = Path(__file__).resolve().parents[2]

# Writes a temporary file through atomic_output, prints its path, and waits inside the block.
WRITER = """
import sys, time
from toycards.fileio import atomic_output
with atomic_output(sys.argv[1]) as part:
    part.write_bytes(b"half of a model")
    print(part, flush=True)
    time.sleep(600)
"""


def start_writer(target: Path) -> tuple[subprocess.Popen, Path]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, text=True, env=env
    )
    line = proc.stdout.readline().strip()
    assert line, "the writer printed no temporary path"
    return proc, Path(line)


def dead_pid() -> int:
    """The id of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# ── temporary files of killed writers ───────────────────────────────────────────────────────
def test_a_killed_writers_temporary_file_goes_on_the_next_write_and_a_live_ones_stays(tmp_path):
    target = tmp_path / "model.gguf"
    killed, stale = start_writer(target)
    live = None
    try:
        assert stale.name.startswith(f".model.gguf.{killed.pid}.") and stale.name.endswith(".tmp")
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert stale.read_bytes() == b"half of a model", "kill -9 runs no cleanup"
        live, running = start_writer(target)
        write_atomic(target, "weights")
        assert target.read_text() == "weights"
        assert not stale.exists(), "the killed writer's file is removed"
        assert running.read_bytes() == b"half of a model", "the live writer's file stays"
    finally:
        if live is not None:
            live.kill()
            live.wait()
    assert remove_stale_temporaries(target) == [running], "once its writer is gone, it goes too"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf"]


def test_only_this_targets_temporaries_of_gone_writers_are_removed(tmp_path):
    gone = dead_pid()
    target = tmp_path / "m.gguf"
    target.write_bytes(b"old")
    stale = tmp_path / f".m.gguf.{gone}.0123abcd.tmp"
    kept = {
        f".m.gguf.{os.getpid()}.0123abcd.tmp": "a live process's (this one's)",
        f".m.gguf.{gone}.4567cdef.tmp": "locked by a live process",
        f".m.gguf.{gone}.89abcdef.tmp": "another user's",
        f".other.gguf.{gone}.0123abcd.tmp": "another target's",
        f".m.gguf.{gone}.0123abc.tmp": "7 hex digits",
        f".m.gguf.{gone}.0123ABCD.tmp": "upper-case hex",
        f".m.gguf.{gone}.0123abcd.tmp.keep": "another suffix",
        f"m.gguf.{gone}.0123abcd.tmp": "not hidden",
        ".m.gguf.notes.tmp": "no process id",
        f".m.gguf.{gone}.0123abce.tmp": "a folder",
    }
    for name in [stale.name, *kept]:
        if name.endswith("0123abce.tmp"):
            (tmp_path / name).mkdir()
        else:
            (tmp_path / name).write_bytes(b"x")
    os.chown(tmp_path / f".m.gguf.{gone}.89abcdef.tmp", 54321, 54321)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / stale.name).write_bytes(b"another folder's")
    with open(tmp_path / f".m.gguf.{gone}.4567cdef.tmp", "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a writer in another PID namespace holds it
        write_atomic(target, "new")
    assert target.read_text() == "new" and not stale.exists()
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {"m.gguf", "sub", *kept}, sorted(left ^ {"m.gguf", "sub", *kept})
    assert (tmp_path / "sub" / stale.name).exists()


# ── fmt: read-only cards and hard links ─────────────────────────────────────────────────────
MESSY = "toycards 1\nAlgorithm: y ← sq(x)\nInput: x ∈ ℝ\nOutput: y ∈ ℝ\n1   return   y = x*x\n"


def formatted(text: str) -> str:
    from toycards.lang.parse import parse
    from toycards.lang.printer import render_card

    return render_card(parse(text))


def test_fmt_refuses_a_read_only_card_and_leaves_it_as_it_was(tmp_path):
    card, other = tmp_path / "ro.card", tmp_path / "rw.card"
    card.write_text(MESSY, encoding="utf-8")
    other.write_text(MESSY, encoding="utf-8")
    card.chmod(0o444)
    before = card.stat()
    result = CliRunner().invoke(main, ["fmt", str(card), str(other)])
    assert result.exit_code == 1, result.output
    lines = [ln for ln in result.stderr.splitlines() if "ro.card" in ln]
    assert lines == [f"error: {card}: is read-only; not formatted"], result.stderr
    after = card.stat()
    assert card.read_text(encoding="utf-8") == MESSY
    assert (after.st_ino, after.st_mtime_ns, stat.S_IMODE(after.st_mode)) == (
        before.st_ino,
        before.st_mtime_ns,
        0o444,
    )
    assert other.read_text(encoding="utf-8") == formatted(MESSY), "the next card is still formatted"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ro.card", "rw.card"]


def test_fmt_keeps_a_hard_link(tmp_path):
    card, link = tmp_path / "a.card", tmp_path / "b.card"
    card.write_text(MESSY, encoding="utf-8")
    card.chmod(0o640)
    os.link(card, link)
    inode = card.stat().st_ino
    result = CliRunner().invoke(main, ["fmt", str(card)])
    assert result.exit_code == 0, result.output
    assert formatted(MESSY) != MESSY
    assert card.read_text(encoding="utf-8") == link.read_text(encoding="utf-8") == formatted(MESSY)
    assert card.stat().st_ino == link.stat().st_ino == inode and card.stat().st_nlink == 2
    assert stat.S_IMODE(card.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.card", "b.card"], "no backup left"


def test_fmt_does_not_take_the_backup_name_of_a_hard_linked_card(tmp_path):
    card, link, mine = tmp_path / "a.card", tmp_path / "b.card", tmp_path / "a.card~"
    card.write_text(MESSY, encoding="utf-8")
    os.link(card, link)
    mine.write_text("the user's own a.card~", encoding="utf-8")
    result = CliRunner().invoke(main, ["fmt", str(card)])
    assert result.exit_code == 1
    assert f"{card}: has other hard links, and {mine}" in result.stderr and "already exists" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert card.read_text(encoding="utf-8") == MESSY and mine.read_text() == "the user's own a.card~"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.card", "a.card~", "b.card"]


# ── a full disk ─────────────────────────────────────────────────────────────────────────────
@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs (we mount it: root, or skip)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {made.stderr.strip() or made.returncode}")
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], check=True)  # a file still open: detach it


def one_line(e: pytest.ExceptionInfo) -> str:
    message = str(e.value)
    assert "\n" not in message, message
    return message


def test_a_full_disk_is_one_line_and_leaves_no_temporary_file(small_disk):
    target = small_disk / "big.bin"
    with pytest.raises(ToycardsError) as e:
        write_atomic(target, b"x" * 200_000)
    assert one_line(e) == f"{target}: cannot write: No space left on device"
    assert list(small_disk.iterdir()) == []


def test_a_hard_linked_file_on_a_full_disk_gets_its_old_content_back(small_disk):
    card, link = small_disk / "a.card", small_disk / "b.card"
    card.write_bytes(b"old text\n")
    os.link(card, link)
    free = os.statvfs(small_disk)
    (small_disk / "filler").write_bytes(b"f" * (free.f_bavail * free.f_frsize - 4096))  # one page left
    with pytest.raises(ToycardsError) as e:
        rewrite_in_place(card, "new text " * 1000)  # 9 KB: the backup takes the last page first
    assert one_line(e) == f"{card}: cannot write: No space left on device"
    assert card.read_bytes() == link.read_bytes() == b"old text\n"
    assert sorted(p.name for p in small_disk.iterdir()) == ["a.card", "b.card", "filler"]


def tiny_trainer(**options):
    """A Trainer around a 64×300 linear layer (77 KB of float32 weights: more than the disk)."""
    torch = pytest.importorskip("torch")
    from toycards.models import train as training

    config = training.TrainConfig(**{"steps": 4, "batch": 2, "seq": 4, "lr": 1e-2, **options})
    data = training.TokenData(np.arange(64, dtype=np.int64), None, "digest of the text")
    model = torch.nn.Linear(64, 300)
    return training.Trainer(model, config, data, {"card": "a card", "tokenizer": "a vocabulary"})


def test_a_checkpoint_on_a_full_disk_is_one_line_and_leaves_no_temporary_file(small_disk):
    path = small_disk / "run.ckpt"
    with pytest.raises(ToycardsError) as e:
        tiny_trainer().save_checkpoint(str(path))
    assert one_line(e) == f"{path}: cannot write: No space left on device"
    assert list(small_disk.iterdir()) == []


def test_a_gguf_file_on_a_full_disk_names_the_short_write_and_the_full_disk(small_disk):
    """numpy's tofile raises an OSError with neither errno nor strerror on a short write."""
    import toycards
    from toycards.models.start import parse_sets, start

    sets = parse_sets(["L=1", "H=2", "H_kv=1", "d_e=16", "d_ff=16", "ell_max=16", "epsilon=1e-5"])
    begun = start("llama", sets, str(ROOT / "examples" / "tiny-llama.gguf"), 0)
    target = small_disk / "m.gguf"
    with pytest.raises(ToycardsError) as e:
        toycards.save(begun.model, target, tokenizer=begun.tokenizer_path, arch=begun.arch)
    message = one_line(e)
    assert message.startswith(f"{target}: cannot write: ") and "No space left on device" in message, message
    assert "None" not in message
    assert list(small_disk.iterdir()) == []


def test_an_os_error_without_a_message_shows_its_text(tmp_path):
    target = tmp_path / "m.gguf"
    target.write_bytes(b"old")
    with pytest.raises(ToycardsError) as e, atomic_output(target) as part:
        part.write_bytes(b"part")
        raise OSError("32768 requested and 8272 written")  # numpy's tofile on a short write
    assert one_line(e).startswith(f"{target}: cannot write: 32768 requested and 8272 written")
    bare = OSError()
    bare.errno = errno.EIO
    with pytest.raises(ToycardsError) as e, atomic_output(target):
        raise bare
    assert one_line(e) == f"{target}: cannot write: {os.strerror(errno.EIO)}"
    assert "None" not in str(e.value)
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["m.gguf"]


# ── checkpoints: refused, kept, removed ─────────────────────────────────────────────────────
def test_a_user_file_is_never_overwritten_or_removed_as_a_checkpoint(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n", encoding="utf-8")
    trainer = tiny_trainer()
    with pytest.raises(ToycardsError, match=r"notes\.txt: not a toycards checkpoint .*: it is a text file"):
        trainer.save_checkpoint(str(notes))
    assert trainer.discard_checkpoint(str(notes)) is False
    ckpt = tmp_path / "run.ckpt"
    trainer.save_checkpoint(str(ckpt))
    ckpt.write_text("the user put notes here after the run wrote it\n", encoding="utf-8")
    assert trainer.discard_checkpoint(str(ckpt)) is False
    assert notes.read_text(encoding="utf-8") == "my notes\n"
    assert ckpt.read_text(encoding="utf-8").startswith("the user put notes")


def test_a_finished_run_removes_its_own_checkpoint_or_one_of_this_very_run_only(tmp_path):
    mine, same_run, other_run = tmp_path / "a.ckpt", tmp_path / "b.ckpt", tmp_path / "c.ckpt"
    trainer = tiny_trainer()
    trainer.save_checkpoint(str(mine))
    tiny_trainer().save_checkpoint(str(same_run))  # another process, the same card, text and options
    tiny_trainer(steps=5).save_checkpoint(str(other_run))
    assert trainer.discard_checkpoint(str(mine)) and not mine.exists()
    assert trainer.discard_checkpoint(str(same_run)) and not same_run.exists()
    assert not trainer.discard_checkpoint(str(other_run)) and other_run.exists()


FORGED = {
    "a torch file of another dict": (
        lambda p: __import__("torch").save({"weights": [1.0]}, p),
        "not a toycards checkpoint (expected a toycards-checkpoint 2 file, as toycards train writes): "
        "it is a torch file holding a dict with keys 'weights'",
    ),
    "the format without its fields": (
        lambda p: __import__("torch").save({"format": "toycards-checkpoint 2", "step": 3}, p),
        "a damaged toycards-checkpoint 2 file: no 'losses'",
    ),
    "every field but the identity": (
        lambda p: __import__("torch").save(
            {"format": "toycards-checkpoint 2", "step": 3, "losses": [], "model": {}, "optimizer": None}, p
        ),
        "a damaged toycards-checkpoint 2 file: no 'identity'",
    ),
    "random bytes": (
        lambda p: p.write_bytes(np.random.default_rng(0).integers(128, 256, 3000, dtype=np.uint8).tobytes()),
        "not a toycards checkpoint (expected a toycards-checkpoint 2 file, as toycards train writes): "
        "it is binary data that torch.load cannot read",
    ),
    "an empty file": (lambda p: p.write_bytes(b""), "it is empty"),
}


@pytest.mark.parametrize("kind", FORGED)
def test_resuming_a_forged_checkpoint_says_what_the_file_is(kind, tmp_path):
    make, expected = FORGED[kind]
    path = tmp_path / "forged.ckpt"
    make(path)
    with pytest.raises(ToycardsError) as e:
        tiny_trainer().resume(str(path))
    assert one_line(e).startswith(f"{path}: ") and one_line(e).endswith(expected), str(e.value)


def test_a_checkpoint_of_this_run_with_forged_weights_says_which_tensor(tmp_path):
    """The identity is this run's, the tensors are not the model's."""
    torch = pytest.importorskip("torch")
    path = tmp_path / "run.ckpt"
    tiny_trainer().save_checkpoint(str(path))
    state = torch.load(path, weights_only=True)
    state["model"]["weight"] = torch.zeros(300, 63)
    torch.save(state, path)
    with pytest.raises(ToycardsError) as e:
        tiny_trainer().resume(str(path))
    damaged = f"{path}: a damaged toycards-checkpoint 2 file"
    assert one_line(e) == f"{damaged}: 'weight' has shape (300, 63), the model's (300, 64)"
    del state["model"]["bias"]
    torch.save(state, path)
    with pytest.raises(ToycardsError, match="a damaged toycards-checkpoint 2 file: no tensor 'bias'$"):
        tiny_trainer().resume(str(path))
