"""The push client: upload a profiling session, or a batch of records, to a
``stragglers serve`` server.

:func:`push_session` is what ``stragglers push`` and the probes call; :func:`push_records`
posts a records batch. Both send an idempotency key (``Idempotency-Key``) and retry on
connection errors and 5xx answers with the same key (waiting what ``Retry-After`` asks, at
most :data:`MAX_WAIT_S`), so a retry never makes a second session nor applies a batch twice.
Every failure is an :class:`InputError` with one line naming the server (a wrong URL or
token, a refused upload with the server's message).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from stragglers.errors import InputError
from stragglers.inputs import check_file

RETRIES = 3
MAX_WAIT_S = 30.0


def _wait(resp: httpx.Response | None, attempt: int) -> None:
    """Sleep before retry ``attempt + 1``: the server's Retry-After, else a backoff."""
    delay = 0.5 * 2**attempt
    if resp is not None and resp.headers.get("retry-after", "").isdigit():
        delay = float(resp.headers["retry-after"])
    time.sleep(min(delay, MAX_WAIT_S))


def _fail(server: str, resp: httpx.Response) -> InputError:
    try:
        message = resp.json().get("error", resp.text)
    except (json.JSONDecodeError, AttributeError):
        message = resp.text
    return InputError(f"{server}: HTTP {resp.status_code}: {str(message)[:500]}")


def push_session(trace: str | os.PathLike[str], meta: str | os.PathLike[str], server: str,
                 token: str, job: str | None = None, labels: dict[str, str] | None = None,
                 timeout: float = 600.0) -> str:
    """Upload ``trace`` with its metadata; returns the session id (queued for analysis)."""
    trace_p = check_file(trace, "trace")
    meta_text = check_file(meta, "metadata file").read_bytes()
    base = server.rstrip("/")
    key = uuid.uuid4().hex
    data: dict[str, Any] = {"key": key}
    if job is not None:
        data["job"] = job
    if labels:
        data["labels"] = json.dumps(labels)
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}
    error: str = ""
    for attempt in range(RETRIES):
        try:
            with trace_p.open("rb") as fh:
                files: dict[str, Any] = {"trace": (trace_p.name, fh, "application/octet-stream"),
                         "meta": (Path(meta).name, meta_text, "application/yaml")}
                resp = httpx.post(f"{base}/api/v1/sessions", data=data, files=files,
                                  headers=headers, timeout=timeout)
        except httpx.TransportError as exc:
            error = f"{type(exc).__name__}: {exc}"
            _wait(None, attempt)
            continue
        if resp.status_code in (200, 202):
            return str(resp.json()["session"])
        if resp.status_code >= 500 and attempt + 1 < RETRIES:
            _wait(resp, attempt)
            continue
        raise _fail(base, resp)
    raise InputError(f"{base}: cannot reach the server ({error})")


def push_records(lines: str | list[str], job: str, server: str, token: str,
                 key: str | None = None, timeout: float = 120.0) -> dict[str, Any]:
    """Post a batch of JSON-lines records of ``job``; returns the server's answer
    (``{"records", "events", "duplicate"?}``). ``key`` (default: a new random one) is sent
    as ``Idempotency-Key`` with every try, so a retry is never applied twice."""
    base = server.rstrip("/")
    body = (lines if isinstance(lines, str) else "".join(ln.rstrip("\n") + "\n"
                                                        for ln in lines)).encode()
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key or uuid.uuid4().hex,
               "Content-Type": "application/x-ndjson"}
    error = ""
    for attempt in range(RETRIES):
        try:
            resp = httpx.post(f"{base}/api/v1/jobs/{job}/records", content=body,
                              headers=headers, timeout=timeout)
        except httpx.TransportError as exc:
            error = f"{type(exc).__name__}: {exc}"
            _wait(None, attempt)
            continue
        if resp.status_code == 200:
            doc: dict[str, Any] = resp.json()
            return doc
        if resp.status_code >= 500 and attempt + 1 < RETRIES:
            _wait(resp, attempt)
            continue
        raise _fail(base, resp)
    raise InputError(f"{base}: cannot reach the server ({error})")


def session_status(server: str, session_id: str, result: bool = True,
                   timeout: float = 60.0) -> dict[str, Any]:
    """The server's document of a session (status, error, and the result unless
    ``result`` is false)."""
    base = server.rstrip("/")
    query = "" if result else "?result=0"
    try:
        resp = httpx.get(f"{base}/api/v1/sessions/{session_id}{query}", timeout=timeout)
    except httpx.TransportError as exc:
        raise InputError(f"{base}: cannot reach the server ({exc})") from None
    if resp.status_code != 200:
        raise _fail(base, resp)
    doc: dict[str, Any] = resp.json()
    return doc


def wait_session(server: str, session_id: str, timeout: float, poll: float = 0.5
                 ) -> dict[str, Any]:
    """Poll until the session is done or failed (or ``timeout`` seconds pass)."""
    end = time.monotonic() + timeout
    while True:
        doc = session_status(server, session_id, result=False)
        if doc["status"] in ("done", "failed") or time.monotonic() > end:
            return session_status(server, session_id)
        time.sleep(poll)
