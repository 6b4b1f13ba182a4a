"""Schema migrations with alembic: ``upgrade`` to the newest, or ``version``.

The migration scripts live in ``conductor/db/migrations/versions``; they are
forward-only (a downgrade on production data is a restore from backup).
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from conductor.db.engine import Database

__all__ = ["current_version", "head_version", "upgrade"]

_SCRIPTS = Path(__file__).resolve().parent / "migrations"


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    return config


def upgrade(db: Database, revision: str = "head") -> None:
    """Create or upgrade the schema (idempotent)."""
    config = _config()
    with db.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def current_version(db: Database) -> str | None:
    """The schema revision the database is at, ``None`` when empty."""
    with db.engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_version() -> str:
    """The newest revision this code knows."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head
