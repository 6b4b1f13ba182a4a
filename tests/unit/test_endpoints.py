# SPDX-License-Identifier: Apache-2.0
"""The conductor's RPC endpoints, called in-process (no RPC) on SQLite.

The fleet view is a real :class:`conductor.fleet_view.FleetView` fed real
membership views; only the membership's connection state is a stub.  The
build queue is a recording stub, except in the tests that run the real build
workers and scheduler.
"""

from __future__ import annotations

import datetime
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conductor import fleet_view
from conductor.common.exception import (
    Conflict,
    DatabaseUnavailable,
    DuplicateFlavor,
    DuplicateInstance,
    DuplicateNode,
    FlavorNotFound,
    InstanceNotFound,
    InvalidInput,
    NodeNotFound,
    ServiceUnavailable,
)
from conductor.common.objects import Instance, Node, Ownership
from conductor.db import fleet_report, ownership
from conductor.db.engine import Database
from conductor.db.models import InstanceModel, NodeModel, utcnow
from conductor.endpoints.agents import AgentsEndpoint
from conductor.endpoints.fleet import PROBLEM_KINDS, FleetEndpoint, problem_counts
from conductor.endpoints.instances import InstancesEndpoint
from conductor.endpoints.inventory import InventoryEndpoint
from conductor.fleet_view import FleetView
from conductor.ironic_sync import REMOVED_REASON
from conductor.lifecycle import BuildLifecycle
from conductor.rpcapi import API_VERSION
from conductor.scheduler.scheduler import Scheduler
from hashring.membership import Member, MembershipView, State
from hashring.ring import Ring
from tests.dbutil import add_nodes, migrated, pin
from tests.endpoint_stubs import RecordingQueue, StubMembership

CTXT: dict[str, Any] = {"request_id": "req-test"}


# -- fixtures and stubs ---------------------------------------------------------------


@dataclass
class StubCompute:
    """The one call the fleet endpoint makes to agents: drain."""

    drained: list[str] = field(default_factory=list)

    def drain(self, host: str) -> str:
        self.drained.append(host)
        return "draining"


@dataclass
class RecordingRouter:
    """A router whose agents accept everything and report later (by hand)."""

    routed: list[tuple[str, str, str | None, int]] = field(default_factory=list)
    destroyed: list[str] = field(default_factory=list)

    def route(self, instance: Instance, node: Node, claim: Ownership) -> None:
        self.routed.append((instance.uuid, node.uuid, claim.owner, claim.epoch))

    def destroy(self, instance: Instance) -> bool:
        self.destroyed.append(instance.uuid)
        return True


def view_of(*hosts: str, excluded: dict[str, str] | None = None) -> MembershipView:
    return MembershipView(
        members={h: Member(member_id=h, ring_version=1, weight=1.0) for h in hosts},
        excluded=excluded or {},
        ring_version=1,
    )


@dataclass
class Env:
    db: Database
    fleet: FleetView
    membership: StubMembership
    queue: RecordingQueue
    inventory: InventoryEndpoint
    instances: InstancesEndpoint
    fleet_ep: FleetEndpoint
    agents: AgentsEndpoint
    grace: list[float]
    compute: StubCompute

    def live(self, *hosts: str) -> None:
        self.fleet.on_change(view_of(*hosts))

    def node(self, ident: str) -> dict[str, Any]:
        return self.inventory.show_node(CTXT, node=ident)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    fleet = FleetView(db)
    membership = StubMembership()
    fleet.attach(membership)  # type: ignore[arg-type]
    queue = RecordingQueue()
    grace = [3600.0]
    compute = StubCompute()
    yield Env(
        db=db,
        fleet=fleet,
        membership=membership,
        queue=queue,
        inventory=InventoryEndpoint(db, fleet),
        instances=InstancesEndpoint(db, queue),
        fleet_ep=FleetEndpoint(db, fleet, "cond-1", compute),
        agents=AgentsEndpoint(db, fleet, lambda: grace[0]),
        grace=grace,
        compute=compute,
    )
    db.dispose()


def _fields(exc: pytest.ExceptionInfo[InvalidInput]) -> list[str]:
    return exc.value.fields


def _node_spec(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "resource_class": "baremetal", **extra}


def _flavor(env: Env, name: str = "small", **extra: Any) -> dict[str, Any]:
    return env.inventory.create_flavor(
        CTXT, flavor={"name": name, "resource_class": "baremetal", **extra}
    )


def _claim(env: Env, host: str, uuids: list[str]) -> dict[str, int]:
    out = env.agents.claim_nodes(CTXT, host=host, node_uuids=uuids)
    return {g["node_uuid"]: g["epoch"] for g in out["granted"]}


# -- nodes: create, import, show ----------------------------------------------------


def test_create_node_and_show_by_name_and_uuid(env: Env) -> None:
    created = env.inventory.create_node(
        CTXT,
        node=_node_spec(
            "rack1-n1",
            traits=["CUSTOM_GPU"],
            properties={"capabilities": "boot_mode:uefi, cpu_arch:x86_64", "cpus": 64},
            group="rack1",
        ),
    )
    assert created["name"] == "rack1-n1"
    assert created["traits"] == ["CUSTOM_GPU"]
    assert created["capabilities"] == {"boot_mode": "uefi", "cpu_arch": "x86_64"}
    assert created["properties"]["capabilities"] == "boot_mode:uefi, cpu_arch:x86_64"  # as written
    assert created["group"] == "rack1"
    assert created["provision_state"] == "available"
    assert created["owner"] is None and created["owner_epoch"] == 0
    assert env.node("rack1-n1") == created
    assert env.node(created["uuid"]) == created
    assert env.node(created["uuid"].upper()) == created  # uuids are normalized


def test_create_node_refuses_bad_and_duplicate_input(env: Env) -> None:
    with pytest.raises(InvalidInput) as err:
        env.inventory.create_node(CTXT, node={"name": "n1", "resource_class": "", "colour": 1})
    assert set(_fields(err)) == {"node.resource_class", "node.colour"}
    env.inventory.create_node(CTXT, node=_node_spec("n1"))
    with pytest.raises(DuplicateNode) as dup:
        env.inventory.create_node(CTXT, node=_node_spec("n1"))
    assert dup.value.field == "name"
    assert len(env.inventory.list_nodes(CTXT)) == 1


def test_a_retried_create_with_its_uuid_is_a_conflict_on_the_uuid(env: Env) -> None:
    """The same spec again (name and uuid both stored): the clash named is the
    uuid, which tells the client its first attempt was stored (issue 28)."""
    spec = {**_node_spec("n1"), "uuid": "6f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}
    env.inventory.create_node(CTXT, node=spec)
    with pytest.raises(DuplicateNode) as dup:
        env.inventory.create_node(CTXT, node=spec)
    assert (dup.value.field, dup.value.value) == ("uuid", spec["uuid"])
    # Another node's name alone is still a clash on the name.
    with pytest.raises(DuplicateNode) as dup:
        env.inventory.create_node(CTXT, node=_node_spec("n1"))
    assert dup.value.field == "name"


def test_import_dry_run_reports_every_stored_clash_and_writes_nothing(env: Env) -> None:
    stored = env.inventory.create_node(CTXT, node=_node_spec("n1"))
    env.inventory.create_node(CTXT, node=_node_spec("n3"))
    batch = [_node_spec("n1"), _node_spec("n2"), _node_spec("n3"), _node_spec("n4")]
    batch[1]["uuid"] = stored["uuid"]  # n2 reuses n1's uuid
    with pytest.raises(InvalidInput) as err:
        env.inventory.import_nodes(CTXT, nodes=batch, dry_run=True)
    assert _fields(err) == ["nodes[0].name", "nodes[1].uuid", "nodes[2].name"]
    assert len(env.inventory.list_nodes(CTXT)) == 2
    fresh = [_node_spec("n5"), _node_spec("n6")]
    assert env.inventory.import_nodes(CTXT, nodes=fresh, dry_run=True) == {
        "created": 0,
        "checked": 2,
        "uuids": [],
    }
    assert len(env.inventory.list_nodes(CTXT)) == 2
    with pytest.raises(InvalidInput) as err:
        env.inventory.import_nodes(CTXT, nodes=fresh, dry_run="yes please")
    assert _fields(err) == ["dry_run"]
    assert len(env.inventory.list_nodes(CTXT)) == 2


def test_import_with_every_clash_checks_and_writes_in_one_call(env: Env) -> None:
    """every_clash (1.18): a clash with the stored nodes names every clashing
    entry, as a dry run does, and nothing is written; a clean batch is written."""
    stored = env.inventory.create_node(CTXT, node=_node_spec("n1"))
    env.inventory.create_node(CTXT, node=_node_spec("n3"))
    batch = [_node_spec("n1"), _node_spec("n2"), _node_spec("n3"), _node_spec("n4")]
    batch[1]["uuid"] = stored["uuid"]
    with pytest.raises(InvalidInput) as err:
        env.inventory.import_nodes(CTXT, nodes=batch, every_clash=True)
    assert _fields(err) == ["nodes[0].name", "nodes[1].uuid", "nodes[2].name"]
    assert all(e.reason == "exists already" for e in err.value.errors)
    assert len(env.inventory.list_nodes(CTXT)) == 2
    # Without it, the first clash alone, as DuplicateNode (API 1.0).
    with pytest.raises(DuplicateNode) as dup:
        env.inventory.import_nodes(CTXT, nodes=batch)
    assert (dup.value.index, dup.value.field) == (0, "name")
    # Bad entries and a bad flag are named together, before any write.
    with pytest.raises(InvalidInput) as err:
        env.inventory.import_nodes(
            CTXT, nodes=[_node_spec("n7"), {"name": "n8"}], every_clash="yes"
        )
    assert _fields(err) == ["nodes[1].resource_class", "every_clash"]
    created = env.inventory.import_nodes(
        CTXT, nodes=[_node_spec("n5"), _node_spec("n6")], every_clash=True
    )
    assert created["created"] == 2 and len(created["uuids"]) == 2
    assert len(env.inventory.list_nodes(CTXT)) == 4


def test_show_node_errors(env: Env) -> None:
    with pytest.raises(NodeNotFound):
        env.inventory.show_node(CTXT, node="nope")
    with pytest.raises(NodeNotFound):
        env.inventory.show_node(CTXT, node=str(uuidlib.uuid4()))
    for bad in (None, 5, "", "-starts-with-dash", ["n1"], "has space"):
        with pytest.raises(InvalidInput) as err:
            env.inventory.show_node(CTXT, node=bad)
        assert _fields(err) == ["node"]


def test_import_nodes_all_or_nothing(env: Env) -> None:
    out = env.inventory.import_nodes(CTXT, nodes=[_node_spec(f"n{i}") for i in range(5)])
    assert out["created"] == 5 and len(out["uuids"]) == 5
    assert {n["uuid"] for n in env.inventory.list_nodes(CTXT)} == set(out["uuids"])

    # One bad entry: every problem named, nothing imported.
    batch = [_node_spec("m0"), {"name": "m1", "resource_class": 7}, _node_spec("m0")]
    with pytest.raises(InvalidInput) as err:
        env.inventory.import_nodes(CTXT, nodes=batch)
    assert _fields(err) == ["nodes[1].resource_class", "nodes[2].name"]
    # A clash with a stored node: nothing imported either.
    with pytest.raises(DuplicateNode) as dup:
        env.inventory.import_nodes(CTXT, nodes=[_node_spec("fresh"), _node_spec("n3")])
    assert (dup.value.field, dup.value.index, dup.value.value) == ("name", 1, "n3")
    with pytest.raises(InvalidInput) as err:
        env.inventory.import_nodes(CTXT, nodes={"name": "x"})
    assert _fields(err) == ["nodes"]
    assert len(env.inventory.list_nodes(CTXT)) == 5


def test_import_empty_list(env: Env) -> None:
    assert env.inventory.import_nodes(CTXT, nodes=[]) == {"created": 0, "uuids": []}


# -- nodes: list ---------------------------------------------------------------------


def test_list_nodes_filters(env: Env) -> None:
    env.live("agent-1")
    env.inventory.import_nodes(
        CTXT,
        nodes=[
            _node_spec("a0", group="g1"),
            _node_spec("a1", group="g1", maintenance=True, maintenance_reason="disk"),
            _node_spec("a2", provision_state="manageable"),
            {"name": "b0", "resource_class": "gold"},
        ],
    )
    a0 = env.node("a0")["uuid"]
    _claim(env, "agent-1", [a0])
    pin(env.db, [a0], "agent-1")

    def names(**filters: Any) -> list[str]:
        return sorted(n["name"] for n in env.inventory.list_nodes(CTXT, filters=filters))

    assert names() == ["a0", "a1", "a2", "b0"]
    assert names(resource_class="gold") == ["b0"]
    assert names(group="g1") == ["a0", "a1"]
    assert names(group="") == ["a2", "b0"]
    assert names(owner="agent-1") == ["a0"]
    assert names(provision_state="manageable") == ["a2"]
    assert names(maintenance=True) == ["a1"]
    assert names(maintenance=False) == ["a0", "a2", "b0"]
    assert names(pinned=True) == ["a0"]
    assert names(pinned=False, resource_class="baremetal") == ["a1", "a2"]
    assert env.inventory.list_nodes(CTXT, filters=None) == env.inventory.list_nodes(CTXT)
    a2 = env.node("a2")["uuid"]
    missing = str(uuidlib.uuid4())
    assert names(uuids=[a0, a2.upper(), missing]) == ["a0", "a2"]
    assert names(uuids=[a0], owner="agent-1") == ["a0"]
    assert names(uuids=[]) == []


def test_list_nodes_refuses_bad_uuid_filters(env: Env) -> None:
    for bad, named in (
        ("x", "filters.uuids"),
        ([str(uuidlib.uuid4())] * 1001, "filters.uuids"),
        (["not-a-uuid"], "filters.uuids[0]"),
    ):
        with pytest.raises(InvalidInput) as refused:
            env.inventory.list_nodes(CTXT, filters={"uuids": bad})
        assert [e.field for e in refused.value.errors] == [named]


def test_list_nodes_pages_by_uuid(env: Env) -> None:
    env.inventory.import_nodes(CTXT, nodes=[_node_spec(f"n{i:02}") for i in range(12)])
    every = env.inventory.list_nodes(CTXT)
    assert [n["uuid"] for n in every] == sorted(n["uuid"] for n in every)
    pages: list[dict[str, Any]] = []
    marker = None
    while True:
        page = env.inventory.list_nodes(CTXT, limit=5, marker=marker)
        pages.extend(page)
        if len(page) < 5:
            break
        marker = page[-1]["uuid"]
    assert pages == every
    assert len(env.inventory.list_nodes(CTXT, limit=3)) == 3


@pytest.mark.parametrize(
    ("kwargs", "fields"),
    [
        ({"filters": {"colour": "red"}}, ["filters.colour"]),
        ({"filters": {"maintenance": "yes"}}, ["filters.maintenance"]),
        ({"filters": {"pinned": 1}}, ["filters.pinned"]),
        ({"filters": {"owner": 5}}, ["filters.owner"]),
        ({"filters": {"resource_class": None}}, ["filters.resource_class"]),
        (
            {"filters": {"group": ["g"], "provision_state": {}, "x": 1}},
            ["filters.x", "filters.group", "filters.provision_state"],
        ),
        ({"filters": ["resource_class"]}, ["filters"]),
        ({"filters": "resource_class=gold"}, ["filters"]),
        ({"limit": 0}, ["limit"]),
        ({"limit": 10_001}, ["limit"]),
        ({"limit": True}, ["limit"]),
        ({"limit": "10"}, ["limit"]),
        ({"marker": 12}, ["marker"]),
        ({"marker": ""}, ["marker"]),
    ],
)
def test_list_nodes_bad_arguments_name_the_field(
    env: Env, kwargs: dict[str, Any], fields: list[str]
) -> None:
    with pytest.raises(InvalidInput) as err:
        env.inventory.list_nodes(CTXT, **kwargs)
    assert _fields(err) == fields


# -- nodes: maintenance, owner, move ----------------------------------------------------


def test_set_node_maintenance(env: Env) -> None:
    node = env.inventory.create_node(CTXT, node=_node_spec("n1"))
    on = env.inventory.set_node_maintenance(CTXT, node="n1", maintenance=True, reason="fans")
    assert (on["maintenance"], on["maintenance_reason"]) == (True, "fans")
    assert on["uuid"] == node["uuid"]
    off = env.inventory.set_node_maintenance(CTXT, node=node["uuid"], maintenance=False)
    assert (off["maintenance"], off["maintenance_reason"]) == (False, None)
    # A reason only goes with entering maintenance.
    with pytest.raises(InvalidInput) as err:
        env.inventory.set_node_maintenance(CTXT, node="n1", maintenance=False, reason="x")
    assert _fields(err) == ["reason"]
    assert env.node("n1") == off
    with pytest.raises(NodeNotFound):
        env.inventory.set_node_maintenance(CTXT, node="n2", maintenance=True)


@pytest.mark.parametrize(
    ("kwargs", "fields"),
    [
        ({"node": "n1", "maintenance": "true"}, ["maintenance"]),
        ({"node": "n1", "maintenance": None}, ["maintenance"]),
        ({"node": "n1", "maintenance": True, "reason": 5}, ["reason"]),
        ({"node": "n1", "maintenance": True, "reason": "x" * 256}, ["reason"]),
        ({"node": 1, "maintenance": True}, ["node"]),
    ],
)
def test_set_node_maintenance_bad_input_changes_nothing(
    env: Env, kwargs: dict[str, Any], fields: list[str]
) -> None:
    before = env.inventory.create_node(CTXT, node=_node_spec("n1"))
    with pytest.raises(InvalidInput) as err:
        env.inventory.set_node_maintenance(CTXT, **kwargs)
    assert _fields(err) == fields
    assert env.node("n1") == before


def test_node_owner_and_ring_owner(env: Env) -> None:
    node = env.inventory.create_node(CTXT, node=_node_spec("n1"))
    # No membership view yet: no ring owner, but the stored facts are shown.
    assert env.inventory.node_owner(CTXT, node="n1") == {
        "node_uuid": node["uuid"],
        "owner": None,
        "epoch": 0,
        "pinned": False,
        "ring_owner": None,
    }
    env.live("agent-1", "agent-2", "agent-3")
    epochs = _claim(env, "agent-2", [node["uuid"]])
    pin(env.db, [node["uuid"]], "agent-2")
    owner = env.inventory.node_owner(CTXT, node=node["uuid"])
    assert owner["owner"] == "agent-2"
    assert owner["epoch"] == epochs[node["uuid"]] == 1
    assert owner["pinned"] is True
    assert owner["ring_owner"] == env.fleet.ring().owner(node["uuid"])
    assert owner["ring_owner"] in {"agent-1", "agent-2", "agent-3"}
    with pytest.raises(NodeNotFound):
        env.inventory.node_owner(CTXT, node="n2")
    with pytest.raises(InvalidInput) as err:
        env.inventory.node_owner(CTXT, node=None)
    assert _fields(err) == ["node"]


def test_move_node_from_dead_owner_to_live_agent(env: Env) -> None:
    env.live("agent-1", "agent-2", "agent-old")
    free, unpinned, pinned = add_nodes(env.db, 3)
    _claim(env, "agent-old", [unpinned, pinned])
    [instance] = pin(env.db, [pinned], "agent-old")
    env.live("agent-1", "agent-2")  # agent-old is gone

    moved = env.inventory.move_node(CTXT, node=unpinned, host="agent-1")
    assert (moved["owner"], moved["owner_epoch"]) == ("agent-1", 2)
    # A pinned node moves too (explicitly), and its instance goes with it.
    moved = env.inventory.move_node(CTXT, node=pinned, host="agent-2")
    assert (moved["owner"], moved["owner_epoch"]) == ("agent-2", 2)
    assert moved["instance_uuid"] == instance
    assert env.instances.show_instance(CTXT, instance=instance)["host"] == "agent-2"
    # A free node is simply claimed for the target.
    moved = env.inventory.move_node(CTXT, node=free, host="agent-2")
    assert (moved["owner"], moved["owner_epoch"]) == ("agent-2", 1)
    # Moving a node to its current owner changes nothing.
    again = env.inventory.move_node(CTXT, node=free, host="agent-2")
    assert again == moved


def test_move_node_never_robs_a_live_owner(env: Env) -> None:
    env.live("agent-1", "agent-2")
    [node] = add_nodes(env.db, 1)
    _claim(env, "agent-1", [node])
    before = env.node(node)
    with pytest.raises(Conflict) as err:
        env.inventory.move_node(CTXT, node=node, host="agent-2")
    assert err.value.field == "owner" and err.value.value == "agent-1"
    assert env.node(node) == before
    # To its own live owner: nothing to do, and no conflict (a retried move
    # succeeds; docs/http-api.rst, POST /v1/nodes/{node}/move).
    assert env.inventory.move_node(CTXT, node=node, host="agent-1") == before
    assert env.node(node) == before


def test_move_node_to_a_host_that_is_not_live(env: Env) -> None:
    env.live("agent-1")
    [node] = add_nodes(env.db, 1, owner="agent-gone")
    before = env.node(node)
    for bad in ("agent-9", "", None, 7):
        with pytest.raises(InvalidInput) as err:
            env.inventory.move_node(CTXT, node=node, host=bad)
        assert _fields(err) == ["host"]
    assert env.node(node) == before
    with pytest.raises(NodeNotFound):
        env.inventory.move_node(CTXT, node="missing", host="agent-1")


def test_move_node_needs_a_trustworthy_membership(env: Env) -> None:
    env.live("agent-1")
    [node] = add_nodes(env.db, 1, owner="agent-gone")
    env.membership.state = State.SUSPENDED
    with pytest.raises(ServiceUnavailable):
        env.inventory.move_node(CTXT, node=node, host="agent-1")
    assert env.node(node)["owner"] == "agent-gone"


# -- flavors ---------------------------------------------------------------------------


def test_flavor_crud(env: Env) -> None:
    created = _flavor(
        env,
        "gold",
        required_traits=["CUSTOM_GPU"],
        extra_specs={"capabilities:boot_mode": "s== uefi", "trait:CUSTOM_SLOW": "forbidden"},
    )
    assert created["name"] == "gold"
    assert created["required_traits"] == ["CUSTOM_GPU"]
    assert created["forbidden_traits"] == ["CUSTOM_SLOW"]
    assert created["extra_specs"] == {"capabilities:boot_mode": "s== uefi"}
    _flavor(env, "alpha")
    assert [f["name"] for f in env.inventory.list_flavors(CTXT)] == ["alpha", "gold"]
    assert env.inventory.show_flavor(CTXT, flavor="gold") == created
    with pytest.raises(DuplicateFlavor):
        _flavor(env, "gold")
    env.inventory.delete_flavor(CTXT, flavor="gold")
    with pytest.raises(FlavorNotFound):
        env.inventory.show_flavor(CTXT, flavor="gold")
    with pytest.raises(FlavorNotFound):
        env.inventory.delete_flavor(CTXT, flavor="gold")
    assert [f["name"] for f in env.inventory.list_flavors(CTXT)] == ["alpha"]


def test_flavor_bad_input_names_the_field(env: Env) -> None:
    with pytest.raises(InvalidInput) as err:
        env.inventory.create_flavor(
            CTXT,
            flavor={
                "name": "f",
                "resource_class": "baremetal",
                "required_traits": ["lower"],
                "extra_specs": {"capabilities:cpus": ">= many"},
            },
        )
    assert _fields(err) == ["required_traits[0]", "extra_specs.capabilities:cpus"]
    with pytest.raises(InvalidInput) as err:
        env.inventory.create_flavor(CTXT, flavor=None)
    assert _fields(err) == [""]
    for method in (env.inventory.show_flavor, env.inventory.delete_flavor):
        with pytest.raises(InvalidInput) as err:
            method(CTXT, flavor=["f"])
        assert _fields(err) == ["flavor"]
    assert env.inventory.list_flavors(CTXT) == []


def test_flavor_contradicting_its_resources_spec_is_refused_naming_both(env: Env) -> None:
    with pytest.raises(InvalidInput) as err:
        _flavor(
            env,
            resource_class="baremetal-silver",
            extra_specs={"resources:CUSTOM_BAREMETAL_GOLD": "1", "resources:VCPU": "0"},
        )
    assert _fields(err) == ["resource_class", "extra_specs.resources:CUSTOM_BAREMETAL_GOLD"]
    assert "CUSTOM_BAREMETAL_SILVER" in str(err.value)
    assert env.inventory.list_flavors(CTXT) == []
    # Nova's ironic flavor, in another spelling of the same class: accepted as written.
    created = _flavor(
        env,
        resource_class="baremetal.gold",
        extra_specs={"resources:CUSTOM_BAREMETAL_GOLD": "1", "resources:VCPU": "0"},
    )
    assert created["extra_specs"]["resources:CUSTOM_BAREMETAL_GOLD"] == "1"


def test_flavor_in_use_cannot_be_deleted(env: Env) -> None:
    _flavor(env)
    [instance] = env.instances.build_instances(CTXT, request={"flavor": "small"})
    with pytest.raises(Conflict) as err:
        env.inventory.delete_flavor(CTXT, flavor="small")
    assert instance["uuid"] in str(err.value)
    assert env.inventory.show_flavor(CTXT, flavor="small")["name"] == "small"


# -- instances (with the recording queue) ------------------------------------------------


def test_build_instances_stores_then_submits(env: Env) -> None:
    _flavor(env)
    built = env.instances.build_instances(
        CTXT, request={"flavor": "small", "count": 3, "name": "web", "group": "rack1"}
    )
    assert [i["name"] for i in built] == ["web-1", "web-2", "web-3"]
    assert {i["vm_state"] for i in built} == {"building"}
    assert {i["task_state"] for i in built} == {"scheduling"}
    assert {i["group_hint"] for i in built} == {"rack1"}
    assert env.queue.submitted == [[i["uuid"] for i in built]]
    for instance in built:
        assert env.instances.show_instance(CTXT, instance=instance["uuid"]) == instance


def test_build_instances_stores_scheduler_hints(env: Env) -> None:
    _flavor(env)
    hints = {"query": '[">=", "$free_ram_mb", 1024]', "rack": "r1", "n": 2}
    ids = [str(uuidlib.uuid4())]
    request = {"flavor": "small", "instance_uuids": ids, "scheduler_hints": hints}
    (built,) = env.instances.build_instances(CTXT, request=request)
    assert built["scheduler_hints"] == hints
    assert env.instances.show_instance(CTXT, instance=ids[0])["scheduler_hints"] == hints
    # A retry must repeat the hints: other hints are another request.
    assert env.instances.build_instances(CTXT, request=request) == [built]
    with pytest.raises(DuplicateInstance):
        env.instances.build_instances(CTXT, request={**request, "scheduler_hints": {"rack": "r2"}})
    (plain,) = env.instances.build_instances(CTXT, request={"flavor": "small"})
    assert plain["scheduler_hints"] == {}


def test_build_instances_is_idempotent_with_instance_uuids(env: Env) -> None:
    _flavor(env)
    _flavor(env, "large")
    ids = [str(uuidlib.uuid4()) for _ in range(2)]
    request = {"flavor": "small", "count": 2, "instance_uuids": ids}
    first = env.instances.build_instances(CTXT, request=request)
    assert [i["uuid"] for i in first] == ids
    again = env.instances.build_instances(
        CTXT, request={**request, "instance_uuids": [u.upper() for u in ids]}
    )
    assert again == first
    assert env.queue.submitted == [ids]  # the retry was not submitted again
    # The same ids for another request are refused.
    with pytest.raises(DuplicateInstance) as err:
        env.instances.build_instances(CTXT, request={**request, "flavor": "large"})
    assert err.value.field == "instance_uuids"
    assert len(env.instances.list_instances(CTXT)) == 2
    assert env.queue.submitted == [ids]


def test_build_with_unknown_flavor_stores_nothing(env: Env) -> None:
    ids = [str(uuidlib.uuid4())]
    with pytest.raises(FlavorNotFound):
        env.instances.build_instances(CTXT, request={"flavor": "nope", "instance_uuids": ids})
    assert env.instances.list_instances(CTXT) == []
    assert env.queue.submitted == []
    with pytest.raises(InstanceNotFound):
        env.instances.show_instance(CTXT, instance=ids[0])


@pytest.mark.parametrize(
    ("request_", "fields"),
    [
        ({"flavor": "small", "count": 0}, ["count"]),
        ({"flavor": "small", "count": 1001}, ["count"]),
        ({"count": 1}, ["flavor"]),
        ({"flavor": "small", "name": " padded"}, ["name"]),
        ({"flavor": "small", "group": "no spaces"}, ["group"]),
        (
            {"flavor": "small", "count": 2, "instance_uuids": [str(uuidlib.uuid4())]},
            ["instance_uuids"],
        ),
        ({"flavor": "small", "colour": "red"}, ["colour"]),
        ("small", [""]),
    ],
)
def test_build_bad_request_names_the_field(env: Env, request_: Any, fields: list[str]) -> None:
    _flavor(env)
    with pytest.raises(InvalidInput) as err:
        env.instances.build_instances(CTXT, request=request_)
    assert _fields(err) == fields
    assert env.instances.list_instances(CTXT) == []
    assert env.queue.submitted == []


def test_list_instances_filters_and_pages(env: Env) -> None:
    env.live("agent-1")
    _flavor(env)
    built = env.instances.build_instances(CTXT, request={"flavor": "small", "count": 7})
    [node] = add_nodes(env.db, 1, owner="agent-1")
    placed = built[0]["uuid"]
    with env.db.transaction() as session:
        row = session.query(InstanceModel).filter_by(uuid=placed).one()
        row.host, row.node_uuid = "agent-1", node
    env.instances.delete_instance(CTXT, instance=built[1]["uuid"])

    every = env.instances.list_instances(CTXT)
    assert [i["uuid"] for i in every] == sorted(i["uuid"] for i in built)
    assert [i["uuid"] for i in env.instances.list_instances(CTXT, host="agent-1")] == [placed]
    deleting = env.instances.list_instances(CTXT, vm_state="deleting")
    assert [i["uuid"] for i in deleting] == [built[1]["uuid"]]
    assert len(env.instances.list_instances(CTXT, vm_state="building")) == 6
    assert env.instances.list_instances(CTXT, vm_state="active") == []
    paged: list[dict[str, Any]] = []
    marker = None
    while page := env.instances.list_instances(CTXT, limit=3, marker=marker):
        paged.extend(page)
        marker = page[-1]["uuid"]
    assert paged == every


@pytest.mark.parametrize(
    ("kwargs", "fields"),
    [
        ({"vm_state": "running"}, ["vm_state"]),
        ({"vm_state": ["active"]}, ["vm_state"]),
        ({"host": ""}, ["host"]),
        ({"host": 3}, ["host"]),
        ({"limit": -1}, ["limit"]),
        ({"marker": "not-a-uuid"}, ["marker"]),
    ],
)
def test_list_instances_bad_arguments(env: Env, kwargs: dict[str, Any], fields: list[str]) -> None:
    with pytest.raises(InvalidInput) as err:
        env.instances.list_instances(CTXT, **kwargs)
    assert _fields(err) == fields


def test_show_and_delete_instance_errors(env: Env) -> None:
    for method in (env.instances.show_instance, env.instances.delete_instance):
        with pytest.raises(InstanceNotFound):
            method(CTXT, instance=str(uuidlib.uuid4()))
        with pytest.raises(InvalidInput) as err:
            method(CTXT, instance="vm-1")
        assert _fields(err) == ["instance"]
    assert env.queue.deleted == []


def test_delete_instance_queues_the_teardown(env: Env) -> None:
    _flavor(env)
    [instance] = env.instances.build_instances(CTXT, request={"flavor": "small"})
    deleting = env.instances.delete_instance(CTXT, instance=instance["uuid"])
    assert (deleting["vm_state"], deleting["task_state"]) == ("deleting", "deleting")
    assert env.queue.deleted == [instance["uuid"]]
    # Asking again re-queues (the first attempt may have been lost).
    env.instances.delete_instance(CTXT, instance=instance["uuid"])
    assert env.queue.deleted == [instance["uuid"]] * 2


def test_delete_of_a_deleted_instance_changes_nothing(env: Env) -> None:
    _flavor(env)
    [instance] = env.instances.build_instances(CTXT, request={"flavor": "small"})
    with env.db.transaction() as session:
        session.query(InstanceModel).filter_by(uuid=instance["uuid"]).one().vm_state = "deleted"
    shown = env.instances.show_instance(CTXT, instance=instance["uuid"])
    assert env.instances.delete_instance(CTXT, instance=instance["uuid"]) == shown
    assert env.queue.deleted == []
    assert env.instances.list_instances(CTXT) == []  # deleted ones are hidden by default
    assert len(env.instances.list_instances(CTXT, vm_state="deleted")) == 1


# -- instances with the real build workers and scheduler ------------------------------------


def _wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


@pytest.fixture
def workers(env: Env) -> Iterator[tuple[Env, InstancesEndpoint]]:
    builds = BuildLifecycle(env.db, Scheduler(env.db), env.fleet, workers=2)
    builds.start()
    try:
        yield env, InstancesEndpoint(env.db, builds)
    finally:
        builds.stop()


def test_real_workers_place_a_build_and_fail_a_no_fit_one(
    workers: tuple[Env, InstancesEndpoint],
) -> None:
    env, endpoint = workers
    env.live("agent-1", "agent-2")
    out = env.inventory.import_nodes(CTXT, nodes=[_node_spec(f"n{i}") for i in range(3)])
    _claim(env, "agent-1", out["uuids"][:2])
    _claim(env, "agent-2", out["uuids"][2:])
    _flavor(env)
    _flavor(env, "gold", resource_class="gold")

    [fits] = endpoint.build_instances(CTXT, request={"flavor": "small"})
    [misfit] = endpoint.build_instances(CTXT, request={"flavor": "gold"})

    def placed() -> bool:
        shown = endpoint.show_instance(CTXT, instance=fits["uuid"])
        return bool(shown["task_state"] == "spawning")

    def failed() -> bool:
        shown = endpoint.show_instance(CTXT, instance=misfit["uuid"])
        return bool(shown["vm_state"] == "error")

    _wait_for(placed)
    _wait_for(failed)
    shown = endpoint.show_instance(CTXT, instance=fits["uuid"])
    assert shown["node_uuid"] in out["uuids"]
    assert (shown["vm_state"], shown["task_state"]) == ("building", "spawning")
    node = env.node(shown["node_uuid"])
    assert node["instance_uuid"] == fits["uuid"]
    assert node["provision_state"] == "deploying"
    assert shown["host"] == node["owner"]

    error = endpoint.show_instance(CTXT, instance=misfit["uuid"])
    assert error["node_uuid"] is None and error["task_state"] is None
    assert error["attempts"] == 1
    assert "no valid node" in error["fault"]
    assert "gold" in error["fault"]

    # Deleting them: the unplaced one is simply deleted; the placed one (no
    # agent was ever asked to deploy it) frees its node.
    endpoint.delete_instance(CTXT, instance=misfit["uuid"])
    endpoint.delete_instance(CTXT, instance=fits["uuid"])

    def deleted(uuid: str) -> Callable[[], bool]:
        return lambda: endpoint.show_instance(CTXT, instance=uuid)["vm_state"] == "deleted"

    _wait_for(deleted(misfit["uuid"]))
    _wait_for(deleted(fits["uuid"]))
    freed = env.node(shown["node_uuid"])
    assert freed["instance_uuid"] is None and freed["provision_state"] == "available"
    assert endpoint.list_instances(CTXT) == []


@dataclass
class Routed:
    env: Env
    builds: BuildLifecycle
    router: RecordingRouter
    instances: InstancesEndpoint
    agents: AgentsEndpoint

    def wait_routed(self, count: int) -> tuple[str, str, str | None, int]:
        _wait_for(lambda: len(self.router.routed) >= count)
        return self.router.routed[count - 1]

    def show(self, instance: str) -> dict[str, Any]:
        return self.instances.show_instance(CTXT, instance=instance)


@pytest.fixture
def routed(env: Env) -> Iterator[Routed]:
    """Real build workers and scheduler, agents stubbed by a recording router."""
    router = RecordingRouter()
    builds = BuildLifecycle(
        env.db, Scheduler(env.db), env.fleet, workers=2, router=router, max_attempts=lambda: 2
    )
    env.live("agent-1", "agent-2")
    out = env.inventory.import_nodes(CTXT, nodes=[_node_spec(f"n{i}") for i in range(3)])
    _claim(env, "agent-1", out["uuids"][:2])
    _claim(env, "agent-2", out["uuids"][2:])
    _flavor(env)
    builds.start()
    try:
        yield Routed(
            env=env,
            builds=builds,
            router=router,
            instances=InstancesEndpoint(env.db, builds),
            agents=AgentsEndpoint(env.db, env.fleet, lambda: env.grace[0], builds=builds),
        )
    finally:
        builds.stop()


def _result(host: str | None, instance: str, node: str, epoch: int, **extra: Any) -> dict[str, Any]:
    return {"host": host, "instance_uuid": instance, "node_uuid": node, "epoch": epoch, **extra}


def test_build_and_destroy_results_are_fenced_by_the_owner_epoch(routed: Routed) -> None:
    env, agents = routed.env, routed.agents
    [built] = routed.instances.build_instances(CTXT, request={"flavor": "small"})
    instance, node, owner, epoch = routed.wait_routed(1)
    assert instance == built["uuid"] and owner is not None
    other = "agent-2" if owner == "agent-1" else "agent-1"

    # Stale reports change nothing: wrong epoch, wrong host, wrong node.
    for stale in (
        _result(owner, instance, node, epoch + 1, success=True),
        _result(other, instance, node, epoch, success=True),
        _result(owner, instance, str(uuidlib.uuid4()), epoch, success=True),
    ):
        assert agents.report_build_result(CTXT, **stale) == {"accepted": False}
    assert routed.show(instance)["vm_state"] == "building"

    good = _result(owner, instance, node, epoch, success=True)
    assert agents.report_build_result(CTXT, **good) == {"accepted": True}
    shown = routed.show(instance)
    assert (shown["vm_state"], shown["task_state"], shown["node_uuid"]) == ("active", None, node)
    assert env.node(node)["provision_state"] == "active"

    deleting = routed.instances.delete_instance(CTXT, instance=instance)
    assert deleting["vm_state"] == "deleting"
    _wait_for(lambda: routed.router.destroyed == [instance])
    assert routed.show(instance)["vm_state"] == "deleting"  # waits for the agent's report
    stale = _result(owner, instance, node, epoch + 1, success=True)
    assert agents.report_destroy_result(CTXT, **stale) == {"accepted": False}
    done = _result(owner, instance, node, epoch, success=True)
    assert agents.report_destroy_result(CTXT, **done) == {"accepted": True}
    assert routed.show(instance)["vm_state"] == "deleted"
    freed = env.node(node)
    assert (freed["instance_uuid"], freed["provision_state"]) == (None, "available")


def test_failed_build_is_rescheduled_elsewhere_then_errors(routed: Routed) -> None:
    env, agents = routed.env, routed.agents
    [built] = routed.instances.build_instances(CTXT, request={"flavor": "small"})
    instance, first, owner, epoch = routed.wait_routed(1)
    failed = _result(owner, instance, first, epoch, success=False, fault="disk on fire")
    assert agents.report_build_result(CTXT, **failed, node_clean=False) == {"accepted": True}
    assert env.node(first)["provision_state"] == "error"  # not cleaned: not reused

    instance, second, owner, epoch = routed.wait_routed(2)
    assert instance == built["uuid"] and second != first
    shown = routed.show(instance)
    assert shown["attempts"] == 1 and shown["tried_nodes"] == [first]
    failed = _result(owner, instance, second, epoch, success=False, fault="bmc timeout")
    assert agents.report_build_result(CTXT, **failed) == {"accepted": True}

    error = routed.show(instance)
    assert (error["vm_state"], error["attempts"], error["node_uuid"]) == ("error", 2, None)
    assert "disk on fire" in error["fault"] and "bmc timeout" in error["fault"]
    assert env.node(second)["provision_state"] == "available"  # cleaned: reusable
    assert len(routed.router.routed) == 2  # max_attempts=2: no third try


def test_a_failure_report_for_a_build_that_is_over_is_refused(routed: Routed) -> None:
    """From the node's owner, about the instance the node hosts, but the
    build ended: nothing to apply, and the agent is told so (issue 16)."""
    routed.instances.build_instances(CTXT, request={"flavor": "small"})
    instance, node, owner, epoch = routed.wait_routed(1)
    success = _result(owner, instance, node, epoch, success=True)
    assert routed.agents.report_build_result(CTXT, **success) == {"accepted": True}
    before = (routed.show(instance), routed.env.node(node))
    failed = _result(owner, instance, node, epoch, success=False, fault="late failure")
    assert routed.agents.report_build_result(CTXT, **failed) == {"accepted": False}
    assert (routed.show(instance), routed.env.node(node)) == before
    assert before[0]["vm_state"] == "active" and before[1]["instance_uuid"] == instance


def test_results_without_build_workers_or_with_bad_input(env: Env) -> None:
    env.live("agent-1")
    [node] = add_nodes(env.db, 1, owner="agent-1")
    instance = str(uuidlib.uuid4())
    good = _result("agent-1", instance, node, 0, success=True)
    with pytest.raises(ServiceUnavailable):
        env.agents.report_build_result(CTXT, **good)
    with pytest.raises(ServiceUnavailable):
        env.agents.report_destroy_result(CTXT, **good)
    for method in (env.agents.report_build_result, env.agents.report_destroy_result):
        for bad in (
            {**good, "host": ""},
            {**good, "instance_uuid": "x"},
            {**good, "node_uuid": None},
            {**good, "epoch": -1},
            {**good, "epoch": 2**40},
            {**good, "success": "yes"},
        ):
            with pytest.raises(InvalidInput):
                method(CTXT, **bad)


def test_report_result_bad_fault_or_flags(routed: Routed) -> None:
    [node] = routed.env.inventory.list_nodes(CTXT, limit=1)
    good = _result("agent-1", str(uuidlib.uuid4()), node["uuid"], 1, success=False)
    with pytest.raises(InvalidInput) as err:
        routed.agents.report_build_result(CTXT, **good, fault=["x"])
    assert _fields(err) == ["fault"]
    with pytest.raises(InvalidInput) as err:
        routed.agents.report_build_result(CTXT, **good, node_clean=None)
    assert _fields(err) == ["node_clean"]
    with pytest.raises(InvalidInput) as err:
        routed.agents.report_destroy_result(CTXT, **good, fault=3)
    assert _fields(err) == ["fault"]


def test_report_result_bad_fields_are_named_exactly(routed: Routed) -> None:
    node = str(uuidlib.uuid4())
    for method in (routed.agents.report_build_result, routed.agents.report_destroy_result):
        with pytest.raises(InvalidInput) as err:
            method(CTXT, **_result("agent-1", "x", "y", 1, success=True))
        assert _fields(err) == ["instance_uuid", "node_uuid"]
        with pytest.raises(InvalidInput) as err:
            method(CTXT, **_result("agent-1", node, node, -1, success=True))
        assert _fields(err) == ["epoch"]


def test_destroy_report_for_another_node_changes_nothing(routed: Routed) -> None:
    routed.instances.build_instances(CTXT, request={"flavor": "small"})
    instance, node, owner, epoch = routed.wait_routed(1)
    routed.agents.report_build_result(CTXT, **_result(owner, instance, node, epoch, success=True))
    routed.instances.delete_instance(CTXT, instance=instance)
    _wait_for(lambda: routed.router.destroyed == [instance])
    # Another node, owned by the same agent or another, that does not host it.
    [other] = [
        n for n in routed.env.agents.owned_nodes(CTXT, host="agent-1") if n["node_uuid"] != node
    ][:1]
    report = _result("agent-1", instance, other["node_uuid"], other["epoch"], success=True)
    assert routed.agents.report_destroy_result(CTXT, **report) == {"accepted": False}
    assert routed.show(instance)["vm_state"] == "deleting"
    assert routed.env.node(node)["instance_uuid"] == instance


# -- drain -------------------------------------------------------------------------


def test_drain_agent(env: Env) -> None:
    env.live("agent-1", "agent-2")
    assert env.fleet_ep.drain_agent(CTXT, host="agent-2") == {
        "host": "agent-2",
        "state": "draining",
    }
    assert env.compute.drained == ["agent-2"]
    # Host names are DNS names: the case a client uses does not matter.
    assert env.fleet_ep.drain_agent(CTXT, host="Agent-1")["host"] == "agent-1"
    assert env.compute.drained == ["agent-2", "agent-1"]
    for bad in ("agent-9", "", None, ["agent-1"]):
        with pytest.raises(InvalidInput) as err:
            env.fleet_ep.drain_agent(CTXT, host=bad)
        assert _fields(err) == ["host"]
    env.membership.state = State.SUSPENDED
    with pytest.raises(ServiceUnavailable):
        env.fleet_ep.drain_agent(CTXT, host="agent-1")
    env.membership.state = State.CONNECTED
    with pytest.raises(ServiceUnavailable):
        FleetEndpoint(env.db, env.fleet, "cond-2").drain_agent(CTXT, host="agent-1")
    assert env.compute.drained == ["agent-2", "agent-1"]


# -- node uuids for agents ----------------------------------------------------------


def test_list_node_uuids_groups_since_and_pages(env: Env) -> None:
    out = env.inventory.import_nodes(
        CTXT,
        nodes=[_node_spec(f"a{i}", group="rack1") for i in range(4)]
        + [_node_spec(f"b{i}") for i in range(3)],
    )
    first = env.agents.list_node_uuids(CTXT)
    assert [n["uuid"] for n in first["nodes"]] == sorted(out["uuids"])
    by_uuid = {n["uuid"]: n["group"] for n in first["nodes"]}
    assert sorted(by_uuid.values()) == ["", "", "", "rack1", "rack1", "rack1", "rack1"]

    rack1 = env.agents.list_node_uuids(CTXT, groups=["rack1"])["nodes"]
    assert {n["group"] for n in rack1} == {"rack1"} and len(rack1) == 4
    assert len(env.agents.list_node_uuids(CTXT, groups=["", "rack1"])["nodes"]) == 7
    assert env.agents.list_node_uuids(CTXT, groups=[])["nodes"] == []

    # Only what changed since the previous reply.
    assert env.agents.list_node_uuids(CTXT, since=first["as_of"])["nodes"] == []
    env.inventory.set_node_maintenance(CTXT, node="b1", maintenance=True)
    changed = env.agents.list_node_uuids(CTXT, since=first["as_of"])["nodes"]
    assert [n["uuid"] for n in changed] == [env.node("b1")["uuid"]]

    pages: list[dict[str, Any]] = []
    marker = None
    while page := env.agents.list_node_uuids(CTXT, limit=3, marker=marker)["nodes"]:
        pages.extend(page)
        marker = page[-1]["uuid"]
    assert pages == first["nodes"]


def test_list_node_uuids_says_each_nodes_recorded_power_state(env: Env) -> None:
    """Every read an agent makes (whole, by share, its own nodes outside its
    share) says the recorded power state of each node, in both forms: its
    first state report then sends only what differs (additive: no version)."""
    uuids = add_nodes(env.db, 40, owner="a1")  # recorded "power off"
    on = set(uuids[::3])
    unknown = uuids[1]
    with env.db.transaction() as session:
        session.query(NodeModel).filter(NodeModel.uuid.in_(on)).update({"power_state": "power on"})
        session.query(NodeModel).filter(NodeModel.uuid == unknown).update({"power_state": None})

    def recorded(node: str) -> str | None:
        return None if node == unknown else "power on" if node in on else "power off"

    def says(page: dict[str, Any]) -> dict[str, str | None]:
        return dict(zip(page["uuids"], page["power_states"], strict=True))

    whole = env.agents.list_node_uuids(CTXT, columns=True)
    assert says(whole) == {n: recorded(n) for n in uuids}
    # One object per node (a caller older than 1.8): the same, as a key.
    objects = env.agents.list_node_uuids(CTXT)["nodes"]
    assert {n["uuid"]: n["power_state"] for n in objects} == says(whole)
    ring = {"version": 1, "members": {"a1": 1.0, "a2": 1.0}}
    share = says(env.agents.list_node_uuids(CTXT, ring=ring, member="a1", columns=True))
    assert 0 < len(share) < len(uuids) and share == {n: recorded(n) for n in share}
    # Its own nodes outside that share: filtered, still each with its own state.
    outside = env.agents.list_node_uuids(CTXT, owner="a1", outside=[{"ring": ring}], columns=True)
    assert set(says(outside)) == set(uuids) - set(share)
    assert says(outside) == {n: recorded(n) for n in says(outside)}


@pytest.mark.parametrize(
    ("kwargs", "fields"),
    [
        ({"groups": "rack1"}, ["groups"]),
        ({"groups": ["rack1", 2]}, ["groups"]),
        ({"since": "yesterday"}, ["since"]),
        ({"since": 1700000000}, ["since"]),
        # Well-formed, but not a time UTC can hold (it overflowed, issue 16).
        ({"since": "0001-01-01T00:00:00+14:00"}, ["since"]),
        ({"since": "9999-12-31T23:59:59-14:00"}, ["since"]),
        ({"since": "0900-01-01T00:00:00"}, ["since"]),
        ({"since": "2026-01-01T00:00:00" + " " * 60}, ["since"]),
        ({"limit": 0}, ["limit"]),
        ({"limit": 50_001}, ["limit"]),
        ({"marker": 5}, ["marker"]),
        ({"owner": "a1", "outside": {"ring": {}}}, ["outside"]),
        ({"owner": "a1", "outside": [{"ring": {"version": 1, "members": "a1"}}]}, ["outside.ring"]),
        (
            {"owner": "a1", "outside": [{"ring": {"version": 1, "members": {}}, "groups": "x"}]},
            ["outside.groups"],
        ),
        ({"outside": [{"ring": {"version": 1, "members": {"a1": 1.0}}}]}, ["outside"]),
    ],
)
def test_list_node_uuids_bad_arguments(env: Env, kwargs: dict[str, Any], fields: list[str]) -> None:
    with pytest.raises(InvalidInput) as err:
        env.agents.list_node_uuids(CTXT, **kwargs)
    assert _fields(err) == fields


@pytest.mark.parametrize(
    ("kwargs", "fields"),
    [
        ({"ring": {"version": 1}}, ["ring"]),
        ({"ring": {"version": 1, "members": {"a1": -1.0}}}, ["ring"]),
        ({"groups": "rack1"}, ["groups"]),
        ({"exclude_groups": [3]}, ["exclude_groups"]),
        ({"limit": 0}, ["limit"]),
        ({"host": "", "limit": 50_001}, ["host", "limit"]),
        ({"read": 0}, ["read"]),
        ({"read": True}, ["read"]),
        ({"read": "5000", "limit": 0}, ["limit", "read"]),
        ({"held": 1}, ["held"]),
        ({"held": "yes", "read": 0}, ["read", "held"]),
    ],
)
def test_claim_share_bad_arguments_change_nothing(
    env: Env, kwargs: dict[str, Any], fields: list[str]
) -> None:
    nodes = add_nodes(env.db, 3)
    env.live("a1")
    call = {"host": "a1", "ring": {"version": 1, "members": {"a1": 1.0}}, **kwargs}
    with pytest.raises(InvalidInput) as err:
        env.agents.claim_share(CTXT, **call)
    assert _fields(err) == fields
    assert {o.owner for o in ownership.ownership_of(env.db, nodes).values()} == {None}


def test_claim_share_takes_the_free_nodes_of_a_live_agents_share(env: Env) -> None:
    nodes = add_nodes(env.db, 8)
    ring = {"version": 1, "members": {"a1": 1.0}}
    env.live("a2")
    with pytest.raises(InvalidInput, match="not a live member"):
        env.agents.claim_share(CTXT, host="a1", ring=ring)
    env.live("a1")
    reply = env.agents.claim_share(CTXT, host="a1", ring=ring, limit=5)
    assert len(reply["uuids"]) == 5 and reply["more"] and reply["epochs"] == [1] * 5
    rest = env.agents.claim_share(CTXT, host="a1", ring=ring)
    assert sorted(reply["uuids"] + rest["uuids"]) == sorted(nodes) and not rest["more"]
    assert env.agents.claim_share(CTXT, host="a1", ring=ring)["changed_at"] is None


def test_claim_share_reads_the_share_it_claimed(env: Env) -> None:
    """``read`` (1.26): the reply's ``share`` is the share's first page after
    the claim, its ``next`` a marker of the read by share; nodes it could
    not take are listed with their owners."""
    nodes = add_nodes(env.db, 9)
    [theirs] = add_nodes(env.db, 1, owner="a2", prefix="theirs")
    env.live("a1", "a2")
    ring = {"version": 1, "members": {"a1": 1.0}}  # every node is a1's share
    reply = env.agents.claim_share(CTXT, host="a1", ring=ring, read=4)
    assert sorted(reply["uuids"]) == sorted(nodes) and not reply["more"]
    pages, page = [], reply["share"]
    while True:
        pages.append(page)
        if page["next"] is None:
            break
        page = env.agents.list_node_uuids(
            CTXT, ring=ring, member="a1", marker=page["next"], limit=4, columns=True
        )
    assert [len(p["uuids"]) for p in pages] == [4, 4, 2]
    owners = {u: o for p in pages for u, o in zip(p["uuids"], p["owners"], strict=True)}
    epochs = {u: e for p in pages for u, e in zip(p["uuids"], p["epochs"], strict=True)}
    assert owners == {**dict.fromkeys(nodes, "a1"), theirs: "a2"}
    assert {u: epochs[u] for u in reply["uuids"]} == dict(
        zip(reply["uuids"], reply["epochs"], strict=True)
    )
    assert "share" not in env.agents.claim_share(CTXT, host="a1", ring=ring)


def test_claim_share_says_what_the_agent_held_before_it(env: Env) -> None:
    """``held`` (1.28): every node the agent owned just before the claim,
    pinned or not, in its share or not, as ``owned_nodes`` lists them; with
    the nodes taken, all it owns after the claim."""
    free = add_nodes(env.db, 6)
    kept = add_nodes(env.db, 3, owner="a1", prefix="kept")
    pin(env.db, kept[:1], "a1")
    theirs = add_nodes(env.db, 2, owner="a2", prefix="theirs")
    env.live("a1", "a2")
    ring = {"version": 1, "members": {"a1": 1.0}}  # every node is a1's share
    before = {o["node_uuid"]: o for o in env.agents.owned_nodes(CTXT, "a1")}
    reply = env.agents.claim_share(CTXT, host="a1", ring=ring, held=True)
    assert sorted(reply["uuids"]) == sorted(free)
    assert {o["node_uuid"]: o for o in reply["held"]} == before
    assert set(before) == set(kept) and [o["pinned"] for o in reply["held"]].count(True) == 1
    after = {o["node_uuid"] for o in env.agents.owned_nodes(CTXT, "a1")}
    assert after == set(reply["uuids"]) | set(before) and not after & set(theirs)
    assert "held" not in env.agents.claim_share(CTXT, host="a1", ring=ring)
    again = env.agents.claim_share(CTXT, host="a1", ring=ring, held=True)
    assert again["held"] == env.agents.owned_nodes(CTXT, "a1")


def test_claim_share_says_which_departed_peers_it_still_sees_live(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``previous_ring``: the members gone from the ring that this
    conductor still sees live; it takes nothing then, and reads the group."""
    monkeypatch.setattr(fleet_view, "_READ_SOON_S", 3600.0)
    theirs = add_nodes(env.db, 20, owner="a2", prefix="theirs")
    gone = add_nodes(env.db, 20, owner="a3", prefix="gone")
    env.live("a1", "a2")  # a3 has left; a2 has not, to this conductor
    before = {"version": 1, "members": {"a1": 1.0, "a2": 1.0, "a3": 1.0}}
    ring = {"version": 1, "members": {"a1": 1.0}}  # a1 saw both leave
    reply = env.agents.claim_share(CTXT, host="a1", ring=ring, previous_ring=before)
    assert reply["still_live"] == ["a2"] and env.membership.reads_asked == 1  # read it now
    # Nothing taken meanwhile: the agent asks again in a moment.
    assert (reply["uuids"], reply["more"]) == ([], False)
    owners = {o.owner for o in ownership.ownership_of(env.db, theirs + gone).values()}
    assert owners == {"a2", "a3"}
    env.agents.claim_share(CTXT, host="a1", ring=ring, previous_ring=before)
    assert env.membership.reads_asked == 1  # not at every call: once in a while
    env.live("a1")
    again = env.agents.claim_share(CTXT, host="a1", ring=ring, previous_ring=before)
    assert again["still_live"] == [] and again["uuids"]
    assert set(again["uuids"]) <= set(theirs + gone) and set(again["uuids"]) & set(gone)
    assert "still_live" not in env.agents.claim_share(CTXT, host="a1", ring=ring)


# -- fleet status --------------------------------------------------------------------


def test_fleet_status_without_a_view(env: Env) -> None:
    add_nodes(env.db, 2)
    env.membership.state = State.LOST
    assert env.fleet_ep.fleet_status(CTXT) == {
        "conductor": "cond-1",
        "conductor_api": API_VERSION,
        "membership": "lost",
        "ring_version": None,
        "agents": [],
        "excluded": {},
        "excluded_agents": [],
        "nodes": 2,
        "unowned": 2,
    }


def test_fleet_status_counts(env: Env) -> None:
    env.live("agent-1", "agent-2", "agent-3", "agent-gone")
    a1 = add_nodes(env.db, 3, owner="agent-1", prefix="a1")
    add_nodes(env.db, 1, owner="agent-2", prefix="a2")
    gone = add_nodes(env.db, 2, owner="agent-gone", prefix="g")
    add_nodes(env.db, 2, prefix="free")
    pin(env.db, a1[:2], "agent-1")
    pin(env.db, gone[:1], "agent-gone")
    env.fleet.on_change(view_of("agent-1", "agent-2", "agent-3", excluded={"agent-x": "v2"}))

    status = env.fleet_ep.fleet_status(CTXT)
    assert status["conductor"] == "cond-1"
    assert status["membership"] == "connected"
    assert status["ring_version"] == 1
    assert status["excluded"] == {"agent-x": "v2"}
    assert status["nodes"] == 8
    assert status["unowned"] == 2
    by_host = {a["host"]: a for a in status["agents"]}
    assert [a["host"] for a in status["agents"]] == ["agent-1", "agent-2", "agent-3", "agent-gone"]
    assert {h: (a["state"], a["owned"], a["pinned"]) for h, a in by_host.items()} == {
        "agent-1": ("up", 3, 2),
        "agent-2": ("up", 1, 0),
        "agent-3": ("up", 0, 0),
        "agent-gone": ("gone", 2, 1),
    }
    assert by_host["agent-1"]["weight"] == 1.0
    assert by_host["agent-gone"]["weight"] is None
    assert by_host["agent-gone"]["gone_since"]


def test_fleet_status_lists_owners_never_seen_as_gone(env: Env) -> None:
    # An owner that died while no conductor watched is recorded as gone at
    # the first view.
    add_nodes(env.db, 2, owner="agent-ghost")
    env.live("agent-1")
    status = env.fleet_ep.fleet_status(CTXT)
    assert [(a["host"], a["state"], a["owned"]) for a in status["agents"]] == [
        ("agent-1", "up", 0),
        ("agent-ghost", "gone", 2),
    ]
    # A gone agent that owns nothing any more is not listed.
    with env.db.transaction() as session:
        session.query(NodeModel).update({"owner": None})
    assert [a["host"] for a in env.fleet_ep.fleet_status(CTXT)["agents"]] == ["agent-1"]


# -- agents: claim ---------------------------------------------------------------------


def test_claim_nodes(env: Env) -> None:
    env.live("agent-1", "agent-2", "agent-old")
    free = add_nodes(env.db, 2)
    [theirs] = add_nodes(env.db, 1, owner="agent-2")
    old_free, old_pinned = add_nodes(env.db, 2, owner="agent-old")
    [pinned_instance] = pin(env.db, [old_pinned], "agent-old")
    env.live("agent-1", "agent-2")
    missing = str(uuidlib.uuid4())

    out = env.agents.claim_nodes(
        CTXT, host="agent-1", node_uuids=[*free, theirs, old_free, old_pinned, missing]
    )
    assert {g["node_uuid"]: g["epoch"] for g in out["granted"]} == {
        free[0]: 1,
        free[1]: 1,
        old_free: 1,
    }
    assert all(g["owner"] == "agent-1" for g in out["granted"])
    assert out["refused"] == {theirs: "agent-2", old_pinned: "agent-old"}  # grace not over
    assert out["missing"] == [missing]
    assert out["rehomed"] == []

    # Claiming what one owns already grants it again at the same epoch.
    again = env.agents.claim_nodes(CTXT, host="agent-1", node_uuids=[free[0], free[0].upper()])
    assert [(g["node_uuid"], g["epoch"]) for g in again["granted"]] == [(free[0], 1)]

    # After the grace the pinned node is re-homed with its instance, to its
    # ring owner among the live agents only (not to whoever asks first).
    env.grace[0] = 0.0
    owner = Ring(["agent-1", "agent-2"]).owner(old_pinned)
    other = ({"agent-1", "agent-2"} - {owner}).pop()
    out = env.agents.claim_nodes(CTXT, host=other, node_uuids=[old_pinned])
    assert out["rehomed"] == [] and out["refused"] == {old_pinned: "agent-old"}
    out = env.agents.claim_nodes(CTXT, host=owner, node_uuids=[old_pinned])
    assert out["rehomed"] == [old_pinned]
    assert [(g["node_uuid"], g["pinned"]) for g in out["granted"]] == [(old_pinned, True)]
    assert env.instances.show_instance(CTXT, instance=pinned_instance)["host"] == owner


def test_claim_refuses_hosts_that_are_not_live(env: Env) -> None:
    env.live("agent-1")
    nodes = add_nodes(env.db, 2)
    before = [env.node(n) for n in nodes]
    with pytest.raises(InvalidInput) as err:
        env.agents.claim_nodes(CTXT, host="agent-2", node_uuids=nodes)
    assert _fields(err) == ["host"]
    with pytest.raises(InvalidInput) as err:
        env.agents.claim_nodes(CTXT, host="agent-1", node_uuids=[nodes[0], "x", 5])
    assert _fields(err) == ["node_uuids[1]", "node_uuids[2]"]
    with pytest.raises(InvalidInput) as err:
        env.agents.claim_nodes(CTXT, host="agent-1", node_uuids=nodes[0])
    assert _fields(err) == ["node_uuids"]
    assert [env.node(n) for n in nodes] == before


def test_claim_needs_a_connected_membership(env: Env) -> None:
    nodes = add_nodes(env.db, 1)
    # No view at all yet.
    with pytest.raises(ServiceUnavailable):
        env.agents.claim_nodes(CTXT, host="agent-1", node_uuids=nodes)
    env.live("agent-1")
    env.membership.state = State.SUSPENDED
    with pytest.raises(ServiceUnavailable) as err:
        env.agents.claim_nodes(CTXT, host="agent-1", node_uuids=nodes)
    assert "suspended" in err.value.reason
    assert env.node(nodes[0])["owner"] is None
    env.membership.state = State.CONNECTED
    assert _claim(env, "agent-1", nodes) == {nodes[0]: 1}


# -- agents: release, transfer, owned ------------------------------------------------------


def test_release_nodes(env: Env) -> None:
    env.live("agent-1", "agent-2")
    a, b, c = add_nodes(env.db, 3)
    epochs = _claim(env, "agent-1", [a, b, c])
    pin(env.db, [c], "agent-1")
    missing = str(uuidlib.uuid4())
    out = env.agents.release_nodes(
        CTXT, host="agent-1", claims={a: epochs[a], b: epochs[b] + 5, c: epochs[c], missing: 1}
    )
    assert out["done"] == {a: 2}
    assert set(out["refused"]) == {b, c, missing}
    assert out["refused"][b] == {"node_uuid": b, "owner": "agent-1", "epoch": 1, "pinned": False}
    assert out["refused"][c]["pinned"] is True  # a pinned node is never just released
    assert out["refused"][missing] is None
    assert (env.node(a)["owner"], env.node(a)["owner_epoch"]) == (None, 2)
    assert env.node(b)["owner"] == "agent-1"
    # Another agent cannot release agent-1's node, whatever the epoch.
    out = env.agents.release_nodes(CTXT, host="agent-2", claims={b: 1})
    assert out["done"] == {} and out["refused"][b]["owner"] == "agent-1"


@pytest.mark.parametrize(
    ("claims", "field_prefix"),
    [
        ("all", "claims"),
        ([1, 2], "claims"),
        ({"not-a-uuid": 1}, "claims.not-a-uuid"),
        ({"UUID": -1}, "claims."),
        ({"UUID": True}, "claims."),
        ({"UUID": "1"}, "claims."),
        ({"UUID": 2**40}, "claims."),
    ],
)
def test_release_bad_claims(env: Env, claims: Any, field_prefix: str) -> None:
    env.live("agent-1")
    [node] = add_nodes(env.db, 1)
    _claim(env, "agent-1", [node])
    if isinstance(claims, dict):
        claims = {(node if k == "UUID" else k): v for k, v in claims.items()}
    before = env.node(node)
    with pytest.raises(InvalidInput) as err:
        env.agents.release_nodes(CTXT, host="agent-1", claims=claims)
    [only] = _fields(err)
    assert only.startswith(field_prefix)
    assert env.node(node) == before


def test_transfer_nodes(env: Env) -> None:
    env.live("agent-1", "agent-2")
    a, b = add_nodes(env.db, 2)
    epochs = _claim(env, "agent-1", [a, b])
    [instance] = pin(env.db, [b], "agent-1")
    out = env.agents.transfer_nodes(
        CTXT,
        host="agent-1",
        transfers=[
            {"node_uuid": a, "epoch": epochs[a], "new_owner": "agent-2"},
            {"node_uuid": b, "epoch": epochs[b], "new_owner": "agent-2"},
        ],
    )
    assert out == {"done": {a: 2, b: 2}, "refused": {}}
    assert env.node(b)["owner"] == "agent-2"
    assert env.instances.show_instance(CTXT, instance=instance)["host"] == "agent-2"
    # The old epoch is stale now.
    out = env.agents.transfer_nodes(
        CTXT, host="agent-1", transfers=[{"node_uuid": a, "epoch": 1, "new_owner": "agent-1"}]
    )
    assert out["done"] == {}
    assert out["refused"][a] == {"node_uuid": a, "owner": "agent-2", "epoch": 2, "pinned": False}


def test_transfer_to_a_host_that_is_not_live_changes_nothing(env: Env) -> None:
    env.live("agent-1", "agent-2")
    a, b = add_nodes(env.db, 2)
    epochs = _claim(env, "agent-1", [a, b])
    before = [env.node(a), env.node(b)]
    with pytest.raises(InvalidInput) as err:
        env.agents.transfer_nodes(
            CTXT,
            host="agent-1",
            transfers=[
                {"node_uuid": a, "epoch": epochs[a], "new_owner": "agent-2"},
                {"node_uuid": b, "epoch": epochs[b], "new_owner": "agent-9"},
            ],
        )
    assert _fields(err) == ["transfers[1].new_owner"]
    assert [env.node(a), env.node(b)] == before


def test_transfer_bad_entries_are_all_named(env: Env) -> None:
    env.live("agent-1", "agent-2")
    [node] = add_nodes(env.db, 1)
    _claim(env, "agent-1", [node])
    with pytest.raises(InvalidInput) as err:
        env.agents.transfer_nodes(
            CTXT,
            host="agent-1",
            transfers=[
                {"node_uuid": node, "epoch": 1},
                "node",
                {"node_uuid": "x", "epoch": 1, "new_owner": "agent-2"},
                {"node_uuid": node, "epoch": 1, "new_owner": ""},
                {"node_uuid": node, "epoch": -1, "new_owner": "agent-2"},
            ],
        )
    fields = _fields(err)
    assert len(fields) == 5
    assert fields[:2] == ["transfers[0]", "transfers[1]"]
    assert fields[2].startswith("transfers[2].node_uuid")
    assert fields[3] == "transfers[3].new_owner"
    assert fields[4].startswith("transfers[4].epoch")
    with pytest.raises(InvalidInput) as err:
        env.agents.transfer_nodes(CTXT, host="agent-1", transfers={"node_uuid": node})
    assert _fields(err) == ["transfers"]
    assert env.node(node)["owner"] == "agent-1"


def test_transfer_bad_fields_are_named_exactly(env: Env) -> None:
    env.live("agent-1", "agent-2")
    [node] = add_nodes(env.db, 1)
    with pytest.raises(InvalidInput) as err:
        env.agents.transfer_nodes(
            CTXT,
            host="agent-1",
            transfers=[
                {"node_uuid": "x", "epoch": 1, "new_owner": "agent-2"},
                {"node_uuid": node, "epoch": -1, "new_owner": "agent-2"},
            ],
        )
    assert _fields(err) == ["transfers[0].node_uuid", "transfers[1].epoch"]


def test_owned_nodes(env: Env) -> None:
    env.live("agent-1", "agent-2")
    mine = sorted(add_nodes(env.db, 3))
    _claim(env, "agent-1", mine)
    _claim(env, "agent-2", add_nodes(env.db, 1))
    pin(env.db, mine[1:2], "agent-1")
    assert env.agents.owned_nodes(CTXT, host="agent-1") == [
        {"node_uuid": u, "owner": "agent-1", "epoch": 1, "pinned": u == mine[1]} for u in mine
    ]
    assert env.agents.owned_nodes(CTXT, host="agent-3") == []
    with pytest.raises(InvalidInput) as err:
        env.agents.owned_nodes(CTXT, host=None)
    assert _fields(err) == ["host"]


# -- agents: node state reports ----------------------------------------------------------


def _moment(value: str) -> datetime.datetime:
    """An ISO 8601 time as the API says it (``Z`` or not), naive UTC."""
    moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return (
        moment.replace(tzinfo=None)
        if moment.tzinfo is None
        else moment.astimezone(datetime.UTC).replace(tzinfo=None)
    )


def test_report_node_states_is_fenced_by_epoch(env: Env) -> None:
    env.live("agent-1", "agent-2")
    a, b, c = add_nodes(env.db, 3)
    epochs = _claim(env, "agent-1", [a, b])
    _claim(env, "agent-2", [c])
    missing = str(uuidlib.uuid4())
    out = env.agents.report_node_states(
        CTXT,
        host="agent-1",
        states=[
            {"node_uuid": a, "epoch": epochs[a], "power_state": "power on"},
            {"node_uuid": b, "epoch": epochs[b] - 1, "power_state": "power on"},
            {"node_uuid": c, "epoch": 1, "provision_state": "error"},
            {"node_uuid": missing, "epoch": 0, "power_state": None},
        ],
    )
    # Of the stale, the node that does not exist is gone (the agent forgets it).
    written = out.pop("changed_at")
    assert out == {"accepted": 1, "stale": [b, c, missing], "gone": [missing]}
    # The change time written is the row's (the agent's change reads leave it out).
    assert _moment(written) == _moment(env.node(a)["updated_at"])
    assert env.node(a)["power_state"] == "power on"
    assert env.node(b)["power_state"] == "power off"  # stale: not applied
    assert env.node(c)["provision_state"] == "available"  # not agent-1's

    out = env.agents.report_node_states(
        CTXT,
        host="agent-1",
        states=[{"node_uuid": b, "epoch": epochs[b], "provision_state": "manageable"}],
    )
    assert _moment(out.pop("changed_at")) == _moment(env.node(b)["updated_at"])
    assert out == {"accepted": 1, "stale": [], "gone": []}
    # A report of what is stored writes nothing, and says no change time.
    again = env.agents.report_node_states(
        CTXT,
        host="agent-1",
        states=[{"node_uuid": b, "epoch": epochs[b], "provision_state": "manageable"}],
    )
    assert again == {"accepted": 1, "stale": [], "gone": [], "changed_at": None}
    node = env.node(b)
    assert (node["provision_state"], node["power_state"]) == ("manageable", "power off")


def test_report_node_states_of_many_nodes_touches_only_the_changed(env: Env) -> None:
    env.live("agent-1")
    uuids = add_nodes(env.db, 1200)  # more than one read chunk
    epochs = _claim(env, "agent-1", uuids)
    before = {u: env.node(u)["updated_at"] for u in uuids}
    time.sleep(0.01)  # (a changed row gets a later timestamp)
    changed = set(uuids[::250])
    out = env.agents.report_node_states(
        CTXT,
        host="agent-1",
        states=[
            {
                "node_uuid": u,
                "epoch": epochs[u],
                "power_state": "power on" if u in changed else "power off",
                "provision_state": "available",
            }
            for u in uuids
        ],
    )
    written = _moment(out.pop("changed_at"))
    assert out == {"accepted": 1200, "stale": [], "gone": []}
    for u in uuids:
        node = env.node(u)
        assert node["power_state"] == ("power on" if u in changed else "power off")
        assert (node["updated_at"] != before[u]) == (u in changed)
        assert (_moment(node["updated_at"]) == written) == (u in changed)


def test_report_node_states_records_a_power_state_unknown_until_then(env: Env) -> None:
    """A node imported without a power state (NULL) gets the reported one; in one
    report, nodes changing their power state, their provision state or both."""
    env.live("agent-1")
    unknown, power, provision, both = add_nodes(env.db, 4)
    epochs = _claim(env, "agent-1", [unknown, power, provision, both])
    with env.db.transaction() as session:
        session.query(NodeModel).filter(NodeModel.uuid == unknown).update({"power_state": None})
    states = {
        unknown: ("power off", None),
        power: ("power on", "available"),
        provision: ("power off", "manageable"),
        both: ("power on", "manageable"),
    }
    out = env.agents.report_node_states(
        CTXT,
        host="agent-1",
        states=[
            {"node_uuid": u, "epoch": epochs[u], "power_state": p, "provision_state": s}
            for u, (p, s) in states.items()
        ],
    )
    assert out.pop("changed_at") is not None
    assert out == {"accepted": 4, "stale": [], "gone": []}
    for u, (p, s) in states.items():
        node = env.node(u)
        assert (node["power_state"], node["provision_state"]) == (p, s or "available")


@pytest.mark.parametrize(
    ("states", "fields"),
    [
        ("power on", ["states"]),
        (["x"], ["states[0]"]),
        ([{"node_uuid": "x", "epoch": 1}], ["states[0].node_uuid"]),
        ([{"node_uuid": "NODE"}], ["states[0].epoch"]),
        ([{"node_uuid": "NODE", "epoch": 1, "power_state": "on"}], ["states[0].power_state"]),
        ([{"node_uuid": "NODE", "epoch": 1, "power_state": []}], ["states[0].power_state"]),
        (
            [{"node_uuid": "NODE", "epoch": 1, "provision_state": {"a": 1}}],
            ["states[0].provision_state"],
        ),
        ([{"node_uuid": "NODE", "epoch": 1, "colour": "red"}], ["states[0].colour"]),
        ([{"node_uuid": "NODE", "epoch": 2**63}], ["states[0].epoch"]),
    ],
)
def test_report_node_states_bad_input_changes_nothing(
    env: Env, states: Any, fields: list[str]
) -> None:
    env.live("agent-1")
    [node] = add_nodes(env.db, 1)
    _claim(env, "agent-1", [node])
    if isinstance(states, list):
        states = [
            {k: (node if v == "NODE" else v) for k, v in s.items()} if isinstance(s, dict) else s
            for s in states
        ]
    # A good report in the same batch is not applied either.
    good = {"node_uuid": node, "epoch": 1, "power_state": "power on"}
    before = env.node(node)
    with pytest.raises(InvalidInput) as err:
        env.agents.report_node_states(
            CTXT, host="agent-1", states=[good, *states] if isinstance(states, list) else states
        )
    expected = (
        [f.replace("states[0]", "states[1]") for f in fields]
        if isinstance(states, list)
        else fields
    )
    assert _fields(err) == expected
    assert env.node(node) == before


# -- known lookup ambiguities (see the report) --------------------------------------------


def test_lookup_by_names_shaped_like_uuids_and_by_bare_hex_uuids(env: Env) -> None:
    name = "rack-1-node-2-" + "a" * 22  # 36 characters, 4 dashes, not a uuid
    assert (len(name), name.count("-")) == (36, 4)
    created = env.inventory.create_node(CTXT, node=_node_spec(name))
    assert env.node(name) == created
    assert env.node(created["uuid"].replace("-", "")) == created  # 32 hex digits
    assert env.inventory.node_owner(CTXT, node=name)["node_uuid"] == created["uuid"]


def test_maintenance_by_uuid_touches_one_node(env: Env) -> None:
    first = env.inventory.create_node(CTXT, node=_node_spec("first"))
    try:
        env.inventory.create_node(CTXT, node=_node_spec(first["uuid"]))
    except (InvalidInput, Conflict):
        return  # refusing such a name is a fix too
    env.inventory.set_node_maintenance(CTXT, node=first["uuid"], maintenance=True)
    assert [n["maintenance"] for n in env.inventory.list_nodes(CTXT)].count(True) == 1


# -- 1.1: fleet details, ring status, fleet check, set_node ------------------------------


def test_fleet_status_1_1_details(env: Env) -> None:
    members = {
        "agent-1": Member(member_id="agent-1", ring_version=1, weight=1.0),
        "agent-2": Member(
            member_id="agent-2", ring_version=1, weight=2.0, capabilities={"groups": ["r2"]}
        ),
    }
    env.fleet.on_change(
        MembershipView(members=members, excluded={"agent-x": "ring version 2"}, ring_version=1)
    )
    owned = add_nodes(env.db, 3, owner="agent-1")
    add_nodes(env.db, 1, owner="agent-x", prefix="x")
    [instance] = pin(env.db, owned[:1], "agent-1")
    with env.db.transaction() as session:
        session.query(InstanceModel).filter(InstanceModel.uuid == instance).update(
            {"vm_state": "building"}
        )
    status = env.fleet_ep.fleet_status(CTXT)
    by_host = {a["host"]: a for a in status["agents"]}
    assert by_host["agent-1"]["in_flight"] == 1 and by_host["agent-2"]["in_flight"] == 0
    assert by_host["agent-1"]["groups"] == [] and by_host["agent-2"]["groups"] == ["r2"]
    assert by_host["agent-2"]["ring_version"] == 1 and by_host["agent-2"]["last_seen"]
    [excluded] = status["excluded_agents"]
    assert excluded["host"] == "agent-x" and excluded["state"] == "excluded"
    assert excluded["owned"] == 1 and excluded["reason"] == "ring version 2"


def test_fleet_status_1_16_versions(env: Env) -> None:
    """The conductor's API and each member's announced agent API (none from
    an agent of an older release, nor a malformed one)."""
    members = {
        "agent-new": Member(
            member_id="agent-new", ring_version=1, weight=1.0, capabilities={"rpc_api": "1.4"}
        ),
        "agent-old": Member(member_id="agent-old", ring_version=1, weight=1.0),
        "agent-odd": Member(
            member_id="agent-odd", ring_version=1, weight=1.0, capabilities={"rpc_api": "v1"}
        ),
    }
    env.fleet.on_change(MembershipView(members=members, excluded={}, ring_version=1))
    status = env.fleet_ep.fleet_status(CTXT)
    assert status["conductor_api"] == API_VERSION
    assert {a["host"]: a["rpc_api"] for a in status["agents"]} == {
        "agent-new": "1.4",
        "agent-odd": None,
        "agent-old": None,
    }


def test_ring_status_counts_per_group_against_weights(env: Env) -> None:
    members = {
        "agent-1": Member(member_id="agent-1", ring_version=1, weight=1.0),
        "agent-2": Member(member_id="agent-2", ring_version=1, weight=3.0),
    }
    env.fleet.on_change(MembershipView(members=members, excluded={}, ring_version=1))
    add_nodes(env.db, 6, owner="agent-1", prefix="a")
    add_nodes(env.db, 2, owner="agent-2", prefix="b")
    add_nodes(env.db, 1, owner="agent-dead", prefix="c")
    add_nodes(env.db, 3, prefix="d")
    status = env.fleet_ep.ring_status(CTXT)
    [group] = status["groups"]
    assert group["group"] == "" and group["nodes"] == 12 and group["unowned"] == 3
    by_host = {a["host"]: a for a in group["agents"]}
    assert by_host["agent-1"] == {
        "host": "agent-1",
        "member": True,
        "weight": 1.0,
        "nodes": 6,
        "expected": 3.0,
    }
    assert by_host["agent-2"]["expected"] == 9.0
    assert by_host["agent-dead"] == {
        "host": "agent-dead",
        "member": False,
        "weight": None,
        "nodes": 1,
        "expected": 0.0,
    }


def test_fleet_check_finds_each_kind_of_problem(env: Env) -> None:
    env.fleet.on_change(view_of("agent-1", excluded={"agent-x": "ring version 2"}))
    good = add_nodes(env.db, 2, owner="agent-1", prefix="good")
    pin(env.db, good[:1], "agent-1")
    dead = add_nodes(env.db, 2, owner="agent-dead", prefix="dead")
    pin(env.db, dead[:1], "agent-dead")
    [free] = add_nodes(env.db, 1, prefix="free")
    # An instance whose node hosts nothing; a host that disagrees with the owner.
    [twin] = add_nodes(env.db, 1, owner="agent-1", prefix="twin")
    [moved] = add_nodes(env.db, 1, owner="agent-1", prefix="moved")
    [half] = pin(env.db, [twin], "agent-1")
    [wrong_host] = pin(env.db, [moved], "agent-2")
    with env.db.transaction() as session:
        session.query(NodeModel).filter(NodeModel.uuid == twin).update({"instance_uuid": None})
    report = env.fleet_ep.fleet_check(CTXT)
    assert report["ok"] is False
    kinds = [(p["kind"], p.get("host"), p.get("node_uuid")) for p in report["problems"]]
    assert ("orphaned", "agent-dead", None) in kinds
    assert ("excluded", "agent-x", None) in kinds
    unowned = next(p for p in report["problems"] if p["kind"] == "orphaned" and not p["host"])
    assert unowned["nodes"] == 1 and unowned["node_uuids"] == [free]
    doubles = {
        p["node_uuid"]: p["message"] for p in report["problems"] if p["kind"] == "double-claimed"
    }
    assert doubles[twin] == (
        f"node {twin}, instance {half}: instance is placed on node {twin}, which hosts nothing"
    )
    assert "instance host is agent-2, node owner is agent-1" in doubles[moved]
    assert wrong_host in doubles[moved]
    assert len(doubles) == 2

    env.membership.state = State.SUSPENDED
    [problem] = env.fleet_ep.fleet_check(CTXT)["problems"][:1]
    assert problem["kind"] == "membership" and "suspended" in problem["message"]


def test_problem_counts_count_every_kind_in_full(env: Env) -> None:
    """The conductor's ringfleet_fleet_problems: the check's kinds, counted."""
    env.fleet.on_change(view_of("agent-1", excluded={"agent-x": "ring version 2"}))
    pin(env.db, add_nodes(env.db, 2, owner="agent-1", prefix="good"), "agent-1")
    pin(env.db, add_nodes(env.db, 3, owner="agent-dead", prefix="dead")[:1], "agent-dead")
    add_nodes(env.db, 2, prefix="free")
    [node] = add_nodes(env.db, 1, owner="agent-1", prefix="slow")
    _in_flight(env, node, "building", "spawning", age=700, owner="agent-1")
    counts = problem_counts(env.db, env.fleet, 600.0, conductors=frozenset({"cond-1"}))
    assert counts == {
        "orphaned": 3 + 2,  # the dead owner's nodes, pinned or not, and the free ones
        "excluded": 1,
        "agent-unreachable": 0,
        "backend-unreachable": 0,
        "double-claimed": 0,
        "stuck-build": 1,
        "stuck-delete": 0,
        "stuck-action": 0,
        "state-mismatch": 0,
        "backend-mismatch": 0,
        "power-mismatch": 0,
        # The build was stored by no conductor: nobody carries it.
        "conductor-gone": 1,
    }
    assert set(counts) == set(PROBLEM_KINDS)
    # Who is alive cannot be told: orphaned and excluded are left out, not 0.
    env.membership.state = State.SUSPENDED
    assert set(problem_counts(env.db, env.fleet, 600.0)) == set(PROBLEM_KINDS) - {
        "orphaned",
        "excluded",
        "agent-unreachable",
        "backend-unreachable",
        "conductor-gone",  # no live conductors given: cannot tell
    }


def test_an_agent_no_call_reaches_is_reported_by_check_status_and_counts(env: Env) -> None:
    """An agent that says it cannot serve (capability serving: false, while
    its peers get the time to say theirs) is AGENT-UNREACHABLE."""
    cut = Member(member_id="agent-2", ring_version=1, weight=1.0, capabilities={"serving": False})
    fine = Member(member_id="agent-1", ring_version=1, weight=1.0, capabilities={"serving": True})
    env.fleet.on_change(
        MembershipView(members={"agent-1": fine, "agent-2": cut}, excluded={}, ring_version=1)
    )
    report = env.fleet_ep.fleet_check(CTXT)
    [problem] = [p for p in report["problems"] if p["kind"] == "agent-unreachable"]
    assert problem["host"] == "agent-2" and "broker" in problem["message"]
    rows = {a["host"]: a for a in env.fleet_ep.fleet_status(CTXT)["agents"]}
    assert (rows["agent-1"]["serving"], rows["agent-2"]["serving"]) == (True, False)
    assert problem_counts(env.db, env.fleet, 600.0)["agent-unreachable"] == 1
    env.live("agent-1", "agent-2")  # says nothing: serving, as before
    assert not [
        p for p in env.fleet_ep.fleet_check(CTXT)["problems"] if p["kind"] == "agent-unreachable"
    ]


def test_an_agent_that_cannot_reach_its_back_end_is_reported_with_its_reason(env: Env) -> None:
    """Capability backend (what the agent's driver says) is BACKEND-UNREACHABLE,
    in fleet check, fleet status and the problem counts; None is fine."""
    why = "Ironic at http://ironic:6385 unreachable: Request timed out"
    cut = Member(member_id="agent-2", ring_version=1, weight=1.0, capabilities={"backend": why})
    fine = Member(member_id="agent-1", ring_version=1, weight=1.0, capabilities={"backend": None})
    env.fleet.on_change(
        MembershipView(members={"agent-1": fine, "agent-2": cut}, excluded={}, ring_version=1)
    )
    [problem] = [
        p for p in env.fleet_ep.fleet_check(CTXT)["problems"] if p["kind"] == "backend-unreachable"
    ]
    assert problem["host"] == "agent-2" and why in problem["message"]
    rows = {a["host"]: a for a in env.fleet_ep.fleet_status(CTXT)["agents"]}
    assert (rows["agent-1"]["backend_problem"], rows["agent-2"]["backend_problem"]) == (None, why)
    assert problem_counts(env.db, env.fleet, 600.0)["backend-unreachable"] == 1


def test_fleet_check_ok(env: Env) -> None:
    env.live("agent-1")
    pin(env.db, add_nodes(env.db, 2, owner="agent-1"), "agent-1")
    assert env.fleet_ep.fleet_check(CTXT) == {
        "conductor": "cond-1",
        "membership": "connected",
        "ring_version": 1,
        "stuck_after": 600.0,
        "ok": True,
        "problems": [],
    }


# -- 1.9: fleet check, stuck work and node state mismatches ----------------------------


def _in_flight(
    env: Env, node: str, vm_state: str, task_state: str | None, *, age: float, owner: str
) -> str:
    """An instance on ``node`` in ``vm_state``, its record last changed ``age`` s ago."""
    [instance] = pin(env.db, [node], owner)
    provision = "deploying" if vm_state == "building" else "active"
    with env.db.transaction() as session:
        session.query(InstanceModel).filter(InstanceModel.uuid == instance).update(
            {
                "vm_state": vm_state,
                "task_state": task_state,
                "updated_at": utcnow() - datetime.timedelta(seconds=age),
            }
        )
        session.query(NodeModel).filter(NodeModel.uuid == node).update(
            {"provision_state": provision}
        )
    return instance


def test_report_progress_restarts_the_clock_of_the_owners_builds_only(env: Env) -> None:
    """Since 1.10: the back end moving a build on is a heartbeat, from the
    node's owner at its epoch only; fleet check and the sweeper then count
    from it."""
    env.live("agent-1", "agent-2")
    moving, quiet, elsewhere = add_nodes(env.db, 3, owner="agent-1")
    epochs = {n: env.node(n)["owner_epoch"] for n in (moving, quiet, elsewhere)}
    for node in (moving, quiet, elsewhere):
        _in_flight(env, node, "building", "spawning", age=700, owner="agent-1")
    out = env.agents.report_progress(
        CTXT,
        host="agent-1",
        nodes={moving: epochs[moving], quiet: epochs[quiet] + 1},  # a stale epoch
    )
    assert out == {"touched": 1}
    out = env.agents.report_progress(CTXT, host="agent-2", nodes={elsewhere: epochs[elsewhere]})
    assert out == {"touched": 0}  # not agent-2's node
    stuck = {p["node_uuid"] for p in _problems(env, "stuck-build")}
    assert stuck == {quiet, elsewhere}
    with pytest.raises(InvalidInput) as err:
        env.agents.report_progress(CTXT, host="agent-1", nodes={"not-a-uuid": 1})
    assert _fields(err) == ["nodes.not-a-uuid"]


def _problems(env: Env, kind: str) -> list[dict[str, Any]]:
    return [p for p in env.fleet_ep.fleet_check(CTXT)["problems"] if p["kind"] == kind]


def test_fleet_check_reports_a_build_unchanged_past_stuck_after_and_fails(env: Env) -> None:
    env.live("agent-1")
    stale_node, fresh_node = add_nodes(env.db, 2, owner="agent-1")
    stale = _in_flight(env, stale_node, "building", "spawning", age=700, owner="agent-1")
    _in_flight(env, fresh_node, "building", "spawning", age=5, owner="agent-1")

    report = env.fleet_ep.fleet_check(CTXT)

    assert report["ok"] is False and report["stuck_after"] == 600.0
    [problem] = report["problems"]
    assert problem["kind"] == "stuck-build"
    assert problem["instance_uuid"] == stale and problem["node_uuid"] == stale_node
    assert problem["owner"] == "agent-1"
    assert (problem["vm_state"], problem["task_state"]) == ("building", "spawning")
    assert 700 <= problem["idle_seconds"] < 760
    assert problem["message"].startswith(
        f"instance {stale} building/spawning on node {stale_node} (owner agent-1): unchanged for 70"
    )


def test_fleet_check_of_fresh_work_is_ok(env: Env) -> None:
    env.live("agent-1")
    building, deleting = add_nodes(env.db, 2, owner="agent-1")
    _in_flight(env, building, "building", "spawning", age=590, owner="agent-1")
    _in_flight(env, deleting, "deleting", "deleting", age=590, owner="agent-1")
    report = env.fleet_ep.fleet_check(CTXT)
    assert report["ok"] is True and report["problems"] == []


def test_fleet_check_reports_a_delete_unchanged_past_stuck_after(env: Env) -> None:
    env.live("agent-1")
    stale_node, fresh_node = add_nodes(env.db, 2, owner="agent-1")
    stale = _in_flight(env, stale_node, "deleting", "deleting", age=3600, owner="agent-1")
    _in_flight(env, fresh_node, "deleting", "deleting", age=1, owner="agent-1")

    report = env.fleet_ep.fleet_check(CTXT)

    assert report["ok"] is False
    [problem] = report["problems"]
    assert problem["kind"] == "stuck-delete"
    assert problem["instance_uuid"] == stale and problem["node_uuid"] == stale_node
    assert problem["owner"] == "agent-1" and problem["vm_state"] == "deleting"
    assert "unchanged for 360" in problem["message"]


def test_fleet_check_stuck_bound_is_read_at_each_check(env: Env) -> None:
    """``[conductor] stuck_after`` is mutable: the endpoint reads it every time."""
    env.live("agent-1")
    [node] = add_nodes(env.db, 1, owner="agent-1")
    _in_flight(env, node, "building", "spawning", age=700, owner="agent-1")
    bound = [600.0]
    endpoint = FleetEndpoint(env.db, env.fleet, "cond-1", stuck_after=lambda: bound[0])
    assert [p["kind"] for p in endpoint.fleet_check(CTXT)["problems"]] == ["stuck-build"]
    bound[0] = 900.0
    report = endpoint.fleet_check(CTXT)
    assert report["ok"] is True and report["stuck_after"] == 900.0


def test_fleet_check_stuck_build_without_a_node_and_the_cap(env: Env) -> None:
    env.live("agent-1")
    nodes = add_nodes(env.db, 52, owner="agent-1")
    stuck = [
        _in_flight(env, node, "building", "spawning", age=1000 + i, owner="agent-1")
        for i, node in enumerate(nodes)
    ]
    # Waiting for a node: the record says so, no owner to name.
    with env.db.transaction() as session:
        session.query(NodeModel).filter(NodeModel.uuid == nodes[-1]).update(
            {"instance_uuid": None, "provision_state": "available"}
        )
        session.query(InstanceModel).filter(InstanceModel.uuid == stuck[-1]).update(
            {
                "node_uuid": None,
                "host": None,
                "task_state": "scheduling",
                # (set, or the update stamps it now)
                "updated_at": utcnow() - datetime.timedelta(seconds=1051),
            }
        )

    problems = _problems(env, "stuck-build")

    assert len(problems) == 51
    # Longest unchanged first: the one without a node was aged most.
    assert problems[0]["instance_uuid"] == stuck[-1] and problems[0]["node_uuid"] is None
    assert problems[0]["message"].endswith(
        "building/scheduling on no node yet: unchanged for 1051 s"
    )
    assert problems[-1] == {"kind": "stuck-build", "message": "... and 2 more stuck builds"}


def test_fleet_check_reports_an_active_instance_on_a_node_reported_in_error(env: Env) -> None:
    """The node's record is all the check reads: here the owner's state report."""
    env.live("agent-1")
    good, bad = add_nodes(env.db, 2, owner="agent-1")
    epochs = _claim(env, "agent-1", [good, bad])
    pin(env.db, [good], "agent-1")
    [instance] = pin(env.db, [bad], "agent-1")
    assert env.fleet_ep.fleet_check(CTXT)["ok"] is True
    reported = env.agents.report_node_states(
        CTXT,
        host="agent-1",
        states=[
            {
                "node_uuid": bad,
                "epoch": epochs[bad],
                "power_state": None,
                "provision_state": "error",
            }
        ],
    )
    assert reported.pop("changed_at") is not None
    assert reported == {"accepted": 1, "stale": [], "gone": []}

    report = env.fleet_ep.fleet_check(CTXT)

    assert report["ok"] is False
    [problem] = report["problems"]
    assert problem["kind"] == "state-mismatch"
    assert (problem["node_uuid"], problem["instance_uuid"]) == (bad, instance)
    assert (problem["provision_state"], problem["vm_state"]) == ("error", "active")
    assert problem["message"] == (
        f"node {bad} (owner agent-1): instance {instance} is active, its node is error"
    )


def test_fleet_check_reports_busy_nodes_hosting_nothing_and_retired_nodes_hosting_one(
    env: Env,
) -> None:
    env.live("agent-1")
    deploying, active, retired, idle = add_nodes(env.db, 4, owner="agent-1")
    [instance] = pin(env.db, [retired], "agent-1")
    with env.db.transaction() as session:
        for node, state in ((deploying, "deploying"), (active, "active"), (idle, "error")):
            session.query(NodeModel).filter(NodeModel.uuid == node).update(
                {"provision_state": state}
            )
        session.query(NodeModel).filter(NodeModel.uuid == retired).update(
            {"maintenance": True, "maintenance_reason": REMOVED_REASON}
        )

    problems = {p["node_uuid"]: p for p in _problems(env, "state-mismatch")}

    assert set(problems) == {deploying, active, retired}  # an idle node in error is no mismatch
    assert problems[deploying]["reason"] == "node is deploying but hosts no instance"
    assert problems[active]["instance_uuid"] is None
    assert problems[retired]["message"] == (
        f"node {retired} (owner agent-1): node is retired (ironic: node removed from Ironic) "
        f"but hosts instance {instance} (active)"
    )


def test_stuck_work_counts_all_and_lists_the_oldest(env: Env) -> None:
    nodes = add_nodes(env.db, 4, owner="agent-1")
    ages = (900, 1200, 700, 10)
    uuids = [
        _in_flight(env, node, "deleting", "deleting", age=age, owner="agent-1")
        for node, age in zip(nodes, ages, strict=True)
    ]
    found = fleet_report.stuck_work(env.db, 600.0, sample=2)
    assert found["building"] == (0, [])
    total, listed = found["deleting"]
    assert total == 3
    assert [item.instance_uuid for item in listed] == [uuids[1], uuids[0]]


def test_set_node_merges_and_refuses_whole(env: Env) -> None:
    created = env.inventory.create_node(
        CTXT,
        node={
            "name": "n1",
            "resource_class": "baremetal",
            "traits": ["A"],
            "properties": {"x": 1, "cpus": 4},
        },
    )
    updated = env.inventory.set_node(
        CTXT,
        node="n1",
        changes={
            "properties": {"capabilities": "b:2, a:1", "cpus": 8},
            "remove_properties": ["x", "absent"],
            "add_traits": ["B"],
            "remove_traits": ["A"],
            "resource_class": "gold",
        },
    )
    assert updated["properties"] == {"cpus": 8, "capabilities": "b:2, a:1"}  # as written
    assert updated["capabilities"] == {"a": "1", "b": "2"}
    assert updated["traits"] == ["B"] and updated["resource_class"] == "gold"
    assert updated["updated_at"] >= created["updated_at"]

    before = env.node("n1")
    with pytest.raises(InvalidInput) as err:
        env.inventory.set_node(
            CTXT,
            node="n1",
            changes={
                "properties": {"cpus": [1]},
                "add_traits": ["C"],
                "remove_traits": ["C"],
                "colour": "red",
            },
        )
    assert err.value.fields == [
        "changes.colour",
        "changes.properties.cpus",
        "changes.remove_traits",
    ]
    with pytest.raises(InvalidInput) as err:
        env.inventory.set_node(CTXT, node="n1", changes={})
    assert err.value.fields == ["changes"]
    with pytest.raises(InvalidInput) as err:
        env.inventory.set_node(
            CTXT, node="n1", changes={"add_traits": [f"T{i}" for i in range(64)]}
        )
    assert err.value.fields == ["changes.add_traits"]
    assert env.node("n1") == before
    with pytest.raises(NodeNotFound):
        env.inventory.set_node(CTXT, node="nope", changes={"add_traits": ["A"]})


def _item(instance: str, node: str, epoch: int, **extra: Any) -> dict[str, Any]:
    return {"instance_uuid": instance, "node_uuid": node, "epoch": epoch, **extra}


def _routed_to(routed: Routed, count: int, owner: str) -> list[tuple[str, str, int]]:
    """Build ``count`` instances; the (instance, node, epoch) of those on ``owner``."""
    routed.instances.build_instances(CTXT, request={"flavor": "small", "count": count})
    routed.wait_routed(count)
    return [(i, n, e) for i, n, o, e in routed.router.routed if o == owner]


def test_batched_results_apply_each_item_on_its_own(routed: Routed) -> None:
    """A stale item and a duplicate in one batch: the others still apply, once."""
    owner = "agent-1"
    (first, node1, epoch1), (second, node2, epoch2) = _routed_to(routed, 3, owner)
    reply = routed.agents.report_build_results(
        CTXT,
        host=owner,
        results=[
            _item(first, node1, epoch1 + 1, success=True),  # stale epoch
            _item(second, node2, epoch2, success=True),
            _item(second, node2, epoch2, success=True),  # a resent duplicate
        ],
    )
    assert reply == {"results": [{"accepted": False}, {"accepted": True}, {"accepted": True}]}
    assert routed.show(first)["vm_state"] == "building"
    assert routed.show(second)["vm_state"] == "active"
    assert routed.env.node(node2)["provision_state"] == "active"
    # The stale one, reported right, is heard.
    again = routed.agents.report_build_results(
        CTXT, host=owner, results=[_item(first, node1, epoch1, success=True)]
    )
    assert again == {"results": [{"accepted": True}]}
    assert routed.show(first)["vm_state"] == "active"


def test_batched_results_one_failing_item_does_not_lose_the_others(
    routed: Routed, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = "agent-1"
    (first, node1, epoch1), (second, node2, epoch2) = _routed_to(routed, 3, owner)
    real = routed.builds.report_result

    def flaky(host: str, instance_uuid: str, *args: Any, **kwargs: Any) -> bool:
        if instance_uuid == first:
            raise RuntimeError("database went away")
        return real(host, instance_uuid, *args, **kwargs)

    monkeypatch.setattr(routed.builds, "report_result", flaky)
    reply = routed.agents.report_build_results(
        CTXT,
        host=owner,
        results=[
            _item(first, node1, epoch1, success=True),
            _item(second, node2, epoch2, success=False, fault="bmc", node_clean=True),
        ],
    )
    [failed, applied] = reply["results"]
    assert failed["accepted"] is False and "database went away" in failed["error"]
    assert applied == {"accepted": True}
    assert routed.show(first)["vm_state"] == "building"  # the sweeper will route it again
    rescheduled = routed.show(second)
    # Applied: the attempt on node2 counted and the build rescheduled.  No
    # node is free for it, so a worker may already have failed it for good
    # (a second attempt counted) by the time we look: both are right.
    assert rescheduled["attempts"] in (1, 2) and rescheduled["tried_nodes"] == [node2]
    assert "bmc" in (rescheduled["fault"] or "")


def test_batched_results_an_item_the_database_could_not_take_is_marked_retry(
    routed: Routed, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = "agent-1"
    (first, node1, epoch1), (second, node2, epoch2) = _routed_to(routed, 3, owner)
    real = routed.builds.report_result

    def database_down_for_first(host: str, instance_uuid: str, *args: Any, **kwargs: Any) -> bool:
        if instance_uuid == first:
            raise DatabaseUnavailable()
        return real(host, instance_uuid, *args, **kwargs)

    monkeypatch.setattr(routed.builds, "report_result", database_down_for_first)
    reply = routed.agents.report_build_results(
        CTXT,
        host=owner,
        results=[
            _item(first, node1, epoch1, success=True),
            _item(second, node2, epoch2, success=True),
        ],
    )
    [later, applied] = reply["results"]
    assert later["retry"] is True and later["accepted"] is False
    assert "database" in later["error"]
    assert applied == {"accepted": True}
    assert routed.show(first)["vm_state"] == "building"


def test_batched_results_with_a_malformed_item_are_refused_whole(routed: Routed) -> None:
    owner = "agent-1"
    [(instance, node, epoch), *_] = _routed_to(routed, 3, owner)
    good = _item(instance, node, epoch, success=True)
    for results, fields in (
        ([good, {**good, "epoch": -1}], ["results[1].epoch"]),
        (
            [good, {**good, "instance_uuid": "x", "extra": 1}],
            ["results[1].instance_uuid", "results[1].extra"],
        ),
        ([good, "not a mapping"], ["results[1]"]),
        (
            [{**good, "fault": 3}, {**good, "node_clean": None}],
            ["results[0].fault", "results[1].node_clean"],
        ),
        ([], ["results"]),
        ({"not": "a list"}, ["results"]),
    ):
        with pytest.raises(InvalidInput) as err:
            routed.agents.report_build_results(CTXT, host=owner, results=results)
        assert _fields(err) == fields
    with pytest.raises(InvalidInput) as err:
        routed.agents.report_build_results(CTXT, host="", results=[good])
    assert _fields(err) == ["host"]
    assert routed.show(instance)["vm_state"] == "building"  # nothing applied


def test_batched_results_without_build_workers(env: Env) -> None:
    env.live("agent-1")
    [node] = add_nodes(env.db, 1, owner="agent-1")
    item = _item(str(uuidlib.uuid4()), node, 0, success=True)
    with pytest.raises(ServiceUnavailable):
        env.agents.report_build_results(CTXT, host="agent-1", results=[item])
