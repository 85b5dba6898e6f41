"""Alembic environment: runs on the connection the caller passes (see migrate.py)."""

from __future__ import annotations

from alembic import context

from services.read_models.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through services.read_models.migrate.migrate(engine)")
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
