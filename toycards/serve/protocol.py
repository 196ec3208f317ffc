"""The OpenAI wire format of `toycards serve`: requests checked into plain values, replies built.

Owns: `ApiError` (an HTTP status and OpenAI's error object, `{"error": {"message", "type", "param",
"code"}}`), `Limits` (what one request may ask for), `read_completion` and `read_chat` (a parsed JSON
body → `Request`, every field type- and range-checked, with a 400 naming the field), `reply_budget`
(the reply's token cap from the request, the server's limit and the context), and the reply bodies
and stream chunks of `/v1/completions` and `/v1/chat/completions`.
Leaves out: HTTP itself (app.py), tokenizing and generating (scheduler.py, sequence.py).

Fields that would change what a reply means but are not implemented (`n` > 1, `logprobs`, `echo`,
`suffix`, penalties, `logit_bias`, tools, a JSON `response_format`) are refused with a 400 rather
than ignored; fields that change nothing (`user`, `metadata`, `store`) are ignored.

>>> limits = Limits(ctx=64, max_tokens=32)
>>> request = read_completion({"model": "m", "prompt": "Hi", "max_tokens": 100}, "m", limits)
>>> request.prompt, request.temperature, reply_budget(request, 60, limits)  # 4 tokens of room left
('Hi', 1.0, 4)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

COMPLETION_DEFAULT_TOKENS = 16  # OpenAI's default `max_tokens` for /v1/completions
ROLES = ("system", "developer", "user", "assistant", "tool")
_UNSUPPORTED = {  # field → the values that mean "not asked for"
    "n": (1,),
    "best_of": (1,),
    "logprobs": (False, 0),
    "top_logprobs": (0,),
    "echo": (False,),
    "suffix": ("",),
    "presence_penalty": (0,),
    "frequency_penalty": (0,),
    "logit_bias": ({},),
    "tools": ([],),
    "tool_choice": ("none", "auto"),
    "functions": ([],),
    "function_call": ("none",),
}


class ApiError(Exception):
    """A request the server refuses: the HTTP status and OpenAI's error object."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class Limits:
    """What one request may ask for."""

    ctx: int  # tokens of prompt and reply together (the model's context, or --ctx)
    max_tokens: int = 4096  # the most tokens one reply may have (--max-tokens-limit)
    body_bytes: int = 1 << 20  # of a request body
    messages: int = 512  # in one chat request
    message_chars: int = 1 << 18  # in one message's content
    stops: int = 4  # stop strings in one request, as OpenAI allows
    stop_chars: int = 256  # in one stop string


@dataclass(frozen=True)
class Request:
    """A checked generation request: the prompt (completions) or messages (chat), and the options."""

    prompt: str | None
    messages: list[dict] | None
    max_tokens: int | None  # asked for; None: the endpoint's default
    temperature: float
    top_p: float | None  # None: no nucleus cut (top_p 1)
    top_k: int | None  # llama.cpp's extension; None: no cut
    seed: int | None
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with the token counts


def _fail(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param)


def _number(body: dict, name: str, default: float, lo: float, hi: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(name, f"expected a number, got {_shown(value)}")
    if not lo <= value <= hi:
        raise _fail(name, f"{value} is out of range {lo:g}…{hi:g}")
    return float(value)


def _integer(body: dict, name: str, lo: int, hi: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(name, f"expected an integer, got {_shown(value)}")
    if not lo <= value <= hi:
        raise _fail(name, f"{value} is out of range {lo}…{hi}")
    return value


def _quoted(value: object) -> str:
    """A value as an error message quotes it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


def _shown(value: object) -> str:
    """A value and its type, as an error message quotes them: `str 'abc'`."""
    return f"{type(value).__name__} {_quoted(value)}"


def _refuse_unsupported(body: dict) -> None:
    for name, neutral in _UNSUPPORTED.items():
        value = body.get(name)
        if value is not None and value not in neutral:
            raise _fail(name, f"{_shown(value)} is not supported by this server")
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        raise _fail("response_format", "only {'type': 'text'} is supported by this server")


def _stops(body: dict, limits: Limits) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise _fail("stop", f"expected a string or a list of strings, got {_shown(value)}")
    if len(stops) > limits.stops:
        raise _fail("stop", f"{len(stops)} stop strings; at most {limits.stops}")
    for s in stops:
        if not s or len(s) > limits.stop_chars:
            raise _fail("stop", f"a stop string must have 1…{limits.stop_chars} characters")
    return tuple(stops)


def _options(body: dict, limits: Limits, max_tokens_names: tuple[str, ...]) -> dict:
    _refuse_unsupported(body)
    stream = body.get("stream", False)
    if not isinstance(stream, bool | None):
        raise _fail("stream", f"expected true or false, got {_shown(stream)}")
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict) or not isinstance(
        stream_options.get("include_usage", False), bool
    ):
        raise _fail("stream_options", "expected {'include_usage': true or false}")
    max_tokens = None
    for name in max_tokens_names:  # the first one given wins (chat: max_completion_tokens)
        max_tokens = _integer(body, name, 1, 1 << 31)
        if max_tokens is not None:
            break
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p == 0.0:
        raise _fail("top_p", "must be above 0")
    top_k = _integer(body, "top_k", 0, 1 << 31)
    return dict(
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=None if top_p == 1.0 else top_p,
        top_k=top_k or None,
        seed=_integer(body, "seed", 0, (1 << 64) - 1),
        stop=_stops(body, limits),
        stream=bool(stream),
        include_usage=bool(stream) and stream_options.get("include_usage", False),
    )


def _model(body: dict, model_id: str) -> None:
    model = body.get("model")
    if model is None:
        raise _fail("model", "missing (this server has one model: " + model_id + ")")
    if model != model_id:
        raise ApiError(
            404, f"the model {_quoted(model)} does not exist; this server has {model_id!r}",
            param="model", code="model_not_found",
        )  # fmt: skip


def _object(body: object) -> dict:
    if not isinstance(body, dict):
        raise ApiError(400, f"the request body must be a JSON object, not {type(body).__name__}")
    return body


def read_completion(body: object, model_id: str, limits: Limits) -> Request:
    """A /v1/completions body: `prompt` is a string (or a list holding one string)."""
    body = _object(body)
    _model(body, model_id)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if prompt is None:
        raise _fail("prompt", "missing")
    if not isinstance(prompt, str):
        raise _fail("prompt", f"expected a string (one prompt per request), got {_shown(prompt)}")
    if not prompt:
        raise _fail("prompt", "is empty")
    return Request(prompt=prompt, messages=None, **_options(body, limits, ("max_tokens",)))


def read_chat(body: object, model_id: str, limits: Limits) -> Request:
    """A /v1/chat/completions body: `messages`, each a role and a text content (a string or a list of
    text parts)."""
    body = _object(body)
    _model(body, model_id)
    messages = body.get("messages")
    if messages is None:
        raise _fail("messages", "missing")
    if not isinstance(messages, list) or not messages:
        raise _fail("messages", "expected a non-empty list of messages")
    if len(messages) > limits.messages:
        raise _fail("messages", f"{len(messages)} messages; at most {limits.messages}")
    checked = [_message(m, i, limits) for i, m in enumerate(messages)]
    return Request(
        prompt=None, messages=checked, **_options(body, limits, ("max_completion_tokens", "max_tokens"))
    )


def _message(message: object, i: int, limits: Limits) -> dict:
    where = f"messages[{i}]"
    if not isinstance(message, dict):
        raise _fail(where, f"expected an object with a role and a content, got {_shown(message)}")
    role = message.get("role")
    if role not in ROLES:
        raise _fail(f"{where}.role", f"{_shown(role)}; expected one of {', '.join(ROLES)}")
    content = message.get("content")
    if isinstance(content, list):  # text parts: [{"type": "text", "text": "…"}, …]
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                   for p in content):  # fmt: skip
            raise _fail(f"{where}.content", "only text parts ({'type': 'text', 'text': …}) are supported")
        content = "".join(p["text"] for p in content)
    if not isinstance(content, str):
        raise _fail(f"{where}.content", f"expected a string, got {_shown(content)}")
    if len(content) > limits.message_chars:
        raise _fail(f"{where}.content", f"{len(content)} characters; at most {limits.message_chars}")
    return {"role": role, "content": content}


def reply_budget(request: Request, n_prompt: int, limits: Limits) -> int:
    """The most tokens the reply may have: what the request asks (else 16 for a completion, as
    OpenAI's default, and the server's limit for a chat reply), capped by the server's limit and by
    the context left after the prompt's `n_prompt` tokens. A prompt that leaves no room is a 400."""
    chat = request.messages is not None
    if n_prompt >= limits.ctx:
        raise ApiError(
            400, f"the prompt is {n_prompt} tokens long; this server's context is {limits.ctx} tokens "
            "(prompt and reply together)", param="messages" if chat else "prompt",
            code="context_length_exceeded",
        )  # fmt: skip
    default = limits.max_tokens if chat else COMPLETION_DEFAULT_TOKENS
    wanted = request.max_tokens if request.max_tokens is not None else default
    return min(wanted, limits.max_tokens, limits.ctx - n_prompt)


# ---------------------------------------------------------------------------------------------
# replies


def usage(n_prompt: int, n_reply: int) -> dict:
    return {"prompt_tokens": n_prompt, "completion_tokens": n_reply, "total_tokens": n_prompt + n_reply}


def _head(reply_id: str, kind: str, model_id: str) -> dict:
    return {"id": reply_id, "object": kind, "created": int(time.time()), "model": model_id}


def completion_reply(reply_id, model_id, text, reason, n_prompt, n_reply) -> dict:  # fmt: skip
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
    return _head(reply_id, "text_completion", model_id) | {
        "choices": [choice],
        "usage": usage(n_prompt, n_reply),
    }


def chat_reply(reply_id, model_id, text, reason, n_prompt, n_reply) -> dict:  # fmt: skip
    message = {"role": "assistant", "content": text}
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": reason}
    return _head(reply_id, "chat.completion", model_id) | {
        "choices": [choice],
        "usage": usage(n_prompt, n_reply),
    }


def completion_chunk(reply_id: str, model_id: str, text: str, reason: str | None = None) -> dict:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
    return _head(reply_id, "text_completion", model_id) | {"choices": [choice]}


def chat_chunk(reply_id: str, model_id: str, delta: dict, reason: str | None = None) -> dict:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
    return _head(reply_id, "chat.completion.chunk", model_id) | {"choices": [choice]}


def usage_chunk(reply_id: str, model_id: str, kind: str, n_prompt: int, n_reply: int) -> dict:
    """The last chunk of a stream with `stream_options.include_usage`: no choices, the counts."""
    return _head(reply_id, kind, model_id) | {"choices": [], "usage": usage(n_prompt, n_reply)}
