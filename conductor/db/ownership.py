# SPDX-License-Identifier: Apache-2.0
"""Ownership records: who may act on a node, fenced by epochs.

Every change of a node's ``(owner, owner_epoch)`` happens here, as a
compare-and-swap ``UPDATE ... WHERE`` on the row itself, so that two agents
(or two conductors acting for them) racing for one node can never both win:
the database serializes the two updates and the second one's condition no
longer holds.  Every successful change bumps the epoch; an agent carries the
epoch it holds with every action, and a stale epoch is refused.

Rules (invariants 1 and 3, ``docs/architecture.rst`` "The invariants"):

* a claim takes a node that is free, or whose owner is not a live member;
  a *pinned* node (one hosting an instance) only once its owner has been
  gone longer than ``rehome_grace`` — and then the instance's host moves in
  the same transaction;
* no node of an owner stopped for a restart (``agents.restart_until`` in the
  future) is taken, pinned or not: a restart moves nothing;
* a claim of a node the caller already owns succeeds without a new epoch
  (re-validation after a membership hiccup);
* a live owner is never robbed: release and transfer are done by the owner,
  with the epoch it holds.

The conductor's side of the fence is here too: every write an agent's
report causes (a build's success or failure, a teardown, power and
provision states, a definitive refusal) carries :func:`holds` in the
``WHERE`` of its node ``UPDATE``, in the transaction that makes the change.
A report is never checked first and applied after: between the two a
takeover could bump the epoch, and the stale report would still act.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Row,
    Select,
    String,
    Table,
    and_,
    bindparam,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from conductor.common.objects import ClaimOutcome, Ownership, ReleaseOutcome
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.models import AgentModel, InstanceModel, NodeModel, utcnow
from conductor.db.value_lists import CHUNK

__all__ = [
    "ClaimOutcome",
    "Fence",
    "ReleaseOutcome",
    "Transfer",
    "claim_nodes",
    "holds",
    "owned_by",
    "owned_on",
    "ownership_of",
    "release_nodes",
    "transfer_nodes",
    "update_nodes_returning",
]


T = TypeVar("T")


def _chunks(items: Sequence[T], size: int = CHUNK) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass(frozen=True)
class Transfer:
    """Hand one node held at ``epoch`` to ``new_owner``."""

    node_uuid: str
    epoch: int
    new_owner: str


@dataclass(frozen=True)
class Fence:
    """What an agent's report is fenced by: the node's owner and epoch it acted under."""

    owner: str
    epoch: int


def holds(fence: Fence) -> ColumnElement[bool]:
    """The compare-and-swap condition on a node row: still ``fence.owner``'s at ``fence.epoch``.

    Put it in the ``WHERE`` of the node ``UPDATE`` that a report causes, and
    let the transaction change nothing else when that ``UPDATE`` matched no
    row: the check and the write are then one, and no takeover can come
    between them.
    """
    nodes = NodeModel.__table__.c
    return and_(nodes.owner == fence.owner, nodes.owner_epoch == fence.epoch)


_NODES: Table = NodeModel.__table__  # type: ignore[assignment]


def update_nodes_returning(
    connection: Connection | Session,
    where: Sequence[ColumnElement[bool]],
    values: Mapping[str, Any],
    returning: Sequence[ColumnElement[Any]],
    params: Mapping[str, Any] | None = None,
) -> Sequence[Row[Any]]:
    """``UPDATE nodes SET values WHERE where RETURNING returning``, on every database.

    MariaDB has no ``UPDATE ... RETURNING`` (only INSERT and DELETE), MySQL
    none at all: there the rows are read and locked first (``SELECT ... FOR
    UPDATE``, a locking read: it sees the latest committed rows, as the
    ``UPDATE`` would), then updated by primary key.  Nobody can change a
    locked row in between, so the outcome is the compare-and-swap's.
    ``returning`` must be columns the update does not change (it is read
    before the update).
    """
    dialect = (
        connection.dialect if isinstance(connection, Connection) else connection.get_bind().dialect
    )
    if dialect.update_returning:
        return connection.execute(
            update(_NODES).where(*where).values(values).returning(*returning), params
        ).all()
    rows = connection.execute(
        select(_NODES.c.id, *returning).where(*where).with_for_update(), params
    ).all()
    if rows:
        connection.execute(
            update(_NODES).where(_NODES.c.id.in_([row.id for row in rows])).values(values), params
        )
    return rows


#: A claim as stored: four columns, not whole rows (ORM objects, their JSON
#: columns decoded, were half of a 500-node claim's CPU).
_CLAIM_COLUMNS = (NodeModel.uuid, NodeModel.owner, NodeModel.owner_epoch, NodeModel.instance_uuid)


def _ownership(row: Row[str, str | None, int, str | None]) -> Ownership:
    """The claim of a row of :data:`_CLAIM_COLUMNS`."""
    uuid, owner, epoch, instance = row
    return Ownership(node_uuid=uuid, owner=owner, epoch=epoch, pinned=instance is not None)


def _current(session: Session, uuids: Iterable[str]) -> dict[str, Ownership]:
    """The claims of ``uuids`` as stored."""
    result: dict[str, Ownership] = {}
    for chunk in _chunks(list(uuids)):
        for row in session.execute(select(*_CLAIM_COLUMNS).where(NodeModel.uuid.in_(chunk))):
            result[row[0]] = _ownership(row)
    return result


@retry_on_dead_connection
def claim_nodes(
    db: Database,
    agent: str,
    node_uuids: Sequence[str],
    *,
    live_members: Collection[str],
    rehome_grace: float,
    now: datetime.datetime | None = None,
    rehome_owners: Callable[[Sequence[tuple[str, str]]], Sequence[str | None]] | None = None,
) -> ClaimOutcome:
    """Claim many nodes for ``agent`` in one transaction (see module rules).

    :param live_members: the members of the group as the caller's conductor
        sees them right now; ``agent`` itself must be one of them.
    :param rehome_grace: seconds a departed owner keeps its pinned nodes.
    :param rehome_owners: given ``(node uuid, group)`` pairs, the live agent
        each pinned node of a departed owner belongs to by the ring (``None``:
        no live agent serves its group, anyone may take it).  A pinned node
        is re-homed only to that agent: never to whoever asks first, or an
        agent whose view was stale when it asked keeps it off its ring owner
        for good (pinned nodes do not move again while their owner lives).
        ``None``: any claimant.
    """
    now = now or utcnow()
    cutoff = now - datetime.timedelta(seconds=rehome_grace)
    live = sorted(set(live_members) | {agent})
    wanted = list(dict.fromkeys(node_uuids))
    departed_long_enough = select(AgentModel.host).where(
        AgentModel.gone_since.is_not(None), AgentModel.gone_since <= cutoff
    )
    claimable = _claimable(live, departed_long_enough, now)
    taken_now: dict[str, str | None] = {}
    with db.transaction() as session:
        for chunk in _chunks(wanted):
            condition = claimable
            if rehome_owners is not None:
                rehomable = _rehomable(
                    session,
                    agent=agent,
                    chunk=chunk,
                    live=live,
                    departed=departed_long_enough,
                    rehome_owners=rehome_owners,
                )
                condition = and_(
                    claimable,
                    or_(NodeModel.instance_uuid.is_(None), NodeModel.uuid.in_(rehomable)),
                )
            taken_now.update(_take(session, agent, chunk, condition, now))
        rehomed = [uuid for uuid, instance in taken_now.items() if instance is not None]
        _rehome_instances(session, rehomed, agent, now)
        current = _current(session, wanted)
        restarting = _restarting_until(session, now)
    outcome = ClaimOutcome(
        rehomed=rehomed, changed_at=now.isoformat() if taken_now else None, taken=taken_now
    )
    for uuid in wanted:
        own = current.get(uuid)
        if own is None:
            outcome.missing.append(uuid)
        elif own.owner == agent:
            outcome.granted.append(own)
        else:
            outcome.refused[uuid] = own.owner
            until = restarting.get(own.owner) if own.owner is not None else None
            if until is not None and own.owner is not None:
                outcome.restarting[own.owner] = (until - now).total_seconds()
    return outcome


def _claimable(
    live: Sequence[str], departed: Select[str], now: datetime.datetime
) -> ColumnElement[bool]:
    """The condition that a node is free, or held by an owner neither *live*
    nor stopped for a restart; a pinned one only once its owner is among the
    *departed* (gone longer than the re-home grace)."""
    held_for_restart = select(AgentModel.host).where(AgentModel.restart_until > now)
    return or_(
        NodeModel.owner.is_(None),
        and_(
            NodeModel.owner.not_in(live),
            NodeModel.owner.not_in(held_for_restart),
            or_(
                NodeModel.instance_uuid.is_(None),
                NodeModel.owner.in_(departed),
            ),
        ),
    )


def _take(
    session: Session,
    agent: str,
    chunk: Sequence[str],
    condition: ColumnElement[bool],
    now: datetime.datetime,
) -> dict[str, str | None]:
    """Take the nodes of *chunk* that meet *condition* for *agent*, each with a
    new epoch: the instance of each node taken (``None``: not pinned), by node."""
    taken = update_nodes_returning(
        session,
        [NodeModel.uuid.in_(chunk), condition],
        {"owner": agent, "owner_epoch": NodeModel.owner_epoch + 1, "updated_at": now},
        [_NODES.c.uuid, _NODES.c.instance_uuid],
    )
    return {row.uuid: row.instance_uuid for row in taken}


def _rehome_instances(
    session: Session, node_uuids: Sequence[str], host: str, now: datetime.datetime
) -> None:
    """The instances on *node_uuids* are *host*'s now (their nodes were re-homed to it)."""
    for chunk in _chunks(node_uuids):
        session.execute(
            update(InstanceModel)
            .where(InstanceModel.node_uuid.in_(chunk))
            .values(host=host, updated_at=now)
            .execution_options(synchronize_session=False)
        )


def _restarting_until(
    session: Session, now: datetime.datetime
) -> dict[str, datetime.datetime | None]:
    """Until when each agent stopped for a restart is held, by host."""
    return {
        host: until
        for host, until in session.execute(
            select(AgentModel.host, AgentModel.restart_until).where(AgentModel.restart_until > now)
        )
    }


def _rehomable(
    session: Session,
    *,
    agent: str,
    chunk: Sequence[str],
    live: Sequence[str],
    departed: Select[str],
    rehome_owners: Callable[[Sequence[tuple[str, str]]], Sequence[str | None]],
) -> list[str]:
    """The pinned nodes of departed owners in *chunk* that the ring gives to *agent*."""
    candidates = [
        (uuid, group)
        for uuid, group in session.execute(
            select(NodeModel.uuid, NodeModel.node_group).where(
                NodeModel.uuid.in_(chunk),
                NodeModel.instance_uuid.is_not(None),
                NodeModel.owner.not_in(live),
                NodeModel.owner.in_(departed),
            )
        )
    ]
    if not candidates:
        return []
    owners = rehome_owners(candidates)
    return [
        uuid
        for (uuid, _group), owner in zip(candidates, owners, strict=True)
        if owner in (None, agent)
    ]


@retry_on_dead_connection
def release_nodes(db: Database, agent: str, claims: Mapping[str, int]) -> ReleaseOutcome:
    """Give up nodes held at the given epochs; pinned nodes are refused.

    A pinned node leaves its owner only by :func:`transfer_nodes` (drain,
    move) or by re-homing after its owner is gone.

    Set-based: one ``UPDATE ... WHERE (uuid, owner_epoch) IN (...)`` per
    chunk, not one statement per node.  An agent releases hundreds of nodes
    after every join; a statement each made the transaction long enough, under
    load, that the ``updated_at`` it stamped at its start fell before the
    next inventory window of the agent waiting for those nodes, which then
    never heard of the release (issue 13).
    """
    outcome = ReleaseOutcome()
    wanted = dict(claims)
    with db.transaction() as session:
        for chunk in _chunks(list(wanted)):
            now = utcnow()  # per statement: the stamp stays close to the commit
            released = update_nodes_returning(
                session,
                [
                    tuple_(NodeModel.uuid, NodeModel.owner_epoch).in_(
                        [(uuid, wanted[uuid]) for uuid in chunk]
                    ),
                    NodeModel.owner == agent,
                    # Releasing a pinned node would strand its instance.
                    NodeModel.instance_uuid.is_(None),
                ],
                {"owner": None, "owner_epoch": NodeModel.owner_epoch + 1, "updated_at": now},
                [_NODES.c.uuid],
            )
            # Matched at the epoch asked for, now one more.
            outcome.done.update({row.uuid: wanted[row.uuid] + 1 for row in released})
        refused = [uuid for uuid in wanted if uuid not in outcome.done]
        if refused:
            current = _current(session, refused)
            outcome.refused.update({uuid: current.get(uuid) for uuid in refused})
    return outcome


@retry_on_dead_connection
def transfer_nodes(db: Database, agent: str, transfers: Sequence[Transfer]) -> ReleaseOutcome:
    """Hand nodes held at the given epochs to other agents (drain, move).

    Pinned nodes move with their instance: its host changes in the same
    transaction.  Set-based as releases are: per new owner, one ``UPDATE ...
    WHERE (uuid, owner_epoch) IN (...)`` per chunk, and one for the hosts of
    the instances that moved (a drain of 10,000 nodes was 10,000 statements
    in one transaction).
    """
    now = utcnow()
    outcome = ReleaseOutcome()
    by_owner: dict[str, dict[str, int]] = {}
    for transfer in transfers:
        by_owner.setdefault(transfer.new_owner, {})[transfer.node_uuid] = transfer.epoch
    with db.transaction() as session:
        for new_owner, wanted in sorted(by_owner.items()):
            for chunk in _chunks(list(wanted)):
                moved = update_nodes_returning(
                    session,
                    [
                        tuple_(NodeModel.uuid, NodeModel.owner_epoch).in_(
                            [(uuid, wanted[uuid]) for uuid in chunk]
                        ),
                        NodeModel.owner == agent,
                    ],
                    {
                        "owner": new_owner,
                        "owner_epoch": NodeModel.owner_epoch + 1,
                        "updated_at": now,
                    },
                    [_NODES.c.uuid, _NODES.c.instance_uuid],
                )
                outcome.done.update({row.uuid: wanted[row.uuid] + 1 for row in moved})
                outcome.hosted.update(
                    {row.uuid: row.instance_uuid for row in moved if row.instance_uuid is not None}
                )
                instances = [row.instance_uuid for row in moved if row.instance_uuid is not None]
                if instances:
                    session.execute(
                        update(InstanceModel)
                        .where(InstanceModel.uuid.in_(instances))
                        .values(host=new_owner, updated_at=now)
                        .execution_options(synchronize_session=False)
                    )
        refused = [t.node_uuid for t in transfers if t.node_uuid not in outcome.done]
        if refused:
            current = _current(session, refused)
            outcome.refused.update({uuid: current.get(uuid) for uuid in refused})
    return outcome


@retry_on_dead_connection
def ownership_of(db: Database, node_uuids: Sequence[str]) -> dict[str, Ownership]:
    """The current ownership of the given nodes (absent: no such node)."""
    with db.transaction() as session:
        return _current(session, node_uuids)


#: Built once: every agent asks at start, a hundred at a cold start.
_OWNED_BY = (
    select(*_CLAIM_COLUMNS)
    .where(NodeModel.owner == bindparam("agent", type_=String))
    .order_by(NodeModel.uuid)
)


@retry_on_dead_connection
def owned_by(db: Database, agent: str) -> list[Ownership]:
    """Every node ``agent`` owns, pinned ones included (one consistent read)."""
    with db.read() as connection:
        return owned_on(connection, agent)


def owned_on(connection: Connection, agent: str) -> list[Ownership]:
    """:func:`owned_by`, read on ``connection`` (in its transaction)."""
    return [_ownership(row) for row in connection.execute(_OWNED_BY, {"agent": agent})]
