"""Initial schema: jobs, sessions (the durable analysis queue), detection events, alerts.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(128), nullable=False, unique=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("sessions", sa.Integer, nullable=False),
        sa.Column("failed", sa.Integer, nullable=False),
        sa.Column("records", sa.BigInteger, nullable=False),
        sa.Column("last_session", sa.String(32), nullable=True),
        sa.Column("last_done_at", sa.Float, nullable=True),
        sa.Column("last_slowdown", sa.Float, nullable=True),
        sa.Column("last_waste", sa.Float, nullable=True),
        sa.Column("last_cause", sa.String(32), nullable=True),
        sa.Column("last_confidence", sa.Float, nullable=True),
        sa.Column("last_step_time", sa.Float, nullable=True),
    )
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("labels", sa.Text, nullable=False),
        sa.Column("client_key", sa.String(64), nullable=True),
        sa.Column("trace_file", sa.String(64), nullable=False),
        sa.Column("upload_name", sa.String(255), nullable=False),
        sa.Column("upload_bytes", sa.BigInteger, nullable=False),
        sa.Column("result_dir", sa.String(64), nullable=True),
        sa.Column("n_workers", sa.Integer, nullable=True),
        sa.Column("n_steps", sa.Integer, nullable=True),
        sa.Column("n_ops", sa.BigInteger, nullable=True),
        sa.Column("slowdown", sa.Float, nullable=True),
        sa.Column("waste", sa.Float, nullable=True),
        sa.Column("discrepancy", sa.Float, nullable=True),
        sa.Column("trustworthy", sa.Boolean, nullable=True),
        sa.Column("cause", sa.String(32), nullable=True),
        sa.Column("confidence", sa.Float, nullable=True),
        sa.Column("workers", sa.Text, nullable=True),
        sa.Column("step_time", sa.Float, nullable=True),
        sa.Column("analysis_s", sa.Float, nullable=True),
        sa.UniqueConstraint("job_id", "client_key", name="uq_sessions_job_key"),
    )
    op.create_index("ix_sessions_job_created", "sessions", ["job_id", "created_at"])
    op.create_index("ix_sessions_status_created", "sessions", ["status", "created_at"])
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("rank", sa.Integer, nullable=True),
        sa.Column("iteration", sa.BigInteger, nullable=True),
        sa.Column("ts", sa.Float, nullable=True),
        sa.Column("severity", sa.Float, nullable=True),
        sa.Column("level_s", sa.Float, nullable=True),
        sa.Column("previous_s", sa.Float, nullable=True),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("received_at", sa.Float, nullable=False),
    )
    op.create_index("ix_events_job_id", "events", ["job_id", "id"])
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("rule", sa.String(64), nullable=False),
        sa.Column("cause", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(32), nullable=True),
        sa.Column("event_id", sa.Integer, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("sent_at", sa.Float, nullable=True),
        sa.Column("http_status", sa.Integer, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("webhook", sa.Text, nullable=True),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("repeat", sa.Integer, nullable=False),
        sa.Column("suppressed", sa.Integer, nullable=False),
        sa.Column("open", sa.Boolean, nullable=False),
        sa.Column("resolved_at", sa.Float, nullable=True),
    )
    op.create_index("ix_alerts_key", "alerts", ["job_id", "rule", "cause", "open"])
    op.create_index("ix_alerts_status", "alerts", ["status"])


def downgrade() -> None:
    for name in ("alerts", "events", "sessions", "jobs"):
        op.drop_table(name)
