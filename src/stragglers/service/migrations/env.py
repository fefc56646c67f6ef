"""Alembic environment: migrations always run on a connection handed in by the store
(``config.attributes["connection"]``), never from an ini file or the command line."""

from __future__ import annotations

from alembic import context

from stragglers.service.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata,
                  render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
