# SPDX-License-Identifier: Apache-2.0
"""conductor.db.engine: the pool's ping of idle connections, and how failures are told apart."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from conductor.common.exception import DatabaseUnavailable
from conductor.db.engine import (
    Database,
    _ping_when_idle,
    _statement_limit,
    retry_on_dead_connection,
)


def _engine(
    tmp_path: Path, idle: float, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, dict[str, int]]:
    eng = create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}", pool_size=2)
    counts = {"pings": 0, "connects": 0, "fail": 0}

    def ping(_dbapi_connection: Any) -> bool:
        counts["pings"] += 1
        if counts["fail"]:
            counts["fail"] -= 1
            raise OSError("server closed the connection")
        return True

    monkeypatch.setattr(eng.dialect, "do_ping", ping)

    @event.listens_for(eng, "connect")
    def _count(_dbapi_connection: Any, _record: Any) -> None:
        counts["connects"] += 1

    _ping_when_idle(eng, idle)
    return eng, counts


def test_a_recently_used_connection_is_not_pinged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    eng, counts = _engine(tmp_path, 3600.0, monkeypatch)
    for _ in range(5):
        with eng.connect() as connection:
            connection.execute(text("SELECT 1"))
    assert counts == {"pings": 0, "connects": 1, "fail": 0}


def test_an_idle_connection_is_pinged_and_replaced_when_dead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    eng, counts = _engine(tmp_path, 0.0, monkeypatch)
    with eng.connect() as connection:
        connection.execute(text("SELECT 1"))
    assert counts["pings"] == 1 and counts["connects"] == 1
    counts["fail"] = 1  # the pooled connection died while idle
    with eng.connect() as connection:
        assert connection.execute(text("SELECT 1")).scalar() == 1
    # Pinged, found dead, replaced by a new connection (pinged in turn).
    assert counts["connects"] == 2 and counts["pings"] == 3


class _DriverError(Exception):
    """A DB-API error as PyMySQL (errno first) or psycopg2 (pgcode) raises it."""

    def __init__(self, *args: object, pgcode: str | None = None) -> None:
        super().__init__(*args)
        self.pgcode = pgcode


@pytest.mark.parametrize(
    ("dialect", "timeout", "url_query", "said"),
    [
        ("postgresql", 7, {}, "after 7 s ([database] statement_timeout)"),
        # The URL's options replace the ones that set the session's limit.
        ("postgresql", 7, {"options": "-c statement_timeout=900"}, "at the server's limit"),
        ("postgresql", 0, {}, "at the server's limit"),
        # [database] statement_timeout is the client's read timeout there.
        ("mysql", 7, {}, "at the server's limit"),
    ],
    ids=["postgresql", "postgresql-url-options", "postgresql-no-limit", "mysql"],
)
def test_a_statement_timeout_is_said_with_its_limit(
    dialect: str, timeout: int, url_query: dict[str, str], said: str
) -> None:
    """The WARNING of a statement the server stopped says after how long,
    when this process set that limit, and otherwise whose limit it was."""
    assert _statement_limit(dialect, timeout, url_query).startswith(said)


@pytest.mark.parametrize(
    "driver_error",
    [
        _DriverError(1213, "Deadlock found when trying to get lock; try restarting transaction"),
        _DriverError("deadlock detected", pgcode="40P01"),
    ],
    ids=["mariadb", "postgresql"],
)
def test_a_deadlock_victim_is_run_again_and_the_database_stays_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, driver_error: _DriverError
) -> None:
    """The server rolled the transaction back whole: run it again, no outage said."""
    db = Database(f"sqlite:///{tmp_path / 'deadlock.db'}")
    runs: list[int] = []

    @retry_on_dead_connection
    def claim() -> str:
        runs.append(1)
        with db.transaction():
            if len(runs) == 1:
                raise OperationalError("UPDATE nodes ...", {}, driver_error)
        return "claimed"

    with caplog.at_level(logging.INFO, logger="conductor.db.engine"):
        assert claim() == "claimed"
    db.dispose()
    assert len(runs) == 2 and db.reachable
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    ("error", "said", "named"),
    [
        # No pooled connection free in time: nothing was sent.
        (
            PoolTimeout(
                "QueuePool limit of size 20 overflow 10 reached, connection timed out, "
                "timeout 30.00"
            ),
            "busy",
            "max_pool_size",
        ),
        # The server stopped a statement at its limit: it is up.
        (
            OperationalError(
                "SELECT ...",
                {},
                _DriverError("canceling statement due to statement timeout", pgcode="57014"),
            ),
            "timeout",
            "statement_timeout",
        ),
        (
            OperationalError(
                "SELECT ...",
                {},
                _DriverError(1969, "Query execution was interrupted (max_statement_time exceeded)"),
            ),
            "timeout",
            "statement_timeout",
        ),
    ],
    ids=["pool-exhausted", "postgresql-statement-timeout", "mariadb-statement-time"],
)
def test_a_busy_database_is_not_an_outage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, error: Exception, said: str, named: str
) -> None:
    """A busy database, not a gone one: callers get the retryable error
    (saying which), the operator one WARNING a minute naming the option to
    look at (not "unreachable"), and no outage episode starts (so no
    "reachable again" either)."""
    db = Database(f"sqlite:///{tmp_path / 'busy.db'}")
    with caplog.at_level(logging.INFO, logger="conductor.db.engine"):
        for _ in range(3):
            with pytest.raises(DatabaseUnavailable) as raised, db.transaction():
                raise error
            assert not raised.value.retry_safe
            assert said in str(raised.value)
        with db.transaction():
            pass
    db.dispose()
    assert db.reachable
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert named in lines[0] and "unreachable" not in lines[0]


@pytest.mark.parametrize(
    "driver_error",
    [
        _DriverError("canceling statement due to user request", pgcode="57014"),
        # PyMySQL's read timeout: a hung server looks the same.
        _DriverError(2013, "Lost connection to MySQL server during query (timed out)"),
    ],
    ids=["postgresql-cancel", "mysql-read-timeout"],
)
def test_a_lost_connection_is_still_an_outage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, driver_error: _DriverError
) -> None:
    db = Database(f"sqlite:///{tmp_path / 'lost.db'}")
    with (
        caplog.at_level(logging.INFO, logger="conductor.db.engine"),
        pytest.raises(DatabaseUnavailable),
        db.transaction(),
    ):
        raise OperationalError("SELECT ...", {}, driver_error)
    db.dispose()
    assert not db.reachable
    assert "unreachable" in caplog.records[0].getMessage()
