# SPDX-License-Identifier: Apache-2.0
"""Opening the database: one :class:`Database` per process, sessions per transaction.

SQLite (the embedded default) gets the settings that make it safe with
several threads and processes: WAL, a busy timeout, foreign keys, and
``BEGIN IMMEDIATE`` so that a transaction takes the write lock up front
instead of failing half-way with "database is locked".

MySQL and MariaDB (``mysql+pymysql://``) run at READ COMMITTED, PostgreSQL's
default, instead of their own REPEATABLE READ.  The code is written for a
transaction whose every statement sees what was committed before it (a
read after a compare-and-swap ``UPDATE`` sees the rows as they are now, not
as they were at the transaction's first read); and InnoDB's REPEATABLE READ
also takes gap locks in locking reads and updates: with it, three processes
claiming the same nodes (tests/ownership_cases.py) deadlocked in 2 runs of 6
on MariaDB 10.11, with READ COMMITTED in none.

A database that cannot be reached (stopped, restarting, a dead pooled
connection) is :class:`DatabaseUnavailable` to every caller: a retryable
error without the server's address.  The process logs one WARNING when the
database becomes unreachable and one INFO when it is back, however many
transactions fail in between.  A pool with no connection free in time is
the same error to callers, but the database is not down: this process is
busier than its pool (one WARNING a minute says so, and which option to
raise).  A transaction that failed
on a dead connection before its commit changed nothing: functions decorated
with :func:`retry_on_dead_connection` run it once more on a fresh one.

oslo.db offers the same pieces (``wrap_db_retry``, ``DBConnectionError``,
its engine facade); it is not used because its exception filters come with
its own engine factory and options, which would replace this module's
SQLite and pool settings, and the three pieces here are a few lines each.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ParamSpec, TypeVar

from oslo_config import cfg
from sqlalchemy import create_engine, event, exc
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from conductor.common.exception import ConfigurationError, DatabaseUnavailable, first_line
from conductor.common.extras import install_hint

__all__ = ["Database", "database_from_conf", "retry_on_dead_connection"]

LOG = logging.getLogger(__name__)

_SQLITE_BUSY_TIMEOUT_S = 30
# A pooled connection unused for longer than this is pinged before use.
_PING_IDLE_S = 1.0
_DEFAULT_POOL_SIZE = 20
# At most one "pool exhausted" WARNING per this many seconds.
_BUSY_LOG_INTERVAL_S = 60.0
_DEFAULT_CONNECT_TIMEOUT_S = 10
_DEFAULT_STATEMENT_TIMEOUT_S = 60
# A live PostgreSQL server cancels a statement at statement_timeout; one that
# still has not answered this much later is not running it: it is hung.
_HUNG_GRACE_S = 5
_MYSQL_BACKENDS = ("mysql", "mariadb")

# Errors that say "the database cannot be used right now", not "this
# request is wrong": connection refused or lost, a server shutting down,
# SQLite busy past its timeout, no pooled connection free in time.
_UNAVAILABLE = (exc.OperationalError, exc.InterfaceError, exc.DisconnectionError, exc.TimeoutError)

_P = ParamSpec("_P")
_T = TypeVar("_T")


class Database:
    """An engine and its session factory.

    :param url: SQLAlchemy URL (``sqlite:///path``, ``sqlite://`` for memory,
        ``postgresql+psycopg2://...``, ``mysql+pymysql://...?charset=utf8mb4``).
    :param pool_size: connections kept open (not SQLite)
    :param connect_timeout: seconds to wait for a new connection (not SQLite)
    :param statement_timeout: seconds a statement may run, 0 for no limit
        (not SQLite, whose waits are bounded by its busy timeout)
    """

    def __init__(
        self,
        url: str,
        *,
        echo: bool = False,
        pool_size: int = _DEFAULT_POOL_SIZE,
        connect_timeout: int = _DEFAULT_CONNECT_TIMEOUT_S,
        statement_timeout: int = _DEFAULT_STATEMENT_TIMEOUT_S,
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
            backend = make_url(url).get_backend_name()
            if backend in _MYSQL_BACKENDS:
                kwargs["isolation_level"] = "READ COMMITTED"  # see the module doc
            kwargs["connect_args"] = _timeouts(
                backend, connect_timeout, statement_timeout, set_in_url=make_url(url).query
            )
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
            if self.engine.dialect.name == "postgresql" and statement_timeout:
                # libpq has no read timeout: see HungServerWatchdog.
                HungServerWatchdog(
                    self.engine, statement_timeout + _HUNG_GRACE_S, self.location
                ).install()
        self._read_engine = self.engine.execution_options(ringfleet_readonly=True)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._read_sessions = sessionmaker(self._read_engine, expire_on_commit=False)
        self._health_lock = threading.Lock()
        self._down_since: float | None = None  # monotonic; None while reachable
        self._statement_limit = _statement_limit(
            self.engine.dialect.name, statement_timeout, make_url(url).query
        )
        #: The conductor whose writes put work in flight (its member id in
        #: the conductors' group): the records it writes name it as their
        #: carrier (:mod:`conductor.db.carriage`).  ``None`` outside a
        #: conductor: such records are carried by nobody until one adopts them.
        self.carrier: str | None = None
        self._busy_logged_at: dict[str, float] = {}  # kind -> monotonic

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def location(self) -> str:
        """The URL without its password: what the operator's log lines name."""
        return make_url(self.url).render_as_string(hide_password=True)

    def wait_reachable(self, stopping: threading.Event, interval: float = 2.0) -> bool:
        """Wait until a transaction succeeds; False when *stopping* is set first.

        For a service started before its database: the first failure logs
        the one WARNING (naming the database), then it keeps trying quietly.
        """
        while True:
            try:
                with self.read() as connection:
                    connection.exec_driver_sql("SELECT 1")
                return True
            except DatabaseUnavailable:
                if stopping.wait(interval):
                    return False

    @property
    def reachable(self) -> bool:
        """False from a failure to reach the database until a transaction succeeds."""
        return self._down_since is None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session in one transaction: committed on success, rolled back on error.

        :raises DatabaseUnavailable: the database could not be used.
        """
        with self._guarded(self._sessions.begin) as session:
            yield session

    @contextlib.contextmanager
    def reading(self) -> Iterator[Session]:
        """A session for reads only (on SQLite it does not take the write lock)."""
        with self._guarded(self._read_sessions.begin) as session:
            yield session

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A Core connection in a transaction for reads only.

        For the hot paths: without a Session's bookkeeping a read costs about
        half as much; on SQLite it does not take the write lock.
        """
        with self._guarded(self._read_engine.begin) as connection:
            yield connection

    @contextlib.contextmanager
    def writing(self) -> Iterator[Connection]:
        """A Core connection in one transaction that may write (the hot writes)."""
        with self._guarded(self.engine.begin) as connection:
            yield connection

    @contextlib.contextmanager
    def _guarded(self, begin: Callable[[], contextlib.AbstractContextManager[_T]]) -> Iterator[_T]:
        committing = False
        try:
            with begin() as handle:
                yield handle
                committing = True  # the with-block's exit commits
        except _UNAVAILABLE as error:
            if _is_deadlock(error) and not committing:
                # The server chose this transaction as a deadlock's victim and
                # rolled it back whole: the database is up, and running the
                # transaction again is safe (retry_on_dead_connection does).
                LOG.info("Database %s: transaction rolled back in a deadlock", self.dialect)
                deadlock = DatabaseUnavailable("a deadlock rolled the transaction back")
                deadlock.cause, deadlock.retry_safe = first_line(error), True
                raise deadlock from None
            if isinstance(error, exc.TimeoutError):
                # QueuePool's "limit ... reached, connection timed out": no
                # statement was sent, and the server may be perfectly well.
                raise self._pool_exhausted(error) from None
            if _is_statement_timeout(error):
                # The server answered: it stopped the statement at its limit.
                # Overloaded or a lock held long, not gone.
                raise self._statement_timed_out(error) from None
            # Not chained: a remote caller would get the driver's error (and the
            # server's address) in the traceback text sent with it.
            raise self._unavailable(error, committing=committing) from None
        if self._down_since is not None:
            self._back()

    def _unavailable(self, error: BaseException, *, committing: bool) -> DatabaseUnavailable:
        with self._health_lock:
            first = self._down_since is None
            if first:
                self._down_since = time.monotonic()
        if first:
            # One line for the operator, not one per failed transaction.
            LOG.warning(
                "Database %s unreachable: %s; requests get ServiceUnavailable until it is back",
                self.location,
                first_line(error),
            )
        unavailable = DatabaseUnavailable()
        unavailable.cause = first_line(error)
        # A connection that died before the commit was sent: the server rolls
        # the transaction back, so running it again changes nothing twice.
        # A failed commit may have been applied: never run again.  A failed
        # connect (no statement: PyMySQL calls a connection closed during its
        # handshake a disconnect too) is not a dead pooled connection: the
        # server cannot be reached now, and trying again would only double
        # the wait.
        unavailable.retry_safe = (
            bool(getattr(error, "connection_invalidated", False))
            and getattr(error, "statement", None) is not None
            and not committing
        )
        return unavailable

    def _pool_exhausted(self, error: BaseException) -> DatabaseUnavailable:
        """Every pooled connection stayed busy past the pool's timeout.

        Not an outage (``reachable`` stays true, and no "reachable again"
        follows): the callers get the same retryable error, the operator a
        WARNING at most once a minute naming the limit to raise.
        """
        if self._busy_said("pool"):
            LOG.warning(
                "Database %s: no pooled connection free in time (%s): this process "
                "has more threads using the database at once than [database] "
                "max_pool_size allows; requests get ServiceUnavailable meanwhile",
                self.location,
                first_line(error),
            )
        busy = DatabaseUnavailable("every pooled database connection is busy")
        # Not retry_safe: nothing ran, but trying again at once would only
        # double the wait for a connection.
        busy.cause = first_line(error)
        return busy

    def _statement_timed_out(self, error: BaseException) -> DatabaseUnavailable:
        """The server stopped a statement at ``[database] statement_timeout``.

        Not an outage either: the server is overloaded or a lock is held
        long.  The callers get a retryable error, the operator a WARNING at
        most once a minute saying so (it read "unreachable" before).
        """
        if self._busy_said("statement"):
            LOG.warning(
                "Database %s: a statement timed out %s: the database is overloaded or "
                "a lock is held long; requests get ServiceUnavailable meanwhile (%s)",
                self.location,
                self._statement_limit,
                first_line(error),
            )
        slow = DatabaseUnavailable("a database statement ran past its timeout")
        # Not retry_safe: running it again at once would add to the load.
        slow.cause = first_line(error)
        return slow

    def _busy_said(self, kind: str) -> bool:
        """Whether to log a busy database of ``kind`` now: once a minute at most."""
        now = time.monotonic()
        with self._health_lock:
            last = self._busy_logged_at.get(kind)
            say = last is None or now - last >= _BUSY_LOG_INTERVAL_S
            if say:
                self._busy_logged_at[kind] = now
        return say

    def _back(self) -> None:
        with self._health_lock:
            since, self._down_since = self._down_since, None
        if since is not None:
            LOG.info(
                "Database %s reachable again after %.1f s", self.location, time.monotonic() - since
            )

    def dispose(self) -> None:
        self.engine.dispose()


#: Deadlock (and serialization failure) codes: MySQL/MariaDB errno, PostgreSQL SQLSTATE.
_MYSQL_DEADLOCK = 1213
_PG_DEADLOCK = ("40P01", "40001")


def _is_deadlock(error: BaseException) -> bool:
    """Whether the server rolled the transaction back to break a deadlock."""
    orig = getattr(error, "orig", None)
    if getattr(orig, "pgcode", None) in _PG_DEADLOCK:
        return True
    args: tuple[object, ...] = getattr(orig, "args", ())
    return bool(args) and args[0] == _MYSQL_DEADLOCK


#: PostgreSQL's query_canceled, which statement_timeout raises.
_PG_CANCELED = "57014"
#: MariaDB's max_statement_time and MySQL's max_execution_time, stopped by
#: the server.  (The client's read timeout, PyMySQL's "Lost connection ...
#: (timed out)", is not one: a hung server and a slow one look alike there,
#: and the connection is lost either way.)
_MARIADB_STATEMENT_TIME, _MYSQL_EXECUTION_TIME = 1969, 3024


def _is_statement_timeout(error: BaseException) -> bool:
    """Whether the server stopped a statement at its time limit (it is up)."""
    orig = getattr(error, "orig", None)
    if getattr(orig, "pgcode", None) == _PG_CANCELED:
        return "statement timeout" in str(orig)
    args: tuple[object, ...] = getattr(orig, "args", ())
    return bool(args) and args[0] in (_MARIADB_STATEMENT_TIME, _MYSQL_EXECUTION_TIME)


def retry_on_dead_connection(function: Callable[_P, _T]) -> Callable[_P, _T]:
    """Run ``function`` once more when it failed on a dead pooled connection.

    After a database restart every pooled connection is dead; SQLAlchemy
    discards the whole pool on the first failure, so one more try gets a
    fresh connection.  Only for functions that are one transaction and act on
    nothing but the database: the retry is safe because the failed
    transaction was never committed (see ``DatabaseUnavailable.retry_safe``).
    """

    @functools.wraps(function)
    def retrying(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return function(*args, **kwargs)
        except DatabaseUnavailable as error:
            if not error.retry_safe:
                raise
            LOG.info("%s: %s; trying once more", function.__qualname__, error.cause)
            return function(*args, **kwargs)

    return retrying


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


class HungServerWatchdog:
    """Breaks the connection under a statement a hung PostgreSQL server never answers.

    libpq has no read timeout: a statement sent to a server that stopped
    answering (SIGSTOP, a hung host or proxy: TCP still accepted, nothing
    sent back) waits forever, and with it the caller, its RPC worker
    thread and, one by one, the whole pool.  ``statement_timeout`` does not
    help, the server enforces it.  So each statement (and commit) in flight
    is timed here; one unanswered after ``limit`` seconds has its socket
    shut down (the file descriptor stays open, owned by libpq), which makes
    libpq fail the call at once: the caller gets the usual retryable
    ``DatabaseUnavailable``, and a commit cut this way is never run again
    (its outcome is unknown).

    The checking thread starts with the first statement, not at
    construction: a process may fork (gunicorn) after opening its database.
    """

    _PERIOD_S = 1.0

    def __init__(self, engine: Engine, limit: float, location: str) -> None:
        self.limit = limit
        self._engine = engine
        self._location = location
        self._lock = threading.Lock()
        # id -> (monotonic start, the DBAPI connection); holding the
        # connection keeps its id unique while it is here.
        self._running: dict[int, tuple[float, Any]] = {}
        self._thread_pid: int | None = None
        self._hung = False  # one WARNING per episode

    def install(self) -> None:
        listen = functools.partial(event.listen, self._engine)
        listen("before_cursor_execute", self._before_execute)
        listen("after_cursor_execute", self._after_execute)
        listen("commit", self._before_commit)
        listen("handle_error", self._on_error)
        event.listen(self._engine.pool, "checkin", self._on_checkin)

    def _start(self, dbapi_connection: Any) -> None:
        with self._lock:
            self._running[id(dbapi_connection)] = (time.monotonic(), dbapi_connection)
            if self._thread_pid != os.getpid():
                self._thread_pid = os.getpid()
                threading.Thread(target=self._watch, name="db-hang-watchdog", daemon=True).start()

    def _stop(self, dbapi_connection: Any) -> None:
        with self._lock:
            if self._running.pop(id(dbapi_connection), None) is not None:
                self._hung = False  # it answered: the next hang is a new episode

    def _before_execute(self, conn: Connection, *_args: Any) -> None:
        self._start(conn.connection.dbapi_connection)

    def _after_execute(self, conn: Connection, *_args: Any) -> None:
        self._stop(conn.connection.dbapi_connection)

    def _before_commit(self, conn: Connection) -> None:
        self._start(conn.connection.dbapi_connection)

    def _on_error(self, context: Any) -> None:
        cursor = getattr(context.execution_context, "cursor", None)
        if cursor is not None:
            self._stop(cursor.connection)
        # Otherwise (a failed commit) the pool's checkin forgets it.

    def _on_checkin(self, dbapi_connection: Any, _record: Any) -> None:
        if dbapi_connection is not None:
            self._stop(dbapi_connection)  # after a commit, or a connection discarded

    def _watch(self) -> None:
        while True:
            time.sleep(self._PERIOD_S)
            now = time.monotonic()
            broken: list[float] = []
            with self._lock:
                for key, (started, connection) in list(self._running.items()):
                    if now - started <= self.limit:
                        continue
                    # Under the lock: its owner cannot forget it meanwhile.  A
                    # connection closed since is skipped (its descriptor may
                    # belong to another socket by now).
                    del self._running[key]
                    if not connection.closed:
                        _shut_down(connection.fileno())
                        broken.append(now - started)
                first = bool(broken) and not self._hung
                self._hung = self._hung or bool(broken)
            if first:
                LOG.warning(
                    "Database %s has not answered for %.0f s (hung?): breaking the "
                    "connections waiting on it",
                    self._location,
                    max(broken),
                )


def _shut_down(fd: int) -> None:
    """Shut the socket under ``fd`` down without closing ``fd`` (its owner will)."""
    try:
        duplicate = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    with contextlib.suppress(OSError):
        duplicate.shutdown(socket.SHUT_RDWR)
    duplicate.close()


def _timeouts(
    backend: str, connect_timeout: int, statement_timeout: int, set_in_url: Mapping[str, Any]
) -> dict[str, Any]:
    """The driver's connect arguments that bound connecting and each statement.

    Without them a server that accepts TCP but never answers holds the
    caller forever (libpq and PyMySQL wait without limit by default).
    PostgreSQL gets its ``statement_timeout`` set for the session, so the
    server cancels a statement that runs too long; libpq has no read
    timeout, so a server that stops answering on an open connection is left
    to :class:`HungServerWatchdog`.  PyMySQL's read and write timeouts bound every socket
    operation, which covers both.  What the URL's query sets itself is left
    to it.
    """
    args: dict[str, Any] = {"connect_timeout": connect_timeout}
    if backend == "postgresql":
        # No JIT: every statement here is short, and PostgreSQL compiles a
        # plan whose estimated cost is high (an agent's share read: thousands
        # of index range scans of unknown width) for 0.8 s to run it in 30 ms.
        options = ["-c jit=off"]
        if statement_timeout:
            options.append(f"-c statement_timeout={statement_timeout * 1000}")
        args["options"] = " ".join(options)
    elif backend in _MYSQL_BACKENDS and statement_timeout:
        args["read_timeout"] = args["write_timeout"] = statement_timeout
    return {name: value for name, value in args.items() if name not in set_in_url}


def _statement_limit(dialect: str, statement_timeout: int, set_in_url: Mapping[str, Any]) -> str:
    """How a statement stopped at its time limit is said: after how long,
    when this process set the limit (PostgreSQL's ``statement_timeout``,
    from the option, unless the URL sets the session's options itself)."""
    if dialect == "postgresql" and statement_timeout and "options" not in set_in_url:
        return f"after {statement_timeout} s ([database] statement_timeout)"
    # MariaDB's max_statement_time and MySQL's max_execution_time are the
    # server's settings ([database] statement_timeout is the client's read
    # timeout there), as is a limit the URL sets.
    return "at the server's limit (its statement_timeout or max_statement_time)"


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
            url,
            echo=conf.database.connection_debug,
            pool_size=conf.database.max_pool_size,
            connect_timeout=conf.database.connect_timeout,
            statement_timeout=conf.database.statement_timeout,
        )
    except ModuleNotFoundError as exc:  # the URL's driver (DBAPI) is not installed
        raise ConfigurationError("database", "connection", _missing_driver(url, exc)) from None
    except Exception as exc:  # SQLAlchemy raises several types for bad URLs
        raise ConfigurationError("database", "connection", f"unusable: {exc}") from exc


def _missing_driver(url: str, exc: ModuleNotFoundError) -> str:
    """What to install for the driver of ``url`` (MariaDB's is an extra)."""
    backend = make_url(url).get_backend_name()
    if backend in _MYSQL_BACKENDS:
        return f"{backend} needs {exc.name}, the 'mysql' extra: {install_hint('mysql')}"
    return f"the driver of {backend} is not installed ({exc.name})"
