"""Set-based fleet reports: counts per agent and group, and consistency checks.

The operator's ``fleet status``, ``ring show`` and ``fleet check`` read a
fleet of 100,000 nodes: every query here is one grouped (or joined) query
over the whole table, never one query per agent or per node, and returns
counts plus at most ``sample`` example ids.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from sqlalchemy import and_, func, or_, select

from conductor.common.objects import ProvisionState, VmState
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.models import InstanceModel, NodeModel

__all__ = [
    "AllocationMismatch",
    "Orphans",
    "allocation_mismatches",
    "group_owner_counts",
    "in_flight_by_host",
    "orphans",
    "owner_counts",
]

#: instance states that hold work at an agent (a build or a teardown)
_IN_FLIGHT = (VmState.BUILDING.value, VmState.DELETING.value)


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
            .where(InstanceModel.vm_state.in_(_IN_FLIGHT), InstanceModel.host.is_not(None))
            .group_by(InstanceModel.host)
        ).all()
    return {host: int(count) for host, count in rows if host is not None}


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
