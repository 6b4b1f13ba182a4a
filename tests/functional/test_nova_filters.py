# SPDX-License-Identifier: Apache-2.0
"""Operators' Nova filters steer real builds through a conductor (issues 14 and 27).

Real etcd, RabbitMQ and PostgreSQL; one conductor process configured with
Nova's default ``enabled_filters`` and ``weighers`` as nova.conf writes them
(bare class names, ``nova.scheduler.weights.all_weighers``) and two
downstream-style filters defined in the tests, by import path:
``tests.nova_filters.RackHintFilter`` (reads ``host_state.stats`` and a
scheduler hint) and ``tests.nova_filters.RackSpecFilter`` (reads the site's
own ``mycompany:racks`` flavor extra spec); two agents running the simulated
driver.  ringfleet's own CapabilitiesFilter is left out, so Nova's code alone
matches the flavor's capabilities.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dbutil import migrated
from tests.functional.fleet_harness import Fleet
from tests.harness import wait_for
from tests.harness.process import REPO

CCF = "nova.scheduler.filters.compute_capabilities_filter.ComputeCapabilitiesFilter"
CIDR = "SimpleCIDRAffinityFilter"
AGENT_IPS = {"agent-1": "10.0.1.5", "agent-2": "10.0.2.5"}
RACK = "tests.nova_filters.RackHintFilter"
RACK_SPEC = "tests.nova_filters.RackSpecFilter"
#: Nova's default [filter_scheduler] enabled_filters, pasted from nova.conf
NOVA_DEFAULT_FILTERS = (
    "ComputeFilter,ComputeCapabilitiesFilter,ImagePropertiesFilter,"
    "ServerGroupAntiAffinityFilter,ServerGroupAffinityFilter"
)
#: node i: rack r1, r2 or r3; boot mode uefi except in rack r3
RACKS = ("r1", "r2", "r3")
NODES = 18
#: the nodes with the trait CUSTOM_X
X_NODES = (1, 5)


#: nova.conf's [filter_scheduler] as Nova writes its defaults, pasted as is
NOVA_CONF_DEFAULTS = (
    "[filter_scheduler]\n"
    f"enabled_filters = {NOVA_DEFAULT_FILTERS}\n"
    "weight_classes = nova.scheduler.weights.all_weighers\n"
)


@pytest.fixture
def fleet(tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str) -> Iterator[Fleet]:
    """Nova's defaults, then an operator's filters, by import path."""
    yield from _fleet(
        tmp_path,
        pg_url,
        transport_url,
        etcd_url,
        f"[scheduler]\nenabled_filters = {NOVA_DEFAULT_FILTERS},"
        f"{RACK},{RACK_SPEC},{CIDR}\nweighers = nova.scheduler.weights.all_weighers\n",
    )


@pytest.fixture
def verbatim_fleet(
    tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str
) -> Iterator[Fleet]:
    """nova.conf's [filter_scheduler] with Nova's defaults, pasted as is, and nothing else."""
    yield from _fleet(tmp_path, pg_url, transport_url, etcd_url, NOVA_CONF_DEFAULTS)


def _fleet(
    tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str, scheduler_conf: str
) -> Iterator[Fleet]:
    migrated(pg_url).dispose()
    f = Fleet(tmp_path, db_url=pg_url, transport_url=transport_url, etcd_url=etcd_url)
    try:
        f.conductor(extra=scheduler_conf)
        nodes = []
        for i in range(NODES):
            rack = RACKS[i % 3]
            boot = "bios" if rack == "r3" else "uefi"
            nodes.append(
                {
                    "name": f"node-{i:02d}",
                    "resource_class": "baremetal",
                    "properties": {"capabilities": f"rack:{rack},boot_mode:{boot}"},
                    # Two nodes carry CUSTOM_X, which only Placement's half checks.
                    "traits": ["CUSTOM_X"] if i in X_NODES else [],
                }
            )
        f.api.import_nodes(nodes)
        f.api.create_flavor(
            {
                "name": "uefi",
                "resource_class": "baremetal",
                "extra_specs": {"capabilities:boot_mode": "s== uefi"},
            }
        )
        f.api.create_flavor(
            {
                "name": "uefi-r1",
                "resource_class": "baremetal",
                # A site's own namespace, and an unscoped spec as Nova allows.
                "extra_specs": {"mycompany:racks": "r1", "boot_mode": "uefi"},
            }
        )
        f.api.create_flavor({"name": "any", "resource_class": "baremetal"})
        # Their [DEFAULT] my_ip: Nova filters' host_state.host_ip of their nodes.
        for agent, address in AGENT_IPS.items():
            f.agent(agent, extra=f"[DEFAULT]\nmy_ip = {address}\n")
        yield f
        assert f.fencing_violations() == []
    finally:
        f.close()


def _settle(fleet: Fleet, uuids: list[str], state: str) -> list[dict[str, Any]]:
    wait_for(
        lambda: all(fleet.api.show_instance(u)["vm_state"] == state for u in uuids),
        60,
        f"{len(uuids)} instances {state}",
    )
    return [fleet.api.show_instance(u) for u in uuids]


def _every_node_with_a_live_owner(fleet: Fleet) -> bool:
    """The conductor sees both agents up, and every node owned by one of them.

    The database alone is not enough: an agent claims its share as soon as
    it joins, up to one poll of the group before the conductor sees it, and
    its nodes are then filtered out as "no live owner" by the scheduler.
    """
    status = fleet.api.fleet_status()
    up = {a["host"] for a in status["agents"] if a["state"] == "up"}
    return up == {"agent-1", "agent-2"} and set(fleet.owned_by()) <= up


def test_nova_filters_place_builds_by_capability_and_hint(fleet: Fleet) -> None:
    wait_for(lambda: _every_node_with_a_live_owner(fleet), 30, "every node owned by a live agent")
    racks = {n["uuid"]: n["properties"]["capabilities"] for n in fleet.api.list_nodes()}

    # The hint steers: every build of rack r2 lands on an r2 node.
    hinted = fleet.api.build_instances(
        {"flavor": "uefi", "count": 4, "scheduler_hints": {"rack": "r2"}}
    )
    assert {i["scheduler_hints"]["rack"] for i in hinted} == {"r2"}
    active = _settle(fleet, [i["uuid"] for i in hinted], "active")
    assert all("rack:r2" in racks[i["node_uuid"]] for i in active)
    assert len({i["node_uuid"] for i in active}) == 4

    # A hint no node satisfies fails, naming what removed the 14 free
    # nodes: Nova's ComputeCapabilitiesFilter the 6 bios ones, the
    # downstream filter the 8 uefi ones outside rack r9.
    wait_for(lambda: _every_node_with_a_live_owner(fleet), 30, "every node owned by a live agent")
    (lost,) = fleet.api.build_instances({"flavor": "uefi", "scheduler_hints": {"rack": "r9"}})
    (failed,) = _settle(fleet, [lost["uuid"]], "error")
    assert "no valid node for flavor 'uefi'" in failed["fault"]
    assert "AvailabilityFilter removed 4" in failed["fault"]
    assert f"{CCF} removed 6" in failed["fault"]
    assert f"{RACK} removed 8" in failed["fault"]

    # The site's extra spec steers: the flavor's builds land in rack r1 only.
    assert fleet.api.show_flavor("uefi-r1")["extra_specs"]["mycompany:racks"] == "r1"
    in_r1 = fleet.api.build_instances({"flavor": "uefi-r1", "count": 2})
    in_r1 = _settle(fleet, [i["uuid"] for i in in_r1], "active")
    assert all("rack:r1" in racks[i["node_uuid"]] for i in in_r1)

    # Without a hint, Nova's ComputeCapabilitiesFilter alone keeps the bios
    # nodes (rack r3) out: the 6 uefi nodes left take the 6 builds.
    plain = fleet.api.build_instances({"flavor": "uefi", "count": 6})
    settled = _settle(fleet, [i["uuid"] for i in plain], "active")
    used = {i["node_uuid"] for i in active + in_r1 + settled}
    assert len(used) == 12
    assert not any("rack:r3" in racks[node] for node in used)

    # Every uefi node is taken: one more build fails on the capability.
    (extra,) = fleet.api.build_instances({"flavor": "uefi"})
    (failed,) = _settle(fleet, [extra["uuid"]], "error")
    assert f"{CCF} removed 6" in failed["fault"]
    assert RACK not in failed["fault"]  # it removed nothing this time

    # The agents' addresses steer: a build near one agent's lands on its nodes.
    wait_for(lambda: _every_node_with_a_live_owner(fleet), 30, "every node owned by a live agent")
    free = {node: owner for node, (owner, _, instance) in fleet.owners().items() if not instance}
    assert len(free) == 6  # the bios nodes
    owner = sorted(free.values())[-1]
    near_ip = AGENT_IPS[str(owner)].rpartition(".")[0] + ".1"  # in the agent's /24
    (near,) = fleet.api.build_instances(
        {"flavor": "any", "scheduler_hints": {"build_near_host_ip": near_ip}}
    )
    (near,) = _settle(fleet, [near["uuid"]], "active")
    assert free[near["node_uuid"]] == owner
    (far,) = fleet.api.build_instances(
        {"flavor": "any", "scheduler_hints": {"build_near_host_ip": "192.0.2.1"}}
    )
    (failed,) = _settle(fleet, [far["uuid"]], "error")
    assert f"nova.scheduler.filters.affinity_filter.{CIDR} removed 5" in failed["fault"]
    assert "Traceback" not in fleet.procs["cond-1"].log()


def test_a_required_trait_applies_with_nova_defaults_pasted_verbatim(
    verbatim_fleet: Fleet,
) -> None:
    """Nova's default list has no traits filter: Placement enforces traits there, and here."""
    fleet = verbatim_fleet
    wait_for(lambda: _every_node_with_a_live_owner(fleet), 30, "every node owned by a live agent")
    fleet.api.create_flavor(
        {
            "name": "x",
            "resource_class": "baremetal",
            "extra_specs": {
                "trait:CUSTOM_X": "required",
                "resources:CUSTOM_BAREMETAL": "1",
                "resources:VCPU": "0",
                "resources:MEMORY_MB": "0",
                "resources:DISK_GB": "0",
            },
        }
    )
    with_x = {n["uuid"] for n in fleet.api.list_nodes() if "CUSTOM_X" in n["traits"]}
    assert len(with_x) == len(X_NODES)
    built = fleet.api.build_instances({"flavor": "x", "count": 2})
    placed = _settle(fleet, [i["uuid"] for i in built], "active")
    assert {i["node_uuid"] for i in placed} == with_x
    (extra,) = fleet.api.build_instances({"flavor": "x"})
    (failed,) = _settle(fleet, [extra["uuid"]], "error")
    assert "AvailabilityFilter removed 2" in failed["fault"]
    assert f"TraitsFilter removed {NODES - 2}" in failed["fault"]
    # nova.conf's section was read: the conductor runs Nova's list, not its own defaults.
    (started,) = [
        line
        for line in fleet.procs["cond-1"].log().splitlines()
        if "Scheduler: always applied" in line
    ]
    filters = started.partition("; filters: ")[2].partition(";")[0].split(", ")
    assert [name.rpartition(".")[2] for name in filters] == NOVA_DEFAULT_FILTERS.split(",")
    assert "nova.scheduler.weights.compute.BuildFailureWeigher" in started


@pytest.mark.parametrize(
    ("filters", "reason"),
    [
        (
            "TraitsFilter,tests.nova_filters.NotAFilter",
            "tests.nova_filters.NotAFilter is <class 'tests.nova_filters.NotAFilter'>, "
            "not a subclass of nova.scheduler.filters.BaseHostFilter",
        ),
        ("mycompany.filters.RackFilter", "cannot import mycompany.filters"),
    ],
)
def test_a_conductor_refuses_to_start_with_a_bad_nova_filter(
    tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str, filters: str, reason: str
) -> None:
    migrated(pg_url).dispose()
    f = Fleet(tmp_path, db_url=pg_url, transport_url=transport_url, etcd_url=etcd_url)
    try:
        config = tmp_path / "cond-bad.conf"
        config.write_text(
            f"[DEFAULT]\nhost = cond-bad\n{f.common}[scheduler]\nenabled_filters = {filters}\n"
        )
        done = subprocess.run(
            [sys.executable, "-m", "conductor.cmd.conductor", "--config-file", str(config)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        f.close()
    assert done.returncode == 2, done.stderr[-2000:]
    assert "ringfleet-conductor: [scheduler] enabled_filters: " in done.stderr
    assert reason in done.stderr
