"""Leases on claimed sessions, runs counted apart from attempts, records batches stored with
their idempotency keys (the detector's replay log moves into the database).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("runs", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("lease_owner", sa.String(32), nullable=True))
        batch.add_column(sa.Column("lease_until", sa.Float, nullable=True))
    # attempts counted claims until now (server stops included): the output folders
    # out-1..out-N exist; sessions still in the queue start their attempts over
    op.execute("UPDATE sessions SET runs = attempts")
    op.execute("UPDATE sessions SET attempts = 0 WHERE status IN ('queued', 'running')")
    with op.batch_alter_table("sessions") as batch:
        batch.alter_column("runs", server_default=None)
    op.create_table(
        "record_batches",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("key", sa.String(64), nullable=True),
        sa.Column("n_records", sa.Integer, nullable=False),
        sa.Column("body", sa.Text, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("job_id", "key", name="uq_record_batches_job_key"),
    )
    op.create_index("ix_record_batches_job_id", "record_batches", ["job_id", "id"])
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("batch_id", sa.Integer, nullable=True))
    op.create_index("ix_events_batch_id", "events", ["batch_id"])


def downgrade() -> None:
    op.drop_index("ix_events_batch_id", "events")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("batch_id")
    op.drop_index("ix_record_batches_job_id", "record_batches")
    op.drop_table("record_batches")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("lease_until")
        batch.drop_column("lease_owner")
        batch.drop_column("runs")
