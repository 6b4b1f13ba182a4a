# SPDX-License-Identifier: Apache-2.0
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

import bisect
import dataclasses
import datetime
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    Subquery,
    Text,
    and_,
    bindparam,
    cast,
    func,
    or_,
    select,
    text,
    true,
    tuple_,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Connection

from conductor.db.engine import Database
from conductor.db.models import NodeModel, utcnow

__all__ = [
    "PAGE",
    "IndexRow",
    "InventoryPage",
    "changed_index_rows",
    "index_rows",
    "inventory_page",
    "share_page",
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
    owner: str | None = None,
    not_claimed_at: Sequence[datetime.datetime] = (),
) -> InventoryPage:
    """Up to ``limit`` nodes after the uuid ``marker``, in uuid order.

    ``groups``: only nodes of these groups (``None``: all); ``changed_after``:
    only nodes whose row changed at or after that instant; ``owner``: only
    the nodes this agent owns; ``not_claimed_at``: with ``owner``, none
    that owner's own claims changed last (:func:`_not_claimed_at`).
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
    if owner is not None:
        query = query.where(NodeModel.owner == owner, *_not_claimed_at(owner, not_claimed_at))
    # A Core read, not a Session: at 100k nodes every agent reads the whole
    # fleet at start, and the Session's bookkeeping was a third of it.
    with db.read() as connection:
        rows = connection.execute(query).all()
    return _page(as_of, rows)


#: Arcs per statement where the arcs are written into it (not PostgreSQL):
#: SQLite parses ``a OR b OR ...`` as a tree at most 1000 deep.
_ARCS_PER_STATEMENT = 400


def share_page(
    db: Database,
    arcs: Sequence[tuple[int, int]],
    *,
    limit: int,
    groups: Sequence[str] | None = None,
    exclude_groups: Sequence[str] = (),
    changed_after: datetime.datetime | None = None,
    after: tuple[int, str] | None = None,
    claimed: tuple[str, Sequence[datetime.datetime]] | None = None,
) -> tuple[InventoryPage, tuple[int, str] | None]:
    """Up to ``limit`` nodes whose ring position is in ``arcs``, in position order.

    An agent's share of a ring is a few thousand arcs of positions
    (:meth:`hashring.ring.Ring.arcs`), read through the position index:
    the work is the share's, not the fleet's.  ``groups`` /
    ``exclude_groups``: only nodes of these groups / of no such group;
    ``changed_after``: only rows changed at or after that instant;
    ``after``: the ``(position, uuid)`` of the previous page's last node;
    ``claimed``: (an agent, the change times of its claims): none of the
    rows those claims changed last (:func:`_not_claimed_at`).
    Returns the page and the marker of the next one (``None``: the end).
    """
    as_of = utcnow()
    start = (-(1 << 63), "") if after is None else after
    conditions: list[Any] = []
    if groups is not None:
        conditions.append(NodeModel.node_group.in_(groups))
    if exclude_groups:
        conditions.append(NodeModel.node_group.not_in(exclude_groups))
    if claimed is not None:
        conditions.extend(_not_claimed_at(*claimed))
    with db.read() as connection:
        if changed_after is not None and _few_changes(connection, changed_after):
            rows = _changes_in_arcs(
                connection,
                arcs,
                conditions=conditions,
                since=changed_after,
                start=start,
                limit=limit,
            )
        else:
            rows = _rows_in_arcs(
                db,
                connection,
                arcs,
                conditions=conditions,
                since=changed_after,
                start=start,
                limit=limit,
            )
    full = len(rows) >= limit
    return _page(as_of, rows), ((rows[-1][5], rows[-1][0]) if full else None)


def _page(as_of: datetime.datetime, rows: Sequence[Any]) -> InventoryPage:
    """Rows of (uuid, group, owner, epoch, instance uuid, ...) as a page in columns."""
    return InventoryPage(
        as_of=as_of,
        uuids=[row[0] for row in rows],
        groups=[row[1] for row in rows],
        owners=[row[2] for row in rows],
        epochs=[row[3] for row in rows],
        pinned=[row[4] is not None for row in rows],
    )


_SHARE_COLUMNS = (
    NodeModel.uuid,
    NodeModel.node_group,
    NodeModel.owner,
    NodeModel.owner_epoch,
    NodeModel.instance_uuid,
    NodeModel.ring_position,
)


def _not_claimed_at(owner: str, times: Sequence[datetime.datetime]) -> list[Any]:
    """Leave out the rows ``owner``'s own claims changed last (stamped at ``times``).

    An agent knows what its claims did from their replies: read again, each
    of its claims was most of what a cold start made it read (every node
    of its share, twice or three times, for the windows of its change
    reads overlap).  A row changed since by anything else has another
    change time, and is read.
    """
    if not times:
        return []
    return [or_(NodeModel.owner != owner, NodeModel.updated_at.not_in(list(times)))]


#: Changes since an instant that are few enough to read by the change time
#: and filter by arc here: past this, read the arcs (each through the
#: position index) and filter by the change time instead.
_FEW_CHANGES = 20_000


def _few_changes(connection: Connection, since: datetime.datetime) -> bool:
    """Whether at most :data:`_FEW_CHANGES` rows changed since ``since``
    (counted through the change-time index, never past that many)."""
    recent = select(NodeModel.id).where(NodeModel.updated_at >= since).limit(_FEW_CHANGES + 1)
    counted = connection.execute(select(func.count()).select_from(recent.subquery())).scalar()
    return int(counted or 0) <= _FEW_CHANGES


def _changes_in_arcs(
    connection: Connection,
    arcs: Sequence[tuple[int, int]],
    *,
    conditions: Sequence[Any],
    since: datetime.datetime,
    start: tuple[int, str],
    limit: int,
) -> list[Any]:
    """The rows changed since ``since`` in ``arcs``, after ``start``: read by
    the change time (few, see :func:`_few_changes`), kept if in an arc.

    (Left to the planner, a change read by arc went by the change-time index
    once per arc when its statistics said few rows had changed, and after a
    cold start had changed them all that was every change once per arc:
    seconds per read.)
    """
    position = NodeModel.ring_position
    query = (
        select(*_SHARE_COLUMNS)
        .where(NodeModel.updated_at >= since, tuple_(position, NodeModel.uuid) > tuple_(*start))
        .where(*conditions)
        .order_by(position, NodeModel.uuid)
    )
    firsts = [first for first, _last in arcs]
    kept: list[Any] = []
    for row in connection.execute(query):
        at = bisect.bisect_right(firsts, row[5]) - 1
        if at >= 0 and row[5] <= arcs[at][1]:
            kept.append(row)
            if len(kept) >= limit:
                break
    return kept


def _rows_in_arcs(
    db: Database,
    connection: Connection,
    arcs: Sequence[tuple[int, int]],
    *,
    conditions: Sequence[Any],
    since: datetime.datetime | None,
    start: tuple[int, str],
    limit: int,
) -> list[Any]:
    """The rows in ``arcs`` (changed since ``since``, if given) after ``start``,
    read arc by arc through the position index."""
    remaining = [arc for arc in arcs if arc[1] >= start[0]]
    chunk = len(remaining) or 1 if db.engine.dialect.name == "postgresql" else _ARCS_PER_STATEMENT
    rows: list[Any] = []
    while remaining and len(rows) < limit:
        batch, remaining = remaining[:chunk], remaining[chunk:]
        nodes = _nodes_in_arcs(db, batch, conditions)
        position, uuid = nodes.c.ring_position, nodes.c.uuid
        query = (
            select(*(nodes.c[column.key] for column in _SHARE_COLUMNS))
            .where(tuple_(position, uuid) > tuple_(*start))
            .order_by(position, uuid)
            .limit(limit - len(rows))
        )
        if since is not None:
            # Outside the arcs' subquery: kept from it (see _nodes_in_arcs),
            # the change time is not what the planner reads each arc by.
            query = query.where(nodes.c.updated_at >= since)
        rows.extend(connection.execute(query).all())
    return rows


def _nodes_in_arcs(
    db: Database, arcs: Sequence[tuple[int, int]], conditions: Sequence[Any]
) -> Subquery:
    """The nodes whose position is in one of ``arcs`` and that meet ``conditions``.

    On PostgreSQL the arcs are two arrays, and each arc a LATERAL index
    range scan: one short statement whatever their number.  (Joined plainly,
    or laterally but flattened, the planner walked the whole position index
    in order and compared every node with every arc: a minute for one
    agent's share of 100k nodes.)
    Elsewhere the arcs are written into the statement as integers rather
    than bound one by one: compiling thousands of bound ``BETWEEN`` cost
    more than running them.
    """
    columns = (*_SHARE_COLUMNS, NodeModel.updated_at)
    if db.engine.dialect.name == "postgresql":
        arc = (
            func.unnest(
                bindparam("arc_firsts", [a for a, _ in arcs], type_=ARRAY(BigInteger)),
                bindparam("arc_lasts", [b for _, b in arcs], type_=ARRAY(BigInteger)),
            )
            .table_valued("first", "last")
            .render_derived(name="arc")
        )
        within = (
            select(*columns)
            .where(NodeModel.ring_position.between(arc.c.first, arc.c.last), *conditions)
            # OFFSET 0 keeps the planner from flattening it into a plain join,
            # and from pushing the change time down into it.
            .offset(0)
            .lateral("node")
        )
        return select(*within.c).select_from(arc).join(within, true()).subquery("share")
    written = " OR ".join(f"nodes.ring_position BETWEEN {int(a)} AND {int(b)}" for a, b in arcs)
    return select(*columns).where(text(f"({written})"), *conditions).subquery("share")


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
