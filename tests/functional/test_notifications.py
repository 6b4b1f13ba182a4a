# SPDX-License-Identifier: Apache-2.0
"""Versioned notifications on the real RabbitMQ, consumed as a billing or audit service would.

One conductor with ``[oslo_messaging_notifications] driver = messagingv2``
on a topic of the test's own, two agents as processes (the simulated
driver), PostgreSQL and etcd; the test listens with an oslo.messaging
notification listener.  The fleet builds, fails a build, reboots, deletes
and drains an agent; the notifications must tell that story, instance by
instance in order, and account for every ownership change: each node's
notified epochs are exactly 1 to its epoch in the database.  A second
fleet does everything that is notified (nodes, flavors, quotas, every
instance action, its failures on nodes whose back end refuses them) and
every event type published must arrive, each one valid against its
published schema (``docs/notification-schemas.json``).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import oslo_messaging as messaging
import pytest
from oslo_config import cfg

from conductor.common import rpc
from conductor.notification_events import EVENTS
from hashring.ring import Ring
from tests.dbutil import migrated
from tests.functional.fleet_harness import Fleet, close_in_background
from tests.functional.harness import unique_group
from tests.harness import wait_for

NODES = 10
PUBLISHER = "ringfleet-conductor:cond-1"
SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "notification-schemas.json"


class Listened:
    """The listener's endpoint: every notification, in the order received."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[dict[str, Any]] = []

    def _add(self, priority: str, publisher_id: str, event_type: str, payload: Any) -> None:
        with self._lock:
            self._items.append(
                {
                    "priority": priority,
                    "publisher_id": publisher_id,
                    "event_type": event_type,
                    "payload": payload,
                }
            )

    def info(
        self, ctxt: Any, publisher_id: str, event_type: str, payload: Any, metadata: Any
    ) -> None:
        self._add("INFO", publisher_id, event_type, payload)

    def error(
        self, ctxt: Any, publisher_id: str, event_type: str, payload: Any, metadata: Any
    ) -> None:
        self._add("ERROR", publisher_id, event_type, payload)

    def types(self) -> set[str]:
        return {i["event_type"] for i in self.items()}

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._items)

    def of_instance(self, uuid: str) -> list[dict[str, Any]]:
        return [
            i
            for i in self.items()
            if i["event_type"].startswith("instance.")
            and i["payload"]["ringfleet_object.data"]["uuid"] == uuid
        ]

    def types_of(self, uuid: str) -> list[str]:
        return [i["event_type"] for i in self.of_instance(uuid)]

    def node_epochs(self) -> dict[str, list[tuple[int, str | None, dict[str, Any]]]]:
        """node -> (epoch, owner, the whole payload's data) of every ownership change."""
        found: dict[str, list[tuple[int, str | None, dict[str, Any]]]] = {}
        for item in self.items():
            if item["event_type"] != "node.owner.update":
                continue
            data = item["payload"]["ringfleet_object.data"]
            for node in data["nodes"]:
                found.setdefault(node["uuid"], []).append(
                    (node["owner_epoch"], node["owner"], data)
                )
        return found


def _listening(
    tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str, agent_extra: str = ""
) -> Iterator[tuple[Fleet, Listened]]:
    topic = unique_group("ringfleet-notifications")
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    conf([], project="ringfleet-test", default_config_files=[])
    conf.set_override("transport_url", transport_url)
    transport = messaging.get_notification_transport(conf)
    listened = Listened()
    listener = messaging.get_notification_listener(
        transport, [messaging.Target(topic=topic)], [listened], executor="threading"
    )
    listener.start()
    migrated(pg_url).dispose()
    fleet = Fleet(
        tmp_path,
        db_url=pg_url,
        transport_url=transport_url,
        etcd_url=etcd_url,
        common_extra=agent_extra,
    )
    try:
        fleet.conductor(
            extra=f"[oslo_messaging_notifications]\ndriver = messagingv2\ntopics = {topic}\n"
        )
        yield fleet, listened
    finally:
        fleet.close()
        listener.stop()
        listener.wait()
        close_in_background(transport)


@pytest.fixture
def notified(
    tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str
) -> Iterator[tuple[Fleet, Listened]]:
    yield from _listening(tmp_path, pg_url, transport_url, etcd_url)


def _every_change_notified(fleet: Fleet, listened: Listened) -> bool:
    """Each node's notified epochs are 1..its stored epoch, the last with its stored owner."""
    notified = listened.node_epochs()
    for node, (owner, epoch, _instance) in fleet.owners().items():
        changes = sorted(notified.get(node, []), key=lambda c: c[0])
        if [c[0] for c in changes] != list(range(1, epoch + 1)):
            return False
        if epoch and changes[-1][1] != owner:
            return False
    return True


def test_builds_a_failure_a_reboot_a_delete_and_a_drain_are_notified(
    notified: tuple[Fleet, Listened],
) -> None:
    fleet, listened = notified
    api = fleet.api
    api.import_nodes(
        [{"name": f"node-{i:02d}", "resource_class": "baremetal"} for i in range(NODES)]
    )
    api.create_flavor({"name": "small", "resource_class": "baremetal"})
    api.create_flavor({"name": "gpu", "resource_class": "gpu"})  # no node has it
    fleet.agent("agent-1")
    fleet.agent("agent-2")
    ring = Ring(["agent-1", "agent-2"])
    wait_for(
        lambda: all(o == ring.owner(n) for n, (o, _e, _i) in fleet.owners().items()),
        30,
        "the two agents own their ring shares",
    )

    built = [i["uuid"] for i in api.build_instances({"flavor": "small", "count": 3})]
    [failed] = [i["uuid"] for i in api.build_instances({"flavor": "gpu"})]
    wait_for(
        lambda: all(api.show_instance(u)["vm_state"] == "active" for u in built),
        60,
        "3 instances active",
    )
    wait_for(lambda: api.show_instance(failed)["vm_state"] == "error", 30, "the gpu build failed")
    rebooted, deleted, kept = built
    # The drain moves the kept instance's node, and the other agent takes it.
    drained = api.show_instance(kept)["host"]
    (heir,) = {"agent-1", "agent-2"} - {drained}
    api.reboot_instance(rebooted)
    wait_for(lambda: api.show_instance(rebooted)["task_state"] is None, 30, "the reboot is done")
    api.delete_instance(deleted)
    wait_for(lambda: api.show_instance(deleted)["vm_state"] == "deleted", 30, "the delete is done")
    api.drain_agent(drained)
    wait_for(lambda: set(fleet.owned_by()) == {heir}, 30, f"{drained} drained")
    wait_for(lambda: _every_change_notified(fleet, listened), 30, "every ownership change notified")
    wait_for(
        lambda: (
            [len(listened.types_of(u)) for u in (kept, rebooted, deleted, failed)] == [2, 4, 4, 2]
        ),
        30,
        "every instance step notified",
    )

    items = listened.items()
    assert {i["publisher_id"] for i in items} == {PUBLISHER}
    for item in items:
        envelope = item["payload"]
        assert envelope["ringfleet_object.name"] == EVENTS[item["event_type"]].payload.NAME
        assert envelope["ringfleet_object.namespace"] == "ringfleet"
        assert (item["priority"] == "ERROR") == item["event_type"].endswith(".error")

    # Each instance's story, in order.
    assert listened.types_of(kept) == ["instance.create.start", "instance.create.end"]
    assert listened.types_of(rebooted) == [
        "instance.create.start",
        "instance.create.end",
        "instance.reboot.start",
        "instance.reboot.end",
    ]
    assert listened.types_of(deleted) == [
        "instance.create.start",
        "instance.create.end",
        "instance.delete.start",
        "instance.delete.end",
    ]
    assert listened.types_of(failed) == ["instance.create.start", "instance.create.error"]

    # The payloads: the instance as committed by each step.
    start, end = (i["payload"]["ringfleet_object.data"] for i in listened.of_instance(kept))
    assert (start["vm_state"], start["task_state"], start["node_uuid"]) == (
        "building",
        "scheduling",
        None,
    )
    stored = api.show_instance(kept)
    assert (end["vm_state"], end["task_state"]) == ("active", None)
    assert (end["node_uuid"], end["flavor"]["ringfleet_object.data"]["name"], end["name"]) == (
        stored["node_uuid"],
        "small",
        stored["name"],
    )
    assert (start["power_state"], end["power_state"]) == ("pending", "running")
    assert end["host"] in ("agent-1", "agent-2")
    error = listened.of_instance(failed)[-1]["payload"]["ringfleet_object.data"]
    assert error["vm_state"] == "error"
    assert "no valid node for flavor 'gpu'" in error["fault"]["ringfleet_object.data"]["message"]
    gone = listened.of_instance(deleted)[-1]["payload"]["ringfleet_object.data"]
    assert (gone["vm_state"], gone["node_uuid"]) == ("deleted", None)

    # Ownership: claims at the start, the drain's hand-over at the end,
    # with the instances that moved with their nodes.
    changes = [
        i["payload"]["ringfleet_object.data"]
        for i in items
        if i["event_type"] == "node.owner.update"
    ]
    reasons = {(data["reason"], data["agent"]) for data in changes}
    assert ("claim", "agent-1") in reasons and ("claim", "agent-2") in reasons
    assert ("transfer", drained) in reasons
    owners = fleet.owners()
    handed = [node for data in changes if data["reason"] == "transfer" for node in data["nodes"]]
    assert {(n["owner"], n["previous_owner"]) for n in handed} == {(heir, drained)}
    # Pinned nodes moved with their instances, and say which.
    assert any(n["instance_uuid"] is not None for n in handed)
    for node in handed:
        assert node["instance_uuid"] == owners[node["uuid"]][2]


# -- every event type, against its published schema -----------------------------------

#: Nodes whose back end refuses: every action on ``flaky-all``, powering
#: ``flaky-on`` on (so its instance can be stopped, then fails to start).
FAILING = "[simulated_driver]\nfailing_nodes = flaky-all, flaky-on:power_on\n"


@pytest.fixture
def everything(
    tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str
) -> Iterator[tuple[Fleet, Listened]]:
    yield from _listening(tmp_path, pg_url, transport_url, etcd_url, agent_extra=FAILING)


def _settled(fleet: Fleet, uuid: str, vm_state: str) -> None:
    def settled() -> bool:
        found = fleet.api.show_instance(uuid)
        return (found["vm_state"], found["task_state"]) == (vm_state, None)

    wait_for(settled, 60, f"instance {uuid} {vm_state} with no task")


def _nodes_flavors_and_quotas(fleet: Fleet) -> None:
    """node.*, flavor.* and quota.* events."""
    api = fleet.api
    api.import_nodes(
        [{"name": f"node-{i}", "resource_class": "baremetal"} for i in range(3)]
        + [
            {"name": "flaky-all", "resource_class": "flaky_all"},
            {"name": "flaky-on", "resource_class": "flaky_on"},
        ]
    )
    solo = api.create_node({"name": "solo", "resource_class": "spare"})
    api.set_node("solo", {"add_traits": ["CUSTOM_SPARE"]})
    api.set_node_maintenance("solo", True, "retired")
    api.delete_node(solo["uuid"])
    for name, resource_class in (
        ("small", "baremetal"),
        ("gpu", "gpu"),
        ("flaky-all", "flaky_all"),
        ("flaky-on", "flaky_on"),
        ("doomed", "baremetal"),
    ):
        api.create_flavor({"name": name, "resource_class": resource_class})
    api.delete_flavor("doomed")
    api.set_quota("project-a", {"instances": 7})
    api.delete_quota("project-a")


def _instances(fleet: Fleet) -> None:
    """instance.* and scheduler.* events: every action, done and failed."""
    api = fleet.api
    [ok] = [i["uuid"] for i in api.build_instances({"flavor": "small"})]
    [bad] = [i["uuid"] for i in api.build_instances({"flavor": "flaky-all"})]
    [half] = [i["uuid"] for i in api.build_instances({"flavor": "flaky-on"})]
    api.build_instances({"flavor": "gpu"})  # no node: instance.create.error
    for uuid in (ok, bad, half):
        _settled(fleet, uuid, "active")
    api.set_node_power_state("node-0", "power on")
    for verb in (api.reboot_instance, api.stop_instance):
        verb(ok)
        verb(bad)  # fails: the instance stays active
        _settled(fleet, bad, "active")
    _settled(fleet, ok, "stopped")
    api.start_instance(ok)
    _settled(fleet, ok, "active")
    api.rebuild_instance(ok)
    api.rebuild_instance(bad)
    _settled(fleet, ok, "active")
    _settled(fleet, bad, "active")
    api.stop_instance(half)
    _settled(fleet, half, "stopped")
    api.start_instance(half)  # fails: stays stopped
    _settled(fleet, half, "stopped")
    api.delete_instance(ok)
    api.delete_instance(bad)  # the teardown fails: error
    wait_for(lambda: api.show_instance(ok)["vm_state"] == "deleted", 60, "ok deleted")
    _settled(fleet, bad, "error")


def test_every_event_type_is_sent_and_valid_against_its_published_schema(
    everything: tuple[Fleet, Listened],
) -> None:
    fleet, listened = everything
    _nodes_flavors_and_quotas(fleet)
    fleet.agent("agent-1")
    fleet.agent("agent-2")
    _instances(fleet)
    # The back end refuses it: node.power_set.error (after the .start).
    fleet.api.set_node_power_state("flaky-all", "power off")
    with contextlib.suppress(AssertionError):  # the assert below names what is missing
        wait_for(lambda: listened.types() >= set(EVENTS), 30, "every event type published")
    assert sorted(set(EVENTS) - listened.types()) == []

    schemas = json.loads(SCHEMAS.read_text())
    items = listened.items()
    assert {i["event_type"] for i in items} == set(EVENTS) == set(schemas)
    for item in items:
        jsonschema.validate(item, schemas[item["event_type"]])

    def data(event_type: str) -> list[dict[str, Any]]:
        return [
            i["payload"]["ringfleet_object.data"] for i in items if i["event_type"] == event_type
        ]

    # What the payloads say, beyond their shape.
    assert [d["name"] for d in data("flavor.delete")] == ["doomed"]
    assert [(d["project_id"], d["limits"], d["changed"]) for d in data("quota.set.end")] == [
        ("project-a", {"instances": 7}, {"instances": 7})
    ]
    assert [(d["limits"], d["changed"]) for d in data("quota.delete.end")] == [
        ({}, {"instances": 7})
    ]
    [deleted] = data("node.delete.end")
    assert (deleted["name"], deleted["maintenance"], deleted["traits"]) == (
        "solo",
        True,
        ["CUSTOM_SPARE"],
    )
    assert [d["to_power"] for d in data("node.power_set.start")] == ["power on", "power off"]
    [powered] = data("node.power_set.end")
    assert (powered["name"], powered["to_power"], powered["power_state"]) == (
        "node-0",
        "power on",
        "power on",
    )
    assert powered["fault"] is None
    [refused] = data("node.power_set.error")
    assert (refused["name"], refused["to_power"]) == ("flaky-all", "power off")
    assert "failing_nodes" in refused["fault"]["ringfleet_object.data"]["message"]
    chosen = data("scheduler.select_destinations.end")
    assert all(d["node_uuid"] and d["host"] in ("agent-1", "agent-2") for d in chosen)
    assert all(d["node_uuid"] is None for d in data("scheduler.select_destinations.start"))
    [failed_start] = data("instance.power_on.error")
    assert failed_start["power_state"] == "shutdown"
    assert "failing_nodes" in failed_start["fault"]["ringfleet_object.data"]["message"]
