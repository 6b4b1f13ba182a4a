"""The conductor's connection pool survives a PostgreSQL restart.

Pooled connections are pinged before use once idle (instead of on every
checkout, see :func:`conductor.db.engine._ping_when_idle`); a dead one is
replaced transparently, as ``pool_pre_ping`` did.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from sqlalchemy import text

from conductor.db import engine
from conductor.db.engine import Database


def test_dead_pooled_connections_are_replaced_after_a_restart(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctl = os.environ.get("RINGFLEET_TEST_CTL")
    if not ctl:
        pytest.skip("RINGFLEET_TEST_CTL is unset (run through tools/with-test-servers.sh)")
    # Every checkout counts as idle: the test need not wait out the threshold.
    monkeypatch.setattr(engine, "_PING_IDLE_S", 0.0)
    db = Database(database_url, pool_size=3)
    try:
        with db.read() as a, db.read() as b, db.read() as c:  # three pooled connections
            pids = {conn.execute(text("SELECT pg_backend_pid()")).scalar() for conn in (a, b, c)}
        assert len(pids) == 3
        subprocess.run([ctl, "restart-pg"], check=True, timeout=120, capture_output=True)
        for _ in range(4):  # every pooled connection is dead: each is replaced
            with db.read() as conn:
                assert conn.execute(text("SELECT 1")).scalar() == 1
        with db.read() as conn:
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar() not in pids
    finally:
        db.dispose()
