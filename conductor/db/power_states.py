# SPDX-License-Identifier: Apache-2.0
"""Instances whose state disagrees with their node's power, and the write that follows it.

An idle instance (no task in flight) that is ``active`` on a node recorded
``power off``, or ``stopped`` on one recorded ``power on``, is a *power
mismatch*: its node's power changed outside ringfleet (an operator in
Ironic, a shutdown from inside the OS, a BMC).  :func:`power_mismatches`
finds them in one query; :func:`mark_found_off` applies
:attr:`~conductor.common.instance_states.Event.FOUND_OFF` to one, as a
compare-and-swap (:mod:`conductor.power_sync` decides when).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Collection
from typing import Any

from sqlalchemy import Table, and_, exists, or_, select, update

from conductor.common.clock import shown
from conductor.common.instance_states import Event
from conductor.common.objects import PowerState, VmState
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.fleet_report import count_and_sample
from conductor.db.instances import may_happen, state_values, task_may_happen
from conductor.db.models import InstanceModel, NodeModel, utcnow

__all__ = ["PowerMismatch", "mark_found_off", "power_mismatches"]

_INSTANCES: Table = InstanceModel.__table__  # type: ignore[assignment]

#: The node power each idle instance state disagrees with.
_DISAGREES = {
    VmState.ACTIVE.value: PowerState.OFF.value,
    VmState.STOPPED.value: PowerState.ON.value,
}


@dataclasses.dataclass(frozen=True, slots=True)
class PowerMismatch:
    """An idle instance whose ``vm_state`` disagrees with its node's recorded power.

    :ivar updated_at: when the instance record last changed
    :ivar node_updated_at: when the node record last changed
    """

    instance_uuid: str
    vm_state: str
    node_uuid: str
    owner: str | None
    power_state: str
    updated_at: datetime.datetime
    node_updated_at: datetime.datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance_uuid": self.instance_uuid,
            "vm_state": self.vm_state,
            "node_uuid": self.node_uuid,
            "owner": self.owner,
            "power_state": self.power_state,
            "updated_at": shown(self.updated_at),
            "node_updated_at": shown(self.node_updated_at),
        }


@retry_on_dead_connection
def power_mismatches(
    db: Database,
    *,
    unchanged_since: datetime.datetime | None = None,
    node_unchanged_since: datetime.datetime | None = None,
    node_uuids: Collection[str] | None = None,
    vm_state: VmState | None = None,
    sample: int = 1000,
) -> tuple[int, list[PowerMismatch]]:
    """How many power mismatches there are, and the ``sample`` unchanged for longest.

    ``unchanged_since``: only instances whose record has not changed since
    then; ``node_unchanged_since``: the same for their node's record;
    ``node_uuids``: only on these nodes; ``vm_state``: only instances in
    it.  ``sample`` 0 counts only.
    """
    where = [
        InstanceModel.task_state.is_(None),
        # The node's own claim too: a node record that moved on (a
        # teardown, a takeover in progress) is no statement about this one.
        NodeModel.instance_uuid == InstanceModel.uuid,
        or_(
            *(
                and_(InstanceModel.vm_state == state, NodeModel.power_state == power)
                for state, power in _DISAGREES.items()
                if vm_state is None or state == vm_state.value
            )
        ),
    ]
    if unchanged_since is not None:
        where.append(InstanceModel.updated_at <= unchanged_since)
    if node_unchanged_since is not None:
        where.append(NodeModel.updated_at <= node_unchanged_since)
    if node_uuids is not None:
        if not node_uuids:
            return 0, []
        where.append(NodeModel.uuid.in_(sorted(node_uuids)))
    query = (
        select(
            InstanceModel.uuid,
            InstanceModel.vm_state,
            NodeModel.uuid,
            NodeModel.owner,
            NodeModel.power_state,
            InstanceModel.updated_at,
            NodeModel.updated_at,
        )
        .join(NodeModel, NodeModel.uuid == InstanceModel.node_uuid)
        .where(*where)
        .order_by(InstanceModel.updated_at, InstanceModel.uuid)
    )
    with db.reading() as session:
        total, rows = count_and_sample(session, query, sample)
    return total, [PowerMismatch(*row) for row in rows]


@retry_on_dead_connection
def mark_found_off(
    db: Database, instance_uuid: str, node_uuid: str, *, unchanged_since: datetime.datetime
) -> bool:
    """Apply ``FOUND_OFF`` to the instance: whether it did.

    A compare-and-swap on everything the decision read: the instance is
    still idle and ``active`` (the table's sources), its record unchanged
    since ``unchanged_since`` (no verb, answer or delete landed after the
    power was observed), and its node still holds it and is still
    recorded ``power off``.  A user's ``stop``/``start``/``reboot`` that
    set its task state first wins: this write then changes nothing.
    """
    values = state_values(Event.FOUND_OFF) | {"updated_at": utcnow()}
    task = task_may_happen(_INSTANCES.c.task_state, Event.FOUND_OFF)
    assert task is not None  # the table's row names "no task"
    node_off = exists().where(
        NodeModel.uuid == node_uuid,
        NodeModel.instance_uuid == instance_uuid,
        NodeModel.power_state == PowerState.OFF.value,
    )
    statement = (
        update(_INSTANCES)
        .where(
            _INSTANCES.c.uuid == instance_uuid,
            _INSTANCES.c.node_uuid == node_uuid,
            may_happen(_INSTANCES.c.vm_state, Event.FOUND_OFF),
            task,
            _INSTANCES.c.updated_at <= unchanged_since,
            node_off,
        )
        .values(values)
    )
    with db.writing() as connection:
        return bool(connection.execute(statement).rowcount == 1)
