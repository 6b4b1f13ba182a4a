# SPDX-License-Identifier: Apache-2.0
"""A node's power and provision states as observed: by its owner, or in the back end.

Every agent reports the states of every node it owns every
``report_interval``.  A report applies only while the node is still the
agent's at the epoch it sent (:func:`conductor.db.ownership.holds`, in the
``UPDATE`` itself), and only a real change touches the row: periodic
reports of an unchanged fleet must not look like a fleet of changes to the
schedulers' incremental index refresh.  The inventory sync mirrors what the
back end (Ironic) shows (:func:`mirror_back_end_states`), each change a
compare-and-swap on what it read.

Every write of a node's ``provision_state`` takes its condition and its value
from the node's state table (:mod:`conductor.common.provision_states`), by
the helpers here: :func:`provision_guard` and :func:`provision_value`.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from typing import Any, TypedDict, cast

from sqlalchemy import ColumnElement, Table, Update, bindparam, or_, select, update

from conductor.common.objects import PowerState, ProvisionState
from conductor.common.provision_states import Event as NodeEvent
from conductor.common.provision_states import sources, target, transition
from conductor.db import ownership, value_lists
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.models import NodeModel, utcnow

__all__ = [
    "BackEndState",
    "RecordedStates",
    "StateReport",
    "mirror_back_end_states",
    "provision_guard",
    "provision_value",
    "record_node_states",
]

_NODES: Table = NodeModel.__table__  # type: ignore[assignment]
_REPORTER = ownership.Fence(
    owner=cast(str, bindparam("fence_owner")), epoch=cast(int, bindparam("fence_epoch"))
)
_CURRENT = select(
    _NODES.c.uuid,
    _NODES.c.owner,
    _NODES.c.owner_epoch,
    _NODES.c.power_state,
    _NODES.c.provision_state,
).where(_NODES.c.uuid.in_(bindparam("uuids", expanding=True)))


def provision_guard(
    column: ColumnElement[str], event: NodeEvent
) -> tuple[ColumnElement[bool], ...]:
    """The condition that the ``provision_state`` *column* is one *event* may
    happen in: none for an event of any state, ``=`` for one source (an
    expanding ``IN`` costs a rendering step on every execution)."""
    states = sources(event)
    if states is None:
        return ()
    if not states:
        raise ValueError(f"{event.value}: no stored node to compare")
    return (column == states[0],) if len(states) == 1 else (column.in_(states),)


def provision_value(
    event: NodeEvent, wanted: str | None = None, *, stored: ProvisionState | None = None
) -> str:
    """The ``provision_state`` *event* writes: its one target, or *wanted*
    among its targets; with *stored* (the state the write compares and
    swaps on), the table must allow *event* from it too.

    :raises InvalidProvisionTransition: the table has no such transition
    """
    state = target(event, wanted) if stored is None else transition(event, stored, wanted)
    return state.value


def _set_states(columns: tuple[str, ...]) -> Update:
    """The fenced write of *columns*, built once and run for many reports at a time.

    Only a real change writes, and a state unknown until now (NULL) is one:
    ``IS DISTINCT FROM``, where ``!=`` never held against NULL, so that the
    power state of a node imported without one was never stored, and every
    full report ran one write per such node for nothing.
    """
    return (
        update(_NODES)
        .where(
            _NODES.c.uuid == bindparam("node"),
            ownership.holds(_REPORTER),
            *(
                provision_guard(_NODES.c.provision_state, NodeEvent.REPORT)
                if "provision_state" in columns
                else ()
            ),
            or_(*(_NODES.c[c].is_distinct_from(bindparam(f"new_{c}")) for c in columns)),
        )
        .values({**{c: bindparam(f"new_{c}") for c in columns}, "updated_at": bindparam("now")})
    )


_COLUMNS = ("power_state", "provision_state")
#: By the columns a report changes: power, provision state or both.
_SET_STATES: dict[tuple[str, ...], Update] = {
    columns: _set_states(columns) for columns in (_COLUMNS[:1], _COLUMNS[1:], _COLUMNS)
}


class StateReport(TypedDict):
    """What an agent saw of one node it holds at ``epoch`` (``None``: not reported).

    A mapping, not a dataclass: it is what the endpoint's checks return, and
    converting 1,000 reports would add 6 % to storing them unchanged.
    """

    node_uuid: str
    epoch: int
    power_state: str | None
    provision_state: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class RecordedStates:
    """What :func:`record_node_states` did with an agent's reports."""

    #: The nodes the agent does not hold at the epoch it reported.
    stale: list[str]
    #: The change time written on the rows that changed (``None``: none
    #: did): the agent's change reads may leave those rows out, as they do
    #: its claims' (it knows what it reported).
    changed_at: datetime.datetime | None


def record_node_states(db: Database, agent: str, reports: Sequence[StateReport]) -> RecordedStates:
    """Store ``agent``'s reports: which were stale, and the change time written.

    One transaction.  A stale report changes nothing; a report equal to what
    is stored does not write the row.
    """
    stale: list[str] = []
    # The writes by the columns they change, each group one executemany of a
    # statement built once: an agent's first report (and each full one)
    # carries every node it owns, and one statement built and run per node
    # was a conductor's largest cost at 100k nodes.
    writes: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    with db.writing() as connection:
        # One read of every reported row, not one per report: an agent
        # reports all its nodes every report_interval, and a query per node
        # took 6-8 % of a busy conductor's time.
        current = {
            row.uuid: row
            for start in range(0, len(reports), value_lists.CHUNK)
            for row in connection.execute(
                _CURRENT,
                {"uuids": [r["node_uuid"] for r in reports[start : start + value_lists.CHUNK]]},
            )
        }
        now = utcnow()
        for report in reports:
            row = current.get(report["node_uuid"])
            # holds() below, on the row as read: skips what cannot apply.
            if row is None or row.owner != agent or row.owner_epoch != report["epoch"]:
                stale.append(report["node_uuid"])
                continue
            params: dict[str, Any] = {}
            power, provision = report["power_state"], report["provision_state"]
            if power is not None and power != row.power_state:
                params["new_power_state"] = power
            if provision is not None and provision != row.provision_state:
                params["new_provision_state"] = provision_value(NodeEvent.REPORT, provision)
            if params:
                # The read above only skips what cannot apply; the write
                # carries the fence itself: the row may have changed since.
                columns = tuple(c for c in _COLUMNS if f"new_{c}" in params)
                params.update(
                    node=row.uuid, fence_owner=agent, fence_epoch=report["epoch"], now=now
                )
                writes.setdefault(columns, []).append(params)
        for columns, batch in writes.items():
            connection.execute(_SET_STATES[columns], batch)
    return RecordedStates(stale=stale, changed_at=now if writes else None)


@dataclasses.dataclass(frozen=True, slots=True)
class BackEndState:
    """Changes to one node that its back end's state calls for (see
    :func:`mirror_back_end_states`).

    :ivar provision_state: ``(stored, wanted)``, or ``None`` for no change
    :ivar set_power: whether to store :attr:`power_state` (``None``: unknown)
    :ivar maintenance: ``((stored flag, stored reason), (flag, reason))``
    """

    uuid: str
    provision_state: tuple[ProvisionState, ProvisionState] | None = None
    set_power: bool = False
    power_state: PowerState | None = None
    maintenance: tuple[tuple[bool, str | None], tuple[bool, str | None]] | None = None


@retry_on_dead_connection
def mirror_back_end_states(
    db: Database,
    observed: Sequence[BackEndState],
    *,
    observed_at: datetime.datetime | None = None,
    changed_uuids: set[str] | None = None,
) -> int:
    """Apply what the back end (Ironic) shows of nodes; how many rows changed
    (their uuids added to ``changed_uuids``, when given).

    Three kinds of change, each a compare-and-swap on what the caller read,
    so none can undo a concurrent allocation or an operator's change:

    * ``provision_state`` only of a node hosting nothing in ringfleet, and
      only between the states of an idle node (:attr:`NodeEvent.MIRROR`:
      available, enroll, manageable, cleaning, error): deploying, active and
      deleting belong to the build and teardown flows;
    * ``power_state`` as observed, unless the node changed after
      ``observed_at`` (when the caller's reading of the back end began): an
      action's answer recorded meanwhile is newer than what was read;
    * ``maintenance`` set or cleared with its reason, only when the stored
      flag and reason are still those read (the sync decides, from the
      reason's prefix, whether a maintenance is its own to clear).
    """
    changed = 0
    now = utcnow()
    with db.transaction() as session:
        for item in observed:
            # First: the pass's own writes below make the record newer than
            # observed_at.
            if item.set_power:
                power = item.power_state.value if item.power_state else None
                result = session.execute(
                    update(NodeModel)
                    .where(
                        NodeModel.uuid == item.uuid,
                        NodeModel.power_state.is_distinct_from(power),
                        *(() if observed_at is None else (NodeModel.updated_at <= observed_at,)),
                    )
                    .values(power_state=power, updated_at=now)
                    .execution_options(synchronize_session=False)
                )
                changed += _noted(result, item.uuid, changed_uuids)
            if item.provision_state is not None:
                stored, wanted = item.provision_state
                result = session.execute(
                    update(NodeModel)
                    .where(
                        NodeModel.uuid == item.uuid,
                        NodeModel.instance_uuid.is_(None),
                        # The state read, which the table allows MIRROR from
                        # (provision_value checks it): the guard is exact.
                        NodeModel.provision_state == stored.value,
                    )
                    .values(
                        provision_state=provision_value(NodeEvent.MIRROR, wanted, stored=stored),
                        updated_at=now,
                    )
                    .execution_options(synchronize_session=False)
                )
                changed += _noted(result, item.uuid, changed_uuids)
            if item.maintenance is not None:
                (was, was_reason), (now_on, now_reason) = item.maintenance
                result = session.execute(
                    update(NodeModel)
                    .where(
                        NodeModel.uuid == item.uuid,
                        NodeModel.maintenance == was,
                        NodeModel.maintenance_reason.is_not_distinct_from(was_reason),
                    )
                    .values(maintenance=now_on, maintenance_reason=now_reason, updated_at=now)
                    .execution_options(synchronize_session=False)
                )
                changed += _noted(result, item.uuid, changed_uuids)
    return changed


def _noted(result: Any, uuid: str, changed_uuids: set[str] | None) -> int:
    """How many rows *result* changed; *uuid* noted in ``changed_uuids`` if any."""
    count = int(result.rowcount)
    if count and changed_uuids is not None:
        changed_uuids.add(uuid)
    return count
