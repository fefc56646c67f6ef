"""The JSON API (``/api/v1``) and ``/metrics``. Dicts with string keys are made here, at the
HTTP edge, from the store's typed rows.

Writes (need the bearer token):

* ``POST /api/v1/sessions`` — multipart: ``trace`` (file: .parquet or .jsonl), ``meta``
  (file or text: metadata YAML), optional ``job``, ``labels`` (JSON object of strings) and
  ``key`` (a client's idempotency key: a retry with the same key returns the first
  session). → ``202 {"session": ID}`` (``200`` with ``"duplicate": true`` for a retry);
  ``400 {"error": ONE LINE}`` for a malformed upload (nothing is stored); ``413`` when too
  large.
* ``POST /api/v1/jobs/{job}/records`` — JSON lines of call/iteration records (the
  ``watch`` schema) → ``200 {"records": N, "events": [...]}``; a bad line → ``400`` with
  the line's message (nothing of the batch is stored). An ``Idempotency-Key`` header makes
  a retry of the batch return the first answer (``"duplicate": true``) instead of applying
  it twice. ``413`` over ``STRAGGLERS_MAX_RECORDS_BATCH`` records or
  ``STRAGGLERS_MAX_RECORDS_BYTES`` bytes.
* ``POST /api/v1/sessions/{ID}/retry`` — queue a failed session again → ``200 {"session",
  "status": "queued"}``; ``409`` when it is not failed; ``404``.

A full analysis queue (``STRAGGLERS_MAX_QUEUED_SESSIONS`` sessions waiting) answers an upload
``503`` with ``Retry-After`` before reading its body; a database error is a JSON ``503``
with ``Retry-After``, except a data error (a value of the request the database refuses: a
NUL in a text on PostgreSQL, a number beyond a column's range), a JSON ``400`` with nothing
stored; ``/healthz`` is ``503`` when the database cannot be reached. A client that goes away
before its body arrived is not answered and costs one debug line; a body that stalls gets
``408`` (:class:`~stragglers.service.app.BodyTimeout`).

Reads: ``GET /api/v1/sessions/{ID}`` → ``{"session", "job", "status", "error", ...,
"result": result.json | null}`` (``?result=0`` leaves the result out, for polling);
``GET /api/v1/jobs``; ``GET /api/v1/jobs/{job}`` (with its sessions); a job has its
``labels``, ``culprit``, ``slow_since``, ``last_seen`` and ``detection`` (the streaming
detector's state) as on the jobs page;
``GET /api/v1/jobs/{job}/events``; ``GET /api/v1/alerts``; ``GET /healthz``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from contextlib import aclosing
from dataclasses import asdict
from pathlib import PurePath
from typing import Any

from sqlalchemy.exc import DataError
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from stragglers.errors import InputError
from stragglers.limits import LIMITS, LimitError, limit
from stragglers.service.datadir import SESSION_ID, check_job_name
from stragglers.service.ingest import Upload, check_key, parse_labels
from stragglers.service.overview import job_views, view_doc
from stragglers.service.prometheus import CONTENT_TYPE, render
from stragglers.service.rows import AlertRow, EventRow, JobRow, SessionRow
from stragglers.service.state import Service
from stragglers.service.streams import BatchAnswer

log = logging.getLogger("stragglers.service")


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def session_doc(s: SessionRow) -> dict[str, Any]:
    return {"session": s.id, "job": s.job, "status": s.status, "error": s.error,
            "created_at": s.created_at, "started_at": s.started_at,
            "finished_at": s.finished_at, "attempts": s.attempts, "labels": s.labels,
            "upload": {"name": s.upload_name, "bytes": s.upload_bytes},
            "summary": None if s.slowdown is None else {
                "slowdown": s.slowdown, "waste": s.waste, "discrepancy": s.discrepancy,
                "trustworthy": s.trustworthy, "cause": s.cause, "confidence": s.confidence,
                "workers": list(s.workers), "n_workers": s.n_workers, "n_steps": s.n_steps,
                "n_ops": s.n_ops, "step_time": s.step_time, "analysis_s": s.analysis_s}}


def job_doc(j: JobRow) -> dict[str, Any]:
    return asdict(j)


def event_doc(e: EventRow) -> dict[str, Any]:
    return {"id": e.id, "received_at": e.received_at, "event": e.event.kind,
            **{k: v for k, v in e.event.detail.items()}}


def alert_doc(a: AlertRow) -> dict[str, Any]:
    d = asdict(a)
    d.pop("job_id")
    return d


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


#: Seconds a client is asked to wait (``Retry-After``) when the queue is full or the database
#: cannot be reached.
RETRY_QUEUE_S = 10
RETRY_DATABASE_S = 5


def unavailable(message: str, retry_after: int) -> JSONResponse:
    """503 with ``Retry-After``; the connection is closed (a body not read stays unread)."""
    return JSONResponse({"error": message}, status_code=503,
                        headers={"Retry-After": str(retry_after), "Connection": "close"})


def too_large(message: str, close: bool = True) -> JSONResponse:
    """413. ``close``: the connection is closed, so a body not read stays unread (the
    client sees a reset if it is still sending); else the server discards the rest of the
    body (read, not parsed nor stored) and the client gets the answer."""
    return JSONResponse({"error": message}, status_code=413,
                        headers={"Connection": "close"} if close else {})


class PartTooLarge(MultiPartException):
    """A multipart file field passed its limit while the body streamed."""


class UploadParser(MultiPartParser):
    """Starlette's streaming multipart parser (file fields spooled to temporary files on
    disk, 1 MiB in memory at most; other fields capped at ``max_part_size``) with a limit
    per file field, checked while the part streams: ``caps`` maps a field name to (the limit's
    name in :mod:`stragglers.limits`, how to name the field)."""

    def __init__(self, *args: Any, caps: dict[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._caps = {name: (limit(lim), lim, what) for name, (lim, what) in caps.items()}
        self._part_bytes = 0
        self._part: object = None

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        part = self._current_part
        cap = self._caps.get(part.field_name) if part.file is not None else None
        if cap is not None:
            if self._part is not part:
                self._part, self._part_bytes = part, 0
            self._part_bytes += end - start
            if self._part_bytes > cap[0]:
                name = part.file.filename if part.file is not None else None
                lim = LIMITS[cap[1]]
                raise PartTooLarge(f"{(name or cap[2])[:80]}: more than {cap[0]:,} {lim.what} "
                                   f"(the server's {lim.env})")
        super().on_part_data(data, start, end)


def database_error(request: Request, exc: Exception) -> Response:
    """A database error of a request: a value of the request that the database refuses (a
    data error: a NUL character in a text on PostgreSQL, a number out of a column's range)
    is the client's, a JSON 400 that a retry would get again (nothing of the request is
    stored); any other is a JSON 503 (the database is down or busy) with Retry-After."""
    orig = getattr(exc, "orig", None) or exc
    if isinstance(exc, DataError):
        why = (str(orig).strip().splitlines() or [""])[0][:200]
        return error(400, "the database refuses a value of this request "
                          f"({type(orig).__name__}: {why}); nothing was stored")
    return unavailable(f"the database cannot be reached or is busy ({type(orig).__name__}); "
                       "try again later", RETRY_DATABASE_S)


async def client_gone(request: Request, exc: Exception) -> Response:
    """The client closed the connection before its request body arrived (or stalled past
    the body timeout, which closes it): nothing to answer, nothing to log but one line at
    debug level (a traceback per dropped upload would flood the log)."""
    log.debug("%s %s: the client went away before its request body arrived",
              request.method, request.url.path)
    return Response(status_code=400, headers={"Connection": "close"})


async def post_session(request: Request) -> Response:
    service = _service(request)
    # the queue's bound is checked before the body is read
    cap = limit("queued_sessions")
    if await asyncio.to_thread(service.store.queued) >= cap:
        return unavailable(f"the analysis queue is full ({cap:,} sessions waiting; the "
                           "server's STRAGGLERS_MAX_QUEUED_SESSIONS); try again later",
                           RETRY_QUEUE_S)
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        return error(400, "not a valid multipart upload: expected Content-Type "
                          "multipart/form-data with fields 'trace' and 'meta'")
    try:
        async with aclosing(request.stream()) as stream:
            parser = UploadParser(request.headers, stream, max_files=2, max_fields=8,
                                  max_part_size=64 * 1024,
                                  caps={"meta": ("yaml_bytes", "meta")})
            form = await parser.parse()
    except PartTooLarge as exc:
        return too_large(exc.message, close=False)
    except MultiPartException as exc:
        return error(400, f"not a valid multipart upload: {exc.message}")
    try:
        trace, meta = form.get("trace"), form.get("meta")
        if not isinstance(trace, UploadFile):
            return error(400, "multipart field 'trace' (the trace file) is missing")
        if isinstance(meta, UploadFile):
            # the part streamed to disk, refused past its limit (UploadParser): reading it
            # now is bounded by STRAGGLERS_MAX_YAML_BYTES (the validator's own bound)
            meta_bytes, meta_name = await meta.read(), meta.filename or "meta.yaml"
        elif isinstance(meta, str):
            meta_bytes, meta_name = meta.encode(), "meta.yaml"
        else:
            return error(400, "multipart field 'meta' (the metadata YAML) is missing")
        job, labels, key = form.get("job"), form.get("labels"), form.get("key")
        try:
            up = Upload(
                trace=trace.file, trace_name=trace.filename or "trace.parquet",
                meta=meta_bytes, meta_name=meta_name,
                job=job if isinstance(job, str) and job else None,
                labels=parse_labels(labels if isinstance(labels, str) else None),
                key=check_key(key if isinstance(key, str) else
                              request.headers.get("idempotency-key")))
            session_id, created = await service.ingest.receive(up)
        except LimitError as exc:
            return too_large(str(exc))
        except InputError as exc:
            return error(400, str(exc))
    finally:
        await form.close()
    if not created:
        return JSONResponse({"session": session_id, "duplicate": True}, status_code=200)
    service.dispatcher.wake()
    return JSONResponse({"session": session_id}, status_code=202)


async def post_records(request: Request) -> Response:
    service = _service(request)
    job = request.path_params["job"]
    try:
        check_job_name(job, "job")
    except InputError as exc:
        return error(400, str(exc))
    try:
        key = check_key(request.headers.get("idempotency-key"), "header 'Idempotency-Key'")
    except InputError as exc:
        return error(400, str(exc))
    body = await request.body()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return error(400, f"records of job {job}: not UTF-8 (bad byte at offset {exc.start})")
    try:
        answer = await asyncio.to_thread(service.streams.ingest, job, text, key)
    except LimitError as exc:
        return too_large(str(exc))
    except InputError as exc:
        return error(400, str(exc))
    if answer.events:
        await asyncio.to_thread(_check_alerts, service, job, answer)
    doc: dict[str, Any] = {"records": answer.records,
                           "events": [event_doc(e) for e in answer.events]}
    if answer.duplicate:
        doc["duplicate"] = True
    return JSONResponse(doc)


def _check_alerts(service: Service, job: str, answer: BatchAnswer) -> None:
    """Check the onset rules on a batch's events. For a replayed batch (the server may have
    stopped between the batch's commit and its alerts), the events after the job's latest
    alerted event are checked again (an alert already open is deduplicated as usual)."""
    events = answer.events
    if answer.duplicate:
        last = service.store.last_alerted_event(events[0].job_id)
        events = [e for e in events if last is None or e.id > last]
    if events:
        service.alerter.events_stored(job, events)


async def post_retry(request: Request) -> Response:
    """Queue a failed session again (its attempts start over)."""
    service = _service(request)
    session_id = request.path_params["session"]
    if not SESSION_ID.match(session_id):
        return error(404, f"no session {session_id[:40]!r}")
    was = await asyncio.to_thread(service.store.retry, session_id)
    if was is None:
        return error(404, f"no session {session_id!r}")
    if was != "failed":
        return error(409, f"session {session_id} is {was}, not failed: nothing to retry")
    service.dispatcher.wake()
    return JSONResponse({"session": session_id, "status": "queued"})


def public_result(text: str, upload_name: str) -> str:
    """A result document as served: its ``source`` (the trace's path on the server) replaced
    by the uploaded file's name, its ``outputs`` (paths on the server) by file names."""
    doc = json.loads(text)
    if not isinstance(doc, dict):
        return text
    return json.dumps(public_doc(doc, upload_name))


def public_doc(doc: dict[str, Any], upload_name: str) -> dict[str, Any]:
    """See :func:`public_result` (on a parsed document)."""
    doc = dict(doc)
    if "source" in doc:
        doc["source"] = upload_name
    outputs = doc.get("outputs")
    if isinstance(outputs, dict):
        doc["outputs"] = {k: PurePath(v).name if isinstance(v, str) else v
                          for k, v in outputs.items()}
    return doc


def get_session(request: Request) -> Response:
    service = _service(request)
    session_id = request.path_params["session"]
    row = service.store.session(session_id) if SESSION_ID.match(session_id) else None
    if row is None:
        return error(404, f"no session {session_id[:40]!r}")
    doc = json.dumps(session_doc(row))
    result = "null"
    wanted = request.query_params.get("result", "1") != "0"
    if wanted and row.status == "done" and row.result_dir is not None:
        path = service.data.download(row.id, row.result_dir, "result.json")
        if path is not None and path.exists():
            result = public_result(path.read_text(encoding="utf-8"), row.upload_name)
    return Response(doc[:-1] + ', "result": ' + result + "}", media_type="application/json")


def get_jobs(request: Request) -> Response:
    service = _service(request)
    views = job_views(service.store, service.store.jobs(), service.activity)
    return JSONResponse({"jobs": [{**job_doc(v.job), **view_doc(v)} for v in views]})


def get_job(request: Request) -> Response:
    service = _service(request)
    job = service.store.job(request.path_params["job"])
    if job is None:
        return error(404, "no such job")
    rows = service.store.job_sessions(job.id)
    (view,) = job_views(service.store, [job], service.activity)
    return JSONResponse({**job_doc(job), **view_doc(view),
                         "session_list": [session_doc(s) for s in rows]})


def get_events(request: Request) -> Response:
    service = _service(request)
    job = service.store.job(request.path_params["job"])
    if job is None:
        return error(404, "no such job")
    return JSONResponse({"events": [event_doc(e) for e in service.store.events(job.id)]})


def get_alerts(request: Request) -> Response:
    return JSONResponse({"alerts": [alert_doc(a) for a in _service(request).store.alerts()]})


def get_metrics(request: Request) -> Response:
    return Response(render(_service(request).registry), media_type=CONTENT_TYPE)


async def healthz(request: Request) -> Response:
    """200 when the store answers; 503 (with ``Retry-After``) when it cannot be reached."""
    service = _service(request)
    try:
        queued = await asyncio.to_thread(service.store.queued)
    except Exception as exc:  # noqa: BLE001 - any failure of the store is "not healthy"
        orig = getattr(exc, "orig", None) or exc
        return JSONResponse(
            {"ok": False, "error": f"the database cannot be reached ({type(orig).__name__})",
             "database": service.store.dialect},
            status_code=503, headers={"Retry-After": str(RETRY_DATABASE_S)})
    return JSONResponse({"ok": True, "database": service.store.dialect,
                         "running": service.dispatcher.running, "queued": queued})


ROUTES = [
    Route("/api/v1/sessions", post_session, methods=["POST"]),
    Route("/api/v1/sessions/{session}", get_session, methods=["GET"]),
    Route("/api/v1/sessions/{session}/retry", post_retry, methods=["POST"]),
    Route("/api/v1/jobs", get_jobs, methods=["GET"]),
    Route("/api/v1/jobs/{job}", get_job, methods=["GET"]),
    Route("/api/v1/jobs/{job}/records", post_records, methods=["POST"]),
    Route("/api/v1/jobs/{job}/events", get_events, methods=["GET"]),
    Route("/api/v1/alerts", get_alerts, methods=["GET"]),
    Route("/metrics", get_metrics, methods=["GET"]),
    Route("/healthz", healthz, methods=["GET"]),
]
