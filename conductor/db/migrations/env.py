"""Alembic environment: runs migrations on the connection handed in by
:mod:`conductor.db.migration` (never on a URL read from alembic.ini)."""

from __future__ import annotations

from alembic import context

from conductor.db.models import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
