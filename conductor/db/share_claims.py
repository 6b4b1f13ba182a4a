# SPDX-License-Identifier: Apache-2.0
"""Claims by share: an agent takes the free nodes of its ring arcs in one statement.

A cold start, or a join, gives an agent thousands of nodes that nobody
holds.  Claimed by uuid, they were read by the agent first, then sent back
500 to a call, each call read again after its update (the reply's
current owners): at 100k nodes on 10 agents, 206 to 302 calls queued on one
conductor.  Here the agent names its arcs (the ring it computes with) and
the conductor takes, in one ``UPDATE ... WHERE ring_position IN (arcs) AND
<no live owner>``, the nodes that a claim by uuid would have granted it as
new claims -- each with a new epoch, in the same compare-and-swap
(:mod:`conductor.db.ownership`, invariant 1) -- and returns just those.

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

from sqlalchemy import ColumnElement, Table, and_, select, update

from conductor.db import node_pages
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.models import AgentModel, NodeModel, utcnow
from conductor.db.ownership import update_nodes_returning

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


def _free(live: Sequence[str], now: datetime.datetime) -> ColumnElement[bool]:
    """An unpinned node that is free, or whose owner is neither live nor held
    for a restart (:func:`conductor.db.ownership._claimable`, for unpinned nodes)."""
    held_for_restart = select(AgentModel.host).where(AgentModel.restart_until > now)
    return and_(
        NodeModel.instance_uuid.is_(None),
        (NodeModel.owner.is_(None))
        | and_(NodeModel.owner.not_in(live), NodeModel.owner.not_in(held_for_restart)),
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
) -> ArcClaim:
    """Take for ``agent`` up to ``limit`` unpinned nodes of ``arcs`` that have no
    live owner (free, or held by an owner not in ``live_members`` and not
    stopped for a restart), each with a new epoch, in one transaction.

    ``groups`` / ``exclude_groups``: only nodes of these groups / of none of
    these (the groups of the ring the arcs come from).
    """
    now = now or utcnow()
    live = sorted(set(live_members) | {agent})
    conditions: list[Any] = [_free(live, now)]
    if groups is not None:
        conditions.append(NodeModel.node_group.in_(groups))
    if exclude_groups:
        conditions.append(NodeModel.node_group.not_in(exclude_groups))
    values = {"owner": agent, "owner_epoch": NodeModel.owner_epoch + 1, "updated_at": now}
    uuids: list[str] = []
    epochs: list[int] = []
    found: list[str] = []
    with db.transaction() as session:
        returning = session.get_bind().dialect.update_returning
        for batch in node_pages.arc_batches(db, arcs):
            room = limit - len(uuids)
            if room <= 0:
                break
            share = node_pages.nodes_in_arcs(db, batch, conditions)
            picked = select(share.c.uuid).limit(room)
            if returning:
                # The conditions again on the row updated: the compare-and-swap
                # is the UPDATE's, whatever committed since the rows were picked.
                rows = session.execute(
                    update(_NODES)
                    .where(_NODES.c.uuid.in_(picked), *conditions)
                    .values(values)
                    .returning(_NODES.c.uuid, _NODES.c.owner_epoch, _NODES.c.node_group)
                ).all()
                taken = [(row[0], row[1], row[2]) for row in rows]
            else:
                # MariaDB: no LIMIT in an IN subquery, no UPDATE ... RETURNING;
                # the locking read of update_nodes_returning checks again.
                candidates = [row[0] for row in session.execute(picked)]
                rows = update_nodes_returning(
                    session,
                    [_NODES.c.uuid.in_(candidates), *conditions],
                    values,
                    [_NODES.c.uuid, _NODES.c.owner_epoch, _NODES.c.node_group],
                )
                # Read before the update: the new epoch is one more.
                taken = [(row.uuid, row.owner_epoch + 1, row.node_group) for row in rows]
            for uuid, epoch, group in taken:
                uuids.append(uuid)
                epochs.append(epoch)
                found.append(group)
    return ArcClaim(
        uuids=uuids,
        epochs=epochs,
        groups=found,
        changed_at=now.isoformat() if uuids else None,
        more=len(uuids) >= limit,
    )
