"""The service's database tables (SQLAlchemy Core). The schema is created and changed only by
the versioned migrations in ``migrations/versions`` (Alembic); a test checks that the
migrated schema equals these tables.

Times are seconds since the epoch (float). JSON values (labels, workers, event details,
alert bodies) are stored as text.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

#: A monitored training job; the ``last_*`` columns summarise its latest analysed session so
#: that the jobs page is one indexed read however many sessions are stored.
jobs = Table(
    "jobs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("created_at", Float, nullable=False),
    Column("sessions", Integer, nullable=False, default=0),
    Column("failed", Integer, nullable=False, default=0),
    Column("records", BigInteger, nullable=False, default=0),
    Column("last_session", String(32), nullable=True),
    Column("last_done_at", Float, nullable=True),
    Column("last_slowdown", Float, nullable=True),
    Column("last_waste", Float, nullable=True),
    Column("last_cause", String(32), nullable=True),
    Column("last_confidence", Float, nullable=True),
    Column("last_step_time", Float, nullable=True),
    Column("last_records_at", Float, nullable=True),
)

#: One profiling session: an uploaded trace, its analysis status and its summary figures.
#: ``status`` is the durable queue: queued -> running -> done | failed. A running session is
#: leased to one server (``lease_owner``) until ``lease_until``, renewed while it runs; an
#: expired lease is taken by the next claim. ``runs`` counts claims (attempt N writes
#: ``out-N``); ``attempts`` counts analyses that ended — failed, done, or their worker died.
sessions = Table(
    "sessions", metadata,
    Column("id", String(32), primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id"), nullable=False),
    Column("status", String(16), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("started_at", Float, nullable=True),
    Column("finished_at", Float, nullable=True),
    Column("attempts", Integer, nullable=False, default=0),
    Column("runs", Integer, nullable=False, default=0),
    Column("lease_owner", String(32), nullable=True),
    Column("lease_until", Float, nullable=True),
    Column("error", Text, nullable=True),
    Column("labels", Text, nullable=False, default="{}"),
    Column("client_key", String(64), nullable=True),
    Column("trace_file", String(64), nullable=False),
    Column("upload_name", String(255), nullable=False),
    Column("upload_bytes", BigInteger, nullable=False),
    Column("result_dir", String(64), nullable=True),
    Column("n_workers", Integer, nullable=True),
    Column("n_steps", Integer, nullable=True),
    Column("n_ops", BigInteger, nullable=True),
    Column("slowdown", Float, nullable=True),
    Column("waste", Float, nullable=True),
    Column("discrepancy", Float, nullable=True),
    Column("trustworthy", Boolean, nullable=True),
    Column("cause", String(32), nullable=True),
    Column("confidence", Float, nullable=True),
    Column("workers", Text, nullable=True),
    Column("step_time", Float, nullable=True),
    Column("analysis_s", Float, nullable=True),
    UniqueConstraint("job_id", "client_key", name="uq_sessions_job_key"),
    Index("ix_sessions_job_created", "job_id", "created_at"),
    Index("ix_sessions_status_created", "status", "created_at"),
)

#: Events of the streaming detector (onset, change, recovery, speedup, suspects, ...).
events = Table(
    "events", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, ForeignKey("jobs.id"), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("rank", Integer, nullable=True),
    Column("iteration", BigInteger, nullable=True),
    Column("ts", Float, nullable=True),
    Column("severity", Float, nullable=True),
    Column("level_s", Float, nullable=True),
    Column("previous_s", Float, nullable=True),
    Column("detail", Text, nullable=False),
    Column("received_at", Float, nullable=False),
    Column("batch_id", Integer, nullable=True),
    Index("ix_events_job_id", "job_id", "id"),
    Index("ix_events_batch_id", "batch_id"),
)

#: Records batches of the streaming detector, committed together with the events they
#: produced: the detector's replay log and the idempotency keys of the batches. ``body`` (the
#: JSON lines) is kept for the latest batches only (the replay window), then set to NULL.
#: ``state`` (JSON, :class:`~stragglers.service.rows.StreamPosition`) is where the stream was
#: after the batch (its line count and the stream positions of the ranks it moved); when
#: batches leave the window, the newest of them keeps the whole position reached there (the
#: base a rebuilt detector numbers from) and the others' states are set to NULL.
record_batches = Table(
    "record_batches", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, ForeignKey("jobs.id"), nullable=False),
    Column("key", String(64), nullable=True),
    Column("n_records", Integer, nullable=False),
    Column("body", Text, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("state", Text, nullable=True),
    UniqueConstraint("job_id", "key", name="uq_record_batches_job_key"),
    Index("ix_record_batches_job_id", "job_id", "id"),
)

#: Alert notifications: one row per notification sent (or to send). ``open`` marks the
#: latest notification of a culprit — (job, rule, cause, rank): ``rank`` is the slow rank of
#: an onset alert, NULL for a session alert — whose condition still holds; repeats within
#: the re-alert interval are counted in ``suppressed`` instead of being sent.
alerts = Table(
    "alerts", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, ForeignKey("jobs.id"), nullable=False),
    Column("rule", String(64), nullable=False),
    Column("cause", String(64), nullable=False),
    Column("session_id", String(32), nullable=True),
    Column("event_id", Integer, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("sent_at", Float, nullable=True),
    Column("http_status", Integer, nullable=True),
    Column("error", Text, nullable=True),
    Column("webhook", Text, nullable=True),
    Column("body", Text, nullable=False),
    Column("repeat", Integer, nullable=False, default=0),
    Column("suppressed", Integer, nullable=False, default=0),
    Column("open", Boolean, nullable=False, default=True),
    Column("resolved_at", Float, nullable=True),
    Column("sender", String(32), nullable=True),
    Column("send_until", Float, nullable=True),
    Column("rank", Integer, nullable=True),
    Index("ix_alerts_key", "job_id", "rule", "cause", "open"),
    Index("ix_alerts_status", "status"),
)
