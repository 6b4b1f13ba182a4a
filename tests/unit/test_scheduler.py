# SPDX-License-Identifier: Apache-2.0
"""The scheduler against a real (SQLite) database: allocation, coherence, races."""

from __future__ import annotations

import dataclasses
import datetime
import pickle
import threading
import uuid as uuidlib
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, select, update

from conductor.common.exception import Conflict, NoValidNode
from conductor.common.objects import Flavor, ProvisionState
from conductor.db import allocations, nodes
from conductor.db.engine import Database
from conductor.db.models import InstanceModel, NodeModel, utcnow
from conductor.scheduler import source
from conductor.scheduler.decide import Chooser
from conductor.scheduler.index import hardware_key
from conductor.scheduler.scheduler import Scheduler
from tests.dbutil import migrated, pin

GOLD = Flavor(name="gold", resource_class="gold")
LIVE = frozenset({"agent-1", "agent-2", "agent-3", "agent-4", "agent-5"})


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    yield database
    database.dispose()


def insert_nodes(
    db: Database,
    count: int,
    *,
    owner: str | None = "agent-1",
    resource_class: str = "gold",
    traits: Sequence[str] = (),
    capabilities: str | None = None,
    group: str = "",
    maintenance: bool = False,
    provision_state: str = "available",
    prefix: str = "node",
) -> list[str]:
    uuids = [str(uuidlib.uuid4()) for _ in range(count)]
    properties: dict[str, Any] = {"memory_mb": 4096}
    if capabilities is not None:
        properties["capabilities"] = capabilities
    with db.transaction() as session:
        session.add_all(
            NodeModel(
                uuid=u,
                name=f"{prefix}-{i}-{u[:8]}",
                resource_class=resource_class,
                traits=sorted(traits),
                properties=properties,
                node_group=group,
                provision_state=provision_state,
                power_state="power off",
                maintenance=maintenance,
                maintenance_reason="testing" if maintenance else None,
                owner=owner,
                owner_epoch=1 if owner else 0,
            )
            for i, u in enumerate(uuids)
        )
    return uuids


def new_instances(db: Database, count: int, *, vm_state: str = "building") -> list[str]:
    uuids = [str(uuidlib.uuid4()) for _ in range(count)]
    with db.transaction() as session:
        session.add_all(
            InstanceModel(uuid=u, name=f"vm-{u[:8]}", flavor="gold", vm_state=vm_state)
            for u in uuids
        )
    return uuids


def scheduler(db: Database, **kwargs: Any) -> Scheduler:
    kwargs.setdefault("refresh_interval", 3600.0)
    kwargs.setdefault("resync_interval", 0.0)
    return Scheduler(db, **kwargs)


def node_row(db: Database, uuid: str) -> NodeModel:
    with db.transaction() as session:
        row = session.scalars(select(NodeModel).where(NodeModel.uuid == uuid)).one()
        session.expunge(row)
        return row


def instance_row(db: Database, uuid: str) -> InstanceModel:
    with db.transaction() as session:
        row = session.scalars(select(InstanceModel).where(InstanceModel.uuid == uuid)).one()
        session.expunge(row)
        return row


# -- allocating --------------------------------------------------------------------------------


def test_allocates_a_node_and_returns_its_ownership(db: Database) -> None:
    (node_uuid,) = insert_nodes(db, 1, capabilities="boot_mode:uefi")
    (instance,) = new_instances(db, 1)
    sched = scheduler(db)
    node, ownership = sched.select_and_allocate(GOLD, instance, live_members={"agent-1"})

    assert node.uuid == ownership.node_uuid == node_uuid
    assert (ownership.owner, ownership.epoch, ownership.pinned) == ("agent-1", 1, True)
    assert node.instance_uuid == instance
    assert node.provision_state is ProvisionState.DEPLOYING
    assert (node.owner, node.owner_epoch) == ("agent-1", 1)
    assert node.capabilities == {"boot_mode": "uefi"}
    assert node.properties == {"memory_mb": 4096, "capabilities": "boot_mode:uefi"}

    row = node_row(db, node_uuid)
    assert (row.instance_uuid, row.provision_state) == (instance, "deploying")
    placed = instance_row(db, instance)
    assert (placed.node_uuid, placed.host) == (node_uuid, "agent-1")
    assert sched.stats()["allocated"] == 1
    assert sched.stats()["free"] == 0


def test_allocations_spread_evenly_across_owners(db: Database) -> None:
    for agent in sorted(LIVE):
        insert_nodes(db, 20, owner=agent)
    sched = scheduler(db)
    owners: Counter[str] = Counter()
    for instance in new_instances(db, 50):
        _node, ownership = sched.select_and_allocate(GOLD, instance, live_members=LIVE)
        assert ownership.owner is not None
        owners[ownership.owner] += 1
        assert max(owners.values()) - min(owners.get(a, 0) for a in LIVE) <= 1
    assert owners == {agent: 10 for agent in LIVE}
    with db.transaction() as session:
        hosts = Counter(session.scalars(select(InstanceModel.host)))
    assert hosts == owners


def test_spread_counts_instances_already_hosted(db: Database) -> None:
    busy = insert_nodes(db, 10, owner="agent-1")
    insert_nodes(db, 10, owner="agent-2")
    pin(db, busy[:4], "agent-1")
    sched = scheduler(db)
    owners = Counter(
        sched.select_and_allocate(GOLD, i, live_members={"agent-1", "agent-2"})[1].owner
        for i in new_instances(db, 6)
    )
    assert owners == {"agent-2": 5, "agent-1": 1}


def test_filters_apply_to_traits_capabilities_and_groups(db: Database) -> None:
    uefi = insert_nodes(db, 3, traits=["HW_GPU"], capabilities="boot_mode:uefi,cpus:32")
    insert_nodes(db, 3, traits=["HW_GPU"], capabilities="boot_mode:bios,cpus:32")
    insert_nodes(db, 3, traits=[], capabilities="boot_mode:uefi,cpus:32")
    rack = insert_nodes(db, 3, capabilities="boot_mode:uefi", group="rack-1")
    sched = scheduler(db)
    flavor = Flavor(
        name="gpu",
        resource_class="gold",
        required_traits=frozenset({"HW_GPU"}),
        extra_specs={"capabilities:boot_mode": "s== uefi", "capabilities:cpus": ">= 16"},
    )
    chosen = {
        sched.select_and_allocate(flavor, i, live_members={"agent-1"})[0].uuid
        for i in new_instances(db, 3)
    }
    assert chosen == set(uefi)
    with pytest.raises(NoValidNode):
        sched.select_and_allocate(flavor, new_instances(db, 1)[0], live_members={"agent-1"})

    in_rack = {
        sched.select_and_allocate(GOLD, i, live_members={"agent-1"}, group="rack-1")[0].uuid
        for i in new_instances(db, 3)
    }
    assert in_rack == set(rack)


def test_exclude_nodes_avoids_earlier_attempts(db: Database) -> None:
    first, second = insert_nodes(db, 2)
    sched = scheduler(db)
    (instance,) = new_instances(db, 1)
    node, _ = sched.select_and_allocate(
        GOLD, instance, live_members={"agent-1"}, exclude_nodes=[first]
    )
    assert node.uuid == second


# -- no valid node -----------------------------------------------------------------------------


def test_no_valid_node_says_what_each_filter_removed(db: Database) -> None:
    insert_nodes(db, 6, resource_class="silver")
    insert_nodes(db, 2, group="rack-1")
    insert_nodes(db, 3, maintenance=True)
    insert_nodes(db, 1, provision_state="manageable")
    insert_nodes(db, 4, owner="agent-gone")
    insert_nodes(db, 2, owner=None)
    excluded = insert_nodes(db, 1)
    insert_nodes(db, 5, traits=["CUSTOM_FORBIDDEN"])
    insert_nodes(db, 7, capabilities="boot_mode:bios")
    sched = scheduler(db)
    flavor = Flavor(
        name="gold-uefi",
        resource_class="gold",
        forbidden_traits=frozenset({"CUSTOM_FORBIDDEN"}),
        extra_specs={"capabilities:boot_mode": "uefi"},
    )
    (instance,) = new_instances(db, 1)
    with pytest.raises(NoValidNode) as excinfo:
        sched.select_and_allocate(
            flavor, instance, live_members={"agent-1"}, group="", exclude_nodes=excluded
        )
    error = excinfo.value
    assert error.flavor == "gold-uefi"
    assert error.candidates == 31
    assert error.removed == [
        ("ResourceClassFilter", 6),
        ("GroupFilter", 2),
        ("AvailabilityFilter", 4),
        ("TraitsFilter", 5),
        ("LiveOwnerFilter", 6),
        ("RetryFilter", 1),
        ("CapabilitiesFilter", 7),
    ]
    assert str(error) == (
        "no valid node for flavor 'gold-uefi': 31 nodes; ResourceClassFilter removed 6, "
        "GroupFilter removed 2, AvailabilityFilter removed 4, TraitsFilter removed 5, "
        "LiveOwnerFilter removed 6, RetryFilter removed 1, CapabilitiesFilter removed 7"
    )
    assert instance_row(db, instance).node_uuid is None


def test_no_valid_node_counts_the_nodes_that_lack_only_a_live_owner(db: Database) -> None:
    """Those may fit in a moment (an agent re-joins, a peer takes its nodes
    over): the build waits for them instead of failing (see conductor.lifecycle.workers)."""
    insert_nodes(db, 3, owner="agent-gone")
    insert_nodes(db, 2, owner=None)  # not claimed yet
    insert_nodes(db, 4, owner="agent-gone", traits=["CUSTOM_FORBIDDEN"])  # never fit
    insert_nodes(db, 1, owner="agent-gone", resource_class="silver")
    insert_nodes(db, 2, owner="agent-1", maintenance=True)
    sched = scheduler(db)
    flavor = Flavor(
        name="gold-plain", resource_class="gold", forbidden_traits=frozenset({"CUSTOM_FORBIDDEN"})
    )
    with pytest.raises(NoValidNode) as excinfo:
        sched.select_and_allocate(flavor, new_instances(db, 1)[0], live_members={"agent-1"})
    error = excinfo.value
    # Traits are Placement's half: counted before the owners.
    assert dict(error.removed)["TraitsFilter"] == 4
    assert dict(error.removed)["LiveOwnerFilter"] == 5
    assert error.awaiting_owner == 5
    assert str(error).endswith("(5 of them would fit with a live owner)")
    assert NoValidNode(**error.kwargs).awaiting_owner == 5  # as rebuilt over RPC
    assert pickle.loads(pickle.dumps(error)).awaiting_owner == 5

    # Nodes that would not fit even with a live owner: no reason to wait.
    uefi = Flavor(
        name="uefi", resource_class="gold", extra_specs={"capabilities:boot_mode": "uefi"}
    )
    with pytest.raises(NoValidNode) as excinfo:
        sched.select_and_allocate(uefi, new_instances(db, 1)[0], live_members={"agent-1"})
    assert dict(excinfo.value.removed)["LiveOwnerFilter"] == 9
    assert excinfo.value.awaiting_owner == 0
    assert "live owner" not in str(excinfo.value)


def test_no_valid_node_is_explained_once_without_the_lock(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    insert_nodes(db, 5, capabilities="boot_mode:bios")
    insert_nodes(db, 3, owner="agent-gone", capabilities="boot_mode:uefi")
    sched = scheduler(db)
    held: list[bool] = []
    account = Chooser.account

    def watched(self: Chooser, surveyed: Any, request: Any) -> NoValidNode:
        held.append(sched._lock.locked())
        return account(self, surveyed, request)

    monkeypatch.setattr(Chooser, "account", watched)
    uefi = Flavor(
        name="uefi", resource_class="gold", extra_specs={"capabilities:boot_mode": "uefi"}
    )
    with pytest.raises(NoValidNode) as excinfo:
        sched.select_and_allocate(uefi, new_instances(db, 1)[0], live_members={"agent-1"})
    assert held == [False]  # once (not before the refresh too), the lock free
    assert dict(excinfo.value.removed)["CapabilitiesFilter"] == 5
    assert excinfo.value.awaiting_owner == 3


def test_a_node_the_explanation_finds_fitting_is_chosen_after_all(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node freed between the decision and the survey: decide once more, not fail."""
    (free,) = insert_nodes(db, 1)
    sched = scheduler(db)
    choose = Chooser.choose
    missed = iter([True, True])  # the decision, and the one after the refresh

    def late(self: Chooser, index: Any, request: Any) -> Any:
        return None if next(missed, False) else choose(self, index, request)

    monkeypatch.setattr(Chooser, "choose", late)
    node, _ = sched.select_and_allocate(GOLD, new_instances(db, 1)[0], live_members={"agent-1"})
    assert node.uuid == free


# -- coherence with the database -----------------------------------------------------------------


def test_refresh_adds_nodes_that_became_free_and_drops_the_others(db: Database) -> None:
    (resting,) = insert_nodes(db, 1, maintenance=True)
    (working,) = insert_nodes(db, 1)
    sched = scheduler(db)
    sched.refresh()
    assert sched.stats()["free"] == 1

    nodes.set_maintenance(db, resting, False, None)
    nodes.set_maintenance(db, working, True, "broken fan")
    assert sched.refresh() == 2
    assert sched.stats()["free"] == 1
    node, _ = sched.select_and_allocate(GOLD, new_instances(db, 1)[0], live_members={"agent-1"})
    assert node.uuid == resting

    (added,) = insert_nodes(db, 1)
    sched.refresh()
    node, _ = sched.select_and_allocate(GOLD, new_instances(db, 1)[0], live_members={"agent-1"})
    assert node.uuid == added


def test_a_decision_that_finds_no_node_reads_the_changes_before_saying_so(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]
    sched = scheduler(db, refresh_interval=1.0, clock=lambda: now[0])
    with pytest.raises(NoValidNode):
        sched.select_and_allocate(GOLD, new_instances(db, 1)[0], live_members={"agent-1"})
    insert_nodes(db, 1)
    now[0] += 0.5  # within the interval: the decision does not refresh first ...
    reads: list[int] = []
    read = sched._read_freed
    monkeypatch.setattr(sched, "_read_freed", lambda: reads.append(read()) or reads[-1])
    # ... but finding no node it reads the free nodes changed since: the new node.
    sched.select_and_allocate(GOLD, new_instances(db, 1)[0], live_members={"agent-1"})
    assert reads == [1]
    with pytest.raises(NoValidNode):  # none left: one read, then the answer
        sched.select_and_allocate(GOLD, new_instances(db, 1)[0], live_members={"agent-1"})
    # The node just allocated changed since the refresh, but is not free: not read.
    assert reads == [1, 0]


def test_the_read_before_no_valid_node_reads_only_free_nodes(db: Database) -> None:
    now = [100.0]
    sched = scheduler(db, refresh_interval=1.0, clock=lambda: now[0])
    sched.refresh()
    (free,) = insert_nodes(db, 1)
    insert_nodes(db, 1, maintenance=True)
    insert_nodes(db, 1, provision_state="manageable")
    (hosting,) = insert_nodes(db, 1)
    unknown_power = insert_nodes(db, 2)
    with db.transaction() as session:
        session.execute(
            update(NodeModel)
            .where(NodeModel.uuid == hosting)
            .values(instance_uuid=str(uuidlib.uuid4()), provision_state="active")
        )
        for uuid, power_state in zip(unknown_power, (None, ""), strict=True):
            session.execute(
                update(NodeModel).where(NodeModel.uuid == uuid).values(power_state=power_state)
            )
    assert sched._read_freed() == 1
    assert sched.stats()["nodes"] == sched.stats()["free"] == 1
    # The refresh still reads every change since it last read them.
    assert sched.refresh() == 6
    assert sched.stats()["nodes"] == 6 and sched.stats()["free"] == 1
    node, _ = sched.select_and_allocate(GOLD, new_instances(db, 1)[0], live_members={"agent-1"})
    assert node.uuid == free


class _StopAfter(threading.Event):
    """A stop event that is set once :meth:`wait` was called *passes* times,
    after running *between* at each of those calls."""

    def __init__(self, passes: int, between: Any = lambda: None) -> None:
        super().__init__()
        self.passes, self.between, self.waits = passes, between, []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        self.between()
        if len(self.waits) >= self.passes:
            self.set()
        return self.is_set()


def test_keep_fresh_builds_the_index_and_refreshes_it_without_any_decision(db: Database) -> None:
    now = [100.0]
    sched = scheduler(db, refresh_interval=1.0, clock=lambda: now[0])
    insert_nodes(db, 2)

    def between() -> None:  # a node added, then the interval passes
        insert_nodes(db, 1)
        now[0] += 1.5

    stopped = _StopAfter(2, between)
    sched.keep_fresh(stopped)
    assert stopped.waits == [1.0, 1.0]
    # Built with 2, refreshed with the third; the fourth came after the last pass.
    assert sched.stats()["nodes"] == sched.stats()["free"] == 3


def test_keep_fresh_survives_a_failed_pass_and_waits_at_least_half_a_second(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    sched = scheduler(db, refresh_interval=0.0)
    insert_nodes(db, 1)
    calls = []
    real = source.load_all

    def failing_once(database: Database) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return real(database)

    monkeypatch.setattr(source, "load_all", failing_once)
    stopped = _StopAfter(2)
    sched.keep_fresh(stopped)
    assert stopped.waits == [0.5, 0.5]
    assert len(calls) == 2 and sched.stats()["nodes"] == 1


def test_periodic_resync_forgets_deleted_nodes(db: Database) -> None:
    now = [100.0]
    sched = scheduler(db, refresh_interval=1.0, resync_interval=60.0, clock=lambda: now[0])
    gone, kept = insert_nodes(db, 2)
    sched.refresh()
    with db.transaction() as session:
        session.execute(delete(NodeModel).where(NodeModel.uuid == gone))
    now[0] += 2
    sched.refresh()  # an incremental refresh cannot see a deletion
    assert sched.stats()["nodes"] == 2
    now[0] += 60
    node, _ = sched.select_and_allocate(GOLD, new_instances(db, 1)[0], live_members={"agent-1"})
    assert node.uuid == kept
    assert sched.stats()["nodes"] == 1


def test_a_change_within_the_overlap_is_seen(db: Database) -> None:
    (node_uuid,) = insert_nodes(db, 1, maintenance=True)
    sched = scheduler(db, refresh_overlap=2.0)
    sched.refresh()
    # A transaction that started (and stamped its row) a second before the
    # previous refresh, but committed after it.
    late = utcnow() - datetime.timedelta(seconds=1)
    with db.transaction() as session:
        session.execute(
            update(NodeModel)
            .where(NodeModel.uuid == node_uuid)
            .values(maintenance=False, updated_at=late)
        )
    sched.refresh()
    assert sched.stats()["free"] == 1


def test_node_allocated_by_another_conductor_is_skipped_and_dropped(db: Database) -> None:
    (preferred,) = insert_nodes(db, 1, owner="agent-1")
    busy = insert_nodes(db, 3, owner="agent-2")
    pin(db, busy[:2], "agent-2")  # so the spread weigher prefers agent-1's node
    sched = scheduler(db)
    sched.refresh()
    # Another conductor takes the preferred node; this one has not refreshed.
    (theirs, ours) = new_instances(db, 2)
    assert allocations.allocate(db, preferred, theirs) is not None

    node, _ = sched.select_and_allocate(GOLD, ours, live_members={"agent-1", "agent-2"})
    assert node.uuid == busy[2]
    assert sched.lost_races == 1
    assert sched.stats()["free"] == 0
    assert sched.stats()["allocated"] == 4  # learnt the other conductor's allocation

    # Nothing left: the explanation counts the lost node as unavailable.
    with pytest.raises(NoValidNode) as excinfo:
        sched.select_and_allocate(GOLD, new_instances(db, 1)[0], live_members={"agent-1"})
    assert dict(excinfo.value.removed)["AvailabilityFilter"] == 4


def test_deleted_node_is_dropped_when_its_allocation_fails(db: Database) -> None:
    (gone,) = insert_nodes(db, 1)
    sched = scheduler(db)
    sched.refresh()
    with db.transaction() as session:
        session.execute(delete(NodeModel).where(NodeModel.uuid == gone))
    with pytest.raises(NoValidNode) as excinfo:
        sched.select_and_allocate(GOLD, new_instances(db, 1)[0], live_members={"agent-1"})
    assert excinfo.value.candidates == 0
    assert sched.lost_races == 1


def test_node_whose_owner_is_gone_is_given_back(db: Database) -> None:
    (node_uuid,) = insert_nodes(db, 1, owner="agent-1")
    sched = scheduler(db)
    sched.refresh()
    # The node moved to an agent that has left since; the index has not seen it.
    with db.transaction() as session:
        session.execute(
            update(NodeModel).where(NodeModel.uuid == node_uuid).values(owner="agent-9")
        )
    (instance,) = new_instances(db, 1)
    with pytest.raises(NoValidNode) as excinfo:
        sched.select_and_allocate(GOLD, instance, live_members={"agent-1"})
    assert dict(excinfo.value.removed)["LiveOwnerFilter"] == 1
    row = node_row(db, node_uuid)
    assert (row.instance_uuid, row.provision_state) == (None, "available")
    assert instance_row(db, instance).node_uuid is None
    assert sched.stats()["free"] == 1


def test_instance_no_longer_waiting_is_a_conflict(db: Database) -> None:
    (node_uuid,) = insert_nodes(db, 1)
    sched = scheduler(db)
    (active,) = new_instances(db, 1, vm_state="active")
    with pytest.raises(Conflict) as excinfo:
        sched.select_and_allocate(GOLD, active, live_members={"agent-1"})
    assert excinfo.value.field == "instance_uuid"
    assert excinfo.value.value == active
    with pytest.raises(Conflict):
        sched.select_and_allocate(GOLD, str(uuidlib.uuid4()), live_members={"agent-1"})
    # The node is untouched, and still free in the index.
    assert node_row(db, node_uuid).instance_uuid is None
    assert sched.stats()["free"] == 1
    node, _ = sched.select_and_allocate(GOLD, new_instances(db, 1)[0], live_members={"agent-1"})
    assert node.uuid == node_uuid


def test_failed_allocation_puts_the_node_back(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    (node_uuid,) = insert_nodes(db, 1)
    sched = scheduler(db)
    sched.refresh()
    real = allocations.allocate

    def broken(*args: Any) -> Any:
        monkeypatch.setattr(allocations, "allocate", real)
        raise RuntimeError("database went away")

    monkeypatch.setattr(allocations, "allocate", broken)
    (instance,) = new_instances(db, 1)
    with pytest.raises(RuntimeError):
        sched.select_and_allocate(GOLD, instance, live_members={"agent-1"})
    assert sched.stats()["free"] == 1
    node, _ = sched.select_and_allocate(GOLD, instance, live_members={"agent-1"})
    assert node.uuid == node_uuid


def test_a_refresh_read_before_a_local_allocation_does_not_undo_it(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    (node_uuid,) = insert_nodes(db, 1)
    sched = scheduler(db)
    sched.refresh()
    nodes.set_maintenance(db, node_uuid, False, None)  # a change the next refresh reads
    real = source.changed_pages

    def read_then_allocate(*args: Any, **kwargs: Any) -> Iterator[Any]:
        pages = list(real(*args, **kwargs))  # the node, free
        # Meanwhile another thread of this conductor allocates it.
        sched.select_and_allocate(GOLD, new_instances(db, 1)[0], live_members={"agent-1"})
        return iter(pages)

    monkeypatch.setattr(source, "changed_pages", read_then_allocate)
    sched.refresh()
    assert sched.stats()["free"] == 0
    monkeypatch.setattr(source, "changed_pages", real)
    sched.refresh()  # the next refresh reads the allocated row
    assert sched.stats() | {"lost_races": 0} == {
        "nodes": 1,
        "free": 0,
        "buckets": 1,
        "profiles": 0,
        "allocated": 1,
        "lost_races": 0,
    }


def test_update_node_tells_the_index_at_once(db: Database) -> None:
    (node_uuid,) = insert_nodes(db, 1)
    sched = scheduler(db)
    (instance,) = new_instances(db, 1)
    sched.select_and_allocate(GOLD, instance, live_members={"agent-1"})
    assert allocations.give_back(db, node_uuid, instance)
    sched.update_node(nodes.get_node(db, node_uuid))
    assert sched.stats()["free"] == 1


# -- the lean reads ------------------------------------------------------------------------------


def test_source_nodes_equal_the_database_layer_nodes(db: Database) -> None:
    insert_nodes(db, 3, traits=["HW_A", "HW_B"], capabilities="boot_mode:uefi,cpus:8")
    insert_nodes(db, 2, owner=None, maintenance=True, capabilities="")
    insert_nodes(db, 1, group="rack-1", provision_state="enroll")
    pin(db, insert_nodes(db, 1, resource_class="silver"), "agent-1")
    expected = {n.uuid: n for n in nodes.iter_nodes(db)}
    loaded = dict((node.uuid, (node, key)) for node, key in source.load_all(db, page=2))
    assert set(loaded) == set(expected)
    for node_uuid, (node, key) in loaded.items():
        want = dataclasses.replace(expected[node_uuid], created_at=None, updated_at=None)
        assert node == want
        assert key == hardware_key(want)
    changed = [n.uuid for n, _ in source.load_changed(db, datetime.datetime.min, page=2)]
    assert sorted(changed) == sorted(expected)


def test_load_changed_pages_through_equal_timestamps(db: Database) -> None:
    uuids = insert_nodes(db, 7)
    stamp = utcnow()
    with db.transaction() as session:
        session.execute(update(NodeModel).values(updated_at=stamp))
    changed = [n.uuid for n, _ in source.load_changed(db, stamp, page=3)]
    assert sorted(changed) == sorted(uuids)
    later = stamp + datetime.timedelta(seconds=1)
    assert list(source.load_changed(db, later)) == []


# -- two conductors racing -----------------------------------------------------------------------


def test_two_schedulers_racing_never_double_allocate(db: Database) -> None:
    for agent in ("agent-1", "agent-2", "agent-3"):
        insert_nodes(db, 20, owner=agent)
    instances = new_instances(db, 90)
    conductors = [scheduler(Database(db.url)) for _ in range(2)]
    for conductor in conductors:
        conductor.refresh()  # both see every node free, and never refresh again
    live = {"agent-1", "agent-2", "agent-3"}
    results: list[tuple[str, str]] = []
    failures: list[BaseException] = []
    barrier = threading.Barrier(6)

    def work(conductor: Scheduler, mine: list[str]) -> None:
        barrier.wait()
        for instance in mine:
            try:
                node, _ = conductor.select_and_allocate(GOLD, instance, live_members=live)
            except NoValidNode:
                continue
            except BaseException as exc:  # pragma: no cover - reported below
                failures.append(exc)
                return
            results.append((node.uuid, instance))

    threads = [
        threading.Thread(target=work, args=(conductors[t % 2], instances[t::6])) for t in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures
    assert len(results) == 60
    assert len({node for node, _ in results}) == 60  # no node twice
    with db.transaction() as session:
        placed = {
            row[0]: row[1]
            for row in session.execute(
                select(InstanceModel.uuid, InstanceModel.node_uuid).where(
                    InstanceModel.node_uuid.is_not(None)
                )
            )
        }
        hosting = {
            row[0]: row[1]
            for row in session.execute(
                select(NodeModel.uuid, NodeModel.instance_uuid).where(
                    NodeModel.instance_uuid.is_not(None)
                )
            )
        }
    assert placed == {instance: node for node, instance in results}
    assert hosting == dict(results)
    assert sum(c.lost_races for c in conductors) > 0  # they did collide
    for conductor in conductors:
        conductor._db.dispose()
