# SPDX-License-Identifier: Apache-2.0
"""The Ironic inventory sync's notifications on the real RabbitMQ and a real Ironic.

A conductor with ``[oslo_messaging_notifications] driver = messagingv2``
imports two nodes of a shard of the test's own (``node.create.end`` each);
then one gets a trait and the other is put in maintenance, in Ironic; the
next pass sends ``node.update.end`` for each of the two (the node as it is
after the pass), and a pass that changes nothing sends nothing; a node
removed from Ironic is retired by the next pass (maintenance), which sends
its ``node.update.end`` too.  Each
message is valid against its published schema
(``docs/notification-schemas.json``).  Real etcd, RabbitMQ, PostgreSQL and
Ironic; the conductor as a process, no agent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import oslo_messaging as messaging
import pytest
from oslo_config import cfg

from conductor.common import rpc
from conductor.ironic_sync import REMOVED_REASON
from tests.functional.fleet_harness import Fleet, close_in_background
from tests.functional.harness import unique_group
from tests.functional.test_notifications import SCHEMAS, Listened
from tests.harness import wait_for
from tests.harness.ironic import IronicHarness


@pytest.fixture
def listened(transport_url: str) -> Iterator[tuple[str, Listened]]:
    """A notification listener on a topic of the test's own: (topic, what it got)."""
    topic = unique_group("ringfleet-notifications")
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    conf([], project="ringfleet-test", default_config_files=[])
    conf.set_override("transport_url", transport_url)
    transport = messaging.get_notification_transport(conf)
    got = Listened()
    listener = messaging.get_notification_listener(
        transport, [messaging.Target(topic=topic)], [got], executor="threading"
    )
    listener.start()
    try:
        yield topic, got
    finally:
        listener.stop()
        listener.wait()
        close_in_background(transport)


def _data(listened: Listened, event_type: str) -> list[dict[str, Any]]:
    return [
        i["payload"]["ringfleet_object.data"]
        for i in listened.items()
        if i["event_type"] == event_type
    ]


def test_the_ironic_syncs_imports_and_changes_are_notified(
    fleet_on_ironic: Fleet,
    ironic: IronicHarness,
    shard: str,
    listened: tuple[str, Listened],
) -> None:
    topic, got = listened
    fleet = fleet_on_ironic
    traited, broken = ironic.enroll(2, shard=shard)
    fleet.conductor(
        extra=f"[oslo_messaging_notifications]\ndriver = messagingv2\ntopics = {topic}\n"
    )
    assert fleet.api.sync_ironic_nodes()["created"] == 2
    wait_for(lambda: len(_data(got, "node.create.end")) == 2, 30, "two node.create.end")
    assert {d["uuid"] for d in _data(got, "node.create.end")} == {traited, broken}

    assert ironic.request("PUT", f"/v1/nodes/{traited}/traits/CUSTOM_RACK_B").status_code == 204
    ironic.set_maintenance(broken, True, "BMC unreachable")
    fleet.api.sync_ironic_nodes()  # a periodic pass may come first: either tells

    def changed() -> bool:
        latest = {d["uuid"]: d for d in _data(got, "node.update.end")}
        return (
            "CUSTOM_RACK_B" in latest.get(traited, {}).get("traits", [])
            and latest.get(broken, {}).get("maintenance_reason") == "ironic: BMC unreachable"
        )

    wait_for(changed, 30, "node.update.end of the trait and of the maintenance")
    latest = {d["uuid"]: d for d in _data(got, "node.update.end")}
    assert latest[broken]["maintenance"] is True
    assert "CUSTOM_RACK_B" not in latest[broken]["traits"]
    sent = len(got.items())
    fleet.api.sync_ironic_nodes()  # nothing changed: nothing sent
    time.sleep(2)
    assert len(got.items()) == sent

    # A node removed from Ironic is retired (put in maintenance): notified too.
    ironic.delete(traited)
    fleet.api.sync_ironic_nodes()

    def retired() -> bool:
        latest = {d["uuid"]: d for d in _data(got, "node.update.end")}
        return latest.get(traited, {}).get("maintenance_reason") == REMOVED_REASON

    wait_for(retired, 30, "node.update.end of the retirement")
    assert {d["uuid"]: d for d in _data(got, "node.update.end")}[traited]["maintenance"] is True
    schemas = json.loads(Path(SCHEMAS).read_text())
    for item in got.items():
        jsonschema.validate(item, schemas[item["event_type"]])
