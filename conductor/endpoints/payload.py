"""Validation of the small payloads the agent-facing and lookup methods take.

The client-facing specs (nodes, flavors, builds) live in
:mod:`conductor.validation`; these are the ids, epochs and states that agents
and lookups send, checked with the same error type.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable, Mapping
from typing import Any

from conductor.exception import FieldError, InvalidInput
from conductor.objects import PowerState, ProvisionState
from conductor.validation import looks_like_uuid, validate_name, validate_uuid

__all__ = [
    "MAX_BATCH",
    "check_bool",
    "check_epoch",
    "check_epoch_map",
    "check_host",
    "check_ident",
    "check_limit",
    "check_node_states",
    "check_uuid",
    "check_uuid_list",
    "collect",
]

#: Nodes in one agent call: an agent claims hundreds at once, not millions.
MAX_BATCH = 10_000


def check_host(value: object, field: str = "host") -> str:
    """A host name, lower-cased: DNS names are case-insensitive (see
    :class:`conductor.conf.default.HostName`, the ``[DEFAULT] host`` type)."""
    return validate_name(value, field).lower()


def check_ident(value: object, field: str) -> str:
    """A node uuid (any accepted form, normalized) or a name."""
    if isinstance(value, str) and looks_like_uuid(value):
        return str(uuidlib.UUID(value))
    return validate_name(value, field)


def check_bool(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput([FieldError.about(field, "must be true or false", value)])
    return value


def check_limit(value: object, field: str = "limit", maximum: int = 10_000) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise InvalidInput([FieldError.about(field, f"must be an integer 1..{maximum}", value)])
    return value


def check_uuid_list(value: object, field: str) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_BATCH:
        raise InvalidInput(
            [FieldError.about(field, f"must be a list of at most {MAX_BATCH} uuids", value)]
        )
    errors: list[FieldError] = []
    result = []
    for i, item in enumerate(value):
        try:
            result.append(validate_uuid(item, f"{field}[{i}]"))
        except InvalidInput as exc:
            errors.extend(exc.errors)
    if errors:
        raise InvalidInput(errors)
    return result


def check_epoch(value: object, field: str) -> int:
    errors: list[FieldError] = []
    epoch = _check_epoch(value, field, errors)
    if epoch is None:
        raise InvalidInput(errors)
    return epoch


def check_uuid(value: object, field: str) -> str:
    return validate_uuid(value, field)


def collect(*checks: Callable[[], Any]) -> list[Any]:
    """Run several field checks, raising one InvalidInput naming every bad field."""
    results: list[Any] = []
    errors: list[FieldError] = []
    for check in checks:
        try:
            results.append(check())
        except InvalidInput as exc:
            errors.extend(exc.errors)
            results.append(None)
    if errors:
        raise InvalidInput(errors)
    return results


def _check_epoch(value: object, field: str, errors: list[FieldError]) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31 - 1:
        errors.append(FieldError.about(field, "must be an integer 0..2147483646", value))
        return None
    return value


def check_epoch_map(value: object, field: str) -> dict[str, int]:
    """``{node_uuid: epoch}``."""
    if not isinstance(value, Mapping) or len(value) > MAX_BATCH:
        raise InvalidInput(
            [FieldError.about(field, f"must map at most {MAX_BATCH} node uuids to epochs", value)]
        )
    errors: list[FieldError] = []
    result: dict[str, int] = {}
    for key, epoch in value.items():
        try:
            uuid = validate_uuid(key, f"{field}.{key}")
        except InvalidInput as exc:
            errors.extend(exc.errors)
            continue
        checked = _check_epoch(epoch, f"{field}.{key}", errors)
        if checked is not None:
            result[uuid] = checked
    if errors:
        raise InvalidInput(errors)
    return result


def check_node_states(value: object, field: str = "states") -> list[dict[str, Any]]:
    """``[{node_uuid, epoch, power_state, provision_state}]`` from an agent."""
    if not isinstance(value, list) or len(value) > MAX_BATCH:
        raise InvalidInput(
            [FieldError.about(field, f"must be a list of at most {MAX_BATCH} reports", value)]
        )
    errors: list[FieldError] = []
    result = []
    for i, item in enumerate(value):
        path = f"{field}[{i}]"
        if not isinstance(item, Mapping):
            errors.append(FieldError.about(path, "must be a mapping", item))
            continue
        unknown = set(item) - {"node_uuid", "epoch", "power_state", "provision_state"}
        for key in sorted(map(str, unknown)):
            errors.append(FieldError(f"{path}.{key}", "unknown field"))
        try:
            uuid = validate_uuid(item.get("node_uuid"), f"{path}.node_uuid")
        except InvalidInput as exc:
            errors.extend(exc.errors)
            continue
        epoch = _check_epoch(item.get("epoch"), f"{path}.epoch", errors)
        power = item.get("power_state")
        if power is not None and power not in [p.value for p in PowerState]:
            errors.append(FieldError.about(f"{path}.power_state", "unknown power state", power))
        provision = item.get("provision_state")
        if provision is not None and provision not in [p.value for p in ProvisionState]:
            errors.append(
                FieldError.about(f"{path}.provision_state", "unknown provision state", provision)
            )
        result.append(
            {"node_uuid": uuid, "epoch": epoch, "power_state": power, "provision_state": provision}
        )
    if errors:
        raise InvalidInput(errors)
    return result
