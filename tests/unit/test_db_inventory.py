# SPDX-License-Identifier: Apache-2.0
"""Node, flavor, instance and allocation queries on SQLite."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from conductor.common.exception import (
    Conflict,
    DuplicateFlavor,
    DuplicateInstance,
    DuplicateNode,
    FlavorNotFound,
    InstanceNotFound,
    NodeNotFound,
)
from conductor.common.instance_states import Event
from conductor.common.list_filters import ListOrder
from conductor.common.objects import ProvisionState, TaskState, VmState
from conductor.db import (
    allocations,
    flavors,
    instance_listing,
    instances,
    migration,
    nodes,
    ownership,
)
from conductor.db.engine import Database
from conductor.validation import (
    validate_build_request,
    validate_flavor_spec,
    validate_node_spec,
    validate_node_specs,
)
from tests.dbutil import migrated


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    yield database
    database.dispose()


def _nodes(count: int, **extra: object) -> list[dict[str, object]]:
    return [{"name": f"n{i}", "resource_class": "baremetal", **extra} for i in range(count)]


def test_migration_is_idempotent_and_versioned(db: Database) -> None:
    migration.upgrade(db)
    assert migration.current_version(db) == migration.head_version()


def test_create_and_read_nodes(db: Database) -> None:
    spec = validate_node_spec(
        {
            "name": "rack1-n1",
            "resource_class": "baremetal.gold",
            "traits": ["CUSTOM_GPU"],
            "properties": {"capabilities": "boot_mode:uefi,cpu_arch:x86_64", "cpus": 64},
            "group": "rack1",
        }
    )
    [node] = nodes.create_nodes(db, [spec])
    assert node.uuid == spec.uuid
    assert node.capabilities == {"boot_mode": "uefi", "cpu_arch": "x86_64"}
    assert node.traits == frozenset({"CUSTOM_GPU"})
    assert node.group == "rack1"
    assert node.provision_state is ProvisionState.AVAILABLE
    assert nodes.get_node(db, "rack1-n1") == nodes.get_node(db, spec.uuid)
    with pytest.raises(NodeNotFound):
        nodes.get_node(db, "nope")


def test_created_nodes_and_listed_dicts_are_what_is_stored(db: Database) -> None:
    """create_nodes builds its result from the specs and list_node_dicts from
    plain columns: both must equal what reading the rows back gives."""
    specs = validate_node_specs(
        [
            {
                "name": "full-1",
                "resource_class": "gold",
                "traits": ["CUSTOM_B", "CUSTOM_A"],
                "properties": {"capabilities": "boot_mode:uefi, x:1", "cpus": 8},
                "group": "g1",
                "maintenance": True,
                "maintenance_reason": "disk",
                "provision_state": "manageable",
                "power_state": "power on",
            },
            *_nodes(4),
        ]
    )
    created = nodes.create_nodes(db, specs)
    assert created == [nodes.get_node(db, spec.uuid) for spec in specs]
    ownership.claim_nodes(
        db, "agent-1", [specs[1].uuid], live_members={"agent-1"}, rehome_grace=0.0
    )
    everything = [n.to_dict() for n in nodes.list_nodes(db)]
    assert nodes.list_node_dicts(db) == everything
    full = next(d for d in everything if d["name"] == "full-1")
    assert full["capabilities"] == {"boot_mode": "uefi", "x": "1"}
    assert full["traits"] == ["CUSTOM_A", "CUSTOM_B"] and full["power_state"] == "power on"
    marker = everything[1]["uuid"]
    assert nodes.list_node_dicts(db, limit=2, marker=marker) == everything[2:4]
    assert nodes.list_node_dicts(db, owner="agent-1") == [
        d for d in everything if d["owner"] == "agent-1"
    ]
    assert nodes.list_node_dicts(db, maintenance=True, group="g1")[0]["name"] == "full-1"


def test_bulk_import_is_all_or_nothing(db: Database) -> None:
    nodes.create_nodes(db, validate_node_specs(_nodes(3)))
    clash = validate_node_specs([{"name": "new-1", "resource_class": "b"}, *_nodes(1)])
    with pytest.raises(DuplicateNode) as err:
        nodes.create_nodes(db, clash)
    assert err.value.field == "name" and err.value.index == 1
    assert nodes.count_nodes(db) == 3  # new-1 was not imported either


def test_list_filters_and_pages(db: Database) -> None:
    nodes.create_nodes(db, validate_node_specs(_nodes(25) + _nodes(0)))
    nodes.create_nodes(db, validate_node_specs([{"name": "x", "resource_class": "other"}]))
    assert nodes.count_nodes(db) == 26
    assert nodes.count_nodes(db, resource_class="other") == 1
    first = nodes.list_nodes(db, limit=10)
    second = nodes.list_nodes(db, limit=10, marker=first[-1].uuid)
    assert len(first) == 10 and len(second) == 10
    assert not {n.uuid for n in first} & {n.uuid for n in second}
    assert len(list(nodes.iter_nodes(db, batch=7))) == 26


def test_maintenance(db: Database) -> None:
    nodes.create_nodes(db, validate_node_specs(_nodes(1)))
    node = nodes.set_maintenance(db, "n0", True, "disk failure")
    assert node.maintenance and node.maintenance_reason == "disk failure"
    node = nodes.set_maintenance(db, "n0", False, "ignored")
    assert not node.maintenance and node.maintenance_reason is None
    with pytest.raises(NodeNotFound):
        nodes.set_maintenance(db, "nope", True, None)


def test_flavors(db: Database) -> None:
    spec = validate_flavor_spec(
        {
            "name": "gold",
            "resource_class": "baremetal",
            "required_traits": ["CUSTOM_GPU"],
            "extra_specs": {"capabilities:boot_mode": "s== uefi"},
        }
    )
    flavor = flavors.create_flavor(db, spec)
    assert flavor.required_traits == frozenset({"CUSTOM_GPU"})
    assert flavors.list_flavors(db) == [flavor]
    with pytest.raises(DuplicateFlavor):
        flavors.create_flavor(db, spec)
    instances.create_instances(db, validate_build_request({"flavor": "gold"}))
    with pytest.raises(Conflict, match="used by instance"):
        flavors.delete_flavor(db, "gold")
    with pytest.raises(FlavorNotFound):
        flavors.delete_flavor(db, "silver")


def test_build_requests_are_idempotent_by_instance_uuid(db: Database) -> None:
    ids = ["11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"]
    request = validate_build_request(
        {"flavor": "gold", "count": 2, "name": "web", "instance_uuids": ids}
    )
    first, created = instances.create_instances(db, request)
    assert created and [i.name for i in first] == ["web-1", "web-2"]
    again, created_again = instances.create_instances(db, request)
    assert not created_again and again == first
    other = validate_build_request({"flavor": "silver", "instance_uuids": ids[:1]})
    with pytest.raises(DuplicateInstance) as err:
        instances.create_instances(db, other)
    assert err.value.field == "instance_uuids"
    assert len(instance_listing.list_page(db, ListOrder())) == 2
    with pytest.raises(InstanceNotFound):
        instances.get_instance(db, "33333333-3333-4333-8333-333333333333")


def test_a_request_reusing_one_stored_id_stores_none_of_its_instances(db: Database) -> None:
    # A new request is inserted without reading its ids first: the clash must
    # roll the whole insert back, the new id included, and name the reused id.
    stored = "11111111-1111-4111-8111-111111111111"
    fresh = "33333333-3333-4333-8333-333333333333"
    instances.create_instances(
        db, validate_build_request({"flavor": "f", "instance_uuids": [stored]})
    )
    mixed = validate_build_request({"flavor": "f", "count": 2, "instance_uuids": [fresh, stored]})
    with pytest.raises(DuplicateInstance) as err:
        instances.create_instances(db, mixed)
    assert err.value.value == stored
    with pytest.raises(InstanceNotFound):
        instances.get_instance(db, fresh)
    assert [i.uuid for i in instance_listing.list_page(db, ListOrder())] == [stored]


def test_state_changes_are_compare_and_swap(db: Database) -> None:
    [inst], _ = instances.create_instances(db, validate_build_request({"flavor": "f"}))
    assert instances.set_state(db, inst.uuid, Event.DELETE)
    assert instances.set_state(db, inst.uuid, Event.TORN_DOWN)
    # A late "active" report must not resurrect it, nor a delete repeat it.
    assert not instances.set_state(db, inst.uuid, Event.DEPLOYED)
    assert not instances.set_state(db, inst.uuid, Event.DELETE)
    assert instances.get_instance(db, inst.uuid).vm_state is VmState.DELETED
    assert instance_listing.list_page(db, ListOrder()) == []
    assert len(instance_listing.list_page(db, ListOrder(status="DELETED"))) == 1


def test_a_failed_build_counts_its_attempt_once(db: Database) -> None:
    [inst], _ = instances.create_instances(db, validate_build_request({"flavor": "f"}))
    assert instances.fail_build(db, inst.uuid, "no valid node") == 1
    # In error now: a second failure (a stale queued copy) changes nothing.
    assert instances.fail_build(db, inst.uuid, "again") is None
    failed = instances.get_instance(db, inst.uuid)
    assert (failed.vm_state, failed.task_state) == (VmState.ERROR, None)
    assert (failed.attempts, failed.fault) == (1, "attempt 1: no valid node")


def _owned_nodes(db: Database, count: int) -> list[str]:
    created = nodes.create_nodes(db, validate_node_specs(_nodes(count)))
    uuids = [n.uuid for n in created]
    ownership.claim_nodes(db, "agent-1", uuids, live_members={"agent-1"}, rehome_grace=60)
    return uuids


def test_allocate_and_give_back(db: Database) -> None:
    [node] = _owned_nodes(db, 1)
    [inst], _ = instances.create_instances(db, validate_build_request({"flavor": "f"}))
    claim = allocations.allocate(db, node, inst.uuid)
    assert claim is not None and claim.owner == "agent-1" and claim.epoch == 1
    stored = instances.get_instance(db, inst.uuid)
    assert stored.node_uuid == node and stored.host == "agent-1"
    assert stored.task_state is TaskState.SPAWNING  # set by the allocation itself
    assert nodes.get_node(db, node).instance_uuid == inst.uuid
    [second], _ = instances.create_instances(db, validate_build_request({"flavor": "f"}))
    assert allocations.allocate(db, node, second.uuid) is None  # one instance per node
    lost = instances.get_instance(db, second.uuid)
    assert (lost.node_uuid, lost.task_state) == (None, TaskState.SCHEDULING)
    assert allocations.give_back(db, node, inst.uuid)
    assert nodes.get_node(db, node).provision_state is ProvisionState.AVAILABLE
    freed = instances.get_instance(db, inst.uuid)
    assert (freed.node_uuid, freed.host, freed.task_state) == (None, None, TaskState.SCHEDULING)
    assert not allocations.give_back(db, node, inst.uuid)


def test_allocation_refuses_unowned_and_maintenance_nodes(db: Database) -> None:
    created = nodes.create_nodes(db, validate_node_specs(_nodes(2)))
    [inst], _ = instances.create_instances(db, validate_build_request({"flavor": "f"}))
    assert allocations.allocate(db, created[0].uuid, inst.uuid) is None  # no owner
    ownership.claim_nodes(db, "a", [created[1].uuid], live_members={"a"}, rehome_grace=60)
    nodes.set_maintenance(db, created[1].uuid, True, "x")
    assert allocations.allocate(db, created[1].uuid, inst.uuid) is None


def test_concurrent_allocations_never_double_up(db: Database) -> None:
    """Eight threads put 80 instances on 20 nodes: each node gets one."""
    node_uuids = _owned_nodes(db, 20)
    created, _ = instances.create_instances(
        db, validate_build_request({"flavor": "f", "count": 80})
    )
    results: list[tuple[str, str]] = []
    lock = threading.Lock()

    def worker(batch: list[str]) -> None:
        for instance in batch:
            for node in node_uuids:
                if allocations.allocate(db, node, instance) is not None:
                    with lock:
                        results.append((node, instance))
                    break

    threads = [
        threading.Thread(target=worker, args=([i.uuid for i in created[k::8]],)) for k in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 20
    assert len({node for node, _ in results}) == 20
    assert len({inst for _, inst in results}) == 20
