# SPDX-License-Identifier: Apache-2.0
"""The node, flavor and quota notifications, at their call sites (the Ironic sync's too).

On SQLite, with the real :class:`~conductor.notifications.Notifier` and a
recording ``send`` (``tests/unit/test_notifications.py``'s); every message
is checked against its published schema too.  A call that fails sends
nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from conductor.common.exception import InvalidInput, NodeInUse
from conductor.db.engine import Database
from conductor.endpoints.inventory import InventoryEndpoint
from conductor.endpoints.quotas import QuotasEndpoint
from conductor.fleet_view import FleetView
from conductor.ironic_sync import IronicInventorySync
from conductor.notification_events import event_schema
from conductor.notifications import Notifier
from tests.dbutil import migrated
from tests.unit.test_endpoints import StubMembership
from tests.unit.test_ironic_driver import FakeIronic
from tests.unit.test_ironic_sync import add, make_conf
from tests.unit.test_notifications import CTXT, Sent

ADMIN: dict[str, Any] = {"project_id": "admin-p", "user_id": "u", "roles": ["admin"]}


class _Power:
    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def set_node_power(self, node: Any, target: str) -> None:
        self.asked.append((node.uuid, target))


@dataclass
class Calls:
    db: Database
    inventory: InventoryEndpoint
    quotas: QuotasEndpoint
    sent: Sent
    notifier: Notifier

    def sent_now(self) -> list[tuple[str, dict[str, Any]]]:
        """(event type, data) of each, after checking each against its schema."""
        self.notifier.close()
        for priority, event_type, payload, _c in self.sent.items:
            message = {
                "event_type": event_type,
                "priority": priority.value.upper(),
                "publisher_id": "ringfleet-conductor:test",
                "payload": payload,
            }
            jsonschema.validate(message, event_schema(event_type))
        return [(t, p["ringfleet_object.data"]) for _p, t, p, _c in self.sent.items]


@pytest.fixture
def calls(tmp_path: Path) -> Iterator[Calls]:
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    fleet = FleetView(db)
    fleet.attach(StubMembership())  # type: ignore[arg-type]
    sent = Sent()
    notifier = Notifier(sent, db)
    yield Calls(
        db,
        InventoryEndpoint(db, fleet, power=_Power(), notifier=notifier),
        QuotasEndpoint(db, notifier=notifier),
        sent,
        notifier,
    )
    notifier.close()
    db.dispose()


def test_node_calls_are_notified_with_the_node_after_each(calls: Calls) -> None:
    inventory = calls.inventory
    created = inventory.create_node(CTXT, {"name": "n1", "resource_class": "baremetal"})
    inventory.import_nodes(
        CTXT, [{"name": f"m{i}", "resource_class": "baremetal"} for i in range(3)]
    )
    inventory.import_nodes(CTXT, [{"name": "x", "resource_class": "rc"}], dry_run=True)
    inventory.set_node(CTXT, "n1", {"add_traits": ["CUSTOM_A"]})
    inventory.set_node_power_state(CTXT, "n1", "power on")
    inventory.set_node_maintenance(CTXT, "n1", True, "retired")
    inventory.delete_node(CTXT, "n1")
    sent = calls.sent_now()
    assert [t for t, _d in sent] == [
        *["node.create.end"] * 4,  # a dry run creates nothing
        "node.update.end",
        "node.power_set.start",
        "node.maintenance_set.end",
        "node.delete.end",
    ]
    assert sent[0][1]["uuid"] == created["uuid"]
    assert sorted(d["name"] for _t, d in sent[1:4]) == ["m0", "m1", "m2"]
    assert sent[4][1]["traits"] == ["CUSTOM_A"]
    assert sent[5][1]["to_power"] == "power on"
    assert (sent[6][1]["maintenance"], sent[6][1]["maintenance_reason"]) == (True, "retired")
    assert (sent[7][1]["name"], sent[7][1]["maintenance"]) == ("n1", True)
    assert sent[7][1]["created_at"].endswith("+00:00")


def test_a_refused_node_call_sends_nothing(calls: Calls) -> None:
    calls.inventory.create_node(CTXT, {"name": "n1", "resource_class": "baremetal"})
    calls.sent_now()
    calls.sent.items.clear()
    calls.notifier = Notifier(calls.sent, calls.db)
    calls.inventory._notifier = calls.notifier
    with pytest.raises(NodeInUse):
        calls.inventory.delete_node(CTXT, "n1")  # not in maintenance
    with pytest.raises(InvalidInput):
        calls.inventory.set_node(CTXT, "n1", {"traits": ["X"]})
    assert calls.sent_now() == []


def test_flavors_are_notified_as_novas(calls: Calls) -> None:
    calls.inventory.create_flavor(
        CTXT, {"name": "small", "resource_class": "baremetal", "required_traits": ["CUSTOM_B"]}
    )
    calls.inventory.delete_flavor(CTXT, "small")
    sent = calls.sent_now()
    assert [t for t, _d in sent] == ["flavor.create", "flavor.delete"]
    assert sent[0][1] == sent[1][1]
    assert (sent[0][1]["name"], sent[0][1]["required_traits"]) == ("small", ["CUSTOM_B"])


def test_quota_changes_are_notified_with_the_limits_after(calls: Calls) -> None:
    calls.quotas.set_quota(ADMIN, "p1", {"instances": 4})
    calls.quotas.set_quota(ADMIN, "p1", {"resource_class:baremetal": 2})
    calls.quotas.delete_quota(ADMIN, "p1")
    sent = calls.sent_now()
    assert sent == [
        (
            "quota.set.end",
            {"project_id": "p1", "limits": {"instances": 4}, "changed": {"instances": 4}},
        ),
        (
            "quota.set.end",
            {
                "project_id": "p1",
                "limits": {"instances": 4, "resource_class:baremetal": 2},
                "changed": {"resource_class:baremetal": 2},
            },
        ),
        (
            "quota.delete.end",
            {
                "project_id": "p1",
                "limits": {},
                "changed": {"instances": 4, "resource_class:baremetal": 2},
            },
        ),
    ]


def test_the_ironic_syncs_imports_are_node_creates(tmp_path: Path, calls: Calls) -> None:
    ironic = FakeIronic()
    first = add(ironic, "rack1-n1", resource_class="baremetal")
    add(ironic, "rack1-n2", resource_class="baremetal")
    conf = make_conf(tmp_path)
    sync = IronicInventorySync(calls.db, conf, client=ironic, notifier=calls.notifier)  # type: ignore[arg-type]
    assert sync.run().created == 2
    assert sync.run().created == 0  # nothing new: nothing sent
    sent = calls.sent_now()
    assert [t for t, _d in sent] == ["node.create.end"] * 2
    assert {d["name"] for _t, d in sent} == {"rack1-n1", "rack1-n2"}
    assert first.uuid in {d["uuid"] for _t, d in sent}


def test_the_ironic_syncs_changes_are_node_updates(tmp_path: Path, calls: Calls) -> None:
    """A pass sends node.update.end once per node it changed (its traits, or
    the maintenance it mirrors), the node as it is after; a pass that changes
    nothing sends nothing."""
    ironic = FakeIronic()
    traited = add(ironic, "rack1-n1", resource_class="baremetal")
    broken = add(ironic, "rack1-n2", resource_class="baremetal")
    add(ironic, "rack1-n3", resource_class="baremetal")
    conf = make_conf(tmp_path)
    sync = IronicInventorySync(calls.db, conf, client=ironic, notifier=calls.notifier)  # type: ignore[arg-type]
    assert sync.run().created == 3
    traited.traits = ("CUSTOM_B",)
    broken.maintenance, broken.maintenance_reason = True, "BMC unreachable"
    assert sync.run().updated == 2
    assert sync.run().updated == 0  # nothing new: nothing sent
    updates = [d for t, d in calls.sent_now() if t == "node.update.end"]
    assert sorted((d["name"], d["traits"], d["maintenance"]) for d in updates) == [
        ("rack1-n1", ["CUSTOM_B"], False),
        ("rack1-n2", [], True),
    ]
    assert [d["maintenance_reason"] for d in updates if d["name"] == "rack1-n2"] == [
        "ironic: BMC unreachable"
    ]
