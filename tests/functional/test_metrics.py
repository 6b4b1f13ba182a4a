"""Metrics endpoints of real processes: agents and a conductor on real servers.

Each daemon serves its metrics on 127.0.0.1 with a port the system picks
(``[metrics] port = 0``), found in its log; the test scrapes them as
Prometheus would and checks what the fleet did shows up there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dbutil import migrated
from tests.functional.fleet_harness import Fleet
from tests.harness import ServiceProcess, wait_for
from tests.metricsutil import scrape, value

NODES = 40
METRICS = "[metrics]\nenabled = true\nlisten_address = 127.0.0.1\nport = 0\n"


def _port(proc: ServiceProcess) -> int:
    found = wait_for(
        lambda: re.search(r"serving metrics on http://127\.0\.0\.1:(\d+)/metrics", proc.log()),
        30,
        f"{proc.name} logs its metrics port",
    )
    return int(found.group(1))


@pytest.fixture
def fleet(tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str) -> Iterator[Fleet]:
    migrated(pg_url).dispose()
    f = Fleet(tmp_path, db_url=pg_url, transport_url=transport_url, etcd_url=etcd_url)
    try:
        f.conductor(extra=METRICS)
        f.api.import_nodes(
            [{"name": f"mnode-{i:03d}", "resource_class": "baremetal"} for i in range(NODES)]
        )
        f.api.create_flavor({"name": "small", "resource_class": "baremetal"})
        yield f
        assert f.fencing_violations() == []
    finally:
        f.close()


def test_agent_metrics_show_owned_nodes_and_a_connected_membership(fleet: Fleet) -> None:
    agents = {name: fleet.agent(name, extra=METRICS) for name in ("magent-1", "magent-2")}
    ports = {name: _port(proc) for name, proc in agents.items()}
    assert len(set(ports.values())) == 2  # one endpoint each, on one host

    def owned(name: str) -> float:
        # Summed over the node groups (these nodes are all in the default one).
        return sum(
            v
            for (metric, labels), v in scrape(ports[name]).items()
            if metric == "ringfleet_agent_nodes_owned" and ("host", name) in labels
        )

    # Both agents own their share, and between them every node.
    wait_for(
        lambda: all(owned(n) > 0 for n in ports) and sum(owned(n) for n in ports) == NODES,
        60,
        "every node owned, by both agents",
    )
    for name, port in ports.items():
        assert value(port, "ringfleet_membership_state", host=name, state="connected") == 1
        assert value(port, "ringfleet_membership_state", host=name, state="suspended") == 0
        assert value(port, "ringfleet_ring_members", host=name, group="*") == 2
        granted = value(port, "ringfleet_agent_claims_total", host=name, outcome="granted")
        assert granted is not None and granted >= owned(name)
        made = value(
            port,
            "ringfleet_rpc_client_duration_seconds_count",
            host=name,
            method="claim_nodes",
            outcome="ok",
        )
        assert made is not None and made >= 1
    # Someone converged after the second agent joined (the join is a view change).
    wait_for(
        lambda: any(
            (value(p, "ringfleet_agent_convergence_seconds_count", host=n) or 0) >= 1
            for n, p in ports.items()
        ),
        30,
        "a convergence observed",
    )

    # A build through the conductor is counted there as active.
    conductor_port = _port(fleet.procs["cond-1"])
    [instance] = fleet.api.build_instances({"flavor": "small"})
    wait_for(
        lambda: fleet.api.show_instance(instance["uuid"])["vm_state"] == "active",
        60,
        "instance ACTIVE",
    )
    assert (
        value(conductor_port, "ringfleet_conductor_builds_total", host="cond-1", outcome="active")
        == 1
    )
    assert value(conductor_port, "ringfleet_ring_members", host="cond-1", group="*") == 2
