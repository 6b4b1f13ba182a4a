# SPDX-License-Identifier: Apache-2.0
"""``ringfleet-status upgrade check`` on real PostgreSQL, RabbitMQ and etcd.

The console script runs as a deployment tool runs it (the virtualenv's
``bin/ringfleet-status``, its own process, ``--json``): a fresh database
fails the schema check and passes it once ``ringfleet-dbsync upgrade`` ran;
against a running conductor and two agents the RPC pins are compared with
the versions they report.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from compute_agent.rpcapi import API_VERSION as COMPUTE_API
from conductor.rpcapi import API_VERSION as CONDUCTOR_API
from tests.dbutil import migrated
from tests.functional.fleet_harness import Fleet, start_processes
from tests.harness import wait_for

BIN = Path(sys.executable).parent


def _run(script: str, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The script by this interpreter: a copied virtualenv's shebangs may point elsewhere.
    return subprocess.run(
        [sys.executable, str(BIN / script), "--config-file", str(config), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _check(config: Path) -> tuple[int, dict[str, dict[str, Any]]]:
    done = _run("ringfleet-status", config, "upgrade", "check", "--json")
    assert done.returncode in (0, 1, 2), done.stdout + done.stderr
    return done.returncode, {c["check"]: c for c in json.loads(done.stdout)["checks"]}


def test_a_fresh_database_fails_the_schema_check_until_synced(
    tmp_path: Path, pg_url: str, transport_url: str
) -> None:
    config = tmp_path / "ringfleet.conf"
    config.write_text(
        f"[DEFAULT]\ntransport_url = {transport_url}\nrpc_response_timeout = 5\n"
        f"[database]\nconnection = {pg_url}\n"
    )
    status, checks = _check(config)
    assert status == 2
    schema = checks["Database schema"]
    assert schema["result"] == 2
    assert schema["details"].startswith("schema at nothing, this release needs ")

    synced = _run("ringfleet-dbsync", config, "upgrade")
    assert synced.returncode == 0, synced.stderr
    _, checks = _check(config)
    assert checks["Database schema"]["result"] == 0
    # No conductor consumes the topic: the pins are not checked, and it says so.
    rpc = checks["RPC version pins"]
    assert rpc["result"] == 2
    assert rpc["details"].startswith("no conductor answered, pins not checked: ")


def test_pins_against_a_running_conductor_and_agents(
    tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str
) -> None:
    migrated(pg_url).dispose()
    fleet = Fleet(tmp_path, db_url=pg_url, transport_url=transport_url, etcd_url=etcd_url)
    try:
        start_processes(fleet, agents=("agent-1", "agent-2"))
        wait_for(
            lambda: (
                {a["host"] for a in fleet.api.fleet_status()["agents"]} == {"agent-1", "agent-2"}
            ),
            60,
            "both agents in the conductor's view",
        )
        config = tmp_path / "status.conf"
        base = (
            f"[DEFAULT]\ntransport_url = {transport_url}\nrpc_response_timeout = 30\n"
            f"[database]\nconnection = {pg_url}\n"
        )
        config.write_text(base)
        status, checks = _check(config)
        assert (status, checks["RPC version pins"]["details"]) == (
            0,
            f"conductor cond-1 serves {CONDUCTOR_API}; 2 agents serve {COMPUTE_API}",
        )
        # A pin left from the upgrade: every agent serves the newest API.
        config.write_text(base + "[upgrade_levels]\ncompute = 1.0\n")
        status, checks = _check(config)
        assert status == 1
        assert checks["RPC version pins"]["result"] == 1
        assert "remove [upgrade_levels] compute = 1.0" in checks["RPC version pins"]["details"]
    finally:
        fleet.close()
