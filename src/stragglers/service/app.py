"""The ASGI application of ``stragglers serve`` (Starlette): routes, middleware, and the
lifespan that opens the store and starts the worker pools, the dispatcher and the alert
sender."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from sqlalchemy.exc import DBAPIError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stragglers.limits import limit
from stragglers.service import api, dashboard
from stragglers.service.alerts import Alerter
from stragglers.service.auth import BearerAuth, BodyLimit
from stragglers.service.datadir import DataDir
from stragglers.service.dispatcher import Dispatcher, Executor, UploadChecker
from stragglers.service.ingest import Ingest, remove_orphans
from stragglers.service.overview import RecordActivity
from stragglers.service.prometheus import RequestMetrics, Telemetry, registry_for
from stragglers.service.rows import SessionRow
from stragglers.service.state import Service, ServiceConfig
from stragglers.service.store import Store, sqlite_url
from stragglers.service.streams import RecordStreams

log = logging.getLogger("stragglers.service")

#: Every page is self-contained: scripts, styles and images from this server only.
CSP = (b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       b"connect-src 'self'; frame-ancestors 'none'")


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                msg["headers"] = [*msg.get("headers", []),
                                  (b"content-security-policy", CSP),
                                  (b"x-content-type-options", b"nosniff"),
                                  (b"referrer-policy", b"no-referrer")]
            await send(msg)

        await self.app(scope, receive, with_headers)


class BodyStalled(Exception):
    """A request body sent nothing for the body timeout while the server waited for it."""


class BodyTimeout:
    """``receive`` of an HTTP request with a timeout while its body is still arriving: a
    body that sends nothing for ``timeout_s`` raises :class:`BodyStalled` in the route
    (answered ``408``, the connection closed). Once the body is complete, ``receive`` (which
    a streaming response awaits to learn of a disconnect) is not timed."""

    def __init__(self, app: ASGIApp, timeout_s: float) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        complete = False

        async def timed() -> Message:
            nonlocal complete
            if complete:
                return await receive()
            try:
                msg = await asyncio.wait_for(receive(), self.timeout_s)
            except TimeoutError:
                raise BodyStalled from None
            if msg["type"] != "http.request" or not msg.get("more_body", False):
                complete = True
            return msg

        await self.app(scope, timed, send)


def body_stalled(request: Request, exc: Exception) -> Response:
    log.debug("%s %s: the request body stalled; closing the connection", request.method,
              request.url.path)
    return JSONResponse({"error": "the request body sent nothing for the server's body "
                                  "timeout (stragglers serve --body-timeout-s)"},
                        status_code=408, headers={"Connection": "close"})


def body_limit(path: str) -> tuple[int, str]:
    name = "records_bytes" if path.endswith("/records") else "upload_bytes"
    return limit(name), name


def open_service(config: ServiceConfig, executor: Executor | None = None) -> Service:
    """Open the store (migrating it) and build the components; nothing is started.
    ``executor`` runs validation and analyses (default: this server's process pools)."""
    data = DataDir(config.data).create()
    store = Store.open(config.db_url or sqlite_url(data.root), config.lease_s)
    checks = executor
    if executor is not None and hasattr(executor, "for_upload_checks"):
        checks = executor.for_upload_checks()  # a Dask cluster's: ahead of analyses
    checker = UploadChecker(config.validators, checks)
    activity = RecordActivity(data.records_mtime)
    alerter = Alerter(store, config.alerts, config.public_url, activity)
    registry, telemetry = registry_for(store, config.metrics_stale_s, activity)

    def finished(row: SessionRow) -> None:
        telemetry.session_finished(row)
        if row.status == "done":
            alerter.session_done(row)

    dispatcher = Dispatcher(store, data, config.workers, finished, executor=executor)
    return Service(config=config, data=data, store=store, checker=checker,
                   dispatcher=dispatcher, ingest=Ingest(store, data, checker),
                   streams=RecordStreams(store, data, detector=config.detector), alerter=alerter,
                   registry=registry, telemetry=telemetry, activity=activity)


def create_app(config: ServiceConfig, executor: Executor | None = None,
               data: DataDir | None = None,
               on_ready: Callable[[], None] | None = None) -> Starlette:
    """The app; ``executor`` (a Dask cluster's) replaces the local process pools and is
    closed at the end; ``data`` is the data folder as locked by the server (when it is
    shared with other servers, the leftovers of a previous server are removed only by the
    first server to start on it); ``on_ready`` is called once start-up is over (the store
    open, the pools, dispatcher and alerter started): requests are answered from then on."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        service = await asyncio.to_thread(open_service, config, executor)
        app.state.service = service
        if data is None or data.alone:
            n = await asyncio.to_thread(service.data.clear_uploads)
            n += await asyncio.to_thread(remove_orphans, service.store, service.data)
            if n:
                log.warning("removed %d incomplete upload(s) of the previous server", n)
        if data is not None:
            data.share()
        await service.checker.start()
        await service.dispatcher.start()
        service.alerter.start()
        if on_ready is not None:
            on_ready()
        try:
            yield
        finally:
            await service.dispatcher.stop()
            service.checker.close()
            service.alerter.stop()
            if executor is not None:
                executor.close()
            service.store.close()

    def telemetry() -> Telemetry | None:
        service: Service | None = getattr(app.state, "service", None)
        return None if service is None else service.telemetry

    app = Starlette(
        routes=[*api.ROUTES, *dashboard.ROUTES],
        middleware=[Middleware(RequestMetrics, telemetry=telemetry),
                    Middleware(GZipMiddleware, minimum_size=64 * 1024, compresslevel=5),
                    Middleware(SecurityHeaders),
                    Middleware(BearerAuth, token=config.token, private=config.private),
                    Middleware(BodyTimeout, timeout_s=config.limits.body_timeout_s),
                    Middleware(BodyLimit, limit_for=body_limit)],
        exception_handlers={DBAPIError: api.database_error, ClientDisconnect: api.client_gone,
                            BodyStalled: body_stalled},
        lifespan=lifespan)
    return app
