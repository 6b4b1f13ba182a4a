"""Services started while a dependency is down: they wait for it, hold nothing, stop on time.

Real PostgreSQL and etcd; the broker's URL names a port nothing listens on
(RabbitMQ down for the whole test).  A conductor and an agent start, keep
trying the broker, and get a SIGTERM: each exits within its stop deadline
(``graceful_timeout``; the agent's plus ``STOP_MARGIN``) with status 0, and
the agent never joined the ring, because it could not serve RPC.
"""

from __future__ import annotations

import socket
from pathlib import Path

from compute_agent.service import STOP_MARGIN
from tests.dbutil import migrated
from tests.functional.fleet_harness import Fleet
from tests.harness import wait_for

CONDUCTOR_GRACE = 10.0
AGENT_GRACE = 5.0


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_started_without_a_broker_they_join_nothing_and_stop_on_time(
    tmp_path: Path, pg_url: str, etcd_url: str
) -> None:
    migrated(pg_url).dispose()
    broker = f"rabbit://guest:guest@127.0.0.1:{_closed_port()}/"
    fleet = Fleet(tmp_path, db_url=pg_url, transport_url=broker, etcd_url=etcd_url)
    try:
        conductor = fleet._spawn(
            "conductor.cmd.conductor",
            "cond-1",
            f"[conductor]\ngraceful_timeout = {CONDUCTOR_GRACE}\n",
        )
        agent = fleet._spawn(
            "compute_agent.cmd.agent",
            "agent-1",
            f"[compute_agent]\ngraceful_timeout = {AGENT_GRACE}\n",
        )
        for proc in (conductor, agent):
            wait_for(
                lambda p=proc: "unreachable" in p.log(), 60, f"{proc.name} waits for the broker"
            )
        # The conductor watches the group (its own membership is up) ...
        wait_for(lambda: "Member conductor.cond-1 connected" in conductor.log(), 30, "conductor")
        # ... but the agent, which cannot serve RPC, has not joined it.
        assert "Member agent-1 connected" not in agent.log()
        for proc, deadline in (
            (conductor, CONDUCTOR_GRACE),
            (agent, AGENT_GRACE + STOP_MARGIN),
        ):
            # Generous bound: the deadline plus start-up noise; before, never.
            assert proc.terminate(timeout=deadline + 30) == 0, proc.name
            log = proc.log()
            assert "Possible hang" not in log
            # The outage said once, naming the broker, not an ERROR per retry.
            said = [line for line in log.splitlines() if " WARNING " in line or " ERROR " in line]
            assert [line for line in said if "Broker rabbit://guest:***@127.0.0.1:" in line], said
            assert not [line for line in said if "Connection failed" in line], said
    finally:
        fleet.close()
