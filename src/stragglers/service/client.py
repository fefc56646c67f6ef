"""The push client: upload a profiling session, or a batch of records, to a
``stragglers serve`` server.

:func:`push_session` is what ``stragglers push`` and the probes call; :func:`push_records`
posts a records batch. Both send an idempotency key (``Idempotency-Key``) and retry on
connection errors, ``408``, ``429`` and 5xx answers with the same key — waiting what
``Retry-After`` asks, else backing off 0.5, 1, 2, 4 s then every :data:`MAX_BACKOFF_S` — for
``retry_s`` seconds (:data:`RETRY_S` by default, ``$STRAGGLERS_PUSH_RETRY_S`` when set), so a
server that restarts meanwhile (seconds) gets the upload, and a retry never makes a second
session nor applies a batch twice. The key is derived from what is sent (the trace, the
metadata and the job; the batch's lines and the job), so a rerun of the same push — the
client itself restarted — has the same key too: a stored upload is never stored twice.
Every failure is an :class:`InputError` with one line naming the server (a wrong URL or
token, a refused upload with the server's message).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from stragglers.errors import InputError
from stragglers.inputs import check_file

#: Seconds a push keeps retrying by default (a restart of the server takes 5-15 s).
RETRY_S = 60.0
RETRY_ENV = "STRAGGLERS_PUSH_RETRY_S"
#: The longest wait between two tries (a server back up is found within this).
MAX_BACKOFF_S = 5.0
#: Answers worth trying again (with the same key): timeouts, rate limits, server errors.
RETRY_STATUS = frozenset({408, 429})


def retry_budget(retry_s: float | None = None) -> float:
    """``retry_s``, else ``$STRAGGLERS_PUSH_RETRY_S``, else :data:`RETRY_S`."""
    if retry_s is not None:
        return float(retry_s)
    text = os.environ.get(RETRY_ENV, "").strip()
    if not text:
        return RETRY_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise InputError(f"{RETRY_ENV}={text[:40]!r}: expected seconds (a number >= 0)")
    return value


def upload_key(trace: Path, meta: bytes, job: str | None) -> str:
    """The idempotency key of an upload: a digest of the job, the metadata and the trace
    (read in 1 MiB blocks), the same for every try and every rerun of the same push."""
    h = hashlib.sha256(b"stragglers-push\0" + (job or "").encode() + b"\0")
    h.update(hashlib.sha256(meta).digest())
    with trace.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:40]


def records_key(body: bytes, job: str) -> str:
    """The idempotency key of a records batch: a digest of the job and the lines."""
    return hashlib.sha256(b"stragglers-records\0" + job.encode() + b"\0" + body
                          ).hexdigest()[:40]


def _fail(server: str, resp: httpx.Response) -> InputError:
    try:
        message = resp.json().get("error", resp.text)
    except (json.JSONDecodeError, AttributeError):
        message = resp.text
    return InputError(f"{server}: HTTP {resp.status_code}: {str(message)[:500]}")


def _retryable(resp: httpx.Response) -> bool:
    return resp.status_code >= 500 or resp.status_code in RETRY_STATUS


def _with_retries(send: Callable[[], httpx.Response], server: str,
                  retry_s: float) -> httpx.Response:
    """``send()`` until it gets an answer that is not worth retrying, for ``retry_s``
    seconds at most; returns that answer (or raises the last failure as one line)."""
    end = time.monotonic() + retry_s
    attempt = 0
    while True:
        resp: httpx.Response | None = None
        try:
            resp = send()
        except httpx.UnsupportedProtocol as exc:
            raise InputError(f"{server}: not an http(s) URL ({exc})") from None
        except httpx.TransportError as exc:
            error = f"{type(exc).__name__}: {exc}"
        else:
            if not _retryable(resp):
                return resp
        left = end - time.monotonic()
        if left <= 0:
            if resp is not None:
                raise _fail(server, resp)
            raise InputError(f"{server}: cannot reach the server (tried for {retry_s:g} s; "
                             f"{error})")
        delay = min(0.5 * 2**attempt, MAX_BACKOFF_S)
        if resp is not None and resp.headers.get("retry-after", "").isdigit():
            delay = float(resp.headers["retry-after"])
        time.sleep(min(delay, left))
        attempt += 1


def push_session(trace: str | os.PathLike[str], meta: str | os.PathLike[str], server: str,
                 token: str, job: str | None = None, labels: dict[str, str] | None = None,
                 timeout: float = 600.0, retry_s: float | None = None,
                 key: str | None = None) -> str:
    """Upload ``trace`` with its metadata; returns the session id (queued for analysis).
    ``retry_s``: how long to keep trying (see the module doc); ``key``: the idempotency key
    (default: derived from the trace, the metadata and ``job``)."""
    trace_p = check_file(trace, "trace")
    meta_text = check_file(meta, "metadata file").read_bytes()
    base = server.rstrip("/")
    budget = retry_budget(retry_s)
    key = key or upload_key(trace_p, meta_text, job)
    data: dict[str, Any] = {"key": key}
    if job is not None:
        data["job"] = job
    if labels:
        data["labels"] = json.dumps(labels)
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}

    def send() -> httpx.Response:
        with trace_p.open("rb") as fh:
            files: dict[str, Any] = {"trace": (trace_p.name, fh, "application/octet-stream"),
                                     "meta": (Path(meta).name, meta_text, "application/yaml")}
            return httpx.post(f"{base}/api/v1/sessions", data=data, files=files,
                              headers=headers, timeout=timeout)

    resp = _with_retries(send, base, budget)
    if resp.status_code in (200, 202):
        return str(resp.json()["session"])
    raise _fail(base, resp)


def push_records(lines: str | list[str], job: str, server: str, token: str,
                 key: str | None = None, timeout: float = 120.0,
                 retry_s: float | None = None) -> dict[str, Any]:
    """Post a batch of JSON-lines records of ``job``; returns the server's answer
    (``{"records", "events", "duplicate"?}``). ``key`` (default: derived from the lines and
    ``job``) is sent as ``Idempotency-Key`` with every try, so a retry is never applied
    twice; ``retry_s`` as for :func:`push_session`."""
    base = server.rstrip("/")
    body = (lines if isinstance(lines, str) else "".join(ln.rstrip("\n") + "\n"
                                                        for ln in lines)).encode()
    headers = {"Authorization": f"Bearer {token}",
               "Idempotency-Key": key or records_key(body, job),
               "Content-Type": "application/x-ndjson"}

    def send() -> httpx.Response:
        return httpx.post(f"{base}/api/v1/jobs/{job}/records", content=body,
                          headers=headers, timeout=timeout)

    resp = _with_retries(send, base, retry_budget(retry_s))
    if resp.status_code == 200:
        doc: dict[str, Any] = resp.json()
        return doc
    raise _fail(base, resp)


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
