# SPDX-License-Identifier: Apache-2.0
"""The conductor's connection pool survives a database restart and outage (PostgreSQL, MariaDB).

Pooled connections are pinged before use once idle (instead of on every
checkout, see :func:`conductor.db.engine._ping_when_idle`); a dead one is
replaced transparently, as ``pool_pre_ping`` did.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from conductor.common.exception import DatabaseUnavailable, ServiceUnavailable
from conductor.db import engine
from conductor.db.engine import Database, retry_on_dead_connection
from tests.functional.tcp_proxy import TcpProxy
from tests.harness import server_ctl


@dataclass(frozen=True)
class _Server:
    url: str
    restart: str  # the tools/test-servers-ctl.sh action
    session_id: str  # SQL: the server's id of this connection
    terminate: str  # SQL: end the connection whose id is :id
    # Whether a restarted server never reuses an id (PostgreSQL's are process
    # ids; MariaDB numbers connections from 1 again).
    ids_survive_restarts: bool


@pytest.fixture(params=["postgres", "mariadb"])
def server(request: pytest.FixtureRequest) -> _Server:
    if request.param == "postgres":
        return _Server(
            request.getfixturevalue("database_url"),
            "restart-pg",
            "SELECT pg_backend_pid()",
            "SELECT pg_terminate_backend(:id)",
            ids_survive_restarts=True,
        )
    return _Server(
        request.getfixturevalue("mysql_server_url"),
        "restart-mariadb",
        "SELECT CONNECTION_ID()",
        "KILL :id",
        ids_survive_restarts=False,
    )


def test_dead_pooled_connections_are_replaced_after_a_restart(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every checkout counts as idle: the test need not wait out the threshold.
    monkeypatch.setattr(engine, "_PING_IDLE_S", 0.0)
    db = Database(server.url, pool_size=3)
    try:
        with db.read() as a, db.read() as b, db.read() as c:  # three pooled connections
            ids = {conn.execute(text(server.session_id)).scalar() for conn in (a, b, c)}
        assert len(ids) == 3
        server_ctl(server.restart, timeout=120)
        for _ in range(4):  # every pooled connection is dead: each is replaced
            with db.read() as conn:
                assert conn.execute(text("SELECT 1")).scalar() == 1
        if server.ids_survive_restarts:
            with db.read() as conn:
                assert conn.execute(text(server.session_id)).scalar() not in ids
    finally:
        db.dispose()


def _through(proxy: TcpProxy, database_url: str) -> str:
    url = make_url(database_url).set(host="127.0.0.1", port=proxy.port)
    return url.render_as_string(hide_password=False)


def test_a_transaction_on_a_dead_connection_runs_once_more(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No idle ping: the dead connection is used, as one used less than a
    # second before the server dropped it would be.
    monkeypatch.setattr(engine, "_PING_IDLE_S", 3600.0)
    db, admin = Database(server.url, pool_size=1), Database(server.url, pool_size=1)
    runs: list[int] = []

    def session_of(database: Database) -> int:
        runs.append(1)
        with database.read() as conn:
            return int(conn.execute(text(server.session_id)).scalar_one())

    retried = retry_on_dead_connection(session_of)
    try:
        for kill_then_call, expected_runs in ((session_of, 1), (retried, 2)):
            runs.clear()
            session = session_of(db)
            with admin.writing() as conn:
                conn.execute(text(server.terminate), {"id": session})
            runs.clear()
            if expected_runs == 1:
                with pytest.raises(DatabaseUnavailable) as caught:
                    kill_then_call(db)
                assert caught.value.retry_safe  # died before its commit
                assert isinstance(caught.value, ServiceUnavailable)
            else:
                assert kill_then_call(db) != session  # on a fresh connection
            assert len(runs) == expected_runs
    finally:
        db.dispose()
        admin.dispose()


def test_an_unreachable_database_is_one_retryable_error_and_two_log_lines(
    server: _Server, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = TcpProxy(make_url(server.url).port or 5432)
    db = Database(_through(proxy, server.url), pool_size=2)
    caplog.set_level(logging.INFO, logger="conductor.db.engine")
    try:
        with db.read() as conn:
            assert conn.execute(text("SELECT 1")).scalar() == 1
        proxy.cut()
        errors = []
        for _ in range(5):
            with pytest.raises(DatabaseUnavailable) as caught, db.transaction() as session:
                session.execute(text("SELECT 1"))
            errors.append(caught.value)
        assert not db.reachable
        for error in errors:
            # Retryable, says what is down, and not where it is.
            assert isinstance(error, ServiceUnavailable)
            assert "database" in str(error)
            assert "127.0.0.1" not in str(error) and str(proxy.port) not in str(error)
            assert not error.retry_safe or error is errors[0]
        proxy.heal()
        with db.read() as conn:
            assert conn.execute(text("SELECT 1")).scalar() == 1
        assert db.reachable
        lines = [(r.levelname, r.getMessage()) for r in caplog.records]
        assert [level for level, _ in lines if level == "WARNING"] == ["WARNING"], lines
        assert [m for level, m in lines if level == "INFO" and "reachable again" in m], lines
        assert all(level in ("INFO", "WARNING") for level, _ in lines), lines
    finally:
        proxy.cut()
        db.dispose()


def test_a_statement_a_hung_server_never_answers_fails_after_its_timeout(
    server: _Server, caplog: pytest.LogCaptureFixture
) -> None:
    """A server that accepts TCP and answers nothing (a hung host, SIGSTOP):
    a statement already sent on an open connection fails retryably within
    ``statement_timeout`` (PostgreSQL: plus the watchdog's grace, as libpq
    has no read timeout), a new connection within ``connect_timeout``; the
    database works again once the server answers."""
    statement_timeout = 2
    proxy = TcpProxy(make_url(server.url).port or 5432)
    db = Database(
        _through(proxy, server.url),
        pool_size=2,
        connect_timeout=2,
        statement_timeout=statement_timeout,
    )
    caplog.set_level(logging.INFO, logger="conductor.db.engine")
    try:
        with db.read() as conn:
            assert conn.execute(text("SELECT 1")).scalar() == 1
        proxy.hang()
        outcome: list[BaseException] = []

        def select_one() -> None:
            try:
                with db.read() as conn:
                    conn.execute(text("SELECT 1"))
            except BaseException as error:  # handed to the test
                outcome.append(error)

        # In a thread: without a bound (the old code on PostgreSQL) it would
        # hang the test, not fail it.  Bounded, not a wall-clock target.
        waiter = threading.Thread(target=select_one, daemon=True)
        waiter.start()
        waiter.join(statement_timeout + engine._HUNG_GRACE_S + 30)
        assert not waiter.is_alive(), "the statement still waits for the hung server"
        assert len(outcome) == 1 and isinstance(outcome[0], DatabaseUnavailable), outcome
        assert not db.reachable
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert warnings and all("127.0.0.1" not in w or "***" in w for w in warnings), warnings
        proxy.heal()
        with db.read() as conn:
            assert conn.execute(text("SELECT 1")).scalar() == 1
        assert db.reachable
    finally:
        proxy.heal()
        proxy.cut()
        db.dispose()


def test_a_statement_past_its_timeout_is_said_as_such_not_as_an_outage(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL stops a statement at ``[database] statement_timeout``: the
    caller gets the retryable error, the operator one WARNING saying the
    statement timed out after that many seconds (not "unreachable"), and the
    same connection serves the next statement."""
    db = Database(database_url, pool_size=1, statement_timeout=1)
    caplog.set_level(logging.INFO, logger="conductor.db.engine")
    try:
        for _ in range(2):  # said once, however many time out
            with pytest.raises(DatabaseUnavailable) as raised, db.read() as conn:
                conn.execute(text("SELECT pg_sleep(5)"))
            assert "timeout" in str(raised.value) and not raised.value.retry_safe
        assert db.reachable
        with db.read() as conn:
            assert conn.execute(text("SELECT 1")).scalar() == 1
    finally:
        db.dispose()
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1, lines
    assert "a statement timed out after 1 s ([database] statement_timeout)" in lines[0]
    assert "unreachable" not in lines[0]
