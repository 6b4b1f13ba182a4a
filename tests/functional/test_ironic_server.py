# SPDX-License-Identifier: Apache-2.0
"""The test Ironic and :mod:`tests.harness.ironic` work: enroll, claim race, restart."""

from __future__ import annotations

import threading
import uuid

import pytest
import requests

from tests.harness.ironic import IronicHarness, unique_shard
from tests.harness.servers import server_ctl


def test_enroll_gives_available_powered_on_nodes_in_the_shard(
    ironic: IronicHarness, shard: str
) -> None:
    nodes = ironic.enroll(3, shard=shard, traits=("CUSTOM_GPU",), properties={"cpus": 8})

    records = {n["uuid"]: n for n in ironic.nodes(shard)}
    assert set(records) == set(nodes)
    for record in records.values():
        assert record["provision_state"] == "available"
        assert record["power_state"] == "power on"
        assert record["resource_class"] == "baremetal"
        assert record["shard"] == shard
        assert record["properties"] == {"cpus": 8}
        assert record["traits"] == ["CUSTOM_GPU"]
        assert not record["maintenance"]
    assert ironic.nodes(unique_shard()) == []

    ironic.set_maintenance(nodes[0], True, reason="smoke")
    assert ironic.node(nodes[0])["maintenance_reason"] == "smoke"
    ironic.set_maintenance(nodes[0], False)
    assert not ironic.node(nodes[0])["maintenance"]
    ironic.delete(nodes[2])
    assert {n["uuid"] for n in ironic.nodes(shard)} == set(nodes[:2])


def test_exactly_one_of_racing_claims_wins(ironic: IronicHarness, shard: str) -> None:
    (node,) = ironic.enroll(1, shard=shard)
    start = threading.Barrier(4)
    statuses: dict[str, int] = {}

    def claim(instance: str) -> None:
        with IronicHarness(ironic.url) as own:  # one session per thread
            start.wait()
            patch = [{"op": "add", "path": "/instance_uuid", "value": instance}]
            statuses[instance] = own.request("PATCH", f"/v1/nodes/{node}", json=patch).status_code

    threads = [threading.Thread(target=claim, args=(str(uuid.uuid4()),)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert sorted(statuses.values()) == [200, 409, 409, 409], statuses
    (winner,) = (i for i, status in statuses.items() if status == 200)
    assert ironic.node(node)["instance_uuid"] == winner


def test_nodes_survive_kill_and_start_of_ironic(ironic: IronicHarness, shard: str) -> None:
    nodes = ironic.enroll(2, shard=shard)
    old_pid = server_ctl("pid ironic").strip()

    server_ctl("kill-ironic")
    with pytest.raises(requests.ConnectionError):
        ironic.node(nodes[0])
    server_ctl("start-ironic")

    assert server_ctl("pid ironic").strip() != old_pid
    records = ironic.nodes(shard)
    assert {n["uuid"] for n in records} == set(nodes)
    assert {(n["provision_state"], n["power_state"]) for n in records} == {
        ("available", "power on")
    }
