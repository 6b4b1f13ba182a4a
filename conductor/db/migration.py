# SPDX-License-Identifier: Apache-2.0
"""Schema migrations with alembic: ``upgrade`` to the newest (or its SQL), or ``version``.

The migration scripts live in ``conductor/db/migrations/versions``; they are
forward-only (a downgrade on production data is a restore from backup).  A
database at a revision this code has no script for was upgraded by a newer
ringfleet: :func:`upgrade` refuses it (:class:`SchemaNewerThanCode`), and
:func:`is_known` tells the callers that only read the revision.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import TextIO

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import make_url

from conductor.common.exception import ConfigurationError, RingfleetError
from conductor.db.engine import Database

__all__ = [
    "SchemaNewerThanCode",
    "UnknownRevision",
    "current_version",
    "head_version",
    "is_known",
    "release",
    "upgrade",
    "upgrade_sql",
]

_SCRIPTS = Path(__file__).resolve().parent / "migrations"


class UnknownRevision(RingfleetError):
    """A schema revision this ringfleet has no migration script for.

    :ivar revision: that revision
    """

    def __init__(self, revision: str) -> None:
        self.revision = revision
        super().__init__(self._describe(revision), revision=revision)

    @staticmethod
    def _describe(revision: str) -> str:
        return (
            f"revision {revision} is unknown to this ringfleet ({release()}), "
            f"whose newest revision is {head_version()}"
        )


class SchemaNewerThanCode(UnknownRevision):
    """The database is at a revision this ringfleet does not know: a newer
    ringfleet upgraded it, and only upgrading this host's ringfleet helps."""

    @staticmethod
    def _describe(revision: str) -> str:
        return (
            f"the database is at revision {revision}, which this ringfleet "
            f"({release()}, newest revision {head_version()}) does not know: the "
            "database was upgraded by a newer ringfleet; upgrade this host's ringfleet"
        )


def release() -> str:
    """The installed ringfleet's version, for messages."""
    try:
        return metadata.version("ringfleet")
    except metadata.PackageNotFoundError:
        return "version unknown"


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    return config


def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(_config())


def upgrade(db: Database, revision: str = "head") -> None:
    """Create or upgrade the schema (idempotent).

    :raises DatabaseUnavailable: the database cannot be reached
    :raises SchemaNewerThanCode: the database is at a revision this code
        does not know (nothing is changed)
    """
    config = _config()
    with db.writing() as connection:
        with _quiet_alembic():  # alembic's command says the same once more below
            current = MigrationContext.configure(connection).get_current_revision()
        if current is not None and not is_known(current):
            raise SchemaNewerThanCode(current)
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def upgrade_sql(url: str, start: str | None, out: TextIO) -> None:
    """Write the SQL of an upgrade from *start* (an empty database when
    ``None``) to the newest revision to *out*, without connecting (for a DBA
    who applies schema changes by hand).  *url* only names the dialect.

    Nothing is written unless the whole SQL could be.

    :raises ConfigurationError: *url* names no SQL dialect installed
    :raises UnknownRevision: *start* is not a revision of this code
    """
    try:
        make_url(url).get_dialect()
    except Exception as exc:  # SQLAlchemy raises several types for bad URLs
        raise ConfigurationError("database", "connection", f"unusable: {exc}") from exc
    if start is not None:
        try:
            _scripts().get_revisions(start)
        except CommandError:
            raise UnknownRevision(start) from None
    config = _config()
    sql = io.StringIO()
    config.output_buffer = sql
    config.attributes["dialect_url"] = url
    with _quiet_alembic():  # its INFO lines would mix with the SQL on stdout
        command.upgrade(config, f"{start}:head" if start else "head", sql=True)
    out.write(sql.getvalue())


@contextlib.contextmanager
def _quiet_alembic() -> Iterator[None]:
    """alembic's INFO lines ("Context impl ...", each step) left out."""
    progress = logging.getLogger("alembic")
    level = progress.level
    progress.setLevel(logging.WARNING)
    try:
        yield
    finally:
        progress.setLevel(level)


def current_version(db: Database) -> str | None:
    """The schema revision the database is at, ``None`` when empty.

    :raises DatabaseUnavailable: the database cannot be reached
    """
    with db.read() as connection, _quiet_alembic():
        return MigrationContext.configure(connection).get_current_revision()


def head_version() -> str:
    """The newest revision this code knows."""
    head = _scripts().get_current_head()
    assert head is not None
    return head


def is_known(revision: str) -> bool:
    """Whether this code has the migration script of *revision* (exactly:
    not a prefix, not a symbol such as ``head``)."""
    return any(script.revision == revision for script in _scripts().walk_revisions())
