# SPDX-License-Identifier: Apache-2.0
"""Data objects exchanged between the database, scheduler, RPC and agents.

Plain frozen dataclasses: the database layer returns them, the scheduler
reads them, and RPC endpoints turn them into primitives with
:meth:`to_dict`.  Nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Mapping
from typing import Any

from conductor.common.clock import shown

__all__ = [
    "INVENTORY_COLUMNS",
    "INVENTORY_RECORDS",
    "Flavor",
    "Instance",
    "Node",
    "Ownership",
    "PowerState",
    "ProvisionState",
    "TaskState",
    "VmState",
    "inventory_entries",
]

#: A ``list_node_uuids`` page in columns (API 1.8): each key's list, and the
#: field of an entry it holds (the page as objects: one mapping per node).
INVENTORY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("uuids", "uuid"),
    ("groups", "group"),
    ("owners", "owner"),
    ("epochs", "epoch"),
    ("pinned", "pinned"),
)


#: Lists of a page in columns that a conductor may leave out (one that
#: predates them): each node's recorded power state.
INVENTORY_RECORDS: tuple[tuple[str, str], ...] = (("power_states", "power_state"),)


def inventory_entries(page: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The entries of a ``list_node_uuids`` page in columns, one mapping per node
    (with the :data:`INVENTORY_RECORDS` fields the page has)."""
    present = INVENTORY_COLUMNS + tuple(r for r in INVENTORY_RECORDS if r[0] in page)
    columns = [page[key] for key, _field in present]
    fields = [field for _key, field in present]
    return [dict(zip(fields, values, strict=True)) for values in zip(*columns, strict=True)]


class ProvisionState(enum.StrEnum):
    """Where a node is in its life; only ``available`` nodes are scheduled."""

    ENROLL = "enroll"
    MANAGEABLE = "manageable"
    AVAILABLE = "available"
    DEPLOYING = "deploying"
    ACTIVE = "active"
    DELETING = "deleting"
    CLEANING = "cleaning"
    ERROR = "error"


class PowerState(enum.StrEnum):
    ON = "power on"
    OFF = "power off"


class VmState(enum.StrEnum):
    BUILDING = "building"
    ACTIVE = "active"
    #: Powered off by its user (``stop``); ``start`` makes it active again.
    STOPPED = "stopped"
    DELETING = "deleting"
    DELETED = "deleted"
    ERROR = "error"


class TaskState(enum.StrEnum):
    SCHEDULING = "scheduling"
    NETWORKING = "networking"
    SPAWNING = "spawning"
    DELETING = "deleting"
    #: A soft reboot is in flight (Nova's names for the task states).
    REBOOTING = "rebooting"
    #: A hard reboot is in flight.
    REBOOTING_HARD = "rebooting_hard"
    POWERING_OFF = "powering-off"
    POWERING_ON = "powering-on"
    REBUILDING = "rebuilding"


def _primitive(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime.datetime):
        return shown(value)
    if isinstance(value, Mapping):
        return {k: _primitive(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, frozenset, set)):
        items = [_primitive(v) for v in value]
        return sorted(items) if isinstance(value, (set, frozenset)) else items
    return value


class _Record:
    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly primitives (enums as values, datetimes ISO 8601 in UTC, with the zone)."""
        return {
            f.name: _primitive(getattr(self, f.name))
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Node(_Record):
    """A bare-metal node as stored.

    ``owner``/``owner_epoch`` is the fencing claim: the agent that may act on
    the node, and the epoch every action must carry.  ``capabilities`` is
    parsed from ``properties["capabilities"]`` ("k1:v1,k2:v2").
    ``failed_builds`` counts the builds that failed on the node since the
    last one that succeeded there, as Nova's compute counts them for its
    ``BuildFailureWeigher``.
    """

    uuid: str
    name: str
    resource_class: str
    traits: frozenset[str] = frozenset()
    properties: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    capabilities: Mapping[str, str] = dataclasses.field(default_factory=dict)
    group: str = ""
    provision_state: ProvisionState = ProvisionState.AVAILABLE
    power_state: PowerState | None = PowerState.OFF
    maintenance: bool = False
    maintenance_reason: str | None = None
    owner: str | None = None
    owner_epoch: int = 0
    instance_uuid: str | None = None
    created_at: datetime.datetime | None = None
    updated_at: datetime.datetime | None = None
    failed_builds: int = 0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Node:
        """The inverse of :meth:`to_dict` (what travels over RPC)."""
        return cls(
            uuid=data["uuid"],
            name=data["name"],
            resource_class=data["resource_class"],
            traits=frozenset(data.get("traits") or ()),
            properties=dict(data.get("properties") or {}),
            capabilities=dict(data.get("capabilities") or {}),
            group=data.get("group") or "",
            provision_state=ProvisionState(data.get("provision_state", "available")),
            power_state=PowerState(data["power_state"]) if data.get("power_state") else None,
            maintenance=bool(data.get("maintenance")),
            maintenance_reason=data.get("maintenance_reason"),
            owner=data.get("owner"),
            owner_epoch=int(data.get("owner_epoch") or 0),
            instance_uuid=data.get("instance_uuid"),
            failed_builds=int(data.get("failed_builds") or 0),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Flavor(_Record):
    """What a build asks for: a resource class, traits and capabilities.

    ``extra_specs`` holds ``capabilities:<key>`` entries whose values use the
    ComputeCapabilitiesFilter operators (``s==``, ``<in>``, ``<or>``, ``>=``,
    ``<=``, ``==``, ``=``, ...).
    """

    name: str
    resource_class: str
    required_traits: frozenset[str] = frozenset()
    forbidden_traits: frozenset[str] = frozenset()
    extra_specs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    created_at: datetime.datetime | None = None
    default_image: Mapping[str, str] | None = None
    """the image of a build of this flavor that names none (since API 1.11)"""


@dataclasses.dataclass(frozen=True, slots=True)
class Instance(_Record):
    """An instance (a build request from the moment it is stored)."""

    uuid: str
    name: str
    flavor: str
    vm_state: VmState = VmState.BUILDING
    task_state: TaskState | None = TaskState.SCHEDULING
    node_uuid: str | None = None
    host: str | None = None
    group_hint: str | None = None
    fault: str | None = None
    attempts: int = 0
    tried_nodes: tuple[str, ...] = ()
    created_at: datetime.datetime | None = None
    updated_at: datetime.datetime | None = None
    scheduler_hints: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """the build's scheduler hints: name -> JSON primitive (since API 1.6)"""
    image: Mapping[str, str] | None = None
    """the image deployed: ``source``, checksum, ``disk_format``... (since API 1.11)"""
    config_drive: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)
    """``user_data``, ``meta_data``, ``network_data`` (since API 1.11); not
    in ``repr()``: user data may hold secrets"""
    project_id: str | None = None
    """the project it belongs to (since API 1.12; ``None``: built before
    tenancy or by the operator, admins' only)"""
    user_id: str | None = None
    """the user who asked for it (since API 1.12)"""
    key_name: str | None = None
    """the key pair it was built with (since API 1.21)"""


@dataclasses.dataclass(frozen=True, slots=True)
class Ownership(_Record):
    """The claim on one node: who owns it, at which epoch."""

    node_uuid: str
    owner: str | None
    epoch: int
    pinned: bool = False

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ownership:
        """The inverse of :meth:`to_dict` (what travels over RPC)."""
        return cls(
            node_uuid=data["node_uuid"],
            owner=data.get("owner"),
            epoch=int(data["epoch"]),
            pinned=bool(data.get("pinned", False)),
        )


@dataclasses.dataclass(frozen=True)
class ClaimOutcome:
    """What a batch claim did (``claim_nodes``).

    :ivar granted: every requested node the caller owns now, with its epoch
        (newly claimed, re-homed or already its own).
    :ivar rehomed: pinned nodes taken from a departed owner; their
        instances' host moved to the caller.
    :ivar refused: node uuid -> the owner that keeps it.
    :ivar missing: requested uuids with no such node.
    :ivar restarting: owners among ``refused`` that are stopped for a
        restart, with the seconds left until their nodes may be claimed.
    :ivar changed_at: the change time (ISO 8601) stamped on the nodes this
        claim took (API 1.15; ``None`` before, or when it took none): an
        agent's change reads leave out what its own claims changed.
    :ivar taken: the nodes this claim took (a new epoch), each with the
        instance it hosts (re-homed) or ``None``; the conductor's own
        record (its notifications), not in the reply.
    """

    granted: list[Ownership] = dataclasses.field(default_factory=list)
    rehomed: list[str] = dataclasses.field(default_factory=list)
    refused: dict[str, str | None] = dataclasses.field(default_factory=dict)
    missing: list[str] = dataclasses.field(default_factory=list)
    restarting: dict[str, float] = dataclasses.field(default_factory=dict)
    changed_at: str | None = None
    taken: dict[str, str | None] = dataclasses.field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "granted": [o.to_dict() for o in self.granted],
            "rehomed": list(self.rehomed),
            "refused": dict(self.refused),
            "missing": list(self.missing),
            "restarting": dict(self.restarting),
            "changed_at": self.changed_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClaimOutcome:
        """The inverse of :meth:`to_dict`; a reply before API 1.5 has no ``restarting``."""
        return cls(
            granted=[Ownership.from_dict(o) for o in data["granted"]],
            rehomed=list(data["rehomed"]),
            refused=dict(data["refused"]),
            missing=list(data["missing"]),
            restarting={k: float(v) for k, v in data.get("restarting", {}).items()},
            changed_at=data.get("changed_at"),
        )


@dataclasses.dataclass(frozen=True)
class ReleaseOutcome:
    """What a batch release or transfer did (``release_nodes``, ``transfer_nodes``).

    :ivar done: uuids whose ownership changed, with their new epoch.
    :ivar refused: uuid -> the current ownership (``None``: no such node),
        for claims that were stale or nodes that are pinned.
    :ivar hosted: of the nodes a transfer moved, the pinned ones with the
        instance each hosts; the conductor's own record (its
        notifications), not in the reply.
    """

    done: dict[str, int] = dataclasses.field(default_factory=dict)
    refused: dict[str, Ownership | None] = dataclasses.field(default_factory=dict)
    hosted: dict[str, str] = dataclasses.field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "done": dict(self.done),
            "refused": {u: (o.to_dict() if o else None) for u, o in self.refused.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReleaseOutcome:
        """The inverse of :meth:`to_dict`."""
        return cls(
            done={u: int(e) for u, e in data["done"].items()},
            refused={
                u: (Ownership.from_dict(o) if o else None) for u, o in data["refused"].items()
            },
        )
