# SPDX-License-Identifier: Apache-2.0
"""Power and provision states reported by agents, each fenced by the node's epoch.

Every agent reports the states of every node it owns every
``report_interval``.  A report applies only while the node is still the
agent's at the epoch it sent (:func:`conductor.db.ownership.holds`, in the
``UPDATE`` itself), and only a real change touches the row: periodic
reports of an unchanged fleet must not look like a fleet of changes to the
schedulers' incremental index refresh.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict, cast

from sqlalchemy import Table, Update, bindparam, or_, select, update

from conductor.db import ownership
from conductor.db.engine import Database
from conductor.db.models import NodeModel, utcnow

__all__ = ["StateReport", "record_node_states"]

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


def record_node_states(db: Database, agent: str, reports: Sequence[StateReport]) -> list[str]:
    """Store ``agent``'s reports; the uuids of the nodes it does not hold at that epoch.

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
            for start in range(0, len(reports), ownership.CHUNK)
            for row in connection.execute(
                _CURRENT,
                {"uuids": [r["node_uuid"] for r in reports[start : start + ownership.CHUNK]]},
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
                params["new_provision_state"] = provision
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
    return stale
