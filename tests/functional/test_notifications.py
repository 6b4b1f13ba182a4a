# SPDX-License-Identifier: Apache-2.0
"""Versioned notifications on the real RabbitMQ, consumed as a billing or audit service would.

One conductor with ``[oslo_messaging_notifications] driver = messagingv2``
on a topic of the test's own, two agents as processes (the simulated
driver), PostgreSQL and etcd; the test listens with an oslo.messaging
notification listener.  The fleet builds, fails a build, reboots, deletes
and drains an agent; the notifications must tell that story, instance by
instance in order, and account for every ownership change: each node's
notified epochs are exactly 1 to its epoch in the database.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import oslo_messaging as messaging
import pytest
from oslo_config import cfg

from conductor.common import rpc
from hashring.ring import Ring
from tests.dbutil import migrated
from tests.functional.fleet_harness import Fleet, close_in_background
from tests.functional.harness import unique_group
from tests.harness import wait_for

NODES = 10
PUBLISHER = "ringfleet-conductor:cond-1"


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
        self._add("info", publisher_id, event_type, payload)

    def error(
        self, ctxt: Any, publisher_id: str, event_type: str, payload: Any, metadata: Any
    ) -> None:
        self._add("error", publisher_id, event_type, payload)

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

    def types(self, uuid: str) -> list[str]:
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


@pytest.fixture
def notified(
    tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str
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
    fleet = Fleet(tmp_path, db_url=pg_url, transport_url=transport_url, etcd_url=etcd_url)
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
        lambda: [len(listened.types(u)) for u in (kept, rebooted, deleted, failed)] == [2, 4, 4, 2],
        30,
        "every instance step notified",
    )

    items = listened.items()
    assert {i["publisher_id"] for i in items} == {PUBLISHER}
    for item in items:
        envelope = item["payload"]
        expected = (
            "NodeOwnershipPayload"
            if item["event_type"] == "node.owner.update"
            else ("InstancePayload")
        )
        assert envelope["ringfleet_object.name"] == expected
        assert envelope["ringfleet_object.namespace"] == "ringfleet"
        assert envelope["ringfleet_object.version"] == "1.0"
        assert (item["priority"] == "error") == item["event_type"].endswith(".error")

    # Each instance's story, in order.
    assert listened.types(kept) == ["instance.create.start", "instance.create.end"]
    assert listened.types(rebooted) == [
        "instance.create.start",
        "instance.create.end",
        "instance.reboot.start",
        "instance.reboot.end",
    ]
    assert listened.types(deleted) == [
        "instance.create.start",
        "instance.create.end",
        "instance.delete.start",
        "instance.delete.end",
    ]
    assert listened.types(failed) == ["instance.create.start", "instance.create.error"]

    # The payloads: the instance as committed by each step.
    start, end = (i["payload"]["ringfleet_object.data"] for i in listened.of_instance(kept))
    assert (start["vm_state"], start["task_state"], start["node_uuid"]) == (
        "building",
        "scheduling",
        None,
    )
    stored = api.show_instance(kept)
    assert (end["vm_state"], end["task_state"]) == ("active", None)
    assert (end["node_uuid"], end["flavor"], end["name"]) == (
        stored["node_uuid"],
        "small",
        stored["name"],
    )
    assert end["host"] in ("agent-1", "agent-2")
    error = listened.of_instance(failed)[-1]["payload"]["ringfleet_object.data"]
    assert error["vm_state"] == "error"
    assert "no valid node for flavor 'gpu'" in error["fault"]
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
