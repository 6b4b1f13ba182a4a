# SPDX-License-Identifier: Apache-2.0
"""The power-state sync on SQLite: an idle instance follows its node's power
found changed outside ringfleet, a concurrent verb wins, fleet check reports
a mismatch that persists; and the Ironic sync's part, against the fake Ironic."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from conductor import power_sync
from conductor.common.instance_states import Event
from conductor.common.objects import PowerState, TaskState, VmState
from conductor.db import instances, node_states, nodes, power_states
from conductor.db.engine import Database
from conductor.db.models import InstanceModel, NodeModel, utcnow
from conductor.endpoints.fleet import FleetEndpoint, problem_counts
from conductor.fleet_view import FleetView
from conductor.ironic_sync import IronicInventorySync
from conductor.notifications import Notifier
from conductor.power_sync import InstancePowerSync, report_after
from tests.dbutil import add_nodes, migrated, pin
from tests.endpoint_stubs import StubMembership
from tests.unit.test_ironic_driver import FakeIronic
from tests.unit.test_ironic_sync import add, make_conf
from tests.unit.test_notifications import Sent

CTXT: dict[str, Any] = {"request_id": "req-test"}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    yield database
    database.dispose()


def hosted(db: Database, power: PowerState, vm_state: VmState = VmState.ACTIVE) -> tuple[str, str]:
    """An idle instance in ``vm_state`` on a node recorded ``power``; (instance, node)."""
    [node] = add_nodes(db, 1, owner="agent-1")
    [instance] = pin(db, [node], "agent-1")
    with db.transaction() as session:
        session.execute(
            update(InstanceModel)
            .where(InstanceModel.uuid == instance)
            .values(vm_state=vm_state.value)
        )
        session.execute(
            update(NodeModel).where(NodeModel.uuid == node).values(power_state=power.value)
        )
    return instance, node


def age(db: Database, seconds: float, *instance_or_node: str) -> None:
    """Date the last change of these instance and node records ``seconds`` ago."""
    then = utcnow() - datetime.timedelta(seconds=seconds)
    with db.transaction() as session:
        for model in (InstanceModel, NodeModel):
            session.execute(
                update(model).where(model.uuid.in_(instance_or_node)).values(updated_at=then)
            )


def state(db: Database, instance: str) -> tuple[VmState, TaskState | None]:
    found = instances.get_instance(db, instance)
    return found.vm_state, found.task_state


# -- the records ------------------------------------------------------------------------


def test_mismatches_are_idle_instances_whose_state_disagrees_with_their_nodes_power(
    db: Database,
) -> None:
    off, off_node = hosted(db, PowerState.OFF)
    on, on_node = hosted(db, PowerState.ON, VmState.STOPPED)
    hosted(db, PowerState.ON)  # active and on: fine
    hosted(db, PowerState.OFF, VmState.STOPPED)  # stopped and off: fine
    busy, _ = hosted(db, PowerState.OFF)
    instances.set_state(db, busy, Event.STOP)  # a stop in flight owns the power
    total, found = power_states.power_mismatches(db)
    assert total == 2
    assert {(m.instance_uuid, m.vm_state, m.node_uuid, m.power_state) for m in found} == {
        (off, "active", off_node, "power off"),
        (on, "stopped", on_node, "power on"),
    }
    # Records changed since the bound are left for later.
    age(db, 60, off, off_node)
    bound = utcnow() - datetime.timedelta(seconds=30)
    quiet = power_states.power_mismatches(db, unchanged_since=bound)[1]
    assert [m.instance_uuid for m in quiet] == [off]
    assert power_states.power_mismatches(db, node_uuids=[on_node])[1][0].instance_uuid == on
    assert power_states.power_mismatches(db, node_uuids=[])[0] == 0


def test_found_off_is_a_compare_and_swap_on_the_record_unchanged_since_the_observation(
    db: Database,
) -> None:
    instance, node = hosted(db, PowerState.OFF)
    observed_before = utcnow() - datetime.timedelta(seconds=5)
    # The instance changed after the observation: the observation may be older.
    assert not power_states.mark_found_off(db, instance, node, unchanged_since=observed_before)
    assert state(db, instance) == (VmState.ACTIVE, None)
    age(db, 60, instance)
    # The node is powered on again meanwhile: nothing to follow.
    node_states.mirror_back_end_states(
        db, [node_states.BackEndState(node, set_power=True, power_state=PowerState.ON)]
    )
    assert not power_states.mark_found_off(db, instance, node, unchanged_since=utcnow())
    node_states.mirror_back_end_states(
        db, [node_states.BackEndState(node, set_power=True, power_state=PowerState.OFF)]
    )
    assert power_states.mark_found_off(db, instance, node, unchanged_since=utcnow())
    assert state(db, instance) == (VmState.STOPPED, None)
    # Once: the second write finds it stopped.
    assert not power_states.mark_found_off(db, instance, node, unchanged_since=utcnow())


# -- the sync -------------------------------------------------------------------------------


def test_a_quiet_active_instance_found_off_is_stopped_logged_and_notified_then_starts(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    instance, node = hosted(db, PowerState.OFF)
    fresh, fresh_node = hosted(db, PowerState.OFF)  # changed just now: the next pass's
    age(db, 120, instance, node)
    sent = Sent()
    notifier = Notifier(sent, db)
    sync = InstancePowerSync(db, notifier)
    with caplog.at_level(logging.INFO, logger="conductor.power_sync"):
        summary = sync.run(60.0)
    notifier.close()
    assert (summary.stopped, summary.found_on) == (1, 0)
    assert state(db, instance) == (VmState.STOPPED, None)
    assert state(db, fresh) == (VmState.ACTIVE, None)
    lines = [r for r in caplog.records if r.name == "conductor.power_sync"]
    assert [r.levelno for r in lines] == [logging.INFO]
    assert instance in lines[0].getMessage() and node in lines[0].getMessage()
    assert sent.types(instance) == ["instance.power_off.end"]
    assert sent.data("instance.power_off.end")[0]["vm_state"] == "stopped"
    # Now a start is a verb like any other.
    assert instances.set_state(db, instance, Event.START)
    assert state(db, instance) == (VmState.STOPPED, TaskState.POWERING_ON)
    # A second pass changes nothing more.
    assert sync.run(60.0).stopped == 0
    del fresh_node


def test_stopped_instances_found_on_never_keep_active_ones_found_off_waiting(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Those found on stay (reported): a pass takes its share of each kind."""
    monkeypatch.setattr(power_sync, "MAX_PER_PASS", 1)
    for _ in range(2):
        age(db, 600, *hosted(db, PowerState.ON, VmState.STOPPED))
    instance, node = hosted(db, PowerState.OFF)
    age(db, 120, instance, node)
    assert InstancePowerSync(db).run(60.0).stopped == 1
    assert state(db, instance) == (VmState.STOPPED, None)


@pytest.mark.parametrize("verb", [Event.STOP, Event.REBOOT_HARD, Event.REBUILD, Event.DELETE])
def test_a_verb_issued_between_the_read_and_the_write_wins(
    db: Database, verb: Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: the pass read the mismatch, a user's verb lands, then the
    pass writes: its compare-and-swap finds the task state (or the newer
    record) and changes nothing; the verb goes on as if the pass had not run."""
    instance, node = hosted(db, PowerState.OFF)
    age(db, 120, instance, node)
    read = power_states.power_mismatches

    def read_then_verb(*args: Any, **kwargs: Any) -> Any:
        found = read(*args, **kwargs)
        assert instances.set_state(db, instance, verb)
        return found

    monkeypatch.setattr(power_states, "power_mismatches", read_then_verb)
    before = state(db, instance)
    assert InstancePowerSync(db).run(60.0).stopped == 0
    after = state(db, instance)
    assert after != before and after[0] is not VmState.STOPPED
    assert after[1] is not None  # the verb's task is in flight, untouched


def test_the_answer_of_a_stop_found_by_the_pass_still_ends_it(db: Database) -> None:
    """A stop in flight whose node is already off: the pass leaves it, the
    stop's own answer ends it (POWERED_OFF), once."""
    instance, node = hosted(db, PowerState.OFF)
    assert instances.set_state(db, instance, Event.STOP)
    age(db, 120, instance, node)
    assert InstancePowerSync(db).run(60.0).stopped == 0
    assert instances.set_state(db, instance, Event.POWERED_OFF, task_state=TaskState.POWERING_OFF)
    assert state(db, instance) == (VmState.STOPPED, None)


def test_a_stopped_instance_found_on_is_reported_once_not_acted_on(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    instance, node = hosted(db, PowerState.ON, VmState.STOPPED)
    age(db, 120, instance, node)
    sync = InstancePowerSync(db)
    with caplog.at_level(logging.INFO, logger="conductor.power_sync"):
        assert sync.run(60.0).found_on == 1
        assert sync.run(60.0).found_on == 1
        # A pass that leaves it out (records changed lately) does not end it.
        assert sync.run(3600.0).found_on == 0
        assert sync.run(60.0).found_on == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert instance in warnings[0].getMessage() and node in warnings[0].getMessage()
    assert state(db, instance) == (VmState.STOPPED, None)
    # Once it ends (powered off again) and comes back, it is said again.
    node_states.mirror_back_end_states(
        db, [node_states.BackEndState(node, set_power=True, power_state=PowerState.OFF)]
    )
    assert sync.run(0.0).found_on == 0
    node_states.mirror_back_end_states(
        db, [node_states.BackEndState(node, set_power=True, power_state=PowerState.ON)]
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="conductor.power_sync"):
        assert sync.run(0.0).found_on == 1
    assert len(caplog.records) == 1


def test_an_agents_report_of_power_off_stops_the_instance_once_quiet(db: Database) -> None:
    """The polled path: an agent's report records the power; the periodic
    pass acts once instance and node have been unchanged for its interval
    (a report that crossed an action's answer is corrected by then)."""
    instance, node = hosted(db, PowerState.ON)
    epoch = nodes.get_node(db, node).owner_epoch
    age(db, 120, instance)
    report: node_states.StateReport = {
        "node_uuid": node,
        "epoch": epoch,
        "power_state": PowerState.OFF.value,
        "provision_state": None,
    }
    assert node_states.record_node_states(db, "agent-1", [report]).stale == []
    sync = InstancePowerSync(db)
    assert sync.run(60.0).stopped == 0  # the node record changed just now
    age(db, 120, node)
    assert sync.run(60.0).stopped == 1
    assert state(db, instance) == (VmState.STOPPED, None)


# -- with Ironic ------------------------------------------------------------------------------


def ironic_fleet(
    tmp_path: Path, db: Database, ironic: FakeIronic, power: str = "power on"
) -> tuple[IronicInventorySync, str, str]:
    """One node imported from Ironic, deployed with an instance; (sync, instance, node)."""
    node = add(ironic, "n1", provision_state="active", power_state=power)
    sync = IronicInventorySync(
        db,
        make_conf(tmp_path),
        client=ironic,  # type: ignore[arg-type]
        power_sync=InstancePowerSync(db),
    )
    sync.run()
    [instance] = pin(db, [node.uuid], "agent-1")
    with db.transaction() as session:
        session.execute(
            update(NodeModel).where(NodeModel.uuid == node.uuid).values(owner="agent-1")
        )
    node.change(instance_uuid=instance)
    age(db, 60, instance, node.uuid)
    return sync, instance, node.uuid


def test_an_ironic_pass_stops_an_instance_whose_node_was_powered_off_in_ironic(
    tmp_path: Path, db: Database
) -> None:
    ironic = FakeIronic()
    sync, instance, node = ironic_fleet(tmp_path, db, ironic)
    assert sync.run().stopped == 0
    ironic.nodes[node].change(power_state="power off")
    summary = sync.run()
    assert summary.stopped == 1 and summary.to_dict()["stopped"] == 1
    assert state(db, instance) == (VmState.STOPPED, None)
    assert nodes.get_node(db, node).power_state is PowerState.OFF


@pytest.mark.parametrize(
    "ironic_shows",
    [
        {"power_state": "power off", "target_power_state": "power on"},  # Ironic is on it
        {"power_state": "power off", "provision_state": "deploying"},  # not deployed
    ],
)
def test_an_ironic_pass_leaves_a_node_whose_power_is_not_settled(
    tmp_path: Path, db: Database, ironic_shows: dict[str, str]
) -> None:
    ironic = FakeIronic()
    sync, instance, node = ironic_fleet(tmp_path, db, ironic)
    ironic.nodes[node].change(**ironic_shows)
    assert sync.run().stopped == 0
    assert state(db, instance) == (VmState.ACTIVE, None)


def test_an_ironic_listing_older_than_a_start_does_not_stop_it(
    tmp_path: Path, db: Database
) -> None:
    """The listing shows the node off; a user's start ends (node on, instance
    active) after the listing began: the instance is newer than what was
    listed, and the node's power is not mirrored back to off."""
    ironic = FakeIronic()
    sync, instance, node = ironic_fleet(tmp_path, db, ironic, power="power off")
    with db.transaction() as session:
        session.execute(
            update(InstanceModel).where(InstanceModel.uuid == instance).values(vm_state="stopped")
        )
    age(db, 60, instance, node)
    assert instances.set_state(db, instance, Event.START)
    listing = ironic.list_nodes

    def list_then_start(*args: Any, **kwargs: Any) -> Any:
        found = list(listing(*args, **kwargs))
        # The start's answer, as the conductor records it.
        ironic.nodes[node].change(power_state="power on")
        node_states.record_node_states(
            db,
            "agent-1",
            [
                {
                    "node_uuid": node,
                    "epoch": nodes.get_node(db, node).owner_epoch,
                    "power_state": "power on",
                    "provision_state": None,
                }
            ],
        )
        assert instances.set_state(db, instance, Event.POWERED_ON, task_state=TaskState.POWERING_ON)
        return found

    ironic.list_nodes = list_then_start  # type: ignore[method-assign]
    assert sync.run().stopped == 0
    assert state(db, instance) == (VmState.ACTIVE, None)
    assert nodes.get_node(db, node).power_state is PowerState.ON


def test_an_instance_changed_after_the_listing_began_is_the_next_passs(
    tmp_path: Path, db: Database
) -> None:
    """A reboot's answer lands while the pass lists (the node's record not
    rewritten): the listing may predate the power-on, so this pass leaves
    the instance; the next listing decides."""
    ironic = FakeIronic()
    sync, instance, node = ironic_fleet(tmp_path, db, ironic)
    ironic.nodes[node].change(power_state="power off")
    assert instances.set_state(db, instance, Event.REBOOT_HARD)
    assert sync.run().stopped == 0  # a reboot in flight owns the power
    listing = ironic.list_nodes

    def list_then_answer(*args: Any, **kwargs: Any) -> Any:
        found = list(listing(*args, **kwargs))
        assert instances.set_state(
            db, instance, Event.POWERED_ON, task_state=TaskState.REBOOTING_HARD
        )
        return found

    ironic.list_nodes = list_then_answer  # type: ignore[method-assign]
    assert sync.run().stopped == 0
    assert state(db, instance) == (VmState.ACTIVE, None)
    ironic.list_nodes = listing  # type: ignore[method-assign]
    assert sync.run().stopped == 1  # still off in Ironic at a listing after the answer


# -- fleet check ----------------------------------------------------------------------------


def test_fleet_check_reports_a_power_mismatch_that_persists(db: Database) -> None:
    fleet = FleetView(db)
    fleet.attach(StubMembership())  # type: ignore[arg-type]
    endpoint = FleetEndpoint(db, fleet, "cond-1", power_mismatch_after=lambda: 60.0)
    on, on_node = hosted(db, PowerState.ON, VmState.STOPPED)
    off, _off_node = hosted(db, PowerState.OFF)

    def power_problems() -> list[dict[str, Any]]:
        found = endpoint.fleet_check(CTXT)["problems"]
        return [p for p in found if p["kind"] == "power-mismatch"]

    assert power_problems() == []  # just changed: the sync's to settle
    assert problem_counts(db, fleet, 600.0, power_mismatch_after=60.0)["power-mismatch"] == 0
    age(db, 120, on, on_node)
    [problem] = power_problems()
    assert (problem["instance_uuid"], problem["node_uuid"]) == (on, on_node)
    assert "stopped" in problem["message"] and "power on" in problem["message"]
    assert problem_counts(db, fleet, 600.0, power_mismatch_after=60.0)["power-mismatch"] == 1
    del off


def test_fleet_check_waits_two_passes_of_the_slower_sync() -> None:
    assert report_after(120.0, 0.0, 600.0) == 240.0
    assert report_after(10.0, 30.0, 600.0) == 60.0
    assert report_after(0.0, 0.0, 600.0) == 600.0
