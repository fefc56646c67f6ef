"""Versioned schema migrations (Alembic); run by :meth:`stragglers.service.store.Store.open`."""
