# SPDX-License-Identifier: Apache-2.0
"""PostgreSQL's reads and claims of a share's arcs, each statement built once.

Every agent reads its share (a few thousand arcs of ring positions) at
start and what changed in it every few seconds, and claims it at a cold
start.  Built afresh for each call, these statements -- a LATERAL scan per
arc, the owner conditions, the page's order -- cost the conductor about as
much CPU as the rows they return at 100 agents (a thousand nodes each): the
part of an agent's cost that grows with the agent count.  So each shape of
statement is built once (:func:`functools.lru_cache`), every value in it
bound (the arcs, the live agents and the change times as array literals),
and SQLAlchemy reuses its compiled form; a call makes the parameters only
(``docs/dependency-facts.rst``, "PostgreSQL through SQLAlchemy").

MariaDB and SQLite have no arrays: :mod:`conductor.db.node_pages` and
:mod:`conductor.db.share_claims` write their arcs into the statement.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    DateTime,
    Integer,
    Select,
    Subquery,
    Table,
    Text,
    Update,
    all_,
    and_,
    any_,
    bindparam,
    cast,
    func,
    or_,
    select,
    true,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Connection

from conductor.db import node_writes
from conductor.db.models import AgentModel, NodeModel
from conductor.db.value_lists import array_literal

__all__ = ["SHARE_COLUMNS", "arc_literals", "claim", "share_query"]

#: What a share read returns of each node, in this order.
SHARE_COLUMNS = (
    NodeModel.uuid,
    NodeModel.node_group,
    NodeModel.owner,
    NodeModel.owner_epoch,
    NodeModel.instance_uuid,
    NodeModel.power_state,
    NodeModel.ring_position,
)

_NODES: Table = NodeModel.__table__  # type: ignore[assignment]


def _array(name: str, element: Any) -> Any:
    """A bound array, sent as one literal (PostgreSQL parses thousands of
    elements of ``'{1,2,...}'`` many times faster than ``ARRAY[1, 2, ...]``)."""
    return cast(bindparam(name, type_=Text), ARRAY(element))


def arc_literals(arcs: Sequence[tuple[int, int]]) -> tuple[str, str]:
    """The firsts and the lasts of ``arcs`` as array literals; made once for
    an agent's share (:class:`conductor.ring_share.ShareArcs`), which every
    change read of it sends again (about 1.7 ms of CPU for 4,096 arcs)."""
    derived = getattr(arcs, "derived", None)
    if derived is not None:
        literals: tuple[str, str] = derived("postgresql arc literals", _make_arc_literals)
        return literals
    return _make_arc_literals(arcs)


def _make_arc_literals(arcs: Sequence[tuple[int, int]]) -> tuple[str, str]:
    """``'{1,2,...}'``, made by ``repr`` of the list, which writes thousands
    of 19-digit integers in half the time ``str`` of each does (the blank
    after each comma is allowed).  Taken from the arcs as held if they are
    an agent's share, without making and taking apart a pair per arc."""
    columns = getattr(arcs, "columns", None)
    if columns is not None:
        first_array, last_array = columns()
        firsts, lasts = first_array.tolist(), last_array.tolist()
    else:
        firsts, lasts = [int(first) for first, _ in arcs], [int(last) for _, last in arcs]
    return "{" + repr(firsts)[1:-1] + "}", "{" + repr(lasts)[1:-1] + "}"


def _times_literal(times: Sequence[datetime.datetime]) -> str:
    return "{" + ",".join(f'"{moment.isoformat(" ")}"' for moment in times) + "}"


def _group_conditions(groups: bool, excluded: bool) -> list[ColumnElement[bool]]:
    """Only the nodes of the bound ``groups`` / of none of ``excluded``."""
    conditions: list[ColumnElement[bool]] = []
    if groups:
        conditions.append(NodeModel.node_group == any_(_array("groups", Text)))
    if excluded:
        conditions.append(NodeModel.node_group != all_(_array("excluded", Text)))
    return conditions


def _arc_nodes(conditions: Sequence[ColumnElement[bool]], *, since: bool) -> Subquery:
    """The nodes whose position is in one of the bound arcs (changed at or
    after the bound ``since``) and that meet ``conditions``.

    Each arc is a LATERAL range scan of the index ``(ring_position,
    updated_at)``: one short statement whatever their number.  (Joined
    plainly, or laterally but flattened, the planner walked the whole
    position index in order and compared every node with every arc: a
    minute for one agent's share of 100k nodes.)  The change time comes in
    as a function's output, not as a constant: its selectivity is then
    unknown to the planner, which keeps to the position index rather than
    read each arc by the change-time index -- after a cold start, with
    statistics that still said few rows had changed, that read every change
    of the fleet once per arc, seconds per read.
    """
    arc: Any = (
        func.unnest(_array("arc_firsts", BigInteger), _array("arc_lasts", BigInteger))
        .table_valued("first", "last")
        .render_derived(name="arc")
    )
    changed: list[ColumnElement[bool]] = []
    arcs_from = arc
    if since:
        moment = (
            func.unnest(_array("since", DateTime()))
            .table_valued("since")
            .render_derived(name="moment")
        )
        changed.append(NodeModel.updated_at >= moment.c.since)
        arcs_from = arc.join(moment, true())
    within = (
        select(*SHARE_COLUMNS)
        .where(NodeModel.ring_position.between(arc.c.first, arc.c.last), *changed, *conditions)
        # OFFSET 0 keeps the planner from flattening it into a plain join.
        .offset(0)
        .lateral("node")
    )
    return select(*within.c).select_from(arcs_from).join(within, true()).subquery("share")


@functools.lru_cache(maxsize=64)
def _page_statement(
    *, groups: bool, excluded: bool, claimed: bool, since: bool, after: bool, as_of: bool
) -> Select[Any]:
    """A page of a share read, in position order: its nodes (of the bound
    groups, of none of the excluded, changed since the bound instant, past
    the bound marker), leaving out the rows the bound agent's claims changed
    last (stamped at the bound times), at most the bound ``room``.  With
    ``as_of``, each row also has ``earliest_open``: the earliest stamp of
    the writes open at the bound ``now``
    (:data:`conductor.db.node_writes.EARLIEST_OPEN_NOW`, an InitPlan run
    once), which a read of a whole share asked in a statement of its own."""
    conditions = _group_conditions(groups, excluded)
    if claimed:
        conditions.append(
            or_(
                NodeModel.owner != bindparam("claimer", type_=Text),
                NodeModel.updated_at != all_(_array("claimed_at", DateTime())),
            )
        )
    nodes = _arc_nodes(conditions, since=since)
    position, uuid = nodes.c.ring_position, nodes.c.uuid
    query = select(*(nodes.c[column.key] for column in SHARE_COLUMNS))
    if as_of:
        query = query.add_columns(node_writes.EARLIEST_OPEN_NOW.label("earliest_open"))
    if after:
        marker = tuple_(
            bindparam("after_position", type_=BigInteger), bindparam("after_uuid", type_=Text)
        )
        query = query.where(tuple_(position, uuid) > marker)
    return query.order_by(position, uuid).limit(bindparam("room", type_=Integer))


def share_query(
    arcs: Sequence[tuple[int, int]],
    *,
    room: int,
    groups: Sequence[str] | None = None,
    exclude_groups: Sequence[str] = (),
    claimed: tuple[str, Sequence[datetime.datetime]] | None = None,
    since: datetime.datetime | None = None,
    after: tuple[int, str] | None = None,
    as_of: datetime.datetime | None = None,
) -> tuple[Select[Any], dict[str, Any]]:
    """The statement of a page of at most ``room`` nodes of ``arcs``, in
    position order, as :data:`SHARE_COLUMNS`, and its values (the arguments
    of :func:`conductor.db.node_pages.share_page`).  ``as_of``: each row
    also has ``earliest_open``, the earliest stamp of the writes open then."""
    if after is not None:  # a later page: only the arcs it may still find nodes in
        arcs = [arc for arc in arcs if arc[1] >= after[0]]
    firsts, lasts = arc_literals(arcs)
    values: dict[str, Any] = {"arc_firsts": firsts, "arc_lasts": lasts, "room": room}
    if groups is not None:
        values["groups"] = array_literal(groups)
    if exclude_groups:
        values["excluded"] = array_literal(exclude_groups)
    if claimed is not None and claimed[1]:
        values["claimer"], values["claimed_at"] = claimed[0], _times_literal(claimed[1])
    if since is not None:
        values["since"] = _times_literal([since])
    if after is not None:
        values["after_position"], values["after_uuid"] = after
    if as_of is not None:
        values["now"] = as_of
    query = _page_statement(
        groups="groups" in values,
        excluded="excluded" in values,
        claimed="claimer" in values,
        since=since is not None,
        after=after is not None,
        as_of=as_of is not None,
    )
    return query, values


def _free(columns: Any, held: Any) -> ColumnElement[bool]:
    """An unpinned node that is free, or whose owner is none of the bound
    ``live`` agents nor one ``held`` for a restart (a subquery)."""
    return and_(
        columns.instance_uuid.is_(None),
        columns.owner.is_(None)
        | and_(columns.owner != all_(_array("live", Text)), columns.owner.not_in(held)),
    )


@functools.lru_cache(maxsize=8)
def _claim_statement(*, groups: bool, excluded: bool) -> Update:
    """Take for the bound ``claimer`` at most ``room`` unpinned nodes of the
    bound arcs that have no live owner, each with a new epoch, stamped
    ``stamp``; returns each one's uuid, new epoch and group.  It also ends
    the bound ``record`` of the write (:data:`conductor.db.node_writes.END_CTE`):
    one statement fewer in each claim, and a cold start makes a claim per agent.

    The candidates are an ``ARRAY(SELECT ...)``: an InitPlan, run once and
    planned alone, as the read of them was when it was a statement of its
    own -- the arcs' nodes by the position index, the owner conditions
    outside each arc's scan (inside it they cost seconds of database CPU
    per claim when ten agents claimed at once).  The conditions again on
    each row updated make the compare-and-swap the ``UPDATE``'s, whatever
    committed since the candidates were read.
    """
    in_groups = _group_conditions(groups, excluded)
    held = select(AgentModel.host).where(
        AgentModel.restart_until > bindparam("stamp", type_=DateTime())
    )
    share = _arc_nodes(in_groups, since=False)
    candidates = (
        select(share.c.uuid).where(_free(share.c, held)).limit(bindparam("room", type_=Integer))
    )
    return (
        update(_NODES)
        .where(
            NodeModel.uuid == any_(func.array(candidates.scalar_subquery())),
            _free(NodeModel, held),
            *in_groups,
        )
        .values(
            owner=bindparam("claimer", type_=Text),
            owner_epoch=NodeModel.owner_epoch + 1,
            updated_at=bindparam("stamp", type_=DateTime()),
        )
        .returning(NodeModel.uuid, NodeModel.owner_epoch, NodeModel.node_group)
        .add_cte(node_writes.END_CTE)
    )


def claim(
    connection: Connection,
    agent: str,
    arcs: Sequence[tuple[int, int]],
    *,
    live: Sequence[str],
    room: int,
    groups: Sequence[str] | None,
    exclude_groups: Sequence[str],
    write: node_writes.OpenWrite,
) -> list[Any]:
    """Run :func:`_claim_statement` for ``agent``, its rows stamped as
    ``write``, whose record it ends: the rows taken, each as (uuid, new
    epoch, group)."""
    firsts, lasts = arc_literals(arcs)
    values: dict[str, Any] = {
        "arc_firsts": firsts,
        "arc_lasts": lasts,
        "claimer": agent,
        "live": array_literal(live),
        "room": room,
        "stamp": write.stamp,
        **write.ending(),
    }
    if groups is not None:
        values["groups"] = array_literal(groups)
    if exclude_groups:
        values["excluded"] = array_literal(exclude_groups)
    query = _claim_statement(groups=groups is not None, excluded=bool(exclude_groups))
    return list(connection.execute(query, values).all())
