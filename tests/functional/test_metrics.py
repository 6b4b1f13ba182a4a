# SPDX-License-Identifier: Apache-2.0
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
from sqlalchemy.engine import make_url

from tests.dbutil import migrated
from tests.functional.fleet_harness import Fleet
from tests.functional.tcp_proxy import TcpProxy
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
        # A cold start claims its share in one call (claim_share), and by
        # uuid what that leaves (claim_nodes): either is a timed call.
        made = [
            value(
                port,
                "ringfleet_rpc_client_duration_seconds_count",
                host=name,
                method=method,
                outcome="ok",
            )
            or 0
            for method in ("claim_share", "claim_nodes")
        ]
        assert sum(made) >= 1, made
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


def test_conductor_counts_orphans_and_says_when_the_database_is_unreachable(
    tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str
) -> None:
    """The fleet-check metrics of a real conductor on PostgreSQL, reached
    through a TCP proxy that the test cuts and heals."""
    migrated(pg_url).dispose()
    proxy = TcpProxy(make_url(pg_url).port or 5432)
    proxied = make_url(pg_url).set(host="127.0.0.1", port=proxy.port)
    f = Fleet(
        tmp_path,
        db_url=proxied.render_as_string(hide_password=False),
        transport_url=transport_url,
        etcd_url=etcd_url,
    )
    try:
        f.conductor(extra=METRICS)
        port = _port(f.procs["cond-1"])
        # No agent: every imported node is schedulable and has no owner.
        f.api.import_nodes(
            [{"name": f"onode-{i}", "resource_class": "baremetal"} for i in range(7)]
        )
        assert value(port, "ringfleet_conductor_database_up", host="cond-1") == 1
        wait_for(
            lambda: value(port, "ringfleet_fleet_problems", host="cond-1", kind="orphaned") == 7,
            30,
            "7 orphaned nodes counted (the conductor's membership connected)",
        )
        assert value(port, "ringfleet_fleet_problems", host="cond-1", kind="stuck-build") == 0

        proxy.cut()
        samples = scrape(port)
        assert samples[("ringfleet_conductor_database_up", frozenset({("host", "cond-1")}))] == 0
        assert not [name for name, _ in samples if name == "ringfleet_fleet_problems"]
        proxy.heal()
        assert value(port, "ringfleet_conductor_database_up", host="cond-1") == 1
        assert value(port, "ringfleet_fleet_problems", host="cond-1", kind="orphaned") == 7
        # One WARNING for the outage, however many scrapes failed.
        log = f.procs["cond-1"].log()
        assert len(re.findall(r"Database \S+ unreachable:", log)) == 1, log[-3000:]
    finally:
        proxy.heal()
        f.close()
        proxy.cut()
