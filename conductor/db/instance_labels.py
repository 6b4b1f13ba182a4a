# SPDX-License-Identifier: Apache-2.0
"""Instances' metadata and tags (Nova's server metadata and server tags).

One row per key and per tag (``instance_metadata``, ``instance_tags``):
two callers changing different keys of one instance never lose each
other's write, and a key written by two at once is one row (the unique
pair; the loser of the race retries its transaction and overwrites).
A build stores its instances' own in its transaction (:func:`insert`).
Which instance a caller may label, and in which state, is the endpoint's
business (:mod:`conductor.endpoints.instance_labels`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from sqlalchemy import Connection, Table, delete, func, select
from sqlalchemy.exc import IntegrityError

from conductor.common.exception import QuotaExceeded
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.models import InstanceMetadataModel, InstanceTagModel

__all__ = [
    "METADATA_ITEMS",
    "add_tag",
    "delete_metadata",
    "delete_tag",
    "get_metadata",
    "get_tags",
    "insert",
    "labels_of",
    "replace_tags",
    "set_metadata",
]

LOG = logging.getLogger(__name__)

#: The quota's resource name, Nova's.
METADATA_ITEMS = "metadata_items"

_METADATA: Table = InstanceMetadataModel.__table__  # type: ignore[assignment]
_TAGS: Table = InstanceTagModel.__table__  # type: ignore[assignment]
_T = TypeVar("_T")
#: Tries of a transaction that lost a race on a unique key.
_TRIES = 3


def insert(
    connection: Connection, uuids: Sequence[str], metadata: Mapping[str, str], tags: Iterable[str]
) -> None:
    """The metadata and tags of new instances (each the same), in the caller's transaction."""
    rows = [{"instance_uuid": u, "key": k, "value": v} for u in uuids for k, v in metadata.items()]
    if rows:
        connection.execute(_METADATA.insert(), rows)
    tag_rows = [{"instance_uuid": u, "tag": t} for u in uuids for t in tags]
    if tag_rows:
        connection.execute(_TAGS.insert(), tag_rows)


@retry_on_dead_connection
def labels_of(
    db: Database, uuids: Sequence[str]
) -> tuple[dict[str, dict[str, str]], dict[str, list[str]]]:
    """The metadata and the tags (sorted) of some instances, in two reads."""
    metadata: dict[str, dict[str, str]] = {u: {} for u in uuids}
    tags: dict[str, list[str]] = {u: [] for u in uuids}
    if not uuids:
        return metadata, tags
    with db.read() as connection:
        # Sorted here, by code point: a database's collation may not be.
        for row in sorted(
            connection.execute(
                select(_METADATA.c.instance_uuid, _METADATA.c.key, _METADATA.c.value).where(
                    _METADATA.c.instance_uuid.in_(list(uuids))
                )
            ),
            key=lambda row: row.key,
        ):
            metadata[row.instance_uuid][row.key] = row.value
        for tagged in connection.execute(
            select(_TAGS.c.instance_uuid, _TAGS.c.tag).where(_TAGS.c.instance_uuid.in_(list(uuids)))
        ):
            tags[tagged.instance_uuid].append(tagged.tag)
    return metadata, {uuid: sorted(found) for uuid, found in tags.items()}


def get_metadata(db: Database, uuid: str) -> dict[str, str]:
    return labels_of(db, [uuid])[0][uuid]


def get_tags(db: Database, uuid: str) -> list[str]:
    return labels_of(db, [uuid])[1][uuid]


def _raced(write: Callable[[], _T]) -> _T:
    """``write`` again when a concurrent one inserted the same key first."""
    for attempt in range(_TRIES):
        try:
            return write()
        except IntegrityError:
            if attempt == _TRIES - 1:
                raise
            LOG.debug("Instance label write raced with another; trying again")
    raise AssertionError("unreachable")


@retry_on_dead_connection
def set_metadata(
    db: Database, uuid: str, items: Mapping[str, str], *, replace: bool, limit: int
) -> dict[str, str]:
    """Set keys of an instance's metadata (all of it with ``replace``); the
    metadata as it is then.

    :raises QuotaExceeded: it would have more than ``limit`` keys (nothing changed)
    """

    def write() -> dict[str, str]:
        with db.writing() as connection:
            where = _METADATA.c.instance_uuid == uuid
            if not replace:
                where = where & _METADATA.c.key.in_(list(items))
            connection.execute(delete(_METADATA).where(where))
            if items:
                connection.execute(
                    _METADATA.insert(),
                    [{"instance_uuid": uuid, "key": k, "value": v} for k, v in items.items()],
                )
            count = connection.execute(
                select(func.count()).where(_METADATA.c.instance_uuid == uuid)
            ).scalar_one()
            if count > limit:
                # Raised inside the transaction: rolled back, nothing changed.
                raise QuotaExceeded(
                    resource=METADATA_ITEMS,
                    requested=len(items),
                    used=count - len(items),
                    limit=limit,
                )
            rows = connection.execute(
                select(_METADATA.c.key, _METADATA.c.value).where(_METADATA.c.instance_uuid == uuid)
            )
            return dict(sorted((row.key, row.value) for row in rows))

    return _raced(write)


@retry_on_dead_connection
def delete_metadata(db: Database, uuid: str, key: str) -> bool:
    """Drop one key; whether it was there."""
    with db.writing() as connection:
        result = connection.execute(
            delete(_METADATA).where(_METADATA.c.instance_uuid == uuid, _METADATA.c.key == key)
        )
    return bool(result.rowcount)


@retry_on_dead_connection
def add_tag(db: Database, uuid: str, tag: str, *, limit: int) -> bool | None:
    """Tag an instance: ``True`` if added, ``False`` if it had the tag
    already, ``None`` if it has ``limit`` tags already (nothing changed)."""

    def write() -> bool | None:
        with db.writing() as connection:
            tags = set(
                connection.execute(
                    select(_TAGS.c.tag).where(_TAGS.c.instance_uuid == uuid)
                ).scalars()
            )
            if tag in tags:
                return False
            if len(tags) >= limit:
                return None
            connection.execute(_TAGS.insert().values(instance_uuid=uuid, tag=tag))
            return True

    try:
        return _raced(write)
    except IntegrityError:  # the same tag added by another: it has it
        return False


@retry_on_dead_connection
def replace_tags(db: Database, uuid: str, tags: Sequence[str]) -> list[str]:
    """An instance's tags replaced by ``tags`` (none: every tag dropped); sorted."""

    def write() -> list[str]:
        with db.writing() as connection:
            connection.execute(delete(_TAGS).where(_TAGS.c.instance_uuid == uuid))
            if tags:
                connection.execute(
                    _TAGS.insert(), [{"instance_uuid": uuid, "tag": t} for t in tags]
                )
        return sorted(tags)

    return _raced(write)


@retry_on_dead_connection
def delete_tag(db: Database, uuid: str, tag: str) -> bool:
    """Drop one tag; whether it was there."""
    with db.writing() as connection:
        result = connection.execute(
            delete(_TAGS).where(_TAGS.c.instance_uuid == uuid, _TAGS.c.tag == tag)
        )
    return bool(result.rowcount)
