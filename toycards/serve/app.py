"""The HTTP side of `toycards serve`: a Starlette app with OpenAI's endpoints for one model.

Owns: the routes (`GET /health`, `GET /v1/models`, `GET /v1/models/{id}`, `POST /v1/completions`,
`POST /v1/chat/completions`), the checks every request passes first (`_guarded`: on a loopback
address, a Host header that names one; a POST body declared as JSON), reading a request body
within its size cap, tokenizing (and rendering the chat template) on a worker thread, and the
reply: one JSON body, or server-sent events (`data: {chunk}` … `data: [DONE]`) sent as the tokens
come. Every error is OpenAI's error object with its HTTP status, and names the model's file by its
name alone (clients do not learn server paths). A client that disconnects cancels its generation.
Leaves out: checking request fields (protocol.py), generation (scheduler.py), sockets and signals
(server.py). Nothing here calls the model: the event loop never waits on a forward pass.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import uuid
from dataclasses import dataclass

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from toycards.errors import ToycardsError
from toycards.serve import protocol
from toycards.serve.protocol import ApiError, Limits
from toycards.serve.scheduler import Job, Scheduler
from toycards.serve.sequence import Failed

_STREAM_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


@dataclass
class Served:
    """What the app serves: the model, its public id, the limits and the scheduler that runs it."""

    model: object
    model_id: str
    limits: Limits
    scheduler: Scheduler
    created: int  # the model's "created" time: the file's modification time
    loopback: bool = True  # listening on a loopback address: only requests naming one are answered

    def client_text(self, message: str) -> str:
        """`message` with the model file's path shortened to its name."""
        path = str(getattr(self.model, "path", "") or "")
        return message.replace(path, os.path.basename(path)) if path else message


def _error(e: ApiError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


async def _api_error(request: HttpRequest, e: ApiError) -> JSONResponse:
    return _error(e)


async def _http_error(request: HttpRequest, e: HTTPException) -> JSONResponse:
    kind = "not_found_error" if e.status_code == 404 else "invalid_request_error"
    message = f"{request.method} {request.url.path}: {e.detail}"
    return JSONResponse(ApiError(e.status_code, message, kind).body(), e.status_code, headers=e.headers)


async def _internal_error(request: HttpRequest, e: Exception) -> JSONResponse:
    return _error(ApiError(500, f"internal error: {type(e).__name__}", "server_error"))


async def read_json(request: HttpRequest, limits: Limits) -> object:
    """The request's JSON body: a 415 unless declared as JSON, a 413 past `limits.body_bytes` (read no
    further), a 400 if not JSON."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        raise ApiError(
            415, "send the body as JSON, with the header Content-Type: application/json",
            code="unsupported_media_type",
        )  # fmt: skip
    too_big = ApiError(413, f"the request body is over {limits.body_bytes} bytes", code="request_too_large")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limits.body_bytes:
        raise too_big
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limits.body_bytes:
            raise too_big
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except (ValueError, RecursionError) as e:  # RecursionError: arrays nested thousands deep
        detail = str(e).splitlines()[0][:200] if isinstance(e, ValueError) else "nested too deep"
        raise ApiError(400, f"the request body is not valid JSON: {detail}", code="invalid_json") from None


def build_app(served: Served) -> Starlette:
    """The ASGI app serving `served`."""
    api = _Endpoints(served)
    routes = [
        Route("/health", api.health),
        Route("/v1/models", api.models),
        Route("/v1/models/{model:path}", api.one_model),
        Route("/v1/completions", api.completions, methods=["POST"]),
        Route("/v1/chat/completions", api.chat_completions, methods=["POST"]),
    ]
    handlers = {ApiError: _api_error, HTTPException: _http_error, Exception: _internal_error}
    app = Starlette(routes=routes, exception_handlers=handlers)
    return _guarded(app) if served.loopback else app


class _Endpoints:
    """The routes' handlers, for one served model."""

    def __init__(self, served: Served) -> None:
        self.served, self.tok = served, served.model.tokenizer
        self._limiter = None  # one request tokenizes at a time, beside the generating thread

    async def completions(self, http: HttpRequest) -> _Reply:
        served = self.served
        request = protocol.read_completion(
            await read_json(http, served.limits), served.model_id, served.limits
        )
        ids = await self._off_loop(lambda: self.tok.encode(request.prompt, parse_special=True))
        return self._reply(request, ids, chat=False)

    async def chat_completions(self, http: HttpRequest) -> _Reply:
        served, tok = self.served, self.tok
        request = protocol.read_chat(await read_json(http, served.limits), served.model_id, served.limits)
        if not tok.chat_template:
            name = os.path.basename(str(served.model.path))
            raise ApiError(
                400, f"{name} has no chat template (tokenizer.chat_template); use /v1/completions",
                code="no_chat_template",
            )  # fmt: skip

        def render_and_encode() -> list[int]:
            text = tok.apply_chat_template(request.messages, add_generation_prompt=True)
            return tok.encode(text, parse_special=True)

        return self._reply(request, await self._off_loop(render_and_encode), chat=True)

    async def models(self, http: HttpRequest) -> Response:
        return JSONResponse({"object": "list", "data": [self._model_entry()]})

    async def one_model(self, http: HttpRequest) -> Response:
        name = http.path_params["model"]
        if name != self.served.model_id:
            raise ApiError(404, f"the model {name[:100]!r} does not exist", code="model_not_found")
        return JSONResponse(self._model_entry())

    async def health(self, http: HttpRequest) -> Response:
        return JSONResponse({"status": "ok", "model": self.served.model_id, **self.served.scheduler.stats()})

    def _model_entry(self) -> dict:
        served = self.served
        return {"id": served.model_id, "object": "model", "created": served.created, "owned_by": "toycards"}

    async def _off_loop(self, fn):
        """`fn()` on a worker thread; a ToycardsError (a template's, the tokenizer's) is a 400."""
        self._limiter = self._limiter or anyio.CapacityLimiter(1)
        try:
            return await anyio.to_thread.run_sync(fn, limiter=self._limiter)
        except ToycardsError as e:
            raise ApiError(400, self.served.client_text(str(e))) from None

    def _reply(self, request: protocol.Request, ids: list[int], chat: bool) -> _Reply:
        """Queue the generation of `request` from the prompt `ids`; the response that sends it."""
        budget = protocol.reply_budget(request, len(ids), self.served.limits)
        job = Job(request, ids, budget, asyncio.get_running_loop())
        self.served.scheduler.submit(job)
        return _Reply(self.served, job, request, chat)


def _guarded(app):
    """`app`, answering only requests whose Host header names a loopback address (or none): a web page
    whose domain name its owner makes resolve to 127.0.0.1 (DNS rebinding) would otherwise reach a
    server on this machine as a site of its own, and read its replies."""

    async def guarded(scope, receive, send) -> None:
        host = dict(scope.get("headers", ())).get(b"host") if scope["type"] == "http" else None
        if host is not None and not _names_loopback(host.decode("latin-1")):
            message = "this server answers requests for localhost, 127.0.0.1 or [::1] only"
            await _send_json(send, 403, ApiError(403, message, code="host_not_allowed").body())
            return
        await app(scope, receive, send)

    return guarded


def _names_loopback(host: str) -> bool:
    """Whether a Host header ("localhost:8080", "127.0.0.1", "[::1]:8080") names a loopback address.

    >>> [_names_loopback(h) for h in ("localhost:8080", "[::1]:80", "127.0.0.2", "evil.example:8080")]
    [True, True, True, False]
    """
    name = host[1 : host.find("]")] if host.startswith("[") else host.rsplit(":", 1)[0]
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class _Reply:
    """The response to a generation request: the whole reply as one JSON body, or (`stream`) a
    stream of chunks as server-sent events. It waits for the job's first event before it answers, so
    that a job that fails before any text (a 503 at shutdown) is an HTTP error; a client that
    disconnects, or a server that stops the response, cancels the job."""

    def __init__(self, served: Served, job: Job, request: protocol.Request, chat: bool) -> None:
        self.served, self.job, self.request, self.chat = served, job, request, chat
        self.reply_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"

    async def __call__(self, scope, receive, send) -> None:
        watch = asyncio.ensure_future(_disconnected(receive))
        work = asyncio.ensure_future(self._stream(send) if self.request.stream else self._whole(send))
        try:
            await asyncio.wait((watch, work), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.job.cancel()  # a no-op once the job has finished
            watch.cancel()
            work.cancel()
            _, failure = await asyncio.gather(watch, work, return_exceptions=True)
        if isinstance(failure, Exception) and not isinstance(failure, OSError):  # OSError: the client left
            raise failure

    async def _whole(self, send) -> None:
        pieces = []
        while isinstance(event := await self.job.events.get(), str):
            pieces.append(event)
        if isinstance(event, Failed):
            await self._send_error(send, event.error)
            return
        make = protocol.chat_reply if self.chat else protocol.completion_reply
        body = make(self.reply_id, self.served.model_id, "".join(pieces), event.reason, event.n_prompt,
                    event.n_reply)  # fmt: skip
        await _send_json(send, 200, body)

    async def _stream(self, send) -> None:
        event = await self.job.events.get()
        if isinstance(event, Failed):
            await self._send_error(send, event.error)
            return
        headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
        headers += [(k.encode(), v.encode()) for k, v in _STREAM_HEADERS.items()]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if self.chat:
            await self._event(send, self._chunk({"role": "assistant", "content": ""}))
        while isinstance(event, str):
            await self._event(send, self._chunk({"content": event} if self.chat else event))
            event = await self.job.events.get()
        if isinstance(event, Failed):
            await self._event(send, _error_body(self.served, event.error))
        else:
            await self._event(send, self._chunk({} if self.chat else "", event.reason))
            if self.request.include_usage:
                kind = "chat.completion.chunk" if self.chat else "text_completion"
                usage = protocol.usage_chunk(self.reply_id, self.served.model_id, kind, event.n_prompt,
                                             event.n_reply)  # fmt: skip
                await self._event(send, usage)
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _chunk(self, content, reason: str | None = None) -> dict:
        if self.chat:
            return protocol.chat_chunk(self.reply_id, self.served.model_id, content, reason)
        return protocol.completion_chunk(self.reply_id, self.served.model_id, content, reason)

    async def _event(self, send, body: dict) -> None:
        data = b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"
        await send({"type": "http.response.body", "body": data, "more_body": True})

    async def _send_error(self, send, error: Exception) -> None:
        status = error.status if isinstance(error, ApiError) else 500
        await _send_json(send, status, _error_body(self.served, error))


def _error_body(served: Served, error: Exception) -> dict:
    if not isinstance(error, ApiError):
        error = ApiError(500, f"internal error: {type(error).__name__}", "server_error")
    body = error.body()
    body["error"]["message"] = served.client_text(body["error"]["message"])
    return body


async def _send_json(send, status: int, body: dict) -> None:
    data = json.dumps(body, ensure_ascii=False).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})


async def _disconnected(receive) -> None:
    """Return when the client disconnects (the request body has been read: nothing else arrives)."""
    while (await receive())["type"] != "http.disconnect":
        pass
