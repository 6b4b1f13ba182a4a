# SPDX-License-Identifier: Apache-2.0
"""Claims by share: an agent takes the free nodes of its ring arcs in one statement.

A cold start, or a join, gives an agent thousands of nodes that nobody
holds.  Claimed by uuid, they were read by the agent first, then sent back
500 to a call, each call read again after its update (the reply's
current owners): at 100k nodes on 10 agents, 206 to 302 calls queued on one
conductor.  Here the agent names its arcs (the ring it computes with) and
the conductor, in one transaction, reads the nodes of those arcs that have
no live owner by the position index and takes them with ``UPDATE ... WHERE
uuid = ANY(...) AND <no live owner>`` -- each with a new epoch, in the same
compare-and-swap as a claim by uuid (:mod:`conductor.db.ownership`,
invariant 1) -- and returns just those.  On PostgreSQL that is one
statement built once (:mod:`conductor.db.arc_statements`); on MariaDB and
SQLite the candidates are read first, then updated by uuid (``IN`` lists,
:mod:`conductor.db.value_lists`).  (The read as the ``UPDATE``'s
subquery, with the owner conditions inside each arc's scan, cost seconds of
database CPU per claim when ten agents claimed at once: the candidates are
read alone, the owner conditions outside the arcs' scans.)

Only unpinned nodes: a pinned node of a departed owner is re-homed to the
agent the conductor's own ring names (``claim_nodes``), after
``rehome_grace`` (invariant 3).  Nodes of an owner stopped for a restart
are not taken (invariant 10); nor is any node of a live owner.  What this
leaves of the agent's share it claims by uuid, as before, and learns why.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Dialect, Table, and_, select

from conductor.common.objects import Ownership
from conductor.db import arc_statements, node_pages, node_writes, value_lists
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.models import AgentModel, NodeModel
from conductor.db.ownership import owned_on, update_nodes_returning

__all__ = ["ArcClaim", "claim_arcs"]

_NODES: Table = NodeModel.__table__  # type: ignore[assignment]


@dataclasses.dataclass(frozen=True)
class ArcClaim:
    """What :func:`claim_arcs` took: the nodes, each with its new epoch and group."""

    uuids: list[str]
    epochs: list[int]
    groups: list[str]
    #: ISO 8601 stamp of the rows taken (``None``: none taken).
    changed_at: str | None
    #: The limit was reached: more may be free in these arcs.
    more: bool
    #: With ``read``: the first page of the arcs after the claim, and the
    #: marker of the next (:func:`conductor.db.node_pages.share_page`).
    share: tuple[node_pages.InventoryPage, tuple[int, str] | None] | None = None
    #: With ``held``: every node the agent owned before the claim (in its
    #: transaction); with the nodes taken, all it owns after it.
    held: list[Ownership] | None = None


def _free(columns: Any, live: Sequence[str], held: Any, dialect: Dialect) -> ColumnElement[bool]:
    """An unpinned node that is free, or whose owner is neither live nor held
    for a restart (:func:`conductor.db.ownership._claimable`, for unpinned
    nodes); ``columns``: the node table's or a subquery's, ``held``: the
    owners held for a restart (a list, or a subquery)."""
    not_held = (
        value_lists.none_of(columns.owner, held, dialect)
        if isinstance(held, list)
        else columns.owner.not_in(held)
    )
    return and_(
        columns.instance_uuid.is_(None),
        (columns.owner.is_(None))
        | and_(value_lists.none_of(columns.owner, live, dialect), not_held),
    )


@retry_on_dead_connection
def claim_arcs(
    db: Database,
    agent: str,
    arcs: Sequence[tuple[int, int]],
    *,
    live_members: Collection[str],
    limit: int,
    groups: Sequence[str] | None = None,
    exclude_groups: Sequence[str] = (),
    now: datetime.datetime | None = None,
    read: int | None = None,
    held: bool = False,
) -> ArcClaim:
    """Take for ``agent`` up to ``limit`` unpinned nodes of ``arcs`` that have no
    live owner (free, or held by an owner not in ``live_members`` and not
    stopped for a restart), each with a new epoch, in one transaction.

    ``groups`` / ``exclude_groups``: only nodes of these groups / of none of
    these (the groups of the ring the arcs come from).  The transaction is
    recorded while it runs (:func:`conductor.db.node_writes.record`): its
    thousands of rows may commit long after their stamp.  ``read``: also
    the first page of at most that many nodes of the arcs as the claim
    left them (``share``; on PostgreSQL read in the claim's transaction).
    ``held``: also every node ``agent`` owned just before the claim, read in
    its transaction (the claim takes none of those: ``agent`` is live).
    """
    with node_writes.record(db, now) as write:
        claim = _claim_arcs(
            db,
            agent,
            arcs,
            live_members=live_members,
            limit=limit,
            groups=groups,
            exclude_groups=exclude_groups,
            write=write,
            read=read,
            held=held,
        )
    if read is not None and claim.share is None:
        page = node_pages.share_page(
            db, arcs, limit=read, groups=groups, exclude_groups=exclude_groups
        )
        claim = dataclasses.replace(claim, share=page)
    return claim


def _claim_arcs(
    db: Database,
    agent: str,
    arcs: Sequence[tuple[int, int]],
    *,
    live_members: Collection[str],
    limit: int,
    groups: Sequence[str] | None,
    exclude_groups: Sequence[str],
    write: node_writes.OpenWrite,
    read: int | None,
    held: bool,
) -> ArcClaim:
    """:func:`claim_arcs`, its rows stamped as ``write``, whose record ends
    in the claim's transaction (on PostgreSQL with the page ``read``)."""
    now = write.stamp
    live = sorted(set(live_members) | {agent})
    if db.engine.dialect.name == "postgresql":
        with db.writing() as connection:
            before = owned_on(connection, agent) if held else None
            taken = arc_statements.claim(
                connection,
                agent,
                arcs,
                live=live,
                room=limit,
                groups=groups,
                exclude_groups=exclude_groups,
                write=write,
            )
            page = None
            if read is not None:  # the share as the claim left it, in its transaction
                page = node_pages.read_share_page(
                    connection, arcs, limit=read, groups=groups, exclude_groups=exclude_groups
                )
        return _taken(taken, 0, now, limit, page, held=before)
    groups_in: list[Any] = []
    if groups is not None:
        groups_in.append(NodeModel.node_group.in_(groups))
    if exclude_groups:
        groups_in.append(NodeModel.node_group.not_in(exclude_groups))
    holding = select(AgentModel.host).where(AgentModel.restart_until > now)
    dialect = db.engine.dialect
    # The conditions again on each row updated (a locking read first where
    # there is no UPDATE ... RETURNING): the compare-and-swap is the
    # UPDATE's, whatever committed since the candidates were read.
    claimable = [_free(_NODES.c, live, holding, dialect), *groups_in]
    values = {"owner": agent, "owner_epoch": NodeModel.owner_epoch + 1, "updated_at": now}
    rows: list[Any] = []
    with db.transaction() as session:
        # RETURNING gives the new epoch; a locking read before the update the old.
        bump = 0 if session.get_bind().dialect.update_returning else 1
        before = owned_on(session.connection(), agent) if held else None
        holding_now = list(session.execute(holding).scalars())
        for first in range(0, len(arcs), node_pages.ARCS_PER_STATEMENT):
            room = limit - len(rows)
            if room <= 0:
                break
            # The arcs' nodes by the position index, filtered outside it:
            # inside each arc's scan the owner conditions cost seconds.
            share = node_pages.written_arcs(
                arcs[first : first + node_pages.ARCS_PER_STATEMENT], groups_in
            )
            candidates = [
                row[0]
                for row in session.execute(
                    select(share.c.uuid)
                    .where(_free(share.c, live, holding_now, dialect))
                    .limit(room)
                )
            ]
            for chunk in value_lists.chunks(candidates, dialect):
                rows += update_nodes_returning(
                    session,
                    [value_lists.one_of(_NODES.c.uuid, chunk, dialect), *claimable],
                    values,
                    [_NODES.c.uuid, _NODES.c.owner_epoch, _NODES.c.node_group],
                )
        write.end(session.connection())
    return _taken(rows, bump, now, limit, held=before)


def _taken(
    rows: Sequence[Any],
    bump: int,
    now: datetime.datetime,
    limit: int,
    share: tuple[node_pages.InventoryPage, tuple[int, str] | None] | None = None,
    *,
    held: list[Ownership] | None = None,
) -> ArcClaim:
    """The claim of ``rows`` (their uuid, owner_epoch and node_group), each
    epoch ``bump`` short of the new one."""
    return ArcClaim(
        uuids=[row.uuid for row in rows],
        epochs=[row.owner_epoch + bump for row in rows],
        groups=[row.node_group for row in rows],
        changed_at=now.isoformat() if rows else None,
        more=len(rows) >= limit,
        share=share,
        held=held,
    )
