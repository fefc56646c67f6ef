"""Running the app: one uvicorn server on a socket bound here (so that ``--port 0`` picks a
free port and the line printed names it), holding the data folder's lock."""

from __future__ import annotations

import dataclasses
import logging
import socket
import sys

import uvicorn

from stragglers.errors import InputError
from stragglers.service.app import create_app
from stragglers.service.datadir import DataDir
from stragglers.service.state import ServiceConfig


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
    app = create_app(config, executor, data)
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, lifespan="on",
                                           access_log=False, timeout_graceful_shutdown=5))
    print(f"stragglers serve: listening on {url} (data {data.root})", flush=True)
    server.run(sockets=[sock])
    return 0
