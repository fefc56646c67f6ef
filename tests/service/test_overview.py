"""The on-call overview of the jobs (culprit, slow since, labels, the detector's state, last
seen) read from the store, on SQLite and on a real PostgreSQL server (the store tests'
fixtures)."""

from __future__ import annotations

import time
import uuid

import pytest

from stragglers.service.overview import fresh, job_views
from stragglers.service.rows import AnalysisSummary, DetectionEvent, NewSession
from stragglers.service.store import Store
from tests.service.test_store import postgres, store  # noqa: F401 - the fixtures


def _session(db: Store, job: str, labels: dict[str, str], slowdown: float,
             cause: str, workers: tuple[str, ...]) -> str:
    sid, _ = db.add_session(NewSession(id=uuid.uuid4().hex, job=job,
                                       trace_file="trace.parquet", upload_name="t.parquet",
                                       upload_bytes=10, labels=labels))
    db.finish_done(sid, AnalysisSummary(
        result_dir="out-1", n_workers=4, n_steps=3, n_ops=100, slowdown=slowdown,
        waste=1 - 1 / slowdown, discrepancy=1.0, trustworthy=True, cause=cause,
        confidence=0.9, workers=workers, step_time=0.5, analysis_s=0.1))
    return sid


def _event(kind: str, rank: int, ts: float | None, severity: float | None = 0.3
           ) -> DetectionEvent:
    return DetectionEvent(kind=kind, rank=rank, iteration=10, ts=ts, severity=severity,
                          level_s=1.4, previous_s=1.0, detail={})


@pytest.mark.slow
def test_job_views(store: Store):  # noqa: F811 - the fixture
    _session(store, "sess", {"cluster": "a"}, 1.5, "worker", ("1,1", "0,1"))
    _session(store, "sess", {"cluster": "b"}, 1.0, "none", ())  # the latest: its labels
    stream = store.ensure_job("stream")
    t_unix = time.time() - 100
    # rank 0: onset (a Unix ts) still open; rank 1: onset then recovery; rank 2: flapping
    # with a ts of another clock (the receive time is shown)
    rows = store.add_events(stream, 500, [
        _event("onset", 0, t_unix, 0.2), _event("onset", 1, t_unix + 5),
        _event("recovery", 1, t_unix + 9, None), _event("flapping", 2, 1234.5, 0.4)])
    quiet = store.ensure_job("quiet")
    store.add_events(quiet, 10, [])
    alerted = store.ensure_job("alerted")
    raised = store.raise_alert(alerted, "r", "worker", None, None, None, {}, 3600)
    assert raised is not None
    for i in range(22):  # more than 20 jobs: read in one scan, not an IN list
        store.ensure_job(f"filler-{i:02d}")
    everything = {v.name: v for v in job_views(store, store.jobs("name", False))}
    few = {v.name: v for v in job_views(store, [j for j in store.jobs() if j.name in (
        "sess", "stream", "quiet", "alerted")])}
    for views in (everything, few):
        s, st, q, a = views["sess"], views["stream"], views["quiet"], views["alerted"]
        assert s.labels == {"cluster": "b"} and s.culprit == "none" and s.detection is None
        assert st.culprit == "rank 0, 2" and st.detection is not None
        assert st.detection.slow_ranks == (0, 2) and st.detection.onsets == 2
        assert st.detection.severity == 0.4
        assert st.slow_since == min(t_unix, rows[3].received_at)
        assert q.detection is not None and not q.detection.slow and q.culprit is None
        assert q.slow_since is None
        assert a.slow_since == raised.body["first_seen"] and a.detection is None
    assert len(everything) == 26
    now = time.time()
    assert {v.name for v in fresh(list(everything.values()), 3600, now)} == set(everything)
    assert fresh(list(everything.values()), 3600, now + 7200) == []


def test_culprit_names_the_verdicts_workers(store: Store):  # noqa: F811 - the fixture
    _session(store, "w", {}, 1.5, "worker", ("1,1", "0,1", "2,0", "3,3", "4,4"))
    (v,) = job_views(store, store.jobs())
    assert v.culprit == "worker 1,1, 0,1, 2,0, 3,3 …" and v.workers[0] == "1,1"
