"""Restarts keep the streams' state: where each job's record stream was (its stream
positions, per batch), when the job last sent records, and the rank of an onset alert (an
alert per culprit: job, rule, cause, rank).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("last_records_at", sa.Float, nullable=True))
    with op.batch_alter_table("record_batches") as batch:
        batch.add_column(sa.Column("state", sa.Text, nullable=True))
    with op.batch_alter_table("alerts") as batch:
        batch.add_column(sa.Column("rank", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("alerts") as batch:
        batch.drop_column("rank")
    with op.batch_alter_table("record_batches") as batch:
        batch.drop_column("state")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("last_records_at")
