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

import dataclasses
import datetime
import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Subquery,
    Table,
    Text,
    and_,
    bindparam,
    case,
    cast,
    false,
    or_,
    select,
    text,
    tuple_,
)
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Executable

from conductor.db import arc_statements, node_writes, value_lists
from conductor.db.engine import Database
from conductor.db.models import NodeModel, utcnow

__all__ = [
    "ARCS_PER_STATEMENT",
    "PAGE",
    "ChangedRows",
    "IndexRow",
    "InventoryPage",
    "changed_index_rows",
    "index_rows",
    "inventory_page",
    "read_share_page",
    "share_page",
    "written_arcs",
]


@dataclasses.dataclass(frozen=True, slots=True)
class InventoryPage:
    """One page of ``list_node_uuids``: the nodes' fields as columns, in uuid order."""

    #: Taken before the read, and no later than the stamp of a long write
    #: still open (:mod:`conductor.db.node_writes`): a later read of the
    #: changes since ``as_of`` cannot miss a change this one did not see.
    as_of: datetime.datetime
    uuids: list[str]
    groups: list[str]
    owners: list[str | None]
    epochs: list[int]
    pinned: list[bool]
    #: No node row of the fleet changed since the read's ``changed_after``
    #: (as of ``as_of``): any other change read since then finds nothing.
    unchanged: bool = False
    #: Each node's recorded power state (``None``: not read).
    power_states: list[str | None] | None = None


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
        # A share read's columns but the ring position (pages go by uuid).
        select(*arc_statements.SHARE_COLUMNS[:-1]).order_by(NodeModel.uuid).limit(limit)
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
        as_of, changed = _as_of_and_changed(connection, as_of, changed_after)
        if not changed:
            return _page(as_of, [], unchanged=True)
        rows = connection.execute(query).all()
    return _page(as_of, rows)


def _as_of_and_changed(
    connection: Connection, now: datetime.datetime, since: datetime.datetime | None
) -> tuple[datetime.datetime, bool]:
    """A read's "as of" (:func:`conductor.db.node_writes.as_of`) and whether
    any node row changed at or after ``since`` (``None``: yes), in one statement.

    One probe of the index on ``updated_at``: in a quiet fleet every
    agent's change reads find nothing, and each one's filters (thousands
    of arcs, its claims) cost the database and the conductor far more than
    this; a fleet that changed pays the probe on top, which is little.
    Both statements are built once (every agent call runs one).
    """
    if since is None:
        first = connection.execute(_AS_OF, {"now": now}).scalar()
        return node_writes.as_of(now, first), True
    first, found = connection.execute(_AS_OF_AND_CHANGED, {"now": now, "since": since}).one()
    return node_writes.as_of(now, first), found is not None


_AS_OF = select(node_writes.EARLIEST_OPEN_NOW)
_AS_OF_AND_CHANGED = select(
    node_writes.EARLIEST_OPEN_NOW,
    select(NodeModel.uuid)
    .where(NodeModel.updated_at >= bindparam("since"))
    .limit(1)
    .scalar_subquery(),
)


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
    with db.read() as connection:
        return read_share_page(
            connection,
            arcs,
            limit=limit,
            groups=groups,
            exclude_groups=exclude_groups,
            changed_after=changed_after,
            after=after,
            claimed=claimed,
        )


def read_share_page(
    connection: Connection,
    arcs: Sequence[tuple[int, int]],
    *,
    limit: int,
    groups: Sequence[str] | None = None,
    exclude_groups: Sequence[str] = (),
    changed_after: datetime.datetime | None = None,
    after: tuple[int, str] | None = None,
    claimed: tuple[str, Sequence[datetime.datetime]] | None = None,
) -> tuple[InventoryPage, tuple[int, str] | None]:
    """:func:`share_page` in ``connection``'s transaction (a claim's, which
    then returns its share as it left it, one transaction fewer)."""
    now = utcnow()
    postgresql = connection.dialect.name == "postgresql"
    query: dict[str, Any] = {
        "room": limit,
        "groups": groups,
        "exclude_groups": exclude_groups,
        "claimed": claimed,
        "after": after,
    }
    if postgresql and changed_after is None:
        # A whole share: its "as of" asked in the page's statement (one
        # statement fewer in every claim of a cold start).  From an empty
        # page there is none to take: asked before the page, as below (asked
        # after it, a write that ended in between would be missed).
        rows = connection.execute(*arc_statements.share_query(arcs, **query, as_of=now)).all()
        if rows:
            return _page_of(node_writes.as_of(now, rows[0].earliest_open), rows, limit)
    as_of, changed = _as_of_and_changed(connection, now, changed_after)
    if not changed:
        return _page(as_of, [], unchanged=True), None
    if postgresql:
        rows = connection.execute(
            *arc_statements.share_query(arcs, **query, since=changed_after)
        ).all()
    else:
        rows = _rows_in_written_arcs(
            connection,
            arcs,
            conditions=_conditions(groups, exclude_groups, claimed),
            since=changed_after,
            start=(-(1 << 63), "") if after is None else after,
            limit=limit,
        )
    return _page_of(as_of, rows, limit)


def _page_of(
    as_of: datetime.datetime, rows: Sequence[Any], limit: int
) -> tuple[InventoryPage, tuple[int, str] | None]:
    """A page of at most ``limit`` ``rows`` and the marker of the next
    (``None``: these were the last)."""
    full = len(rows) >= limit
    return _page(as_of, rows), ((rows[-1].ring_position, rows[-1].uuid) if full else None)


def _page(
    as_of: datetime.datetime, rows: Sequence[Any], *, unchanged: bool = False
) -> InventoryPage:
    """Rows of (uuid, group, owner, epoch, instance uuid, power state, ...)
    as a page in columns."""
    return InventoryPage(
        as_of=as_of,
        unchanged=unchanged,
        uuids=[row[0] for row in rows],
        groups=[row[1] for row in rows],
        owners=[row[2] for row in rows],
        epochs=[row[3] for row in rows],
        pinned=[row[4] is not None for row in rows],
        power_states=[row[5] for row in rows],
    )


def _conditions(
    groups: Sequence[str] | None,
    exclude_groups: Sequence[str],
    claimed: tuple[str, Sequence[datetime.datetime]] | None,
) -> list[Any]:
    """:func:`share_page`'s filters, where the arcs are written into the statement."""
    conditions: list[Any] = []
    if groups is not None:
        conditions.append(NodeModel.node_group.in_(groups))
    if exclude_groups:
        conditions.append(NodeModel.node_group.not_in(exclude_groups))
    if claimed is not None:
        conditions.extend(_not_claimed_at(*claimed))
    return conditions


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


def _rows_in_written_arcs(
    connection: Connection,
    arcs: Sequence[tuple[int, int]],
    *,
    conditions: Sequence[Any],
    since: datetime.datetime | None,
    start: tuple[int, str],
    limit: int,
) -> list[Any]:
    """The rows in ``arcs`` (changed since ``since``, if given) after ``start``,
    in batches of arcs written into the statement (:func:`written_arcs`)."""
    rows: list[Any] = []
    if start[0] > -(1 << 63):  # a later page: the arcs it may still find nodes in
        arcs = [arc for arc in arcs if arc[1] >= start[0]]
    for first in range(0, len(arcs), ARCS_PER_STATEMENT):
        if len(rows) >= limit:
            break
        nodes = written_arcs(arcs[first : first + ARCS_PER_STATEMENT], conditions, since)
        position, uuid = nodes.c.ring_position, nodes.c.uuid
        query = (
            select(*(nodes.c[column.key] for column in arc_statements.SHARE_COLUMNS))
            .where(tuple_(position, uuid) > tuple_(*start))
            .order_by(position, uuid)
            .limit(limit - len(rows))
        )
        rows.extend(connection.execute(query).all())
    return rows


#: Arcs per statement where they are written into it (MariaDB, SQLite; on
#: PostgreSQL they are arrays, :mod:`conductor.db.arc_statements`): SQLite
#: parses ``a OR b OR ...`` as a tree at most 1000 deep.
ARCS_PER_STATEMENT = 400


def written_arcs(
    arcs: Sequence[tuple[int, int]],
    conditions: Sequence[Any],
    since: datetime.datetime | None = None,
) -> Subquery:
    """The nodes whose position is in one of ``arcs`` (changed since ``since``)
    and that meet ``conditions``, the arcs written into the statement as
    integers rather than bound one by one (compiling thousands of bound
    ``BETWEEN`` cost more than running them), the change time bound:
    MariaDB and SQLite estimate the ranges from the index itself.  (Not on
    PostgreSQL: :mod:`conductor.db.arc_statements`.)
    """
    written = " OR ".join(f"nodes.ring_position BETWEEN {int(a)} AND {int(b)}" for a, b in arcs)
    changed = [] if since is None else [NodeModel.updated_at >= since]
    query = select(*arc_statements.SHARE_COLUMNS).where(text(f"({written})"), *changed, *conditions)
    for dialect in ("mysql", "mariadb"):
        # Hundreds of ranges are past the index dives MariaDB estimates them
        # by: it guessed a table scan cheaper, a scan of the fleet per
        # statement.  Each range is the few rows of an arc.
        query = query.with_hint(NodeModel, "FORCE INDEX (nodes_ring_position_idx)", dialect)
    return query.subquery("share")


#: Rows per page (per transaction).
PAGE = 5000

#: One node for the scheduler's index, read-only and indexed by position:
#: its id, uuid, name, resource_class, traits and properties (their JSON
#: text: the scheduler decodes each distinct text once), node_group,
#: provision_state, power_state, maintenance, maintenance_reason, owner,
#: owner_epoch, instance_uuid and failed_builds, in that order.  (The rows as read, a
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
    NodeModel.failed_builds,
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


@dataclasses.dataclass(frozen=True)
class ChangedRows:
    """One page of :func:`changed_index_rows`: its rows, and when it was read
    (this process's clock, taken before its statement ran, and no later than
    the stamp of a long write still open: every row stamped before that
    instant is in it)."""

    read_at: datetime.datetime
    rows: Sequence[IndexRow]
    #: The change time of the page's last row (read, or left out as known).
    last_changed: datetime.datetime | None = None
    #: The page was full: more may follow.
    full: bool = False


#: A page of versions first when at least this share of the previous page's
#: rows was known (see :func:`changed_index_rows`).
_MOSTLY_KNOWN = 0.5


def changed_index_rows(
    db: Database,
    since: datetime.datetime,
    *,
    page: int = PAGE,
    free_only: bool = False,
    known: Mapping[str, datetime.datetime] | None = None,
) -> Iterator[ChangedRows]:
    """Rows of the nodes changed at or after ``since``, oldest change first, in pages.

    Each row is an :data:`IndexRow` and then ``updated_at``.  Paged by
    (``updated_at``, ``uuid``), so a burst of more than ``page`` changes with
    equal timestamps is read whole, each row once.

    :param free_only: only the nodes that may take an instance now
        (:func:`conductor.scheduler.index.is_free`'s conditions): what the
        scheduler reads before saying no node fits, where a burst of
        placements changed many rows, none of them free
    :param known: uuid -> change time of rows the caller has (a refresh's
        applied versions): where most rows of a page are known, the page
        reads the versions first, then only the rows not known (a page's
        ``rows`` leaves the known ones out).  A refresh reads again from
        before the previous one; after a refresh that followed a stream of
        claims for seconds, that was the stream's every row (100,000 rows
        fetched to apply a thousand, 0.5-0.9 s of a cold start's conductor CPU).
    """
    kind = "since"
    parameters: dict[str, Any] = {"since": since}
    versions_first = known is not None and len(known) >= page // 2
    versions: Sequence[Any]
    rows: Sequence[Any]
    while True:
        # A read connection: on SQLite a transaction takes the write lock,
        # and the conductor refreshes every second, busy or not.
        with db.read() as connection:
            read_at = node_writes.horizon(connection, utcnow())
            if versions_first and known is not None:
                versions = connection.execute(
                    _changed_page(kind, page, free_only, versions=True), parameters
                ).all()
                new = [uuid for uuid, at in versions if known.get(uuid) != at]
                rows = _rows_of(connection, new, free_only)
            else:
                rows = connection.execute(_changed_page(kind, page, free_only), parameters).all()
                versions = [(row[1], row[15]) for row in rows]
                new = [uuid for uuid, at in versions if known is None or known.get(uuid) != at]
        full = len(versions) >= page
        last_uuid, last_changed = versions[-1] if versions else (None, None)
        yield ChangedRows(read_at, rows, last_changed, full)
        if not full:
            return
        versions_first = known is not None and len(new) <= (1 - _MOSTLY_KNOWN) * len(versions)
        kind = "after"
        parameters = {"last_changed": last_changed, "last_uuid": last_uuid}


_NODES: Table = NodeModel.__table__  # type: ignore[assignment]

#: Where a page starts: the first at ``since``; a later one past the
#: previous page's last row, in (``updated_at``, ``uuid``) order.
_PAGE_STARTS = {
    "since": NodeModel.updated_at >= bindparam("since"),
    "after": or_(
        NodeModel.updated_at > bindparam("last_changed"),
        and_(
            NodeModel.updated_at == bindparam("last_changed"),
            NodeModel.uuid > bindparam("last_uuid"),
        ),
    ),
}


def _rows_of(connection: Connection, uuids: Sequence[str], free_only: bool) -> list[Any]:
    """The changed-row columns of ``uuids`` (as they are now), in
    (``updated_at``, ``uuid``) order."""
    rows: list[Any] = []
    for chunk in value_lists.chunks(uuids, connection.dialect):
        query = select(*_CHANGED_COLUMNS).where(
            value_lists.one_of(_NODES.c.uuid, chunk, connection.dialect),
            *(_FREE if free_only else ()),
        )
        rows += connection.execute(query).all()
    rows.sort(key=lambda row: (row[15], row[1]))
    return rows


#: the conditions of :func:`conductor.scheduler.index.is_free`, in SQL, as one
#: opaque expression: the planner then walks the index on ``updated_at`` (the
#: few rows changed since) and not one that a condition could use (the one
#: starting with ``provision_state``, the unique one on ``instance_uuid``:
#: every free node, 35-50 ms at 100,000 nodes on SQLite instead of a fraction
#: of a millisecond).
_FREE = (
    case(
        (
            and_(
                NodeModel.provision_state == "available",
                NodeModel.maintenance == false(),
                NodeModel.instance_uuid.is_(None),
                # Neither NULL nor '' (both read as an unknown power state).
                NodeModel.power_state != "",
            ),
            1,
        ),
        else_=0,
    )
    == 1,
)


@functools.lru_cache(maxsize=16)
def _changed_page(kind: str, page: int, free_only: bool, *, versions: bool = False) -> Executable:
    """A page's statement, built once per shape (its values bound: the
    scheduler reads changes every second): from :data:`_PAGE_STARTS`
    ``kind``, the changed rows' columns, or with ``versions`` only
    ``uuid`` and ``updated_at``."""
    columns = (NodeModel.uuid, NodeModel.updated_at) if versions else _CHANGED_COLUMNS
    return (
        select(*columns)
        .where(_PAGE_STARTS[kind], *(_FREE if free_only else ()))
        .order_by(NodeModel.updated_at, NodeModel.uuid)
        .limit(page)
    )
