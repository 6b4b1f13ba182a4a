"""Opening the database: one :class:`Database` per process, sessions per transaction.

SQLite (the embedded default) gets the settings that make it safe with
several threads and processes: WAL, a busy timeout, foreign keys, and
``BEGIN IMMEDIATE`` so that a transaction takes the write lock up front
instead of failing half-way with "database is locked".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from oslo_config import cfg
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from conductor.exception import ConfigurationError

__all__ = ["Database", "database_from_conf"]

_SQLITE_BUSY_TIMEOUT_S = 30


class Database:
    """An engine and its session factory.

    :param url: SQLAlchemy URL (``sqlite:///path``, ``sqlite://`` for memory,
        ``postgresql+psycopg2://...``).
    """

    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = url
        kwargs: dict[str, Any] = {"echo": echo, "future": True}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {
                "check_same_thread": False,
                "timeout": _SQLITE_BUSY_TIMEOUT_S,
            }
            if url in ("sqlite://", "sqlite:///:memory:"):
                # One shared connection, or every thread sees its own empty db.
                kwargs["poolclass"] = StaticPool
        else:
            kwargs["pool_pre_ping"] = True
        self.engine: Engine = create_engine(url, **kwargs)
        if self.engine.dialect.name == "sqlite":
            _configure_sqlite(self.engine, in_memory="poolclass" in kwargs)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._read_sessions = sessionmaker(
            self.engine.execution_options(ringfleet_readonly=True), expire_on_commit=False
        )

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session in one transaction: committed on success, rolled back on error."""
        with self._sessions.begin() as session:
            yield session

    @contextlib.contextmanager
    def reading(self) -> Iterator[Session]:
        """A session for reads only (on SQLite it does not take the write lock)."""
        with self._read_sessions.begin() as session:
            yield session

    def dispose(self) -> None:
        self.engine.dispose()


def _configure_sqlite(engine: Engine, *, in_memory: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide when transactions begin.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        if not in_memory:
            cursor.execute("PRAGMA journal_mode=WAL")
            # In WAL mode NORMAL loses no committed transaction on a process
            # crash (only, at worst, the last ones on a power loss) and
            # halves the cost of a commit.
            cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={_SQLITE_BUSY_TIMEOUT_S * 1000}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        # Straight to the driver: this runs for every transaction, and the
        # full statement machinery cost as much as the allocation's UPDATE.
        driver = connection.connection.driver_connection
        if connection.get_execution_options().get("ringfleet_readonly"):
            driver.execute("BEGIN")  # deferred: never blocks writers
        else:
            driver.execute("BEGIN IMMEDIATE")


def database_from_conf(conf: cfg.ConfigOpts) -> Database:
    """The database named by ``[database] connection``."""
    url = conf.database.connection
    if not url:
        raise ConfigurationError("database", "connection", "must be set")
    try:
        return Database(url, echo=conf.database.connection_debug)
    except Exception as exc:  # SQLAlchemy raises several types for bad URLs
        raise ConfigurationError("database", "connection", f"unusable: {exc}") from exc
