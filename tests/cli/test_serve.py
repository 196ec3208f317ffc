"""`toycards serve`: OpenAI's API over HTTP, checked with the official `openai` client.

Each server is a `toycards serve` subprocess on a free loopback port (`--port 0`; the port is read
from its start line). The oracle for every reply is the library's own `generate` on the same prompt
(tied to transformers by the rest of the suite): a completion is `generate(prompt)`, a chat reply is
`generate` over the conversation rendered by plain jinja2 from the file's template, a streamed reply
is the same text in pieces, and each of 32 concurrent streams is the reply its request gets alone.
Bad requests are OpenAI error objects with their status (a body not declared as JSON and a Host
header naming no loopback address among them: what a web page in a browser would send); a client
that disconnects cancels its generation; SIGTERM lets the reply in progress finish and answers a
waiting request with a 503; each server stops with exit status 0. The server's resident memory
stays flat over 200 requests.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import signal
import socket
import string
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import gguf
import pytest
from click.testing import CliRunner
from gguf_factory import typed, write_gguf
from test_user_cards import EXAMPLE, HP, KEYS, llama_weights, tokenizer_kv

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
jinja2 = pytest.importorskip("jinja2")

import toycards  # noqa: E402
from toycards.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
V = gguf.GGUFValueType
TIMEOUT = 60  # s, for any one call: a server that hangs fails the test instead of the suite
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CONTEXT = 4096  # the chat model's: long enough that a reply can outlast a disconnect or a signal


def write_chat_model(path: Path) -> Path:
    """test_user_cards' tiny llama (GPT-2's vocabulary cut to 1,024 tokens), with a 4,096-token
    context and a ChatML template."""
    kv = {
        f"llama.{KEYS[n][0]}": typed(v, V.FLOAT32 if isinstance(v, float) else V.UINT32)
        for n, v in HP.items()
    }
    kv["llama.context_length"] = typed(CONTEXT, V.UINT32)
    kv |= {"general.name": "tiny chat"} | tokenizer_kv() | {"tokenizer.chat_template": CHATML}
    return write_gguf(path, kv=kv, tensors=llama_weights(), arch="llama")


class Server:
    """`toycards serve PATH ARGS` on 127.0.0.1, a free port; `url` is its /v1 base URL."""

    def __init__(self, path: Path, log: Path, *args: str) -> None:
        self.log = log
        cmd = [sys.executable, "-m", "toycards", "serve", str(path), "--port", "0", *args]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with open(log, "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=ROOT)
        try:
            self.url = self._started()
        except BaseException:
            self.proc.kill()
            self.proc.wait()
            raise
        self.http = httpx.Client(base_url=self.url.removesuffix("/v1"), timeout=TIMEOUT)
        assert self.http.get("/health").json()["status"] == "ok"
        self.client = openai.OpenAI(base_url=self.url, api_key="unused", timeout=TIMEOUT, max_retries=0)

    def _started(self) -> str:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            found = re.search(r"at (http://127\.0\.0\.1:\d+/v1) ", self.log.read_text())
            if found:
                return found.group(1)
            assert self.proc.poll() is None, self.log.read_text()
            time.sleep(0.05)
        raise AssertionError(f"no start line in {TIMEOUT} s: {self.log.read_text()}")

    def health(self) -> dict:
        return self.http.get("/health").json()

    def stop(self, sig: int = signal.SIGINT) -> str:
        """Stop with `sig`: exit status 0, no traceback; the server's stderr."""
        self.http.close()
        self.client.close()
        self.proc.send_signal(sig)
        assert self.proc.wait(TIMEOUT) == 0, self.log.read_text()
        text = self.log.read_text()
        assert "Traceback" not in text, text
        return text


@pytest.fixture(scope="module")
def chat_file(tmp_path_factory) -> Path:
    return write_chat_model(tmp_path_factory.mktemp("serve") / "chat.gguf")


@pytest.fixture(scope="module")
def oracle(chat_file):
    return toycards.load(chat_file)


@pytest.fixture(scope="module")
def server(chat_file, tmp_path_factory):
    running = Server(chat_file, tmp_path_factory.mktemp("log") / "serve.log")
    yield running
    running.stop()


def generated(model, prompt: str, max_tokens: int, **kw) -> str:
    return "".join(model.generate(prompt, max_tokens=max_tokens, parse_special=True, **kw))


def sse_texts(lines) -> tuple[list[str], str | None]:
    """The text pieces of the lines of a /v1/completions event stream, and its finish reason."""
    pieces, reason = [], None
    for line in lines:
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        assert "error" not in chunk, chunk
        choice = chunk["choices"][0]
        pieces.append(choice["text"])
        reason = choice["finish_reason"] or reason
    return pieces, reason


# ---------------------------------------------------------------------------------------------
# replies, against the library's generate


def test_lists_the_one_model(server):
    assert [m.id for m in server.client.models.list().data] == ["chat"]
    assert server.client.models.retrieve("chat").id == "chat"


@pytest.mark.parametrize("prompt", ["Hello world", "The quick brown fox"])
def test_completion_is_generate(server, oracle, prompt):
    reply = server.client.completions.create(model="chat", prompt=prompt, max_tokens=12, temperature=0)
    assert reply.choices[0].text == generated(oracle, prompt, 12)
    assert reply.choices[0].finish_reason == "length"
    n_prompt = len(oracle.tokenizer.encode(prompt, parse_special=True))
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (n_prompt, 12)


def test_sampled_completion_is_generate_with_the_same_seed(server, oracle):
    options = {"temperature": 0.9, "top_p": 0.95, "seed": 3}
    reply = server.client.completions.create(model="chat", prompt="Hello", max_tokens=16, **options)
    assert reply.choices[0].text == generated(oracle, "Hello", 16, **options)


def test_chat_is_generate_over_the_rendered_template(server, oracle):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    reply = server.client.chat.completions.create(
        model="chat", messages=messages, max_tokens=10, temperature=0
    )
    text = jinja2.Environment().from_string(CHATML).render(messages=messages, add_generation_prompt=True)
    assert reply.choices[0].message.content == generated(oracle, text, 10)
    assert reply.choices[0].message.role == "assistant"
    assert reply.usage.prompt_tokens == len(oracle.tokenizer.encode(text, parse_special=True))


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_a_stream_is_the_reply_in_pieces(server, endpoint):
    if endpoint == "chat":
        create, args = (
            server.client.chat.completions.create,
            {"messages": [{"role": "user", "content": "Hi"}]},
        )
    else:
        create, args = server.client.completions.create, {"prompt": "Once upon a time"}
    args |= {"model": "chat", "max_tokens": 14, "temperature": 0}
    whole = create(**args)
    chunks = list(create(**args, stream=True, stream_options={"include_usage": True}))
    choices = [c.choices[0] for c in chunks if c.choices]
    pieces = [(c.delta.content if endpoint == "chat" else c.text) or "" for c in choices]
    expected = whole.choices[0].message.content if endpoint == "chat" else whole.choices[0].text
    assert "".join(pieces) == expected and len([p for p in pieces if p]) > 1
    assert [c.finish_reason for c in choices][-1] == whole.choices[0].finish_reason
    assert all(c.finish_reason is None for c in choices[:-1])
    assert chunks[-1].usage.model_dump() == whole.usage.model_dump()


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_string_ends_the_reply_before_it(server, oracle, stream):
    full = generated(oracle, "Hello world", 24)
    stop = full[9:12]  # three characters mid-text: they may span two tokens' pieces
    expected = full[: full.find(stop)]
    args = {"model": "chat", "prompt": "Hello world", "max_tokens": 24, "temperature": 0, "stop": [stop]}
    if stream:
        with server.http.stream("POST", "/v1/completions", json=args | {"stream": True}) as response:
            pieces, reason = sse_texts(response.iter_lines())
        text = "".join(pieces)
    else:
        choice = server.client.completions.create(**args).choices[0]
        text, reason = choice.text, choice.finish_reason
    assert (text, reason) == (expected, "stop")


# ---------------------------------------------------------------------------------------------
# bad requests


def _error(response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


JSON = {"content-type": "application/json"}
OK = {"model": "chat", "prompt": "Hi"}
CHAT_OK = {"model": "chat", "messages": [{"role": "user", "content": "Hi"}]}
BAD = [  # (endpoint, body, status, the error's param or code)
    ("completions", b"{bad json", 400, "invalid_json"),
    ("completions", b"[1, 2]", 400, None),
    ("completions", b"[" * 100_000, 400, "invalid_json"),
    ("completions", {"prompt": "Hi"}, 400, "model"),
    ("completions", {"model": "gpt-4", "prompt": "Hi"}, 404, "model_not_found"),
    ("completions", {"model": "chat"}, 400, "prompt"),
    ("completions", OK | {"prompt": ["a", "b"]}, 400, "prompt"),
    ("completions", OK | {"max_tokens": "5"}, 400, "max_tokens"),
    ("completions", OK | {"max_tokens": 0}, 400, "max_tokens"),
    ("completions", OK | {"temperature": 3}, 400, "temperature"),
    ("completions", OK | {"top_p": 0}, 400, "top_p"),
    ("completions", OK | {"seed": -1}, 400, "seed"),
    ("completions", OK | {"n": 2}, 400, "n"),
    ("completions", OK | {"logprobs": 5}, 400, "logprobs"),
    ("completions", OK | {"stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ("completions", OK | {"stop": [""]}, 400, "stop"),
    ("completions", OK | {"stream": "yes"}, 400, "stream"),
    ("chat/completions", {"model": "chat"}, 400, "messages"),
    ("chat/completions", CHAT_OK | {"messages": []}, 400, "messages"),
    (
        "chat/completions",
        CHAT_OK | {"messages": [{"role": "robot", "content": "Hi"}]},
        400,
        "messages[0].role",
    ),
    (
        "chat/completions",
        CHAT_OK | {"messages": [{"role": "user", "content": 5}]},
        400,
        "messages[0].content",
    ),
    ("chat/completions", CHAT_OK | {"messages": [{"role": "user", "content": "x"}] * 513}, 400, "messages"),
    ("chat/completions", CHAT_OK | {"tools": [{"type": "function"}]}, 400, "tools"),
]


@pytest.mark.parametrize(
    ("endpoint", "body", "status", "what"), BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)]
)
def test_a_bad_request_is_an_openai_error(server, endpoint, body, status, what):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    error = _error(server.http.post(f"/v1/{endpoint}", content=content, headers=JSON), status)
    assert what in (error["param"], error["code"]), error


def test_a_prompt_longer_than_the_context_is_a_400_that_counts_it(server, oracle):
    prompt = "the cat sat on a mat " * 1000
    n_prompt = len(oracle.tokenizer.encode(prompt, parse_special=True))
    error = _error(server.http.post("/v1/completions", json=OK | {"prompt": prompt}), 400)
    assert error["code"] == "context_length_exceeded"
    assert f"{n_prompt} tokens" in error["message"] and f"{CONTEXT} tokens" in error["message"]
    with pytest.raises(openai.BadRequestError, match="context"):
        server.client.completions.create(model="chat", prompt=prompt, max_tokens=1)


def test_a_body_over_the_cap_is_a_413(server):
    body = json.dumps(OK | {"prompt": "x" * (1 << 20)}).encode()
    assert (
        _error(server.http.post("/v1/completions", content=body, headers=JSON), 413)["code"]
        == "request_too_large"
    )


def test_a_body_not_declared_as_json_is_a_415(server):
    """A web page can post a form or text/plain to any address without asking; not JSON."""
    for kind in ("text/plain", "application/x-www-form-urlencoded"):
        body = json.dumps(OK).encode()
        response = server.http.post("/v1/completions", content=body, headers={"content-type": kind})
        assert _error(response, 415)["code"] == "unsupported_media_type"


def test_only_requests_for_a_loopback_name_are_answered(server):
    """A page whose domain is made to resolve to 127.0.0.1 (DNS rebinding) sends its own Host."""
    port = server.url.split(":")[2].split("/")[0]
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "[::1]"):
        assert server.http.get("/v1/models", headers={"host": host}).status_code == 200, host
    for host in (f"evil.example:{port}", "192.168.1.10"):
        response = server.http.post("/v1/completions", json=OK, headers={"host": host})
        assert _error(response, 403)["code"] == "host_not_allowed", host


def test_unknown_paths_and_methods_are_openai_errors(server):
    _error(server.http.get("/v1/engines"), 404)
    _error(server.http.get("/v1/completions"), 405)
    with pytest.raises(openai.NotFoundError):
        server.client.completions.create(model="gpt-4", prompt="Hi")


def test_a_file_without_a_chat_template_and_a_capped_reply(tmp_path):
    """A chat request to a file with no template is a 400 naming the file (not its path); a reply
    is capped by `--max-tokens-limit`, and by `--ctx` less the prompt."""
    plain = Server(EXAMPLE, tmp_path / "serve.log", "--ctx", "40", "--max-tokens-limit", "10")
    try:
        error = _error(plain.http.post("/v1/chat/completions", json=CHAT_OK | {"model": "tiny-llama"}), 400)
        assert error["code"] == "no_chat_template" and str(EXAMPLE.parent) not in error["message"]
        assert "tiny-llama.gguf" in error["message"]
        tok = toycards.load_tokenizer(EXAMPLE)
        for prompt in ("Hello", "one two three four five six seven eight nine ten eleven twelve thirteen"):
            n_prompt = len(tok.encode(prompt, parse_special=True))
            reply = plain.client.completions.create(
                model="tiny-llama", prompt=prompt, max_tokens=500, temperature=0
            )
            assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (
                n_prompt,
                min(10, 40 - n_prompt),
            )
            assert reply.choices[0].finish_reason == "length"
    finally:
        plain.stop()


# ---------------------------------------------------------------------------------------------
# many clients, disconnects, shutdown, memory


def test_32_concurrent_streams_each_get_the_reply_they_get_alone(server, oracle):
    prompts = [f"Request {i}: the" for i in range(32)]
    expected = [generated(oracle, p, 8) for p in prompts]
    before = server.health()["finished"]

    def one(prompt: str) -> str:
        args = {"model": "chat", "prompt": prompt, "max_tokens": 8, "temperature": 0, "stream": True}
        with client.stream("POST", server.url + "/completions", json=args) as response:
            assert response.status_code == 200
            return "".join(sse_texts(response.iter_lines())[0])

    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    with httpx.Client(timeout=TIMEOUT, limits=limits) as client, ThreadPoolExecutor(32) as pool:
        futures = [pool.submit(one, p) for p in prompts]
        done, pending = wait(futures, timeout=2 * TIMEOUT)
        assert not pending, f"{len(pending)} of 32 streams unfinished"
    assert [f.result() for f in futures] == expected
    health = server.health()
    assert (health["generating"], health["waiting"], health["finished"] - before) == (0, 0, 32)
    assert health["batched"] is True and "alone_because" not in health  # one pass for the replies' tokens


def _until(condition, what: str):
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.01)
    raise AssertionError(what)


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_disconnects_cancels_its_generation(server, stream):
    """A reply of 3,000 tokens takes seconds; the client leaves after its first chunk, or (whole
    replies) after 0.2 s."""
    before = server.health()
    args = {"model": "chat", "prompt": "Hi", "max_tokens": 3000, "temperature": 0, "stream": stream}
    if stream:
        with httpx.Client(timeout=TIMEOUT) as client:
            with client.stream("POST", server.url + "/completions", json=args) as response:
                next(response.iter_lines())  # the first chunk: generating
    else:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(server.url + "/completions", json=args, timeout=httpx.Timeout(TIMEOUT, read=0.2))
    _until(
        lambda: server.health()["cancelled"] == before["cancelled"] + 1, "the generation was not cancelled"
    )
    health = server.health()
    assert (health["finished"], health["generating"]) == (before["finished"], 0)


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/PID/status")
def test_memory_stays_flat_over_200_requests(server):
    """Short replies, and prompts refused as too long whose words are all new (the tokenizer must
    not keep them)."""

    def requests(start: int, n: int) -> None:
        for i in range(start, start + n):
            short = server.http.post("/v1/completions", json=OK | {"prompt": f"Hi {i}", "max_tokens": 2})
            assert short.status_code == 200
            word = "".join(random.Random(i).choices(string.ascii_lowercase, k=8000))  # a new word
            long = server.http.post("/v1/completions", json=OK | {"prompt": word})
            assert long.json()["error"]["code"] == "context_length_exceeded"

    requests(0, 25)
    before = rss_kib(server.proc.pid)
    requests(1000, 100)
    grown = rss_kib(server.proc.pid) - before  # keeping those words would take ~6 MiB
    assert grown < 2048, f"resident memory grew by {grown} KiB over 200 requests"


def test_sigterm_finishes_the_reply_in_progress_and_refuses_the_waiting(chat_file, oracle, tmp_path):
    one = Server(chat_file, tmp_path / "serve.log", "--parallel", "1")
    args = {"model": "chat", "prompt": "Hi", "max_tokens": 600, "temperature": 0}
    waiting = {}

    def second() -> None:
        with httpx.Client(timeout=TIMEOUT) as client:
            waiting["response"] = client.post(one.url + "/completions", json=args | {"max_tokens": 4})

    with httpx.Client(timeout=TIMEOUT) as client:
        with client.stream("POST", one.url + "/completions", json=args | {"stream": True}) as response:
            lines = response.iter_lines()
            first = next(lines)
            thread = threading.Thread(target=second)
            thread.start()
            _until(lambda: one.health()["waiting"] == 1, "the second request is not waiting")
            one.proc.send_signal(signal.SIGTERM)
            pieces, reason = sse_texts(itertools.chain([first], lines))
    thread.join(TIMEOUT)
    assert ("".join(pieces), reason) == (generated(oracle, "Hi", 600), "length")
    assert _error(waiting["response"], 503)["code"] == "shutting_down"
    one.stop(signal.SIGTERM)  # (already signalled: a second SIGTERM only hurries it)
    with pytest.raises(httpx.ConnectError):
        httpx.get(one.url.removesuffix("/v1") + "/health", timeout=TIMEOUT)


# ---------------------------------------------------------------------------------------------
# the command's own errors


def cli(*args: str):
    return CliRunner().invoke(main, ["serve", *map(str, args)])


def one_error(result) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and result.stdout == ""
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_without_the_serve_extra_one_line_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn → ImportError
    assert one_error(cli(EXAMPLE)) == "error: toycards serve needs: pip install 'toycards[serve]'"


def test_a_busy_port_is_one_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert f"cannot listen on 127.0.0.1:{port}" in one_error(cli(EXAMPLE, "--port", port))


def test_not_a_gguf_file_is_one_line(tmp_path):
    assert "no such file" in one_error(cli(tmp_path / "model.bin", "--port", "0"))
    (tmp_path / "notes.gguf").write_text("not a model")
    assert "notes.gguf" in one_error(cli(tmp_path / "notes.gguf", "--port", "0"))


def test_only_a_loopback_address_goes_without_a_warning():
    from toycards.serve.server import exposure_warning

    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert exposure_warning(host) is None, host
    for host in ("0.0.0.0", "::", "192.168.1.10", "10.0.0.1"):
        assert "no authentication" in exposure_warning(host), host


def test_health_says_why_replies_step_alone():
    from types import SimpleNamespace

    from toycards.serve.scheduler import Scheduler

    alone = Scheduler(SimpleNamespace(rows_why="the card's steps read the token positions"))
    assert alone.stats()["batched"] is False
    assert alone.stats()["alone_because"] == "the card's steps read the token positions"
    assert Scheduler(SimpleNamespace(rows_why="")).stats()["batched"] is True
