"""The service's database: SQLite (WAL) under the data folder by default, PostgreSQL when a
``postgresql://`` URL is given. The schema is brought to the latest version by the Alembic
migrations when the store is opened.

The ``sessions`` table is also the durable analysis queue: a session row is committed
(``queued``) before the upload is acknowledged; a worker claims it (``running``); its result
is committed as ``done`` or ``failed``. Sessions found ``running`` when a server starts were
interrupted (the server was killed) and are queued again.

Writes are serialised by one lock per store when the database is SQLite (one writer at a
time is all SQLite allows; readers in WAL mode never wait for it).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import (
    Connection,
    Engine,
    and_,
    create_engine,
    event,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError

from stragglers.errors import InputError
from stragglers.service.records import (
    DONE,
    FAILED,
    QUEUED,
    RUNNING,
    AlertRow,
    AnalysisSummary,
    DetectionEvent,
    EventRow,
    JobRow,
    NewSession,
    SessionRow,
    Totals,
)
from stragglers.service.tables import alerts, events, jobs, sessions

DB_FILE = "smon.sqlite3"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"

#: Sort keys of the jobs page (query parameter -> column).
JOB_SORTS = {
    "name": jobs.c.name, "slowdown": jobs.c.last_slowdown, "waste": jobs.c.last_waste,
    "sessions": jobs.c.sessions, "last": jobs.c.last_done_at, "cause": jobs.c.last_cause,
}


def sqlite_url(data: Path) -> str:
    return f"sqlite:///{(data / DB_FILE).absolute()}"


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def make_engine(url: str) -> Engine:
    """An engine for ``url`` (``sqlite:///…`` or ``postgresql://…``)."""
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if url.startswith("postgresql+psycopg://"):
        return create_engine(url, pool_pre_ping=True, pool_size=8, max_overflow=8)
    raise InputError(f"--db {url.split(':', 1)[0]}:...: expected a postgresql:// or sqlite:/// "
                     "URL")


def migrate(engine: Engine) -> None:
    """Bring the schema to the latest version (no-op when it is already there)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


class Store:
    """All reads and writes of the service's database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self._write_lock = threading.Lock() if self.dialect == "sqlite" else None

    @classmethod
    def open(cls, url: str) -> Store:
        engine = make_engine(url)
        migrate(engine)
        return cls(engine)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        if self._write_lock is None:
            with self.engine.begin() as conn:
                yield conn
            return
        with self._write_lock, self.engine.begin() as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            yield conn

    # -- jobs -----------------------------------------------------------------------------
    def _job_id(self, conn: Connection, name: str, now: float) -> int:
        found = conn.execute(select(jobs.c.id).where(jobs.c.name == name)).scalar()
        if found is not None:
            return int(found)
        # INSERT ... ON CONFLICT DO NOTHING: two uploads of a new job at once (PostgreSQL
        # runs them in parallel) both end up with the one row.
        dialect_insert = pg_insert if self.dialect == "postgresql" else sqlite_insert
        conn.execute(dialect_insert(jobs).values(
            name=name, created_at=now, sessions=0, failed=0, records=0)
            .on_conflict_do_nothing(index_elements=["name"]))
        return int(conn.execute(select(jobs.c.id).where(jobs.c.name == name)).scalar_one())

    def job(self, name: str) -> JobRow | None:
        with self._read() as conn:
            row = conn.execute(select(jobs).where(jobs.c.name == name)).first()
            if row is None:
                return None
            n_open = conn.execute(select(func.count()).select_from(alerts).where(
                and_(alerts.c.job_id == row.id, alerts.c.open.is_(True)))).scalar_one()
        return JobRow(**row._mapping, open_alerts=int(n_open))

    def jobs(self, sort: str = "last", descending: bool = True) -> list[JobRow]:
        col = JOB_SORTS.get(sort, jobs.c.last_done_at)
        order = col.desc().nulls_last() if descending else col.asc().nulls_last()
        open_q = (select(alerts.c.job_id, func.count().label("n")).where(alerts.c.open.is_(True))
                  .group_by(alerts.c.job_id).subquery())
        q = (select(jobs, func.coalesce(open_q.c.n, 0).label("open_alerts"))
             .outerjoin(open_q, open_q.c.job_id == jobs.c.id).order_by(order, jobs.c.name))
        with self._read() as conn:
            return [JobRow(**r._mapping) for r in conn.execute(q)]

    # -- sessions -------------------------------------------------------------------------
    def add_session(self, new: NewSession) -> tuple[str, bool]:
        """Queue an upload; returns (session id, True) or, when the job already has a
        session with the same client key (a retried push), (that id, False)."""
        now = time.time()
        try:
            with self._write() as conn:
                job_id = self._job_id(conn, new.job, now)
                if new.client_key is not None:
                    found = conn.execute(select(sessions.c.id).where(and_(
                        sessions.c.job_id == job_id,
                        sessions.c.client_key == new.client_key))).scalar()
                    if found is not None:
                        return str(found), False
                conn.execute(insert(sessions).values(
                    id=new.id, job_id=job_id, status=QUEUED, created_at=now, attempts=0,
                    labels=json.dumps(new.labels, sort_keys=True), client_key=new.client_key,
                    trace_file=new.trace_file, upload_name=new.upload_name,
                    upload_bytes=new.upload_bytes))
                conn.execute(update(jobs).where(jobs.c.id == job_id)
                             .values(sessions=jobs.c.sessions + 1))
        except IntegrityError:
            # The same client key was inserted concurrently (PostgreSQL): return that one.
            found_id = self.session_id_for_key(new.job, new.client_key)
            if found_id is None:
                raise
            return found_id, False
        return new.id, True

    def session_id_for_key(self, job: str, key: str | None) -> str | None:
        if key is None:
            return None
        with self._read() as conn:
            found = conn.execute(select(sessions.c.id).join(jobs).where(and_(
                jobs.c.name == job, sessions.c.client_key == key))).scalar()
        return None if found is None else str(found)

    def _sessions(self, conn: Connection, where: Any, order: Any = None,
                  limit: int | None = None) -> list[SessionRow]:
        q = select(sessions, jobs.c.name.label("job_name")).join(jobs).where(where)
        if order is not None:
            q = q.order_by(order)
        if limit is not None:
            q = q.limit(limit)
        return [SessionRow.of(r, r.job_name) for r in conn.execute(q)]

    def session(self, session_id: str) -> SessionRow | None:
        with self._read() as conn:
            found = self._sessions(conn, sessions.c.id == session_id)
        return found[0] if found else None

    def job_sessions(self, job_id: int, limit: int | None = None) -> list[SessionRow]:
        """A job's sessions, newest first."""
        with self._read() as conn:
            return self._sessions(conn, sessions.c.job_id == job_id,
                                  sessions.c.created_at.desc(), limit)

    def session_ids(self, job_id: int | None = None) -> list[str]:
        q = select(sessions.c.id).order_by(sessions.c.created_at)
        if job_id is not None:
            q = q.where(sessions.c.job_id == job_id)
        with self._read() as conn:
            return [str(x) for x in conn.execute(q).scalars()]

    def series(self, job_id: int) -> list[tuple[str, float, float, float]]:
        """(session, finished_at, S, waste) of a job's analysed sessions, oldest first."""
        q = (select(sessions.c.id, sessions.c.finished_at, sessions.c.slowdown,
                    sessions.c.waste)
             .where(and_(sessions.c.job_id == job_id, sessions.c.status == DONE))
             .order_by(sessions.c.created_at))
        with self._read() as conn:
            return [(r.id, r.finished_at, r.slowdown, r.waste) for r in conn.execute(q)]

    def requeue_interrupted(self) -> int:
        """Queue again the sessions that were running when the server stopped."""
        with self._write() as conn:
            res = conn.execute(update(sessions).where(sessions.c.status == RUNNING)
                               .values(status=QUEUED, started_at=None))
        return int(res.rowcount or 0)

    def claim(self, limit: int, max_attempts: int) -> list[SessionRow]:
        """Mark up to ``limit`` queued sessions (oldest first) running and return them.

        A session already tried ``max_attempts`` times (the server or its worker died each
        time) is failed instead, so that one input cannot stop the service forever.
        """
        now = time.time()
        claimed: list[str] = []
        with self._write() as conn:
            rows = conn.execute(
                select(sessions.c.id, sessions.c.attempts, sessions.c.job_id)
                .where(sessions.c.status == QUEUED).order_by(sessions.c.created_at)
                .limit(limit)).all()
            for r in rows:
                if r.attempts >= max_attempts:
                    conn.execute(update(sessions).where(sessions.c.id == r.id).values(
                        status=FAILED, finished_at=now,
                        error=f"the analysis did not finish in {r.attempts} attempts (the "
                              "server or its worker process stopped during each)"))
                    conn.execute(update(jobs).where(jobs.c.id == r.job_id)
                                 .values(failed=jobs.c.failed + 1))
                    continue
                res = conn.execute(update(sessions).where(and_(
                    sessions.c.id == r.id, sessions.c.status == QUEUED)).values(
                    status=RUNNING, started_at=now, attempts=sessions.c.attempts + 1))
                if res.rowcount:
                    claimed.append(r.id)
            if not claimed:
                return []
            return self._sessions(conn, sessions.c.id.in_(claimed), sessions.c.created_at)

    def requeue(self, session_id: str) -> None:
        with self._write() as conn:
            conn.execute(update(sessions).where(and_(
                sessions.c.id == session_id, sessions.c.status == RUNNING))
                .values(status=QUEUED, started_at=None))

    def finish_done(self, session_id: str, s: AnalysisSummary) -> SessionRow:
        now = time.time()
        values = asdict(s)
        values["workers"] = json.dumps(list(s.workers))
        with self._write() as conn:
            conn.execute(update(sessions).where(sessions.c.id == session_id).values(
                status=DONE, finished_at=now, error=None, **values))
            row = self._sessions(conn, sessions.c.id == session_id)[0]
            latest = conn.execute(
                select(sessions.c.id).where(and_(sessions.c.job_id == row.job_id,
                                                 sessions.c.status == DONE))
                .order_by(sessions.c.created_at.desc()).limit(1)).scalar()
            if latest == session_id:
                conn.execute(update(jobs).where(jobs.c.id == row.job_id).values(
                    last_session=session_id, last_done_at=now, last_slowdown=s.slowdown,
                    last_waste=s.waste, last_cause=s.cause, last_confidence=s.confidence,
                    last_step_time=s.step_time))
        return row

    def finish_failed(self, session_id: str, error: str) -> SessionRow:
        with self._write() as conn:
            conn.execute(update(sessions).where(sessions.c.id == session_id).values(
                status=FAILED, finished_at=time.time(), error=error))
            row = self._sessions(conn, sessions.c.id == session_id)[0]
            conn.execute(update(jobs).where(jobs.c.id == row.job_id)
                         .values(failed=jobs.c.failed + 1))
        return row

    # -- detection events -----------------------------------------------------------------
    def ensure_job(self, name: str) -> int:
        with self._write() as conn:
            return self._job_id(conn, name, time.time())

    def add_events(self, job_id: int, n_records: int,
                   found: Sequence[DetectionEvent]) -> list[EventRow]:
        now = time.time()
        out: list[EventRow] = []
        with self._write() as conn:
            conn.execute(update(jobs).where(jobs.c.id == job_id)
                         .values(records=jobs.c.records + n_records))
            for e in found:
                res = conn.execute(insert(events).values(
                    job_id=job_id, kind=e.kind, rank=e.rank, iteration=e.iteration, ts=e.ts,
                    severity=e.severity, level_s=e.level_s, previous_s=e.previous_s,
                    detail=json.dumps(e.detail, sort_keys=True), received_at=now))
                key = res.inserted_primary_key
                assert key is not None
                out.append(EventRow(id=int(key[0]), job_id=job_id, received_at=now, event=e))
        return out

    def events(self, job_id: int, limit: int = 500) -> list[EventRow]:
        """A job's latest events, oldest first."""
        q = (select(events).where(events.c.job_id == job_id).order_by(events.c.id.desc())
             .limit(limit))
        with self._read() as conn:
            rows = conn.execute(q).all()
        return [EventRow(id=r.id, job_id=r.job_id, received_at=r.received_at,
                         event=DetectionEvent(
                             kind=r.kind, rank=r.rank, iteration=r.iteration, ts=r.ts,
                             severity=r.severity, level_s=r.level_s, previous_s=r.previous_s,
                             detail=json.loads(r.detail)))
                for r in reversed(rows)]

    # -- alerts ---------------------------------------------------------------------------
    def _alerts(self, conn: Connection, where: Any, limit: int | None = None
                ) -> list[AlertRow]:
        q = (select(alerts, jobs.c.name.label("job_name")).join(jobs).where(where)
             .order_by(alerts.c.id.desc()))
        if limit is not None:
            q = q.limit(limit)
        out = []
        for r in conn.execute(q):
            m = dict(r._mapping)
            m["job"] = m.pop("job_name")
            m["body"] = json.loads(m["body"])
            out.append(AlertRow(**m))
        return out

    def open_alert(self, job_id: int, rule: str, cause: str) -> AlertRow | None:
        with self._read() as conn:
            found = self._alerts(conn, and_(alerts.c.job_id == job_id, alerts.c.rule == rule,
                                            alerts.c.cause == cause, alerts.c.open.is_(True)),
                                 limit=1)
        return found[0] if found else None

    def raise_alert(self, job_id: int, rule: str, cause: str, session_id: str | None,
                    event_id: int | None, webhook: str | None, body: dict[str, Any],
                    reminder_s: float) -> AlertRow | None:
        """Record a notification for (job, rule, cause) unless one was sent less than
        ``reminder_s`` ago and is still open (then count it as suppressed and return None).
        ``body`` gets the alert's id, repeat number and first-seen time."""
        now = time.time()
        with self._write() as conn:
            prev = self._alerts(conn, and_(alerts.c.job_id == job_id, alerts.c.rule == rule,
                                           alerts.c.cause == cause, alerts.c.open.is_(True)),
                                limit=1)
            if prev and now - prev[0].created_at < reminder_s:
                conn.execute(update(alerts).where(alerts.c.id == prev[0].id)
                             .values(suppressed=alerts.c.suppressed + 1))
                return None
            repeat = prev[0].repeat + 1 if prev else 0
            first = prev[0].body.get("first_seen", prev[0].created_at) if prev else now
            if prev:
                conn.execute(update(alerts).where(alerts.c.id == prev[0].id)
                             .values(open=False))
            res = conn.execute(insert(alerts).values(
                job_id=job_id, rule=rule, cause=cause, session_id=session_id,
                event_id=event_id, created_at=now, status="pending", attempts=0,
                webhook=webhook, body="{}", repeat=repeat, suppressed=0, open=True))
            key = res.inserted_primary_key
            assert key is not None
            alert_id = int(key[0])
            full = {**body, "alert": alert_id, "repeat": repeat, "first_seen": first}
            conn.execute(update(alerts).where(alerts.c.id == alert_id)
                         .values(body=json.dumps(full, sort_keys=True)))
            return self._alerts(conn, alerts.c.id == alert_id)[0]

    def resolve_alerts(self, job_id: int, rule: str, keep_cause: str | None = None) -> int:
        """Close the open alerts of (job, rule) whose cause no longer holds."""
        cond = and_(alerts.c.job_id == job_id, alerts.c.rule == rule, alerts.c.open.is_(True))
        if keep_cause is not None:
            cond = and_(cond, alerts.c.cause != keep_cause)
        with self._write() as conn:
            res = conn.execute(update(alerts).where(cond)
                               .values(open=False, resolved_at=time.time()))
        return int(res.rowcount or 0)

    def open_alerts(self, job_id: int | None = None, rule: str | None = None
                    ) -> list[AlertRow]:
        """The open alerts (of a job, of a rule of that job), newest first."""
        cond: Any = alerts.c.open.is_(True)
        if job_id is not None:
            cond = and_(cond, alerts.c.job_id == job_id)
        if rule is not None:
            cond = and_(cond, alerts.c.rule == rule)
        with self._read() as conn:
            return self._alerts(conn, cond)

    def pending_alerts(self) -> list[AlertRow]:
        with self._read() as conn:
            return list(reversed(self._alerts(conn, alerts.c.status == "pending")))

    def alert(self, alert_id: int) -> AlertRow | None:
        with self._read() as conn:
            found = self._alerts(conn, alerts.c.id == alert_id)
        return found[0] if found else None

    def mark_alert(self, alert_id: int, status: str, attempts: int, http_status: int | None,
                   error: str | None) -> None:
        with self._write() as conn:
            conn.execute(update(alerts).where(alerts.c.id == alert_id).values(
                status=status, attempts=attempts, http_status=http_status, error=error,
                sent_at=time.time() if status == "sent" else None))

    def alerts(self, job_id: int | None = None, limit: int = 200) -> list[AlertRow]:
        cond = alerts.c.id > 0 if job_id is None else alerts.c.job_id == job_id
        with self._read() as conn:
            return self._alerts(conn, cond, limit)

    # -- totals ---------------------------------------------------------------------------
    def totals(self) -> Totals:
        with self._read() as conn:
            by_status: dict[str, int] = dict(conn.execute(select(sessions.c.status, func.count())
                                          .group_by(sessions.c.status)).all())
            by_alert: dict[str, int] = dict(conn.execute(select(alerts.c.status, func.count())
                                         .group_by(alerts.c.status)).all())
            n_events = conn.execute(select(func.count()).select_from(events)).scalar_one()
            n_records = conn.execute(select(func.coalesce(func.sum(jobs.c.records), 0))
                                     ).scalar_one()
        return Totals(sessions=sum(by_status.values()), failed=by_status.get(FAILED, 0),
                      queued=by_status.get(QUEUED, 0), running=by_status.get(RUNNING, 0),
                      done=by_status.get(DONE, 0), alerts_sent=by_alert.get("sent", 0),
                      alerts_failed=by_alert.get("failed", 0), events=int(n_events),
                      records=int(n_records))

