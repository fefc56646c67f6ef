"""``GET /metrics``: the Prometheus text format (prometheus-client).

Everything is read from the store at scrape time, so the figures survive restarts and agree
with the dashboard:

* per job (label ``job``): ``stragglers_job_slowdown`` (S of the latest analysed session),
  ``stragglers_job_waste`` (1 − 1/S), ``stragglers_job_step_time_seconds`` (its mean step
  time), ``stragglers_job_last_session_timestamp_seconds`` (when it was analysed),
  ``stragglers_job_sessions_total``, ``stragglers_job_open_alerts``;
* ``stragglers_sessions_ingested_total``, ``stragglers_sessions_failed_total``,
  ``stragglers_sessions_queued``, ``stragglers_sessions_running``,
  ``stragglers_alerts_sent_total``, ``stragglers_alerts_failed_total``,
  ``stragglers_records_total``, ``stragglers_detection_events_total``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from stragglers.service.store import Store

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class StoreCollector(Collector):
    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        jobs = self.store.jobs(sort="name", descending=False)
        per_job = {
            "slowdown": GaugeMetricFamily(
                "stragglers_job_slowdown", "Slowdown S of the job's latest analysed session",
                labels=["job"]),
            "waste": GaugeMetricFamily(
                "stragglers_job_waste", "GPU time wasted (1 - 1/S) in the latest session",
                labels=["job"]),
            "step": GaugeMetricFamily(
                "stragglers_job_step_time_seconds",
                "Mean step time of the job's latest analysed session", labels=["job"]),
            "last": GaugeMetricFamily(
                "stragglers_job_last_session_timestamp_seconds",
                "When the job's latest session was analysed (Unix time)", labels=["job"]),
            "alerts": GaugeMetricFamily(
                "stragglers_job_open_alerts", "Open alerts of the job", labels=["job"]),
        }
        sessions = CounterMetricFamily("stragglers_job_sessions",
                                       "Sessions uploaded for the job", labels=["job"])
        for j in jobs:
            sessions.add_metric([j.name], j.sessions)
            per_job["alerts"].add_metric([j.name], j.open_alerts)
            if j.last_slowdown is None:
                continue
            per_job["slowdown"].add_metric([j.name], j.last_slowdown)
            per_job["waste"].add_metric([j.name], j.last_waste or 0.0)
            per_job["step"].add_metric([j.name], j.last_step_time or 0.0)
            per_job["last"].add_metric([j.name], j.last_done_at or 0.0)
        yield from per_job.values()
        yield sessions
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


def registry_for(store: Store) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
