"""Running the app: one uvicorn server on a socket bound here (so that ``--port 0`` picks a
free port and the line printed names it), holding the data folder's lock.

Slow and idle clients are bounded here (the settings of :class:`ConnectionLimits`, options of
``stragglers serve``):

* **connections**: at most ``max_connections`` open at once, so file descriptors never run
  out whatever clients do. At the limit a new connection takes the place of the oldest one
  that has been waiting for its request headers for a second or more (``408``, closed);
  when there is none (every connection is in a request), the new one is closed unanswered.
  The process's open-files limit is raised to fit (up to its hard limit; ``max_connections``
  is lowered, with a warning, when the hard limit is too low);
* **headers**: a request's headers must arrive within ``header_timeout_s`` of its first byte
  (of the connection, for a first request), else ``408`` and the connection is closed — a
  client that opens connections and never finishes a request holds each one that long at
  most. Headers are at most 16 KiB (h11's bound; more gets ``400``);
* **body**: a request body that stalls — no byte for ``body_timeout_s`` while the server
  waits for it — gets ``408`` and the connection is closed
  (:class:`~stragglers.service.app.BodyTimeout`, only while the body is still arriving);
* **keep-alive**: an idle connection between requests is closed after ``keep_alive_s``.

What these cost in the log: connections closed at the limit are counted and logged at most
once a minute, timeouts and clients that go away mid-request at debug level, repeated
uvicorn warnings (an invalid request) at most 5 a minute each. No traceback for any of them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import resource
import socket
import sys
import time
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from stragglers.errors import InputError
from stragglers.service.app import create_app
from stragglers.service.datadir import DataDir
from stragglers.service.state import ConnectionLimits, ServiceConfig

log = logging.getLogger("stragglers.service")

#: File descriptors kept for the database, uploads, worker pipes and logs besides
#: connections.
FD_RESERVE = 256
#: At the connection limit, a connection waiting this long for its request headers may be
#: closed to make room (one accepted a moment ago may have its headers on the way).
EVICT_AFTER_S = 1.0


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit TCP_NODELAY: a small response sent as headers + body
    # would otherwise wait for the client's delayed ACK (40 ms) under Nagle's algorithm.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InputError(f"--host {host} --port {port}: cannot listen there "
                         f"({exc.strerror or exc})") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class _Tally:
    """Counts an event and logs it at most once per ``every_s`` (with the count since)."""

    def __init__(self, message: str, every_s: float = 60.0) -> None:
        self.message = message
        self.every_s = every_s
        self.total = 0
        self._since = 0
        self._last = -float("inf")

    def add(self) -> None:
        self.total += 1
        self._since += 1
        now = time.monotonic()
        if now - self._last >= self.every_s:
            log.warning(self.message, self._since)
            self._since, self._last = 0, now


def _late(what: str) -> bytes:
    body = b'{"error": "%s"}' % what.encode()
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(body) + body)


#: What a connection whose request headers did not arrive in time gets before it closes, and
#: one closed (still without its headers) to make room for a new connection at the limit.
TIMEOUT_408 = _late("the request headers did not arrive within the timeout")
EVICTED_408 = _late("the request headers did not arrive before the server needed the "
                    "connection for another client")


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header timeout and a connection limit (see the module
    doc); ``limits`` and ``waiting`` (the server's connections waiting for request headers,
    oldest first) are set on a subclass by :func:`guarded_protocol`.

    At the limit, a new connection takes the place of the oldest one that is still waiting
    for its request headers (idle between requests, or slow to send them) for
    :data:`EVICT_AFTER_S` or more: that one gets ``408`` and is closed, so stalled
    connections cannot lock clients out; when there is none (every connection is in a
    request, its headers in), the new one is closed unanswered."""

    limits = ConnectionLimits()
    waiting: dict[GuardedH11Protocol, None] = {}
    refused = _Tally("refused %d connection(s) at the server's limit of open connections "
                     "(--max-connections), every one busy with a request (counted since this "
                     "was last logged; at most once a minute)")
    evicted = _Tally("closed %d connection(s) that had not sent their request headers to "
                     "make room for new ones at the server's limit of open connections "
                     "(--max-connections) (counted since this was last logged; at most once "
                     "a minute)")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._waiting_since = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections and not self._evict_one():
            self.refused.add()
            transport.abort()  # connection_lost follows and forgets it
            return
        self._wait_for_headers(timed=True)

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        super().data_received(data)
        if self.cycle is not cycle:  # a request's headers arrived
            self._got_headers()
        elif self._header_timer is None and (cycle is None or cycle.response_complete):
            self._wait_for_headers(timed=True)  # the first bytes of the next request

    def on_response_complete(self) -> None:
        super().on_response_complete()  # arms the keep-alive timer, may start a pipelined one
        if not self.transport.is_closing() and (self.cycle is None
                                                or self.cycle.response_complete):
            self._wait_for_headers(timed=False)  # idle: the keep-alive timer closes it

    def connection_lost(self, exc: Exception | None) -> None:
        self._got_headers()
        super().connection_lost(exc)

    def _wait_for_headers(self, timed: bool) -> None:
        self.waiting.pop(self, None)
        self.waiting[self] = None  # the newest
        self._waiting_since = self.loop.time()
        if timed:
            if self._header_timer is not None:
                self._header_timer.cancel()
            self._header_timer = self.loop.call_later(self.limits.header_timeout_s,
                                                      self._headers_late)

    def _got_headers(self) -> None:
        self.waiting.pop(self, None)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _evict_one(self) -> bool:
        """Close the oldest connection waiting for its request headers for
        :data:`EVICT_AFTER_S` at least (a connection accepted a moment ago may have its
        headers on the way); False when there is none."""
        for old in self.waiting:  # oldest first
            if old is self or self.loop.time() - old._waiting_since < EVICT_AFTER_S:
                return False
            self.evicted.add()
            old._close_with(EVICTED_408)
            return True
        return False

    def _headers_late(self) -> None:
        self._header_timer = None
        log.debug("closing a connection whose request headers did not arrive in %g s",
                  self.limits.header_timeout_s)
        self._close_with(TIMEOUT_408)

    def _close_with(self, answer: bytes) -> None:
        self._got_headers()
        if not self.transport.is_closing():
            self.transport.write(answer)
            self.transport.close()


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedH11Protocol]:
    """The protocol class of a server with these limits."""
    waiting: dict[GuardedH11Protocol, None] = {}
    return type("GuardedH11", (GuardedH11Protocol,), {"limits": limits, "waiting": waiting})


def fit_open_files(max_connections: int) -> int:
    """Raise this process's soft open-files limit to fit ``max_connections`` connections
    and :data:`FD_RESERVE` other files (up to the hard limit); returns the connections that
    fit (``max_connections``, or fewer when the hard limit is lower)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max_connections + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < want:
        fit = max(1, soft - FD_RESERVE)
        log.warning("--max-connections %d: only %d fit this process's open-files limit "
                    "(ulimit -n %d, %d kept for other files); using %d", max_connections, fit,
                    soft, FD_RESERVE, fit)
        return fit
    return max_connections


class RepeatFilter(logging.Filter):
    """Lets a message (by its format string) through at most ``most`` times per ``every_s``
    seconds; the next one let through says how many were left out."""

    def __init__(self, most: int = 5, every_s: float = 60.0) -> None:
        super().__init__()
        self.most = most
        self.every_s = every_s
        self._seen: dict[str, tuple[float, int, int]] = {}  # msg -> (window start, n, left out)

    def filter(self, record: logging.LogRecord) -> bool:
        key = str(record.msg)
        now = time.monotonic()
        start, n, dropped = self._seen.get(key, (now, 0, 0))
        if now - start >= self.every_s:
            start, n = now, 0
        if n >= self.most:
            self._seen[key] = (start, n, dropped + 1)
            return False
        self._seen[key] = (start, n + 1, 0)
        if dropped:
            record.msg = f"{record.msg} ({dropped} more like this left out of the log)"
        return True


def serve(config: ServiceConfig, host: str, port: int, public_url: str | None,
          log_level: str = "info") -> int:
    data = DataDir(config.data).create()
    shared = bool(config.db_url and config.db_url.startswith("postgresql"))
    data.lock(shared=shared)
    sock = bind(host, port)
    executor = None
    if config.scheduler is not None:
        from stragglers.service.cluster import DaskExecutor

        try:
            executor = DaskExecutor(config.scheduler)
        except BaseException:
            sock.close()
            raise
    real_port = sock.getsockname()[1]
    shown_host = f"[{host}]" if ":" in host else host
    url = f"http://{shown_host}:{real_port}"
    config = dataclasses.replace(config, public_url=public_url or url)
    logging.basicConfig(level=getattr(logging, log_level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    limits = config.limits
    fit = fit_open_files(limits.max_connections)
    if fit != limits.max_connections:
        limits = dataclasses.replace(limits, max_connections=fit)
        config = dataclasses.replace(config, limits=limits)
    def ready() -> None:
        # said once the app has started (database migrated, pools up), not when the socket
        # was bound: a client that waits for this line is answered at once
        print(f"stragglers serve: listening on {url} (data {data.root})", flush=True)

    app = create_app(config, executor, data, on_ready=ready)
    server = uvicorn.Server(uvicorn.Config(
        app, log_level=log_level, lifespan="on", access_log=False, timeout_graceful_shutdown=5,
        http=guarded_protocol(limits), timeout_keep_alive=limits.keep_alive_s))
    logging.getLogger("uvicorn.error").addFilter(RepeatFilter())
    server.run(sockets=[sock])
    return 0
