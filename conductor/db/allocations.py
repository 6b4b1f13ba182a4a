# SPDX-License-Identifier: Apache-2.0
"""Putting an instance on a node, and taking it off, by compare-and-swap.

One instance per node (invariant 7) holds however many conductors race:
the node row is updated only ``WHERE instance_uuid IS NULL`` and both
``nodes.instance_uuid`` and ``instances.node_uuid`` are unique, so the
second of two racing allocations finds the condition false and gets
nothing.  What an agent's report changes is fenced in the same statement
(:func:`conductor.db.ownership.holds`): a report from an owner that lost
the node, however late, changes nothing.
"""

from __future__ import annotations

import datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, exists, update

from conductor.common.instance_states import Event
from conductor.common.objects import Ownership, VmState
from conductor.common.provision_states import Event as NodeEvent
from conductor.db import instance_actions
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.instances import count_attempt, may_happen, state_values
from conductor.db.models import InstanceModel, NodeModel, utcnow
from conductor.db.node_states import provision_guard, provision_value
from conductor.db.ownership import Fence, holds, update_nodes_returning

__all__ = [
    "allocate",
    "complete",
    "deployed_while_deleting",
    "fail_attempt",
    "give_back",
    "release",
]


# Built once: allocation is the hot path of every build, and compiling two
# ORM statements per call cost more than the statements themselves.
# (Table-level statements: a bulk UPDATE through the Session would try to
# synchronize identity maps we do not use.)
_NODES: Table = NodeModel.__table__  # type: ignore[assignment]
_INSTANCES: Table = InstanceModel.__table__  # type: ignore[assignment]
_NODE_IS_FREE = (
    _NODES.c.uuid == bindparam("node"),
    _NODES.c.instance_uuid.is_(None),
    *provision_guard(_NODES.c.provision_state, NodeEvent.ALLOCATE),
    _NODES.c.maintenance.is_(False),
    _NODES.c.owner.is_not(None),
)
_NODE_TAKEN = {
    "instance_uuid": bindparam("instance"),
    "provision_state": provision_value(NodeEvent.ALLOCATE),
    "updated_at": bindparam("now"),
}
_TAKE_NODE = (
    update(_NODES)
    .where(*_NODE_IS_FREE)
    .values(_NODE_TAKEN)
    .returning(_NODES.c.owner, _NODES.c.owner_epoch)
)
_PLACE_INSTANCE = (
    update(_INSTANCES)
    .where(
        _INSTANCES.c.uuid == bindparam("instance"),
        _INSTANCES.c.node_uuid.is_(None),
        may_happen(_INSTANCES.c.vm_state, Event.ALLOCATE),
    )
    .values(
        node_uuid=bindparam("node"),
        host=bindparam("owner"),
        # Spawning from here on: the build is routed next.  Part of the
        # allocation, not a transaction of its own.
        updated_at=bindparam("now"),
        **state_values(Event.ALLOCATE),
    )
)
_COMPLETE_INSTANCE = (
    update(_INSTANCES)
    .where(
        _INSTANCES.c.uuid == bindparam("instance"),
        _INSTANCES.c.node_uuid == bindparam("node"),
        may_happen(_INSTANCES.c.vm_state, Event.DEPLOYED),
    )
    .values(updated_at=bindparam("now"), **state_values(Event.DEPLOYED))
)
# The reporting agent's fence as bind parameters, for statements built once.
_REPORTER = Fence(
    owner=cast(str, bindparam("fence_owner")), epoch=cast(int, bindparam("fence_epoch"))
)
_COMPLETE_NODE_FENCED = (
    update(_NODES)
    .where(
        _NODES.c.uuid == bindparam("node"),
        _NODES.c.instance_uuid == bindparam("instance"),
        holds(_REPORTER),
        *provision_guard(_NODES.c.provision_state, NodeEvent.DEPLOYED),
    )
    .values(
        provision_state=provision_value(NodeEvent.DEPLOYED),
        updated_at=bindparam("now"),
        # A success on the node clears its failures, as Nova's compute does.
        failed_builds=0,
    )
)


def allocate(db: Database, node_uuid: str, instance_uuid: str) -> Ownership | None:
    """Reserve ``node_uuid`` for ``instance_uuid``.

    Succeeds only if the node is available, not in maintenance, hosts
    nothing and has an owner, and the instance is still being built without
    a node.  Returns the node's ownership at that moment (the agent to route
    the build to, and the epoch it must hold), or ``None`` when another
    allocation won or the node no longer qualifies.
    """
    try:
        return _allocate(db, node_uuid, instance_uuid)
    except _LostRace:
        return None


class _LostRace(Exception):
    """Raised inside the transaction so that it rolls back."""


@retry_on_dead_connection
def _allocate(db: Database, node_uuid: str, instance_uuid: str) -> Ownership | None:
    # A bare Connection, not a Session: nothing here needs the ORM, and its
    # per-transaction bookkeeping was a third of the cost.
    with db.writing() as connection:
        # Taken once the transaction holds its lock: an index refresh keyed
        # on updated_at must never see a change stamped before it committed.
        now = utcnow()
        params = {"node": node_uuid, "instance": instance_uuid, "now": now}
        if connection.dialect.update_returning:
            row = connection.execute(_TAKE_NODE, params).first()
        else:  # MySQL, MariaDB: no UPDATE ... RETURNING
            taken = update_nodes_returning(
                connection,
                _NODE_IS_FREE,
                _NODE_TAKEN,
                [_NODES.c.owner, _NODES.c.owner_epoch],
                params,
            )
            row = taken[0] if taken else None
        if row is None:
            return None
        placed = connection.execute(
            _PLACE_INSTANCE,
            {"node": node_uuid, "instance": instance_uuid, "owner": row.owner, "now": now},
        )
        if placed.rowcount != 1:
            # The instance was deleted or placed meanwhile: undo the node half.
            raise _LostRace
        return Ownership(node_uuid=node_uuid, owner=row.owner, epoch=row.owner_epoch, pinned=True)


@retry_on_dead_connection
def give_back(db: Database, node_uuid: str, instance_uuid: str) -> bool:
    """Undo an allocation (:attr:`Event.GIVE_BACK`): the node available again,
    the build waiting for another node.

    The conductor's own decision (the node's owner turned out not to be
    live), so no fence.  False when the instance was not on that node.
    """
    with db.writing() as connection:
        return _take_off(
            connection, node_uuid, instance_uuid, (Event.GIVE_BACK, NodeEvent.GIVE_BACK), fence=None
        )


@retry_on_dead_connection
def release(db: Database, node_uuid: str, instance_uuid: str, *, fence: Fence | None) -> bool:
    """The node is torn down (:attr:`Event.TORN_DOWN`): available, the instance deleted.

    ``fence``: the reporting agent's, when its teardown report causes this;
    ``None`` only for the conductor's own decision (a build no agent was
    ever asked to deploy).  False when the instance was not on that node or
    the fence did not hold: nothing changed.
    """
    with db.writing() as connection:
        return _take_off(
            connection,
            node_uuid,
            instance_uuid,
            (Event.TORN_DOWN, NodeEvent.TORN_DOWN),
            fence=fence,
        )


def _take_off(
    connection: Connection,
    node_uuid: str,
    instance_uuid: str,
    events: tuple[Event, NodeEvent],
    fence: Fence | None,
) -> bool:
    """Free *node_uuid* of *instance_uuid* and apply *events* (the instance's,
    the node's) to each, in one transaction."""
    event, node_event = events
    now = utcnow()
    if not _free_node(connection, node_uuid, instance_uuid, node_event, fence=fence, now=now):
        return False
    on_node = (_INSTANCES.c.uuid == instance_uuid, _INSTANCES.c.node_uuid == node_uuid)
    moved = connection.execute(
        update(_INSTANCES)
        .where(*on_node, may_happen(_INSTANCES.c.vm_state, event))
        .values(updated_at=now, **state_values(event))
    )
    if moved.rowcount == 1:
        instance_actions.finished(connection, instance_uuid, event, now)
    # Off the node whatever its state (a repeated teardown of an instance
    # already in error keeps its error).
    connection.execute(
        update(_INSTANCES).where(*on_node).values(node_uuid=None, host=None, updated_at=now)
    )
    return True


def _free_node(
    connection: Connection,
    node_uuid: str,
    instance_uuid: str,
    event: NodeEvent,
    *,
    fence: Fence | None,
    now: datetime.datetime,
    build_failed: bool = False,
) -> bool:
    """Free *node_uuid* of *instance_uuid* by *event*, if the node still hosts
    it (and *fence* holds, when given); whether it did.  *build_failed*:
    the instance's build failed there, which the node's ``failed_builds``
    counts."""
    fenced = [holds(fence)] if fence is not None else []
    values: dict[str, Any] = {
        "instance_uuid": None,
        "provision_state": provision_value(event),
        "updated_at": now,
    }
    if build_failed:
        values["failed_builds"] = _NODES.c.failed_builds + 1
    freed = connection.execute(
        update(_NODES)
        .where(
            _NODES.c.uuid == node_uuid,
            _NODES.c.instance_uuid == instance_uuid,
            *fenced,
            *provision_guard(_NODES.c.provision_state, event),
        )
        .values(values)
    )
    return bool(freed.rowcount == 1)


@retry_on_dead_connection
def complete(
    db: Database,
    node_uuid: str,
    instance_uuid: str,
    *,
    fence: Fence,
) -> bool:
    """The build on ``node_uuid`` succeeded: instance ACTIVE, node active,
    its ``failed_builds`` back to 0 (as Nova's compute resets it).

    One transaction, conditioned on the instance still building on that node,
    so that it cannot interleave with :func:`fail_attempt` (the sweeper) on
    the same build: exactly one of them takes effect.  It is also fenced by
    the reporting agent's ``fence``: nothing changes unless the node is
    still owned by ``fence.owner`` at ``fence.epoch`` when the transaction
    commits — the fence and the change in one transaction, where a separate
    read of the node would cost one more.  False when nothing changed; the
    caller tells why from the rows if it needs to.
    """
    params: dict[str, Any] = {
        "node": node_uuid,
        "instance": instance_uuid,
        "fence_owner": fence.owner,
        "fence_epoch": fence.epoch,
    }
    try:
        # The instance first, as fail_attempt does: the same lock order on
        # the same build, so the two can only wait for each other, never
        # deadlock.
        with db.writing() as connection:
            params["now"] = utcnow()
            done = connection.execute(_COMPLETE_INSTANCE, params)
            if done.rowcount != 1:
                return False
            fenced = connection.execute(_COMPLETE_NODE_FENCED, params)
            if fenced.rowcount != 1:
                raise _LostRace  # a stale report: roll the instance back
            instance_actions.finished(connection, instance_uuid, Event.DEPLOYED, params["now"])
            return True
    except _LostRace:
        return False


@retry_on_dead_connection
def fail_attempt(
    db: Database,
    node_uuid: str,
    instance_uuid: str,
    fault: str,
    *,
    node_clean: bool,
    fence: Fence | None,
    max_attempts: int,
) -> int | None:
    """The build on ``node_uuid`` failed: count it and free the node.

    In one transaction, conditioned on the instance still building on that
    node: the attempt is counted, its fault appended, the node remembered
    (a reschedule avoids it), its ``failed_builds`` counted (Nova's
    ``BuildFailureWeigher`` and ringfleet's ``FailedBuildsWeigher`` prefer
    nodes with fewer) and freed — ``available`` if it was cleaned,
    ``error`` if its state is unknown (:attr:`NodeEvent.ATTEMPT_FAILED_CLEAN`,
    :attr:`NodeEvent.ATTEMPT_FAILED`) — and the instance rescheduled
    (:attr:`Event.RESCHEDULE`), or failed (:attr:`Event.FAIL`) once this was
    attempt ``max_attempts``.  ``fence``: the reporting agent's
    when its report (a failure, a definitive refusal) causes this; ``None``
    only for the conductor's own decision (the build timed out).  Returns
    the attempts so far, or ``None`` when nothing changed: the build had
    moved on (a success won) or the fence did not hold.
    """
    try:
        with db.writing() as connection:
            now = utcnow()
            attempts = count_attempt(
                connection,
                instance_uuid,
                fault,
                now=now,
                node_uuid=node_uuid,
                max_attempts=max_attempts,
                carrier=db.carrier,
            )
            if attempts is None:
                return None
            event = NodeEvent.ATTEMPT_FAILED_CLEAN if node_clean else NodeEvent.ATTEMPT_FAILED
            freed = _free_node(
                connection, node_uuid, instance_uuid, event, fence=fence, now=now, build_failed=True
            )
            if fence is not None and not freed:
                raise _LostRace  # a stale report: roll the instance back too
            return attempts

    except _LostRace:  # a stale report: the instance's update rolled back too
        return None


@retry_on_dead_connection
def deployed_while_deleting(db: Database, node_uuid: str, instance_uuid: str, fence: Fence) -> bool:
    """A deploy succeeded on an instance deleted meanwhile: the node is ``active``
    (:attr:`NodeEvent.DEPLOYED`).

    The caller then tears it down.  Fenced like every report: False when
    the instance is not being deleted on that node, or the fence did not
    hold.
    """
    with db.writing() as connection:
        marked = connection.execute(
            update(_NODES)
            .where(
                _NODES.c.uuid == node_uuid,
                _NODES.c.instance_uuid == instance_uuid,
                holds(fence),
                exists().where(
                    _INSTANCES.c.uuid == instance_uuid,
                    _INSTANCES.c.node_uuid == node_uuid,
                    _INSTANCES.c.vm_state == VmState.DELETING.value,
                ),
                *provision_guard(_NODES.c.provision_state, NodeEvent.DEPLOYED),
            )
            .values(provision_state=provision_value(NodeEvent.DEPLOYED), updated_at=utcnow())
        )
        return bool(marked.rowcount == 1)
