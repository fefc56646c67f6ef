"""The service's database: SQLite (WAL) under the data folder by default, PostgreSQL when a
``postgresql://`` URL is given. The schema is brought to the latest version by the Alembic
migrations when the store is opened.

The ``sessions`` table is also the durable analysis queue: a session row is committed
(``queued``) before the upload is acknowledged; a server claims it under a lease
(``running``); its result is committed as ``done`` or ``failed``. A running session whose
lease expired (its server was killed or cut off) is claimed again; on SQLite, where one
server owns the data folder, the sessions found running at start are queued again.

Writes are serialised by one lock per store when the database is SQLite (one writer at a
time is all SQLite allows; readers in WAL mode never wait for it).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
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
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError

from stragglers.errors import InputError
from stragglers.service.crash import crashpoint
from stragglers.service.rows import (
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
    StreamPosition,
    Totals,
)
from stragglers.service.tables import alerts, events, jobs, record_batches, sessions

DB_FILE = "smon.sqlite3"
#: Seconds a claimed session is leased to its server without a renewal.
LEASE_S = 30.0
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
        return create_engine(url, pool_pre_ping=True, pool_size=8, max_overflow=8,
                             connect_args={"connect_timeout": 10})
    raise InputError(f"--db {url.split(':', 1)[0]}:...: expected a postgresql:// or sqlite:/// "
                     "URL")


def migrate(engine: Engine) -> None:
    """Bring the schema to the latest version (no-op when it is already there)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def _died_message(attempts: int) -> str:
    return (f"the analysis did not finish in {attempts} attempts: its worker process died "
            "each time (out of memory?); POST /api/v1/sessions/ID/retry queues it again")


def _event_row(r: Any) -> EventRow:
    return EventRow(id=r.id, job_id=r.job_id, received_at=r.received_at,
                    event=DetectionEvent(
                        kind=r.kind, rank=r.rank, iteration=r.iteration, ts=r.ts,
                        severity=r.severity, level_s=r.level_s, previous_s=r.previous_s,
                        detail=json.loads(r.detail)))


class Store:
    """All reads and writes of the service's database.

    ``owner`` names this store's server in the leases it takes; ``lease_s`` is how long a
    claim holds a session without being renewed.
    """

    def __init__(self, engine: Engine, lease_s: float = LEASE_S) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self._write_lock = threading.Lock() if self.dialect == "sqlite" else None
        self.owner = uuid.uuid4().hex
        self.lease_s = lease_s

    @classmethod
    def open(cls, url: str, lease_s: float = LEASE_S) -> Store:
        engine = make_engine(url)
        migrate(engine)
        return cls(engine, lease_s)

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

    def _lease_free(self, now: float) -> Any:
        """Sessions a claim may take: queued ones, and running ones whose lease expired
        (their server stopped renewing it: killed, cut off from the database)."""
        return or_(sessions.c.status == QUEUED,
                   and_(sessions.c.status == RUNNING,
                        or_(sessions.c.lease_until.is_(None), sessions.c.lease_until < now)))

    def requeue_interrupted(self) -> int:
        """Queue again the sessions that were running when the server stopped (one server
        per database: SQLite; on PostgreSQL expired leases are retaken by the claims). A
        stopped server is no attempt: ``attempts`` is unchanged."""
        with self._write() as conn:
            res = conn.execute(update(sessions).where(sessions.c.status == RUNNING)
                               .values(status=QUEUED, started_at=None, lease_owner=None,
                                       lease_until=None))
        return int(res.rowcount or 0)

    def claim(self, limit: int, max_attempts: int) -> list[SessionRow]:
        """Lease up to ``limit`` queued sessions (oldest first) to this store's owner for
        ``lease_s`` seconds, mark them running and return them; running sessions whose lease
        expired are taken again. On PostgreSQL the rows are locked ``FOR UPDATE SKIP
        LOCKED`` in the claim's transaction, so concurrent servers never take one twice.

        A session whose ``attempts`` reached ``max_attempts`` is failed instead (attempts
        count analyses whose task process died, see :meth:`task_died`).
        """
        now = time.time()
        claimed: list[str] = []
        with self._write() as conn:
            q = (select(sessions.c.id, sessions.c.attempts, sessions.c.job_id)
                 .where(self._lease_free(now)).order_by(sessions.c.created_at).limit(limit))
            if self.dialect == "postgresql":
                q = q.with_for_update(skip_locked=True)
            for r in conn.execute(q).all():
                if r.attempts >= max_attempts:
                    conn.execute(update(sessions).where(sessions.c.id == r.id).values(
                        status=FAILED, finished_at=now, lease_owner=None, lease_until=None,
                        error=_died_message(r.attempts)))
                    conn.execute(update(jobs).where(jobs.c.id == r.job_id)
                                 .values(failed=jobs.c.failed + 1))
                    continue
                res = conn.execute(update(sessions).where(and_(
                    sessions.c.id == r.id, self._lease_free(now))).values(
                    status=RUNNING, started_at=now, runs=sessions.c.runs + 1,
                    lease_owner=self.owner, lease_until=now + self.lease_s))
                if res.rowcount:
                    claimed.append(r.id)
            if not claimed:
                return []
            return self._sessions(conn, sessions.c.id.in_(claimed), sessions.c.created_at)

    def _leased(self, session_ids: Sequence[str]) -> Any:
        """This server's running sessions among ``session_ids`` (it holds their lease)."""
        return and_(sessions.c.id.in_(list(session_ids)), sessions.c.status == RUNNING,
                    sessions.c.lease_owner == self.owner)

    def renew(self, session_ids: Sequence[str]) -> int:
        """Extend this owner's leases of ``session_ids`` (the dispatcher's heartbeat)."""
        if not session_ids:
            return 0
        with self._write() as conn:
            res = conn.execute(update(sessions).where(self._leased(session_ids))
                               .values(lease_until=time.time() + self.lease_s))
        return int(res.rowcount or 0)

    def release(self, session_ids: Sequence[str]) -> int:
        """Give this owner's running sessions back to the queue (a graceful stop); not an
        attempt."""
        if not session_ids:
            return 0
        with self._write() as conn:
            res = conn.execute(update(sessions).where(self._leased(session_ids)).values(
                status=QUEUED, started_at=None, lease_owner=None, lease_until=None))
        return int(res.rowcount or 0)

    def task_died(self, session_id: str, max_attempts: int) -> bool:
        """Count an attempt of a session whose task process died: queue it again, or fail
        it with the reason after ``max_attempts``. Returns True when it failed."""
        now = time.time()
        with self._write() as conn:
            q = select(sessions.c.attempts, sessions.c.job_id).where(
                self._leased([session_id]))
            if self.dialect == "postgresql":
                q = q.with_for_update()
            row = conn.execute(q).first()
            if row is None:
                return False
            n = int(row.attempts) + 1
            if n >= max_attempts:
                conn.execute(update(sessions).where(sessions.c.id == session_id).values(
                    status=FAILED, finished_at=now, attempts=n, lease_owner=None,
                    lease_until=None, error=_died_message(n)))
                conn.execute(update(jobs).where(jobs.c.id == row.job_id)
                             .values(failed=jobs.c.failed + 1))
                return True
            conn.execute(update(sessions).where(sessions.c.id == session_id).values(
                status=QUEUED, started_at=None, attempts=n, lease_owner=None,
                lease_until=None))
        return False

    def retry(self, session_id: str) -> str | None:
        """Queue a failed session again (its attempts start over). Returns the status the
        session had (``failed``: queued now; another: unchanged), None when there is none."""
        with self._write() as conn:
            row = conn.execute(select(sessions.c.status, sessions.c.job_id)
                               .where(sessions.c.id == session_id)).first()
            if row is None:
                return None
            if row.status != FAILED:
                return str(row.status)
            res = conn.execute(update(sessions).where(and_(
                sessions.c.id == session_id, sessions.c.status == FAILED)).values(
                status=QUEUED, error=None, attempts=0, started_at=None, finished_at=None,
                lease_owner=None, lease_until=None))
            if not res.rowcount:  # another server's retry queued it between the two reads
                return QUEUED
            conn.execute(update(jobs).where(jobs.c.id == row.job_id)
                         .values(failed=jobs.c.failed - 1))
        return FAILED

    def queued(self) -> int:
        """The number of sessions waiting in the queue."""
        with self._read() as conn:
            return int(conn.execute(select(func.count()).select_from(sessions)
                                    .where(sessions.c.status == QUEUED)).scalar_one())

    def _mine(self, session_id: str) -> Any:
        """A session whose outcome this server may record: not finished, and not leased to
        another server (which took it when this server's lease expired)."""
        return and_(sessions.c.id == session_id, sessions.c.status.in_([QUEUED, RUNNING]),
                    or_(sessions.c.lease_owner.is_(None),
                        sessions.c.lease_owner == self.owner))

    def finish_done(self, session_id: str, s: AnalysisSummary) -> SessionRow | None:
        """Record an analysis; None (nothing recorded) when the session is no longer this
        server's (see :meth:`_mine`): every session's outcome is recorded once."""
        now = time.time()
        values = asdict(s)
        values["workers"] = json.dumps(list(s.workers))
        with self._write() as conn:
            res = conn.execute(update(sessions).where(self._mine(session_id)).values(
                status=DONE, finished_at=now, error=None, attempts=sessions.c.attempts + 1,
                lease_owner=None, lease_until=None, **values))
            if not res.rowcount:
                return None
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

    def finish_failed(self, session_id: str, error: str) -> SessionRow | None:
        """Record a failed analysis; None when the session is no longer this server's."""
        with self._write() as conn:
            res = conn.execute(update(sessions).where(self._mine(session_id)).values(
                status=FAILED, finished_at=time.time(), error=error,
                attempts=sessions.c.attempts + 1, lease_owner=None, lease_until=None))
            if not res.rowcount:
                return None
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
        """Store events (and count records) without a batch (tests, imports)."""
        with self._write() as conn:
            return self._insert_events(conn, job_id, n_records, found, None, time.time())

    def _insert_events(self, conn: Connection, job_id: int, n_records: int,
                       found: Sequence[DetectionEvent], batch_id: int | None,
                       now: float) -> list[EventRow]:
        out: list[EventRow] = []
        if n_records:
            conn.execute(update(jobs).where(jobs.c.id == job_id)
                         .values(records=jobs.c.records + n_records, last_records_at=now))
        for e in found:
            res = conn.execute(insert(events).values(
                job_id=job_id, kind=e.kind, rank=e.rank, iteration=e.iteration, ts=e.ts,
                severity=e.severity, level_s=e.level_s, previous_s=e.previous_s,
                detail=json.dumps(e.detail, sort_keys=True), received_at=now,
                batch_id=batch_id))
            key = res.inserted_primary_key
            assert key is not None
            out.append(EventRow(id=int(key[0]), job_id=job_id, received_at=now, event=e))
        return out

    def add_batch(self, job_id: int, key: str | None, lines: Sequence[str], n_records: int,
                  found: Sequence[DetectionEvent], keep_lines: int,
                  position: StreamPosition | None = None) -> list[EventRow] | None:
        """Commit a records batch (its lines: the detector's replay log; ``position``: where
        the stream was after it, the ranks it moved), its events and the job's record count
        in one transaction, so that a ``kill -9`` leaves all or none of them. Lines of batches
        older than the last ``keep_lines`` lines are dropped (the batch's key stays; see
        :meth:`_trim_batches`). Returns None when the job already has a batch with ``key``."""
        now = time.time()
        try:
            with self._write() as conn:
                res = conn.execute(insert(record_batches).values(
                    job_id=job_id, key=key, n_records=n_records, body="\n".join(lines),
                    created_at=now, state=None if position is None else position.to_json()))
                pk = res.inserted_primary_key
                assert pk is not None
                batch_id = int(pk[0])
                out = self._insert_events(conn, job_id, n_records, found, batch_id, now)
                if not n_records:  # a batch of blank or message lines: still activity
                    conn.execute(update(jobs).where(jobs.c.id == job_id)
                                 .values(last_records_at=now))
                self._trim_batches(conn, job_id, keep_lines)
                crashpoint("records-logged")
        except IntegrityError:
            if key is not None and self.batch_answer(job_id, key) is not None:
                return None
            raise
        return out

    def _trim_batches(self, conn: Connection, job_id: int, keep_lines: int) -> None:
        """Drop the lines of the batches before the latest ones that hold ``keep_lines``
        lines. The newest dropped batch keeps the whole stream position reached there (the
        previous base followed by the positions of the batches dropped now); the other
        dropped batches' positions are set to NULL."""
        rows = conn.execute(
            select(record_batches.c.id, record_batches.c.n_records).where(and_(
                record_batches.c.job_id == job_id, record_batches.c.body.is_not(None)))
            .order_by(record_batches.c.id.desc())).all()
        total = 0
        for r in rows:
            total += r.n_records
            if total >= keep_lines:
                break
        else:
            return
        dropped = conn.execute(
            select(record_batches.c.id, record_batches.c.state,
                   record_batches.c.body.is_(None).label("gone")).where(and_(
                record_batches.c.job_id == job_id, record_batches.c.id < r.id,
                or_(record_batches.c.body.is_not(None), record_batches.c.state.is_not(None))))
            .order_by(record_batches.c.id)).all()
        if all(d.gone for d in dropped):  # nothing new to drop
            return
        base: StreamPosition | None = None
        for d in dropped:  # the previous base (body NULL) first, then the batches dropped
            pos = StreamPosition.from_json(d.state)
            if pos is not None:
                base = pos if base is None else base.then(pos)
        last = dropped[-1].id
        conn.execute(update(record_batches).where(and_(
            record_batches.c.job_id == job_id, record_batches.c.id < last,
            or_(record_batches.c.body.is_not(None), record_batches.c.state.is_not(None))))
            .values(body=None, state=None))
        conn.execute(update(record_batches).where(record_batches.c.id == last).values(
            body=None, state=None if base is None else base.to_json()))

    def batch_answer(self, job_id: int, key: str) -> tuple[int, list[EventRow]] | None:
        """(records, events) of the job's batch with ``key``, None when there is none."""
        with self._read() as conn:
            row = conn.execute(select(record_batches.c.id, record_batches.c.n_records).where(
                and_(record_batches.c.job_id == job_id, record_batches.c.key == key))).first()
            if row is None:
                return None
            found = conn.execute(select(events).where(events.c.batch_id == row.id)
                                 .order_by(events.c.id)).all()
        return int(row.n_records), [_event_row(r) for r in found]

    def replay_log(self, job_id: int) -> tuple[StreamPosition | None,
                                               list[tuple[list[str], StreamPosition | None]]]:
        """What rebuilds a job's detector: the stream position where the kept batches begin
        (None: from the stream's start, or unknown), and the kept batches, oldest first:
        (record lines, the position after the batch — None for batches of servers before
        positions were stored)."""
        with self._read() as conn:
            rows = conn.execute(
                select(record_batches.c.body, record_batches.c.state).where(and_(
                    record_batches.c.job_id == job_id,
                    or_(record_batches.c.body.is_not(None),
                        record_batches.c.state.is_not(None))))
                .order_by(record_batches.c.id)).all()
        base: StreamPosition | None = None
        kept: list[tuple[list[str], StreamPosition | None]] = []
        for r in rows:
            pos = StreamPosition.from_json(r.state)
            if r.body is None:
                base = pos
            elif r.body:
                kept.append((r.body.split("\n"), pos))
            else:
                kept.append(([], pos))
        return base, kept

    def replay_lines(self, job_id: int) -> list[str]:
        """The record lines kept for rebuilding a job's detector, oldest first."""
        return [ln for lines, _ in self.replay_log(job_id)[1] for ln in lines]

    def events(self, job_id: int, limit: int = 500) -> list[EventRow]:
        """A job's latest events, oldest first."""
        q = (select(events).where(events.c.job_id == job_id).order_by(events.c.id.desc())
             .limit(limit))
        with self._read() as conn:
            rows = conn.execute(q).all()
        return [_event_row(r) for r in reversed(rows)]

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

    @staticmethod
    def _culprit(job_id: int, rule: str, cause: str, rank: int | None) -> Any:
        """The open alert of a culprit: (job, rule, cause, rank — None: the job's)."""
        return and_(alerts.c.job_id == job_id, alerts.c.rule == rule, alerts.c.cause == cause,
                    alerts.c.rank.is_(None) if rank is None else alerts.c.rank == rank,
                    alerts.c.open.is_(True))

    def open_alert(self, job_id: int, rule: str, cause: str, rank: int | None = None
                   ) -> AlertRow | None:
        with self._read() as conn:
            found = self._alerts(conn, self._culprit(job_id, rule, cause, rank), limit=1)
        return found[0] if found else None

    def raise_alert(self, job_id: int, rule: str, cause: str, session_id: str | None,
                    event_id: int | None, webhook: str | None, body: dict[str, Any],
                    reminder_s: float, rank: int | None = None) -> AlertRow | None:
        """Record a notification for the culprit (job, rule, cause, rank) unless one was
        sent less than ``reminder_s`` ago and is still open (then count it as suppressed and
        return None). ``body`` gets the alert's id, repeat number and first-seen time."""
        now = time.time()
        with self._write() as conn:
            if self.dialect == "postgresql":
                # one raise per job at a time across servers: two servers finishing sessions
                # of one job together must not both send a first alert
                conn.execute(select(jobs.c.id).where(jobs.c.id == job_id).with_for_update())
            prev = self._alerts(conn, self._culprit(job_id, rule, cause, rank), limit=1)
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
                sender=self.owner, send_until=now + self.lease_s, webhook=webhook, body="{}",
                repeat=repeat, suppressed=0, open=True, rank=rank))
            key = res.inserted_primary_key
            assert key is not None
            alert_id = int(key[0])
            full = {**body, "alert": alert_id, "repeat": repeat, "first_seen": first}
            conn.execute(update(alerts).where(alerts.c.id == alert_id)
                         .values(body=json.dumps(full, sort_keys=True)))
            return self._alerts(conn, alerts.c.id == alert_id)[0]

    def close_alerts(self, alert_ids: Sequence[int]) -> list[int]:
        """Close these alerts if still open; returns the ones this call closed (two servers
        closing the same alert: one of them gets it, and sends its ``resolved``)."""
        closed = []
        now = time.time()
        with self._write() as conn:
            for alert_id in alert_ids:
                res = conn.execute(update(alerts).where(and_(
                    alerts.c.id == alert_id, alerts.c.open.is_(True)))
                    .values(open=False, resolved_at=now))
                if res.rowcount:
                    closed.append(alert_id)
        return closed

    def claim_pending_alerts(self) -> list[AlertRow]:
        """Take the pending alerts that no server holds (their sender stopped or was killed
        before sending them) for this store's owner, for ``lease_s`` (see
        :meth:`renew_alerts`); a conditional UPDATE per alert, so that each is taken by one
        server only. Oldest first."""
        now = time.time()
        free = and_(alerts.c.status == "pending",
                    or_(alerts.c.sender.is_(None), alerts.c.send_until.is_(None),
                        alerts.c.send_until < now))
        taken = []
        with self._write() as conn:
            ids = conn.execute(select(alerts.c.id).where(free).order_by(alerts.c.id)
                               ).scalars().all()
            for alert_id in ids:
                res = conn.execute(update(alerts).where(and_(alerts.c.id == alert_id, free))
                                   .values(sender=self.owner, send_until=now + self.lease_s))
                if res.rowcount:
                    taken.append(alert_id)
            if not taken:
                return []
            return list(reversed(self._alerts(conn, alerts.c.id.in_(taken))))

    def renew_alerts(self, alert_ids: Sequence[int]) -> int:
        """Extend this owner's hold on the pending alerts it is sending."""
        if not alert_ids:
            return 0
        with self._write() as conn:
            res = conn.execute(update(alerts).where(and_(
                alerts.c.id.in_(list(alert_ids)), alerts.c.status == "pending",
                alerts.c.sender == self.owner)).values(send_until=time.time() + self.lease_s))
        return int(res.rowcount or 0)

    def resolve_alerts(self, job_id: int, rule: str, keep_cause: str | None = None) -> int:
        """Close the open alerts of (job, rule) whose cause no longer holds."""
        cond = and_(alerts.c.job_id == job_id, alerts.c.rule == rule, alerts.c.open.is_(True))
        if keep_cause is not None:
            cond = and_(cond, alerts.c.cause != keep_cause)
        with self._write() as conn:
            res = conn.execute(update(alerts).where(cond)
                               .values(open=False, resolved_at=time.time()))
        return int(res.rowcount or 0)

    def last_alerted_event(self, job_id: int) -> int | None:
        """The id of the latest event of a job that raised an alert (None: none did)."""
        with self._read() as conn:
            found = conn.execute(select(func.max(alerts.c.event_id))
                                 .where(alerts.c.job_id == job_id)).scalar()
        return None if found is None else int(found)

    def open_alerts(self, job_id: int | None = None, rule: str | None = None,
                    rank: int | None = None) -> list[AlertRow]:
        """The open alerts (of a job, of a rule of that job, of a rank), newest first."""
        cond: Any = alerts.c.open.is_(True)
        if job_id is not None:
            cond = and_(cond, alerts.c.job_id == job_id)
        if rule is not None:
            cond = and_(cond, alerts.c.rule == rule)
        if rank is not None:
            cond = and_(cond, alerts.c.rank == rank)
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
                sent_at=time.time() if status == "sent" else None, send_until=None))

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

