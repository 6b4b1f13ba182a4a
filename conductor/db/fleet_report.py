# SPDX-License-Identifier: Apache-2.0
"""Set-based fleet reports: counts per agent and group, and consistency checks.

The operator's ``fleet status``, ``ring show`` and ``fleet check`` read a
fleet of 100,000 nodes: every query here is one grouped (or joined) query
over the whole table, never one query per agent or per node, and returns
counts plus at most ``sample`` example ids.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Collection
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, not_, null, or_, select
from sqlalchemy.orm import Session, aliased

from conductor.common.clock import shown
from conductor.common.objects import ProvisionState, VmState
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.instances import ACTION_IN_FLIGHT, IN_FLIGHT
from conductor.db.models import AgentModel, InstanceModel, NodeModel, utcnow

__all__ = [
    "STUCK_ACTION",
    "AllocationMismatch",
    "BackEndMismatch",
    "Orphans",
    "StateMismatch",
    "StuckWork",
    "allocation_mismatches",
    "back_end_mismatches",
    "count_and_sample",
    "departed_agents",
    "group_owner_counts",
    "in_flight_by_host",
    "orphans",
    "owner_counts",
    "state_mismatches",
    "stuck_work",
]

#: instance states that hold work at an agent (a build or a teardown)
#: a SELECT of any columns
_Query = Select[*tuple[Any, ...]]
#: node provision states that only the build and teardown of an instance set
_BUSY = (
    ProvisionState.DEPLOYING.value,
    ProvisionState.ACTIVE.value,
    ProvisionState.DELETING.value,
)


@retry_on_dead_connection
def owner_counts(db: Database) -> dict[str | None, tuple[int, int]]:
    """Owner (``None``: nobody) -> (nodes owned, nodes pinned by an instance)."""
    with db.reading() as session:
        rows = session.execute(
            select(NodeModel.owner, func.count(), func.count(NodeModel.instance_uuid)).group_by(
                NodeModel.owner
            )
        ).all()
    return {owner: (int(total), int(pinned)) for owner, total, pinned in rows}


@retry_on_dead_connection
def in_flight_by_host(db: Database) -> dict[str, int]:
    """Agent -> instances being built or torn down on its nodes."""
    with db.reading() as session:
        rows = session.execute(
            select(InstanceModel.host, func.count())
            .where(InstanceModel.vm_state.in_(IN_FLIGHT), InstanceModel.host.is_not(None))
            .group_by(InstanceModel.host)
        ).all()
    return {host: int(count) for host, count in rows if host is not None}


@retry_on_dead_connection
def departed_agents(db: Database) -> dict[str, tuple[datetime.datetime, datetime.datetime]]:
    """Agent seen leaving the group -> (last seen, gone since)."""
    with db.reading() as session:
        rows = session.execute(
            select(AgentModel.host, AgentModel.last_seen, AgentModel.gone_since).where(
                AgentModel.gone_since.is_not(None)
            )
        ).all()
    return {host: (last_seen, since) for host, last_seen, since in rows if since is not None}


@retry_on_dead_connection
def group_owner_counts(db: Database) -> dict[str, dict[str | None, int]]:
    """Node group -> owner (``None``: nobody) -> node count."""
    with db.reading() as session:
        rows = session.execute(
            select(NodeModel.node_group, NodeModel.owner, func.count()).group_by(
                NodeModel.node_group, NodeModel.owner
            )
        ).all()
    result: dict[str, dict[str | None, int]] = {}
    for group, owner, count in rows:
        result.setdefault(group, {})[owner] = int(count)
    return result


@dataclasses.dataclass(frozen=True, slots=True)
class Orphans:
    """Nodes without a live owner.

    :ivar dead_owners: owner that is not a live agent -> (nodes, pinned nodes)
    :ivar unowned_schedulable: schedulable nodes (available, not in
        maintenance) with no owner at all
    :ivar samples: up to ``sample`` uuids of unowned schedulable nodes
    """

    dead_owners: dict[str, tuple[int, int]]
    unowned_schedulable: int
    samples: list[str]


@retry_on_dead_connection
def orphans(db: Database, live: Collection[str], sample: int = 10) -> Orphans:
    """Nodes whose owner is not in ``live``, and schedulable nodes with no owner."""
    schedulable_free = and_(
        NodeModel.owner.is_(None),
        NodeModel.provision_state == ProvisionState.AVAILABLE.value,
        NodeModel.maintenance.is_(False),
    )
    with db.reading() as session:
        dead = session.execute(
            select(NodeModel.owner, func.count(), func.count(NodeModel.instance_uuid))
            .where(NodeModel.owner.is_not(None), NodeModel.owner.not_in(list(live)))
            .group_by(NodeModel.owner)
        ).all()
        unowned = session.execute(
            select(func.count()).select_from(NodeModel).where(schedulable_free)
        ).scalar_one()
        samples = session.scalars(
            select(NodeModel.uuid).where(schedulable_free).order_by(NodeModel.uuid).limit(sample)
        ).all()
    return Orphans(
        dead_owners={o: (int(n), int(p)) for o, n, p in dead if o is not None},
        unowned_schedulable=int(unowned),
        samples=list(samples),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationMismatch:
    """A node and an instance whose two halves of an allocation disagree."""

    node_uuid: str | None
    instance_uuid: str | None
    reason: str

    def to_dict(self) -> dict[str, str | None]:
        return {
            "node_uuid": self.node_uuid,
            "instance_uuid": self.instance_uuid,
            "reason": self.reason,
        }


@retry_on_dead_connection
def allocation_mismatches(db: Database, sample: int = 50) -> tuple[int, list[AllocationMismatch]]:
    """Allocations whose node and instance sides disagree: (count, first ``sample``).

    Checked both ways (three joined queries): a node hosting an instance that
    is missing, deleted, or placed on another node; an instance placed on a
    node that is missing or hosts another instance; and a pinned node whose
    instance's host is not the node's owner (a move updates both at once).
    A node can never host two instances (unique column), so any double claim
    shows up as one of these.
    """
    node, inst = NodeModel, InstanceModel
    found: list[AllocationMismatch] = []
    total = 0
    with db.reading() as session:
        node_side = (
            select(node.uuid, node.instance_uuid, inst.uuid, inst.node_uuid, inst.vm_state)
            .outerjoin(inst, inst.uuid == node.instance_uuid)
            .where(
                node.instance_uuid.is_not(None),
                or_(
                    inst.uuid.is_(None),
                    inst.node_uuid.is_(None),
                    inst.node_uuid != node.uuid,
                    inst.vm_state == VmState.DELETED.value,
                ),
            )
            .order_by(node.uuid)
        )
        for n_uuid, n_inst, i_uuid, i_node, i_state in session.execute(node_side):
            total += 1
            if len(found) < sample:
                if not i_uuid:  # outer join: no such instance
                    reason = f"node hosts instance {n_inst}, which does not exist"
                elif i_state == VmState.DELETED.value:
                    reason = f"node hosts instance {n_inst}, which is deleted"
                else:
                    reason = f"node hosts instance {n_inst}, which is placed on {i_node}"
                found.append(AllocationMismatch(n_uuid, n_inst, reason))
        instance_side = (
            select(inst.uuid, inst.node_uuid, node.uuid, node.instance_uuid)
            .outerjoin(node, node.uuid == inst.node_uuid)
            .where(
                inst.node_uuid.is_not(None),
                or_(
                    node.uuid.is_(None),
                    node.instance_uuid.is_(None),
                    node.instance_uuid != inst.uuid,
                ),
            )
            .order_by(inst.uuid)
        )
        for i_uuid, i_node, n_uuid, n_inst in session.execute(instance_side):
            total += 1
            if len(found) < sample:
                if not n_uuid:  # outer join: no such node
                    reason = f"instance is placed on node {i_node}, which does not exist"
                else:
                    hosted = n_inst or "nothing"
                    reason = f"instance is placed on node {i_node}, which hosts {hosted}"
                found.append(AllocationMismatch(i_node, i_uuid, reason))
        hosts = (
            select(node.uuid, inst.uuid, node.owner, inst.host)
            .join(inst, and_(inst.uuid == node.instance_uuid, inst.node_uuid == node.uuid))
            .where(
                or_(
                    inst.host.is_(None),
                    node.owner.is_(None),
                    inst.host != node.owner,
                )
            )
            .order_by(node.uuid)
        )
        for n_uuid, i_uuid, owner, host in session.execute(hosts):
            total += 1
            if len(found) < sample:
                reason = f"instance host is {host}, node owner is {owner}"
                found.append(AllocationMismatch(n_uuid, i_uuid, reason))
    return total, found


@dataclasses.dataclass(frozen=True, slots=True)
class StuckWork:
    """A build or a delete whose instance record has not changed for a while.

    :ivar owner: the owner of the instance's node (``None``: no node yet, or
        a node nobody owns)
    :ivar idle_seconds: how long the record has not changed, at the read
    """

    instance_uuid: str
    vm_state: str
    task_state: str | None
    node_uuid: str | None
    owner: str | None
    updated_at: datetime.datetime
    idle_seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance_uuid": self.instance_uuid,
            "vm_state": self.vm_state,
            "task_state": self.task_state,
            "node_uuid": self.node_uuid,
            "owner": self.owner,
            "updated_at": shown(self.updated_at),
            "idle_seconds": round(self.idle_seconds),
        }


#: :func:`stuck_work`'s key for actions (reboot, stop, start, rebuild) in flight.
STUCK_ACTION = "action"


@retry_on_dead_connection
def stuck_work(
    db: Database, stuck_after: float, sample: int = 50
) -> dict[str, tuple[int, list[StuckWork]]]:
    """Builds, deletes and actions unchanged for longer than ``stuck_after`` seconds.

    ``vm_state`` (``building``, ``deleting``), or ``action`` for a power or
    lifecycle action (an ``active``/``stopped`` instance ``rebooting``...)
    -> (how many, the ``sample`` that have not changed for longest).  One
    query per kind: the count comes with the rows (a window over the whole
    match, before the limit).
    """
    now = utcnow()
    older_than = now - datetime.timedelta(seconds=stuck_after)
    found: dict[str, tuple[int, list[StuckWork]]] = {}
    kinds = {state: InstanceModel.vm_state == state for state in IN_FLIGHT}
    kinds[STUCK_ACTION] = InstanceModel.task_state.in_(ACTION_IN_FLIGHT)
    with db.reading() as session:
        for state, condition in kinds.items():
            query = (
                select(
                    InstanceModel.uuid,
                    InstanceModel.vm_state,
                    InstanceModel.task_state,
                    InstanceModel.node_uuid,
                    NodeModel.owner,
                    InstanceModel.updated_at,
                )
                .outerjoin(NodeModel, NodeModel.uuid == InstanceModel.node_uuid)
                .where(condition, InstanceModel.updated_at < older_than)
                .order_by(InstanceModel.updated_at, InstanceModel.uuid)
            )
            total, rows = count_and_sample(session, query, sample)
            found[state] = (
                total,
                [
                    StuckWork(
                        instance_uuid=uuid,
                        vm_state=vm_state,
                        task_state=task_state,
                        node_uuid=node_uuid,
                        owner=owner,
                        updated_at=updated_at,
                        idle_seconds=(now - updated_at).total_seconds(),
                    )
                    for uuid, vm_state, task_state, node_uuid, owner, updated_at in rows
                ],
            )
    return found


@dataclasses.dataclass(frozen=True, slots=True)
class StateMismatch:
    """A node whose stored state disagrees with the instance it hosts (or not)."""

    node_uuid: str
    instance_uuid: str | None
    owner: str | None
    provision_state: str
    vm_state: str | None
    reason: str

    def to_dict(self) -> dict[str, str | None]:
        return {
            "node_uuid": self.node_uuid,
            "instance_uuid": self.instance_uuid,
            "owner": self.owner,
            "provision_state": self.provision_state,
            "vm_state": self.vm_state,
            "reason": self.reason,
        }


@retry_on_dead_connection
def state_mismatches(
    db: Database, retired_reason: str | None = None, sample: int = 50
) -> tuple[int, list[StateMismatch]]:
    """Nodes whose stored state and instance disagree: (count, first ``sample``).

    What the records alone can show (three joined queries), for nodes whose
    allocation itself is sound (:func:`allocation_mismatches` reports the
    others): an ACTIVE instance on a node whose provision state is not
    ``active``; a node hosting no instance in a state only a build or a
    teardown sets (deploying, active, deleting); and, with
    ``retired_reason``, a node retired with that maintenance reason (gone
    from its back end) that still hosts an instance.
    """
    node, inst = NodeModel, InstanceModel
    columns = (node.uuid, inst.uuid, node.owner, node.provision_state, inst.vm_state)
    allocated = and_(inst.uuid == node.instance_uuid, inst.node_uuid == node.uuid)
    checks: list[tuple[_Query, str]] = [
        (
            select(*columns)
            .join(inst, allocated)
            .where(
                inst.vm_state == VmState.ACTIVE.value,
                node.provision_state != ProvisionState.ACTIVE.value,
            ),
            "instance {instance} is active, its node is {state}",
        ),
        (
            select(node.uuid, null(), node.owner, node.provision_state, null()).where(
                node.instance_uuid.is_(None), node.provision_state.in_(_BUSY)
            ),
            "node is {state} but hosts no instance",
        ),
    ]
    if retired_reason is not None:
        checks.append(
            (
                select(*columns)
                .outerjoin(inst, inst.uuid == node.instance_uuid)
                .where(
                    node.instance_uuid.is_not(None),
                    node.maintenance.is_(True),
                    node.maintenance_reason == retired_reason,
                ),
                "node is retired ({retired}) but hosts instance {instance} ({vm_state})",
            )
        )
    total = 0
    found: list[StateMismatch] = []
    with db.reading() as session:
        for query, reason in checks:
            count, rows = count_and_sample(
                session, query.order_by(node.uuid), max(sample - len(found), 0)
            )
            total += count
            found.extend(
                StateMismatch(
                    node_uuid=n_uuid,
                    instance_uuid=i_uuid,
                    owner=owner,
                    provision_state=state,
                    vm_state=vm_state,
                    reason=reason.format(
                        instance=i_uuid, state=state, vm_state=vm_state, retired=retired_reason
                    ),
                )
                for n_uuid, i_uuid, owner, state, vm_state in rows
            )
    return total, found


@dataclasses.dataclass(frozen=True, slots=True)
class BackEndMismatch:
    """A node whose back end (Ironic) disagrees with ringfleet's records.

    :ivar instance_uuid: the instance ringfleet has on the node (or ``None``)
    :ivar vm_state: that instance's state (``None``: no instance, or one
        missing from the instances)
    :ivar provision_state: the node's provision state in ringfleet
    :ivar backend_state: the back end's raw provision state
    :ivar backend_instance_uuid: the instance claiming the node in the back end
    :ivar backend_seen_at: from when the back end has shown this (the sync)
    :ivar claimant_state: the claiming instance's state in ringfleet, if
        ringfleet has it and it is not the node's
    :ivar claimant_node: the node ringfleet placed that instance on
    :ivar reason: one of :data:`ORPHAN_CLAIM`, :data:`NOT_DEPLOYED`,
        :data:`OUT_OF_SERVICE`
    """

    node_uuid: str
    owner: str | None
    instance_uuid: str | None
    vm_state: str | None
    provision_state: str
    backend_state: str
    backend_instance_uuid: str | None
    backend_seen_at: datetime.datetime
    claimant_state: str | None
    claimant_node: str | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "node_uuid": self.node_uuid,
            "owner": self.owner,
            "instance_uuid": self.instance_uuid,
            "vm_state": self.vm_state,
            "provision_state": self.provision_state,
            "backend_state": self.backend_state,
            "backend_instance_uuid": self.backend_instance_uuid,
            "backend_seen_at": shown(self.backend_seen_at),
            "reason": self.reason,
        }


#: :attr:`BackEndMismatch.reason`: the back end's claim is not ringfleet's instance on the node
ORPHAN_CLAIM = "orphan-claim"
#: ... an ACTIVE instance whose node the back end does not show deployed with it
NOT_DEPLOYED = "not-deployed"
#: ... a node hosting nothing that the back end shows failed
OUT_OF_SERVICE = "out-of-service"


@retry_on_dead_connection
def back_end_mismatches(
    db: Database,
    *,
    active_state: str,
    failed_states: Collection[str],
    retired_reason: str | None = None,
    sample: int = 50,
) -> tuple[int, list[BackEndMismatch]]:
    """Nodes whose back-end observation disagrees with ringfleet: (count, first ``sample``).

    The observation is what the inventory sync recorded
    (``nodes.backend_*``); nodes without one (never observed, gone from
    the back end) are not compared.  Nor is a node when ringfleet changed
    it, the instance it hosts or the instance claiming it in the back end
    after the observation (``updated_at`` newer than ``backend_seen_at``):
    work in progress (a build deploying, a delete tearing down) is never
    caught half-way, and the next sync pass dates the observation anew.
    One line per node, the first that applies:

    * :data:`ORPHAN_CLAIM`: the back end shows the node claimed by an
      instance that ringfleet does not have on that node (it has none
      there, or another);
    * :data:`NOT_DEPLOYED`: an ACTIVE instance whose node the back end
      shows in another state than ``active_state``, or not claimed by it;
    * :data:`OUT_OF_SERVICE`: a node hosting nothing, unclaimed, that the
      back end shows in one of ``failed_states``.

    Nodes whose records already disagree with each other are left to
    :func:`state_mismatches` (an ACTIVE instance on a node not active, a
    busy node hosting nothing, a retired node): one problem per node.  One
    query (two outer joins on the instances' unique uuid) returning its
    count with its first rows.
    """
    node = NodeModel
    hosted = aliased(InstanceModel)
    claimant = aliased(InstanceModel)
    seen = node.backend_seen_at
    orphan_claim, not_deployed, out_of_service = _back_end_conditions(
        hosted, active_state=active_state, failed_states=failed_states
    )
    inconsistent = _left_to_state_mismatches(hosted, retired_reason)
    query = (
        select(
            node.uuid,
            node.owner,
            node.instance_uuid,
            hosted.vm_state,
            node.provision_state,
            node.backend_state,
            node.backend_instance_uuid,
            seen,
            claimant.vm_state,
            claimant.node_uuid,
        )
        .outerjoin(hosted, hosted.uuid == node.instance_uuid)
        .outerjoin(claimant, claimant.uuid == node.backend_instance_uuid)
        .where(
            node.backend_state.is_not(None),
            seen.is_not(None),
            # Observed no earlier than ringfleet's last change (equal: the
            # sync created the row with its observation).
            seen >= node.updated_at,
            or_(hosted.uuid.is_(None), seen >= hosted.updated_at),
            or_(claimant.uuid.is_(None), seen >= claimant.updated_at),
            or_(orphan_claim, not_deployed, out_of_service),
            *(not_(condition) for condition in inconsistent),
        )
        .order_by(node.uuid)
    )
    with db.reading() as session:
        total, rows = count_and_sample(session, query, sample)
    return total, [_back_end_mismatch(row) for row in rows]


def _back_end_conditions(
    hosted: type[InstanceModel], *, active_state: str, failed_states: Collection[str]
) -> tuple[ColumnElement[bool], ColumnElement[bool], ColumnElement[bool]]:
    """The conditions of :data:`ORPHAN_CLAIM`, :data:`NOT_DEPLOYED` and
    :data:`OUT_OF_SERVICE` (see :func:`back_end_mismatches`), on a node and
    ``hosted``, the instance it hosts."""
    node = NodeModel
    orphan_claim = and_(
        node.backend_instance_uuid.is_not(None),
        or_(node.instance_uuid.is_(None), node.instance_uuid != node.backend_instance_uuid),
    )
    not_deployed = and_(
        hosted.vm_state == VmState.ACTIVE.value,
        or_(
            node.backend_state != active_state,
            node.backend_instance_uuid.is_(None),
            node.backend_instance_uuid != node.instance_uuid,
        ),
    )
    out_of_service = and_(
        node.instance_uuid.is_(None),
        node.backend_instance_uuid.is_(None),
        node.backend_state.in_(list(failed_states)),
    )
    return orphan_claim, not_deployed, out_of_service


def _left_to_state_mismatches(
    hosted: type[InstanceModel], retired_reason: str | None
) -> list[ColumnElement[bool]]:
    """The disagreements of a node's records with each other (on a node and
    ``hosted``, the instance it hosts) that :func:`state_mismatches` reports:
    :func:`back_end_mismatches` leaves them to it."""
    node = NodeModel
    # (Each never NULL, or its NOT would be NULL too and drop the row:
    # guarded with IS NOT NULL.)
    inconsistent = [
        and_(
            hosted.vm_state.is_not(None),
            hosted.vm_state == VmState.ACTIVE.value,
            node.provision_state != ProvisionState.ACTIVE.value,
        ),
        and_(node.instance_uuid.is_(None), node.provision_state.in_(_BUSY)),
    ]
    if retired_reason is not None:
        inconsistent.append(
            and_(
                node.maintenance.is_(True),
                node.maintenance_reason.is_not(None),
                node.maintenance_reason == retired_reason,
            )
        )
    return inconsistent


def _back_end_mismatch(row: tuple[Any, ...]) -> BackEndMismatch:
    """One row of :func:`back_end_mismatches`' query, with the first reason that applies."""
    uuid, owner, instance, vm_state, provision, state, claim, seen_at, c_state, c_node = row
    if claim is not None and claim != instance:
        reason = ORPHAN_CLAIM
    elif vm_state == VmState.ACTIVE.value:
        reason = NOT_DEPLOYED
    else:
        reason = OUT_OF_SERVICE
    return BackEndMismatch(
        node_uuid=uuid,
        owner=owner,
        instance_uuid=instance,
        vm_state=vm_state,
        provision_state=provision,
        backend_state=state,
        backend_instance_uuid=claim,
        backend_seen_at=seen_at,
        claimant_state=c_state if claim != instance else None,
        claimant_node=c_node if claim != instance else None,
        reason=reason,
    )


def count_and_sample(
    session: Session, query: _Query, sample: int
) -> tuple[int, list[tuple[Any, ...]]]:
    """How many rows ``query`` matches, and its first ``sample`` rows.

    One round trip: ``count(*) OVER ()`` is computed over the whole match
    before the limit applies.  (With ``sample`` 0, a plain count.)
    """
    if sample <= 0:
        counted = select(func.count()).select_from(query.order_by(None).subquery())
        return int(session.execute(counted).scalar_one()), []
    rows = session.execute(query.add_columns(func.count().over()).limit(sample)).all()
    if not rows:
        return 0, []
    return int(rows[0][-1]), [tuple(row[:-1]) for row in rows]
