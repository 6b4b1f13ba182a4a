# SPDX-License-Identifier: Apache-2.0
"""Stand-ins for what the conductor's endpoints call, for unit tests of the endpoints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from conductor.common.objects import Flavor, Instance
from hashring.membership import State

__all__ = ["RecordingQueue", "StubMembership"]


class StubMembership:
    """What FleetView asks its membership: the connection state, whether
    its back end fails; and to read the group soon (counted)."""

    def __init__(self, state: State = State.CONNECTED) -> None:
        self.state = state
        self.backend_failing = False
        self.reads_asked = 0

    def read_soon(self) -> None:
        self.reads_asked += 1


@dataclass
class RecordingQueue:
    """A build queue that only records what it was given."""

    submitted: list[list[str]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    acted: list[str] = field(default_factory=list)

    def submit(self, instance_uuids: list[str]) -> None:
        self.submitted.append(list(instance_uuids))

    def submit_stored(self, stored: Sequence[Instance], flavor: Flavor) -> None:
        self.submit([i.uuid for i in stored])

    def delete(self, instance_uuid: str) -> None:
        self.deleted.append(instance_uuid)

    def act(self, instance_uuid: str) -> None:
        self.acted.append(instance_uuid)
