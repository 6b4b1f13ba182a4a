# SPDX-License-Identifier: Apache-2.0
"""The filters and sort order of an instance list, as Nova's server list has them.

``name`` is a regular expression (Nova's, matched by the database, whose
syntax it is: a pattern the database refuses is named by the list),
``status`` one of Nova's statuses (:mod:`conductor.common.nova_status`),
``changes_since`` an ISO 8601 instant (with a zone, or UTC without one, as
Nova's ``timeutils.parse_isotime``), ``sort_key`` one of the keys below,
``sort_dir`` ``asc`` or ``desc``.  Nova's tag filters (its 2.26), each a
comma-separated list of tags: ``tags`` (instances with every one),
``tags-any`` (with at least one), ``not-tags`` (without every one: those
with all of them left out), ``not-tags-any`` (with none of them).  Every
bad one is named, nothing listed.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Final

from conductor.common.exception import FieldError, InvalidInput
from conductor.common.nova_status import STATUSES
from conductor.common.schemas import MAX_TAG_LENGTH, MAX_TAGS

__all__ = [
    "SORT_DIRS",
    "SORT_KEYS",
    "TAG_FILTERS",
    "ListOrder",
    "check_instant",
    "check_list_filters",
]

#: Nova's tag filters: the query parameter of each, by its argument's name.
TAG_FILTERS: Final = {
    "tags": "tags",
    "tags_any": "tags-any",
    "not_tags": "not-tags",
    "not_tags_any": "not-tags-any",
}

#: Nova's sort keys that ringfleet stores, never NULL (a page's marker is
#: compared on them), each with its column.  Nova's name for the instance
#: name is ``display_name``.
SORT_KEYS: Final = {
    "created_at": "created_at",
    "updated_at": "updated_at",
    "display_name": "name",
    "uuid": "uuid",
    "vm_state": "vm_state",
}
SORT_DIRS: Final = ("asc", "desc")

#: The oldest and newest instants a database compares (MySQL's DATETIME range).
_EARLIEST = datetime.datetime(1000, 1, 1)
_LATEST = datetime.datetime(9999, 12, 31)


@dataclasses.dataclass(frozen=True)
class ListOrder:
    """An instance list's filters (beyond vm_state and host) and its order.

    ``sort_key`` ``None`` is the order of old: by uuid, ascending.
    """

    name: str | None = None
    status: str | None = None
    changes_since: datetime.datetime | None = None
    sort_key: str | None = None
    sort_dir: str = "asc"
    #: Nova's tag filters (:data:`TAG_FILTERS`), each a tuple of tags or ``None``.
    tags: tuple[str, ...] | None = None
    tags_any: tuple[str, ...] | None = None
    not_tags: tuple[str, ...] | None = None
    not_tags_any: tuple[str, ...] | None = None

    @property
    def column(self) -> str:
        """The column the list is ordered by (then by uuid)."""
        return SORT_KEYS[self.sort_key] if self.sort_key is not None else "uuid"

    @property
    def descending(self) -> bool:
        return self.sort_dir == "desc"


def check_list_filters(
    name: object = None,
    status: object = None,
    changes_since: object = None,
    sort_key: object = None,
    sort_dir: object = None,
    **tags: object,
) -> ListOrder:
    """The filters as :class:`ListOrder`; every bad one named.

    ``tags``: Nova's tag filters by their argument's name (``tags``,
    ``tags_any``, ``not_tags``, ``not_tags_any``), each a comma-separated
    string of tags.

    ``sort_dir`` defaults to ``desc`` once a ``sort_key`` is given, as
    Nova's; without either the order is by uuid, ascending, as before.

    :raises InvalidInput:
    """
    errors: list[FieldError] = []
    checked_name = _regex(name, errors)
    checked_status: str | None = None
    if status is not None:
        if not isinstance(status, str) or status.upper() not in STATUSES:
            errors.append(FieldError.about("status", "one of " + ", ".join(STATUSES), status))
        else:
            checked_status = status.upper()
    since = check_instant(changes_since, "changes-since", errors)
    key: str | None = None
    if sort_key is not None:
        if not isinstance(sort_key, str) or sort_key not in SORT_KEYS:
            reason = "unknown sort key; use " + ", ".join(SORT_KEYS)
            errors.append(FieldError.about("sort_key", reason, sort_key))
        else:
            key = sort_key
    direction = "desc" if sort_key is not None else "asc"
    if sort_dir is not None:
        if not isinstance(sort_dir, str) or sort_dir.lower() not in SORT_DIRS:
            errors.append(FieldError.about("sort_dir", "asc or desc", sort_dir))
        else:
            direction = sort_dir.lower()
    tag_filters = {
        argument: _tags(tags.pop(argument, None), parameter, errors)
        for argument, parameter in TAG_FILTERS.items()
    }
    for unknown in sorted(tags):
        errors.append(FieldError(unknown[:100], "not a list filter"))
    if errors:
        raise InvalidInput(errors)
    return ListOrder(checked_name, checked_status, since, key, direction, **tag_filters)


def _tags(value: object, parameter: str, errors: list[FieldError]) -> tuple[str, ...] | None:
    """A tag filter's tags: comma-separated, each a tag as an instance has
    them (1 to 60 characters, no ``/``), at most 50 (an instance's most)."""
    if value is None:
        return None
    reason = (
        f"a comma-separated list of 1 to {MAX_TAGS} tags, each of 1 to {MAX_TAG_LENGTH} "
        "characters without /"
    )
    if not isinstance(value, str):
        errors.append(FieldError.about(parameter, reason, value))
        return None
    found = value.split(",")
    if len(found) > MAX_TAGS or any(
        not tag or len(tag) > MAX_TAG_LENGTH or "/" in tag for tag in found
    ):
        errors.append(FieldError.about(parameter, reason, value))
        return None
    return tuple(dict.fromkeys(found))


def _regex(name: object, errors: list[FieldError]) -> str | None:
    """A pattern for the database: its syntax is the database's (PostgreSQL's
    ``\\m``, POSIX classes), which refuses a bad one (the list names it)."""
    if name is None:
        return None
    if not isinstance(name, str) or not name or len(name) > 255:
        errors.append(FieldError.about("name", "a regular expression of 1 to 255 characters", name))
        return None
    return name


def check_instant(value: object, field: str, errors: list[FieldError]) -> datetime.datetime | None:
    """An ISO 8601 instant in naive UTC (as stored), clamped to what databases
    compare; a bad one is added to *errors* as *field*'s."""
    if value is None:
        return None
    reason = "an ISO 8601 date and time, e.g. 2026-11-29T20:00:00Z"
    if not isinstance(value, str) or len(value) > 64:
        errors.append(FieldError.about(field, reason, value))
        return None
    try:
        instant = datetime.datetime.fromisoformat(value)
    except ValueError:
        errors.append(FieldError.about(field, reason, value))
        return None
    if instant.tzinfo is not None:
        try:
            instant = instant.astimezone(datetime.UTC).replace(tzinfo=None)
        except OverflowError:  # a zone's offset past year 1 or 9999
            instant = _EARLIEST if instant.year < 2000 else _LATEST
    return min(max(instant, _EARLIEST), _LATEST)
