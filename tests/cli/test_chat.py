"""`toycards chat`, `run --chat` and the ChatSession behind them, on a tiny Llama with a chat template.

The model is examples/tiny-llama.gguf with `<|im_start|>`, `<|im_end|>` and `<|turn_end|>` added
to its vocabulary as control tokens (and rows of random weights for them) and a chat template
written here. The oracle of every reply is the model's own full pass over the conversation as the
template renders it (`generate` over the rendered text, special tokens parsed; `logits` over its
ids), which tests/cli/test_cli_models.py ties to transformers: a session that feeds each turn into
one KV cache must compute the same logits and so the same greedy replies, while feeding every
token of the conversation once (counted by wrapping the model's forward pass).
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import gguf
import numpy as np
import pytest
from click.testing import CliRunner
from gguf_factory import V, typed, write_gguf

import toycards
from toycards.cli import main
from toycards.errors import ToycardsError
from toycards.models.chat import ChatSession
from toycards.models.reference import TokenCache
from toycards.render.escape import terminal_safe

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-llama.gguf"
ADDED = ["<|im_start|>", "<|im_end|>", "<|turn_end|>"]  # ids 1024, 1025, 1026
CHATML = (
    "{% for m in messages %}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# counts the messages in its first line: every turn renders the earlier ones differently
UNSTABLE = "{{ messages | length }} messages\\n" + CHATML
# ends a turn with a token that is not in the vocabulary's end-of-generation set
TURN_END = CHATML.replace("<|im_end|>", "<|turn_end|>")
NO_SYSTEM = (
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    + CHATML
)
SYSTEM = "Be brief."
TURNS = ["Hello there", "And then?", "Why?"]
N = 12  # tokens per reply
LONG = 300  # tokens of a reply that Ctrl-C stops


def write_chat_model(path: Path, template: str | None) -> Path:
    """examples/tiny-llama.gguf with ADDED in its vocabulary and `template` as its chat template."""
    reader = gguf.GGUFReader(EXAMPLE)
    kv = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        types = [gguf.GGUFValueType(t) for t in field.types]
        kv[key] = typed(field.contents(), types[0], types[1] if len(types) > 1 else None)
    tokens, token_types = kv["tokenizer.ggml.tokens"].value, kv["tokenizer.ggml.token_type"].value
    kv["tokenizer.ggml.tokens"] = typed(tokens + ADDED, V.ARRAY, V.STRING)
    control = int(gguf.TokenType.CONTROL)
    kv["tokenizer.ggml.token_type"] = typed(token_types + [control] * len(ADDED), V.ARRAY, V.INT32)
    if template is not None:
        kv["tokenizer.chat_template"] = typed(template, V.STRING)
    tensors = {t.name: np.array(t.data) for t in reader.tensors}
    embedding = tensors["token_embd.weight"]  # (N_V, d_e); the output is tied to it
    rows = 0.5 * np.random.default_rng(0).standard_normal((len(ADDED), embedding.shape[1]))
    tensors["token_embd.weight"] = np.concatenate([embedding, rows.astype(np.float16)])
    return write_gguf(path, kv, tensors)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("chat")
    names = {
        "chat": CHATML,
        "unstable": UNSTABLE,
        "turn_end": TURN_END,
        "no_system": NO_SYSTEM,
        "plain": None,
    }
    return {name: write_chat_model(root / f"{name}.gguf", t) for name, t in names.items()}


@pytest.fixture(scope="module")
def model(files):
    return toycards.load(files["chat"])


class Feeds:
    """The model's forward pass, wrapped: every id fed to it and the last logits of each call.
    `script`: ids whose logits are made one-hot instead, call by call (a reply chosen by the test)."""

    def __init__(self, model, monkeypatch, script: list[int] = ()):
        self.real, self.calls, self.script = model._forward_numpy, [], list(script)
        monkeypatch.setattr(model, "_forward_numpy", self)

    def __call__(self, ids, cache, last=False):
        out = self.real(ids, cache, last)
        self.calls.append((ids[0].tolist(), out[0, -1].copy()))
        if self.script:
            out = np.zeros_like(out)
            out[..., self.script.pop(0)] = 1.0
        return out

    def ids(self, since: int = 0) -> list[int]:
        return [i for ids, _ in self.calls[since:] for i in ids]


def conversation_ids(model, messages: list[dict]) -> list[int]:
    text = model.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    return model.tokenizer.encode(text, parse_special=True)


def full_pass_reply(model, messages: list[dict], max_tokens: int = N) -> str:
    text = model.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    return "".join(model.generate(text, max_tokens=max_tokens, parse_special=True))


def first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@pytest.mark.parametrize(
    ("kind", "target"), [("chat", "numpy"), ("unstable", "numpy"), ("unstable", "torch")]
)
def test_each_turn_computes_what_a_full_pass_over_the_conversation_does(files, monkeypatch, target, kind):
    if target == "torch":
        pytest.importorskip("torch")
    m = toycards.load(files[kind], target=target)
    feeds = Feeds(m, monkeypatch)
    notes = []
    chat = ChatSession(m, system=SYSTEM, on_note=notes.append)
    had: list[int] = []  # the ids the cache held before the turn
    for k, turn in enumerate(TURNS):
        first = len(feeds.calls)
        reply = "".join(chat.reply(turn, max_tokens=N))
        asked = chat.messages[:-1]
        ids = conversation_ids(m, asked)
        assert reply == full_pass_reply(m, asked), (kind, k)
        got, want = feeds.calls[first][1], m.logits(ids)[-1]
        worst = np.abs(got - want).max()
        assert worst < 1e-4, f"turn {k + 1}: logits differ from the full pass by {worst}"
        # the turn fed the conversation from the first id the cache did not hold as it is now
        start = first_difference(had, ids)
        assert feeds.calls[first][0] == ids[start:], (kind, k)
        if kind == "unstable" and k > 0:
            assert start < 4  # the message count, in the first line
        had = ids + feeds.ids(first + 1)
    if kind == "unstable":
        assert len(notes) == 1 and "read again" in notes[0], notes


def test_every_token_of_the_conversation_is_fed_once(model, monkeypatch):
    tok = model.tokenizer
    im_end = tok.token_to_id["<|im_end|>"]
    replies = [tok.encode(" Fine, thanks."), tok.encode(" Nothing more.")]
    assert all(tok.decode(r) and tok.encode(tok.decode(r)) == r for r in replies)  # text ↔ the same ids
    feeds = Feeds(model, monkeypatch, script=[*replies[0], im_end, *replies[1], im_end])
    notes = []
    chat = ChatSession(model, system=SYSTEM, on_note=notes.append)
    said = ["".join(chat.reply(turn, max_tokens=N)) for turn in TURNS[:2]]
    assert said == [" Fine, thanks.", " Nothing more."] and chat.stop_reason == "end"
    # all of the rendered conversation up to the second reply, then that reply (the logits after its
    # last token chose the end of the turn, which is not fed yet): each once, in order
    assert feeds.ids() == conversation_ids(model, chat.messages[:-1]) + replies[1]
    assert notes == [] and chat.fed == len(feeds.ids())
    assert chat.messages == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": TURNS[0]},
        {"role": "assistant", "content": said[0]},
        {"role": "user", "content": TURNS[1]},
        {"role": "assistant", "content": said[1]},
    ]


def test_a_reply_ends_at_the_templates_turn_end_as_a_token_or_as_text(files, model, monkeypatch):
    m = toycards.load(files["turn_end"])
    tok = m.tokenizer
    turn_end = tok.token_to_id["<|turn_end|>"]
    assert not tok.is_eog(turn_end)  # only the template says that it ends a turn
    Feeds(m, monkeypatch, script=[*tok.encode(" Yes"), turn_end, *tok.encode(" no")])
    chat = ChatSession(m)
    assert "".join(chat.reply("Hi", max_tokens=N)) == " Yes" and chat.stop_reason == "end"
    # the turn end's text spelled with ordinary tokens ends the reply too, and none of it is shown
    spelled = tok.encode("<|im_end|>")
    assert len(spelled) > 2 and model.tokenizer.encode("<|im_end|>", parse_special=True) != spelled
    Feeds(model, monkeypatch, script=[*tok.encode(" Yes"), *spelled, *tok.encode(" no")])
    chat = ChatSession(model)
    pieces = list(chat.reply("Hi", max_tokens=N))
    assert "".join(pieces) == " Yes" and chat.stop_reason == "end"
    assert chat.messages[-1] == {"role": "assistant", "content": " Yes"}


def test_a_pass_cut_short_leaves_the_next_turn_right(model, monkeypatch):
    """Ctrl-C inside a forward pass: layer 1 has stored the step's keys, layer 2 has not."""
    chat = ChatSession(model, system=SYSTEM)
    "".join(chat.reply(TURNS[0], max_tokens=N))
    reserve, calls = chat._cache.reserve, []

    def interrupted(slot, *args):
        calls.append(slot)
        if len(calls) == 8:  # the 4th pass of the reply (the prompt's, then decoding steps), 2nd layer
            assert calls == [0, 1] * 4
            raise KeyboardInterrupt
        return reserve(slot, *args)

    monkeypatch.setattr(chat._cache, "reserve", interrupted)
    shown = []
    with pytest.raises(KeyboardInterrupt):
        for piece in chat.reply(TURNS[1], max_tokens=N):
            shown.append(piece)
    monkeypatch.undo()
    assert shown and chat.messages[-1] == {"role": "assistant", "content": "".join(shown)}
    assert chat.stop_reason is None
    reply = "".join(chat.reply(TURNS[2], max_tokens=N))
    assert reply == full_pass_reply(model, chat.messages[:-1])


def test_the_context_length_stops_a_reply_and_refuses_a_turn(model):
    ids = conversation_ids(model, [{"role": "user", "content": TURNS[0]}])
    chat = ChatSession(model, n_ctx=len(ids) + 5)
    reply = "".join(chat.reply(TURNS[0], max_tokens=N))
    assert chat.stop_reason == "context"
    assert reply == full_pass_reply(model, chat.messages[:-1], max_tokens=5)
    assert chat.fed <= len(ids) + 5
    before = chat.messages
    with pytest.raises(ToycardsError, match=r"no room for a reply in the context length \d+"):
        list(chat.reply(TURNS[1], max_tokens=N))
    assert chat.messages == before
    chat.reset()
    assert chat.messages == [] and chat.fed == 0
    assert "".join(chat.reply(TURNS[0], max_tokens=N)) == reply


def test_a_file_that_cannot_chat_is_one_error_line_before_any_turn(files):
    m = toycards.load(files["plain"])
    with pytest.raises(ToycardsError, match="no chat template"):
        ChatSession(m)
    plain, no_system = files["plain"], files["no_system"]
    for args, error in [
        (["chat", plain], f"{plain}: no chat template (tokenizer.chat_template); use `toycards run`"),
        (["run", plain, "--chat", "-p", "Hi"], f"{plain}: no chat template"),
        (
            ["chat", no_system, "--system", SYSTEM],
            f"{no_system}: chat template raised: System role not supported",
        ),
    ]:
        result = CliRunner().invoke(main, [str(a) for a in args], input="Hi\n")
        assert result.exit_code == 1 and result.stdout == "", result.output
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"error: {error}"), line
    result = CliRunner().invoke(main, ["run", str(files["chat"]), "-p", "Hi", "--system", SYSTEM])
    assert result.exit_code == 2 and "--system goes with --chat" in result.stderr


def test_the_token_cache_truncates():
    cache = TokenCache()
    cache.ids = np.arange(6).reshape(1, 6)
    cache.truncate(4)
    assert cache.ids.tolist() == [[0, 1, 2, 3]] and cache.length == 4
    with pytest.raises(ValueError):
        cache.truncate(5)
    cache.truncate(0)
    assert cache.ids is None and cache.length == 0


@pytest.fixture(scope="module")
def replies(model):
    """The greedy replies of a conversation of TURNS[:2] with the system prompt, by full passes."""
    messages = [{"role": "system", "content": SYSTEM}]
    out = []
    for turn in TURNS[:2]:
        messages.append({"role": "user", "content": turn})
        out.append(full_pass_reply(model, messages))
        messages.append({"role": "assistant", "content": out[-1]})
    return out


def toycards_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "toycards", *map(str, args)]


def test_chat_from_a_pipe_replies_line_by_line(files, replies):
    script = f"{TURNS[0]}\n{TURNS[1]}\n\n/reset\n{TURNS[0]}\n/exit\n{TURNS[1]}\n"
    done = subprocess.run(
        toycards_cmd("chat", files["chat"], "--system", SYSTEM, "-n", N),
        input=script, capture_output=True, text=True, encoding="utf-8", timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{replies[0]}\n{replies[1]}\n{replies[0]}\n"


def test_run_chat_is_the_first_turn_of_chat(files, replies):
    run = CliRunner().invoke(main, ["run", str(files["chat"]), "--chat", "-p", TURNS[0], "--system", SYSTEM,
                                    "-n", str(N)])  # fmt: skip
    chat = CliRunner().invoke(main, ["chat", str(files["chat"]), "--system", SYSTEM, "-n", str(N)],
                              input=f"{TURNS[0]}\n")  # fmt: skip
    assert run.exit_code == chat.exit_code == 0, run.output + chat.output
    assert run.stdout == chat.stdout == f"{replies[0]}\n"


def test_chat_from_a_pipe_stops_at_the_context_length(files, model):
    ids = conversation_ids(model, [{"role": "user", "content": TURNS[0]}])
    result = CliRunner().invoke(main, ["chat", str(files["chat"]), "--ctx", str(len(ids) + 3)],
                                input=f"{TURNS[0]}\n{TURNS[1]}\n")  # fmt: skip
    assert result.exit_code == 1
    assert result.stdout == full_pass_reply(model, [{"role": "user", "content": TURNS[0]}], 3) + "\n"
    stopped, refused = result.stderr.splitlines()
    assert stopped.startswith(f"stopped at the context length {len(ids) + 3}")
    assert refused.startswith("error: ") and "leaves no room for a reply" in refused


class Terminal:
    """`toycards ARGS` on a pseudo-terminal: `expect` reads its output up to a text."""

    def __init__(self, *args):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the terminal is its stdin, stdout and stderr
            try:
                os.execv(sys.executable, toycards_cmd(*args))
            finally:  # never back into the test session this process was forked from
                os._exit(127)
        self.seen, self.code = b"", None

    def expect(self, text: str, wait: float = 120) -> str:
        """The output up to and including `text` (the rest is kept for the next call)."""
        want, end = text.encode(), time.monotonic() + wait
        while want not in self.seen:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, end - time.monotonic()))
            chunk = os.read(self.fd, 4096) if ready else b""
            if not chunk:
                raise AssertionError(f"{text!r} never came; the terminal shows {self.seen[-500:]!r}")
            self.seen += chunk
        at = self.seen.index(want) + len(want)
        out, self.seen = self.seen[:at], self.seen[at:]
        return out.decode("utf-8", errors="replace")

    def wait_for(self, n: int, wait: float = 120) -> None:
        """Until at least `n` bytes of output are unread (`expect` returns them)."""
        end = time.monotonic() + wait
        while len(self.seen) < n:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, end - time.monotonic()))
            chunk = os.read(self.fd, 4096) if ready else b""
            if not chunk:
                raise AssertionError(f"{n} bytes never came; the terminal shows {self.seen[-500:]!r}")
            self.seen += chunk

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def status(self, wait: float = 120) -> int:
        """The exit status, once the command has ended (killed, and a failure, after `wait` seconds)."""
        end = time.monotonic() + wait
        while self.code is None and time.monotonic() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.code = os.waitstatus_to_exitcode(status)
            else:
                time.sleep(0.01)
        if self.code is None:
            self.close()
            raise AssertionError(f"still running after {wait} s; the terminal shows {self.seen[-500:]!r}")
        return self.code

    def leaves_on_ctrl_c(self) -> int:
        """The exit status after a Ctrl-C just sent at the prompt. CPython's input() misses a SIGINT
        that comes after it has printed the prompt and before it waits for a key (the signal is
        noted, and nothing wakes the wait), so the test presses Ctrl-C again, as a person would,
        if the first one has not ended the command within a few seconds."""
        end = time.monotonic() + 5
        while time.monotonic() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.code = os.waitstatus_to_exitcode(status)
                return self.code
            time.sleep(0.05)
        self.send("\x03")
        return self.status()

    def close(self) -> None:
        if self.code is None:
            os.kill(self.pid, signal.SIGKILL)
            self.code = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        if self.fd is not None:  # once: a failed `status` has closed it already
            os.close(self.fd)
            self.fd = None


@pytest.fixture
def terminal():
    """Terminal(*args), each closed (its command killed if it still runs) after the test."""
    opened = []
    yield lambda *args: opened.append(Terminal(*args)) or opened[-1]
    for term in opened:
        term.close()


def test_chat_on_a_terminal(files, replies, model, terminal):
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TURNS[0]}]
    ctx = (
        len(conversation_ids(model, first)) + N + 1
    )  # room for the first turn's reply, not for a second turn
    term = terminal("chat", files["chat"], "--system", SYSTEM, "-n", N, "--ctx", ctx)
    assert "/reset" in term.expect("> ")  # the commands are named first
    for _ in range(2):  # the same reply after /reset
        term.send(f"{TURNS[0]}\n")
        term.expect(f"{TURNS[0]}\r\n")  # the terminal's echo
        shown = term.expect("\r\n> ")
        # control characters spelled out (`\x13`), the terminal's line ends
        assert shown == f"{terminal_safe(replies[0])}\n> ".replace("\n", "\r\n")
        term.send(f"{TURNS[1]}\n")
        refused = term.expect("\r\n> ").splitlines()  # (in colour: a terminal)
        assert "error:" in refused[1] and "leaves no room for a reply" in refused[1], refused
        term.send("/reset\n")
        assert "(the conversation is empty)" in term.expect("> ")
    term.send("/exit\n")
    term.expect("/exit\r\n")
    assert term.status() == 0


def test_ctrl_c_on_a_terminal_stops_a_reply_then_leaves(files, model, terminal):
    text = model.tokenizer.apply_chat_template([{"role": "user", "content": TURNS[0]}])
    pieces = model.generate(text, max_tokens=LONG, parse_special=True, n_ctx=2 * LONG)
    full = "".join(pieces)
    assert pieces.stop_reason == "max_tokens"  # greedy decoding does not end the turn that soon
    term = terminal("chat", files["chat"], "-n", LONG, "--ctx", 2 * LONG)
    term.expect("> ")
    term.send(f"{TURNS[0]}\n")
    term.expect(f"{TURNS[0]}\r\n")
    full = terminal_safe(full)  # as a terminal shows it
    term.wait_for(8)  # the reply is streaming
    term.send("\x03")
    shown = term.expect("\r\n> ")  # the terminal shows ^C where it took the key
    shown = shown.replace("^C", "", 1).replace("\r\n", "\n").removesuffix("\n> ")
    assert full.startswith(shown) and len(shown) < len(full)  # stopped, back at the prompt
    term.send("\x03")  # at the prompt: leave
    assert term.leaves_on_ctrl_c() == 130
