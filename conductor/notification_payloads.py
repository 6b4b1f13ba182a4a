# SPDX-License-Identifier: Apache-2.0
"""The notifications' payloads, each declared once, and the JSON schemas made from them.

A payload is a frozen dataclass with a ``NAME`` and a ``VERSION``; each
field says what it is in its annotation (``Annotated[str, Doc("...")]``).  On the wire a payload is
an envelope, as Nova's ``nova_object`` and Ironic's ``ironic_object``:
``ringfleet_object.name``, ``.namespace``, ``.version`` and ``.data`` (its
fields), and a payload nested in another (an instance's flavor) is an
envelope too.  :func:`payload_schema` makes a payload's JSON schema from
its declaration, so what is sent, what the documentation lists and what
consumers validate against cannot drift apart; ``tools/gen_notification_doc.py``
publishes them.

Versions follow Nova's rule: a new field is a minor version (a consumer of
2.0 reads 2.1), a field removed or changed a major one.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Final

from conductor.common.objects import Flavor, Instance, Node, PowerState, VmState

__all__ = [
    "NAMESPACE",
    "Doc",
    "FaultPayload",
    "FlavorPayload",
    "ImagePayload",
    "InstancePayload",
    "NodeOwner",
    "NodeOwnershipPayload",
    "NodePayload",
    "NodePowerPayload",
    "Payload",
    "QuotaPayload",
    "RequestSpecPayload",
    "field_docs",
    "payload_schema",
    "primitive",
]

#: ``ringfleet_object.namespace`` of every payload.
NAMESPACE: Final = "ringfleet"
#: Nova's ``InstancePowerState`` names, from the node's power.
_INSTANCE_POWER: Final[Mapping[PowerState | None, str]] = {
    PowerState.ON: "running",
    PowerState.OFF: "shutdown",
    None: "pending",
}
#: The power an idle instance's node has, by the instance's state.
_IDLE_POWER: Final[Mapping[VmState, PowerState]] = {
    VmState.ACTIVE: PowerState.ON,
    VmState.STOPPED: PowerState.OFF,
}


def _instance_power(instance: Instance, node_power: PowerState | None) -> str:
    """Nova's power state of *instance*: an idle ``active`` one is running and
    an idle ``stopped`` one is off by the conductor's invariants (a node found
    otherwise makes it ``stopped``); else its node's recorded power, which
    lags behind a deploy until the owner's next report."""
    if instance.node_uuid is None:
        return _INSTANCE_POWER[None]
    if instance.task_state is None and instance.vm_state in _IDLE_POWER:
        return _INSTANCE_POWER[_IDLE_POWER[instance.vm_state]]
    return _INSTANCE_POWER[node_power]


@dataclasses.dataclass(frozen=True)
class Doc:
    """What a payload field is: ``Annotated[type, Doc("...")]``, said once
    (the schema's description and the documentation's)."""

    text: str


def _utc(value: datetime.datetime | None) -> str | None:
    """ISO 8601 with its zone: the database stores UTC without one."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return value.astimezone(datetime.UTC).isoformat()


def primitive(value: Any) -> Any:
    """*value* as JSON: payloads in envelopes, times in UTC with their zone."""
    if isinstance(value, Payload):
        return value.envelope()
    if isinstance(value, datetime.datetime | enum.Enum):
        return _utc(value) if isinstance(value, datetime.datetime) else value.value
    if isinstance(value, Mapping):
        return {k: primitive(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [primitive(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: primitive(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


@dataclasses.dataclass(frozen=True)
class Payload:
    """A versioned payload: its fields, in a ``ringfleet_object`` envelope."""

    NAME: ClassVar[str]
    VERSION: ClassVar[str]

    def envelope(self) -> dict[str, Any]:
        return {
            "ringfleet_object.name": self.NAME,
            "ringfleet_object.namespace": NAMESPACE,
            "ringfleet_object.version": self.VERSION,
            "ringfleet_object.data": {
                f.name: primitive(getattr(self, f.name)) for f in dataclasses.fields(self)
            },
        }


# -- nested payloads ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FlavorPayload(Payload):
    """A flavor (``flavor.create``, ``flavor.delete``, and an instance's)."""

    NAME: ClassVar[str] = "FlavorPayload"
    VERSION: ClassVar[str] = "1.0"

    name: Annotated[str, Doc("the flavor's name")]
    resource_class: Annotated[
        str | None,
        Doc(
            "the node resource class it asks for (``null`` in an instance's payload "
            "once the flavor is deleted)"
        ),
    ]
    required_traits: Annotated[tuple[str, ...], Doc("traits a node must have, sorted")]
    forbidden_traits: Annotated[tuple[str, ...], Doc("traits a node must not have, sorted")]
    extra_specs: Annotated[dict[str, str], Doc("``capabilities:<key>`` entries and the like")]
    created_at: Annotated[datetime.datetime | None, Doc("ISO 8601 with its zone (UTC)")]

    @classmethod
    def of(cls, flavor: Flavor) -> FlavorPayload:
        return cls(
            name=flavor.name,
            resource_class=flavor.resource_class,
            required_traits=tuple(sorted(flavor.required_traits)),
            forbidden_traits=tuple(sorted(flavor.forbidden_traits)),
            extra_specs=dict(flavor.extra_specs),
            created_at=flavor.created_at,
        )

    @classmethod
    def gone(cls, name: str) -> FlavorPayload:
        """A flavor deleted since the instance was built: its name only."""
        return cls(name, None, (), (), {}, None)


@dataclasses.dataclass(frozen=True)
class ImagePayload(Payload):
    """The image an instance is deployed from (Nova's ``ImageMetaPayload``, what ringfleet has)."""

    NAME: ClassVar[str] = "ImagePayload"
    VERSION: ClassVar[str] = "1.0"

    source: Annotated[
        str | None,
        Doc(
            "where the image is, without its query string (a signed URL's signature "
            "is a credential)"
        ),
    ]
    disk_format: Annotated[str | None, Doc("``raw``, ``qcow2``... or ``null``")]
    os_hash_algo: Annotated[
        str | None, Doc("the hash of ``os_hash_value`` (``sha256``...) or ``null``")
    ]
    os_hash_value: Annotated[str | None, Doc("the image's hash, hexadecimal, or ``null``")]
    checksum: Annotated[str | None, Doc("the legacy md5 checksum, or ``null``")]
    kernel: Annotated[str | None, Doc("a partition image's kernel, or ``null``")]
    ramdisk: Annotated[str | None, Doc("a partition image's ramdisk, or ``null``")]

    @classmethod
    def of(cls, image: Mapping[str, Any] | None) -> ImagePayload | None:
        if not image:
            return None

        def text(key: str) -> str | None:
            value = image.get(key)
            return None if value is None else str(value).split("?", 1)[0]

        return cls(
            source=text("source"),
            disk_format=text("disk_format"),
            os_hash_algo=text("os_hash_algo"),
            os_hash_value=text("os_hash_value"),
            checksum=text("checksum"),
            kernel=text("kernel"),
            ramdisk=text("ramdisk"),
        )


@dataclasses.dataclass(frozen=True)
class FaultPayload(Payload):
    """Why an instance failed (Nova's ``ExceptionPayload``, as ringfleet records it)."""

    NAME: ClassVar[str] = "FaultPayload"
    VERSION: ClassVar[str] = "1.0"

    message: Annotated[str, Doc("the whole fault, one line per failed attempt")]
    reasons: Annotated[tuple[str, ...], Doc("the same, a line each")]

    @classmethod
    def of(cls, fault: str | None) -> FaultPayload | None:
        if not fault:
            return None
        return cls(message=fault, reasons=tuple(fault.splitlines()))


# -- instances ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class InstancePayload(Payload):
    """An instance as it is after the change (every ``instance.*`` event).

    2.0: ``flavor`` a ``FlavorPayload`` (was its name), ``image`` an
    ``ImagePayload`` (was ``image_source``), ``fault`` a ``FaultPayload``
    (was text), ``power_state`` added, times with their zone (1.0 had none).
    """

    NAME: ClassVar[str] = "InstancePayload"
    VERSION: ClassVar[str] = "2.0"

    uuid: Annotated[str, Doc("the instance")]
    name: Annotated[str, Doc("its name")]
    project_id: Annotated[str | None, Doc("the project it belongs to (``null``: the operator's)")]
    user_id: Annotated[str | None, Doc("the user who asked for it")]
    flavor: Annotated[
        FlavorPayload, Doc("its flavor, as defined now (read by the instance's flavor name)")
    ]
    image: Annotated[ImagePayload | None, Doc("its image (``null``: none given)")]
    vm_state: Annotated[
        str, Doc("``building``, ``active``, ``stopped``, ``error``, ``deleting`` or ``deleted``")
    ]
    power_state: Annotated[
        str,
        Doc(
            "Nova's names: ``running`` (an idle ``active`` instance, or its node "
            "recorded on), ``shutdown`` (an idle ``stopped`` one, or its node recorded "
            "off), ``pending`` (no node, or its power not known yet)"
        ),
    ]
    task_state: Annotated[
        str | None, Doc("the work in flight (``scheduling``, ``rebooting``...) or ``null``")
    ]
    node_uuid: Annotated[
        str | None, Doc("its node (``null`` before one is allocated, and once deleted)")
    ]
    host: Annotated[str | None, Doc("the agent that owns that node")]
    fault: Annotated[FaultPayload | None, Doc("why it failed (``null``: never failed)")]
    attempts: Annotated[int, Doc("failed build attempts so far")]
    created_at: Annotated[datetime.datetime | None, Doc("ISO 8601 with its zone (UTC)")]
    updated_at: Annotated[
        datetime.datetime | None, Doc("ISO 8601 with its zone (UTC): the change's time")
    ]

    @classmethod
    def of(
        cls, instance: Instance, flavor: Flavor | None, node_power: PowerState | None
    ) -> InstancePayload:
        """*flavor*: ``None`` once deleted; *node_power*: its node's (``None``: no node)."""
        return cls(
            uuid=instance.uuid,
            name=instance.name,
            project_id=instance.project_id,
            user_id=instance.user_id,
            flavor=FlavorPayload.gone(instance.flavor)
            if flavor is None
            else FlavorPayload.of(flavor),
            image=ImagePayload.of(instance.image),
            vm_state=instance.vm_state.value,
            power_state=_instance_power(instance, node_power),
            task_state=None if instance.task_state is None else instance.task_state.value,
            node_uuid=instance.node_uuid,
            host=instance.host,
            fault=FaultPayload.of(instance.fault),
            attempts=instance.attempts,
            created_at=instance.created_at,
            updated_at=instance.updated_at,
        )


@dataclasses.dataclass(frozen=True)
class RequestSpecPayload(Payload):
    """What a build asked the scheduler for (``scheduler.select_destinations.*``, as Nova)."""

    NAME: ClassVar[str] = "RequestSpecPayload"
    VERSION: ClassVar[str] = "1.0"

    instance_uuid: Annotated[str, Doc("the instance being placed")]
    project_id: Annotated[str | None, Doc("its project")]
    flavor: Annotated[FlavorPayload, Doc("its flavor")]
    image: Annotated[ImagePayload | None, Doc("its image, or ``null``")]
    num_instances: Annotated[int, Doc("instances placed by this request (1: each is placed alone)")]
    group_hint: Annotated[str | None, Doc("the build's group hint, or ``null``")]
    scheduler_hints: Annotated[dict[str, Any], Doc("the build's scheduler hints")]
    ignore_nodes: Annotated[tuple[str, ...], Doc("nodes not to use: earlier attempts that failed")]
    node_uuid: Annotated[
        str | None, Doc("``.end``: the node chosen and allocated; ``null`` in ``.start``")
    ]
    host: Annotated[str | None, Doc("``.end``: that node's owner; ``null`` in ``.start``")]


# -- nodes --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NodePayload(Payload):
    """A node (``node.create.end``, ``.update.end``, ``.maintenance_set.end``, ``.delete.end``)."""

    NAME: ClassVar[str] = "NodePayload"
    VERSION: ClassVar[str] = "1.0"

    uuid: Annotated[str, Doc("the node")]
    name: Annotated[str, Doc("its name")]
    resource_class: Annotated[str, Doc("its resource class")]
    traits: Annotated[tuple[str, ...], Doc("its traits, sorted")]
    properties: Annotated[dict[str, Any], Doc("its properties (``capabilities``, ``cpu_arch``...)")]
    group: Annotated[str, Doc('its group (``""``: the default)')]
    provision_state: Annotated[str, Doc("``available``, ``deploying``, ``active``...")]
    power_state: Annotated[str | None, Doc("``power on``, ``power off`` or ``null`` (not known)")]
    maintenance: Annotated[bool, Doc("whether it is in maintenance")]
    maintenance_reason: Annotated[str | None, Doc("why, or ``null``")]
    owner: Annotated[str | None, Doc("the agent that owns it, or ``null``")]
    owner_epoch: Annotated[int, Doc("its ownership epoch")]
    instance_uuid: Annotated[str | None, Doc("the instance it hosts, or ``null``")]
    created_at: Annotated[datetime.datetime | None, Doc("ISO 8601 with its zone (UTC)")]
    updated_at: Annotated[datetime.datetime | None, Doc("ISO 8601 with its zone (UTC)")]

    @classmethod
    def fields_of(cls, node: Node) -> dict[str, Any]:
        return {
            "uuid": node.uuid,
            "name": node.name,
            "resource_class": node.resource_class,
            "traits": tuple(sorted(node.traits)),
            "properties": dict(node.properties),
            "group": node.group,
            "provision_state": node.provision_state.value,
            "power_state": None if node.power_state is None else node.power_state.value,
            "maintenance": node.maintenance,
            "maintenance_reason": node.maintenance_reason,
            "owner": node.owner,
            "owner_epoch": node.owner_epoch,
            "instance_uuid": node.instance_uuid,
            "created_at": node.created_at,
            "updated_at": node.updated_at,
        }

    @classmethod
    def of(cls, node: Node) -> NodePayload:
        return cls(**cls.fields_of(node))


@dataclasses.dataclass(frozen=True)
class NodePowerPayload(NodePayload):
    """A node power request (``node.power_set.start``, ``.end``, ``.error``, as Ironic's).

    1.1: ``fault`` (why a ``.error`` failed).
    """

    NAME: ClassVar[str] = "NodePowerPayload"
    VERSION: ClassVar[str] = "1.1"

    to_power: Annotated[
        str,
        Doc(
            "what was asked: ``power on``, ``power off``, ``rebooting``, ``soft power off`` "
            "or ``soft rebooting``"
        ),
    ] = ""
    fault: Annotated[
        FaultPayload | None,
        Doc("why the node's owner failed it (``.error``); ``null`` otherwise (since 1.1)"),
    ] = None

    @classmethod
    def requested(cls, node: Node, target: str, fault: str | None = None) -> NodePowerPayload:
        return cls(**cls.fields_of(node), to_power=target, fault=FaultPayload.of(fault))


@dataclasses.dataclass(frozen=True)
class NodeOwner:
    """One node's ownership after a change (an item of :class:`NodeOwnershipPayload`)."""

    uuid: Annotated[str, Doc("the node")]
    owner: Annotated[str | None, Doc("its owner after the change (``null`` after a release)")]
    owner_epoch: Annotated[int, Doc("its epoch after the change")]
    previous_owner: Annotated[
        str | None,
        Doc(
            "who owned it before; ``null`` for ``claim`` and ``rehome`` (free, or an owner "
            "that left: the node's previous notification names it)"
        ),
    ] = None
    instance_uuid: Annotated[str | None, Doc("the instance it hosts (pinned), or ``null``")] = None


@dataclasses.dataclass(frozen=True)
class NodeOwnershipPayload(Payload):
    """Nodes whose ``(owner, owner_epoch)`` one committed change set (``node.owner.update``)."""

    NAME: ClassVar[str] = "NodeOwnershipPayload"
    VERSION: ClassVar[str] = "1.0"

    reason: Annotated[
        str,
        Doc(
            "``claim`` (an agent took free nodes, or those of an agent that left), "
            "``rehome`` (pinned nodes of an agent gone longer than ``rehome_grace``, "
            "their instances with them), ``release``, ``transfer`` (a drain, a "
            "hand-over) or ``move`` (an operator's ``node move``)"
        ),
    ]
    agent: Annotated[
        str | None, Doc("the agent whose call made the change (``null`` for a ``move``)")
    ]
    nodes: Annotated[tuple[NodeOwner, ...], Doc("up to 500 nodes, one item each")]


# -- quotas -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class QuotaPayload(Payload):
    """A project's own limits after an admin changed them (``quota.set.end``,
    ``quota.delete.end``)."""

    NAME: ClassVar[str] = "QuotaPayload"
    VERSION: ClassVar[str] = "1.0"

    project_id: Annotated[str, Doc("the project")]
    limits: Annotated[
        dict[str, int],
        Doc(
            "its own limits after the change, resource -> limit (-1: unlimited); the "
            "defaults apply to every resource not here (``{}`` after a delete)"
        ),
    ]
    changed: Annotated[
        dict[str, int],
        Doc("what this call set (``quota.set``), or the limits it dropped (``quota.delete``)"),
    ]


# -- schemas ------------------------------------------------------------------------

_SCALARS: Final[Mapping[Any, dict[str, Any]]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    bool: {"type": "boolean"},
    float: {"type": "number"},
    datetime.datetime: {"type": "string", "format": "date-time", "pattern": r"(Z|[+-]\d\d:\d\d)$"},
    Any: {},
}


def field_docs(cls: type) -> dict[str, tuple[Any, str]]:
    """*cls*'s fields: name -> (type, what it is), in order."""
    hints = typing.get_type_hints(cls, include_extras=True)
    found = {}
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        [text] = [m.text for m in typing.get_args(hint)[1:] if isinstance(m, Doc)]
        found[field.name] = (typing.get_args(hint)[0], text)
    return found


def _type_schema(hint: Any, defs: dict[str, Any]) -> dict[str, Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        options = [a for a in args if a is not type(None)]
        [inner] = options
        return {"anyOf": [_type_schema(inner, defs), {"type": "null"}]}
    if origin is tuple:
        return {"type": "array", "items": _type_schema(args[0], defs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type_schema(args[1], defs)}
    if isinstance(hint, type) and issubclass(hint, Payload):
        _add_def(hint, defs)
        return {"$ref": f"#/$defs/{hint.NAME}"}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _object_schema(hint, defs)
    return dict(_SCALARS[hint])


def _object_schema(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    fields = field_docs(cls)
    return {
        "type": "object",
        "properties": {
            name: {**_type_schema(hint, defs), "description": text}
            for name, (hint, text) in fields.items()
        },
        "required": list(fields),
        "additionalProperties": False,
    }


def _add_def(cls: type[Payload], defs: dict[str, Any]) -> None:
    if cls.NAME in defs:
        return
    defs[cls.NAME] = {}  # a placeholder: a payload nested in itself is not redefined
    defs[cls.NAME] = {
        "description": (cls.__doc__ or "").split("\n\n", 1)[0].strip(),
        "type": "object",
        "properties": {
            "ringfleet_object.name": {"const": cls.NAME},
            "ringfleet_object.namespace": {"const": NAMESPACE},
            "ringfleet_object.version": {"const": cls.VERSION},
            "ringfleet_object.data": _object_schema(cls, defs),
        },
        "required": [
            "ringfleet_object.name",
            "ringfleet_object.namespace",
            "ringfleet_object.version",
            "ringfleet_object.data",
        ],
        "additionalProperties": False,
    }


def payload_schema(cls: type[Payload]) -> dict[str, Any]:
    """The JSON schema (2020-12) of *cls*'s envelope, nested payloads in ``$defs``."""
    defs: dict[str, Any] = {}
    _add_def(cls, defs)
    return {"$ref": f"#/$defs/{cls.NAME}", "$defs": dict(sorted(defs.items()))}
