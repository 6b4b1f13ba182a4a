"""Lean paged reads of the node table: agents' inventory pages, the scheduler's index.

The hottest reads of the fleet: every agent pages through every node at
start and then reads what changed every few seconds; every conductor's
scheduler reads every node to build its index and what changed every
second.  So these select plain columns with Core statements (no ORM objects,
no JSON decoding: a Session and ORM rows were a third of an inventory read
and most of an index build), and leave the decoding to their callers.

Pages are separate short transactions (on SQLite every transaction takes the
write lock), so a full read is not one snapshot; a caller's next incremental
read, from before the full read started, makes up for that.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Text, and_, cast, or_, select

from conductor.db.engine import Database
from conductor.db.models import NodeModel, utcnow

__all__ = [
    "PAGE",
    "IndexRow",
    "InventoryPage",
    "changed_index_rows",
    "index_rows",
    "inventory_page",
]


@dataclasses.dataclass(frozen=True, slots=True)
class InventoryPage:
    """One page of ``list_node_uuids``: the nodes' fields as columns, in uuid order."""

    #: Taken before the read: a later read of the changes since ``as_of``
    #: cannot miss a change this one did not see.
    as_of: datetime.datetime
    uuids: list[str]
    groups: list[str]
    owners: list[str | None]
    epochs: list[int]
    pinned: list[bool]


def inventory_page(
    db: Database,
    *,
    limit: int,
    groups: Sequence[str] | None = None,
    changed_after: datetime.datetime | None = None,
    marker: str | None = None,
) -> InventoryPage:
    """Up to ``limit`` nodes after the uuid ``marker``, in uuid order.

    ``groups``: only nodes of these groups (``None``: all); ``changed_after``:
    only nodes whose row changed at or after that instant.
    """
    as_of = utcnow()
    query = (
        select(
            NodeModel.uuid,
            NodeModel.node_group,
            NodeModel.owner,
            NodeModel.owner_epoch,
            NodeModel.instance_uuid,
        )
        .order_by(NodeModel.uuid)
        .limit(limit)
    )
    if groups is not None:
        query = query.where(NodeModel.node_group.in_(groups))
    if changed_after is not None:
        query = query.where(NodeModel.updated_at >= changed_after)
    if marker is not None:
        query = query.where(NodeModel.uuid > marker)
    # A Core read, not a Session: at 100k nodes every agent reads the whole
    # fleet at start, and the Session's bookkeeping was a third of it.
    with db.read() as connection:
        rows = connection.execute(query).all()
    return InventoryPage(
        as_of=as_of,
        uuids=[row[0] for row in rows],
        groups=[row[1] for row in rows],
        owners=[row[2] for row in rows],
        epochs=[row[3] for row in rows],
        pinned=[row[4] is not None for row in rows],
    )


#: Rows per page (per transaction).
PAGE = 5000

#: One node for the scheduler's index, read-only and indexed by position:
#: its id, uuid, name, resource_class, traits and properties (their JSON
#: text: the scheduler decodes each distinct text once), node_group,
#: provision_state, power_state, maintenance, maintenance_reason, owner,
#: owner_epoch and instance_uuid, in that order.  (The rows as read, a
#: sequence type of SQLAlchemy: copying 100,000 of them into tuples costs
#: 30 ms, a fifteenth of an index build.)
IndexRow = Sequence[Any]

# In the order of an IndexRow.
_INDEX_COLUMNS = (
    NodeModel.id,
    NodeModel.uuid,
    NodeModel.name,
    NodeModel.resource_class,
    cast(NodeModel.traits, Text),
    cast(NodeModel.properties, Text),
    NodeModel.node_group,
    NodeModel.provision_state,
    NodeModel.power_state,
    NodeModel.maintenance,
    NodeModel.maintenance_reason,
    NodeModel.owner,
    NodeModel.owner_epoch,
    NodeModel.instance_uuid,
)
# Paging the changes needs the change time.
_CHANGED_COLUMNS = (*_INDEX_COLUMNS, NodeModel.updated_at)


def index_rows(db: Database, *, page: int = PAGE) -> Iterator[Sequence[IndexRow]]:
    """Every node as an :data:`IndexRow`, in pages of ``page`` rows."""
    last_id = 0
    while True:
        query = (
            select(*_INDEX_COLUMNS).where(NodeModel.id > last_id).order_by(NodeModel.id).limit(page)
        )
        with db.read() as connection:
            rows = connection.execute(query).all()
        yield rows
        if len(rows) < page:
            return
        last_id = rows[-1][0]


def changed_index_rows(
    db: Database, since: datetime.datetime, *, page: int = PAGE
) -> Iterator[Sequence[IndexRow]]:
    """Rows of the nodes changed at or after ``since``, oldest change first, in pages.

    Each row is an :data:`IndexRow` and then ``updated_at``.  Paged by
    (``updated_at``, ``uuid``), so a burst of more than ``page`` changes with
    equal timestamps is read whole, each row once.
    """
    condition = NodeModel.updated_at >= since
    while True:
        query = (
            select(*_CHANGED_COLUMNS)
            .where(condition)
            .order_by(NodeModel.updated_at, NodeModel.uuid)
            .limit(page)
        )
        # A read connection: on SQLite a transaction takes the write lock,
        # and the conductor refreshes every second, busy or not.
        with db.read() as connection:
            rows = connection.execute(query).all()
        yield rows
        if len(rows) < page:
            return
        last_changed, last_uuid = rows[-1][14], rows[-1][1]
        condition = or_(
            NodeModel.updated_at > last_changed,
            and_(NodeModel.updated_at == last_changed, NodeModel.uuid > last_uuid),
        )
