"""Bearer-token authentication and request-body limits, as ASGI middleware.

* Every write (any method but GET, HEAD, OPTIONS) needs ``Authorization: Bearer TOKEN``;
  with ``private`` every request does (but ``GET /healthz``), and reads also take HTTP basic
  auth with the token as the password (any user name), so that a browser can open the
  dashboard: a read without credentials gets 401 with ``WWW-Authenticate: Basic``, which
  makes the browser ask for them. Writes never take basic auth: a browser sends remembered
  basic credentials with any request to the server, even one a foreign page makes it send
  (cross-site request forgery), while a bearer header only a client that holds the token
  can set. The token is compared in constant time (:func:`hmac.compare_digest`). A request
  without it gets 401 before its body is read, so nothing of it is stored.
* A request body larger than its limit gets 413: at once when ``Content-Length`` says so,
  else as soon as the streamed body passes the limit.

Both answers close the connection (``Connection: close``), so the server does not go on
reading a body it refused.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import os
from collections.abc import Callable
from pathlib import Path

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stragglers.errors import InputError
from stragglers.inputs import read_text
from stragglers.limits import LIMITS

TOKEN_ENV = "STRAGGLERS_TOKEN"
MIN_TOKEN_CHARS = 16
READ_METHODS = ("GET", "HEAD", "OPTIONS")


def load_token(token_file: str | os.PathLike[str] | None, option: str = "--token-file") -> str:
    """The token from ``token_file`` (first line, stripped), else from $STRAGGLERS_TOKEN."""
    if token_file is not None:
        text = read_text(Path(token_file), "token file").strip()
        token = text.splitlines()[0].strip() if text else ""
        where = f"{option} {token_file}"
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        where = f"environment variable {TOKEN_ENV}"
        if not token:
            raise InputError(f"no token: give {option} FILE or set {TOKEN_ENV}")
    if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
        raise InputError(f"{where}: the token must be at least {MIN_TOKEN_CHARS} characters "
                         "without spaces")
    return token


def token_matches(header: str | None, token: str) -> bool:
    if header is None or not header.startswith("Bearer "):
        return False
    given = header[len("Bearer "):].strip().encode()
    return hmac.compare_digest(given, token.encode())


def basic_matches(header: str | None, token: str) -> bool:
    """HTTP basic credentials (any user name) whose password is the token."""
    if header is None or not header.startswith("Basic "):
        return False
    try:
        decoded = base64.b64decode(header[len("Basic "):].strip(), validate=True)
    except (binascii.Error, ValueError):
        return False
    _user, sep, password = decoded.partition(b":")
    return bool(sep) and hmac.compare_digest(password, token.encode())


async def _json_error(send: Send, status: int, message: str,
                      headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


class BearerAuth:
    def __init__(self, app: ASGIApp, token: str, private: bool = False) -> None:
        self.app = app
        self.token = token
        self.private = private

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        reading = scope["method"] in READ_METHODS if scope["type"] == "http" else True
        if scope["type"] != "http" or (reading and (not self.private
                                                    or scope["path"] == "/healthz")):
            await self.app(scope, receive, send)
            return
        header = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                header = value.decode("latin-1")
        if token_matches(header, self.token) or (reading and basic_matches(header,
                                                                          self.token)):
            await self.app(scope, receive, send)
            return
        if reading:  # a private dashboard: a browser asks for the token as a password
            await _json_error(send, 401, "this server is private: send the token as "
                              "'Authorization: Bearer TOKEN' or as the password of HTTP "
                              "basic auth (any user name)",
                              [(b"www-authenticate", b'Basic realm="stragglers", '
                                                     b'charset="UTF-8"')])
            return
        await _json_error(send, 401, "missing or wrong bearer token (send "
                          "'Authorization: Bearer TOKEN')",
                          [(b"www-authenticate", b'Bearer realm="stragglers"')])


class BodyTooLarge(Exception):
    """The streamed request body passed its limit."""


class BodyLimit:
    """413 for request bodies over ``limit_for(path)`` = (bytes, the limit's name in
    :mod:`stragglers.limits`)."""

    def __init__(self, app: ASGIApp, limit_for: Callable[[str], tuple[int, str]]) -> None:
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in READ_METHODS:
            await self.app(scope, receive, send)
            return
        cap, name = self.limit_for(scope["path"])
        lim = LIMITS[name]
        message = (f"the request body exceeds the limit of {cap:,} {lim.what} (the server's "
                   f"{lim.env})")
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > cap:
                await _json_error(send, 413, message)
                return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > cap:
                    raise BodyTooLarge
            return msg

        async def tracked(msg: Message) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, counted, tracked)
        except BodyTooLarge:
            if not started:
                await _json_error(send, 413, message)
