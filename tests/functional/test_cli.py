# SPDX-License-Identifier: Apache-2.0
"""The installed ``ringfleet`` console script against a real fleet.

One conductor and two agent processes on real RabbitMQ, PostgreSQL and
etcd; the CLI runs as a subprocess with its own config file, as an
operator runs it: ``fleet status``, ``node list`` and ``fleet check``
(healthy; after an agent holding pinned nodes is killed; after re-homing);
``node list`` printing each page as it arrives; ``node import`` progress
and its capped list of problems.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dbutil import migrated
from tests.functional.fleet_harness import REHOME_GRACE, TTL, Fleet, start_processes
from tests.harness import wait_for

NODES = 24
RINGFLEET = Path(sys.executable).with_name("ringfleet")


@pytest.fixture
def fleet(tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str) -> Iterator[Fleet]:
    migrated(pg_url).dispose()
    f = Fleet(tmp_path, db_url=pg_url, transport_url=transport_url, etcd_url=etcd_url)
    try:
        start_processes(f, agents=("agent-1", "agent-2"))
        f.api.import_nodes(
            [{"name": f"cli-{i:03d}", "resource_class": "baremetal"} for i in range(NODES)]
        )
        yield f
    finally:
        f.close()


def ringfleet(config: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RINGFLEET), "--config-file", str(config), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_fleet_status_check_and_node_list(fleet: Fleet, transport_url: str) -> None:
    config = fleet.workdir / "cli.conf"
    config.write_text(f"[DEFAULT]\ntransport_url = {transport_url}\n")

    def all_owned() -> bool:
        owned = fleet.owned_by()
        return None not in owned and set(owned) == {"agent-1", "agent-2"}

    wait_for(all_owned, 60, "every node owned by the two agents")

    status = ringfleet(config, "fleet", "status", "-f", "json")
    assert status.returncode == 0, status.stderr
    rows = {row["Host"]: row for row in json.loads(status.stdout)}
    assert set(rows) == {"agent-1", "agent-2"}
    assert sum(row["Owned"] for row in rows.values()) == NODES
    assert all(row["State"] == "up" and row["Ring version"] == 1 for row in rows.values())

    listed = ringfleet(config, "node", "list", "-f", "json")
    assert listed.returncode == 0, listed.stderr
    nodes = json.loads(listed.stdout)
    assert sorted(n["Name"] for n in nodes) == [f"cli-{i:03d}" for i in range(NODES)]
    owners = {n["Name"]: n["Owner"] for n in nodes}
    assert set(owners.values()) == {"agent-1", "agent-2"}

    healthy = ringfleet(config, "fleet", "check")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert healthy.stdout.startswith("OK")

    # Pins on both agents (the spread weigher fills every agent in turn):
    # a killed agent's pinned nodes stay its own for rehome_grace, so the
    # orphans stay visible to a check that takes a few seconds to start.
    fleet.api.create_flavor({"name": "small", "resource_class": "baremetal"})
    built = fleet.api.build_instances({"flavor": "small", "count": 4})
    wait_for(
        lambda: all(fleet.api.show_instance(i["uuid"])["vm_state"] == "active" for i in built),
        60,
        "4 instances ACTIVE",
    )
    status = ringfleet(config, "fleet", "status", "-f", "json")
    pinned = {row["Host"]: row["Pinned"] for row in json.loads(status.stdout)}
    assert sum(pinned.values()) == 4
    assert pinned["agent-2"] > 0, pinned

    fleet.procs["agent-2"].kill()

    def reports_orphans() -> subprocess.CompletedProcess[str] | None:
        check = ringfleet(config, "fleet", "check")
        return check if check.returncode == 1 else None

    check = wait_for(reports_orphans, TTL + 30, "fleet check reporting the dead agent", step=0.5)
    assert "ORPHANED: " in check.stdout and "owned by agent-2, which is not a live agent" in (
        check.stdout
    ), check.stdout

    def survivor_took_over() -> bool:
        return set(fleet.owned_by()) == {"agent-1"}

    wait_for(survivor_took_over, REHOME_GRACE + 60, "agent-1 owning every node, pins too")
    final = ringfleet(config, "fleet", "check")
    assert final.returncode == 0, final.stdout + final.stderr

    bad = ringfleet(config, "node", "show", "no-such-node")
    assert bad.returncode == 1
    assert bad.stderr == "ringfleet node show: error: node 'no-such-node' not found\n"


def test_a_call_no_conductor_can_receive_fails_at_once_saying_so(
    tmp_path: Path, transport_url: str
) -> None:
    """The broker drops a call to a topic no conductor ever consumed: no waiting 60 s.

    An exchange no conductor uses stands for a broker on which no conductor
    has started yet.  Before issue 16 the call failed after --rpc-timeout
    with "no conductor answered in time".
    """
    config = tmp_path / "cli.conf"
    config.write_text(
        f"[DEFAULT]\ntransport_url = {transport_url}\ncontrol_exchange = none-{uuid.uuid4()}\n"
    )
    out = ringfleet(config, "--rpc-timeout", "60", "fleet", "status")
    assert out.returncode == 1
    assert out.stderr.strip() == (
        "ringfleet fleet status: error: no conductor consumes topic ringfleet-conductor: "
        "is a ringfleet-conductor running and connected to the same [DEFAULT] transport_url "
        "(and control_exchange)?"
    )


def test_node_list_prints_each_page_as_it_arrives(fleet: Fleet, transport_url: str) -> None:
    config = fleet.workdir / "cli.conf"
    config.write_text(f"[DEFAULT]\ntransport_url = {transport_url}\n")
    argv = [str(RINGFLEET), "--config-file", str(config), "node", "list"]
    with subprocess.Popen(
        [*argv, "-f", "value", "-c", "UUID", "--page-size", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as proc:
        assert proc.stdout is not None
        try:
            # The first write reaching the pipe: one page of one node (or
            # two, if the next page came meanwhile), not the whole list
            # written at the end; pages of one node are NODES calls, one
            # after the other.
            first = os.read(proc.stdout.fileno(), 1 << 16)
            rest = proc.stdout.read()
            assert proc.wait(60) == 0
        finally:
            proc.kill()
    assert 1 <= first.count(b"\n") < NODES, first
    uuids = (first + rest).decode().split()
    assert uuids == sorted(node["uuid"] for node in fleet.api.list_nodes())
    assert len(uuids) == NODES


def test_node_import_progress_and_capped_problems(fleet: Fleet, transport_url: str) -> None:
    config = fleet.workdir / "cli.conf"
    config.write_text(f"[DEFAULT]\ntransport_url = {transport_url}\n")
    path = fleet.workdir / "more.csv"
    path.write_text(
        "name,resource_class\n" + "".join(f"more-{i:02d},baremetal\n" for i in range(30))
    )
    done = ringfleet(config, "node", "import", str(path), "--batch-size", "10", "--progress")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"Imported 30 nodes from {path} (csv) in 3 batches\n"
    assert done.stderr.splitlines()[1:] == [
        *(f"checked {n}/30 nodes" for n in (10, 20, 30)),
        *(f"imported {n}/30 nodes" for n in (10, 20, 30)),
    ]

    # Every row is stored now: the first 5 problems, then how many more.
    again = ringfleet(config, "node", "import", str(path), "--max-problems", "5")
    assert again.returncode == 1
    assert again.stderr.splitlines() == [
        *(f"{path}: line {i + 2}: name: exists already (got 'more-{i:02d}')" for i in range(5)),
        f"{path}: ... and 25 more problems (--max-problems 0 prints every one)",
        f"ringfleet node import: error: {path}: 30 of 30 rows are bad; nothing imported",
    ]
    assert len(fleet.api.list_nodes()) == NODES + 30
