# SPDX-License-Identifier: Apache-2.0
"""The conductor's build flow: BuildLifecycle with the real Scheduler on SQLite, and AgentRouter.

Agents are not involved: a recording router stands for them in the build
worker tests (results are reported by hand, as the agent would), and a fake
ComputeAPI stands for the RPC client in the router tests.  Delays of the
retry timers are recorded and compressed, so nothing sleeps for seconds.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import oslo_messaging as messaging
import pytest
from sqlalchemy import update

from conductor.common.exception import (
    ConfigurationError,
    Conflict,
    DatabaseUnavailable,
    NodeNotBuildable,
    NotOwner,
)
from conductor.common.instance_states import Event
from conductor.common.objects import Instance, Node, Ownership, ProvisionState, TaskState, VmState
from conductor.db import allocations, flavors, instance_sweeps, instances, nodes, ownership
from conductor.db.engine import Database
from conductor.db.models import InstanceModel, NodeModel, utcnow
from conductor.db.ownership import Fence
from conductor.endpoints.inventory import InventoryEndpoint
from conductor.fleet_view import FleetView
from conductor.lifecycle import BuildLifecycle
from conductor.lifecycle.routing import AgentRouter
from conductor.notifications import Notifier
from conductor.scheduler.scheduler import Scheduler
from conductor.validation import validate_build_request, validate_flavor_spec
from hashring.membership import Member, MembershipView, State
from tests.dbutil import add_nodes, migrated

AGENTS = ("a1", "a2")


# -- helpers ---------------------------------------------------------------------------


class StubMembership:
    """What FleetView asks its membership: the connection state, and
    whether its back end fails."""

    def __init__(self) -> None:
        self.state = State.CONNECTED
        self.backend_failing = False


def view_of(*hosts: str) -> MembershipView:
    return MembershipView(
        members={h: Member(h, 1, 1.0) for h in hosts}, excluded={}, ring_version=1
    )


def wait_for(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.005)


@dataclass
class RecordingRouter:
    """Agents that accept every build and report later (by the test)."""

    routed: list[tuple[str, str, str | None, int]] = field(default_factory=list)
    destroyed: list[str] = field(default_factory=list)
    destroy_answers: list[bool] = field(default_factory=list)  # then True
    lock: threading.Lock = field(default_factory=threading.Lock)

    def route(self, instance: Instance, node: Node, claim: Ownership) -> None:
        with self.lock:
            self.routed.append((instance.uuid, node.uuid, claim.owner, claim.epoch))

    def destroy(self, instance: Instance) -> bool:
        with self.lock:
            self.destroyed.append(instance.uuid)
            return self.destroy_answers.pop(0) if self.destroy_answers else True

    def routes_of(self, instance: str) -> list[tuple[str, str | None, int]]:
        with self.lock:
            return [(n, o, e) for i, n, o, e in self.routed if i == instance]


@dataclass
class Flow:
    db: Database
    fleet: FleetView
    membership: StubMembership
    scheduler: Scheduler
    router: RecordingRouter
    builds: BuildLifecycle
    nodes: list[str]
    delays: list[tuple[float, str]]

    def build(self) -> str:
        [instance], _ = instances.create_instances(
            self.db, validate_build_request({"flavor": "small"})
        )
        self.builds.submit([instance.uuid])
        return instance.uuid

    def instance(self, uuid: str) -> Instance:
        return instances.get_instance(self.db, uuid)

    def node(self, uuid: str) -> Node:
        return nodes.get_node(self.db, uuid)

    def wait_routes(self, instance: str, count: int) -> tuple[str, str | None, int]:
        wait_for(lambda: len(self.router.routes_of(instance)) >= count)
        return self.router.routes_of(instance)[count - 1]

    def age(self, instance: str, seconds: float = 3600.0) -> None:
        with self.db.transaction() as session:
            session.execute(
                update(InstanceModel)
                .where(InstanceModel.uuid == instance)
                .values(updated_at=utcnow() - datetime.timedelta(seconds=seconds))
            )


@pytest.fixture
def fast_timers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, str]]:
    """Retry timers of the build queue fire 50x sooner; their (delay, action) are recorded."""
    return compress_timers(monkeypatch)


def compress_timers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, str]]:
    """What :func:`fast_timers` does (for other modules' fixtures)."""
    recorded: list[tuple[float, str]] = []
    real = threading.Timer

    def timer(delay: float, function: Callable[[], None]) -> threading.Timer:
        action = "?"
        cell = getattr(function, "__closure__", None) or ()
        for c in cell:
            if isinstance(c.cell_contents, str) and c.cell_contents in (
                "build",
                "route",
                "delete",
                "resume",
            ):
                action = c.cell_contents
        recorded.append((delay, action))
        return real(delay / 50, function)

    monkeypatch.setattr(threading, "Timer", timer)  # as conductor.lifecycle.queue uses it
    return recorded


@contextlib.contextmanager
def make_flow(
    tmp_path: Path,
    delays: list[tuple[float, str]],
    *,
    node_count: int = 4,
    max_attempts: int = 3,
    owner_wait: float = 0.0,
    routed: bool = True,
    notifier: Callable[[Database], Notifier] | None = None,
    clean_late_deploy: Callable[[Node, str], bool] | None = None,
) -> Iterator[Flow]:
    """``notifier``: makes the notifier of the builds from the flow's database;
    ``clean_late_deploy``: stands for the owner asked to tear down a deploy
    given up (the builds' ``clean_late_deploy``)."""
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    membership = StubMembership()
    fleet = FleetView(db)
    fleet.attach(membership)  # type: ignore[arg-type]
    fleet.on_change(view_of(*AGENTS))
    uuids = add_nodes(db, node_count)
    half = node_count // 2
    for agent, share in (("a1", uuids[:half]), ("a2", uuids[half:])):
        ownership.claim_nodes(db, agent, share, live_members=AGENTS, rehome_grace=60)
    flavors.create_flavor(
        db, validate_flavor_spec({"name": "small", "resource_class": "baremetal"})
    )
    scheduler = Scheduler(db, refresh_interval=0)
    router = RecordingRouter()
    workers = BuildLifecycle(
        db,
        scheduler,
        fleet,
        workers=2,
        router=router if routed else None,
        max_attempts=lambda: max_attempts,
        owner_wait=lambda: owner_wait,
        notifier=None if notifier is None else notifier(db),
        clean_late_deploy=clean_late_deploy,
    )
    workers.start()
    try:
        yield Flow(db, fleet, membership, scheduler, router, workers, uuids, delays)
    finally:
        workers.stop()
        db.dispose()


@pytest.fixture
def flow(tmp_path: Path, fast_timers: list[tuple[float, str]]) -> Iterator[Flow]:
    with make_flow(tmp_path, fast_timers) as made:
        yield made


# -- build, route, report --------------------------------------------------------------


def test_builds_are_allocated_and_routed_with_the_owners_claim(flow: Flow) -> None:
    built = [flow.build() for _ in range(3)]
    routes = [flow.wait_routes(uuid, 1) for uuid in built]
    assert len({node for node, _, _ in routes}) == 3  # one instance per node
    for uuid, (node, owner, epoch) in zip(built, routes, strict=True):
        own = ownership.ownership_of(flow.db, [node])[node]
        assert (owner, epoch) == (own.owner, own.epoch)
        instance = flow.instance(uuid)
        assert (instance.vm_state, instance.task_state) == (VmState.BUILDING, TaskState.SPAWNING)
        assert (instance.node_uuid, instance.host) == (node, owner)
        placed = flow.node(node)
        assert placed.instance_uuid == uuid
        assert placed.provision_state is ProvisionState.DEPLOYING
    assert len(flow.router.routed) == 3  # each routed once


def test_a_definitive_refusal_reschedules_at_once_with_the_reason(flow: Flow) -> None:
    uuid = flow.build()
    node, owner, epoch = flow.wait_routes(uuid, 1)
    assert owner is not None
    flow.builds.refused(
        uuid, node, "refused by agent a1: node hosts instance X", Fence(owner, epoch)
    )
    second, _, _ = flow.wait_routes(uuid, 2)  # rescheduled, not waiting for a timeout
    assert second != node
    instance = flow.instance(uuid)
    assert instance.attempts == 1 and "node hosts instance X" in (instance.fault or "")
    assert flow.node(node).provision_state is ProvisionState.ERROR  # for an operator to see
    assert flow.node(node).instance_uuid is None


# -- the conductor's fence: no report acts after a takeover ---------------------------


def _take_over(flow: Flow, node: str, instance: str) -> tuple[str, int]:
    """What a re-home does: another agent owns the pinned node at a new epoch."""
    current = flow.node(node)
    other = "a2" if current.owner == "a1" else "a1"
    with flow.db.transaction() as session:
        session.execute(
            update(NodeModel)
            .where(NodeModel.uuid == node)
            .values(owner=other, owner_epoch=current.owner_epoch + 1)
        )
        session.execute(
            update(InstanceModel).where(InstanceModel.uuid == instance).values(host=other)
        )
    return other, current.owner_epoch + 1


def _racing_a_takeover(
    flow: Flow, monkeypatch: pytest.MonkeyPatch, write: str, node: str, instance: str
) -> None:
    """The node is taken over just before ``allocations.<write>`` runs.

    That is the window of a check-then-write fence: the report was checked
    against the old owner, then written after the takeover.
    """
    real = getattr(allocations, write)

    def after_a_takeover(*args: Any, **kwargs: Any) -> Any:
        _take_over(flow, node, instance)
        monkeypatch.setattr(allocations, write, real)  # once
        return real(*args, **kwargs)

    monkeypatch.setattr(allocations, write, after_a_takeover)


def test_a_failure_report_racing_a_takeover_changes_nothing(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    uuid = flow.build()
    node, owner, epoch = flow.wait_routes(uuid, 1)
    assert owner is not None
    _racing_a_takeover(flow, monkeypatch, "fail_attempt", node, uuid)
    assert not flow.builds.report_result(
        owner, uuid, node, epoch, success=False, fault="bmc", node_clean=True
    )
    # The new owner's build goes on: the node is still the instance's.
    instance = flow.instance(uuid)
    assert (instance.node_uuid, instance.attempts, instance.fault) == (node, 0, None)
    assert flow.node(node).instance_uuid == uuid
    assert len(flow.router.routes_of(uuid)) == 1  # not rescheduled


def test_a_definitive_refusal_racing_a_takeover_changes_nothing(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    uuid = flow.build()
    node, owner, epoch = flow.wait_routes(uuid, 1)
    assert owner is not None
    _racing_a_takeover(flow, monkeypatch, "fail_attempt", node, uuid)
    flow.builds.refused(uuid, node, "refused by agent: node hosts instance X", Fence(owner, epoch))
    instance = flow.instance(uuid)
    assert (instance.node_uuid, instance.attempts) == (node, 0)
    assert flow.node(node).provision_state is ProvisionState.DEPLOYING


def test_a_teardown_report_racing_a_takeover_changes_nothing(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    uuid, node, owner, epoch = _active(flow)
    _request_delete(flow, uuid)
    _racing_a_takeover(flow, monkeypatch, "release", node, uuid)
    assert not flow.builds.report_destroyed(owner, uuid, node, epoch, success=True, fault=None)
    # The new owner has not torn it down: the node still hosts the instance.
    assert flow.node(node).instance_uuid == uuid
    assert flow.instance(uuid).vm_state is VmState.DELETING


def test_a_late_success_for_a_deleted_build_racing_a_takeover_changes_nothing(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    uuid = flow.build()
    node, owner, epoch = flow.wait_routes(uuid, 1)
    assert owner is not None
    _request_delete(flow, uuid)
    _take_over(flow, node, uuid)
    assert not flow.builds.report_result(
        owner, uuid, node, epoch, success=True, fault=None, node_clean=True
    )
    assert flow.node(node).provision_state is ProvisionState.DEPLOYING


def test_a_resumed_agent_gets_its_in_flight_builds_and_teardowns_routed_again(
    flow: Flow,
) -> None:
    built = [flow.build() for _ in range(4)]
    routes = {uuid: flow.wait_routes(uuid, 1) for uuid in built}
    on_a1 = sorted(u for u, (_n, owner, _e) in routes.items() if owner == "a1")
    assert on_a1
    deleting = on_a1[0]
    instances.set_state(flow.db, deleting, Event.DELETE)
    flow.router.destroy_answers.clear()
    assert flow.builds.resume_agent("a1") == (len(on_a1) - 1, 1)
    for uuid in on_a1[1:]:
        flow.wait_routes(uuid, 2)  # routed again
    wait_for(lambda: deleting in flow.router.destroyed)
    others = [u for u in built if u not in on_a1]
    assert all(len(flow.router.routes_of(u)) == 1 for u in others)


def test_re_homed_nodes_get_their_in_flight_builds_and_teardowns_routed_again(
    flow: Flow,
) -> None:
    """A teardown the departed owner accepted but never reported is re-driven
    when its node is re-homed, like a build (it waited for the sweeper)."""
    built = [flow.build() for _ in range(3)]
    routes = {uuid: flow.wait_routes(uuid, 1) for uuid in built}
    deleting, building, untouched = built
    instances.set_state(flow.db, deleting, Event.DELETE)
    flow.router.destroy_answers.clear()
    flow.builds.rehomed([routes[deleting][0], routes[building][0]])
    flow.wait_routes(building, 2)  # routed again
    wait_for(lambda: deleting in flow.router.destroyed)
    assert len(flow.router.routes_of(untouched)) == 1


def test_a_successful_report_makes_the_instance_active(flow: Flow) -> None:
    uuid = flow.build()
    node, owner, epoch = flow.wait_routes(uuid, 1)
    assert owner is not None
    ok = flow.builds.report_result(
        owner, uuid, node, epoch, success=True, fault=None, node_clean=True
    )
    assert ok is True
    instance = flow.instance(uuid)
    assert (instance.vm_state, instance.task_state, instance.node_uuid) == (
        VmState.ACTIVE,
        None,
        node,
    )
    assert flow.node(node).provision_state is ProvisionState.ACTIVE
    # A re-sent result (the agent's answer to a re-route) changes nothing.
    again = flow.builds.report_result(
        owner, uuid, node, epoch, success=True, fault=None, node_clean=True
    )
    assert again is True
    time.sleep(0.05)  # (the queue must not tear an ACTIVE instance down)
    assert flow.instance(uuid).vm_state is VmState.ACTIVE
    assert flow.router.destroyed == []


def test_a_just_stored_build_is_scheduled_without_reading_it_again(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    [stored], _ = instances.create_instances(flow.db, validate_build_request({"flavor": "small"}))
    flavor = flavors.get_flavor(flow.db, "small")

    def no_read(*_args: Any) -> None:
        raise AssertionError("the stored instance was read again")

    monkeypatch.setattr(instances, "get_build", no_read)
    flow.builds.submit_stored([stored], flavor)
    node, owner, _epoch = flow.wait_routes(stored.uuid, 1)
    placed = flow.instance(stored.uuid)
    assert (placed.node_uuid, placed.host, placed.task_state) == (node, owner, TaskState.SPAWNING)


def test_a_stale_stored_copy_allocates_nothing(flow: Flow) -> None:
    """Deleted after it was queued: the allocation's compare-and-swap refuses it."""
    [stored], _ = instances.create_instances(flow.db, validate_build_request({"flavor": "small"}))
    instances.set_state(flow.db, stored.uuid, Event.DELETE)
    flow.builds.submit_stored([stored], flavors.get_flavor(flow.db, "small"))
    flow.builds.stop()  # the queue is FIFO: the copy has been handled
    assert flow.router.routed == []
    assert flow.instance(stored.uuid).node_uuid is None
    assert all(flow.node(n).instance_uuid is None for n in flow.nodes)
    assert all(flow.node(n).provision_state is ProvisionState.AVAILABLE for n in flow.nodes)


def test_a_stale_stored_copy_without_a_valid_node_does_not_fail_a_deleted_instance(
    flow: Flow,
) -> None:
    flavors.create_flavor(
        flow.db, validate_flavor_spec({"name": "none-fit", "resource_class": "nothing"})
    )
    request = validate_build_request({"flavor": "none-fit"})
    [stored], _ = instances.create_instances(flow.db, request)
    instances.set_state(flow.db, stored.uuid, Event.DELETE)
    flow.builds.submit_stored([stored], flavors.get_flavor(flow.db, "none-fit"))
    flow.builds.stop()
    after = flow.instance(stored.uuid)
    assert (after.vm_state, after.attempts, after.fault) == (VmState.DELETING, 0, None)
    # The same request still building fails with the reason.
    [building], _ = instances.create_instances(flow.db, request)
    assert instances.fail_build(flow.db, building.uuid, "x") == 1


def test_stale_reports_are_ignored(flow: Flow) -> None:
    uuid = flow.build()
    node, owner, epoch = flow.wait_routes(uuid, 1)
    assert owner is not None
    other = "a2" if owner == "a1" else "a1"
    spare = next(n for n in flow.nodes if n != node)
    for host, reported_node, held in (
        (owner, node, epoch + 1),  # wrong epoch
        (owner, node, epoch - 1),
        (other, node, epoch),  # wrong host
        (owner, spare, epoch),  # a node that does not host the instance
        (owner, str(uuidlib.uuid4()), epoch),  # no such node
    ):
        for success in (True, False):
            accepted = flow.builds.report_result(
                host, uuid, reported_node, held, success=success, fault="x", node_clean=False
            )
            assert accepted is False
    instance = flow.instance(uuid)
    assert (instance.vm_state, instance.attempts, instance.fault) == (VmState.BUILDING, 0, None)
    assert flow.node(node).provision_state is ProvisionState.DEPLOYING
    assert flow.node(spare).provision_state is ProvisionState.AVAILABLE
    assert len(flow.router.routed) == 1


def test_failures_are_rescheduled_to_other_nodes_until_max_attempts(flow: Flow) -> None:
    uuid = flow.build()
    tried: list[str] = []
    faults = ["disk on fire", "bmc timeout", "pxe failed"]
    for attempt, fault in enumerate(faults, start=1):
        node, owner, epoch = flow.wait_routes(uuid, attempt)
        assert owner is not None
        assert node not in tried  # never the same node twice
        tried.append(node)
        clean = attempt != 1
        assert flow.builds.report_result(
            owner, uuid, node, epoch, success=False, fault=fault, node_clean=clean
        )
        freed = flow.node(node)
        assert freed.instance_uuid is None
        assert freed.provision_state is (
            ProvisionState.AVAILABLE if clean else ProvisionState.ERROR
        )
        instance = flow.instance(uuid)
        assert instance.attempts == attempt
        assert list(instance.tried_nodes) == tried
    error = flow.instance(uuid)
    assert (error.vm_state, error.task_state, error.node_uuid) == (VmState.ERROR, None, None)
    assert error.fault is not None
    for attempt, (node, fault) in enumerate(zip(tried, faults, strict=True), start=1):
        assert f"attempt {attempt} on node {node}: {fault}" in error.fault
    time.sleep(0.05)
    assert len(flow.router.routed) == 3  # max_attempts=3: no fourth try


def test_reschedule_runs_out_of_untried_nodes_and_errors(
    tmp_path: Path, fast_timers: list[tuple[float, str]]
) -> None:
    with make_flow(tmp_path, fast_timers, node_count=2) as flow:
        uuid = flow.build()
        for attempt in (1, 2):
            node, owner, epoch = flow.wait_routes(uuid, attempt)
            assert owner is not None
            flow.builds.report_result(
                owner, uuid, node, epoch, success=False, fault=f"f{attempt}", node_clean=True
            )
        wait_for(lambda: flow.instance(uuid).vm_state is VmState.ERROR)
        error = flow.instance(uuid)
        assert error.attempts == 3 and error.fault is not None
        assert "no valid node" in error.fault
        assert len(flow.router.routed) == 2


# -- delete ----------------------------------------------------------------------------


def _active(flow: Flow) -> tuple[str, str, str, int]:
    uuid = flow.build()
    node, owner, epoch = flow.wait_routes(uuid, 1)
    assert owner is not None
    flow.builds.report_result(owner, uuid, node, epoch, success=True, fault=None, node_clean=True)
    return uuid, node, owner, epoch


def _request_delete(flow: Flow, uuid: str) -> None:
    instances.set_state(flow.db, uuid, Event.DELETE)
    flow.builds.delete(uuid)


def test_delete_asks_the_owner_and_frees_the_node_on_its_report(flow: Flow) -> None:
    uuid, node, owner, epoch = _active(flow)
    _request_delete(flow, uuid)
    wait_for(lambda: flow.router.destroyed == [uuid])
    assert flow.instance(uuid).vm_state is VmState.DELETING  # waits for the agent
    other = "a2" if owner == "a1" else "a1"
    for host, held in ((owner, epoch + 1), (other, epoch)):
        assert not flow.builds.report_destroyed(host, uuid, node, held, success=True, fault=None)
    assert flow.instance(uuid).vm_state is VmState.DELETING
    assert flow.builds.report_destroyed(owner, uuid, node, epoch, success=True, fault=None)
    deleted = flow.instance(uuid)
    assert (deleted.vm_state, deleted.node_uuid, deleted.host) == (VmState.DELETED, None, None)
    freed = flow.node(node)
    assert (freed.instance_uuid, freed.provision_state) == (None, ProvisionState.AVAILABLE)
    # The freed node is schedulable again.
    again = flow.build()
    wait_for(lambda: bool(flow.router.routes_of(again)))


def test_a_refused_destroy_is_retried_later(flow: Flow) -> None:
    uuid, node, owner, epoch = _active(flow)
    flow.router.destroy_answers[:] = [False, False]
    _request_delete(flow, uuid)
    wait_for(lambda: flow.router.destroyed == [uuid] * 3)
    assert flow.delays.count((2.0, "delete")) == 2
    time.sleep(0.1)
    assert flow.router.destroyed == [uuid] * 3  # accepted the third time: no more retries
    assert flow.instance(uuid).vm_state is VmState.DELETING
    assert flow.builds.report_destroyed(owner, uuid, node, epoch, success=True, fault=None)
    assert flow.instance(uuid).vm_state is VmState.DELETED


def test_a_failed_teardown_ends_the_delete_in_error_and_keeps_the_node(flow: Flow) -> None:
    """The agent reports a teardown failed only once retrying could not fix
    it: the delete ends (ERROR, with the reason) instead of retrying for
    ever, the node stays allocated to the instance, and a new delete tries
    again."""
    uuid, node, owner, epoch = _active(flow)
    _request_delete(flow, uuid)
    wait_for(lambda: flow.router.destroyed == [uuid])
    assert flow.builds.report_destroyed(
        owner, uuid, node, epoch, success=False, fault="Ironic shows the node error: bmc"
    )
    shown = flow.instance(uuid)
    assert (shown.vm_state, shown.task_state) == (VmState.ERROR, None)
    assert shown.fault is not None and "bmc" in shown.fault and node in shown.fault
    assert flow.node(node).instance_uuid == uuid  # still allocated, not dirty-and-free
    assert (10.0, "delete") not in flow.delays
    time.sleep(0.1)
    assert flow.router.destroyed == [uuid]  # not retried on its own
    _request_delete(flow, uuid)  # the operator's way out: delete again
    wait_for(lambda: flow.router.destroyed == [uuid, uuid])
    assert flow.builds.report_destroyed(owner, uuid, node, epoch, success=True, fault=None)
    assert flow.instance(uuid).vm_state is VmState.DELETED


def _orphan_claim_on(flow: Flow, exclude: str) -> tuple[str, str, int]:
    """Another node, hosting nothing, out of service (``error``), as the
    Ironic sync leaves a node Ironic still shows claimed: (node, owner, epoch)."""
    node = next(n for n in flow.nodes if n != exclude)
    with flow.db.transaction() as session:
        session.execute(
            update(NodeModel).where(NodeModel.uuid == node).values(provision_state="error")
        )
    record = flow.node(node)
    assert record.instance_uuid is None and record.owner is not None
    return node, record.owner, record.owner_epoch


def test_the_teardown_of_an_orphan_claim_is_accepted_and_changes_no_instance(
    flow: Flow, caplog: pytest.LogCaptureFixture
) -> None:
    """An instance ACTIVE on one node still claims another in Ironic (a
    failed attempt whose teardown could not run): the sync hands the claim
    to that node's owner, whose teardown report is accepted without
    touching the instance, nor either node."""
    uuid, node, owner, epoch = _active(flow)
    orphan, orphan_owner, orphan_epoch = _orphan_claim_on(flow, node)
    before = (flow.instance(uuid), flow.node(node), flow.node(orphan))

    with caplog.at_level(logging.INFO, logger="conductor.lifecycle.results"):
        assert flow.builds.report_destroyed(
            orphan_owner, uuid, orphan, orphan_epoch, success=True, fault=None
        )
    assert (flow.instance(uuid), flow.node(node), flow.node(orphan)) == before
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [
        (
            "INFO",
            f"Orphan claim of instance {uuid} on node {orphan} cleaned by {orphan_owner}; "
            "the next Ironic sync pass puts the node back in service",
        )
    ]
    # Failed: said, accepted (asked again by the next pass), the instance
    # is not put in ERROR.
    assert flow.builds.report_destroyed(
        orphan_owner, uuid, orphan, orphan_epoch, success=False, fault="Ironic: error"
    )
    assert (flow.instance(uuid), flow.node(node), flow.node(orphan)) == before
    # Deleted meanwhile: the same, the instance stays DELETED.
    _request_delete(flow, uuid)
    assert flow.builds.report_destroyed(owner, uuid, node, epoch, success=True, fault=None)
    deleted = flow.instance(uuid)
    assert flow.builds.report_destroyed(
        orphan_owner, uuid, orphan, orphan_epoch, success=True, fault=None
    )
    assert flow.instance(uuid) == deleted
    assert flow.node(orphan) == before[2]


def test_an_orphan_teardown_report_is_fenced_like_any_other(flow: Flow) -> None:
    """Not its owner, another epoch, or a node in service (available: a
    duplicate, a report about another node): stale, as before."""
    uuid, node, _owner, _epoch = _active(flow)
    orphan, orphan_owner, orphan_epoch = _orphan_claim_on(flow, node)
    other = "a2" if orphan_owner == "a1" else "a1"
    for host, held in ((other, orphan_epoch), (orphan_owner, orphan_epoch + 1)):
        for success in (True, False):
            assert not flow.builds.report_destroyed(
                host, uuid, orphan, held, success=success, fault=None
            )
    with flow.db.transaction() as session:
        session.execute(
            update(NodeModel).where(NodeModel.uuid == orphan).values(provision_state="available")
        )
    assert not flow.builds.report_destroyed(
        orphan_owner, uuid, orphan, orphan_epoch, success=True, fault=None
    )
    assert flow.instance(uuid).vm_state is VmState.ACTIVE


def test_delete_of_a_build_never_routed_frees_its_node_without_an_agent(
    tmp_path: Path, fast_timers: list[tuple[float, str]]
) -> None:
    with make_flow(tmp_path, fast_timers, routed=False) as flow:
        uuid = flow.build()
        wait_for(lambda: flow.instance(uuid).node_uuid is not None)
        node = flow.instance(uuid).node_uuid
        assert node is not None
        _request_delete(flow, uuid)
        wait_for(lambda: flow.instance(uuid).vm_state is VmState.DELETED)
        assert flow.node(node).instance_uuid is None
        assert flow.router.destroyed == []


def test_a_success_reported_after_delete_was_requested_tears_the_node_down(flow: Flow) -> None:
    uuid = flow.build()
    node, owner, epoch = flow.wait_routes(uuid, 1)
    assert owner is not None
    flow.router.destroy_answers[:] = [False] * 1000  # the owner is still deploying
    _request_delete(flow, uuid)
    wait_for(lambda: len(flow.router.destroyed) >= 1)
    flow.router.destroy_answers.clear()
    assert flow.builds.report_result(
        owner, uuid, node, epoch, success=True, fault=None, node_clean=True
    )
    assert flow.instance(uuid).vm_state is VmState.DELETING
    assert flow.node(node).provision_state is ProvisionState.ACTIVE
    wait_for(lambda: flow.router.destroyed[-1:] == [uuid] and not flow.router.destroy_answers)
    assert flow.builds.report_destroyed(owner, uuid, node, epoch, success=True, fault=None)
    assert flow.instance(uuid).vm_state is VmState.DELETED


# -- the sweeper -----------------------------------------------------------------------


def test_sweep_requeues_a_stuck_build_without_a_node(flow: Flow) -> None:
    [instance], _ = instances.create_instances(flow.db, validate_build_request({"flavor": "small"}))
    uuid = instance.uuid  # stored, but its queue entry was lost (conductor killed)
    assert flow.builds.sweep(60) == 0  # not old enough yet
    flow.age(uuid)
    assert flow.builds.sweep(60) == 1
    node, owner, epoch = flow.wait_routes(uuid, 1)
    assert (owner, epoch) == (flow.node(node).owner, flow.node(node).owner_epoch)


def test_sweep_reroutes_a_stuck_placed_build_then_fails_it_over(flow: Flow) -> None:
    uuid = flow.build()
    first = flow.wait_routes(uuid, 1)
    flow.age(uuid)

    # First sweep: routed again, same node and claim (the agent de-duplicates).
    assert flow.builds.sweep(60) == 1
    assert flow.wait_routes(uuid, 2) == first
    assert flow.builds.sweep(60) == 0  # the re-route counted as progress
    assert flow.instance(uuid).attempts == 0

    # Still no result a whole build_timeout later: a failed attempt.
    flow.age(uuid)
    assert flow.builds.sweep(60) == 1
    node = first[0]
    freed = flow.node(node)
    assert (freed.instance_uuid, freed.provision_state) == (None, ProvisionState.ERROR)
    second = flow.wait_routes(uuid, 3)
    assert second[0] != node
    instance = flow.instance(uuid)
    assert instance.attempts == 1 and list(instance.tried_nodes) == [node]
    assert instance.fault is not None and "build timed out after 60 s" in instance.fault
    # The late result of the first attempt is stale now.
    assert not flow.builds.report_result(
        first[1] or "", uuid, node, first[2], success=True, fault=None, node_clean=True
    )


def test_a_timed_out_attempts_node_is_handed_to_its_owner_for_a_teardown(
    tmp_path: Path, fast_timers: list[tuple[float, str]]
) -> None:
    """Issue 25: a deploy that finishes after ringfleet gave up is torn down
    by its owner, not left active.  The sweeper asks the owner when it fails
    the attempt (a hung deploy stops there), and a success reported later
    asks again (the ask was lost, or the deploy was past its last step)."""
    asked: list[tuple[str, str | None, ProvisionState, str | None, int, str]] = []

    def clean(node: Node, instance_uuid: str) -> bool:
        asked.append(
            (
                node.uuid,
                node.instance_uuid,
                node.provision_state,
                node.owner,
                node.owner_epoch,
                instance_uuid,
            )
        )
        return True

    with make_flow(tmp_path, fast_timers, clean_late_deploy=clean) as flow:
        uuid = flow.build()
        node, owner, epoch = flow.wait_routes(uuid, 1)
        for _ in range(2):  # re-routed, then failed
            flow.age(uuid)
            assert flow.builds.sweep(60) == 1
        assert asked == [(node, None, ProvisionState.ERROR, owner, epoch, uuid)]
        # The deploy went on and succeeded: not applied, and torn down.
        assert not flow.builds.report_result(
            owner or "", uuid, node, epoch, success=True, fault=None, node_clean=True
        )
        assert asked[1:] == asked[:1]
        assert flow.node(node).instance_uuid is None
        # A stale owner's late success asks nothing (not its node to touch).
        assert not flow.builds.report_result(
            "agent-x", uuid, node, epoch, success=True, fault=None, node_clean=True
        )
        assert len(asked) == 2


def test_sweep_of_the_last_attempt_puts_the_build_in_error(
    tmp_path: Path, fast_timers: list[tuple[float, str]]
) -> None:
    with make_flow(tmp_path, fast_timers, max_attempts=1) as flow:
        uuid = flow.build()
        flow.wait_routes(uuid, 1)
        for _ in range(2):
            flow.age(uuid)
            flow.builds.sweep(60)
            time.sleep(0.02)
        wait_for(lambda: flow.instance(uuid).vm_state is VmState.ERROR)
        assert "build timed out" in (flow.instance(uuid).fault or "")


def test_node_power_without_agents_to_ask_is_a_configuration_error(flow: Flow) -> None:
    """The lifecycle routes an operator's node power verb to the owner over
    the agents' RPC client; without one (a ``router`` given instead) it says
    so, as the inventory endpoint does without a power router."""
    node = flow.node(flow.nodes[0])
    with pytest.raises(ConfigurationError, match="no RPC client for the agents"):
        flow.builds.set_node_power(node, "power on")
    inventory = InventoryEndpoint(flow.db, flow.fleet, power=flow.builds)
    with pytest.raises(ConfigurationError, match="no RPC client for the agents"):
        inventory.set_node_power_state({}, node=node.uuid, target="power on")


def test_an_agent_that_fails_its_calls_gets_no_new_builds_until_it_answers(
    flow: Flow,
) -> None:
    """An owner whose accept timed out is skipped for new builds (they go to
    its peer); its first answer makes it a candidate again."""
    outages = flow.builds._owners.outages  # what a timed-out call to a1 records
    outages.failed("a1", "no answer in time")
    built = [flow.build() for _ in range(2)]
    owners = {flow.wait_routes(uuid, 1)[1] for uuid in built}
    assert owners == {"a2"}
    outages.answered("a1")
    third = flow.build()
    assert flow.wait_routes(third, 1)[1] == "a1"  # a2's two nodes are taken


def test_a_build_waits_while_the_fleet_view_is_unavailable(
    flow: Flow, caplog: pytest.LogCaptureFixture
) -> None:
    """The builds wait, and the cause is said once for all of them (not once
    per build and retry), and once when it ends."""
    flow.membership.state = State.SUSPENDED
    with caplog.at_level(logging.INFO):
        built = [flow.build() for _ in range(3)]
        wait_for(lambda: flow.delays.count((2.0, "build")) >= 6)  # a few retries each
        for uuid in built:
            instance = flow.instance(uuid)
            assert instance.vm_state is VmState.BUILDING and instance.fault is None
            assert instance.attempts == 0 and instance.node_uuid is None
        assert flow.router.routed == []
        flow.membership.state = State.CONNECTED
        for uuid in built:
            flow.wait_routes(uuid, 1)
            assert flow.instance(uuid).vm_state is VmState.BUILDING
    said = [r for r in caplog.records if r.name == "conductor.lifecycle.outages"]
    assert [r.levelname for r in said] == ["WARNING", "INFO"], said
    assert "builds wait" in said[0].getMessage() and "works again" in said[1].getMessage()
    # The membership's own back end fails (etcd hung): it said so, at
    # WARNING; the builds' wait is then an INFO.
    caplog.clear()
    flow.membership.state, flow.membership.backend_failing = State.LOST, True
    retries = flow.delays.count((2.0, "build"))
    with caplog.at_level(logging.INFO):
        later = flow.build()
        wait_for(lambda: flow.delays.count((2.0, "build")) >= retries + 2)
        flow.membership.state, flow.membership.backend_failing = State.CONNECTED, False
        flow.wait_routes(later, 1)
    said = [r for r in caplog.records if r.name == "conductor.lifecycle.outages"]
    assert [r.levelname for r in said] == ["INFO", "INFO"], said


def test_a_build_that_meets_a_database_outage_goes_back_on_the_queue(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = flow.router.route
    failed: list[tuple[str, str]] = []

    def route_with_database_down_once(instance: Instance, node: Node, claim: Ownership) -> None:
        if not failed:  # allocated, then the database went away
            failed.append((instance.uuid, node.uuid))
            raise DatabaseUnavailable()
        real(instance, node, claim)

    monkeypatch.setattr(flow.router, "route", route_with_database_down_once)
    uuid = flow.build()
    node, _owner, _epoch = flow.wait_routes(uuid, 1)
    assert failed == [(uuid, node)]  # routed to the node it had, not allocated again
    assert (2.0, "resume") in flow.delays
    instance = flow.instance(uuid)
    assert instance.vm_state is VmState.BUILDING and instance.attempts == 0


def test_a_build_that_fits_only_nodes_without_a_live_owner_waits_for_one(
    tmp_path: Path, fast_timers: list[tuple[float, str]]
) -> None:
    """Every agent re-joining at once (the etcd member in use came back):
    for a moment no node has a live owner.  Not a reason to fail builds."""
    with make_flow(tmp_path, fast_timers, owner_wait=60.0) as flow:
        flow.fleet.on_change(view_of())  # the agents are not back yet
        uuid = flow.build()
        wait_for(lambda: fast_timers.count((2.0, "build")) >= 3)  # retried, again and again
        instance = flow.instance(uuid)
        assert instance.vm_state is VmState.BUILDING and instance.fault is None
        assert instance.attempts == 0 and flow.router.routed == []
        flow.fleet.on_change(view_of(*AGENTS))  # they re-joined
        node, owner, _ = flow.wait_routes(uuid, 1)
        assert owner in AGENTS and flow.instance(uuid).node_uuid == node
        assert flow.instance(uuid).vm_state is VmState.BUILDING


def test_a_build_waits_for_a_live_owner_only_so_long(
    tmp_path: Path, fast_timers: list[tuple[float, str]]
) -> None:
    with make_flow(tmp_path, fast_timers, owner_wait=0.3) as flow:
        flow.fleet.on_change(view_of())
        uuid = flow.build()
        wait_for(lambda: flow.instance(uuid).vm_state is VmState.ERROR)
        assert (2.0, "build") in fast_timers  # it did wait
        fault = flow.instance(uuid).fault
        assert fault is not None
        assert "LiveOwnerFilter removed 4" in fault and "waited 0 s for a live owner" in fault
        assert flow.router.routed == []


def test_a_build_that_no_node_fits_fails_at_once_even_while_owners_are_missing(
    tmp_path: Path, fast_timers: list[tuple[float, str]]
) -> None:
    with make_flow(tmp_path, fast_timers, owner_wait=60.0) as flow:
        flow.fleet.on_change(view_of())
        flavors.create_flavor(
            flow.db,
            validate_flavor_spec(
                {"name": "gpu", "resource_class": "baremetal", "required_traits": ["CUSTOM_GPU"]}
            ),
        )
        [instance], _ = instances.create_instances(
            flow.db, validate_build_request({"flavor": "gpu"})
        )
        flow.builds.submit([instance.uuid])
        wait_for(lambda: flow.instance(instance.uuid).vm_state is VmState.ERROR)
        assert fast_timers == []  # no wait, no retry
        fault = flow.instance(instance.uuid).fault
        assert fault is not None and "no valid node" in fault and "live owner" not in fault


def test_resume_queues_stored_builds_and_deletions(
    tmp_path: Path, fast_timers: list[tuple[float, str]]
) -> None:
    with make_flow(tmp_path, fast_timers) as flow:
        flow.builds.stop()
        [waiting], _ = instances.create_instances(
            flow.db, validate_build_request({"flavor": "small"})
        )
        restarted = BuildLifecycle(
            flow.db, flow.scheduler, flow.fleet, workers=1, router=flow.router
        )
        restarted.start()
        try:
            flow.wait_routes(waiting.uuid, 1)
        finally:
            restarted.stop()


# -- AgentRouter -----------------------------------------------------------------------


@dataclass
class FakeCompute:
    """The agents' RPC client: per host, an answer or an exception to raise."""

    behaviour: dict[str, Any] = field(default_factory=dict)
    builds: list[tuple[str, str, int, float | None]] = field(default_factory=list)
    destroys: list[tuple[str, str, int]] = field(default_factory=list)
    destroyed_instances: list[str] = field(default_factory=list)  # of each destroy call
    # build_instances: per host, a reply (or an exception) to give; the calls made
    batch_behaviour: dict[str, Any] = field(default_factory=dict)
    batches: list[tuple[str, list[str], float | None]] = field(default_factory=list)
    # Set: build_instance waits until it is set again (a call in flight).
    gate: threading.Event | None = None
    in_call: threading.Event = field(default_factory=threading.Event)
    # [upgrade_levels] compute: the highest version the conductor may send
    pinned_at: str = "1.2"
    # the image and config drive of each build_instance call, and of each batch item
    specs: list[tuple[str, Any, Any]] = field(default_factory=list)

    def can_send_version(self, version: str) -> bool:
        return version <= self.pinned_at

    def _answer(self, host: str, default: str) -> str:
        answer = self.behaviour.get(host, default)
        if isinstance(answer, list):
            answer = answer.pop(0) if answer else default
        if isinstance(answer, BaseException):
            raise answer
        return str(answer)

    def build_instance(
        self,
        host: str,
        *,
        instance_uuid: str,
        node: dict[str, Any],
        epoch: int,
        timeout: float | None = None,
        image: Any = None,
        config_drive: Any = None,
    ) -> str:
        self.builds.append((host, node["uuid"], epoch, timeout))
        self.specs.append((instance_uuid, image, config_drive))
        if self.gate is not None:
            self.in_call.set()
            assert self.gate.wait(5.0)
        return self._answer(host, "accepted")

    def build_instances(
        self, host: str, builds: list[dict[str, Any]], *, timeout: float | None = None
    ) -> dict[str, Any]:
        self.batches.append((host, [b["node"]["uuid"] for b in builds], timeout))
        self.specs.extend(
            (b["instance_uuid"], b.get("image"), b.get("config_drive")) for b in builds
        )
        reply = self.batch_behaviour.get(host)
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply):
            return reply(builds)  # type: ignore[no-any-return]
        return {"results": [{"answer": "accepted"} for _ in builds]}

    def destroy_instance(
        self,
        host: str,
        *,
        instance_uuid: str,
        node: dict[str, Any],
        epoch: int,
        timeout: float | None = None,
    ) -> str:
        self.destroys.append((host, node["uuid"], epoch))
        self.destroyed_instances.append(instance_uuid)
        return self._answer(host, "accepted")


@dataclass
class Recorded:
    """The build queue and results as the router sees them: what it hands back, recorded."""

    retries: list[tuple[str, str]] = field(default_factory=list)
    refusals: list[tuple[str, str, str]] = field(default_factory=list)

    def retry_later(self, instance_uuid: str, action: str, delay: float = 2.0) -> None:
        self.retries.append((instance_uuid, action))

    #: the ``clean`` of each refusal, in order
    clean: list[bool] = field(default_factory=list)

    def refused(
        self, instance_uuid: str, node_uuid: str, fault: str, fence: Fence, *, clean: bool = False
    ) -> None:
        self.refusals.append((instance_uuid, node_uuid, fault))
        self.clean.append(clean)


@dataclass
class Routing:
    db: Database
    fleet: FleetView
    membership: StubMembership
    compute: FakeCompute
    router: AgentRouter
    retries: list[tuple[str, str]]
    node: str
    instance: str
    claim: Ownership
    refusals: list[tuple[str, str, str]] = field(default_factory=list)

    def live(self, *hosts: str) -> None:
        self.fleet.on_change(view_of(*hosts))

    def args(self) -> tuple[Instance, Node, Ownership]:
        return (
            instances.get_instance(self.db, self.instance),
            nodes.get_node(self.db, self.node),
            self.claim,
        )

    def hand_to(self, new_owner: str) -> int:
        own = ownership.ownership_of(self.db, [self.node])[self.node]
        assert own.owner is not None
        out = ownership.transfer_nodes(
            self.db, own.owner, [ownership.Transfer(self.node, own.epoch, new_owner)]
        )
        return out.done[self.node]


@pytest.fixture
def routing(tmp_path: Path) -> Iterator[Routing]:
    with make_routing(tmp_path) as made:
        yield made


@contextlib.contextmanager
def make_routing(tmp_path: Path) -> Iterator[Routing]:
    """An AgentRouter, one node of a1 allocated to one instance (the fixture ``routing``)."""
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    membership = StubMembership()
    fleet = FleetView(db)
    fleet.attach(membership)  # type: ignore[arg-type]
    fleet.on_change(view_of(*AGENTS))
    [node] = add_nodes(db, 1)
    ownership.claim_nodes(db, "a1", [node], live_members=AGENTS, rehome_grace=60)
    flavors.create_flavor(
        db, validate_flavor_spec({"name": "small", "resource_class": "baremetal"})
    )
    [instance], _ = instances.create_instances(db, validate_build_request({"flavor": "small"}))
    claim = allocations.allocate(db, node, instance.uuid)
    assert claim is not None and claim.owner == "a1"
    compute = FakeCompute()
    recorded = Recorded()
    retries, refusals = recorded.retries, recorded.refusals
    router = AgentRouter(
        db,
        fleet,
        compute,  # type: ignore[arg-type]
        recorded,
        recorded,
        accept_timeout=3.0,
    )
    try:
        yield Routing(
            db, fleet, membership, compute, router, retries, node, instance.uuid, claim, refusals
        )
    finally:
        db.dispose()


def test_route_calls_the_owner_with_its_epoch(routing: Routing) -> None:
    routing.router.route(*routing.args())
    assert routing.compute.builds == [("a1", routing.node, routing.claim.epoch, 3.0)]
    assert routing.retries == []


def test_not_owner_re_reads_the_node_and_routes_to_the_new_owner(routing: Routing) -> None:
    new_epoch = routing.hand_to("a2")
    routing.compute.behaviour["a1"] = NotOwner(routing.node, "a2", new_epoch)
    routing.router.route(*routing.args())  # with the claim read before the hand-over
    assert [(h, e) for h, _, e, _ in routing.compute.builds] == [
        ("a1", routing.claim.epoch),
        ("a2", new_epoch),
    ]
    assert routing.retries == []


def test_not_owner_again_and_again_goes_back_to_the_queue(routing: Routing) -> None:
    routing.compute.behaviour["a1"] = NotOwner(routing.node, "a1", 99)
    routing.router.route(*routing.args())
    assert len(routing.compute.builds) == 3
    assert routing.retries == [(routing.instance, "route")]


def test_not_owner_for_a_node_the_instance_lost_stops_routing(routing: Routing) -> None:
    routing.compute.behaviour["a1"] = NotOwner(routing.node, "a1", 99)
    allocations.give_back(routing.db, routing.node, routing.instance)
    instance, node, claim = routing.args()
    routing.router.route(instance, node, claim)
    assert len(routing.compute.builds) == 1
    assert routing.retries == []


@pytest.mark.parametrize(
    "error",
    [messaging.MessagingTimeout("no reply"), Conflict(field="host", value="a1", reason="stop")],
    ids=["timeout", "conflict"],
)
def test_timeouts_and_refusals_are_retried_later(routing: Routing, error: Exception) -> None:
    routing.compute.behaviour["a1"] = error
    routing.router.route(*routing.args())
    assert len(routing.compute.builds) == 1
    assert routing.retries == [(routing.instance, "route")]


def test_a_definitive_refusal_is_not_retried_but_reported_once(
    routing: Routing, caplog: pytest.LogCaptureFixture
) -> None:
    routing.compute.behaviour["a1"] = NodeNotBuildable(
        field="node_uuid", value=routing.node, reason="node hosts instance X; destroy it first"
    )
    with caplog.at_level(logging.WARNING, logger="conductor.lifecycle.routing"):
        routing.router.route(*routing.args())
    assert len(routing.compute.builds) == 1
    assert routing.retries == []
    [(instance, node, fault)] = routing.refusals
    assert (instance, node) == (routing.instance, routing.node)
    assert "a1" in fault and "node hosts instance X" in fault
    assert len(caplog.records) == 1 and "for good" in caplog.records[0].getMessage()


def test_a_definitive_refusal_in_a_batch_is_not_retried(routing: Routing) -> None:
    refused, accepted = _more_builds(routing, 2)

    def reply(builds: list[dict[str, Any]]) -> dict[str, Any]:
        answers = {
            refused[1].uuid: {"error": "NodeNotBuildable", "reason": "node hosts instance X"},
            accepted[1].uuid: {"answer": "accepted"},
        }
        return {"results": [answers[b["node"]["uuid"]] for b in builds]}

    routing.compute.batch_behaviour["a1"] = reply

    def route_more() -> None:
        routing.router.route(*refused)
        routing.router.route(*accepted)

    _with_a_call_in_flight(routing, route_more)
    assert len(routing.compute.batches) == 1
    assert routing.retries == []
    assert [(i, n) for i, n, _ in routing.refusals] == [(refused[0].uuid, refused[1].uuid)]


def test_an_owner_that_is_not_live_is_not_called(routing: Routing) -> None:
    routing.live("a2")
    routing.router.route(*routing.args())
    assert routing.compute.builds == []
    assert routing.retries == [(routing.instance, "route")]
    # Nobody owns it at all: the same.
    instance, node, _ = routing.args()
    routing.router.route(instance, node, Ownership(node.uuid, None, 0))
    assert routing.compute.builds == []
    assert routing.retries == [(routing.instance, "route")] * 2


def test_an_unknown_membership_assumes_the_owner_alive(routing: Routing) -> None:
    routing.membership.state = State.LOST
    routing.router.route(*routing.args())
    assert [h for h, *_ in routing.compute.builds] == ["a1"]


def test_destroy_goes_to_the_live_owner_only(routing: Routing) -> None:
    instance, node, _ = routing.args()
    assert routing.router.destroy(instance) is True
    assert routing.compute.destroys == [("a1", routing.node, node.owner_epoch)]

    routing.live("a2")
    assert routing.router.destroy(instance) is False  # waits for the re-homing
    assert len(routing.compute.destroys) == 1

    routing.live(*AGENTS)
    for error in (
        NotOwner(routing.node, "a2", 9),
        messaging.MessagingTimeout("no reply"),
        Conflict(field="node_uuid", value=routing.node, reason="busy"),
    ):
        routing.compute.behaviour["a1"] = error
        assert routing.router.destroy(instance) is False
    # NotOwner is answered by re-reading the node and calling again, as for
    # every verb (3 calls while a1 keeps refusing); the others wait.
    assert len(routing.compute.destroys) == 1 + 3 + 1 + 1

    # An instance without a node has nothing to tear down.
    unplaced = Instance(uuid=str(uuidlib.uuid4()), name="x", flavor="small")
    assert routing.router.destroy(unplaced) is True
    assert len(routing.compute.destroys) == 6


def test_an_orphan_claim_goes_to_the_live_owner_at_its_epoch(
    routing: Routing, caplog: pytest.LogCaptureFixture
) -> None:
    node = nodes.get_node(routing.db, routing.node)
    orphan = str(uuidlib.uuid4())
    with caplog.at_level(logging.INFO, logger="conductor.lifecycle.routing"):
        assert routing.router.clean_orphan(node, orphan) is True
    assert routing.compute.destroys == [("a1", routing.node, node.owner_epoch)]
    assert routing.compute.destroyed_instances == [orphan]
    assert [r.getMessage() for r in caplog.records] == [
        f"Node {routing.node}: Ironic still holds instance {orphan}, which ringfleet no "
        "longer places there; its owner a1 tears it down"
    ]

    routing.live("a2")
    assert routing.router.clean_orphan(node, orphan) is False  # not live: not called
    routing.live(*AGENTS)
    for error in (NotOwner(routing.node, "a2", 9), messaging.MessagingTimeout("no reply")):
        routing.compute.behaviour["a1"] = error
        assert routing.router.clean_orphan(node, orphan) is False
    # NotOwner: re-read and called again (3 calls while a1 keeps refusing).
    assert len(routing.compute.destroys) == 1 + 3 + 1
    unowned = Node(uuid=node.uuid, name=node.name, resource_class=node.resource_class)
    assert routing.router.clean_orphan(unowned, orphan) is False
    assert len(routing.compute.destroys) == 5


def test_a_teardown_waiting_says_why_once_per_cause(
    routing: Routing, caplog: pytest.LogCaptureFixture
) -> None:
    """A delete retried every 2 s logs its cause once (then DEBUG), and again
    only when the cause changes; an owner that answers nothing is said once
    for all the work waiting on it, and once when it answers again."""
    instance, _node, _ = routing.args()
    busy = Conflict(field="node_uuid", value=routing.node, reason="busy with power")
    slow = messaging.MessagingTimeout("slow")
    routing.compute.behaviour["a1"] = [busy, busy, busy, slow, slow, None]
    with caplog.at_level(logging.INFO):
        for _ in range(5):
            assert routing.router.destroy(instance) is False
        assert routing.router.destroy(instance) is True
    said = [r.getMessage() for r in caplog.records if "not accepted yet" in r.getMessage()]
    assert len(said) == 1, said
    assert "busy with power" in said[0]
    outage = [r for r in caplog.records if r.name == "conductor.lifecycle.outages"]
    assert [r.levelname for r in outage] == ["WARNING", "INFO"], outage
    assert "a1" in outage[0].getMessage() and "no answer in time" in outage[0].getMessage()
    assert "works again" in outage[1].getMessage() and "(2 waits)" in outage[1].getMessage()


def test_a_result_arriving_during_a_sweep_is_not_undone(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    uuid = flow.build()
    node, owner, epoch = flow.wait_routes(uuid, 1)
    assert owner is not None
    flow.age(uuid)
    assert flow.builds.sweep(60) == 1  # re-routed
    flow.wait_routes(uuid, 2)
    flow.age(uuid)
    read = instance_sweeps.stuck_builds

    def stuck_then_reported(*args: Any, **kwargs: Any) -> list[Instance]:
        stuck = read(*args, **kwargs)
        # The agent's result arrives right after the sweeper's read.
        flow.builds.report_result(
            owner, uuid, node, epoch, success=True, fault=None, node_clean=True
        )
        return stuck

    monkeypatch.setattr(instance_sweeps, "stuck_builds", stuck_then_reported)
    flow.builds.sweep(60)
    instance = flow.instance(uuid)
    assert (instance.vm_state, instance.node_uuid, instance.attempts) == (VmState.ACTIVE, node, 0)
    placed = flow.node(node)
    assert (placed.instance_uuid, placed.provision_state) == (uuid, ProvisionState.ACTIVE)


def test_each_attempt_is_rerouted_once_before_the_sweeper_fails_it(flow: Flow) -> None:
    uuid = flow.build()
    first, owner, epoch = flow.wait_routes(uuid, 1)
    assert owner is not None
    flow.age(uuid)
    assert flow.builds.sweep(60) == 1
    flow.wait_routes(uuid, 2)  # attempt 1 re-routed ...
    flow.builds.report_result(owner, uuid, first, epoch, success=False, fault="x", node_clean=True)
    second = flow.wait_routes(uuid, 3)  # ... then failed and rescheduled
    assert second[0] != first
    flow.age(uuid)  # attempt 2 stuck in turn
    assert flow.builds.sweep(60) == 1
    assert flow.wait_routes(uuid, 4) == second  # re-routed, not failed
    assert flow.instance(uuid).attempts == 1


# -- AgentRouter: batched accepts (compute API 1.1) ---------------------------------------


def _more_builds(routing: Routing, count: int) -> list[tuple[Instance, Node, Ownership]]:
    """``count`` more builds allocated on new nodes of a1, as the workers would route them."""
    made = []
    for node_uuid in add_nodes(routing.db, count):
        ownership.claim_nodes(routing.db, "a1", [node_uuid], live_members=AGENTS, rehome_grace=60)
        [instance], _ = instances.create_instances(
            routing.db, validate_build_request({"flavor": "small"})
        )
        claim = allocations.allocate(routing.db, node_uuid, instance.uuid)
        assert claim is not None and claim.owner == "a1"
        made.append(
            (
                instances.get_instance(routing.db, instance.uuid),
                nodes.get_node(routing.db, node_uuid),
                claim,
            )
        )
    return made


def _with_a_call_in_flight(
    routing: Routing, while_in_flight: Callable[[], None]
) -> threading.Thread:
    """Route the fixture's build in a thread, held in its call while ``while_in_flight`` runs."""
    routing.compute.gate = threading.Event()
    first = threading.Thread(target=routing.router.route, args=routing.args())
    first.start()
    assert routing.compute.in_call.wait(5.0)
    routing.compute.gate, gate = None, routing.compute.gate
    try:
        while_in_flight()
    finally:
        gate.set()
    first.join(5.0)
    assert not first.is_alive()
    return first


def test_a_lone_build_goes_out_at_once_in_its_own_call(routing: Routing) -> None:
    routing.router.route(*routing.args())
    assert len(routing.compute.builds) == 1
    assert routing.compute.batches == []


def test_builds_ready_during_a_call_go_to_the_owner_in_one_call(routing: Routing) -> None:
    more = _more_builds(routing, 3)

    def route_more() -> None:
        for build in more:
            routing.router.route(*build)  # returns at once: queued for the sender
        assert routing.compute.batches == []

    _with_a_call_in_flight(routing, route_more)
    assert [h for h, *_ in routing.compute.builds] == ["a1"]
    assert routing.compute.batches == [("a1", [n.uuid for _, n, _ in more], 3.0)]
    assert routing.retries == []
    assert routing.router.calls == 2


def test_with_senders_a_worker_hands_the_accept_over_and_returns_at_once(
    routing: Routing,
) -> None:
    recorded = Recorded(routing.retries)
    router = AgentRouter(
        routing.db,
        routing.fleet,
        routing.compute,  # type: ignore[arg-type]
        recorded,
        recorded,
        accept_timeout=3.0,
        senders=2,
    )
    more = _more_builds(routing, 3)
    routing.compute.gate = gate = threading.Event()
    try:
        # The owner has not answered, yet the worker is free again ...
        router.route(*routing.args())
        assert routing.compute.in_call.wait(5.0)
        for build in more:
            router.route(*build)
        # ... and so were the next workers: their builds wait for the sender.
        assert [h for h, *_ in routing.compute.builds] == ["a1"]
        assert routing.compute.batches == []
    finally:
        gate.set()
    router.close()  # waits for what the senders were given
    assert routing.compute.batches == [("a1", [n.uuid for _, n, _ in more], 3.0)]
    assert routing.retries == []
    with pytest.raises(ValueError, match="senders"):
        AgentRouter(
            routing.db,
            routing.fleet,
            routing.compute,  # type: ignore[arg-type]
            recorded,
            recorded,
            senders=-1,
        )


def test_a_batch_refusal_affects_its_own_build_only(routing: Routing) -> None:
    """NotOwner for one item: re-read and routed to the new owner; a busy node:
    that build retried later; a node the instance lost: dropped; the rest accepted."""
    ok, moved, busy, lost = _more_builds(routing, 4)
    new_epoch = ownership.transfer_nodes(
        routing.db, "a1", [ownership.Transfer(moved[1].uuid, moved[2].epoch, "a2")]
    ).done[moved[1].uuid]
    allocations.give_back(routing.db, lost[1].uuid, lost[0].uuid)

    def reply(builds: list[dict[str, Any]]) -> dict[str, Any]:
        answers = {
            ok[1].uuid: {"answer": "accepted"},
            moved[1].uuid: {"error": "NotOwner", "reason": "not the owner"},
            busy[1].uuid: {"error": "Conflict", "reason": "node is busy"},
            lost[1].uuid: {"error": "NotOwner", "reason": "not the owner"},
        }
        return {"results": [answers[b["node"]["uuid"]] for b in builds]}

    routing.compute.batch_behaviour["a1"] = reply

    def route_more() -> None:
        for build in (ok, moved, busy, lost):
            routing.router.route(*build)

    _with_a_call_in_flight(routing, route_more)
    assert [nodes for _, nodes, _ in routing.compute.batches] == [
        [ok[1].uuid, moved[1].uuid, busy[1].uuid, lost[1].uuid]
    ]
    # The fixture's own build alone, then the moved one to its new owner at its epoch.
    assert [(h, n, e) for h, n, e, _ in routing.compute.builds] == [
        ("a1", routing.node, routing.claim.epoch),
        ("a2", moved[1].uuid, new_epoch),
    ]
    assert routing.retries == [(busy[0].uuid, "route")]


@pytest.mark.parametrize("refusal", ["UnsupportedVersion", "NoSuchMethod"])
def test_an_agent_without_build_instances_gets_the_batch_one_by_one(
    routing: Routing, refusal: str, caplog: pytest.LogCaptureFixture
) -> None:
    more = _more_builds(routing, 2)
    routing.compute.batch_behaviour["a1"] = messaging.RemoteError(refusal, "too old")

    def route_two() -> None:
        for build in more:
            routing.router.route(*build)

    _with_a_call_in_flight(routing, route_two)
    assert len(routing.compute.batches) == 1  # asked, refused
    assert [n for _, n, _, _ in routing.compute.builds] == [
        routing.node,
        more[0][1].uuid,
        more[1][1].uuid,
    ]  # then one by one, nothing lost
    assert routing.retries == []
    # The operator is told how to stop it: pin the API (said once).
    assert caplog.text.count("set [upgrade_levels] compute = 1.0") == 1


def test_a_compute_api_pinned_below_1_1_gets_no_batched_call(routing: Routing) -> None:
    routing.compute.pinned_at = "1.0"
    more = _more_builds(routing, 2)

    def route_two() -> None:
        for build in more:
            routing.router.route(*build)

    _with_a_call_in_flight(routing, route_two)
    assert routing.compute.batches == []  # never asked: the pin says it is not there
    assert [n for _, n, _, _ in routing.compute.builds] == [
        routing.node,
        more[0][1].uuid,
        more[1][1].uuid,
    ]
    assert routing.retries == []


def test_a_batch_that_times_out_goes_back_on_the_queue_with_what_waits(
    routing: Routing,
) -> None:
    more = _more_builds(routing, 2)
    routing.compute.batch_behaviour["a1"] = messaging.MessagingTimeout("no reply")

    def route_more() -> None:
        for build in more:
            routing.router.route(*build)

    _with_a_call_in_flight(routing, route_more)
    assert len(routing.compute.batches) == 1
    assert sorted(routing.retries) == sorted((i.uuid, "route") for i, _, _ in more)
    # Nothing is left waiting: the next build goes out at once again.
    routing.compute.batch_behaviour.clear()
    routing.router.route(*more[0])
    assert [n for _, n, _, _ in routing.compute.builds][-1] == more[0][1].uuid


def test_a_failure_while_sending_strands_nothing(
    routing: Routing, monkeypatch: pytest.MonkeyPatch
) -> None:
    more = _more_builds(routing, 2)

    def database_down(*_: Any) -> Node:
        raise RuntimeError("database down")

    routing.compute.batch_behaviour["a1"] = lambda builds: {
        "results": [{"error": "NotOwner", "reason": "moved"} for _ in builds]
    }

    def route_more() -> None:
        for build in more:
            routing.router.route(*build)
        # Re-reading the refused builds' nodes will fail.
        monkeypatch.setattr(nodes, "get_node", database_down)

    _with_a_call_in_flight(routing, route_more)
    assert sorted(routing.retries) == sorted((i.uuid, "route") for i, _, _ in more)
