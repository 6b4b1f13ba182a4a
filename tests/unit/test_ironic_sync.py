"""The Ironic inventory sync on SQLite, against the in-memory fake Ironic."""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg
from sqlalchemy import update

from conductor import conf as conductor_conf
from conductor.common.objects import Node, PowerState, ProvisionState
from conductor.db import nodes
from conductor.db.engine import Database
from conductor.db.models import NodeModel
from conductor.ironic_sync import IronicInventorySync, SyncSummary
from conductor.validation import validate_node_spec
from tests.dbutil import migrated
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
    conductor_conf.register_opts(conf)
    conf(["--config-file", str(path)], project="ringfleet", default_config_files=[])
    return conf


def make_sync(
    directory: Path, db: Database, ironic: FakeIronic, **values: object
) -> IronicInventorySync:
    conf = make_conf(directory, **values)
    return IronicInventorySync(db, conf, client=ironic)  # type: ignore[arg-type]


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
    summary = sync.run()
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
