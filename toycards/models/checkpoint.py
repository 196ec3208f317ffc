"""Training checkpoint files: what one holds, and telling one from anything else at its path.

Owns: `CHECKPOINT_FORMAT`, `read_checkpoint` (a checkpoint's state, checked field by field),
`refuse_foreign_checkpoint` (a path holding anything but a toycards checkpoint is never written
over), `inspect_checkpoint` (what a file at a checkpoint path is), `unfit_weights` (what keeps a
checkpoint's weights from a model), `file_id` (the identity of the file a trainer wrote) and
`torch_save` (torch.save whose failed write is the OSError behind it).
Leaves out: when checkpoints are written, resumed and removed (train.py's `Trainer`).

A file that is not a checkpoint this toycards resumes (random bytes, another torch file, a forged
one) is one line saying what it is and what was expected.
"""

from __future__ import annotations

import os

import torch

from toycards.errors import ToycardsError

CHECKPOINT_FORMAT = "toycards-checkpoint 2"  # 2: the optimizer's state keyed by parameter name
NOT_OURS = f"not a toycards checkpoint (expected a {CHECKPOINT_FORMAT} file, as toycards train writes)"
_FIELDS = {"step": int, "losses": list, "identity": dict, "model": dict, "optimizer": (dict, type(None))}
_ZIP = b"PK\x03\x04"  # torch.save's format (a zip archive) starts so


def read_checkpoint(path: str) -> dict:
    """The state a checkpoint holds, checked: any other file (a forged or foreign one, random
    bytes, an older format, a toycards checkpoint with a field missing) is one line saying what
    the file is and what was expected."""
    state, problem = inspect_checkpoint(path)
    if problem is not None:
        raise ToycardsError(f"{path}: {problem}")
    return state


def refuse_foreign_checkpoint(path: str) -> None:
    """Refuse a checkpoint path that holds something other than a toycards checkpoint (a user's
    notes.txt given as --checkpoint), which a run would overwrite and remove; a toycards
    checkpoint of another run or version, or a damaged one, is toycards' own and may go."""
    if not os.path.lexists(path):
        return
    if not os.path.isfile(path):
        raise ToycardsError(f"--checkpoint {path}: not a file; refusing to overwrite it")
    _, problem = inspect_checkpoint(path, peek=True)
    if problem is not None and problem.startswith(NOT_OURS):
        raise ToycardsError(f"--checkpoint {path}: {problem}; refusing to overwrite it")


def inspect_checkpoint(path: str, peek: bool = False) -> tuple[dict | None, str | None]:
    """(the loaded state, None) for a checkpoint this toycards resumes, else (what loaded or
    None, what the file is). `peek` maps the file's tensors instead of reading them."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        return None, f"{NOT_OURS}: cannot read it ({e.strerror or e})"
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=peek and head.startswith(_ZIP))
    except Exception as e:  # noqa: BLE001 - whatever torch.load makes of the file, it is not ours
        return None, f"{NOT_OURS}: {_unreadable(head, e)}"
    written = state.get("format") if isinstance(state, dict) else None
    if (
        isinstance(written, str)
        and written.startswith("toycards-checkpoint")
        and written != CHECKPOINT_FORMAT
    ):
        return state, f"a {written} file; this toycards resumes {CHECKPOINT_FORMAT} only"
    if written != CHECKPOINT_FORMAT:
        return None, f"{NOT_OURS}: it is a torch file holding {_holding(state)}"
    for key, kind in _FIELDS.items():
        value = state.get(key)
        if isinstance(value, bool) or not isinstance(value, kind):
            has = "no" if key not in state else f"a {type(value).__name__} as its"
            return state, f"a damaged {CHECKPOINT_FORMAT} file: {has} {key!r}"
    odd = next((v for v in state["losses"] if isinstance(v, bool) or not isinstance(v, int | float)), None)
    if odd is not None:
        return state, f"a damaged {CHECKPOINT_FORMAT} file: a {type(odd).__name__} among its 'losses'"
    return state, None


def _unreadable(head: bytes, e: Exception) -> str:
    """What a file torch.load cannot read looks like, from its first bytes.

    >>> _unreadable(b"my notes\\n", ValueError("invalid load key"))
    'it is a text file'
    """
    if not head:
        return "it is empty"
    if head.startswith(_ZIP):
        detail = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
        return f"it is a zip archive that torch.load cannot read ({detail})"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as bad:  # a character cut at the 4096th byte is still text
        text = head[: bad.start].decode("utf-8") if bad.start >= len(head) - 3 else None
    if text is not None and all(c.isprintable() or c in "\t\r\n\f" for c in text):
        return "it is a text file"
    return "it is binary data that torch.load cannot read"


def _holding(state: object) -> str:
    """A loaded object in a few words: "a dict with keys 'a', 'b'", "a list".

    >>> _holding({"weights": 1, "step": 2}), _holding([1])
    ("a dict with keys 'weights', 'step'", 'a list')
    """
    if isinstance(state, dict):
        keys = [repr(k) for k in list(state)[:6]]
        more = ", …" if len(state) > 6 else ""
        return f"a dict with keys {', '.join(keys)}{more}" if keys else "an empty dict"
    return f"a {type(state).__name__}"


def unfit_weights(model: torch.nn.Module, weights: dict) -> str | None:
    """What keeps a checkpoint's weights from loading into `model`: a tensor missing, one the
    model lacks, another shape; or None."""
    want = {name: tuple(t.shape) for name, t in model.state_dict().items()}  # global shapes under FSDP
    missing, extra = [n for n in want if n not in weights], [n for n in weights if n not in want]
    if missing:
        return f"no tensor {missing[0]!r}" + (
            f" (and {len(missing) - 1} more missing)" if missing[1:] else ""
        )
    if extra:
        return f"a tensor {extra[0]!r} the model does not have"
    for name, shape in want.items():
        value = weights[name]
        if not isinstance(value, torch.Tensor):
            return f"{name!r} is a {type(value).__name__}, not a tensor"
        if tuple(value.shape) != shape:
            return f"{name!r} has shape {tuple(value.shape)}, the model's {shape}"
    return None


def file_id(path: str) -> tuple[int, int, int, int] | None:
    """(device, inode, size, modification time) of the file at `path`, or None when there is none:
    equal ids mean the very file a trainer wrote, unchanged since."""
    try:
        s = os.stat(path)
    except FileNotFoundError:
        return None
    return s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns


def torch_save(state: dict, f) -> None:
    """torch.save into an open file; a failed write is the OSError behind it (a full disk is
    "No space left on device"), which atomic_output makes one line, not torch's RuntimeError
    ("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")."""
    try:
        torch.save(state, f)
    except RuntimeError as e:
        cause = e.__cause__ or e.__context__
        if isinstance(cause, OSError):
            raise cause from None
        if "inline_container" in str(e):  # torch's zip writer stopped: a write failed
            raise OSError(f"torch.save stopped: {str(e).strip().splitlines()[0]}") from None
        raise
