"""Running `toycards serve`: the listening socket, uvicorn, and stopping on SIGINT or SIGTERM.

Owns: `exposure_warning` (the line said when the address is reachable from other machines), `bind`
(the socket, bound before the model loads so that a busy port is one error line at once), and
`serve` (the scheduler's thread and uvicorn on that socket until a signal). The first SIGINT or
SIGTERM stops accepting connections, answers waiting requests with a 503 and lets the replies being
generated finish (for at most `GRACE_SECONDS`); a second one cancels them. Either way the process
exits with status 0.
Leaves out: the endpoints (app.py), loading the model and the command's options (cli/serve.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
import socket
import threading

import uvicorn

from toycards.errors import ToycardsError
from toycards.serve.app import Served, build_app

GRACE_SECONDS = 30  # for the replies in progress when a first signal stops the server
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exposure_warning(host: str) -> str | None:
    """A one-line warning when `host` is not a loopback address (None for 127.0.0.1, ::1 and a name
    that resolves to loopback addresses only, such as localhost)."""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
        if all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses):
            return None
    except (OSError, ValueError, UnicodeError):  # an address that cannot be bound fails in `bind`
        pass
    return (
        f"warning: {host} is reachable from other machines, and this server has no authentication:"
        " anyone who can connect can use the model"
    )


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (port 0: a free one), not yet listening."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except (OSError, UnicodeError) as e:
        raise ToycardsError(f"cannot listen on {host}:{port}: {getattr(e, 'strerror', None) or e}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise ToycardsError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


def url_of(sock: socket.socket) -> str:
    """The base URL of the OpenAI API on a bound socket: http://HOST:PORT/v1."""
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"


class _Server(uvicorn.Server):
    """uvicorn's server with this command's signal handling: uvicorn raises a caught signal again
    once it has shut down (a SIGTERM would then kill the process, a SIGINT end it in a traceback);
    a server stopped on purpose exits 0."""

    def __init__(self, config: uvicorn.Config, served: Served) -> None:
        super().__init__(config)
        self.served = served

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        loop = asyncio.get_running_loop()

        def on_signal(sig, frame) -> None:  # only flags and a call for the loop: a handler runs anywhere
            scheduler = self.served.scheduler
            if self.should_exit:
                self.force_exit = True
                loop.call_soon_threadsafe(scheduler.close, 0)
            else:
                self.should_exit = True
                loop.call_soon_threadsafe(scheduler.stop_admitting)

        previous = {sig: signal.signal(sig, on_signal) for sig in _SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def serve(served: Served, sock: socket.socket, verbose: bool = False, on_ready=None) -> None:
    """Serve on `sock` (bound by `bind`) until SIGINT or SIGTERM; returns once stopped. `on_ready()`
    is called once the socket listens (connections made from then on wait to be accepted)."""
    config = uvicorn.Config(
        build_app(served),
        lifespan="off",
        log_level="info" if verbose else "warning",
        access_log=verbose,
        timeout_graceful_shutdown=GRACE_SECONDS,
        limit_concurrency=served.scheduler.parallel + served.scheduler.max_waiting + 64,
        server_header=False,
    )
    served.scheduler.start()
    try:
        sock.listen(128)
        if on_ready is not None:
            on_ready()
        _Server(config, served).run(sockets=[sock])
    finally:
        served.scheduler.close()
        sock.close()
