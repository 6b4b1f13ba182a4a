# SPDX-License-Identifier: Apache-2.0
"""The sweeper's and the workers' reads of instances with work in flight.

Instances with an action in flight, those building, deleting or acting
whose row has not changed since a time, and those in flight on given nodes
or owners: what the last-resort sweeper, the action resumption and the
re-routing after a takeover or an agent's restart look at
(:mod:`conductor.lifecycle`); and the sweeper's mark of progress.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, or_, select, update

from conductor.common.objects import Instance, VmState
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.instances import ACTION_IN_FLIGHT, IN_FLIGHT, to_instance
from conductor.db.models import InstanceModel, NodeModel, utcnow

__all__ = [
    "IN_FLIGHT_OR_ACTING",
    "acting",
    "in_flight_on",
    "in_flight_on_owner",
    "stuck_actions",
    "stuck_builds",
    "stuck_deletes",
    "touch",
]


@retry_on_dead_connection
def acting(db: Database, limit: int = 10_000) -> list[Instance]:
    """Instances with an action (reboot, stop, start, rebuild) in flight."""
    query = (
        select(InstanceModel)
        .where(InstanceModel.task_state.in_(ACTION_IN_FLIGHT))
        .order_by(InstanceModel.uuid)
        .limit(limit)
    )
    with db.reading() as session:
        return [to_instance(r) for r in session.scalars(query)]


def stuck_actions(db: Database, older_than: datetime.datetime, limit: int = 500) -> list[Instance]:
    """Instances whose action (reboot, stop, start, rebuild) has not moved since ``older_than``."""
    return _unchanged_since(db, InstanceModel.task_state.in_(ACTION_IN_FLIGHT), older_than, limit)


def stuck_deletes(db: Database, older_than: datetime.datetime, limit: int = 500) -> list[Instance]:
    """Instances still deleting whose row has not changed since ``older_than``."""
    return _unchanged_since(db, InstanceModel.vm_state == VmState.DELETING.value, older_than, limit)


def stuck_builds(db: Database, older_than: datetime.datetime, limit: int = 500) -> list[Instance]:
    """Instances still building whose row has not changed since ``older_than``."""
    return _unchanged_since(db, InstanceModel.vm_state == VmState.BUILDING.value, older_than, limit)


@retry_on_dead_connection
def _unchanged_since(
    db: Database, which: ColumnElement[bool], older_than: datetime.datetime, limit: int
) -> list[Instance]:
    query = (
        select(InstanceModel)
        .where(which, InstanceModel.updated_at < older_than)
        .order_by(InstanceModel.updated_at)
        .limit(limit)
    )
    with db.reading() as session:
        return [to_instance(r) for r in session.scalars(query)]


@retry_on_dead_connection
def touch(db: Database, instance_uuids: Sequence[str]) -> None:
    """Mark progress on instances (the sweeper's retry counts as one): the
    conductor retrying them carries them from here on."""
    if not instance_uuids:
        return
    values: dict[str, Any] = {"updated_at": utcnow()}
    if db.carrier is not None:
        values["conductor"] = db.carrier
    with db.transaction() as session:
        session.execute(
            update(InstanceModel)
            .where(InstanceModel.uuid.in_(list(instance_uuids)))
            .values(values)
            .execution_options(synchronize_session=False)
        )


#: Work an agent does on an instance: a build, a teardown or an action.
IN_FLIGHT_OR_ACTING = or_(
    InstanceModel.vm_state.in_(IN_FLIGHT), InstanceModel.task_state.in_(ACTION_IN_FLIGHT)
)


@retry_on_dead_connection
def in_flight_on_owner(db: Database, owner: str) -> list[Instance]:
    """Instances building, being deleted or with an action in flight on
    nodes ``owner`` holds (one read)."""
    with db.reading() as session:
        rows = session.scalars(
            select(InstanceModel)
            .join(NodeModel, NodeModel.uuid == InstanceModel.node_uuid)
            .where(NodeModel.owner == owner, IN_FLIGHT_OR_ACTING)
            .order_by(InstanceModel.uuid)
        )
        return [to_instance(r) for r in rows]


@retry_on_dead_connection
def in_flight_on(db: Database, node_uuids: Sequence[str]) -> list[Instance]:
    """Instances building, being deleted or with an action in flight on the
    given nodes (one read)."""
    with db.reading() as session:
        rows = session.scalars(
            select(InstanceModel)
            .where(InstanceModel.node_uuid.in_(list(node_uuids)), IN_FLIGHT_OR_ACTING)
            .order_by(InstanceModel.uuid)
        )
        return [to_instance(r) for r in rows]
