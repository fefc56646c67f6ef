"""Alerts are claimed by the server that sends them (several servers on one database send
each alert once): the sender and until when it holds the alert.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("alerts") as batch:
        batch.add_column(sa.Column("sender", sa.String(32), nullable=True))
        batch.add_column(sa.Column("send_until", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("alerts") as batch:
        batch.drop_column("send_until")
        batch.drop_column("sender")
