# SPDX-License-Identifier: Apache-2.0
"""Schema migrations with alembic: ``upgrade`` to the newest (or its SQL), or ``version``.

The migration scripts live in ``conductor/db/migrations/versions``; they are
forward-only (a downgrade on production data is a restore from backup).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TextIO

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from conductor.db.engine import Database

__all__ = ["current_version", "head_version", "upgrade", "upgrade_sql"]

_SCRIPTS = Path(__file__).resolve().parent / "migrations"


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    return config


def upgrade(db: Database, revision: str = "head") -> None:
    """Create or upgrade the schema (idempotent).

    :raises DatabaseUnavailable: the database cannot be reached
    """
    config = _config()
    with db.writing() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def upgrade_sql(url: str, start: str | None, out: TextIO) -> None:
    """Write the SQL of an upgrade from *start* (an empty database when
    ``None``) to the newest revision to *out*, without connecting (for a DBA
    who applies schema changes by hand).  *url* only names the dialect."""
    config = _config()
    config.output_buffer = out
    config.attributes["dialect_url"] = url
    progress = logging.getLogger("alembic")
    level = progress.level
    progress.setLevel(logging.WARNING)  # its INFO lines would mix with the SQL on stdout
    try:
        command.upgrade(config, f"{start}:head" if start else "head", sql=True)
    finally:
        progress.setLevel(level)


def current_version(db: Database) -> str | None:
    """The schema revision the database is at, ``None`` when empty.

    :raises DatabaseUnavailable: the database cannot be reached
    """
    with db.read() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_version() -> str:
    """The newest revision this code knows."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head
