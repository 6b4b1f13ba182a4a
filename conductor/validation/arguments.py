# SPDX-License-Identifier: Apache-2.0
"""The small arguments of the conductor's lookups and agent calls.

Hosts, node idents, flags, times, page sizes, lists of node uuids and maps
of node uuids to epochs: checked like the resources' fields (one
:class:`~conductor.common.exception.InvalidInput` naming every bad field),
but raised from each check, since each argument is one value.  What agents
report (results, states, hand-overs) is in
:mod:`conductor.validation.agent_reports`; the single-value checks the
compute agent uses too (uuid, name, epoch) are in
:mod:`conductor.common.checks`.
"""

from __future__ import annotations

import datetime
import re
import uuid as uuidlib
from collections.abc import Mapping

from conductor.common.checks import (
    check_epoch,
    check_list,
    looks_like_uuid,
    validate_name,
    validate_uuid,
)
from conductor.common.exception import FieldError, InvalidInput
from conductor.common.schemas import (
    MAX_QUOTA_LIMIT,
    PROJECT_ID_PATTERN,
    QUOTA_RESOURCE_PATTERN,
)
from conductor.validation.fields import whole_number

__all__ = [
    "MAX_AGENT_BATCH",
    "MAX_QUOTA_LIMIT",
    "PROJECT_ID_PATTERN",
    "QUOTA_RESOURCE_PATTERN",
    "check_bool",
    "check_epoch_map",
    "check_groups",
    "check_host",
    "check_ident",
    "check_limit",
    "check_project",
    "check_quota_limits",
    "check_request_id",
    "check_time",
    "check_user",
    "check_uuid_list",
]

#: Nodes in one agent call: an agent claims hundreds at once, not millions.
MAX_AGENT_BATCH = 10_000
#: Node groups one inventory read may name.
MAX_GROUPS = 1000


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
    return check_list(value, field, validate_uuid, maximum=MAX_AGENT_BATCH, what="uuids")


def _check_epoch(value: object, field: str, errors: list[FieldError]) -> int | None:
    """:func:`check_epoch`, collecting its error instead of raising it."""
    try:
        return check_epoch(value, field)
    except InvalidInput as exc:
        errors.extend(exc.errors)
        return None


def check_epoch_map(value: object, field: str) -> dict[str, int]:
    """``{node_uuid: epoch}``."""
    if not isinstance(value, Mapping) or len(value) > MAX_AGENT_BATCH:
        reason = f"must map at most {MAX_AGENT_BATCH} node uuids to epochs"
        raise InvalidInput([FieldError.about(field, reason, value)])
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


def check_groups(value: object, field: str = "groups") -> list[str]:
    """Node group names, as an inventory read filters on them."""
    if (
        not isinstance(value, list)
        or len(value) > MAX_GROUPS
        or not all(isinstance(g, str) and len(g) <= 80 for g in value)
    ):
        raise InvalidInput(
            [FieldError.about(field, f"must be a list of at most {MAX_GROUPS} group names", value)]
        )
    return value


_QUOTA_RESOURCE = re.compile(QUOTA_RESOURCE_PATTERN)


_PROJECT_ID = re.compile(PROJECT_ID_PATTERN)


def check_project(value: object, field: str = "project_id") -> str:
    """A Keystone project id (as the token carries it: 1 to 255 characters)."""
    return _keystone_id(value, field, "a project id")


def check_user(value: object, field: str = "user_id") -> str:
    """A Keystone user id (as the token carries it: 1 to 255 characters)."""
    return _keystone_id(value, field, "a user id")


def _keystone_id(value: object, field: str, what: str) -> str:
    if not isinstance(value, str) or not _PROJECT_ID.fullmatch(value):
        reason = f"{what} (1 to 255 characters, no space or control character)"
        raise InvalidInput([FieldError.about(field, reason, value)])
    return value


def check_request_id(value: object, field: str = "request_id") -> str:
    """A request id (``req-<uuid>`` as the API makes them; 1 to 255 printable characters)."""
    if not isinstance(value, str) or not value or len(value) > 255 or not value.isprintable():
        raise InvalidInput([FieldError.about(field, "a request id (1 to 255 characters)", value)])
    return value


def check_quota_limits(value: object, field: str = "quotas") -> dict[str, int]:
    """``{resource: limit}``: ``instances``, ``key_pairs`` or ``resource_class:<class>`` to a
    whole number from -1 (unlimited) to 2**31-1; every bad entry named."""
    if not isinstance(value, Mapping) or not value:
        raise InvalidInput(
            [FieldError.about(field, "a non-empty object of resource: limit", value)]
        )
    errors: list[FieldError] = []
    limits: dict[str, int] = {}
    for resource, limit in value.items():
        where = f"{field}.{str(resource)[:100]}"
        if not isinstance(resource, str) or not _QUOTA_RESOURCE.match(resource):
            errors.append(
                FieldError.about(
                    where,
                    "not a quota: use instances, key_pairs or resource_class:<class>",
                    resource,
                )
            )
        elif (whole := whole_number(limit)) is None or not -1 <= whole <= MAX_QUOTA_LIMIT:
            errors.append(
                FieldError.about(
                    where, f"a whole number from -1 (unlimited) to {MAX_QUOTA_LIMIT}", limit
                )
            )
        else:
            limits[resource] = whole
    if errors:
        raise InvalidInput(errors)
    return limits
