"""fileio: the one way toycards replaces a user's file (formatted cards, generated modules, a GGUF
written by `train` or `save`): all of it or nothing, the file's permission bits and links kept.
(Killed writers, full disks and hard links: tests/cli/test_file_safety.py.)"""

import fcntl
import os
import re
import stat

import pytest

from toycards.errors import ToycardsError
from toycards.fileio import atomic_output, write_atomic


def test_a_gguf_written_over_a_file_keeps_its_permission_bits_and_its_link(tmp_path):
    real = tmp_path / "model.gguf"
    real.write_bytes(b"old")
    real.chmod(0o640)
    link = tmp_path / "latest.gguf"
    link.symlink_to(real)
    with atomic_output(link) as part:
        part.write_bytes(b"new weights")
    assert link.is_symlink() and real.read_bytes() == b"new weights"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.gguf", "model.gguf"]


def test_a_new_file_gets_the_umask_s_bits(tmp_path):
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "m.card", "text")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "m.card").stat().st_mode) == 0o640


def test_a_writer_that_fails_leaves_the_file_as_it_was_and_no_temporary_file(tmp_path):
    target = tmp_path / "model.gguf"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_output(target) as part:
        part.write_bytes(b"half")
        raise RuntimeError("the writer stopped")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["model.gguf"]


def test_a_folder_that_cannot_be_written_is_one_clear_error(tmp_path):
    missing = tmp_path / "no such folder" / "m.card"
    with pytest.raises(ToycardsError, match=r"m\.card: cannot write: No such file or directory"):
        write_atomic(missing, "text")


def test_the_temporary_file_names_its_writer_and_is_locked_while_written(tmp_path):
    with atomic_output(tmp_path / "m.gguf") as part:
        assert part.parent == tmp_path
        assert re.fullmatch(rf"\.m\.gguf\.{os.getpid()}\.[0-9a-f]{{8}}\.tmp", part.name), part.name
        with open(part, "rb") as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)  # as the cleaner of stale files tries
        part.write_bytes(b"data")
    assert [p.name for p in tmp_path.iterdir()] == ["m.gguf"]
