# SPDX-License-Identifier: Apache-2.0
"""The Ironic inventory sync on SQLite, against the in-memory fake Ironic, and
fleet check of what it recorded of Ironic."""

from __future__ import annotations

import contextlib
import datetime
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg
from sqlalchemy import event, select, update

from conductor.common import clock
from conductor.common import conf as common_conf
from conductor.common.exception import NodeInUse, NodeNotFound
from conductor.common.ironic.client import IronicNode
from conductor.common.objects import Node, PowerState, ProvisionState, VmState
from conductor.db import fleet_report, nodes, ownership
from conductor.db.engine import Database
from conductor.db.models import InstanceModel, NodeModel, utcnow
from conductor.endpoints.fleet import FleetEndpoint
from conductor.endpoints.inventory import InventoryEndpoint
from conductor.fleet_view import FleetView
from conductor.ironic_sync import (
    EXCLUDE_TRAIT,
    MAX_ORPHANS,
    CleanOrphan,
    IronicInventorySync,
    SyncSummary,
)
from conductor.validation import validate_node_spec
from hashring.membership import Member, MembershipView, State
from tests.dbutil import migrated, pin
from tests.unit.test_ironic_driver import FakeIronic, FakeNode

REMOVED = "ironic: node removed from Ironic"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    yield database
    database.dispose()


@pytest.fixture
def ironic() -> FakeIronic:
    return FakeIronic()


def make_conf(directory: Path, **values: object) -> cfg.ConfigOpts:
    # A config file, not set_override: overrides of a module-level OptGroup leak.
    path = directory / f"{uuidlib.uuid4()}.conf"
    path.write_text("[ironic]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()))
    conf = cfg.ConfigOpts()
    common_conf.register_opts(conf, common_conf.CONDUCTOR)
    conf(["--config-file", str(path)], project="ringfleet", default_config_files=[])
    return conf


def make_sync(
    directory: Path,
    db: Database,
    ironic: FakeIronic,
    *,
    clean_orphan: CleanOrphan | None = None,
    **values: object,
) -> IronicInventorySync:
    conf = make_conf(directory, **values)
    return IronicInventorySync(db, conf, client=ironic, clean_orphan=clean_orphan)  # type: ignore[arg-type]


def add(ironic: FakeIronic, name: str, **fields: Any) -> FakeNode:
    fields.setdefault("shard", "s1")
    fields.setdefault("conductor_group", "cg1")
    return ironic.add(name=name, **fields)


def stored(db: Database, node: FakeNode) -> Node:
    return nodes.get_node(db, node.uuid)


def changes(summary: SyncSummary) -> tuple[int, int, int]:
    return summary.created, summary.updated, summary.retired


# -- import --------------------------------------------------------------------------------


def test_first_pass_creates_nodes_and_a_second_changes_nothing(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    gold = add(
        ironic,
        "rack1-n1",
        resource_class="baremetal-gold",
        traits=("CUSTOM_GPU",),
        properties={
            "cpus": 64,
            "capabilities": "boot_mode:uefi",
            "root_device": {"serial": "abc"},  # nested: not ringfleet's to read
        },
        power_state="power on",
    )
    plain = add(ironic, "rack1-n2", shard=None, conductor_group="", resource_class=None)
    sync = make_sync(tmp_path, db, ironic)
    changed: list[None] = []
    sync.on_change = lambda: changed.append(None)  # the agents are told: once a pass
    summary = sync.run()
    assert len(changed) == 1
    assert (summary.listed, *changes(summary), summary.invalid) == (2, 2, 0, 0, [])
    node = stored(db, gold)
    assert node.name == "rack1-n1" and node.resource_class == "baremetal-gold"
    assert node.traits == frozenset({"CUSTOM_GPU"})
    assert dict(node.properties) == {
        "cpus": 64,
        "capabilities": "boot_mode:uefi",
        "ironic_shard": "s1",
        "ironic_conductor_group": "cg1",
    }
    assert node.capabilities == {"boot_mode": "uefi"}
    assert node.group == "s1"  # from the shard by default
    assert (node.provision_state, node.power_state) == (ProvisionState.AVAILABLE, PowerState.ON)
    other = stored(db, plain)
    assert (other.group, other.resource_class) == ("", "baremetal")
    assert other.properties["ironic_shard"] == ""
    assert changes(sync.run()) == (0, 0, 0)
    assert sync.run().to_dict()["listed"] == 2
    assert len(changed) == 1  # passes that changed nothing tell no one


def test_a_node_tagged_to_stay_out_is_never_imported_and_can_be_deleted(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    """The operator's way to forget an Ironic node for good (``node delete``)."""
    kept = add(ironic, "rack1-n1")
    sync = make_sync(tmp_path, db, ironic)
    assert sync.run().created == 1
    fleet = FleetView(db)
    inventory = InventoryEndpoint(db, fleet)
    nodes.set_maintenance(db, kept.uuid, True, "decommissioning")
    with pytest.raises(NodeInUse, match=EXCLUDE_TRAIT):  # it would come back at once
        inventory.delete_node({}, node=kept.uuid)
    kept.traits = (EXCLUDE_TRAIT,)
    sync.run()  # the trait is mirrored to the known node
    inventory.delete_node({}, node=kept.uuid)
    summary = sync.run()
    assert (summary.created, summary.excluded) == (0, 1)
    with pytest.raises(NodeNotFound):
        stored(db, kept)
    # ... and a new Ironic node carrying it is never imported
    other = add(ironic, "rack1-n2", traits=(EXCLUDE_TRAIT, "CUSTOM_GPU"))
    assert sync.run().to_dict()["excluded"] == 2
    with pytest.raises(NodeNotFound):
        stored(db, other)


def test_the_node_group_can_come_from_the_conductor_group(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    node = add(ironic, "n1", shard="s1", conductor_group="cg-east")
    make_sync(tmp_path, db, ironic, node_group_from="conductor_group").run()
    assert stored(db, node).group == "cg-east"
    other = add(ironic, "n2")
    make_sync(tmp_path, db, ironic, node_group_from="none").run()
    assert stored(db, other).group == ""


def test_a_changed_description_follows_ironic(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    ironic_node = add(ironic, "n1", traits=("CUSTOM_A",), properties={"cpus": 8, "ram": 1})
    sync = make_sync(tmp_path, db, ironic)
    sync.run()
    ironic_node.traits = ("CUSTOM_B",)
    ironic_node.properties = {"cpus": 16}
    ironic_node.resource_class = "baremetal-large"
    assert changes(sync.run()) == (0, 1, 0)
    node = stored(db, ironic_node)
    assert node.traits == frozenset({"CUSTOM_B"})
    assert node.properties["cpus"] == 16 and "ram" not in node.properties
    assert node.resource_class == "baremetal-large"
    assert changes(sync.run()) == (0, 0, 0)


def test_an_invalid_ironic_node_is_reported_and_the_others_import(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    bad_name = add(ironic, "bad name!")
    bad_class = add(ironic, "n2", resource_class="not a class")
    good = add(ironic, "n3")
    summary = make_sync(tmp_path, db, ironic).run()
    assert summary.created == 1
    assert sorted(entry.split(":")[0] for entry in summary.invalid) == sorted(
        [bad_name.uuid, bad_class.uuid]
    )
    assert summary.to_dict()["invalid"] == 2
    assert stored(db, good).name == "n3"
    assert nodes.count_nodes(db) == 1


def test_a_nameless_ironic_node_is_imported(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    nameless = ironic.add(shard="s1")  # Ironic names are optional
    summary = make_sync(tmp_path, db, ironic).run()
    assert (summary.created, summary.invalid) == (1, [])
    assert stored(db, nameless).name == f"ironic-{nameless.uuid}"


# -- states --------------------------------------------------------------------------------


def test_ironic_maintenance_is_mirrored_and_cleared(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    ironic_node = add(ironic, "n1")
    sync = make_sync(tmp_path, db, ironic)
    sync.run()
    ironic_node.maintenance, ironic_node.maintenance_reason = True, "BMC unreachable"
    assert changes(sync.run()) == (0, 1, 0)
    node = stored(db, ironic_node)
    assert (node.maintenance, node.maintenance_reason) == (True, "ironic: BMC unreachable")
    assert changes(sync.run()) == (0, 0, 0)
    ironic_node.maintenance, ironic_node.maintenance_reason = False, None
    assert changes(sync.run()) == (0, 1, 0)
    node = stored(db, ironic_node)
    assert (node.maintenance, node.maintenance_reason) == (False, None)


def test_a_node_imported_in_maintenance_keeps_ironics_reason(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    ironic_node = add(ironic, "n1", maintenance=True)
    make_sync(tmp_path, db, ironic).run()
    node = stored(db, ironic_node)
    assert (node.maintenance, node.maintenance_reason) == (
        True,
        "ironic: maintenance set in Ironic",
    )


def test_an_operators_maintenance_is_never_cleared(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    ironic_node = add(ironic, "n1")
    sync = make_sync(tmp_path, db, ironic)
    sync.run()
    nodes.set_maintenance(db, ironic_node.uuid, True, "replacing a fan")
    assert changes(sync.run()) == (0, 0, 0)
    ironic_node.maintenance, ironic_node.maintenance_reason = True, "BMC unreachable"
    sync.run()
    ironic_node.maintenance = False
    sync.run()
    node = stored(db, ironic_node)
    assert (node.maintenance, node.maintenance_reason) == (True, "replacing a fan")


@pytest.mark.parametrize(
    ("ironic_state", "expected"),
    [
        ("manageable", ProvisionState.MANAGEABLE),
        ("cleaning", ProvisionState.CLEANING),
        ("clean wait", ProvisionState.CLEANING),
        ("enroll", ProvisionState.ENROLL),
        ("clean failed", ProvisionState.ERROR),
    ],
)
def test_an_idle_node_follows_ironics_provision_state(
    tmp_path: Path,
    db: Database,
    ironic: FakeIronic,
    ironic_state: str,
    expected: ProvisionState,
) -> None:
    ironic_node = add(ironic, "n1")
    sync = make_sync(tmp_path, db, ironic)
    sync.run()
    ironic_node.provision_state = ironic_state
    assert changes(sync.run()) == (0, 1, 0)
    assert stored(db, ironic_node).provision_state is expected
    ironic_node.provision_state = "available"
    assert changes(sync.run()) == (0, 1, 0)
    assert stored(db, ironic_node).provision_state is ProvisionState.AVAILABLE


def test_a_node_imported_mid_deploy_is_not_schedulable(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    busy = add(ironic, "n1", provision_state="active", instance_uuid=str(uuidlib.uuid4()))
    make_sync(tmp_path, db, ironic).run()
    assert stored(db, busy).provision_state is ProvisionState.ERROR


def test_a_node_hosting_an_instance_keeps_its_provision_state(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    ironic_node = add(ironic, "n1")
    sync = make_sync(tmp_path, db, ironic)
    sync.run()
    instance = str(uuidlib.uuid4())
    with db.transaction() as session:
        session.execute(
            update(NodeModel)
            .where(NodeModel.uuid == ironic_node.uuid)
            .values(provision_state=ProvisionState.ACTIVE.value, instance_uuid=instance)
        )
    ironic_node.provision_state, ironic_node.instance_uuid = "cleaning", instance
    sync.run()
    node = stored(db, ironic_node)
    assert (node.provision_state, node.instance_uuid) == (ProvisionState.ACTIVE, instance)


def test_the_power_state_is_mirrored(tmp_path: Path, db: Database, ironic: FakeIronic) -> None:
    ironic_node = add(ironic, "n1", power_state="power off")
    sync = make_sync(tmp_path, db, ironic)
    sync.run()
    ironic_node.power_state = "power on"
    assert changes(sync.run()) == (0, 1, 0)
    assert stored(db, ironic_node).power_state is PowerState.ON
    ironic_node.power_state = None
    sync.run()
    assert stored(db, ironic_node).power_state is None


def test_an_idle_node_claimed_in_ironic_is_out_of_service_until_released(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    claimed, failed = add(ironic, "n1"), add(ironic, "n2", provision_state="clean failed")
    sync = make_sync(tmp_path, db, ironic)
    sync.run()
    assert stored(db, failed).provision_state is ProvisionState.ERROR
    stranger = str(uuidlib.uuid4())
    # Still "available" in Ironic, but a build there would be refused.
    claimed.change(instance_uuid=stranger)
    failed.change(instance_uuid=stranger)
    assert changes(sync.run()) == (0, 1, 0)
    assert stored(db, claimed).provision_state is ProvisionState.ERROR
    assert stored(db, failed).provision_state is ProvisionState.ERROR  # error already
    # Claimed and error: no rule moves it (the two never fight).
    assert changes(sync.run()) == (0, 0, 0)
    claimed.change(instance_uuid=None)
    failed.change(instance_uuid=None, provision_state="available")
    assert changes(sync.run()) == (0, 2, 0)
    assert stored(db, claimed).provision_state is ProvisionState.AVAILABLE
    assert stored(db, failed).provision_state is ProvisionState.AVAILABLE


def test_a_node_changed_after_the_listing_began_waits_for_the_next_pass(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    """The listing may predate the change (a delete freed the node after
    Ironic was listed with the claim its teardown then released)."""
    node = add(ironic, "n1")
    sync = make_sync(tmp_path, db, ironic)
    sync.run()
    node.change(instance_uuid=str(uuidlib.uuid4()))
    later = utcnow() + datetime.timedelta(hours=1)
    with db.transaction() as session:
        session.execute(
            update(NodeModel).where(NodeModel.uuid == node.uuid).values(updated_at=later)
        )
    assert changes(sync.run()) == (0, 0, 0)
    assert stored(db, node).provision_state is ProvisionState.AVAILABLE
    with db.transaction() as session:
        session.execute(
            update(NodeModel).where(NodeModel.uuid == node.uuid).values(updated_at=utcnow())
        )
    assert changes(sync.run()) == (0, 1, 0)
    assert stored(db, node).provision_state is ProvisionState.ERROR


# -- orphan claims -------------------------------------------------------------------------


class Owners:
    """A recording ``clean_orphan``: (node, owner, epoch, instance) of each call."""

    def __init__(self, answer: bool = True) -> None:
        self.answer = answer
        self.calls: list[tuple[str, str | None, int, str]] = []

    def __call__(self, node: Node, instance_uuid: str) -> bool:
        self.calls.append((node.uuid, node.owner, node.owner_epoch, instance_uuid))
        return self.answer


def own(db: Database, agent: str, *ironic_nodes: FakeNode) -> dict[str, int]:
    """``agent`` claims the nodes; node -> epoch."""
    outcome = ownership.claim_nodes(
        db, agent, [n.uuid for n in ironic_nodes], live_members=[agent], rehome_grace=60
    )
    assert len(outcome.granted) == len(ironic_nodes)
    return {claim.node_uuid: claim.epoch for claim in outcome.granted}


def add_instance(db: Database, vm_state: VmState, node_uuid: str | None = None) -> str:
    """A ringfleet instance record (no node record changed); its uuid."""
    uuid = str(uuidlib.uuid4())
    with db.transaction() as session:
        session.add(
            InstanceModel(
                uuid=uuid,
                name=f"vm-{uuid[:8]}",
                flavor="f",
                vm_state=vm_state.value,
                node_uuid=node_uuid,
            )
        )
    return uuid


def test_an_orphan_claim_is_handed_to_the_nodes_owner_until_ironic_releases_it(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    """A deleted instance whose teardown never ran still claims its node in
    Ironic: the node goes out of service and its owner is asked, in the same
    pass, to tear that instance down; once Ironic shows the node available
    and unclaimed, it is schedulable again."""
    node, quiet = add(ironic, "n1"), add(ironic, "n2")
    owners = Owners()
    sync = make_sync(tmp_path, db, ironic, clean_orphan=owners)
    sync.run()
    epochs = own(db, "agent-1", node, quiet)
    deleted = add_instance(db, VmState.DELETED)
    node.change(provision_state="active", instance_uuid=deleted)

    summary = sync.run()

    assert stored(db, node).provision_state is ProvisionState.ERROR
    assert owners.calls == [(node.uuid, "agent-1", epochs[node.uuid], deleted)]
    assert (summary.updated, summary.orphans, summary.to_dict()["orphans"]) == (1, 1, 1)
    # Still claimed in Ironic (the teardown runs): asked again, no change.
    summary = sync.run()
    assert (summary.updated, summary.orphans) == (0, 1)
    assert len(owners.calls) == 2
    # Torn down: available again, nothing handed.
    node.change(provision_state="available", instance_uuid=None)
    summary = sync.run()
    assert (summary.updated, summary.orphans) == (1, 0)
    assert stored(db, node).provision_state is ProvisionState.AVAILABLE
    assert len(owners.calls) == 2
    assert stored(db, quiet).provision_state is ProvisionState.AVAILABLE


@pytest.mark.parametrize(
    "claimant",
    ["deleted", "error on no node", "rescheduled (building, no node)", "active elsewhere"],
)
def test_every_kind_of_ringfleet_instance_not_placed_on_the_node_is_handed(
    tmp_path: Path, db: Database, ironic: FakeIronic, claimant: str
) -> None:
    node, elsewhere = add(ironic, "n1"), add(ironic, "n2")
    owners = Owners()
    sync = make_sync(tmp_path, db, ironic, clean_orphan=owners)
    sync.run()
    epochs = own(db, "agent-2", node, elsewhere)
    if claimant == "active elsewhere":
        [instance] = pin(db, [elsewhere.uuid], "agent-2")
        elsewhere.change(provision_state="active", instance_uuid=instance)
    else:
        state = {"deleted": VmState.DELETED, "error on no node": VmState.ERROR}
        instance = add_instance(db, state.get(claimant, VmState.BUILDING))
    node.change(provision_state="deploy failed", instance_uuid=instance)
    assert sync.run().orphans == 1
    assert owners.calls == [(node.uuid, "agent-2", epochs[node.uuid], instance)]


def test_claims_that_are_not_repairable_orphans_are_never_handed(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    """Nova's (unknown) instance, an instance placed on the node, a node
    hosting an instance, a node without owner, a node in maintenance, and an
    observation older than the node's last change: never handed; nor, by
    the query, a node in service (not ``error``)."""
    names = (
        "orphan",
        "nova",
        "placed",
        "hosting",
        "ownerless",
        "maintenance",
        "in-service",
        "stale",
    )
    ironic_nodes = {name: add(ironic, name) for name in names}
    # Imported while Nova's instance runs on it: error from the start.
    nova = str(uuidlib.uuid4())
    imported = add(ironic, "nova-import", provision_state="active", instance_uuid=nova)
    owners = Owners()
    sync = make_sync(tmp_path, db, ironic, clean_orphan=owners)
    sync.run()
    owned = [n for name, n in ironic_nodes.items() if name != "ownerless"]
    epochs = own(db, "agent-1", *owned, imported)
    uuid = {name: n.uuid for name, n in ironic_nodes.items()}
    claims = {name: add_instance(db, VmState.DELETED) for name in names}
    claims["nova"] = str(uuidlib.uuid4())
    # Placed on the node by ringfleet's instance record (building there),
    # although the node's own record does not say so.
    claims["placed"] = add_instance(db, VmState.BUILDING, node_uuid=uuid["placed"])
    [hosted] = pin(db, [uuid["hosting"]], "agent-1")
    nodes.set_maintenance(db, uuid["maintenance"], True, "operator: disks")
    for name, node in ironic_nodes.items():
        node.change(provision_state="active", instance_uuid=claims[name])
    ironic_nodes["hosting"].change(instance_uuid=claims["hosting"])
    sync.run()
    assert stored(db, ironic_nodes["hosting"]).instance_uuid == hosted
    with db.transaction() as session:  # hosting: error, still hosting
        session.execute(
            update(NodeModel)
            .where(NodeModel.uuid == uuid["hosting"])
            .values(provision_state="error")
        )
        # stale: ringfleet changed the node after the pass observed it
        session.execute(
            update(NodeModel)
            .where(NodeModel.uuid == uuid["stale"])
            .values(updated_at=utcnow() + datetime.timedelta(hours=1))
        )
    owners.calls.clear()
    sync.run()
    in_service = uuid.pop("in-service")
    assert sorted(owners.calls) == sorted(
        [
            (uuid["orphan"], "agent-1", epochs[uuid["orphan"]], claims["orphan"]),
            (in_service, "agent-1", epochs[in_service], claims["in-service"]),
        ]
    )
    for name in names:
        assert stored(db, ironic_nodes[name]).provision_state is ProvisionState.ERROR, name
    assert stored(db, imported).provision_state is ProvisionState.ERROR
    # A node in service (the sync puts a claimed one out of service first,
    # so only the query itself can be asked about it).
    with db.transaction() as session:
        session.execute(
            update(NodeModel)
            .where(NodeModel.uuid == in_service)
            .values(provision_state="available", updated_at=NodeModel.updated_at)
        )
    assert [(o.node.uuid, o.instance_uuid) for o in nodes.repairable_orphans(db)] == [
        (uuid["orphan"], claims["orphan"])
    ]


def test_a_stale_observation_is_handed_once_a_pass_sees_the_node_again(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    node = add(ironic, "n1")
    owners = Owners()
    sync = make_sync(tmp_path, db, ironic, clean_orphan=owners)
    sync.run()
    own(db, "agent-1", node)
    node.change(provision_state="active", instance_uuid=add_instance(db, VmState.DELETED))
    with db.transaction() as session:  # failed build: ringfleet freed it as error
        session.execute(
            update(NodeModel).where(NodeModel.uuid == node.uuid).values(provision_state="error")
        )
    sync.run()
    assert len(owners.calls) == 1
    nodes.set_maintenance(db, node.uuid, False, None)  # a change of ringfleet's, after the pass
    assert observation(db, node.uuid)[2] < observation(db, node.uuid)[3]
    assert nodes.repairable_orphans(db) == []
    sync.run()  # dated anew
    assert len(owners.calls) == 2


def test_an_owner_that_does_not_take_one_is_asked_once_per_pass(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    busy = [add(ironic, f"a{i}") for i in range(3)]
    other = add(ironic, "b")
    owners = Owners(answer=False)
    sync = make_sync(tmp_path, db, ironic, clean_orphan=owners)
    sync.run()
    own(db, "agent-1", *busy)
    own(db, "agent-2", other)
    for node in [*busy, other]:
        node.change(instance_uuid=add_instance(db, VmState.DELETED))
    assert sync.run().orphans == 0
    assert sorted(owner for _node, owner, _epoch, _i in owners.calls) == ["agent-1", "agent-2"]


def test_a_pass_hands_at_most_max_orphans(tmp_path: Path, db: Database, ironic: FakeIronic) -> None:
    # Uuids in the listing's order: the pass reads again the first hundred
    # nodes it lists, so the two it does not are the last by uuid too (with
    # random uuids one of them could sort among the hundred, and be left to
    # a third pass: the test failed about once in fifty runs).
    many = [
        add(ironic, f"n{i:03d}", uuid=f"00000000-0000-4000-8000-{i:012d}")
        for i in range(MAX_ORPHANS + 2)
    ]
    owners = Owners()
    sync = make_sync(tmp_path, db, ironic, clean_orphan=owners)
    sync.run()
    for node in many:
        own(db, f"agent-{node.name}", node)
        node.change(instance_uuid=add_instance(db, VmState.DELETED))
    ironic.reads = 0
    assert sync.run().orphans == MAX_ORPHANS
    assert ironic.reads == MAX_ORPHANS  # read again after the change: at most as many
    first = {node for node, *_ in owners.calls}
    owners.calls.clear()
    # The next pass begins where this one ended: the last two are not
    # kept waiting by the first hundred, which are still claimed.
    assert sync.run().orphans == MAX_ORPHANS
    second = [node for node, *_ in owners.calls]
    assert len(set(second)) == MAX_ORPHANS
    assert first | set(second) == {n.uuid for n in many}


def test_a_node_ironic_cannot_show_again_keeps_the_listings_observation(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    node = add(ironic, "n1")
    owners = Owners()
    sync = make_sync(tmp_path, db, ironic, clean_orphan=owners)
    sync.run()
    own(db, "agent-1", node)
    instance = add_instance(db, VmState.DELETED)
    node.change(instance_uuid=instance)
    ironic.unreachable_reads = 1
    summary = sync.run()
    assert (summary.updated, summary.observed, summary.orphans) == (1, 1, 0)
    state, claim, seen_at, updated_at = observation(db, node.uuid)
    assert (state, claim) == ("available", instance) and seen_at < updated_at
    assert sync.run().orphans == 1  # the next pass


# -- retirement ----------------------------------------------------------------------------


def test_a_node_removed_from_ironic_is_retired_once(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    gone = add(ironic, "n1")
    kept = add(ironic, "n2")
    sync = make_sync(tmp_path, db, ironic)
    sync.run()
    del ironic.nodes[gone.uuid]
    summary = sync.run()
    assert (summary.retired, summary.updated) == (1, 1)
    node = stored(db, gone)
    assert (node.maintenance, node.maintenance_reason) == (True, REMOVED)
    assert not stored(db, kept).maintenance
    assert changes(sync.run()) == (0, 0, 0)
    # Back in Ironic: the retirement is the sync's to clear.
    ironic.nodes[gone.uuid] = gone
    assert changes(sync.run()) == (0, 1, 0)
    assert not stored(db, gone).maintenance


def test_a_hand_created_node_is_never_retired(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    [by_hand] = nodes.create_nodes(
        db, [validate_node_spec({"name": "by-hand", "resource_class": "baremetal"})]
    )
    add(ironic, "n1")
    summary = make_sync(tmp_path, db, ironic).run()
    assert (summary.created, summary.retired) == (1, 0)
    assert not nodes.get_node(db, by_hand.uuid).maintenance


def test_shards_limit_listing_and_retirement(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    ours = add(ironic, "n1", shard="s1")
    theirs = add(ironic, "n2", shard="s2")
    everything = make_sync(tmp_path, db, ironic)
    assert everything.run().created == 2
    only_s1 = make_sync(tmp_path, db, ironic, shards="s1")
    summary = only_s1.run()
    assert (summary.listed, *changes(summary)) == (1, 0, 0, 0)
    # s2's node is out of this sync's scope: never retired by it.
    del ironic.nodes[theirs.uuid]
    assert only_s1.run().retired == 0
    assert not stored(db, theirs).maintenance
    del ironic.nodes[ours.uuid]
    assert only_s1.run().retired == 1
    assert stored(db, ours).maintenance_reason == REMOVED
    new = add(ironic, "n3", shard="s3")
    assert only_s1.run().created == 0
    assert make_sync(tmp_path, db, ironic, shards="s1,s3").run().created == 1
    assert stored(db, new).group == "s3"


# -- mirror_back_end_states ----------------------------------------------------------------


def test_mirror_back_end_states_compares_and_swaps(db: Database) -> None:
    [node] = nodes.create_nodes(
        db, [validate_node_spec({"name": "n1", "resource_class": "baremetal"})]
    )
    stale = nodes.BackEndState(
        node.uuid,
        provision_state=(ProvisionState.MANAGEABLE, ProvisionState.CLEANING),
        maintenance=((True, "ironic: x"), (False, None)),
    )
    assert nodes.mirror_back_end_states(db, [stale]) == 0
    assert nodes.get_node(db, node.uuid) == node
    fresh = nodes.BackEndState(
        node.uuid,
        provision_state=(ProvisionState.AVAILABLE, ProvisionState.CLEANING),
        set_power=True,
        power_state=PowerState.ON,
        maintenance=((False, None), (True, "ironic: y")),
    )
    assert nodes.mirror_back_end_states(db, [fresh]) == 3
    now = nodes.get_node(db, node.uuid)
    assert (now.provision_state, now.power_state) == (ProvisionState.CLEANING, PowerState.ON)
    assert (now.maintenance, now.maintenance_reason) == (True, "ironic: y")
    assert nodes.mirror_back_end_states(db, [fresh]) == 0  # applied once


def test_mirror_back_end_states_leaves_a_node_hosting_an_instance(db: Database) -> None:
    [node] = nodes.create_nodes(
        db, [validate_node_spec({"name": "n1", "resource_class": "baremetal"})]
    )
    with db.transaction() as session:
        session.execute(
            update(NodeModel)
            .where(NodeModel.uuid == node.uuid)
            .values(instance_uuid=str(uuidlib.uuid4()))
        )
    change = nodes.BackEndState(
        node.uuid, provision_state=(ProvisionState.AVAILABLE, ProvisionState.CLEANING)
    )
    assert nodes.mirror_back_end_states(db, [change]) == 0
    assert nodes.get_node(db, node.uuid).provision_state is ProvisionState.AVAILABLE


# -- back-end observations -----------------------------------------------------------------


def observation(db: Database, uuid: str) -> tuple[str | None, str | None, Any, Any]:
    """(backend_state, backend_instance_uuid, backend_seen_at, updated_at) of a node row."""
    with db.reading() as session:
        row = session.execute(
            select(
                NodeModel.backend_state,
                NodeModel.backend_instance_uuid,
                NodeModel.backend_seen_at,
                NodeModel.updated_at,
            ).where(NodeModel.uuid == uuid)
        ).one()
    return row[0], row[1], row[2], row[3]


@contextlib.contextmanager
def sql_writes(db: Database) -> Iterator[list[str]]:
    """Every INSERT, UPDATE and DELETE sent to the database meanwhile."""
    writes: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE"):
            writes.append(statement)

    event.listen(db.engine, "before_cursor_execute", seen)
    try:
        yield writes
    finally:
        event.remove(db.engine, "before_cursor_execute", seen)


def test_a_pass_records_ironics_state_and_claim_of_every_node(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    idle = add(ironic, "n1")
    claimed_elsewhere = str(uuidlib.uuid4())
    busy = add(ironic, "n2", provision_state="active", instance_uuid=claimed_elsewhere)
    sync = make_sync(tmp_path, db, ironic)
    before = utcnow()
    summary = sync.run()
    # Created with their observation, as of their creation.
    assert (summary.created, summary.observed) == (2, 0)
    state, claim, seen_at, updated_at = observation(db, idle.uuid)
    assert (state, claim) == ("available", None)
    assert before <= seen_at == updated_at
    assert observation(db, busy.uuid)[:2] == ("active", claimed_elsewhere)
    # Ironic's raw state, whatever ringfleet makes of it.
    assert stored(db, busy).provision_state is ProvisionState.ERROR

    idle.change(provision_state="deploy failed", instance_uuid=claimed_elsewhere)
    busy.change(provision_state="available", instance_uuid=None)
    started = utcnow()
    summary = sync.run()
    assert summary.observed == 2
    state, claim, seen_at, updated_at = observation(db, idle.uuid)
    assert (state, claim) == ("deploy failed", claimed_elsewhere)
    # Claimed in Ironic: out of service, and read from Ironic again after
    # that change, so its observation is no older than the change.
    assert stored(db, idle).provision_state is ProvisionState.ERROR
    assert started <= updated_at <= seen_at <= utcnow()
    # Dated when the pass began listing (the pass then made it available).
    state, claim, seen_at, updated_at = observation(db, busy.uuid)
    assert (state, claim) == ("available", None)
    assert started <= seen_at < updated_at

    # Recording is not ringfleet's change: updated_at stays.  (busy, which
    # the last pass changed after listing it, is dated anew too.)
    idle.change(provision_state="active")
    before = observation(db, idle.uuid)
    started = utcnow()
    assert sync.run().observed == 2
    state, claim, seen_at, updated_at = observation(db, idle.uuid)
    assert (state, claim) == ("active", claimed_elsewhere)
    assert started <= seen_at <= utcnow() and updated_at == before[3]


def test_a_quiet_second_pass_writes_nothing(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    # Nodes ringfleet had before any observation (an upgraded fleet), and
    # nodes the first pass creates.
    old = [add(ironic, f"old-{i}") for i in range(3)]
    make_sync(tmp_path, db, ironic).run()
    with db.transaction() as session:
        session.execute(
            update(NodeModel)
            .where(NodeModel.uuid.in_([n.uuid for n in old]))
            .values(backend_state=None, backend_instance_uuid=None, backend_seen_at=None)
        )
    add(ironic, "new-1", provision_state="clean failed")
    add(ironic, "new-2", provision_state="active", instance_uuid=str(uuidlib.uuid4()))
    sync = make_sync(tmp_path, db, ironic)
    first = sync.run()
    assert (first.created, first.observed) == (2, 3)

    with sql_writes(db) as writes:
        second = sync.run()
    assert (second.listed, *changes(second), second.observed) == (5, 0, 0, 0, 0)
    assert writes == []


def test_a_change_in_ringfleet_re_dates_the_observation_once(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    changed, quiet = add(ironic, "n1"), add(ironic, "n2")
    sync = make_sync(tmp_path, db, ironic)
    sync.run()
    [instance] = pin(db, [changed.uuid], "agent-1")
    changed.change(provision_state="active", instance_uuid=instance)
    quiet_before = observation(db, quiet.uuid)
    summary = sync.run()
    assert summary.observed == 1
    state, claim, seen_at, updated_at = observation(db, changed.uuid)
    assert (state, claim) == ("active", instance) and seen_at > updated_at
    assert observation(db, quiet.uuid) == quiet_before
    # Ringfleet changes the instance only (same Ironic state): dated anew once.
    with db.transaction() as session:
        session.execute(
            update(InstanceModel).where(InstanceModel.uuid == instance).values(fault="x")
        )
    assert sync.run().observed == 1
    assert observation(db, changed.uuid)[2] > seen_at
    assert sync.run().observed == 0


def test_a_pass_that_changed_a_node_dates_its_observation_again_next_time(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    """The pass's own change (here power) is newer than what it listed."""
    node = add(ironic, "n1")
    sync = make_sync(tmp_path, db, ironic)
    sync.run()
    node.change(power_state="power on", provision_state="clean failed")
    summary = sync.run()
    assert (summary.updated, summary.observed) == (2, 1)
    _state, _claim, seen_at, updated_at = observation(db, node.uuid)
    assert seen_at < updated_at
    summary = sync.run()
    assert (summary.updated, summary.observed) == (0, 1)
    assert observation(db, node.uuid)[2] >= observation(db, node.uuid)[3]
    assert sync.run().observed == 0


def test_a_node_gone_from_ironic_loses_its_observation(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    gone = add(ironic, "n1")
    sync = make_sync(tmp_path, db, ironic)
    sync.run()
    del ironic.nodes[gone.uuid]
    summary = sync.run()
    assert (summary.retired, summary.observed) == (1, 1)
    state, claim, seen_at, _updated = observation(db, gone.uuid)
    assert (state, claim) == (None, None) and seen_at is not None
    assert sync.run().observed == 0


def test_record_back_end_observations_keeps_a_newer_one_and_updated_at(db: Database) -> None:
    [node] = nodes.create_nodes(
        db, [validate_node_spec({"name": "n1", "resource_class": "baremetal"})]
    )
    now = utcnow()
    newer = nodes.BackEndObservation(node.uuid, "active", None)
    assert nodes.record_back_end_observations(db, [newer], now) == 1
    older = nodes.BackEndObservation(node.uuid, "available", None)
    earlier = now - datetime.timedelta(seconds=1)
    assert nodes.record_back_end_observations(db, [older], earlier) == 0
    assert observation(db, node.uuid)[:3] == ("active", None, now)
    assert observation(db, node.uuid)[3] == node.updated_at
    assert nodes.get_node(db, node.uuid) == node


# -- fleet check of what the sync saw ------------------------------------------------------


class _Connected:
    state = State.CONNECTED


def check(db: Database) -> list[dict[str, Any]]:
    """The back-end problems of a fleet check (agent-1 the one live agent)."""
    fleet = FleetView(db)
    fleet.attach(_Connected())  # type: ignore[arg-type]
    fleet.on_change(
        MembershipView(
            members={"agent-1": Member(member_id="agent-1", ring_version=1, weight=1.0)},
            excluded={},
            ring_version=1,
        )
    )
    report = FleetEndpoint(db, fleet, "cond-1").fleet_check({})
    return [p for p in report["problems"] if p["kind"] == "backend-mismatch"]


def test_fleet_check_reports_an_ironic_claim_ringfleet_does_not_hold(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    claimed, other = add(ironic, "n1"), add(ironic, "n2")
    sync = make_sync(tmp_path, db, ironic)
    sync.run()
    assert check(db) == []
    stranger = str(uuidlib.uuid4())
    claimed.change(instance_uuid=stranger, provision_state="active")
    sync.run()  # out of service, and observed after that (reported at once)

    [problem] = check(db)

    assert problem["node_uuid"] == claimed.uuid and problem["reason"] == "orphan-claim"
    assert (problem["instance_uuid"], problem["vm_state"]) == (None, None)
    assert (problem["backend_state"], problem["backend_instance_uuid"]) == ("active", stranger)
    seen_at = observation(db, claimed.uuid)[2]
    assert problem["backend_seen_at"] == clock.shown(seen_at)
    assert problem["message"] == (
        f"node {claimed.uuid} (owner none): claimed in Ironic by instance {stranger}, which "
        "ringfleet does not hold on this node (not a ringfleet instance); ringfleet: no "
        f"instance, node error; Ironic: active, claimed by {stranger}, as seen by the "
        f"sync at {clock.shown(seen_at)}"
    )
    # Claimed by an instance ringfleet has on another node.
    [elsewhere] = pin(db, [other.uuid], "agent-1")
    other.change(provision_state="active", instance_uuid=elsewhere)
    claimed.change(instance_uuid=elsewhere)
    sync.run()
    [problem] = check(db)
    assert problem["backend_instance_uuid"] == elsewhere
    assert f"(ringfleet has it active on node {other.uuid})" in problem["message"]
    # Released in Ironic: nothing to report.
    claimed.change(instance_uuid=None, provision_state="available")
    sync.run()
    assert check(db) == []


def test_fleet_check_reports_an_active_instance_on_a_node_ironic_shows_failed(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    failed, by_hand_twin = add(ironic, "n1"), add(ironic, "n2")
    sync = make_sync(tmp_path, db, ironic)
    sync.run()
    [instance, twin] = pin(db, [failed.uuid, by_hand_twin.uuid], "agent-1")
    failed.change(provision_state="active", instance_uuid=instance)
    by_hand_twin.change(provision_state="active", instance_uuid=twin)
    sync.run()
    assert check(db) == []

    failed.change(provision_state="deploy failed")
    sync.run()
    [problem] = check(db)
    assert (problem["node_uuid"], problem["reason"]) == (failed.uuid, "not-deployed")
    assert (problem["instance_uuid"], problem["vm_state"]) == (instance, "active")
    assert (problem["backend_state"], problem["backend_instance_uuid"]) == (
        "deploy failed",
        instance,
    )
    assert problem["message"].startswith(
        f"node {failed.uuid} (owner none): instance {instance} is active, Ironic shows its "
        f"node deploy failed; ringfleet: instance {instance} (active), node active; Ironic: "
        f"deploy failed, claimed by {instance}, as seen by the sync at "
    )
    # Active in Ironic but claimed by nobody: reported too.
    failed.change(provision_state="active", instance_uuid=None)
    sync.run()
    [problem] = check(db)
    assert "its node is not claimed by it in Ironic" in problem["message"]


def test_fleet_check_compares_only_nodes_the_sync_observed(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    """A node never observed (simulated driver, no sync) is never compared:
    of two nodes with the same records, only the one Ironic was seen to
    disagree on is reported."""
    observed = add(ironic, "n1")
    sync = make_sync(tmp_path, db, ironic)
    sync.run()
    [by_hand] = nodes.create_nodes(
        db, [validate_node_spec({"name": "by-hand", "resource_class": "baremetal"})]
    )
    [instance, _other] = pin(db, [observed.uuid, by_hand.uuid], "agent-1")
    observed.change(provision_state="error", instance_uuid=instance)
    sync.run()
    assert observation(db, by_hand.uuid)[:3] == (None, None, None)
    assert [p["node_uuid"] for p in check(db)] == [observed.uuid]


def set_vm_state(db: Database, instance: str, vm_state: str) -> None:
    with db.transaction() as session:
        session.execute(
            update(InstanceModel).where(InstanceModel.uuid == instance).values(vm_state=vm_state)
        )


def test_fleet_check_never_reports_a_build_under_way(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    """Ringfleet's change newer than the sync's observation: not compared."""
    node = add(ironic, "n1")
    sync = make_sync(tmp_path, db, ironic)
    sync.run()
    # A build allocated after the pass: the observation (available, no
    # claim) predates it.
    [instance] = pin(db, [node.uuid], "agent-1")
    set_vm_state(db, instance, "building")
    assert check(db) == []
    # A pass before the agent claimed the node in Ironic: the same
    # observation, dated after the allocation.
    assert sync.run().observed == 1
    assert check(db) == []
    # Deployed, and the instance ACTIVE after that pass: not compared
    # until a pass sees Ironic after it.
    node.change(provision_state="active", instance_uuid=instance)
    set_vm_state(db, instance, "active")
    assert check(db) == []

    # A pass that listed Ironic in the middle of a deploy, and recorded what
    # it listed after the instance went ACTIVE: dated when listing began.
    node.change(provision_state="wait call-back")
    set_vm_state(db, instance, "building")

    class Slow:
        def list_nodes(self, *, shard: str | None = None) -> Iterator[IronicNode]:
            yield from ironic.list_nodes(shard=shard)
            node.change(provision_state="active")
            set_vm_state(db, instance, "active")

    IronicInventorySync(db, make_conf(tmp_path), client=Slow()).run()  # type: ignore[arg-type]
    assert observation(db, node.uuid)[:2] == ("wait call-back", instance)
    assert check(db) == []
    # The next pass sees it deployed with the instance.
    sync.run()
    assert observation(db, node.uuid)[:2] == ("active", instance)
    assert check(db) == []
    # Had the deploy failed instead, the next pass would report it.
    node.change(provision_state="deploy failed")
    sync.run()
    assert [p["reason"] for p in check(db)] == ["not-deployed"]


def test_fleet_check_reports_a_failed_idle_node_once(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    clean_failed = add(ironic, "n1", provision_state="clean failed")
    failed_and_claimed = add(
        ironic, "n2", provision_state="error", instance_uuid=str(uuidlib.uuid4())
    )
    add(ironic, "n3", provision_state="manageable")
    make_sync(tmp_path, db, ironic).run()
    # The sync stored both as error: no state mismatch, one line each here.
    assert stored(db, clean_failed).provision_state is ProvisionState.ERROR

    problems = {p["node_uuid"]: p for p in check(db)}

    assert set(problems) == {clean_failed.uuid, failed_and_claimed.uuid}
    assert problems[clean_failed.uuid]["reason"] == "out-of-service"
    assert problems[clean_failed.uuid]["message"].startswith(
        f"node {clean_failed.uuid} (owner none): node hosts no instance and Ironic shows it "
        "clean failed: out of service until fixed in Ironic; ringfleet: no instance, node error;"
    )
    assert problems[failed_and_claimed.uuid]["reason"] == "orphan-claim"


def test_fleet_check_leaves_a_node_to_its_state_mismatch(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    """Records that disagree with each other are one STATE-MISMATCH line, not two."""
    node = add(ironic, "n1")
    sync = make_sync(tmp_path, db, ironic)
    sync.run()
    [instance] = pin(db, [node.uuid], "agent-1")
    with db.transaction() as session:
        session.execute(
            update(NodeModel).where(NodeModel.uuid == node.uuid).values(provision_state="error")
        )
    node.change(provision_state="deploy failed", instance_uuid=instance)
    sync.run()
    sync.run()  # dated after the record's change
    assert observation(db, node.uuid)[:2] == ("deploy failed", instance)
    assert check(db) == []
    assert [(m.node_uuid, m.instance_uuid) for m in fleet_report.state_mismatches(db)[1]] == [
        (node.uuid, instance)
    ]


def test_fleet_check_lists_50_back_end_mismatches_and_counts_the_rest(
    tmp_path: Path, db: Database, ironic: FakeIronic
) -> None:
    for i in range(53):
        add(ironic, f"n{i:02d}", provision_state="clean failed")
    make_sync(tmp_path, db, ironic).run()
    problems = check(db)
    assert len(problems) == 51
    assert problems[-1] == {
        "kind": "backend-mismatch",
        "message": "... and 3 more back-end mismatches",
    }
    assert (
        fleet_report.back_end_mismatches(
            db, active_state="active", failed_states={"clean failed"}, sample=2
        )[0]
        == 53
    )
