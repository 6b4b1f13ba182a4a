"""Validation of the small payloads the conductor's agent-facing and lookup methods take.

The client-facing specs (nodes, flavors, builds) live in
:mod:`conductor.validation`; these are the ids, epochs and states that agents
and lookups send, checked with the same error type.  The single-value checks
the agent's endpoints use too (uuid, name, epoch, :func:`collect`) are in
:mod:`conductor.common.checks`.
"""

from __future__ import annotations

import datetime
import uuid as uuidlib
from collections.abc import Mapping
from typing import Any

from conductor.common.checks import check_epoch, looks_like_uuid, validate_name, validate_uuid
from conductor.common.exception import FieldError, InvalidInput
from conductor.common.objects import PowerState, ProvisionState

__all__ = [
    "MAX_BATCH",
    "check_bool",
    "check_epoch_map",
    "check_host",
    "check_ident",
    "check_limit",
    "check_node_states",
    "check_time",
    "check_uuid",
    "check_uuid_list",
]

#: Nodes in one agent call: an agent claims hundreds at once, not millions.
MAX_BATCH = 10_000


def check_host(value: object, field: str = "host") -> str:
    """A host name, lower-cased: DNS names are case-insensitive (see
    :class:`conductor.common.conf.default.HostName`, the ``[DEFAULT] host`` type)."""
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


#: Times outside these years are no time a record of ours can carry.
_YEARS = (1970, 9998)


def check_time(value: object, field: str) -> datetime.datetime:
    """An ISO 8601 time as the naive UTC the database stores.

    Fully checked: a well-formed time that cannot be converted to UTC
    (``0001-01-01T00:00:00+14:00`` is before year 1) or lies outside
    :data:`_YEARS` is refused like a malformed one, never left to overflow
    in the conversion or the query.
    """
    problem = "must be an ISO 8601 time"
    if not isinstance(value, str) or len(value) > 64:
        raise InvalidInput([FieldError.about(field, problem, value)])
    try:
        moment = datetime.datetime.fromisoformat(value)
        if moment.tzinfo is not None:
            moment = moment.astimezone(datetime.UTC).replace(tzinfo=None)
    except (ValueError, OverflowError):
        raise InvalidInput([FieldError.about(field, problem, value)]) from None
    if not _YEARS[0] <= moment.year <= _YEARS[1]:
        raise InvalidInput(
            [
                FieldError.about(
                    field, f"must be a time in the years {_YEARS[0]}..{_YEARS[1]}", value
                )
            ]
        )
    return moment


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


def check_uuid(value: object, field: str) -> str:
    return validate_uuid(value, field)


def _check_epoch(value: object, field: str, errors: list[FieldError]) -> int | None:
    """:func:`check_epoch`, collecting its error instead of raising it."""
    try:
        return check_epoch(value, field)
    except InvalidInput as exc:
        errors.extend(exc.errors)
        return None


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
