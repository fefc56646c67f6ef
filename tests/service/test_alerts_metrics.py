"""Alerts through a real webhook receiver on loopback, record streams through the detector,
and the Prometheus output — against a real `stragglers serve` process."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.service.helpers import Job, Receiver, Server

pytestmark = pytest.mark.slow  # real processes or long runs (`pytest -m "not slow"` skips them)


def _alerts_file(tmp_path: Path, receiver: Receiver) -> Path:
    p = tmp_path / "alerts.yaml"
    p.write_text(f"""
webhook: {receiver.url}
realert_s: 3600
rules:
  - name: slow
    jobs: "train-*"
    slowdown: 1.1
  - name: slow-again
    jobs: "again-*"
    slowdown: 1.1
    realert_s: 0
  - name: bad-worker
    jobs: "worker-*"
    cause: worker
    confidence: 0.8
  - name: fail-slow
    onset: 0.15
""")
    return p


def _push(server: Server, job: Job, name: str) -> dict:
    r = server.upload(job.trace, job.meta, job=name)
    assert r.status_code == 202, r.text
    doc = server.wait(r.json()["session"])
    assert doc["status"] == "done", doc["error"]
    return doc


def _iteration_records(rank: int, n: int, level: float, start: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    durations = level * (1 + 0.01 * rng.standard_normal(n))
    return "".join(f'{{"rank": {rank}, "iter": {start + i}, "duration": {d:.6f}}}\n'
                   for i, d in enumerate(durations))


@pytest.fixture
def alerting(server_factory, receiver: Receiver, tmp_path: Path) -> Server:
    server: Server = server_factory(args=("--alerts", str(_alerts_file(tmp_path, receiver))))
    return server


def test_session_alerts_are_sent_deduplicated_and_resolved(
        alerting: Server, receiver: Receiver, slow_job: Job, healthy_job: Job):
    first = _push(alerting, slow_job, "train-a")
    body = receiver.take()
    assert body["rule"] == "slow" and body["job"] == "train-a" and body["kind"] == "session"
    assert body["cause"] == first["result"]["verdict"]["cause"] == "worker"
    assert body["slowdown"] == pytest.approx(first["result"]["slowdown"])
    assert body["session"] == first["session"] and body["repeat"] == 0
    assert body["verdict"]["workers"] == ["1,1"]
    assert body["url"].endswith("/jobs/train-a")
    # the same cause again within the re-alert interval: stored as suppressed, not sent
    _push(alerting, slow_job, "train-a")
    assert receiver.drain() == []
    (alert,) = [a for a in alerting.get("/api/v1/alerts").json()["alerts"]
                if a["job"] == "train-a"]
    assert alert["status"] == "sent" and alert["http_status"] == 204 and alert["attempts"] == 1
    assert alert["open"] and alert["suppressed"] == 1
    # a healthy session closes the alert, and the webhook hears of it (defect 8 of issue
    # 24: no resolved notification); a slow one after that alerts again
    _push(alerting, healthy_job, "train-a")
    alert = alerting.get("/api/v1/alerts").json()["alerts"][0]
    assert not alert["open"] and alert["resolved_at"] is not None
    resolved = receiver.take()
    assert resolved["status"] == "resolved" and resolved["alert"] == alert["id"]
    assert resolved["resolved_at"] == pytest.approx(alert["resolved_at"], abs=1.0)
    assert resolved["job"] == "train-a" and resolved["rule"] == "slow"
    _push(alerting, slow_job, "train-a")
    again = receiver.take()
    assert again["repeat"] == 0 and again["status"] == "firing"
    # with a re-alert interval of 0 every matching session is sent, counted as repeats
    _push(alerting, slow_job, "again-b")
    _push(alerting, slow_job, "again-b")
    assert [b["repeat"] for b in receiver.drain()] == [0, 1]
    # a job matching no pattern alerts nothing; the worker rule sees the worker verdict
    _push(alerting, slow_job, "quiet")
    assert receiver.drain() == []
    _push(alerting, slow_job, "worker-c")
    (body,) = receiver.drain()
    assert body["rule"] == "bad-worker" and body["verdict"]["confidence"] >= 0.8
    page = alerting.get("/alerts").text
    assert "train-a" in page and "again-b" in page and "suppressed" in page


def test_record_stream_onset_is_stored_shown_and_alerted(alerting: Server, receiver: Receiver):
    url = f"{alerting.url}/api/v1/jobs/stream-x/records"
    # 250 healthy iterations: past the detector's warm-up (20 iterations and settled)
    healthy = _iteration_records(0, 250, 1.0, 0, seed=1) + \
        _iteration_records(1, 250, 1.0, 0, seed=2)
    r = httpx.post(url, headers=alerting.headers(), content=healthy.encode(), timeout=60)
    assert r.status_code == 200 and r.json()["records"] == 500
    assert [e["event"] for e in r.json()["events"]] == []
    slow = _iteration_records(0, 60, 1.4, 250, seed=3)  # rank 0 loses 29% throughput
    r = httpx.post(url, headers=alerting.headers(), content=slow.encode(), timeout=60)
    onsets = [e for e in r.json()["events"] if e["event"] == "onset"]
    assert len(onsets) == 1 and onsets[0]["rank"] == 0
    assert onsets[0]["severity"] == pytest.approx(1 - 1 / 1.4, abs=0.05)
    body = receiver.take()
    assert body["rule"] == "fail-slow" and body["kind"] == "onset"
    assert body["event"]["rank"] == 0
    # a bad line rejects the whole batch: 400 naming the line, nothing stored
    before = alerting.get("/api/v1/jobs/stream-x").json()["records"]
    bad = _iteration_records(1, 3, 1.0, 250, seed=4) + '{"rank": 1, "iter": "x"}\n'
    r = httpx.post(url, headers=alerting.headers(), content=bad.encode(), timeout=60)
    assert r.status_code == 400 and ":4:" in r.json()["error"]
    assert alerting.get("/api/v1/jobs/stream-x").json()["records"] == before == 560
    events = alerting.get("/api/v1/jobs/stream-x/events").json()["events"]
    assert [e["event"] for e in events] == ["onset"]
    page = alerting.get("/jobs/stream-x").text
    assert 'id="events"' in page and "onset: rank 0" in page


def test_flapping_is_stored_and_alerted_by_an_onset_rule(alerting: Server,
                                                          receiver: Receiver):
    """A link slow (1.4x) for 30 iterations, fast for 30, three times: the detector's
    flapping event is kept, shown and alerted like an onset."""
    url = f"{alerting.url}/api/v1/jobs/flap-x/records"
    parts = [_iteration_records(0, 250, 1.0, 0, seed=1)]
    for k in range(3):
        parts.append(_iteration_records(0, 30, 1.4, 250 + 60 * k, seed=10 + k))
        parts.append(_iteration_records(0, 30, 1.0, 280 + 60 * k, seed=20 + k))
    r = httpx.post(url, headers=alerting.headers(), content="".join(parts).encode(),
                   timeout=60)
    assert r.status_code == 200
    kinds = [e["event"] for e in r.json()["events"]]
    assert kinds.count("flapping") == 1 and kinds.index("flapping") > kinds.index("onset")
    flap = next(e for e in r.json()["events"] if e["event"] == "flapping")
    assert flap["since_job_iteration"] in range(245, 256) and 0.3 < flap["slow_fraction"] < 0.7
    bodies = receiver.drain()  # onset, recovery resolves it, onset, recovery, flapping
    assert [(b["kind"], b["status"]) for b in bodies] == [
        ("onset", "firing"), ("onset", "resolved"), ("onset", "firing"),
        ("onset", "resolved"), ("onset", "firing")]
    assert "is flapping" in bodies[-1]["message"] and "is flapping" not in bodies[0]["message"]
    events = alerting.get("/api/v1/jobs/flap-x/events").json()["events"]
    assert "flapping" in [e["event"] for e in events]


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_prometheus_metrics_follow_the_store(alerting: Server, receiver: Receiver,
                                             slow_job: Job, healthy_job: Job):
    empty = _samples(alerting.get("/metrics").text)
    assert empty[("stragglers_sessions_ingested_total", ())] == 0
    a = _push(alerting, slow_job, "train-m")
    b = _push(alerting, healthy_job, "other")
    receiver.drain(quiet=1.0)
    r = alerting.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    got = _samples(r.text)
    job = (("training_job", "train-m"),)
    assert got[("stragglers_job_slowdown_ratio", job)] == pytest.approx(a["result"]["slowdown"])
    assert got[("stragglers_job_waste_ratio", job)] == pytest.approx(a["result"]["waste"])
    assert got[("stragglers_job_slowdown_ratio", (("training_job", "other"),))] == \
        pytest.approx(b["result"]["slowdown"])
    step = np.mean(list(a["result"]["step_time"]["actual"].values()))
    assert got[("stragglers_job_step_time_seconds", job)] == pytest.approx(step)
    assert got[("stragglers_job_last_session_timestamp_seconds", job)] == \
        pytest.approx(a["finished_at"])
    assert got[("stragglers_job_sessions_total", job)] == 1
    assert got[("stragglers_sessions_ingested_total", ())] == 2
    assert got[("stragglers_sessions_failed_total", ())] == 0
    assert got[("stragglers_alerts_sent_total", ())] == 1
    assert got[("stragglers_job_open_alerts", job)] == 1


def test_metrics_follow_prometheus_conventions(server_factory, slow_job: Job):
    """Defect 7 of issue 24: jobs were labelled ``job`` (Prometheus renames it
    ``exported_job``: ``stragglers_job_slowdown{job="x"}`` finds nothing), every job ever seen
    stayed exported with its last S, ``waste`` had no unit, no latency histograms."""
    server: Server = server_factory(args=("--metrics-stale-s", "20"))
    r = server.upload(slow_job.trace, slow_job.meta, job="conv-a",
                      labels='{"cluster": "a", "team-name": "x", "job": "y", "9k": "z"}')
    assert r.status_code == 202
    doc = server.wait(r.json()["session"])
    url = f"{server.url}/api/v1/jobs/stream-m/records"
    body = _iteration_records(0, 250, 1.0, 0, seed=1) + _iteration_records(0, 60, 1.4, 250, 3)
    r = httpx.post(url, headers=server.headers(), content=body.encode(), timeout=60)
    onset = next(e for e in r.json()["events"] if e["event"] == "onset")
    text = server.get("/metrics").text
    got = _samples(text)
    labels = (("_9k", "z"), ("cluster", "a"), ("label_job", "y"), ("team_name", "x"),
              ("training_job", "conv-a"))
    assert got[("stragglers_job_slowdown_ratio", labels)] == pytest.approx(
        doc["result"]["slowdown"])
    assert got[("stragglers_job_waste_ratio", labels)] == pytest.approx(doc["result"]["waste"])
    names = {fam.name for fam in text_string_to_metric_families(text)}
    assert "stragglers_job_waste" not in names and "stragglers_job_slowdown" not in names
    assert all(not any(k == "job" for k, _ in key[1]) for key in got)
    stream = (("training_job", "stream-m"),)
    assert got[("stragglers_job_records_total", stream)] == 310
    assert got[("stragglers_job_onsets_total", stream)] == 1
    assert got[("stragglers_job_slow_ranks", stream)] == 1
    received = server.get("/api/v1/jobs/stream-m/events").json()["events"][0]["received_at"]
    assert got[("stragglers_job_slow_since_timestamp_seconds", stream)] == \
        pytest.approx(received)
    assert onset["ts"] is None  # records without a clock: the server's receive time
    # the latency histograms: the upload's request and the analysis in the worker
    post = (("code", "202"), ("method", "POST"), ("route", "/api/v1/sessions"))
    assert got[("stragglers_http_request_duration_seconds_count", post)] == 1
    page = (("code", "200"), ("method", "GET"), ("route", "/api/v1/sessions/{session}"))
    assert got[("stragglers_http_request_duration_seconds_count", page)] >= 1
    assert got[("stragglers_analysis_duration_seconds_count", ())] == 1
    assert got[("stragglers_analysis_duration_seconds_sum", ())] == pytest.approx(
        doc["summary"]["analysis_s"])
    assert got[("stragglers_session_latency_seconds_count", ())] == 1
    # nothing new for --metrics-stale-s 20: both jobs leave the export (the dashboard and
    # the API keep them)
    end = time.monotonic() + 180
    while time.monotonic() < end:
        jobs = {v for (n, k), _ in _samples(server.get("/metrics").text).items()
                if n.startswith("stragglers_job_") for name, v in k if name == "training_job"}
        if not jobs:
            break
        time.sleep(1.0)
    assert jobs == set()
    assert {j["name"] for j in server.get("/api/v1/jobs").json()["jobs"]} == {"conv-a",
                                                                            "stream-m"}
    # records again: the stream job is back, the session job (no new session) is not
    r = httpx.post(url, headers=server.headers(), timeout=60,
                   content=_iteration_records(0, 5, 1.4, 310, seed=4).encode())
    assert r.status_code == 200
    got = _samples(server.get("/metrics").text)
    assert got[("stragglers_job_records_total", stream)] == 315
    assert not any(dict(k).get("training_job") == "conv-a" for (_, k) in got)


def test_detector_state_survives_a_restart(server_factory, tmp_path: Path):
    """After kill -9 the job's detector is rebuilt from its record log: a slowdown that
    starts after the restart is still measured against the healthy level from before it
    (a fresh detector would take the slow level as its baseline)."""
    data = tmp_path / "data"
    server: Server = server_factory(data=data)
    url = "/api/v1/jobs/restart-x/records"
    healthy = _iteration_records(0, 250, 1.0, 0, seed=5)  # past the 100-iteration minimum warm-up
    r = httpx.post(f"{server.url}{url}", headers=server.headers(), content=healthy.encode(),
                   timeout=60)
    assert r.status_code == 200 and r.json()["events"] == []
    server.kill9()
    server = server_factory(data=data)
    slow = _iteration_records(0, 60, 1.4, 250, seed=6)
    r = httpx.post(f"{server.url}{url}", headers=server.headers(), content=slow.encode(),
                   timeout=60)
    onsets = [e for e in r.json()["events"] if e["event"] == "onset"]
    assert len(onsets) == 1 and onsets[0]["previous_s"] == pytest.approx(1.0, abs=0.02)
    assert server.get("/api/v1/jobs/restart-x").json()["records"] == 310
