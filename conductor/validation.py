"""Validation of every payload the conductor accepts from clients.

Why this module exists: invariant 8 (``docs/architecture.rst``, "The
invariants"), *bad input is refused whole*.  A malformed node spec, flavor
or build request must get a clear error naming the field, and must change
nothing.  So validation happens here, before any database transaction or RPC
cast, as pure functions (no I/O) that

* accept anything (payloads arrive as untyped JSON-like primitives over
  oslo.messaging, so every parameter is typed ``object`` and checked),
* return frozen, typed, normalized values (lower-case UUIDs, trait
  frozensets, parsed capabilities) that the rest of the conductor can trust,
* and otherwise raise one :class:`~conductor.common.exception.InvalidInput` listing
  *every* problem found -- for a bulk import of 10,000 nodes, every problem of
  every entry -- so a client fixes its input in one round trip, and an import
  with one bad entry imports nothing.

Field paths in errors look like ``resource_class``, ``nodes[17].traits[2]``
or ``extra_specs.capabilities:boot_mode``; the empty path is the payload
itself.  For every optional field an explicit ``None`` (JSON ``null``) means
the same as leaving the field out.

The capability expressions of flavors (Nova's ComputeCapabilitiesFilter
language) are parsed by :mod:`conductor.scheduler.capabilities`, next to
the scheduler that evaluates them.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
import uuid as uuidlib
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from conductor.common.checks import MAX_NAME_LENGTH, UUID_REASON, name_problem, normalized_uuid
from conductor.common.exception import FieldError, InvalidInput, render_value
from conductor.common.objects import PowerState, ProvisionState
from conductor.scheduler.capabilities import CapabilityExpression, expression_or_reason

__all__ = [
    "MAX_BATCH",
    "MAX_COUNT",
    "MAX_TRAITS",
    "BuildRequest",
    "FlavorSpec",
    "NodeSpec",
    "NodeUpdate",
    "PropertyValue",
    "validate_build_request",
    "validate_capabilities",
    "validate_flavor_spec",
    "validate_node_spec",
    "validate_node_specs",
    "validate_node_update",
]

#: the value types a node property may have (no nesting)
PropertyValue = str | int | float | bool
#: the value types a scheduler hint may have (JSON primitives)
HintValue = str | int | float | bool | None

MAX_TRAITS: Final = 64
MAX_BATCH: Final = 100_000
MAX_COUNT: Final = 1000
MAX_REASON_LENGTH: Final = 255
MAX_PROPERTY_KEY_LENGTH: Final = 255
MAX_EXTRA_SPEC_VALUE_LENGTH: Final = 255
MAX_SCHEDULER_HINTS: Final = 64
MAX_HINT_NAME_LENGTH: Final = 255
# Long enough for a JsonFilter query.
MAX_HINT_VALUE_LENGTH: Final = 4096

# Every pattern is matched with fullmatch(): "$" alone would accept a
# trailing newline.
_RESOURCE_CLASS_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$"
_TRAIT_PATTERN: Final = r"^[A-Z][A-Z0-9_]{0,254}$"
_GROUP_PATTERN: Final = r"^[A-Za-z0-9._-]{0,80}$"
_CAPABILITY_KEY_PATTERN: Final = r"^[A-Za-z0-9_.-]+$"
_RESOURCE_CLASS_RE: Final = re.compile(_RESOURCE_CLASS_PATTERN)
_TRAIT_RE: Final = re.compile(_TRAIT_PATTERN)
_GROUP_RE: Final = re.compile(_GROUP_PATTERN)
_CAPABILITY_KEY_RE: Final = re.compile(_CAPABILITY_KEY_PATTERN)
# C0 controls and DEL: they break log lines and table output.
_CONTROL_RE: Final = re.compile(r"[\x00-\x1f\x7f]")

_CAPABILITIES_SCOPE: Final = "capabilities:"
_TRAIT_SCOPE: Final = "trait:"
_TRAIT_REQUIRED: Final = "required"
_TRAIT_FORBIDDEN: Final = "forbidden"

_ALLOWED_PROVISION_STATES: Final = (
    ProvisionState.ENROLL,
    ProvisionState.MANAGEABLE,
    ProvisionState.AVAILABLE,
)
_POWER_STATES: Final = tuple(PowerState)
_NODE_FIELDS: Final = frozenset(
    {
        "name",
        "uuid",
        "resource_class",
        "traits",
        "properties",
        "group",
        "maintenance",
        "maintenance_reason",
        "provision_state",
        "power_state",
    }
)
_NODE_UPDATE_FIELDS: Final = frozenset(
    {"properties", "remove_properties", "add_traits", "remove_traits", "resource_class"}
)
_FLAVOR_FIELDS: Final = frozenset(
    {"name", "resource_class", "required_traits", "forbidden_traits", "extra_specs"}
)
_BUILD_FIELDS: Final = frozenset(
    {"flavor", "count", "name", "group", "instance_uuids", "scheduler_hints"}
)

_NO_VALUE: Final = object()

_T = TypeVar("_T")
_E = TypeVar("_E", bound=enum.Enum)


# -- the results ----------------------------------------------------------------


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


@dataclasses.dataclass(frozen=True, slots=True)
class FlavorSpec:
    """A validated flavor to create.

    ``trait:<TRAIT>`` extra specs are merged into the trait sets, so
    ``extra_specs`` holds only the ``capabilities:<key>`` entries (as
    written), and ``capabilities`` maps each ``<key>`` to its parsed
    expression.  :meth:`to_dict` leaves ``capabilities`` out.
    """

    name: str
    resource_class: str
    required_traits: frozenset[str] = frozenset()
    forbidden_traits: frozenset[str] = frozenset()
    extra_specs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    capabilities: Mapping[str, CapabilityExpression] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The payload form: ``validate_flavor_spec(spec.to_dict()) == spec``."""
        return {
            "name": self.name,
            "resource_class": self.resource_class,
            "required_traits": sorted(self.required_traits),
            "forbidden_traits": sorted(self.forbidden_traits),
            "extra_specs": dict(self.extra_specs),
        }


@dataclasses.dataclass(frozen=True, slots=True)
class BuildRequest:
    """A validated request to build ``count`` instances of a flavor.

    :ivar name: the instance name (``name-1`` .. ``name-N`` when
        ``count > 1``), or ``None`` to let the conductor choose
    :ivar group: the node group hint; ``None`` is no hint, while ``""`` asks
        for the default group
    :ivar instance_uuids: client-chosen instance ids (one per instance, which
        makes retries idempotent), or ``None`` to let the conductor choose
    :ivar scheduler_hints: hint name -> a JSON primitive (string, number,
        boolean, null), for scheduler filters that read hints (since API 1.6)
    """

    flavor: str
    count: int = 1
    name: str | None = None
    group: str | None = None
    instance_uuids: tuple[str, ...] | None = None
    scheduler_hints: Mapping[str, HintValue] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The payload form: ``validate_build_request(req.to_dict()) == req``."""
        return {
            "flavor": self.flavor,
            "count": self.count,
            "name": self.name,
            "group": self.group,
            "instance_uuids": None if self.instance_uuids is None else list(self.instance_uuids),
            "scheduler_hints": dict(self.scheduler_hints),
        }


# -- error collection -----------------------------------------------------------


class _Errors:
    """The field errors found so far in one payload."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: list[FieldError] = []

    def add(self, field: str, reason: str, value: object = _NO_VALUE) -> None:
        if value is _NO_VALUE:
            self.items.append(FieldError(field, reason))
        else:
            self.items.append(FieldError.about(field, reason, value))

    def __len__(self) -> int:
        return len(self.items)

    def raise_if_any(self) -> None:
        if self.items:
            raise InvalidInput(self.items)


_Check = Callable[[object, str, _Errors], _T | None]


def _key_text(key: object) -> str:
    """A key as it appears in a field path: as is, unless empty, long or not a string."""
    if isinstance(key, str) and 0 < len(key) <= 80:
        return key
    return render_value(key)


def _join(path: str, key: object) -> str:
    text = _key_text(key)
    return f"{path}.{text}" if path else text


def _unknown_fields(
    spec: Mapping[Any, Any], allowed: frozenset[str], prefix: str, errors: _Errors
) -> None:
    for key in spec:
        if key not in allowed:
            errors.add(prefix + _key_text(key), "unknown field")


def _required_field(
    spec: Mapping[Any, Any], key: str, prefix: str, errors: _Errors, check: _Check[_T]
) -> _T | None:
    value = spec.get(key)
    field = prefix + key
    if value is None:
        errors.add(field, "is required")
        return None
    return check(value, field, errors)


def _optional_field(
    spec: Mapping[Any, Any], key: str, prefix: str, errors: _Errors, check: _Check[_T]
) -> _T | None:
    value = spec.get(key)
    if value is None:
        return None
    return check(value, prefix + key, errors)


def _check_choice(
    value: object, field: str, errors: _Errors, choices: tuple[_E, ...], default: _E
) -> _E | None:
    if value is None:
        return default
    if isinstance(value, str):
        for choice in choices:
            if value == choice.value:
                return choice
    errors.add(field, f"must be one of {', '.join(repr(c.value) for c in choices)}", value)
    return None


# -- single values --------------------------------------------------------------


def _check_name(value: object, field: str, errors: _Errors) -> str | None:
    problem = name_problem(value)
    if problem is not None:
        errors.add(field, problem, value)
        return None
    assert isinstance(value, str)
    return value


def _check_uuid(value: object, field: str, errors: _Errors) -> str | None:
    normalized = normalized_uuid(value)
    if normalized is None:
        errors.add(field, UUID_REASON, value)
    return normalized


def _check_pattern(
    value: object, field: str, errors: _Errors, regex: re.Pattern[str], pattern: str
) -> str | None:
    if not isinstance(value, str):
        errors.add(field, "must be a string", value)
    elif not regex.fullmatch(value):
        errors.add(field, f"must match {pattern}", value)
    else:
        return value
    return None


def _check_resource_class(value: object, field: str, errors: _Errors) -> str | None:
    return _check_pattern(value, field, errors, _RESOURCE_CLASS_RE, _RESOURCE_CLASS_PATTERN)


def _check_group(value: object, field: str, errors: _Errors) -> str | None:
    return _check_pattern(value, field, errors, _GROUP_RE, _GROUP_PATTERN)


def _check_trait(value: object, field: str, errors: _Errors) -> str | None:
    return _check_pattern(value, field, errors, _TRAIT_RE, _TRAIT_PATTERN)


def _check_traits(value: object, field: str, errors: _Errors) -> frozenset[str] | None:
    if value is None:
        return frozenset()
    if not isinstance(value, (list, tuple)):
        errors.add(field, "must be a list of trait names", value)
        return None
    if len(value) > MAX_TRAITS:
        errors.add(field, f"must have at most {MAX_TRAITS} traits", len(value))
        return None
    seen: set[str] = set()
    ok = True
    for i, trait in enumerate(value):
        item = f"{field}[{i}]"
        if _check_trait(trait, item, errors) is None:
            ok = False
        elif trait in seen:
            errors.add(item, "duplicate trait", trait)
            ok = False
        else:
            seen.add(trait)
    return frozenset(seen) if ok else None


def _check_bool(value: object, field: str, errors: _Errors) -> bool | None:
    if isinstance(value, bool):
        return value
    errors.add(field, "must be true or false", value)
    return None


def _check_display_name(
    value: object, field: str, errors: _Errors, max_length: int, note: str = ""
) -> str | None:
    if not isinstance(value, str):
        errors.add(field, "must be a string", value)
    elif not 1 <= len(value) <= max_length:
        errors.add(field, f"must be 1 to {max_length} characters long{note}", value)
    elif value != value.strip():
        errors.add(field, "must not start or end with whitespace", value)
    elif _CONTROL_RE.search(value):
        errors.add(field, "must not contain control characters", value)
    else:
        return value
    return None


def _check_uuid_list(
    value: object, field: str, errors: _Errors, count: int | None
) -> tuple[str, ...] | None:
    if not isinstance(value, (list, tuple)):
        errors.add(field, "must be a list of UUIDs", value)
        return None
    if count is not None and len(value) != count:
        errors.add(field, f"must have exactly count={count} entries", len(value))
        return None
    if len(value) > MAX_COUNT:  # count itself was bad; do not walk a huge list
        errors.add(field, f"must have at most {MAX_COUNT} entries", len(value))
        return None
    seen: dict[str, int] = {}
    ok = True
    for i, item in enumerate(value):
        item_field = f"{field}[{i}]"
        normalized = _check_uuid(item, item_field, errors)
        if normalized is None:
            ok = False
        elif normalized in seen:
            errors.add(item_field, f"duplicate of {field}[{seen[normalized]}]", item)
            ok = False
        else:
            seen[normalized] = i
    return tuple(seen) if ok else None


# -- node capabilities ("k1:v1,k2:v2") -------------------------------------------


def _parse_capabilities(text: str, field: str, errors: _Errors) -> dict[str, str] | None:
    capabilities: dict[str, str] = {}
    if not text.strip():
        return capabilities
    ok = True
    for raw in text.split(","):
        item = raw.strip()
        key, sep, value = item.partition(":")
        key, value = key.strip(), value.strip()
        if not item:
            errors.add(field, "empty item (stray comma)", text)
        elif not sep:
            errors.add(field, "each item must be 'key:value'", item)
        elif not _CAPABILITY_KEY_RE.fullmatch(key):
            errors.add(field, f"capability key must match {_CAPABILITY_KEY_PATTERN}", item)
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


def _format_capabilities(capabilities: Mapping[str, str]) -> str:
    return ",".join(f"{k}:{v}" for k, v in capabilities.items())


def validate_capabilities(text: object) -> dict[str, str]:
    """Parse a node's ``properties["capabilities"]`` in the Ironic form.

    ``"boot_mode:uefi, cpu_vt:true"`` -> ``{"boot_mode": "uefi", "cpu_vt":
    "true"}``.  Whitespace around items, keys and values is stripped; an
    empty or blank text has no capabilities.  Keys match
    ``^[A-Za-z0-9_.-]+$`` and are unique; values are non-empty and contain no
    ``:``.

    :raises InvalidInput: naming ``properties.capabilities``, one error per
        bad item
    """
    field = "properties.capabilities"
    errors = _Errors()
    if not isinstance(text, str):
        raise InvalidInput([FieldError.about(field, "must be a string 'key:value,...'", text)])
    parsed = _parse_capabilities(text, field, errors)
    errors.raise_if_any()
    assert parsed is not None
    return parsed


# -- flavor capability expressions (conductor.scheduler.capabilities) -----------


def _parse_expression(text: str, field: str, errors: _Errors) -> CapabilityExpression | None:
    result = expression_or_reason(text)
    if isinstance(result, str):
        errors.add(field, result, text)
        return None
    return result


# -- nodes ------------------------------------------------------------------------


def _check_properties(
    value: object, field: str, errors: _Errors
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
        item_field = _join(field, key)
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
                    properties[key] = _format_capabilities(parsed)
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
    spec: Mapping[Any, Any], prefix: str, errors: _Errors
) -> tuple[bool | None, str | None]:
    maintenance: bool | None = False
    if spec.get("maintenance") is not None:
        maintenance = _check_bool(spec["maintenance"], prefix + "maintenance", errors)
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
    spec: object, path: str, errors: _Errors
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
    _unknown_fields(spec, _NODE_FIELDS, prefix, errors)

    name = _required_field(spec, "name", prefix, errors, _check_name)
    given_uuid = _optional_field(spec, "uuid", prefix, errors, _check_uuid)
    resource_class = _required_field(spec, "resource_class", prefix, errors, _check_resource_class)
    traits = _check_traits(spec.get("traits"), prefix + "traits", errors)
    props = _check_properties(spec.get("properties"), prefix + "properties", errors)
    group = _optional_field(spec, "group", prefix, errors, _check_group) or ""
    maintenance, reason = _check_maintenance(spec, prefix, errors)
    provision_state = _check_choice(
        spec.get("provision_state"),
        prefix + "provision_state",
        errors,
        _ALLOWED_PROVISION_STATES,
        ProvisionState.AVAILABLE,
    )
    power_state = _check_choice(
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
    errors = _Errors()
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
    errors = _Errors()
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


def _check_property_names(value: object, field: str, errors: _Errors) -> frozenset[str] | None:
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
    errors = _Errors()
    if not isinstance(spec, Mapping):
        errors.add("changes", "must be a mapping", spec)
        errors.raise_if_any()
    assert isinstance(spec, Mapping)
    _unknown_fields(spec, _NODE_UPDATE_FIELDS, "changes.", errors)
    props = _check_properties(spec.get("properties"), "changes.properties", errors)
    removed = _check_property_names(
        spec.get("remove_properties"), "changes.remove_properties", errors
    )
    added_traits = _check_traits(spec.get("add_traits"), "changes.add_traits", errors)
    removed_traits = _check_traits(spec.get("remove_traits"), "changes.remove_traits", errors)
    resource_class = _optional_field(
        spec, "resource_class", "changes.", errors, _check_resource_class
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


# -- flavors ----------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class _ExtraSpecs:
    specs: dict[str, str] = dataclasses.field(default_factory=dict)  # capabilities:* only
    expressions: dict[str, CapabilityExpression] = dataclasses.field(default_factory=dict)
    traits: dict[str, str] = dataclasses.field(default_factory=dict)  # -> required|forbidden


def _check_capability_spec(
    key: str, text: str, field: str, errors: _Errors, out: _ExtraSpecs
) -> bool:
    capability = key[len(_CAPABILITIES_SCOPE) :]
    expression = _parse_expression(text, field, errors)
    if not _CAPABILITY_KEY_RE.fullmatch(capability):
        errors.add(field, f"capability key must match {_CAPABILITY_KEY_PATTERN}", capability)
        return False
    if expression is None:
        return False
    out.specs[key] = text
    out.expressions[capability] = expression
    return True


def _check_trait_spec(key: str, text: str, field: str, errors: _Errors, out: _ExtraSpecs) -> bool:
    trait = key[len(_TRAIT_SCOPE) :]
    if not _TRAIT_RE.fullmatch(trait):
        errors.add(field, f"trait name must match {_TRAIT_PATTERN}", trait)
    elif text not in (_TRAIT_REQUIRED, _TRAIT_FORBIDDEN):
        errors.add(field, "must be 'required' or 'forbidden'", text)
    else:
        out.traits[trait] = text
        return True
    return False


def _check_extra_spec(
    key: object, text: object, field: str, errors: _Errors, out: _ExtraSpecs
) -> bool:
    if not isinstance(key, str):
        errors.add(field, "keys must be strings", key)
    elif not isinstance(text, str):
        errors.add(field, "must be a string", text)
    elif len(text) > MAX_EXTRA_SPEC_VALUE_LENGTH:
        errors.add(field, f"must be at most {MAX_EXTRA_SPEC_VALUE_LENGTH} characters", text)
    elif key.startswith(_CAPABILITIES_SCOPE):
        return _check_capability_spec(key, text, field, errors, out)
    elif key.startswith(_TRAIT_SCOPE):
        return _check_trait_spec(key, text, field, errors, out)
    else:
        errors.add(field, "unknown extra spec (use 'capabilities:<key>' or 'trait:<TRAIT>')")
    return False


def _check_extra_specs(value: object, field: str, errors: _Errors) -> tuple[_ExtraSpecs, bool]:
    """The good extra specs, and whether all were good."""
    out = _ExtraSpecs()
    if value is None:
        return out, True
    if not isinstance(value, Mapping):
        errors.add(field, "must be a mapping of strings to strings", value)
        return out, False
    ok = True
    for key, text in value.items():
        ok = _check_extra_spec(key, text, _join(field, key), errors, out) and ok
    return out, ok


def validate_flavor_spec(spec: object) -> FlavorSpec:
    """Validate a flavor to create.

    Fields: ``name`` (required, like a node name), ``resource_class``
    (required), ``required_traits``, ``forbidden_traits`` (disjoint) and
    ``extra_specs``: ``capabilities:<key>`` -> a capability expression (see
    :func:`parse_capability_expression`), ``trait:<TRAIT>`` -> ``required``
    or ``forbidden`` (merged into the trait sets; contradicting them is an
    error).

    :raises InvalidInput: naming every bad, missing or unknown field
    """
    if not isinstance(spec, Mapping):
        raise InvalidInput([FieldError.about("", "must be a mapping", spec)])
    errors = _Errors()
    _unknown_fields(spec, _FLAVOR_FIELDS, "", errors)
    name = _required_field(spec, "name", "", errors, _check_name)
    resource_class = _required_field(spec, "resource_class", "", errors, _check_resource_class)
    required = _check_traits(spec.get("required_traits"), "required_traits", errors)
    forbidden = _check_traits(spec.get("forbidden_traits"), "forbidden_traits", errors)
    if required is not None and forbidden is not None:
        both = sorted(required & forbidden)
        if both:
            errors.add("forbidden_traits", "traits also in required_traits", both)
    extra, _ = _check_extra_specs(spec.get("extra_specs"), "extra_specs", errors)
    for trait, how in extra.traits.items():
        against = forbidden if how == _TRAIT_REQUIRED else required
        if against is not None and trait in against:
            other = "forbidden_traits" if how == _TRAIT_REQUIRED else "required_traits"
            field = _join("extra_specs", _TRAIT_SCOPE + trait)
            errors.add(field, f"contradicts {other}", how)
    errors.raise_if_any()
    assert name is not None and resource_class is not None
    assert required is not None and forbidden is not None
    return FlavorSpec(
        name=name,
        resource_class=resource_class,
        required_traits=required | {t for t, h in extra.traits.items() if h == _TRAIT_REQUIRED},
        forbidden_traits=forbidden | {t for t, h in extra.traits.items() if h == _TRAIT_FORBIDDEN},
        extra_specs=extra.specs,
        capabilities=extra.expressions,
    )


# -- build requests ---------------------------------------------------------------


def _check_scheduler_hints(value: object, field: str, errors: _Errors) -> dict[str, HintValue]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errors.add(field, "must be a mapping of hint names to strings, numbers or booleans", value)
        return {}
    if len(value) > MAX_SCHEDULER_HINTS:
        errors.add(field, f"must have at most {MAX_SCHEDULER_HINTS} hints", len(value))
        return {}
    hints: dict[str, HintValue] = {}
    for key, item in value.items():
        item_field = _join(field, key)
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_HINT_NAME_LENGTH:
            errors.add(
                item_field, f"hint names must be strings of 1 to {MAX_HINT_NAME_LENGTH} characters"
            )
        elif isinstance(item, str) and len(item) > MAX_HINT_VALUE_LENGTH:
            errors.add(item_field, f"must be at most {MAX_HINT_VALUE_LENGTH} characters", item)
        elif isinstance(item, float) and not math.isfinite(item):
            errors.add(item_field, "must be a finite number", item)
        elif item is None or isinstance(item, (str, bool, int, float)):
            hints[key] = item
        else:
            errors.add(item_field, "must be a string, number, boolean or null (no nesting)", item)
    return hints


def validate_build_request(spec: object) -> BuildRequest:
    """Validate a request to build instances.

    Fields: ``flavor`` (required, a flavor name), ``count`` (1 to
    :data:`MAX_COUNT`, default 1), ``name`` (at most 255 characters including
    the ``-N`` suffix added when ``count > 1``), ``group`` (a node group
    hint), ``instance_uuids`` (unique, exactly ``count`` of them),
    ``scheduler_hints`` (a mapping of at most :data:`MAX_SCHEDULER_HINTS`
    names to JSON primitives: strings of at most
    :data:`MAX_HINT_VALUE_LENGTH` characters, finite numbers, booleans,
    null).

    :raises InvalidInput: naming every bad, missing or unknown field
    """
    if not isinstance(spec, Mapping):
        raise InvalidInput([FieldError.about("", "must be a mapping", spec)])
    errors = _Errors()
    _unknown_fields(spec, _BUILD_FIELDS, "", errors)
    flavor = _required_field(spec, "flavor", "", errors, _check_name)

    count: int | None = 1
    if spec.get("count") is not None:
        value = spec["count"]
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_COUNT:
            count = int(value)
        else:
            errors.add("count", f"must be an integer from 1 to {MAX_COUNT}", value)
            count = None

    name = None
    if spec.get("name") is not None:
        # Leave room for the "-N" suffix of the last instance.
        suffix = f"-{count}" if count is not None and count > 1 else ""
        note = f" (with room for the suffix {suffix!r})" if suffix else ""
        name = _check_display_name(
            spec["name"], "name", errors, MAX_NAME_LENGTH - len(suffix), note
        )
    group = _optional_field(spec, "group", "", errors, _check_group)
    instance_uuids = None
    if spec.get("instance_uuids") is not None:
        instance_uuids = _check_uuid_list(spec["instance_uuids"], "instance_uuids", errors, count)
    hints = _check_scheduler_hints(spec.get("scheduler_hints"), "scheduler_hints", errors)
    errors.raise_if_any()
    assert flavor is not None and count is not None
    return BuildRequest(
        flavor=flavor,
        count=count,
        name=name,
        group=group,
        instance_uuids=instance_uuids,
        scheduler_hints=hints,
    )
