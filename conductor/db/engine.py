"""Opening the database: one :class:`Database` per process, sessions per transaction.

SQLite (the embedded default) gets the settings that make it safe with
several threads and processes: WAL, a busy timeout, foreign keys, and
``BEGIN IMMEDIATE`` so that a transaction takes the write lock up front
instead of failing half-way with "database is locked".
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

from oslo_config import cfg
from sqlalchemy import create_engine, event, exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from conductor.exception import ConfigurationError

__all__ = ["Database", "database_from_conf"]

LOG = logging.getLogger(__name__)

_SQLITE_BUSY_TIMEOUT_S = 30
# A pooled connection unused for longer than this is pinged before use.
_PING_IDLE_S = 1.0
_DEFAULT_POOL_SIZE = 20


class Database:
    """An engine and its session factory.

    :param url: SQLAlchemy URL (``sqlite:///path``, ``sqlite://`` for memory,
        ``postgresql+psycopg2://...``).
    :param pool_size: connections kept open (not SQLite)
    """

    def __init__(
        self, url: str, *, echo: bool = False, pool_size: int = _DEFAULT_POOL_SIZE
    ) -> None:
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
            # A pool smaller than the threads using it closes every overflow
            # connection on return and opens a new one next time: that cost
            # more than the transactions themselves under load.
            kwargs["pool_size"] = pool_size
            # The most recently used connection first: under a light load the
            # same few stay warm (no ping) and the rest age out unused.
            kwargs["pool_use_lifo"] = True
        self.engine: Engine = create_engine(url, **kwargs)
        if self.engine.dialect.name == "sqlite":
            _configure_sqlite(self.engine, in_memory="poolclass" in kwargs)
        else:
            _ping_when_idle(self.engine, _PING_IDLE_S)
        self._read_engine = self.engine.execution_options(ringfleet_readonly=True)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._read_sessions = sessionmaker(self._read_engine, expire_on_commit=False)

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

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A Core connection in a transaction for reads only.

        For the hot paths: without a Session's bookkeeping a read costs about
        half as much; on SQLite it does not take the write lock.
        """
        with self._read_engine.begin() as connection:
            yield connection

    def dispose(self) -> None:
        self.engine.dispose()


def _ping_when_idle(engine: Engine, idle: float) -> None:
    """Pessimistic disconnect handling, but only for connections idle > ``idle`` s.

    ``pool_pre_ping`` pings on every checkout: a round trip to the server per
    transaction, a tenth of a build's database time.  A connection used less
    than a second ago is very likely still good; if the server went away in
    that second the statement fails, SQLAlchemy invalidates the whole pool,
    and the caller's error handling (every caller has one: a failed
    transaction changes nothing) covers it, exactly as for a server lost
    mid-transaction with pre-ping.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(_dbapi_connection: Any, record: Any) -> None:
        record.info["ringfleet_used_at"] = time.monotonic()  # new: no ping needed

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["ringfleet_used_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        used_at = record.info.get("ringfleet_used_at")
        if used_at is not None and time.monotonic() - used_at < idle:
            return
        try:
            # The dialect's own ping (psycopg2: in autocommit, so that it
            # leaves no transaction open), as pool_pre_ping uses.
            engine.dialect.do_ping(dbapi_connection)
        except Exception as error:
            LOG.info("Database connection lost while idle (%s); reconnecting", error)
            # The pool discards this connection and checks out another
            # (a new one if needed), as with pool_pre_ping.
            raise exc.DisconnectionError(str(error)) from error


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
        return Database(
            url, echo=conf.database.connection_debug, pool_size=conf.database.max_pool_size
        )
    except Exception as exc:  # SQLAlchemy raises several types for bad URLs
        raise ConfigurationError("database", "connection", f"unusable: {exc}") from exc
