"""``GET /metrics``: the Prometheus text format (prometheus-client), following Prometheus's
naming conventions (unit suffixes ``_ratio``, ``_seconds``, ``_total``).

Per job (read from the store at scrape time, so they survive restarts and agree with the
dashboard), labelled ``training_job`` — never ``job``, which Prometheus sets to the scrape
target's name (a ``job`` label of ours would be renamed ``exported_job``) — plus the labels
of the job's latest session (``cluster=a`` …, names sanitised to ``[a-zA-Z_][a-zA-Z0-9_]*``;
a name Prometheus reserves gets a ``label_`` prefix). A job that sent no session and no
records for ``stale_s`` seconds is not exported any more, and its S, waste and step time
only while its latest analysed session is that recent, so a finished job's last S does not
stay forever and the alerts built on it clear:

* ``stragglers_job_slowdown_ratio`` (S of the latest analysed session),
  ``stragglers_job_waste_ratio`` (1 − 1/S), ``stragglers_job_step_time_seconds``,
  ``stragglers_job_last_session_timestamp_seconds`` (when it was analysed);
* ``stragglers_job_last_seen_timestamp_seconds`` (the latest session or record batch),
  ``stragglers_job_open_alerts``, ``stragglers_job_sessions_total`` (jobs with sessions);
* jobs that send records: ``stragglers_job_records_total``, ``stragglers_job_onsets_total``,
  ``stragglers_job_slow_ranks`` (ranks the detector finds slow now; 0: healthy),
  ``stragglers_job_slow_rank`` (1 for each of them, labelled ``rank``: the culprit; at
  most :data:`MAX_SLOW_RANKS` a job), ``stragglers_job_slow_since_timestamp_seconds``
  (while slow).

Service-wide: ``stragglers_sessions_ingested_total``, ``stragglers_sessions_failed_total``,
``stragglers_sessions_queued``, ``stragglers_sessions_running``,
``stragglers_alerts_sent_total``, ``stragglers_alerts_failed_total``,
``stragglers_records_total``, ``stragglers_detection_events_total``, and the histograms
``stragglers_http_request_duration_seconds{route,method,code}`` (this process's requests),
``stragglers_analysis_duration_seconds`` (the analysis in a worker process) and
``stragglers_session_latency_seconds`` (upload to result).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stragglers.service.overview import JobView, fresh, job_views
from stragglers.service.rows import JobRow, SessionRow
from stragglers.service.store import Store

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
JOB_LABEL = "training_job"
DEFAULT_STALE_S = 3600.0
#: Label names a session label must not take (Prometheus's own and ours).
RESERVED = frozenset({JOB_LABEL, "job", "instance", "le", "quantile", "rank"})
MAX_LABELS = 16
#: Slow ranks of one job exported one by one (``stragglers_job_slow_rank``), at most.
MAX_SLOW_RANKS = 64
_INVALID = re.compile(r"[^a-zA-Z0-9_]")

#: Request durations: 1 ms .. 60 s; analysis and upload-to-result: 0.1 s .. 1 h.
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0)
ANALYSIS_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
                    1800.0, 3600.0)


def label_name(key: str) -> str:
    """A valid Prometheus label name for a session label's key."""
    name = _INVALID.sub("_", key) or "_"
    if name[0].isdigit():
        name = "_" + name
    if name.startswith("__"):
        name = "label_" + name.lstrip("_")
    if name in RESERVED:
        name = "label_" + name
    return name


def job_labels(view: JobView) -> dict[str, str]:
    out = {JOB_LABEL: view.name}
    for key in sorted(view.labels)[:MAX_LABELS]:
        out.setdefault(label_name(key), str(view.labels[key]))
    return out


class _Family:
    """A metric family whose samples may carry different label sets (jobs have different
    session labels)."""

    def __init__(self, kind: type[GaugeMetricFamily | CounterMetricFamily], name: str,
                 doc: str) -> None:
        self.metric = kind(name, doc, labels=[])
        self.sample = name + ("_total" if kind is CounterMetricFamily else "")

    def add(self, labels: dict[str, str], value: float) -> None:
        self.metric.samples.append(Sample(self.sample, labels, float(value), None, None))


class StoreCollector(Collector):
    def __init__(self, store: Store, stale_s: float = DEFAULT_STALE_S,
                 records_seen: Callable[[JobRow], float | None] | None = None) -> None:
        self.store = store
        self.stale_s = stale_s
        self.records_seen = records_seen

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        views = fresh(job_views(self.store, self.store.jobs(sort="name", descending=False),
                                self.records_seen), self.stale_s, now)
        g, c = GaugeMetricFamily, CounterMetricFamily
        f = {
            "slowdown": _Family(g, "stragglers_job_slowdown_ratio",
                                "Slowdown S of the job's latest analysed session"),
            "waste": _Family(g, "stragglers_job_waste_ratio",
                             "Share of GPU time wasted (1 - 1/S) in the latest session"),
            "step": _Family(g, "stragglers_job_step_time_seconds",
                            "Mean step time of the job's latest analysed session"),
            "last": _Family(g, "stragglers_job_last_session_timestamp_seconds",
                            "When the job's latest session was analysed (Unix time)"),
            "seen": _Family(g, "stragglers_job_last_seen_timestamp_seconds",
                            "The job's latest session upload or record batch (Unix time)"),
            "sessions": _Family(c, "stragglers_job_sessions", "Sessions uploaded for the job"),
            "alerts": _Family(g, "stragglers_job_open_alerts", "Open alerts of the job"),
            "records": _Family(c, "stragglers_job_records", "Detection records of the job"),
            "onsets": _Family(c, "stragglers_job_onsets",
                              "Onsets found by the streaming detector"),
            "slow": _Family(g, "stragglers_job_slow_ranks",
                            "Ranks the streaming detector finds slow now (0: healthy)"),
            "slow_rank": _Family(g, "stragglers_job_slow_rank",
                                 "1 for each rank (label rank) the streaming detector finds "
                                 f"slow now (at most {MAX_SLOW_RANKS} a job)"),
            "since": _Family(g, "stragglers_job_slow_since_timestamp_seconds",
                             "Wall-clock time of the earliest open onset (while slow)"),
        }
        for v in views:
            j, labels = v.job, job_labels(v)
            f["seen"].add(labels, v.last_seen)
            if j.sessions:
                f["sessions"].add(labels, j.sessions)
            f["alerts"].add(labels, j.open_alerts)
            if j.last_slowdown is not None and now - (j.last_done_at or 0.0) <= self.stale_s:
                f["slowdown"].add(labels, j.last_slowdown)
                f["waste"].add(labels, j.last_waste or 0.0)
                f["step"].add(labels, j.last_step_time or 0.0)
                f["last"].add(labels, j.last_done_at or 0.0)
            if v.detection is not None:
                f["records"].add(labels, j.records)
                f["onsets"].add(labels, v.detection.onsets)
                f["slow"].add(labels, len(v.detection.slow_ranks))
                for rank in v.detection.slow_ranks[:MAX_SLOW_RANKS]:
                    f["slow_rank"].add({**labels, "rank": str(rank)}, 1)
                if v.detection.slow_since is not None:
                    f["since"].add(labels, v.detection.slow_since)
        yield from (x.metric for x in f.values())
        t = self.store.totals()
        yield CounterMetricFamily("stragglers_sessions_ingested",
                                  "Sessions accepted (202) since the store was created",
                                  value=t.sessions)
        yield CounterMetricFamily("stragglers_sessions_failed",
                                  "Sessions whose analysis failed", value=t.failed)
        yield GaugeMetricFamily("stragglers_sessions_queued", "Sessions waiting for analysis",
                                value=t.queued)
        yield GaugeMetricFamily("stragglers_sessions_running", "Sessions being analysed",
                                value=t.running)
        yield CounterMetricFamily("stragglers_alerts_sent", "Alert notifications delivered",
                                  value=t.alerts_sent)
        yield CounterMetricFamily("stragglers_alerts_failed",
                                  "Alert notifications that could not be delivered",
                                  value=t.alerts_failed)
        yield CounterMetricFamily("stragglers_records", "Detection records received",
                                  value=t.records)
        yield CounterMetricFamily("stragglers_detection_events",
                                  "Events of the streaming detector", value=t.events)


class Telemetry:
    """This process's own histograms (they start empty when the server starts, as
    Prometheus expects of counters and histograms)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Histogram(
            "stragglers_http_request_duration_seconds",
            "HTTP requests served, by route (the route's pattern), method and status code",
            ["route", "method", "code"], buckets=REQUEST_BUCKETS, registry=registry)
        self.analysis = Histogram(
            "stragglers_analysis_duration_seconds",
            "Analysis of a session in a worker process", buckets=ANALYSIS_BUCKETS,
            registry=registry)
        self.latency = Histogram(
            "stragglers_session_latency_seconds",
            "From a session's upload to its analysed (or failed) result",
            buckets=ANALYSIS_BUCKETS, registry=registry)

    def session_finished(self, row: SessionRow) -> None:
        if row.analysis_s is not None:
            self.analysis.observe(row.analysis_s)
        if row.finished_at is not None:
            self.latency.observe(max(0.0, row.finished_at - row.created_at))


class RequestMetrics:
    """ASGI middleware observing each request's duration (until its last body byte) in
    ``stragglers_http_request_duration_seconds``, labelled by the matched route's pattern
    (``/jobs/{job}``), never by the raw path."""

    def __init__(self, app: ASGIApp, telemetry: Callable[[], Telemetry | None]) -> None:
        self.app = app
        self.telemetry = telemetry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        code = 500

        async def tracked(msg: Message) -> None:
            nonlocal code
            if msg["type"] == "http.response.start":
                code = int(msg["status"])
            await send(msg)

        try:
            await self.app(scope, receive, tracked)
        finally:
            t = self.telemetry()
            if t is not None:
                route = getattr(scope.get("route"), "path", None) or "(unmatched)"
                t.requests.labels(route, scope["method"], str(code)).observe(
                    time.perf_counter() - start)


def registry_for(store: Store, stale_s: float = DEFAULT_STALE_S,
                 records_seen: Callable[[JobRow], float | None] | None = None
                 ) -> tuple[CollectorRegistry, Telemetry]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store, stale_s, records_seen))
    return registry, Telemetry(registry)


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
