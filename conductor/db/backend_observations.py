# SPDX-License-Identifier: Apache-2.0
"""What the back end (Ironic) shows of each node, as the inventory sync records it.

The sync (:mod:`conductor.ironic_sync`) stores each node's observation with
the row (``backend_state``, ``backend_instance_uuid``, ``backend_seen_at``)
and reads them back to tell which rows to observe again; ``fleet check``
compares them with ringfleet's records.  :mod:`conductor.db.nodes` writes
the observation of a node it creates and re-exports these names.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table, bindparam, or_, select, update
from sqlalchemy.orm import aliased

from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.models import InstanceModel, NodeModel

__all__ = [
    "BACK_END_COLUMNS",
    "BackEndObservation",
    "StoredObservation",
    "back_end_observations",
    "new_row_values",
    "record_back_end_observations",
]

_NODES: Table = NodeModel.__table__  # type: ignore[assignment]
#: The back end's view of a node (fleet check's alone: never listed nor sent).
BACK_END_COLUMNS = ("backend_state", "backend_instance_uuid", "backend_seen_at")


@dataclasses.dataclass(frozen=True, slots=True)
class BackEndObservation:
    """What the back end (Ironic) shows of one node in a sync pass.

    :ivar state: its raw provision state (Ironic's name, e.g. ``deploy
        failed``); ``None``: the node is not in the back end
    :ivar instance_uuid: the instance that claims it there, if any
    """

    uuid: str
    state: str | None
    instance_uuid: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class StoredObservation:
    """A node's stored back-end observation, and ringfleet's last change to it.

    :ivar seen_at: from when the observation holds (``None``: never observed)
    :ivar changed_at: the latest ``updated_at`` of the node, of the instance
        it hosts and of the instance that claims it in the back end
    """

    state: str | None
    instance_uuid: str | None
    seen_at: datetime.datetime | None
    changed_at: datetime.datetime


def new_row_values(
    observation: BackEndObservation | None, seen_at: datetime.datetime
) -> dict[str, Any]:
    """The back-end columns of a new row (all three, observed or not: one
    multi-row INSERT needs the same keys in every row)."""
    if observation is None:
        return dict.fromkeys(BACK_END_COLUMNS)
    return {
        "backend_state": observation.state,
        "backend_instance_uuid": observation.instance_uuid,
        "backend_seen_at": seen_at,
    }


@retry_on_dead_connection
def back_end_observations(db: Database, *, batch: int = 10000) -> dict[str, StoredObservation]:
    """Every node's stored back-end observation (uuid -> observation).

    With ringfleet's last change to what the observation is compared with
    (the node, the instance it hosts, the instance claiming it in the back
    end), so that the sync can tell which rows to observe again.  Plain
    columns in pages of ``batch`` (two outer joins on the instances'
    unique uuid), no ORM objects.
    """
    node = _NODES.c
    hosted = aliased(InstanceModel)
    claiming = aliased(InstanceModel)
    query = (
        select(
            node.uuid,
            node.backend_state,
            node.backend_instance_uuid,
            node.backend_seen_at,
            node.updated_at,
            hosted.updated_at,
            claiming.updated_at,
        )
        .select_from(_NODES)
        .outerjoin(hosted, hosted.uuid == node.instance_uuid)
        .outerjoin(claiming, claiming.uuid == node.backend_instance_uuid)
        .order_by(node.uuid)
        .limit(batch)
    )
    found: dict[str, StoredObservation] = {}
    marker: str | None = None
    while True:
        page = query if marker is None else query.where(node.uuid > marker)
        with db.read() as connection:
            rows = connection.execute(page).all()
        for uuid, state, claim, seen_at, updated, hosted_at, claiming_at in rows:
            found[uuid] = StoredObservation(
                state=state,
                instance_uuid=claim,
                seen_at=seen_at,
                changed_at=max(t for t in (updated, hosted_at, claiming_at) if t is not None),
            )
        if len(rows) < batch:
            return found
        marker = rows[-1][0]


#: Observations written per statement batch (an executemany).
_OBSERVATION_CHUNK = 1000

_RECORD_OBSERVATION = (
    update(_NODES)
    .where(
        _NODES.c.uuid == bindparam("b_uuid"),
        # An older pass (another conductor's) never overwrites a newer one.
        or_(_NODES.c.backend_seen_at.is_(None), _NODES.c.backend_seen_at < bindparam("b_seen")),
    )
    .values(
        backend_state=bindparam("b_state"),
        backend_instance_uuid=bindparam("b_instance"),
        backend_seen_at=bindparam("b_seen"),
        # Not a change of ringfleet's: the schedulers' index refresh (keyed
        # on updated_at) has nothing to re-read, and fleet check compares
        # the observation with ringfleet's last change.
        updated_at=_NODES.c.updated_at,
    )
)


@retry_on_dead_connection
def record_back_end_observations(
    db: Database, observed: Sequence[BackEndObservation], seen_at: datetime.datetime
) -> int:
    """Store what the back end shows of these nodes, as of ``seen_at``; rows written.

    ``seen_at`` is when the caller began reading the back end: the
    observation is no older than that.  A row holding an observation from a
    later instant keeps it.  ``updated_at`` is left as it is.  Only the rows
    given are written: the caller sends the changed ones (see
    :mod:`conductor.ironic_sync`).
    """
    if not observed:
        return 0
    written = 0
    with db.writing() as connection:
        for start in range(0, len(observed), _OBSERVATION_CHUNK):
            params = [
                {
                    "b_uuid": item.uuid,
                    "b_state": item.state,
                    "b_instance": item.instance_uuid,
                    "b_seen": seen_at,
                }
                for item in observed[start : start + _OBSERVATION_CHUNK]
            ]
            result = connection.execute(_RECORD_OBSERVATION, params)
            if connection.dialect.supports_sane_multi_rowcount:
                written += result.rowcount
            else:
                written += len(params)
    return written
