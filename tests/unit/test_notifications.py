# SPDX-License-Identifier: Apache-2.0
"""Versioned notifications: event types, payloads, the sender, and the call sites.

The sender is the real :class:`~conductor.notifications.Notifier` with a
recording ``send`` (or oslo.messaging's ``test`` driver behind
:meth:`Notifier.from_conf`); the call sites run on SQLite with the build
flow's and the endpoints' test doubles for the agents.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
from oslo_config import cfg
from oslo_context import context as request_context
from oslo_messaging.notify import _impl_test

from conductor import notifications
from conductor.common import rpc
from conductor.common.exception import DatabaseUnavailable, InvalidInput
from conductor.common.instance_states import Event
from conductor.common.objects import Flavor, Instance, PowerState, TaskState, VmState
from conductor.db import instances, nodes
from conductor.db.engine import Database
from conductor.endpoints.agents import AgentsEndpoint
from conductor.endpoints.instances import InstancesEndpoint
from conductor.endpoints.inventory import InventoryEndpoint
from conductor.fleet_view import FleetView
from conductor.lifecycle.actions import ActionRouter
from conductor.notification_events import EVENTS, event_schema
from conductor.notification_payloads import FlavorPayload
from conductor.notifications import (
    ACTION_NAMES,
    INSTANCE_EVENT_TYPES,
    NODES_PER_NOTIFICATION,
    NOT_NOTIFIED,
    InstancePayload,
    NodeOwner,
    Notifier,
    OwnerChange,
    Priority,
    instance_event_type,
)
from tests.dbutil import add_nodes, migrated, pin
from tests.unit.test_build_flow import compress_timers, make_flow, wait_for
from tests.unit.test_endpoints import StubMembership, view_of
from tests.unit.test_instance_actions import Agents, Queue

CTXT: dict[str, Any] = {"request_id": "req-test"}
#: How long a step of the build flow may take on a loaded machine.
WAIT = 30.0


def _routed(flow: Any, uuid: str) -> tuple[str, str | None, int]:
    """The build's first route: (node, owner, epoch)."""
    wait_for(lambda: bool(flow.router.routes_of(uuid)), WAIT)
    return flow.router.routes_of(uuid)[0]


@dataclass
class Sent:
    """A ``send`` that records, and fails while ``failing`` says so."""

    items: list[tuple[Priority, str, dict[str, Any], Any]] = field(default_factory=list)
    failing: int = 0
    gate: threading.Event | None = None

    def __call__(
        self, priority: Priority, event_type: str, payload: dict[str, Any], ctxt: Any
    ) -> None:
        if self.gate is not None:
            self.gate.wait(10)
        if self.failing:
            self.failing -= 1
            raise ConnectionError("broker gone")
        self.items.append((priority, event_type, payload, ctxt))

    def types(self, uuid: str | None = None) -> list[str]:
        """Event types in the order sent (of one instance's, with ``uuid``)."""
        return [
            t
            for _p, t, payload, _c in self.items
            if uuid is None or payload["ringfleet_object.data"].get("uuid") == uuid
        ]

    def data(self, event_type: str) -> list[dict[str, Any]]:
        return [p["ringfleet_object.data"] for _p, t, p, _c in self.items if t == event_type]


# -- event types and payloads -----------------------------------------------------------


def test_every_state_machine_event_is_notified_or_listed_as_not() -> None:
    assert set(INSTANCE_EVENT_TYPES) | NOT_NOTIFIED == set(Event)
    assert not set(INSTANCE_EVENT_TYPES) & NOT_NOTIFIED


@pytest.mark.parametrize(
    ("event", "task", "event_type", "priority"),
    [
        (Event.REQUEST, None, "instance.create.start", Priority.INFO),
        (Event.DEPLOYED, None, "instance.create.end", Priority.INFO),
        (Event.FAIL, None, "instance.create.error", Priority.ERROR),
        (Event.DELETE, None, "instance.delete.start", Priority.INFO),
        (Event.TORN_DOWN, None, "instance.delete.end", Priority.INFO),
        (Event.TEARDOWN_FAILED, None, "instance.delete.error", Priority.ERROR),
        (Event.REBOOT_HARD, None, "instance.reboot.start", Priority.INFO),
        (Event.STOP, None, "instance.power_off.start", Priority.INFO),
        (Event.POWERED_ON, TaskState.REBOOTING_HARD, "instance.reboot.end", Priority.INFO),
        (Event.POWERED_ON, TaskState.POWERING_ON, "instance.power_on.end", Priority.INFO),
        (Event.POWERED_OFF, TaskState.POWERING_OFF, "instance.power_off.end", Priority.INFO),
        (Event.REBUILT, TaskState.REBUILDING, "instance.rebuild.end", Priority.INFO),
        (Event.ACTION_FAILED, TaskState.REBUILDING, "instance.rebuild.error", Priority.ERROR),
        (Event.ACTION_FAILED, TaskState.POWERING_OFF, "instance.power_off.error", Priority.ERROR),
        (Event.FOUND_OFF, None, "instance.power_off.end", Priority.INFO),
    ],
)
def test_event_types_and_priorities(
    event: Event, task: TaskState | None, event_type: str, priority: Priority
) -> None:
    assert instance_event_type(event, task) == (event_type, priority)


@pytest.mark.parametrize(("event", "task"), [(Event.ALLOCATE, None), (Event.POWERED_ON, None)])
def test_events_without_an_event_type_are_refused(event: Event, task: TaskState | None) -> None:
    with pytest.raises(KeyError):
        instance_event_type(event, task)


def test_the_instance_payload_envelope() -> None:
    created = datetime.datetime(2026, 1, 2, 3, 4, 5)
    instance = Instance(
        uuid="4b1c0d2e-0000-4000-8000-000000000001",
        name="web-1",
        flavor="small",
        vm_state=VmState.ACTIVE,
        task_state=TaskState.REBOOTING,
        node_uuid="4b1c0d2e-0000-4000-8000-000000000002",
        host="agent-1",
        attempts=2,
        fault="attempt 1: bmc",
        created_at=created,
        updated_at=created,
        image={"source": "https://images/x.img?sig=secret", "checksum": "abc"},
        config_drive={"user_data": "password=hunter2"},
        project_id="p1",
        user_id="u1",
    )
    flavor = Flavor(
        name="small",
        resource_class="baremetal",
        required_traits=frozenset({"CUSTOM_B", "CUSTOM_A"}),
        created_at=created,
    )
    utc = "2026-01-02T03:04:05+00:00"
    assert InstancePayload.of(instance, flavor, PowerState.ON).envelope() == {
        "ringfleet_object.name": "InstancePayload",
        "ringfleet_object.namespace": "ringfleet",
        "ringfleet_object.version": "2.0",
        "ringfleet_object.data": {
            "uuid": instance.uuid,
            "name": "web-1",
            "project_id": "p1",
            "user_id": "u1",
            "flavor": {
                "ringfleet_object.name": "FlavorPayload",
                "ringfleet_object.namespace": "ringfleet",
                "ringfleet_object.version": "1.0",
                "ringfleet_object.data": {
                    "name": "small",
                    "resource_class": "baremetal",
                    "required_traits": ["CUSTOM_A", "CUSTOM_B"],
                    "forbidden_traits": [],
                    "extra_specs": {},
                    "created_at": utc,
                },
            },
            # No signature (a credential), no user data.
            "image": {
                "ringfleet_object.name": "ImagePayload",
                "ringfleet_object.namespace": "ringfleet",
                "ringfleet_object.version": "1.0",
                "ringfleet_object.data": {
                    "source": "https://images/x.img",
                    "disk_format": None,
                    "os_hash_algo": None,
                    "os_hash_value": None,
                    "checksum": "abc",
                    "kernel": None,
                    "ramdisk": None,
                },
            },
            "vm_state": "active",
            "power_state": "running",
            "task_state": "rebooting",
            "node_uuid": instance.node_uuid,
            "host": "agent-1",
            "fault": {
                "ringfleet_object.name": "FaultPayload",
                "ringfleet_object.namespace": "ringfleet",
                "ringfleet_object.version": "1.0",
                "ringfleet_object.data": {
                    "message": "attempt 1: bmc",
                    "reasons": ["attempt 1: bmc"],
                },
            },
            "attempts": 2,
            "created_at": utc,
            "updated_at": utc,
        },
    }
    jsonschema.validate(
        {
            "event_type": "instance.reboot.start",
            "priority": "INFO",
            "publisher_id": "ringfleet-conductor:c1",
            "payload": InstancePayload.of(instance, flavor, PowerState.ON).envelope(),
        },
        event_schema("instance.reboot.start"),
    )


def test_a_deleted_flavor_and_no_node_are_said_so() -> None:
    instance = Instance(uuid="4b1c0d2e-0000-4000-8000-000000000001", name="w", flavor="gone")
    data = InstancePayload.of(instance, None, None).envelope()["ringfleet_object.data"]
    assert data["flavor"]["ringfleet_object.data"]["resource_class"] is None
    assert (data["power_state"], data["image"], data["fault"]) == ("pending", None, None)


def test_a_payload_that_breaks_its_schema_is_refused_by_it() -> None:
    """The schemas are strict: a field too many, one missing, a time without zone."""
    instance = Instance(uuid="4b1c0d2e-0000-4000-8000-000000000001", name="w", flavor="gone")
    good = {
        "event_type": "instance.create.start",
        "priority": "INFO",
        "publisher_id": "ringfleet-conductor:c1",
        "payload": InstancePayload.of(instance, None, None).envelope(),
    }
    schema = event_schema("instance.create.start")
    jsonschema.validate(good, schema)
    data = good["payload"]["ringfleet_object.data"]
    for bad in (
        {**data, "extra": 1},
        {k: v for k, v in data.items() if k != "host"},
        {**data, "created_at": "2026-01-02T03:04:05"},
        {**data, "flavor": "small"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(
                {**good, "payload": {**good["payload"], "ringfleet_object.data": bad}}, schema
            )
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**good, "priority": "ERROR"}, schema)


def test_every_instance_event_type_is_published() -> None:
    sent = {
        instance_event_type(event, task)[0]
        for event in INSTANCE_EVENT_TYPES
        for task in (None, *ACTION_NAMES)
        if "*" not in INSTANCE_EVENT_TYPES[event] or task is not None
    }
    assert sent <= set(EVENTS)
    assert {e for e in EVENTS if e.startswith("instance.")} == sent


def test_an_unpublished_event_type_is_not_sent() -> None:
    sent = Sent()
    notifier = Notifier(sent)
    notifier.send("node.explode.end", FlavorPayload.gone("x"))
    notifier.send("node.create.end", FlavorPayload.gone("x"))  # not its payload
    notifier.send("flavor.create", FlavorPayload.gone("x"))
    notifier.close()
    assert sent.types() == ["flavor.create"]


def test_ownership_changes_go_a_few_hundred_nodes_each() -> None:
    sent = Sent()
    notifier = Notifier(sent)
    nodes = [NodeOwner(f"n{i:04d}", "agent-1", 3) for i in range(NODES_PER_NOTIFICATION * 2 + 7)]
    notifier.ownership(OwnerChange.CLAIM, "agent-1", nodes)
    notifier.close()
    assert sent.types() == ["node.owner.update"] * 3
    envelopes = [payload for _p, _t, payload, _c in sent.items]
    assert {e["ringfleet_object.name"] for e in envelopes} == {"NodeOwnershipPayload"}
    assert {e["ringfleet_object.version"] for e in envelopes} == {"1.0"}
    data = [e["ringfleet_object.data"] for e in envelopes]
    assert [len(d["nodes"]) for d in data] == [NODES_PER_NOTIFICATION, NODES_PER_NOTIFICATION, 7]
    assert [n["uuid"] for d in data for n in d["nodes"]] == [n.uuid for n in nodes]
    assert data[0]["nodes"][0] == {
        "uuid": "n0000",
        "owner": "agent-1",
        "owner_epoch": 3,
        "previous_owner": None,
        "instance_uuid": None,
    }
    assert (data[0]["reason"], data[0]["agent"]) == ("claim", "agent-1")


# -- configuration and the sender ---------------------------------------------------------


def _conf(**notifications: Any) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf([])
    conf.register_opt(cfg.StrOpt("host", default="cond-1"))
    rpc.register_opts(conf)
    conf.set_override("transport_url", "fake:/")
    for name, value in notifications.items():
        conf.set_override(name, value, group="oslo_messaging_notifications")
    return conf


@pytest.mark.parametrize("drivers", [[], ["noop"]])
def test_notifications_are_off_by_default_and_with_noop(drivers: list[str]) -> None:
    def notifier_threads() -> set[str]:
        return {t.name for t in threading.enumerate() if t.name.startswith("notifier-")}

    threads = notifier_threads()
    notifier = Notifier.from_conf(_conf(driver=drivers), db=None)
    assert not notifier.enabled
    # Off: no read (there is no database to read), no thread, nothing raised.
    notifier.instance(Event.DEPLOYED, "4b1c0d2e-0000-4000-8000-000000000001")
    notifier.ownership(OwnerChange.CLAIM, "a", [NodeOwner("n", "a", 1)])
    assert notifier_threads() == threads
    notifier.close()


@pytest.fixture
def oslo_test_driver() -> Iterator[list[Any]]:
    _impl_test.reset()
    yield _impl_test.NOTIFICATIONS
    _impl_test.reset()


def test_oslo_messaging_sends_them_with_the_publisher_and_request_id(
    oslo_test_driver: list[Any],
) -> None:
    notifier = Notifier.from_conf(_conf(driver=["test"]), db=None)
    assert notifier.enabled
    request_context.RequestContext(request_id="req-1234", overwrite=True)
    try:
        notifier.ownership(OwnerChange.RELEASE, "agent-1", [NodeOwner("n1", None, 4, "agent-1")])
    finally:
        vars(request_context._request_store).pop("context", None)
    notifier.close()
    [(ctxt, message, priority, _retry)] = _impl_test.NOTIFICATIONS
    assert priority == "INFO"
    assert message["publisher_id"] == "ringfleet-conductor:cond-1"
    assert message["event_type"] == "node.owner.update"
    assert message["payload"]["ringfleet_object.data"]["nodes"][0]["owner_epoch"] == 4
    assert ctxt.to_dict()["request_id"] == "req-1234"


def test_a_send_oslo_messaging_only_logs_is_one_warning_then_one_recovery(
    oslo_test_driver: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """oslo.messaging's notifier logs a failed send (traceback, payload) and
    goes on: that is caught as a loss, said once, and the next success once."""
    fails = [3]
    real = _impl_test.TestDriver.notify

    def notify(self: Any, ctxt: Any, message: Any, priority: str, retry: Any) -> None:
        if fails[0]:
            fails[0] -= 1
            raise ConnectionError("broker gone")
        real(self, ctxt, message, priority, retry)

    monkeypatch.setattr(_impl_test.TestDriver, "notify", notify)
    notifier = Notifier.from_conf(_conf(driver=["test"]), db=None)
    with caplog.at_level(logging.DEBUG):
        for i in range(4):
            notifier.ownership(OwnerChange.CLAIM, "a", [NodeOwner(f"n{i}", "a", 1)])
        notifier.close()
    assert len(_impl_test.NOTIFICATIONS) == 1
    above_info = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.name for r in above_info] == ["conductor.notifications"]
    assert "Notification lost (node.owner.update)" in above_info[0].getMessage()
    assert any("sent again; 3 were lost" in r.getMessage() for r in caplog.records)


def test_a_full_queue_drops_new_notifications_and_never_blocks_the_caller(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = threading.Event()
    sent = Sent(gate=gate)
    notifier = Notifier(sent, queue_size=2)
    with caplog.at_level(logging.INFO, logger="conductor.notifications"):
        # The first is taken by the sender (stuck on the broker), two wait,
        # the rest find the queue full; none of the callers waits.
        notifier.ownership(OwnerChange.CLAIM, "a", [NodeOwner("n0", "a", 1)])
        wait_for(lambda: notifier._queue.qsize() == 0, WAIT)
        for i in range(1, 6):
            notifier.ownership(OwnerChange.CLAIM, "a", [NodeOwner(f"n{i}", "a", 1)])
        gate.set()
        notifier.close()
    sent_nodes = [p["ringfleet_object.data"]["nodes"][0]["uuid"] for _p, _t, p, _c in sent.items]
    assert sent_nodes == ["n0", "n1", "n2"]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("Notification lost" in m for m in messages) == 1
    assert sum("sent again; 3 were lost" in m for m in messages) == 1


# -- the call sites: builds, deletes, actions, ownership ------------------------------------


@dataclass
class Built:
    endpoint: InstancesEndpoint
    flow: Any
    sent: Sent
    notifier: Notifier


@pytest.fixture
def built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Built]:
    sent = Sent()
    made: list[Notifier] = []

    def notifier_of(db: Database) -> Notifier:
        made.append(Notifier(sent, db))
        return made[0]

    with make_flow(tmp_path, compress_timers(monkeypatch), notifier=notifier_of) as flow:
        endpoint = InstancesEndpoint(flow.db, flow.builds, notifier=made[0])
        yield Built(endpoint, flow, sent, made[0])
        made[0].close()


def _build_and_delete(built: Built) -> str:
    """One instance built (the agent's success reported by hand), then deleted."""
    flow = built.flow
    [stored] = built.endpoint.build_instances(CTXT, request={"flavor": "small"})
    uuid = stored["uuid"]
    node, owner, epoch = _routed(flow, uuid)
    assert owner is not None
    assert flow.builds.report_result(
        owner, uuid, node, epoch, success=True, fault=None, node_clean=True
    )
    built.endpoint.delete_instance(CTXT, instance=uuid)
    built.endpoint.delete_instance(CTXT, instance=uuid)  # routed again: no second start
    wait_for(lambda: uuid in flow.router.destroyed, WAIT)
    assert flow.builds.report_destroyed(owner, uuid, node, epoch, success=True, fault=None)
    return uuid


def test_a_build_and_a_delete_are_notified_in_order_with_the_committed_state(
    built: Built,
) -> None:
    uuid = _build_and_delete(built)
    built.notifier.close()
    assert built.sent.types(uuid) == [
        "instance.create.start",
        "instance.create.end",
        "instance.delete.start",
        "instance.delete.end",
    ]
    states = [
        (d["vm_state"], d["task_state"])
        for _p, t, p, _c in built.sent.items
        for d in [p["ringfleet_object.data"]]
        if t.startswith("instance.")
    ]
    assert states == [
        ("building", "scheduling"),
        ("active", None),
        ("deleting", "deleting"),
        ("deleted", None),
    ]
    [end] = built.sent.data("instance.create.end")
    assert end["node_uuid"] in built.flow.nodes and end["host"] in ("a1", "a2")
    # Placed as Nova's scheduler says it: the request, then where it went.
    [asked] = built.sent.data("scheduler.select_destinations.start")
    [chosen] = built.sent.data("scheduler.select_destinations.end")
    assert (asked["instance_uuid"], asked["node_uuid"], asked["host"]) == (uuid, None, None)
    assert (chosen["node_uuid"], chosen["host"]) == (end["node_uuid"], end["host"])
    assert chosen["flavor"]["ringfleet_object.data"]["name"] == "small"


def test_a_build_no_node_fits_is_a_create_error_with_its_fault(built: Built) -> None:
    [stored] = built.endpoint.build_instances(CTXT, request={"flavor": "small", "group": "nowhere"})
    uuid = stored["uuid"]
    # Sent by a build worker after its commit: waited for (closing first would drop it).
    wait_for(lambda: len(built.sent.types(uuid)) == 2, WAIT)
    built.notifier.close()
    assert built.sent.types(uuid) == ["instance.create.start", "instance.create.error"]
    [error] = [item for item in built.sent.items if item[1] == "instance.create.error"]
    assert error[0] is Priority.ERROR
    assert error[2]["ringfleet_object.data"]["vm_state"] == "error"
    fault = error[2]["ringfleet_object.data"]["fault"]["ringfleet_object.data"]
    assert "no valid node for flavor 'small'" in fault["message"]
    assert fault["reasons"] == fault["message"].splitlines()


def test_a_failed_teardown_is_a_delete_error(built: Built) -> None:
    flow = built.flow
    [stored] = built.endpoint.build_instances(CTXT, request={"flavor": "small"})
    uuid = stored["uuid"]
    node, owner, epoch = _routed(flow, uuid)
    assert owner is not None
    flow.builds.report_result(owner, uuid, node, epoch, success=True, fault=None, node_clean=True)
    built.endpoint.delete_instance(CTXT, instance=uuid)
    wait_for(lambda: uuid in flow.router.destroyed, WAIT)
    flow.builds.report_destroyed(owner, uuid, node, epoch, success=False, fault="bmc")
    built.notifier.close()
    assert built.sent.types(uuid)[-2:] == ["instance.delete.start", "instance.delete.error"]


@pytest.mark.parametrize("failure", ["send", "read"])
def test_a_failing_notifier_never_fails_the_operation(
    built: Built, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """The broker refusing every notification, or the instance's read after
    a change failing: the build and the delete end as without notifications."""
    if failure == "send":
        built.sent.failing = 10**6
    else:

        def unreachable(db: Database, uuid: str) -> Instance:
            raise DatabaseUnavailable("connection refused")

        # The notifier's read only: the operation's own reads work.
        monkeypatch.setattr(notifications, "instances", SimpleNamespace(get_instance=unreachable))
    uuid = _build_and_delete(built)
    assert instances.get_instance(built.flow.db, uuid).vm_state is VmState.DELETED
    built.notifier.close()
    expected = ["instance.create.start"] if failure == "read" else []
    assert built.sent.types(uuid) == expected


def test_reboot_stop_start_and_a_failed_rebuild_are_notified(tmp_path: Path) -> None:
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    [node] = add_nodes(db, 1, owner="agent-1")
    [uuid] = pin(db, [node], "agent-1")
    sent = Sent()
    notifier = Notifier(sent, db)
    queue, fleet, agents = Queue(), _Fleet(), Agents()
    router = ActionRouter(db, fleet, agents, queue, timeout=5.0, notifier=notifier)  # type: ignore[arg-type]
    endpoint = InstancesEndpoint(db, queue, notifier=notifier)
    try:
        endpoint.reboot_instance(CTXT, instance=uuid, hard=True)
        endpoint.reboot_instance(CTXT, instance=uuid, hard=True)  # routed again: no second start
        router._act(uuid)
        endpoint.stop_instance(CTXT, instance=uuid)
        router._act(uuid)
        endpoint.start_instance(CTXT, instance=uuid)
        router._act(uuid)
        endpoint.rebuild_instance(CTXT, instance=uuid)
        agents.answers.append(_refusal())
        router._act(uuid)
        notifier.close()
    finally:
        router.close()
        db.dispose()
    assert sent.types(uuid) == [
        "instance.reboot.start",
        "instance.reboot.end",
        "instance.power_off.start",
        "instance.power_off.end",
        "instance.power_on.start",
        "instance.power_on.end",
        "instance.rebuild.start",
        "instance.rebuild.error",
    ]
    assert [d["vm_state"] for d in sent.data("instance.power_off.end")] == ["stopped"]
    assert [d["task_state"] for d in sent.data("instance.reboot.start")] == ["rebooting_hard"]
    assert [p for p, t, _d, _c in sent.items if t.endswith(".error")] == [Priority.ERROR]


def _refusal() -> Exception:
    return InvalidInput.not_live_member("agent-1")


@dataclass
class _Fleet:
    def live_members(self) -> frozenset[str]:
        return frozenset({"agent-1", "agent-2"})


@dataclass
class Owners:
    db: Database
    fleet: FleetView
    agents: AgentsEndpoint
    inventory: InventoryEndpoint
    sent: Sent
    notifier: Notifier
    grace: list[float]

    def live(self, *hosts: str) -> None:
        self.fleet.on_change(view_of(*hosts))

    def changes(self) -> list[tuple[str, str | None, list[tuple[str, str | None, int]]]]:
        self.notifier.close()
        return [
            (
                d["reason"],
                d["agent"],
                [(n["uuid"], n["owner"], n["owner_epoch"]) for n in d["nodes"]],
            )
            for d in self.sent.data("node.owner.update")
        ]


@pytest.fixture
def owners(tmp_path: Path) -> Iterator[Owners]:
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    fleet = FleetView(db)
    fleet.attach(StubMembership())  # type: ignore[arg-type]
    sent = Sent()
    notifier = Notifier(sent, db)
    grace = [3600.0]
    yield Owners(
        db,
        fleet,
        AgentsEndpoint(db, fleet, lambda: grace[0], notifier=notifier),
        InventoryEndpoint(db, fleet, notifier=notifier),
        sent,
        notifier,
        grace,
    )
    notifier.close()
    db.dispose()


def test_claims_releases_and_transfers_are_notified_with_their_epochs(owners: Owners) -> None:
    owners.live("agent-1", "agent-2")
    a, b, c = sorted(add_nodes(owners.db, 3))
    owners.agents.claim_nodes(CTXT, host="agent-1", node_uuids=[a, b, c])
    owners.agents.claim_nodes(CTXT, host="agent-1", node_uuids=[a, b])  # own already: no change
    owners.agents.claim_nodes(CTXT, host="agent-2", node_uuids=[a])  # refused: no change
    owners.agents.release_nodes(CTXT, host="agent-1", claims={a: 1})
    owners.agents.transfer_nodes(
        CTXT, host="agent-1", transfers=[{"node_uuid": b, "epoch": 1, "new_owner": "agent-2"}]
    )
    assert owners.changes() == [
        ("claim", "agent-1", [(a, "agent-1", 1), (b, "agent-1", 1), (c, "agent-1", 1)]),
        ("release", "agent-1", [(a, None, 2)]),
        ("transfer", "agent-1", [(b, "agent-2", 2)]),
    ]
    transferred = owners.sent.data("node.owner.update")[-1]["nodes"][0]
    assert transferred["previous_owner"] == "agent-1"


def test_a_rehome_and_a_move_name_the_instances_that_moved(owners: Owners) -> None:
    owners.live("agent-1", "agent-2", "agent-old")
    pinned, other = add_nodes(owners.db, 2)
    owners.agents.claim_nodes(CTXT, host="agent-old", node_uuids=[pinned, other])
    [instance] = pin(owners.db, [pinned], "agent-old")
    owners.live("agent-1", "agent-2")  # agent-old left...
    owners.grace[0] = 0.0  # ...longer ago than rehome_grace
    owners.inventory.move_node(CTXT, node=other, host="agent-2")
    # Re-homed to its ring owner among the live agents only.
    [heir] = owners.agents._ring_owners([(pinned, nodes.get_node(owners.db, pinned).group)])
    assert heir is not None
    owners.agents.claim_nodes(CTXT, host=heir, node_uuids=[pinned])
    changes = owners.changes()
    assert [(reason, agent) for reason, agent, _nodes in changes] == [
        ("claim", "agent-old"),
        ("move", None),
        ("rehome", heir),
    ]
    move, rehome = owners.sent.data("node.owner.update")[1:]
    assert move["nodes"] == [
        {
            "uuid": other,
            "owner": "agent-2",
            "owner_epoch": 2,
            "previous_owner": "agent-old",
            "instance_uuid": None,
        }
    ]
    assert rehome["nodes"] == [
        {
            "uuid": pinned,
            "owner": heir,
            "owner_epoch": 2,
            "previous_owner": None,
            "instance_uuid": instance,
        }
    ]
