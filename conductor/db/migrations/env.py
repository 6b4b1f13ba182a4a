# SPDX-License-Identifier: Apache-2.0
"""Alembic environment: runs migrations on the connection handed in by
:mod:`conductor.db.migration` (never on a URL read from alembic.ini), or,
offline, writes their SQL for the dialect of the URL handed in."""

from __future__ import annotations

from alembic import context

from conductor.db.models import Base

if context.is_offline_mode():
    # ringfleet-dbsync upgrade --sql: the SQL for the URL's dialect, written
    # out without connecting.
    url = context.config.attributes["dialect_url"]
    context.configure(
        url=url,
        target_metadata=Base.metadata,
        literal_binds=True,
        render_as_batch=url.startswith("sqlite"),
    )
else:
    connection = context.config.attributes["connection"]
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
with context.begin_transaction():
    context.run_migrations()
