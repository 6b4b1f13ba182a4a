# SPDX-License-Identifier: Apache-2.0
"""Which conductor carries each piece of routed work, and the adoption of what nobody carries.

Every build, teardown and instance action in flight names the conductor
whose queue holds it (``instances.conductor``, written by the writes that
put the work in flight: :func:`conductor.db.instances.state_values`), and so
does every node power request (``node_power_requests``).  A conductor that
is gone from the conductors' group carries nothing: its peers adopt its
records — a compare-and-swap on the carrier they read, so one peer wins each
— and drive them on (:mod:`conductor.peers`).  A conductor that stops hands
its records back (carrier ``NULL``) before it leaves the group.
"""

from __future__ import annotations

import datetime
import uuid as uuidlib
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from typing import NamedTuple

from sqlalchemy import ColumnElement, Table, delete, insert, or_, select, true, update

from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.instance_sweeps import IN_FLIGHT_OR_ACTING
from conductor.db.instances import ACTION_IN_FLIGHT
from conductor.db.models import InstanceModel, NodePowerRequestModel, utcnow

__all__ = [
    "PowerRequest",
    "action_request_id",
    "adopt",
    "adopt_power_requests",
    "carried_by",
    "carriers",
    "end_power_request",
    "orphaned",
    "orphaned_power_requests",
    "power_requests_of",
    "release",
    "store_power_request",
]

_INSTANCES: Table = InstanceModel.__table__  # type: ignore[assignment]
_POWER: Table = NodePowerRequestModel.__table__  # type: ignore[assignment]


class PowerRequest(NamedTuple):
    """An operator's node power verb in flight."""

    node_uuid: str
    target: str
    request_id: str
    conductor: str | None
    created_at: datetime.datetime


def _not_live(column: ColumnElement[str | None], live: Collection[str]) -> ColumnElement[bool]:
    """The carrier in *column* is nobody, or a conductor not in *live*."""
    if not live:
        return true()
    return or_(column.is_(None), column.not_in(list(live)))


# -- instances ---------------------------------------------------------------------------


@retry_on_dead_connection
def orphaned(db: Database, live: Collection[str], limit: int = 10_000) -> dict[str, str | None]:
    """Instances with work in flight that no live conductor carries: uuid -> carrier read."""
    query = (
        select(_INSTANCES.c.uuid, _INSTANCES.c.conductor)
        .where(IN_FLIGHT_OR_ACTING, _not_live(_INSTANCES.c.conductor, live))
        .limit(limit)
    )
    with db.read() as connection:
        return {row.uuid: row.conductor for row in connection.execute(query)}


@retry_on_dead_connection
def carried_by(db: Database, conductor: str, limit: int = 10_000) -> list[str]:
    """The instances with work in flight that *conductor* carries (its own after a restart)."""
    query = (
        select(_INSTANCES.c.uuid)
        .where(IN_FLIGHT_OR_ACTING, _INSTANCES.c.conductor == conductor)
        .order_by(_INSTANCES.c.uuid)
        .limit(limit)
    )
    with db.read() as connection:
        return list(connection.scalars(query))


@retry_on_dead_connection
def adopt(db: Database, read: Mapping[str, str | None], conductor: str) -> list[str]:
    """Make *conductor* the carrier of the instances of *read* (uuid -> the
    carrier read) that still have that carrier and work in flight; the ones it won."""
    return _adopt(db, _INSTANCES, _INSTANCES.c.uuid, read, conductor, where=IN_FLIGHT_OR_ACTING)


@retry_on_dead_connection
def release(db: Database, conductor: str) -> int:
    """Hand back every record *conductor* carries (it stops): its peers adopt
    them at once.  How many (instances and node power requests)."""
    with db.writing() as connection:
        released = connection.execute(
            update(_INSTANCES)
            .where(_INSTANCES.c.conductor == conductor, IN_FLIGHT_OR_ACTING)
            .values(conductor=None)
        ).rowcount
        released += connection.execute(
            update(_POWER).where(_POWER.c.conductor == conductor).values(conductor=None)
        ).rowcount
    return int(released)


@retry_on_dead_connection
def carriers(db: Database) -> Counter[str | None]:
    """The records in flight by carrier (``None``: nobody carries them), for ``fleet check``."""
    counts: Counter[str | None] = Counter()
    with db.read() as connection:
        counts.update(connection.scalars(select(_INSTANCES.c.conductor).where(IN_FLIGHT_OR_ACTING)))
        counts.update(connection.scalars(select(_POWER.c.conductor)))
    return counts


@retry_on_dead_connection
def action_request_id(db: Database, instance_uuid: str) -> str | None:
    """The request id of the instance's action in flight (``None`` for one
    stored before request ids, or none in flight)."""
    with db.read() as connection:
        return connection.scalar(
            select(_INSTANCES.c.action_id).where(
                _INSTANCES.c.uuid == instance_uuid,
                _INSTANCES.c.task_state.in_(ACTION_IN_FLIGHT),
            )
        )


# -- node power requests -----------------------------------------------------------------


@retry_on_dead_connection
def store_power_request(db: Database, node_uuid: str, target: str) -> PowerRequest:
    """Store an operator's power verb for *node_uuid*, carried by ``db.carrier``;
    it replaces one still in flight for that node (the last one asked wins)."""
    request = PowerRequest(node_uuid, target, str(uuidlib.uuid4()), db.carrier, utcnow())
    with db.writing() as connection:
        connection.execute(delete(_POWER).where(_POWER.c.node_uuid == node_uuid))
        connection.execute(insert(_POWER).values(request._asdict()))
    return request


@retry_on_dead_connection
def end_power_request(db: Database, request: PowerRequest) -> None:
    """The verb ended (done, or refused for good): forget it, unless a later one replaced it."""
    with db.writing() as connection:
        connection.execute(
            delete(_POWER).where(
                _POWER.c.node_uuid == request.node_uuid,
                _POWER.c.request_id == request.request_id,
            )
        )


@retry_on_dead_connection
def orphaned_power_requests(db: Database, live: Collection[str]) -> dict[str, str | None]:
    """Node power requests no live conductor carries: node uuid -> carrier read."""
    query = select(_POWER.c.node_uuid, _POWER.c.conductor).where(
        _not_live(_POWER.c.conductor, live)
    )
    with db.read() as connection:
        return {row.node_uuid: row.conductor for row in connection.execute(query)}


@retry_on_dead_connection
def adopt_power_requests(
    db: Database, read: Mapping[str, str | None], conductor: str
) -> list[PowerRequest]:
    """Make *conductor* the carrier of the node power requests of *read*
    (node -> the carrier read) that still have it; the requests it won."""
    won = _adopt(db, _POWER, _POWER.c.node_uuid, read, conductor, where=None)
    return power_requests_of(db, won)


@retry_on_dead_connection
def power_requests_of(db: Database, node_uuids: Iterable[str]) -> list[PowerRequest]:
    """The node power requests in flight for these nodes."""
    nodes = list(node_uuids)
    if not nodes:
        return []
    with db.read() as connection:
        rows = connection.execute(select(_POWER).where(_POWER.c.node_uuid.in_(nodes)))
        return [PowerRequest(**row._mapping) for row in rows]


def _adopt(
    db: Database,
    table: Table,
    key: ColumnElement[str],
    read: Mapping[str, str | None],
    conductor: str,
    *,
    where: ColumnElement[bool] | None,
) -> list[str]:
    """The compare-and-swap of an adoption, by carrier read; the keys *conductor* won."""
    by_carrier: dict[str | None, list[str]] = {}
    for record, carrier in read.items():
        by_carrier.setdefault(carrier, []).append(record)
    extra = [where] if where is not None else []
    with db.writing() as connection:
        for carrier, records in by_carrier.items():
            was = table.c.conductor.is_(None) if carrier is None else table.c.conductor == carrier
            connection.execute(
                update(table).where(key.in_(records), was, *extra).values(conductor=conductor)
            )
        won = connection.scalars(
            select(key).where(key.in_(list(read)), table.c.conductor == conductor)
        )
        return sorted(won)
