"""The store against SQLite and against a real PostgreSQL server (started here when
``initdb`` is available; skipped with the reason outside CI, a failure inside CI)."""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, text

from stragglers.service.rows import (
    DONE,
    FAILED,
    QUEUED,
    RUNNING,
    AnalysisSummary,
    DetectionEvent,
    NewSession,
)
from stragglers.service.store import Store, sqlite_url
from stragglers.service.tables import metadata
from tests.service.helpers import poll
from tests.service.postgres import running_postgres

_counter = itertools.count()


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with running_postgres("PostgreSQL store tests") as server:
        yield server.url


def fresh_database(base: str) -> str:
    """A new empty database on the test server; returns its URL."""
    name = f"t{next(_counter)}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(base.replace("postgresql://", "postgresql+psycopg://"),
                          isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    admin.dispose()
    return base.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        url = sqlite_url(tmp_path)
    else:
        url = fresh_database(request.getfixturevalue("postgres"))
    s = Store.open(url)
    yield s
    s.close()


def _new(job: str = "j", key: str | None = None) -> NewSession:
    return NewSession(id=uuid.uuid4().hex, job=job, trace_file="trace.parquet",
                      upload_name="t.parquet", upload_bytes=10, labels={"a": "b"},
                      client_key=key)


def _summary(slowdown: float, cause: str = "worker") -> AnalysisSummary:
    return AnalysisSummary(result_dir="out-1", n_workers=4, n_steps=3, n_ops=100,
                           slowdown=slowdown, waste=1 - 1 / slowdown, discrepancy=1.0,
                           trustworthy=True, cause=cause, confidence=0.9, workers=("1,1",),
                           step_time=0.5, analysis_s=0.1)


@pytest.mark.slow
def test_migrations_create_exactly_the_tables_schema(store: Store):
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
        version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    assert diff == [] and version == "0004"
    again = Store.open(str(store.engine.url.render_as_string(hide_password=False)))
    again.close()  # opening a migrated store again changes nothing


def test_the_queue_claims_oldest_first_and_requeues(store: Store):
    ids = [store.add_session(_new())[0] for _ in range(3)]
    claimed = store.claim(2, max_attempts=2)
    assert [s.id for s in claimed] == ids[:2]
    assert all(s.status == RUNNING and s.runs == 1 and s.attempts == 0 for s in claimed)
    assert store.requeue_interrupted() == 2  # what a restart after kill -9 does
    assert [store.session(i).status for i in ids] == [QUEUED] * 3
    again = store.claim(5, max_attempts=2)
    assert [s.id for s in again] == ids and [s.runs for s in again] == [2, 2, 1]
    store.requeue_interrupted()
    # restarts are no attempts: all three are claimed a third time, none failed
    assert [s.id for s in store.claim(5, max_attempts=2)] == ids
    assert store.totals().failed == 0


def test_done_sessions_update_the_job_only_when_latest(store: Store):
    a, _ = store.add_session(_new())
    b, _ = store.add_session(_new())
    store.claim(2, 3)
    store.finish_done(b, _summary(1.5))
    store.finish_done(a, _summary(1.2, "none"))  # older session finishing later
    job = store.job("j")
    assert job.last_session == b and job.last_slowdown == 1.5 and job.last_cause == "worker"
    assert [x[0] for x in store.series(job.id)] == [a, b]
    row = store.session(b)
    assert row.status == DONE and row.workers == ("1,1",) and row.labels == {"a": "b"}
    t = store.totals()
    assert (t.sessions, t.done, t.queued, t.running) == (2, 2, 0, 0)


def test_client_keys_make_retries_idempotent(store: Store):
    first, created = store.add_session(_new(key="k"))
    again, created_again = store.add_session(_new(key="k"))
    other, created_other = store.add_session(_new(job="other", key="k"))
    assert created and not created_again and again == first
    assert created_other and other != first
    assert store.session_id_for_key("j", "k") == first
    assert store.job("j").sessions == 1


def test_concurrent_uploads_are_all_stored(store: Store):
    made: list[str] = []

    def add(i: int) -> None:
        for _ in range(10):
            made.append(store.add_session(_new(job=f"c{i % 3}"))[0])

    threads = [threading.Thread(target=add, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(store.session_ids()) == sorted(made) and len(set(made)) == 80
    assert sum(j.sessions for j in store.jobs()) == 80


def test_alerts_are_deduplicated_per_job_rule_and_cause(store: Store):
    job_id = store.ensure_job("j")
    first = store.raise_alert(job_id, "r", "worker", None, None, None, {"m": 1}, 3600)
    assert first is not None and first.body["alert"] == first.id and first.repeat == 0
    assert store.raise_alert(job_id, "r", "worker", None, None, None, {"m": 2}, 3600) is None
    assert store.open_alert(job_id, "r", "worker").suppressed == 1
    other = store.raise_alert(job_id, "r", "gc", None, None, None, {}, 3600)
    assert other is not None  # another cause is another alert
    repeat = store.raise_alert(job_id, "r", "worker", None, None, None, {}, 0)
    assert repeat.repeat == 1 and repeat.body["first_seen"] == first.created_at
    assert not store.alert(first.id).open and store.job("j").open_alerts == 2
    assert store.resolve_alerts(job_id, "r", keep_cause="worker") == 1
    assert store.job("j").open_alerts == 1
    assert [a.id for a in store.pending_alerts()] == [first.id, other.id, repeat.id]
    store.mark_alert(first.id, "sent", 1, 204, None)
    assert store.totals().alerts_sent == 1


def test_onset_alerts_are_deduplicated_per_rank(store: Store):
    """A culprit is (job, rule, cause, rank): two slow ranks are two alerts; a repeat of
    one rank is suppressed; a session alert (no rank) is apart from both."""
    job_id = store.ensure_job("j")
    one = store.raise_alert(job_id, "r", "onset", None, None, None, {}, 3600, rank=1)
    three = store.raise_alert(job_id, "r", "onset", None, None, None, {}, 3600, rank=3)
    assert one is not None and three is not None and (one.rank, three.rank) == (1, 3)
    assert store.raise_alert(job_id, "r", "onset", None, None, None, {}, 3600, rank=3) is None
    assert store.open_alert(job_id, "r", "onset", 3).suppressed == 1
    assert store.open_alert(job_id, "r", "onset", 1).suppressed == 0
    assert store.open_alert(job_id, "r", "onset") is None  # the job's own: none yet
    assert [a.rank for a in store.open_alerts(job_id, "r", 1)] == [1]
    assert store.job("j").open_alerts == 2


def test_events_and_job_sorting(store: Store):
    job_id = store.ensure_job("e")
    ev = DetectionEvent(kind="onset", rank=3, iteration=10, ts=5.0, severity=0.3,
                        level_s=1.4, previous_s=1.0, detail={"rank": 3})
    rows = store.add_events(job_id, 42, [ev, ev])
    assert [r.id for r in store.events(job_id)] == [r.id for r in rows]
    assert store.events(job_id)[0].event == ev and store.totals().records == 42
    for name, s in (("a", 1.1), ("b", 1.9), ("c", 1.5)):
        sid, _ = store.add_session(_new(job=name))
        store.claim(1, 3)
        store.finish_done(sid, _summary(s))
    ranked = [j.name for j in store.jobs("slowdown", descending=True)]
    assert ranked == ["b", "c", "a", "e"]  # a job without a session sorts last
    assert [j.name for j in store.jobs("slowdown", descending=False)] == ["a", "c", "b", "e"]


@pytest.mark.slow
def test_a_server_on_postgresql_analyses_and_shows_a_session(postgres: str, server_factory,
                                                              slow_job):
    url = fresh_database(postgres)
    server = server_factory(args=("--db", url))
    r = server.upload(slow_job.trace, slow_job.meta, job="on-postgres")
    assert r.status_code == 202
    doc = server.wait(r.json()["session"])
    assert doc["status"] == "done" and doc["result"]["verdict"]["workers"] == ["1,1"]
    assert not (server.data / "smon.sqlite3").exists()
    store = Store.open(url)
    try:
        assert store.session_ids() == [doc["session"]]
    finally:
        store.close()
    assert f"{doc['result']['slowdown']:.4f}" in server.get("/jobs/on-postgres").text


@pytest.mark.slow
def test_a_claim_whose_server_is_gone_is_retaken_when_its_lease_expires(store: Store):
    """Defect 3: a claim committed by a server that then lost it (its commit answer cut off,
    or the server gone) left the session 'running' until a restart."""
    url = str(store.engine.url.render_as_string(hide_password=False))
    other = Store.open(url)  # a second server on the same database
    try:
        a, _ = store.add_session(_new())
        store.lease_s = 3600.0
        assert [s.id for s in store.claim(1, 3)] == [a]
        assert other.claim(1, 3) == []  # a live lease is not taken
        b, _ = store.add_session(_new())
        store.lease_s = 0.05
        assert [s.id for s in store.claim(1, 3)] == [b]  # ... and then this server is gone
        retaken = poll(lambda: other.claim(1, 3), "the expired claim is retaken", 60)
        assert [s.id for s in retaken] == [b]
        row = store.session(b)
        assert row.status == RUNNING and row.attempts == 0  # a lost server is no attempt
    finally:
        other.close()


def test_concurrent_claims_never_take_a_session_twice(store: Store):
    ids = {store.add_session(_new())[0] for _ in range(40)}
    url = str(store.engine.url.render_as_string(hide_password=False))
    stores = [Store.open(url) for _ in range(4)]
    taken: list[str] = []

    def work(s: Store) -> None:
        while True:
            got = s.claim(3, 3)
            if not got:
                return
            taken.extend(x.id for x in got)

    threads = [threading.Thread(target=work, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert sorted(taken) == sorted(ids)


def test_restarts_do_not_count_attempts_but_dead_workers_do(store: Store):
    sid, _ = store.add_session(_new())
    for _ in range(5):  # five servers stopped while analysing it
        assert [s.id for s in store.claim(1, 3)] == [sid]
        store.requeue_interrupted()
    assert store.session(sid).attempts == 0
    for n in (1, 2):
        store.claim(1, 3)
        assert store.task_died(sid, 3) is False
        assert store.session(sid).status == QUEUED and store.session(sid).attempts == n
    store.claim(1, 3)
    assert store.task_died(sid, 3) is True
    row = store.session(sid)
    assert row.status == FAILED and "3 attempts" in row.error and store.job("j").failed == 1
    assert store.retry(sid) == FAILED  # the status it had: queued again
    row = store.session(sid)
    assert row.status == QUEUED and row.error is None and row.attempts == 0
    assert store.job("j").failed == 0
    assert store.retry(sid) == QUEUED  # not failed: unchanged


def test_migration_0002_keeps_the_output_folders_of_earlier_runs(tmp_path: Path):
    """A store of the previous schema: its attempts counted claims (out-1..out-N exist), so
    the next run must write out-(N+1)."""
    from alembic import command
    from alembic.config import Config

    from stragglers.service.store import MIGRATIONS, make_engine

    engine = make_engine(sqlite_url(tmp_path))
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
        conn.execute(text("INSERT INTO jobs (name, created_at, sessions, failed, records) "
                          "VALUES ('old', 0, 1, 0, 0)"))
        conn.execute(text(
            "INSERT INTO sessions (id, job_id, status, created_at, attempts, labels, "
            "trace_file, upload_name, upload_bytes) VALUES ('" + "a" * 32 + "', 1, 'running', "
            "0, 2, '{}', 'trace.parquet', 't.parquet', 1)"))
    engine.dispose()
    store = Store.open(sqlite_url(tmp_path))
    try:
        assert store.requeue_interrupted() == 1
        (s,) = store.claim(1, 3)
        assert s.runs == 3 and s.attempts == 0  # the old count included server stops
    finally:
        store.close()
