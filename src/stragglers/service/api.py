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
  the line's message (nothing of the batch is stored).

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
from dataclasses import asdict
from typing import Any

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from stragglers.errors import InputError
from stragglers.service.datadir import SESSION_ID, check_job_name
from stragglers.service.ingest import Upload, check_key, parse_labels
from stragglers.service.metrics import CONTENT_TYPE, render
from stragglers.service.overview import job_views, view_doc
from stragglers.service.records import AlertRow, EventRow, JobRow, SessionRow
from stragglers.service.state import Service


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


async def post_session(request: Request) -> Response:
    service = _service(request)
    try:
        form = await request.form(max_files=2, max_fields=8, max_part_size=64 * 1024)
    except MultiPartException as exc:
        return error(400, f"not a valid multipart upload: {exc.message}")
    except HTTPException as exc:
        return error(exc.status_code, f"not a valid multipart upload: {exc.detail}")
    try:
        trace, meta = form.get("trace"), form.get("meta")
        if not isinstance(trace, UploadFile):
            return error(400, "multipart field 'trace' (the trace file) is missing")
        if isinstance(meta, UploadFile):
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
    body = await request.body()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return error(400, f"records of job {job}: not UTF-8 (bad byte at offset {exc.start})")
    try:
        n, stored = await asyncio.to_thread(service.streams.ingest, job, text)
    except InputError as exc:
        return error(400, str(exc))
    if stored:
        await asyncio.to_thread(service.alerter.events_stored, job, stored)
    return JSONResponse({"records": n, "events": [event_doc(e) for e in stored]})


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
            result = path.read_text(encoding="utf-8")
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


def healthz(request: Request) -> Response:
    service = _service(request)
    return JSONResponse({"ok": True, "running": service.dispatcher.running})


ROUTES = [
    Route("/api/v1/sessions", post_session, methods=["POST"]),
    Route("/api/v1/sessions/{session}", get_session, methods=["GET"]),
    Route("/api/v1/jobs", get_jobs, methods=["GET"]),
    Route("/api/v1/jobs/{job}", get_job, methods=["GET"]),
    Route("/api/v1/jobs/{job}/records", post_records, methods=["POST"]),
    Route("/api/v1/jobs/{job}/events", get_events, methods=["GET"]),
    Route("/api/v1/alerts", get_alerts, methods=["GET"]),
    Route("/metrics", get_metrics, methods=["GET"]),
    Route("/healthz", healthz, methods=["GET"]),
]
