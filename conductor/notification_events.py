# SPDX-License-Identifier: Apache-2.0
"""Every notification a conductor sends: its event type, priority, payload and when.

The one list of them: :class:`conductor.notifications.Notifier` sends
nothing that is not here, the documentation's table and each event's JSON
schema (:func:`event_schema`) are made from it
(``tools/gen_notification_doc.py``), and the functional test checks that
each one sent validates against its schema.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any, Final

from conductor.common import verbs
from conductor.notification_payloads import (
    FlavorPayload,
    InstancePayload,
    NodeOwnershipPayload,
    NodePayload,
    NodePowerPayload,
    Payload,
    QuotaPayload,
    RequestSpecPayload,
    payload_schema,
)

__all__ = ["EVENTS", "PUBLISHER_PATTERN", "EventSpec", "Priority", "event_schema"]

#: ``publisher_id`` of every notification: ``ringfleet-conductor:<host>``.
PUBLISHER_PATTERN: Final = r"^ringfleet-conductor:.+$"
#: The JSON Schema dialect of the published schemas.
DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"


class Priority(enum.StrEnum):
    """A notification's priority (oslo.messaging's, as Nova uses them)."""

    INFO = "info"
    ERROR = "error"


@dataclasses.dataclass(frozen=True)
class EventSpec:
    """One event type: its payload and when it is sent."""

    event_type: str
    payload: type[Payload]
    when: str

    @property
    def priority(self) -> Priority:
        return Priority.ERROR if self.event_type.endswith(".error") else Priority.INFO


def _instance_events() -> list[EventSpec]:
    events = [
        EventSpec(
            "instance.create.start",
            InstancePayload,
            "a build request is stored (``building``/``scheduling``)",
        ),
        EventSpec(
            "instance.create.end",
            InstancePayload,
            "its node's owner reported the deploy done (``active``)",
        ),
        EventSpec(
            "instance.create.error",
            InstancePayload,
            "the build gave up: no valid node, its last attempt failed or timed out "
            "(``error``; ``fault`` has every attempt's reason)",
        ),
    ]
    for verb in verbs.ACTIONS:
        if verb.notification == "delete" or any(
            e.event_type == f"instance.{verb.notification}.start" for e in events
        ):
            continue  # a soft and a hard reboot are both ``reboot``
        name = verb.notification
        events += [
            EventSpec(
                f"instance.{name}.start",
                InstancePayload,
                f"a {name} is stored (``task_state`` set)",
            ),
            EventSpec(
                f"instance.{name}.end",
                InstancePayload,
                "the node's owner reported it done"
                + (
                    " (``stopped``); also when the node was found powered off outside "
                    "ringfleet (no ``.start`` before it)"
                    if name == "power_off"
                    else " (``active``)"
                ),
            ),
            EventSpec(
                f"instance.{name}.error",
                InstancePayload,
                "it failed for good (the state it was in, no task; ``fault`` says why)",
            ),
        ]
    return [
        *events,
        EventSpec(
            "instance.delete.start",
            InstancePayload,
            "a delete is stored (``deleting``); not again for a delete issued while one runs",
        ),
        EventSpec(
            "instance.delete.end",
            InstancePayload,
            "the node is torn down and free (``deleted``)",
        ),
        EventSpec(
            "instance.delete.error",
            InstancePayload,
            "the teardown failed for good (``error``, the node kept allocated; a new "
            "delete retries)",
        ),
    ]


_OTHER_EVENTS: Final = (
    EventSpec(
        "scheduler.select_destinations.start",
        RequestSpecPayload,
        "a build is about to be placed (each attempt of a build; not committed: the "
        "request as the scheduler gets it)",
    ),
    EventSpec(
        "scheduler.select_destinations.end",
        RequestSpecPayload,
        "a node was chosen and allocated to the build (committed); none when no node "
        "fits (``instance.create.error`` follows, or the build waits for an owner)",
    ),
    EventSpec(
        "node.create.end",
        NodePayload,
        "a node is created or imported, by a client or the Ironic sync (one per node)",
    ),
    EventSpec(
        "node.update.end",
        NodePayload,
        "a node's properties, traits or resource class changed, by a client or by the "
        "Ironic sync (one per node it changed: Ironic's properties, traits, resource class, "
        "maintenance or group)",
    ),
    EventSpec("node.maintenance_set.end", NodePayload, "a node was put in or out of maintenance"),
    EventSpec(
        "node.power_set.start",
        NodePowerPayload,
        "an operator's node power request was routed to the node's owner (its "
        "``power_state`` follows in the node, as observed)",
    ),
    EventSpec(
        "node.power_set.end",
        NodePowerPayload,
        "the node's owner did an operator's power request (the node with the "
        "``power_state`` it answered)",
    ),
    EventSpec(
        "node.power_set.error",
        NodePowerPayload,
        "the node's owner failed an operator's power request (``fault`` says why; not "
        "retried: the request is over)",
    ),
    EventSpec("node.delete.end", NodePayload, "a node was deleted (as it was before)"),
    EventSpec(
        "node.owner.update",
        NodeOwnershipPayload,
        "nodes changed owner: a claim, a re-home, a release, a hand-over (drain) or a move",
    ),
    EventSpec("flavor.create", FlavorPayload, "a flavor was created (as Nova's)"),
    EventSpec("flavor.delete", FlavorPayload, "a flavor was deleted (as Nova's; as it was)"),
    EventSpec("quota.set.end", QuotaPayload, "an admin set some of a project's limits"),
    EventSpec(
        "quota.delete.end", QuotaPayload, "an admin dropped a project's own limits (defaults apply)"
    ),
)

#: Every event type a conductor sends, by name.
EVENTS: Final[Mapping[str, EventSpec]] = {
    spec.event_type: spec for spec in (*_instance_events(), *_OTHER_EVENTS)
}


def event_schema(event_type: str) -> dict[str, Any]:
    """The JSON schema of a whole notification of *event_type*, as a consumer
    reads it: ``event_type``, ``priority``, ``publisher_id`` and ``payload``
    (oslo.messaging's ``message_id`` and ``timestamp`` beside them).

    :raises KeyError: no such event type
    """
    spec = EVENTS[event_type]
    payload = payload_schema(spec.payload)
    return {
        "$schema": DIALECT,
        "$id": f"urn:ringfleet:notification:{event_type}",
        "title": event_type,
        "description": spec.when,
        "type": "object",
        "properties": {
            "event_type": {"const": event_type},
            "priority": {"const": spec.priority.value.upper()},
            "publisher_id": {"type": "string", "pattern": PUBLISHER_PATTERN},
            "payload": {"$ref": payload["$ref"]},
        },
        "required": ["event_type", "priority", "publisher_id", "payload"],
        "$defs": payload["$defs"],
    }
