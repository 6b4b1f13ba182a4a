# SPDX-License-Identifier: Apache-2.0
"""The sweeper's and the workers' reads of instances whose work has not moved.

Instances with an action in flight, and those building, deleting or acting
whose row has not changed since a time: what the last-resort sweeper and the
action resumption look at (:mod:`conductor.lifecycle`).
"""

from __future__ import annotations

import datetime

from sqlalchemy import ColumnElement, select

from conductor.common.objects import Instance, VmState
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.instances import ACTION_IN_FLIGHT, to_instance
from conductor.db.models import InstanceModel

__all__ = ["acting", "stuck_actions", "stuck_builds", "stuck_deletes"]


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
