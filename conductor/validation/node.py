# SPDX-License-Identifier: Apache-2.0
"""Nodes: the spec of a node to create, a bulk import, and a change to a node.

The fields, patterns and limits are those of :data:`conductor.common.schemas.NODE_SPEC`
and :data:`~conductor.common.schemas.NODE_UPDATE`.

Also the Ironic form of a node's ``properties["capabilities"]``
(``"boot_mode:uefi,cpu_vt:true"``), parsed here into the mapping the
scheduler matches flavors' capability expressions against.
"""

from __future__ import annotations

import dataclasses
import math
import uuid as uuidlib
from collections.abc import Mapping
from typing import Any, Final

from conductor.common.checks import UUID_REASON, normalized_uuid
from conductor.common.exception import FieldError, InvalidInput
from conductor.common.objects import PowerState, ProvisionState
from conductor.common.schemas import (
    ALLOWED_PROVISION_STATES,
    MAX_BATCH,
    MAX_PROPERTY_KEY_LENGTH,
    MAX_REASON_LENGTH,
    NODE_SPEC,
    NODE_UPDATE,
)
from conductor.validation import arguments
from conductor.validation.fields import (
    CAPABILITY_KEY_PATTERN,
    CAPABILITY_KEY_RE,
    Errors,
    check_bool,
    check_choice,
    check_group,
    check_name,
    check_resource_class,
    check_traits,
    check_uuid,
    join,
    optional_field,
    required_field,
    unknown_fields,
)

__all__ = [
    "MAX_BATCH",
    "NodeSpec",
    "NodeUpdate",
    "PropertyValue",
    "validate_capabilities",
    "validate_maintenance",
    "validate_node_filters",
    "validate_node_spec",
    "validate_node_specs",
    "validate_node_update",
]

#: the value types a node property may have (no nesting)
PropertyValue = str | int | float | bool

_POWER_STATES: Final = tuple(PowerState)
_NODE_FIELDS: Final = NODE_SPEC.fields
_NODE_FILTERS: Final = frozenset(
    {"resource_class", "group", "owner", "provision_state", "maintenance", "pinned", "uuids"}
)
#: At most this many uuids in one ``uuids`` filter (a page of them).
MAX_UUIDS_FILTER: Final = 1000
_NODE_UPDATE_FIELDS: Final = NODE_UPDATE.fields


@dataclasses.dataclass(frozen=True, slots=True)
class NodeSpec:
    """A validated node to create.

    ``capabilities`` is parsed from ``properties["capabilities"]``, whose text
    is normalized to ``"k1:v1,k2:v2"``; :meth:`to_dict` leaves it out, as a
    client would.
    """

    name: str
    uuid: str
    resource_class: str
    traits: frozenset[str] = frozenset()
    properties: Mapping[str, PropertyValue] = dataclasses.field(default_factory=dict)
    capabilities: Mapping[str, str] = dataclasses.field(default_factory=dict)
    group: str = ""
    maintenance: bool = False
    maintenance_reason: str | None = None
    provision_state: ProvisionState = ProvisionState.AVAILABLE
    power_state: PowerState = PowerState.OFF

    def to_dict(self) -> dict[str, Any]:
        """The payload form: ``validate_node_spec(spec.to_dict()) == spec``."""
        return {
            "name": self.name,
            "uuid": self.uuid,
            "resource_class": self.resource_class,
            "traits": sorted(self.traits),
            "properties": dict(self.properties),
            "group": self.group,
            "maintenance": self.maintenance,
            "maintenance_reason": self.maintenance_reason,
            "provision_state": self.provision_state.value,
            "power_state": self.power_state.value,
        }

    def to_payload(self) -> dict[str, Any]:
        """:meth:`to_dict` without the fields at their defaults, which validation
        fills in again: the same spec in less than half the bytes, and less
        to decode and check (a large import sends every node twice)."""
        payload: dict[str, Any] = {
            "name": self.name,
            "uuid": self.uuid,
            "resource_class": self.resource_class,
        }
        if self.traits:
            payload["traits"] = sorted(self.traits)
        if self.properties:
            payload["properties"] = dict(self.properties)
        if self.group:
            payload["group"] = self.group
        if self.maintenance:
            payload["maintenance"] = True
            if self.maintenance_reason is not None:
                payload["maintenance_reason"] = self.maintenance_reason
        if self.provision_state is not ProvisionState.AVAILABLE:
            payload["provision_state"] = self.provision_state.value
        if self.power_state is not PowerState.OFF:
            payload["power_state"] = self.power_state.value
        return payload


@dataclasses.dataclass(frozen=True, slots=True)
class NodeUpdate:
    """A validated change to an existing node's description.

    ``properties`` are set (merged over the stored ones; a ``capabilities``
    text is normalized as for a new node), then ``remove_properties`` are
    removed; ``add_traits`` and ``remove_traits`` change the trait set; a
    ``resource_class`` replaces the stored one.  Ownership, allocation and
    states are not descriptions and are changed by their own methods.
    """

    properties: Mapping[str, PropertyValue] = dataclasses.field(default_factory=dict)
    remove_properties: frozenset[str] = frozenset()
    add_traits: frozenset[str] = frozenset()
    remove_traits: frozenset[str] = frozenset()
    resource_class: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The payload form: ``validate_node_update(u.to_dict()) == u``."""
        return {
            "properties": dict(self.properties),
            "remove_properties": sorted(self.remove_properties),
            "add_traits": sorted(self.add_traits),
            "remove_traits": sorted(self.remove_traits),
            "resource_class": self.resource_class,
        }


# -- node capabilities ("k1:v1,k2:v2") -------------------------------------------


def _parse_capabilities(text: str, field: str, errors: Errors) -> dict[str, str] | None:
    capabilities: dict[str, str] = {}
    if not text.strip():
        return capabilities
    ok = True
    for item in text.split(","):
        # As Nova's ironic driver reads them: the key stripped, the value as
        # written (ComputeCapabilitiesFilter compares it with its blanks).
        key, sep, value = item.partition(":")
        key = key.strip()
        if not item.strip():
            errors.add(field, "empty item (stray comma)", text)
        elif not sep:
            errors.add(field, "each item must be 'key:value'", item)
        elif not CAPABILITY_KEY_RE.fullmatch(key):
            errors.add(field, f"capability key must match {CAPABILITY_KEY_PATTERN}", item)
        elif not value:
            errors.add(field, "capability value must not be empty", item)
        elif ":" in value:
            # Nova's ironic driver drops such items ("key:val" only).
            errors.add(field, "capability value must not contain ':'", item)
        elif key in capabilities:
            errors.add(field, f"duplicate capability key {key!r}", item)
        else:
            capabilities[key] = value
            continue
        ok = False
    return capabilities if ok else None


def validate_capabilities(text: object) -> dict[str, str]:
    """Parse a node's ``properties["capabilities"]`` in the Ironic form.

    ``"boot_mode:uefi, cpu_vt:true"`` -> ``{"boot_mode": "uefi", "cpu_vt":
    " true"}``: as Nova's ironic driver reads them, whitespace around keys
    is stripped and values are kept as written (blanks included); an empty
    or blank text has no capabilities.  Keys match ``^[A-Za-z0-9_.-]+$`` and
    are unique; values are non-empty and contain no ``:``.

    :raises InvalidInput: naming ``properties.capabilities``, one error per
        bad item
    """
    field = "properties.capabilities"
    errors = Errors()
    if not isinstance(text, str):
        raise InvalidInput([FieldError.about(field, "must be a string 'key:value,...'", text)])
    parsed = _parse_capabilities(text, field, errors)
    errors.raise_if_any()
    assert parsed is not None
    return parsed


# -- nodes ------------------------------------------------------------------------


def _check_properties(
    value: object, field: str, errors: Errors
) -> tuple[dict[str, PropertyValue], dict[str, str]] | None:
    if value is None:
        return {}, {}
    if not isinstance(value, Mapping):
        errors.add(field, "must be a mapping", value)
        return None
    properties: dict[str, PropertyValue] = {}
    capabilities: dict[str, str] = {}
    ok = True
    for key, item in value.items():
        item_field = join(field, key)
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_PROPERTY_KEY_LENGTH:
            errors.add(
                item_field,
                f"property names must be strings of 1 to {MAX_PROPERTY_KEY_LENGTH} characters",
                key,
            )
        elif key == "capabilities":
            if not isinstance(item, str):
                errors.add(item_field, "must be a string 'key:value,key:value'", item)
            else:
                parsed = _parse_capabilities(item, item_field, errors)
                if parsed is not None:
                    capabilities = parsed
                    properties[key] = item  # as written
                    continue
        elif isinstance(item, (bool, int, str)):
            properties[key] = item
            continue
        elif isinstance(item, float):
            if math.isfinite(item):
                properties[key] = item
                continue
            errors.add(item_field, "must be a finite number", item)
        else:
            errors.add(item_field, "must be a string, number or boolean (no nesting)", item)
        ok = False
    return (properties, capabilities) if ok else None


def _check_maintenance(
    spec: Mapping[Any, Any], prefix: str, errors: Errors
) -> tuple[bool | None, str | None]:
    maintenance: bool | None = False
    if spec.get("maintenance") is not None:
        maintenance = check_bool(spec["maintenance"], prefix + "maintenance", errors)
    reason = spec.get("maintenance_reason")
    if reason is None:
        return maintenance, None
    field = prefix + "maintenance_reason"
    if not isinstance(reason, str) or len(reason) > MAX_REASON_LENGTH:
        errors.add(field, f"must be a string of at most {MAX_REASON_LENGTH} characters", reason)
    elif maintenance is False:
        errors.add(field, "only allowed when maintenance is true", reason)
    else:
        return maintenance, reason
    return maintenance, None


def _check_node(
    spec: object, path: str, errors: Errors
) -> tuple[NodeSpec | None, str | None, str | None]:
    """Validate one node spec; returns it, its name and its *given* uuid.

    The name and given uuid are returned even when another field is bad, so
    a bulk import can also report duplicates among bad entries.
    """
    if not isinstance(spec, Mapping):
        errors.add(path, "must be a mapping", spec)
        return None, None, None
    before = len(errors)
    prefix = f"{path}." if path else ""
    unknown_fields(spec, _NODE_FIELDS, prefix, errors)

    name = required_field(spec, "name", prefix, errors, check_name)
    given_uuid = optional_field(spec, "uuid", prefix, errors, check_uuid)
    resource_class = required_field(spec, "resource_class", prefix, errors, check_resource_class)
    traits = check_traits(spec.get("traits"), prefix + "traits", errors)
    props = _check_properties(spec.get("properties"), prefix + "properties", errors)
    group = optional_field(spec, "group", prefix, errors, check_group) or ""
    maintenance, reason = _check_maintenance(spec, prefix, errors)
    provision_state = check_choice(
        spec.get("provision_state"),
        prefix + "provision_state",
        errors,
        ALLOWED_PROVISION_STATES,
        ProvisionState.AVAILABLE,
    )
    power_state = check_choice(
        spec.get("power_state"),
        prefix + "power_state",
        errors,
        _POWER_STATES,
        PowerState.OFF,
    )

    if len(errors) > before:
        return None, name, given_uuid
    assert name is not None and resource_class is not None
    assert traits is not None and props is not None and maintenance is not None
    assert provision_state is not None and power_state is not None
    node = NodeSpec(
        name=name,
        uuid=given_uuid or str(uuidlib.uuid4()),
        resource_class=resource_class,
        traits=traits,
        properties=props[0],
        capabilities=props[1],
        group=group,
        maintenance=maintenance,
        maintenance_reason=reason,
        provision_state=provision_state,
        power_state=power_state,
    )
    return node, name, given_uuid


def validate_node_spec(spec: object, *, path: str = "") -> NodeSpec:
    """Validate a node to create; *path* prefixes every field path in errors.

    Fields: ``name`` (required), ``uuid`` (generated when absent),
    ``resource_class`` (required), ``traits``, ``properties`` (flat; its
    ``capabilities`` is parsed), ``group``, ``maintenance``,
    ``maintenance_reason`` (only with maintenance), ``provision_state``
    (enroll, manageable or available), ``power_state``.

    :raises InvalidInput: naming every bad, missing or unknown field
    """
    errors = Errors()
    node, _, _ = _check_node(spec, path, errors)
    errors.raise_if_any()
    assert node is not None
    return node


def validate_node_specs(specs: object) -> list[NodeSpec]:
    """Validate a bulk import: all entries, or none.

    Each entry is checked as by :func:`validate_node_spec` with the path
    ``nodes[i]``; a name or given uuid that repeats an earlier entry's is an
    error on the later entry (``nodes[i].name`` / ``nodes[i].uuid``).  At
    most :data:`MAX_BATCH` entries.

    :raises InvalidInput: once, naming every problem of every entry
    """
    if not isinstance(specs, (list, tuple)):
        raise InvalidInput([FieldError.about("nodes", "must be a list of node specs", specs)])
    if len(specs) > MAX_BATCH:
        reason = f"must have at most {MAX_BATCH} entries"
        raise InvalidInput([FieldError.about("nodes", reason, len(specs))])
    errors = Errors()
    nodes: list[NodeSpec] = []
    names: dict[str, int] = {}
    uuids: dict[str, int] = {}
    for i, spec in enumerate(specs):
        path = f"nodes[{i}]"
        node, name, given_uuid = _check_node(spec, path, errors)
        if name is not None:
            first = names.setdefault(name, i)
            if first != i:
                errors.add(f"{path}.name", f"duplicate of nodes[{first}].name", name)
        if given_uuid is not None:
            first = uuids.setdefault(given_uuid, i)
            if first != i:
                errors.add(f"{path}.uuid", f"duplicate of nodes[{first}].uuid", given_uuid)
        if node is not None:
            nodes.append(node)
    errors.raise_if_any()
    return nodes


def _check_property_names(value: object, field: str, errors: Errors) -> frozenset[str] | None:
    if value is None:
        return frozenset()
    if not isinstance(value, (list, tuple)):
        errors.add(field, "must be a list of property names", value)
        return None
    ok = True
    for i, key in enumerate(value):
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_PROPERTY_KEY_LENGTH:
            errors.add(
                f"{field}[{i}]",
                f"property names must be strings of 1 to {MAX_PROPERTY_KEY_LENGTH} characters",
                key,
            )
            ok = False
    return frozenset(value) if ok else None


def validate_node_update(spec: object) -> NodeUpdate:
    """Validate a change to a node (``set_node``); see :class:`NodeUpdate`.

    Fields, all optional: ``properties`` (flat, as for a new node),
    ``remove_properties`` (names), ``add_traits``, ``remove_traits`` and
    ``resource_class``.  A change must change something, and may not both
    set and remove one property, nor both add and remove one trait.

    :raises InvalidInput: naming every bad or unknown field
    """
    errors = Errors()
    if not isinstance(spec, Mapping):
        errors.add("changes", "must be a mapping", spec)
        errors.raise_if_any()
    assert isinstance(spec, Mapping)
    unknown_fields(spec, _NODE_UPDATE_FIELDS, "changes.", errors)
    props = _check_properties(spec.get("properties"), "changes.properties", errors)
    removed = _check_property_names(
        spec.get("remove_properties"), "changes.remove_properties", errors
    )
    added_traits = check_traits(spec.get("add_traits"), "changes.add_traits", errors)
    removed_traits = check_traits(spec.get("remove_traits"), "changes.remove_traits", errors)
    resource_class = optional_field(
        spec, "resource_class", "changes.", errors, check_resource_class
    )
    if props is not None and removed is not None:
        for key in sorted(removed & set(props[0])):
            errors.add("changes.remove_properties", "is also set in properties", key)
    if added_traits is not None and removed_traits is not None:
        for trait in sorted(added_traits & removed_traits):
            errors.add("changes.remove_traits", "is also in add_traits", trait)
    if not errors and not (
        (props and props[0]) or removed or added_traits or removed_traits or resource_class
    ):
        errors.add("changes", "must change at least one field")
    errors.raise_if_any()
    assert props is not None and removed is not None
    assert added_traits is not None and removed_traits is not None
    return NodeUpdate(
        properties=props[0],
        remove_properties=removed,
        add_traits=added_traits,
        remove_traits=removed_traits,
        resource_class=resource_class,
    )


# -- the arguments of node calls --------------------------------------------------


def validate_maintenance(maintenance: object, reason: object) -> tuple[bool, str | None]:
    """``set_node_maintenance``'s flag and reason (only when entering maintenance).

    :raises InvalidInput: naming the first bad one, ``maintenance`` first
    """
    maintenance = arguments.check_bool(maintenance, "maintenance")
    if reason is None:
        return maintenance, None
    if not isinstance(reason, str) or len(reason) > MAX_REASON_LENGTH:
        raise InvalidInput([FieldError.about("reason", "must be text of <= 255", reason)])
    if not maintenance:
        raise InvalidInput(
            [FieldError.about("reason", "only allowed when entering maintenance", reason)]
        )
    return maintenance, reason


def validate_node_filters(filters: object) -> dict[str, Any]:
    """``list_nodes``' filters: known keys, booleans and strings; ``owner``
    lower-cased; ``uuids`` a list of uuids, normalized.

    :raises InvalidInput: naming every bad filter
    """
    if filters is None:
        return {}
    if not isinstance(filters, dict):
        raise InvalidInput([FieldError.about("filters", "must be a mapping", filters)])
    errors = [
        FieldError(f"filters.{key}", f"unknown filter; use {sorted(_NODE_FILTERS)}")
        for key in filters
        if key not in _NODE_FILTERS
    ]
    for key in ("maintenance", "pinned"):
        if key in filters and not isinstance(filters[key], bool):
            errors.append(FieldError.about(f"filters.{key}", "must be true or false", filters[key]))
    for key in ("resource_class", "group", "owner", "provision_state"):
        if key in filters and not isinstance(filters[key], str):
            errors.append(FieldError.about(f"filters.{key}", "must be text", filters[key]))
    checked = dict(filters)
    if "uuids" in filters:  # since 1.17: these nodes only
        uuids = filters["uuids"]
        if not isinstance(uuids, list) or len(uuids) > MAX_UUIDS_FILTER:
            errors.append(
                FieldError.about(
                    "filters.uuids", f"must be a list of at most {MAX_UUIDS_FILTER} uuids", uuids
                )
            )
        else:
            normalized = [normalized_uuid(u) for u in uuids]
            errors.extend(
                FieldError.about(f"filters.uuids[{i}]", UUID_REASON, u)
                for i, (u, n) in enumerate(zip(uuids, normalized, strict=True))
                if n is None
            )
            checked["uuids"] = normalized
    if errors:
        raise InvalidInput(errors)
    if "owner" in filters:  # host names are case-insensitive (check_host)
        checked["owner"] = filters["owner"].lower()
    return checked
