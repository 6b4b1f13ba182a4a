# SPDX-License-Identifier: Apache-2.0
"""The conductor as real processes on PostgreSQL, RabbitMQ and etcd.

Two conductors serve one database; a test client drives every RPC method
over RabbitMQ; "agents" are member processes in the group (their RPC side
comes with the compute agent).
"""

from __future__ import annotations

import concurrent.futures
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from conductor.common.exception import FlavorNotFound, InvalidInput, NodeNotFound
from conductor.db import instances
from conductor.db.models import InstanceModel, NodeModel
from conductor.validation import validate_build_request
from tests.dbutil import migrated
from tests.functional.conductor_harness import client, write_config
from tests.functional.harness import MemberProcess, unique_group
from tests.harness import ServiceProcess, wait_for

CONDUCTOR = "conductor.cmd.conductor"
MEMBERSHIP_TIMEOUT = 5


@pytest.fixture
def fleet(
    tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str
) -> Iterator[dict[str, Any]]:
    db = migrated(pg_url)
    group = unique_group("conductor")
    backend = f"{etcd_url}?membership_timeout={MEMBERSHIP_TIMEOUT}"
    conductors = []
    for name in ("cond-a", "cond-b"):
        log = tmp_path / f"{name}.log"
        config = write_config(
            tmp_path / f"{name}.conf",
            host=name,
            db_url=pg_url,
            transport_url=transport_url,
            backend_url=backend,
            group=group,
            log_file=log,
            # The "agents" here are bare group members: no one accepts builds.
            extra="[conductor]\naccept_timeout = 1\n",
        )
        conductors.append(ServiceProcess(CONDUCTOR, config.stem, config, log).start())
    agents = [MemberProcess(tmp_path, f"agent-{i}", backend, group=group).start() for i in (1, 2)]
    api, transport = client(transport_url)
    try:
        for conductor in conductors:
            conductor.wait_serving()
        for agent in agents:
            agent.wait_members({"agent-1", "agent-2"}, timeout=20)
        yield {"api": api, "db": db, "conductors": conductors, "agents": agents}
    finally:
        transport.cleanup()
        for conductor in conductors:
            conductor.kill()
        for agent in agents:
            agent.cleanup()
        db.dispose()


def _claim_all(api: Any, node_uuids: list[str]) -> None:
    """Split the nodes between the two agents through the agents' RPC methods."""
    half = len(node_uuids) // 2
    for host, part in (("agent-1", node_uuids[:half]), ("agent-2", node_uuids[half:])):
        wait_for(lambda: api.fleet_status()["membership"] == "connected", 30)
        result = api.claim_nodes(host, part)
        assert len(result.granted) == len(part)


def test_inventory_and_validation_over_rpc(fleet: dict[str, Any]) -> None:
    api = fleet["api"]
    nodes = [
        {
            "name": f"n{i}",
            "resource_class": "baremetal",
            "properties": {"capabilities": "boot_mode:uefi"},
        }
        for i in range(50)
    ]
    assert api.import_nodes(nodes)["created"] == 50
    # One bad entry: nothing imported, every bad field named.
    bad = [{"name": f"m{i}", "resource_class": "baremetal"} for i in range(10)]
    bad[7]["resource_class"] = "not valid!"
    bad[3]["color"] = "blue"
    with pytest.raises(InvalidInput) as err:
        api.import_nodes(bad)
    assert err.value.fields == ["nodes[3].color", "nodes[7].resource_class"]
    assert len(api.list_nodes(limit=1000)) == 50
    node = api.show_node("n3")
    assert node["properties"]["capabilities"] == "boot_mode:uefi"
    with pytest.raises(NodeNotFound):
        api.show_node("nope")
    updated = api.set_node_maintenance("n3", True, "bad disk")
    assert updated["maintenance"] and updated["maintenance_reason"] == "bad disk"
    api.create_flavor(
        {
            "name": "gold",
            "resource_class": "baremetal",
            "extra_specs": {"capabilities:boot_mode": "uefi"},
        }
    )
    assert [f["name"] for f in api.list_flavors()] == ["gold"]
    with pytest.raises(FlavorNotFound):
        api.build_instances({"flavor": "silver"})
    with pytest.raises(InvalidInput) as err:
        api.build_instances({"flavor": "gold", "count": 0})
    assert err.value.fields == ["count"]
    status = api.fleet_status()
    assert {a["host"] for a in status["agents"]} == {"agent-1", "agent-2"}
    assert status["nodes"] == 50 and status["unowned"] == 50


def test_a_call_nested_too_deep_to_decode_is_refused_at_once(
    fleet: dict[str, Any], transport_url: str
) -> None:
    """1,000 levels: more than oslo.messaging's JSON decoding takes (issue 16).

    It used to drop the message, and the caller waited out its timeout
    (MessagingTimeout here, after 60 s): now the answer is an error reply.
    """
    api, transport = client(transport_url, timeout=60)
    deep: Any = "x"
    for _ in range(1000):
        deep = [deep]
    limit = sys.getrecursionlimit()
    # Our own encoder needs room for the 1,000 levels (a client in another
    # language would not); the conductors decode with the default limit.
    sys.setrecursionlimit(limit + 2000)
    try:
        with pytest.raises(InvalidInput) as err:
            api.list_nodes(filters={"group": deep})
    finally:
        sys.setrecursionlimit(limit)
        transport.cleanup()
    assert err.value.fields == ["filters"]
    assert err.value.errors[0].reason.startswith("is nested too deeply to be decoded")
    # The conductors serve on.
    assert fleet["api"].fleet_status()["nodes"] == 0


def test_two_conductors_never_double_allocate(fleet: dict[str, Any]) -> None:
    api, db = fleet["api"], fleet["db"]
    result = api.import_nodes([{"name": f"n{i}", "resource_class": "baremetal"} for i in range(60)])
    _claim_all(api, result["uuids"])
    api.create_flavor({"name": "small", "resource_class": "baremetal"})
    # 40 concurrent requests of 2 instances each, spread over both conductors
    # by the broker: 80 instances for 60 nodes.
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        replies = list(
            pool.map(lambda _: api.build_instances({"flavor": "small", "count": 2}), range(40))
        )
    uuids = [i["uuid"] for reply in replies for i in reply]
    assert len(set(uuids)) == 80

    def settled() -> bool:
        states = Counter(api.show_instance(u)["vm_state"] for u in uuids[::7])
        with db.transaction() as session:
            placed = session.scalars(
                select(InstanceModel).where(InstanceModel.node_uuid.is_not(None))
            ).all()
            errors = session.scalars(
                select(InstanceModel).where(InstanceModel.vm_state == "error")
            ).all()
        return bool(states) and len(placed) + len(errors) == 80

    wait_for(settled, 60)
    with db.transaction() as session:
        placed = session.execute(
            select(InstanceModel.uuid, InstanceModel.node_uuid, InstanceModel.host).where(
                InstanceModel.node_uuid.is_not(None)
            )
        ).all()
        nodes = {n.uuid: n for n in session.scalars(select(NodeModel))}
        errors = session.scalars(
            select(InstanceModel).where(InstanceModel.vm_state == "error")
        ).all()
    # Every node used once at most, by exactly the instance it records.
    assert len(placed) == 60
    assert len({p.node_uuid for p in placed}) == 60
    for p in placed:
        assert nodes[p.node_uuid].instance_uuid == p.uuid
        assert p.host == nodes[p.node_uuid].owner
    assert len(errors) == 20
    assert all("no valid node" in (e.fault or "").lower() for e in errors)
    # Both conductors did part of the work.
    logs = [c.log() for c in fleet["conductors"]]
    assert all("allocated to node" in log for log in logs)


def test_conductor_restart_resumes_stored_builds(fleet: dict[str, Any]) -> None:
    """Requests stored by a conductor that died before scheduling are not lost."""
    api, db = fleet["api"], fleet["db"]
    result = api.import_nodes([{"name": f"n{i}", "resource_class": "baremetal"} for i in range(6)])
    _claim_all(api, result["uuids"])
    api.create_flavor({"name": "small", "resource_class": "baremetal"})
    first, second = fleet["conductors"]
    first.kill()
    second.kill()
    # Their leases in the conductors' group expire: the restarted conductor
    # is then the only one, and the records nobody carries are all its own.
    time.sleep(MEMBERSHIP_TIMEOUT + 1)
    # What build_instances stores before queueing, left behind by the dead.
    stored, created = instances.create_instances(
        db, validate_build_request({"flavor": "small", "count": 4})
    )
    assert created
    restarted = ServiceProcess(CONDUCTOR, first.name, first.config, first.log_file).start()
    fleet["conductors"].append(restarted)
    restarted.wait_serving()

    def all_placed() -> bool:
        return all(api.show_instance(i.uuid)["node_uuid"] for i in stored)

    wait_for(all_placed, 30)
    placed = [api.show_instance(i.uuid) for i in stored]
    assert len({p["node_uuid"] for p in placed}) == 4
    assert {p["task_state"] for p in placed} == {"spawning"}
    # Stored by no conductor (the test wrote them): nobody carries them,
    # and the one conductor alive adopts them.
    assert "carrying on 4 instances" in restarted.log()
