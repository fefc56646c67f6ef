"""Restarts of the service keep what on-call relies on (issue 31, item 6), on the service's
own components over a real SQLite store (a "restart" is a new component on the same store,
exactly what a new server process builds): the iteration numbers of a record stream across
restarts and trimming of its replay log, per-culprit alerts (job, rule, rank), activity and
open alerts, the push client's retry budget and idempotency key, a data error that leaves
no upload folder behind.

The real processes (SIGTERM and kill -9 during a stream) are in ``bench/bench_oncall.py``
and ``test_slow_clients.py``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from stragglers.errors import InputError
from stragglers.service.alert_rules import AlertConfig
from stragglers.service.alerts import Alerter
from stragglers.service.datadir import DataDir
from stragglers.service.overview import RecordActivity, job_views
from stragglers.service.rows import NewSession
from stragglers.service.store import Store, sqlite_url
from stragglers.service.streams import RecordStreams

#: (type, size, share of the iteration) of the calls of one iteration
CALLS = (("allgather", 1024, 0.3), ("reducescatter", 1024, 0.3), ("allreduce", 8, 0.2),
         ("broadcast", 4, 0.2))


def stream(n_iters: int, slow: dict[int, tuple[int, int]], ranks: int = 2, per: int = 50,
           calls: bool = True, step: int = 1, seed: int = 0) -> list[str]:
    """Batches of ``per`` iterations of ``ranks`` ranks, 1 s per iteration (1% noise);
    ``slow[rank] = (first, end)``: 1.4 s per iteration from iteration ``first`` to ``end``.
    Call records (4 calls per iteration, no iteration number) or iteration records
    numbered ``step`` apart."""
    rng = np.random.default_rng(seed)
    t = dict.fromkeys(range(ranks), 1000.0)
    out = []
    for b0 in range(0, n_iters, per):
        lines = []
        for it in range(b0, b0 + per):
            for r in range(ranks):
                lo, hi = slow.get(r, (n_iters, n_iters))
                d = (1.4 if lo <= it < hi else 1.0) * (1 + 0.01 * rng.standard_normal())
                if not calls:
                    lines.append(f'{{"rank": {r}, "iter": {it * step}, "duration": {d:.6f}}}')
                    continue
                for typ, size, share in CALLS:
                    lines.append(f'{{"rank": {r}, "type": "{typ}", "size": {size}, '
                                 f'"ts": {t[r]:.6f}}}')
                    t[r] += share * d
        out.append("\n".join(lines))
    return out


@pytest.fixture
def data(tmp_path: Path) -> DataDir:
    return DataDir(tmp_path / "data").create()


@pytest.fixture
def store(data: DataDir) -> Iterator[Store]:
    s = Store.open(sqlite_url(data.root))
    yield s
    s.close()


def _feed(store: Store, data: DataDir, batches: list[str], restart_at: set[int],
          replay: int) -> list[tuple[str, int | None, int | None]]:
    """Feed the batches (a new RecordStreams, as a restarted server builds, before each batch
    of ``restart_at``); returns the level events (kind, rank, iteration)."""
    streams = RecordStreams(store, data, replay_lines=replay)
    got = []
    for i, body in enumerate(batches):
        if i in restart_at:
            streams = RecordStreams(store, data, replay_lines=replay)
        answer = streams.ingest("job", body, key=f"b{i}")
        got += [(e.event.kind, e.event.rank, e.event.iteration) for e in answer.events
                if e.event.kind in ("onset", "recovery")]
    return got


@pytest.mark.parametrize("calls, step", [(True, 1), (False, 10)],
                         ids=["call-records", "iteration-records"])
def test_stream_iterations_survive_restarts_and_trimming(tmp_path: Path, calls: bool,
                                                         step: int):
    """Defect: after a restart the detector was rebuilt from the records kept (here the
    last 4,000 lines, 500 iterations of 2 ranks × 4 calls) numbered from 0: a call-record
    onset at iteration 700 came out as 550, and iteration records gave positions, not the
    job's iteration numbers (700 for iteration 7,000)."""
    batches = stream(1000, {1: (700, 850)}, calls=calls, step=step)
    runs = {}
    for name, restarts in (("clean", set()), ("restarted", {9, 13, 14})):
        folder = DataDir(tmp_path / name).create()
        db = Store.open(sqlite_url(folder.root))
        try:
            runs[name] = _feed(db, folder, batches, restarts, replay=4000)
        finally:
            db.close()
    onsets = [e for e in runs["clean"] if e[0] == "onset"]
    assert [(k, r) for k, r, _ in onsets] == [("onset", 1)]
    assert onsets[0][2] in range(700 * step, 703 * step), runs["clean"]
    assert runs["restarted"] == runs["clean"]


def test_positions_survive_the_trim_of_the_replay_log(store: Store, data: DataDir):
    """The replay log keeps the latest batches only; the stream position where they begin
    is kept with the newest trimmed batch, and each batch stores the ranks it moved."""
    batches = stream(300, {}, per=50)  # 6 batches of 100 iterations of 2 ranks × 4 calls
    streams = RecordStreams(store, data, replay_lines=800)
    for i, body in enumerate(batches):
        streams.ingest("job", body, key=f"b{i}")
    job_id = store.ensure_job("job")
    base, kept = store.replay_log(job_id)
    assert base is not None and len(kept) == 2  # 800 lines: the last two batches of 400
    assert base.line == 4 * 400 and set(base.ranks) == {0, 1}
    assert kept[-1][1] is not None and kept[-1][1].line == 6 * 400
    rebuilt = RecordStreams(store, data, replay_lines=800)._detector("job", job_id)
    assert rebuilt.position() == streams._detector("job", job_id).position()


def _stored_onset(store: Store, job_id: int, kind: str, rank: int, iteration: int) -> Any:
    from stragglers.service.rows import DetectionEvent

    return store.add_events(job_id, 0, [DetectionEvent(
        kind=kind, rank=rank, iteration=iteration, ts=None,
        severity=0.3 if kind == "onset" else None, level_s=1.4, previous_s=1.0, detail={})])


def test_onset_alerts_are_per_rank_and_resolved_by_that_rank_only(store: Store):
    """Defect: an alert was per (job, rule): rank 3's onset was suppressed as a repeat of
    rank 1's, and rank 1's recovery resolved the alert while rank 3 was still slow."""
    alerter = Alerter(store, AlertConfig.from_dict({"rules": [{"name": "fail-slow",
                                                               "onset": 0.15}]}, "a.yaml"),
                      "http://smon")
    job_id = store.ensure_job("two")
    alerter.events_stored("two", _stored_onset(store, job_id, "onset", 1, 700))
    alerter.events_stored("two", _stored_onset(store, job_id, "onset", 3, 900))
    opened = {a.rank: a for a in store.open_alerts(job_id)}
    assert set(opened) == {1, 3}
    assert opened[3].body["rank"] == 3 and "iteration 900" in opened[3].body["message"]
    alerter.events_stored("two", _stored_onset(store, job_id, "recovery", 1, 800))
    assert [a.rank for a in store.open_alerts(job_id)] == [3]
    assert store.alert(opened[1].id).resolved_at is not None
    alerter.events_stored("two", _stored_onset(store, job_id, "onset", 3, 950))  # a repeat
    assert store.open_alert(job_id, "fail-slow", "onset", 3).suppressed == 1
    alerter.events_stored("two", _stored_onset(store, job_id, "recovery", 3, 1000))
    assert store.open_alerts(job_id) == []


def test_activity_and_open_alerts_survive_a_restart(store: Store, data: DataDir,
                                                    monkeypatch: pytest.MonkeyPatch):
    """Defect: when a job last sent records was known to the running process only: after a
    restart a job still streaming looked quiet since its last event, so its open alert was
    closed as stale and it left /metrics."""
    rules = AlertConfig.from_dict({"stale_s": 3600, "rules": [{"name": "fail-slow",
                                                                "onset": 0.15}]}, "a.yaml")
    streams = RecordStreams(store, data)
    body = stream(300, {0: (250, 300)}, ranks=1, per=300, calls=False)[0]
    two_hours_ago = time.time() - 7200
    with monkeypatch.context() as m:  # the job, its onset and its alert: 2 h ago
        m.setattr(time, "time", lambda: two_hours_ago)
        answer = streams.ingest("live", body, key="b0")
        assert [e.event.kind for e in answer.events] == ["onset"]
        Alerter(store, rules, "http://smon").events_stored("live", answer.events)
    job_id = store.ensure_job("live")
    now = time.time()
    more = stream(10, {0: (0, 10)}, ranks=1, per=10, calls=False)[0].replace(
        '"iter": ', '"iter": 30')  # iterations 300-309, still slow
    assert streams.ingest("live", more, key="b1").events == []
    # the server restarts: new components on the same store
    activity = RecordActivity(data.records_mtime)
    alerter = Alerter(store, rules, "http://smon", activity)
    (view,) = job_views(store, store.jobs(), activity)
    assert view.last_seen >= now
    assert alerter.expire_stale() == 0
    assert [a.rank for a in store.open_alerts(job_id)] == [0]


def test_a_data_error_of_an_upload_leaves_no_folder(store: Store, data: DataDir,
                                                    monkeypatch: pytest.MonkeyPatch):
    """Defect: the database refusing the session row (a NUL in the file name on
    PostgreSQL) left the upload's folder under sessions/."""
    from sqlalchemy.exc import DataError

    from stragglers.service.ingest import Ingest

    ingest = Ingest(store, data, checker=None)  # type: ignore[arg-type]
    folder = data.upload("a" * 32)
    folder.mkdir(parents=True)
    (folder / "trace.parquet").write_bytes(b"x")

    def refuse(new: NewSession) -> tuple[str, bool]:
        raise DataError("INSERT", {}, ValueError("text fields cannot contain NUL"))

    monkeypatch.setattr(store, "add_session", refuse)
    new = NewSession(id="a" * 32, job="j", trace_file="trace.parquet",
                     upload_name="t\x00.parquet", upload_bytes=1)
    with pytest.raises(DataError):
        ingest.commit(folder, new)
    assert list((data.root / "sessions").iterdir()) == []
    assert not folder.exists()


# -- the push client ---------------------------------------------------------------------

class _Clock:
    """A fake clock for the client's retries: sleeping advances it."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_push_retries_through_a_restart_with_one_key(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch):
    """Defect: `stragglers push` gave up after 3 tries (~1.5 s) while a restart takes
    6.5-12.4 s, and each run sent a new random key (a rerun stored the upload twice). The
    server here is down for 12.4 s, then answers 202."""
    from stragglers.service import client

    clock = _Clock()
    monkeypatch.setattr(client.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(client.time, "sleep", clock.sleep)
    monkeypatch.delenv(client.RETRY_ENV, raising=False)
    keys: list[str] = []

    def post(url: str, **kw: Any) -> httpx.Response:
        keys.append(kw["headers"]["Idempotency-Key"])
        assert kw["data"]["key"] == keys[-1]
        if clock.now < 12.4:
            raise httpx.ConnectError("connection refused")
        return httpx.Response(202, json={"session": "s" * 32})

    monkeypatch.setattr(client.httpx, "post", post)
    trace, meta = tmp_path / "t.parquet", tmp_path / "m.yaml"
    trace.write_bytes(b"trace bytes")
    meta.write_text("trial_name: a\n")
    assert client.push_session(trace, meta, "http://smon", "tok", job="j") == "s" * 32
    assert len(keys) > 3 and len(set(keys)) == 1 and clock.now < 20
    first = keys[0]
    keys.clear()
    client.push_session(trace, meta, "http://smon", "tok", job="j")  # a rerun
    assert set(keys) == {first}
    client.push_session(trace, meta, "http://smon", "tok", job="k")
    assert keys[-1] != first  # another job, another upload
    clock.now = 0.0
    with pytest.raises(InputError, match=r"http://smon: cannot reach the server \(tried for "
                                         r"5 s"):
        client.push_session(trace, meta, "http://smon", "tok", job="j", retry_s=5)
    monkeypatch.setenv(client.RETRY_ENV, "soon")
    with pytest.raises(InputError, match="STRAGGLERS_PUSH_RETRY_S"):
        client.push_session(trace, meta, "http://smon", "tok")


def test_push_does_not_retry_what_a_retry_cannot_change(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch):
    from stragglers.service import client

    calls = []

    def post(url: str, **kw: Any) -> httpx.Response:
        calls.append(url)
        return httpx.Response(400, json={"error": "t.parquet: not a parquet file"})

    monkeypatch.setattr(client.httpx, "post", post)
    trace, meta = tmp_path / "t.parquet", tmp_path / "m.yaml"
    trace.write_bytes(b"x")
    meta.write_text("trial_name: a\n")
    with pytest.raises(InputError, match="HTTP 400: t.parquet: not a parquet file"):
        client.push_session(trace, meta, "http://smon", "tok")
    assert len(calls) == 1
    # a records batch's key: the same lines of the same job, the same key
    assert client.records_key(b"a\n", "j") == client.records_key(b"a\n", "j") != \
        client.records_key(b"a\n", "k")
