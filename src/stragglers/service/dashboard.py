"""The dashboard: read-only, server-rendered pages (Jinja2) and the app's own static files;
no page loads anything from elsewhere (a Content-Security-Policy of 'self' says so to the
browser), so it works offline.

* ``/`` — jobs: labels, last S, waste, the culprit (the verdict's cause and workers, or the
  ranks the streaming detector finds slow), slow since (the open onset's time), open alerts;
  sortable (``?sort=…&order=…``), filtered by name (``?q=``) and label (``?label=k=v``),
  ``?page=`` by ``?per=`` (50);
* ``/jobs/{job}`` — S and waste over sessions, the latest verdict with its evidence, the
  worker heatmap (hover a cell: DP rank, stage, S_w), per-step heatmaps, attribution by
  op type, detection events on a time axis, alerts, sessions, downloads;
* ``/sessions/{ID}`` — one session: status, figures, heatmaps, downloads;
* ``/alerts`` — alert history;
* ``/grafana.json`` — the Grafana dashboard (``grafana/smon.json``) linking to this server;
* ``/sessions/{ID}/files/{name}`` — result.json, timelines, heatmap PNGs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import ChoiceLoader, Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from stragglers.service import views
from stragglers.service.api import public_doc, public_result
from stragglers.service.datadir import DOWNLOADS, SESSION_ID
from stragglers.service.overview import job_views
from stragglers.service.rows import DONE, SessionRow
from stragglers.service.state import Service
from stragglers.service.store import JOB_SORTS
from stragglers.viz.report import analysis_context

STATIC = Path(__file__).resolve().parent / "static"
SESSIONS_SHOWN = 50

env = Environment(loader=ChoiceLoader([PackageLoader("stragglers.service", "templates"),
                                       PackageLoader("stragglers.viz", "templates")]),
                  autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
env.globals.update(fmt=views.fmt, pct=views.pct, stamp=views.stamp)


def page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(env.get_template(name).render(**context), status_code=status)


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def _result(service: Service, s: SessionRow | None) -> dict[str, Any] | None:
    if s is None or s.status != DONE or s.result_dir is None:
        return None
    path = service.data.download(s.id, s.result_dir, "result.json")
    if path is None or not path.exists():
        return None
    doc: dict[str, Any] = public_doc(json.loads(path.read_text(encoding="utf-8")),
                                     s.upload_name)  # never the server's paths
    return doc


def _downloads(service: Service, s: SessionRow | None) -> list[str]:
    if s is None or s.result_dir is None:
        return []
    out = []
    for name in DOWNLOADS:
        path = service.data.download(s.id, s.result_dir, name)
        if path is not None and path.exists():
            out.append(name)
    return out


PER_PAGE = 50
MAX_PER_PAGE = 500


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    try:
        value = int(request.query_params.get(name, default))
    except ValueError:
        return default
    return min(max(value, low), high)


def _label_filter(text: str) -> tuple[str, str | None] | None:
    text = text.strip()
    if not text:
        return None
    key, sep, value = text.partition("=")
    return key.strip(), (value.strip() if sep else None)


def jobs_page(request: Request) -> Response:
    """The jobs, filtered by name (``q``: a substring, or a glob with * ? [) and label
    (``label``: ``key=value`` or ``key``), sorted, a page (``page``, ``per``) at a time."""
    service = _service(request)
    params = request.query_params
    sort = params.get("sort", "last")
    sort = sort if sort in JOB_SORTS or sort == "since" else "last"
    order = "asc" if params.get("order") == "asc" else "desc"
    name = params.get("q", "").strip()[:128]
    label_text = params.get("label", "").strip()[:128]
    label = _label_filter(label_text)
    rows = (service.store.jobs("name", False) if sort == "since"
            else service.store.jobs(sort, order == "desc"))
    views = [v for v in job_views(service.store, rows, service.activity)
             if v.matches(name, label)]
    if sort == "since":  # slow since: the jobs that are not slow last, either way
        slow = sorted((v for v in views if v.slow_since is not None),
                      key=lambda v: v.slow_since or 0.0, reverse=order == "desc")
        views = slow + [v for v in views if v.slow_since is None]
    per = _int_param(request, "per", PER_PAGE, 1, MAX_PER_PAGE)
    pages = max(1, -(-len(views) // per))
    number = _int_param(request, "page", 1, 1, pages)
    shown = views[(number - 1) * per: number * per]
    keep = {k: v for k, v in (("q", name), ("label", label_text), ("sort", sort),
                              ("order", order), ("per", str(per) if per != PER_PAGE else ""))
            if v}

    def link(**changes: str | int) -> str:
        return "/?" + urlencode({**keep, **{k: str(v) for k, v in changes.items()}})

    return page("jobs.html", jobs=shown, sort=sort, order=order, totals=service.store.totals(),
                q=name, label=label_text, page=number, pages=pages, matched=len(views),
                total=len(rows), link=link, filtered=bool(name or label))


def job_page(request: Request) -> Response:
    service = _service(request)
    name = request.path_params["job"]
    job = service.store.job(name)
    if job is None:
        return page("missing.html", 404, what=f"job {name}")
    (view,) = job_views(service.store, [job], service.activity)
    sessions = service.store.job_sessions(job.id, SESSIONS_SHOWN)
    latest = service.store.session(job.last_session) if job.last_session else None
    doc = _result(service, latest)
    return page("job.html", job=job, view=view, sessions=sessions, latest=latest,
                chart=views.series_chart(service.store.series(job.id)),
                timeline=views.events_timeline(service.store.events(job.id)),
                events=service.store.events(job.id, 20), alerts=service.store.alerts(job.id, 20),
                downloads=_downloads(service, latest), shown=SESSIONS_SHOWN,
                **analysis_context(doc, f"session {job.last_session} result.json"))


def session_page(request: Request) -> Response:
    service = _service(request)
    session_id = request.path_params["session"]
    s = service.store.session(session_id) if SESSION_ID.match(session_id) else None
    if s is None:
        return page("missing.html", 404, what=f"session {session_id[:40]}")
    doc = _result(service, s)
    return page("session.html", s=s, downloads=_downloads(service, s),
                **analysis_context(doc, f"session {s.id} result.json"))


def alerts_page(request: Request) -> Response:
    return page("alerts.html", alerts=_service(request).store.alerts(limit=500))


GRAFANA = Path(__file__).resolve().parent / "grafana" / "smon.json"


def grafana_dashboard(public_url: str) -> dict[str, Any]:
    """The Grafana dashboard (``grafana/smon.json``) with its ``smon_url`` variable set to
    this server's public URL, so its links lead to this server's job pages."""
    doc: dict[str, Any] = json.loads(GRAFANA.read_text(encoding="utf-8"))
    url = public_url.rstrip("/")
    for var in doc["templating"]["list"]:
        if var["name"] == "smon_url":
            var["query"] = url
            var["current"] = {"text": url, "value": url}
            var["options"] = [{"selected": True, "text": url, "value": url}]
    return doc


def grafana(request: Request) -> Response:
    doc = grafana_dashboard(_service(request).config.public_url)
    return JSONResponse(doc, headers={
        "content-disposition": 'attachment; filename="smon-grafana.json"'})


def download(request: Request) -> Response:
    service = _service(request)
    session_id, name = request.path_params["session"], request.path_params["name"]
    s = service.store.session(session_id) if SESSION_ID.match(session_id) else None
    path = (service.data.download(s.id, s.result_dir, name)
            if s is not None and s.result_dir is not None else None)
    if path is None or not path.exists():
        return page("missing.html", 404, what=f"file {name[:60]}")
    filename = f"{s.job if s else 'session'}-{session_id[:8]}-{name}"
    if name in ("result.json", "report.html") and s is not None:
        # the server's paths out: the result's source and outputs, the report's mentions
        text = path.read_text(encoding="utf-8")
        if name == "result.json":
            text, media = public_result(text, s.upload_name), "application/json"
        else:
            folder = service.data.session(s.id)
            text = (text.replace(str(folder / s.trace_file), s.upload_name)
                    .replace(str(path.parent) + "/", "").replace(str(folder), "session"))
            media = "text/html"
        return Response(text, media_type=media, headers={
            "Content-Disposition": f'attachment; filename="{filename}"'})
    return FileResponse(path, filename=filename)


ROUTES = [
    Route("/", jobs_page, methods=["GET"]),
    Route("/jobs/{job}", job_page, methods=["GET"]),
    Route("/sessions/{session}", session_page, methods=["GET"]),
    Route("/sessions/{session}/files/{name}", download, methods=["GET"]),
    Route("/alerts", alerts_page, methods=["GET"]),
    Route("/grafana.json", grafana, methods=["GET"]),
    # the dashboard's script here; the stylesheet it shares with report.html in viz/static
    Mount("/static", app=StaticFiles(directory=STATIC, packages=[("stragglers.viz", "static")]),
          name="static"),
]
