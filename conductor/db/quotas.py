# SPDX-License-Identifier: Apache-2.0
"""Quotas: a project's limits, its usage, and the check a build makes.

Usage is counted from ``instances``, never stored (no usage row to drift
from the truth): instances that are not ``deleted``, and per resource class
those of flavors of that class (one node each).

**Race safety** (invariant 12).  A build of a limited project runs, in its
one transaction: read the limits; update the project's ``quota_projects``
row (a row lock on PostgreSQL and InnoDB, held to the commit; SQLite's
``BEGIN IMMEDIATE`` already serializes every writer); count the usage;
refuse, or insert the instances; commit.  Two builds of one project, on any
conductors, thus count one after the other, and the second counts the
first's instances: the engine runs MySQL/MariaDB at READ COMMITTED like
PostgreSQL, so a statement after the lock sees every commit before it
(:mod:`conductor.db.engine`).  A project's first build finds no row to lock:
it rolls back, creates the row in a transaction of its own (a concurrent
creation is an ``IntegrityError`` and ignored) and starts again.

A project none of whose limits for the build is set (``-1`` by default and
no override) takes no lock: its builds are not serialized.

**Key pairs** (``key_pairs``) count per user, as Nova's: the limit is the
project's (its own, else ``[quota] key_pairs``, 100 as Nova's), the usage
the user's key pairs (a user's keys are theirs in every project).  A
creation under a limit locks the user's ``quota_users`` row the same way
(:func:`lock_user`, :func:`add_user`), so that two creations of one user,
in any projects and on any conductors, count one after the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Column, Connection, Table, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from conductor.common.exception import QuotaExceeded
from conductor.common.objects import VmState
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.models import (
    FlavorModel,
    InstanceModel,
    QuotaLimitModel,
    QuotaProjectModel,
    QuotaUserModel,
    utcnow,
)

__all__ = [
    "INSTANCES",
    "KEY_PAIRS",
    "RESOURCE_CLASS_PREFIX",
    "UNLIMITED",
    "Defaults",
    "NoLockRow",
    "add_project",
    "add_user",
    "check",
    "delete_limits",
    "get_limits",
    "limits_of",
    "list_limits",
    "lock_project",
    "lock_user",
    "resource_classes",
    "set_limits",
    "usage",
]

INSTANCES = "instances"
#: Key pairs per user (Nova's ``key_pairs`` quota; its default is 100).
KEY_PAIRS = "key_pairs"
RESOURCE_CLASS_PREFIX = "resource_class:"
UNLIMITED = -1

_LIMITS: Table = QuotaLimitModel.__table__  # type: ignore[assignment]
_PROJECTS: Table = QuotaProjectModel.__table__  # type: ignore[assignment]
_USERS: Table = QuotaUserModel.__table__  # type: ignore[assignment]
_INSTANCES: Table = InstanceModel.__table__  # type: ignore[assignment]
_FLAVORS: Table = FlavorModel.__table__  # type: ignore[assignment]


@dataclasses.dataclass(frozen=True)
class Defaults:
    """``[quota]``: the limits of a project without its own."""

    instances: int = UNLIMITED
    nodes: int = UNLIMITED
    resource_class_nodes: Mapping[str, int] = dataclasses.field(default_factory=dict)
    key_pairs: int = 100

    def limit(self, resource: str) -> int:
        if resource == INSTANCES:
            return self.instances
        if resource == KEY_PAIRS:
            return self.key_pairs
        resource_class = resource.removeprefix(RESOURCE_CLASS_PREFIX)
        return int(self.resource_class_nodes.get(resource_class, self.nodes))


class NoLockRow(Exception):
    """The project (or user) has no lock row yet (:func:`add_project`,
    :func:`add_user` it); ``project_id`` is the user's id for a user's row."""

    def __init__(self, project_id: str) -> None:
        super().__init__(project_id)
        self.project_id = project_id


def lock_project(connection: Connection, project_id: str) -> None:
    """Take the project's quota lock (its builds), until the transaction ends.

    :raises NoLockRow: the project has no row yet; roll back, then
        :func:`add_project` and start again.
    """
    _lock_row(connection, _PROJECTS.c.project_id, _PROJECTS.c.builds, project_id)


@retry_on_dead_connection
def add_project(db: Database, project_id: str) -> None:
    """Create the project's lock row (a concurrent creation is as good)."""
    _add_row(db, _PROJECTS.c.project_id, _PROJECTS.c.builds, project_id)


def lock_user(connection: Connection, user_id: str) -> None:
    """Take the user's quota lock (their key pair creations), until the
    transaction ends.

    :raises NoLockRow: the user has no row yet; roll back, then
        :func:`add_user` and start again.
    """
    _lock_row(connection, _USERS.c.user_id, _USERS.c.key_pair_creates, user_id)


@retry_on_dead_connection
def add_user(db: Database, user_id: str) -> None:
    """Create the user's lock row (a concurrent creation is as good)."""
    _add_row(db, _USERS.c.user_id, _USERS.c.key_pair_creates, user_id)


def _lock_row(connection: Connection, key: Column[Any], counter: Column[Any], value: str) -> None:
    """Lock ``key``'s row by an update of its ``counter``: a row lock on
    PostgreSQL and MariaDB, the database's write lock on SQLite, which has
    no ``SELECT ... FOR UPDATE``."""
    result = connection.execute(
        update(key.table).where(key == value).values({counter.key: counter + 1})
    )
    if result.rowcount != 1:
        raise NoLockRow(value)


def _add_row(db: Database, key: Column[Any], counter: Column[Any], value: str) -> None:
    try:
        with db.writing() as connection:
            connection.execute(insert(key.table).values({key.key: value, counter.key: 0}))
    except IntegrityError:
        pass


def limits_of(
    connection: Connection, project_id: str, resources: Iterable[str], defaults: Defaults
) -> dict[str, int]:
    """The project's limit of each resource: its own, else the default."""
    wanted = list(resources)
    own = {
        row.resource: row.hard_limit
        for row in connection.execute(
            select(_LIMITS.c.resource, _LIMITS.c.hard_limit).where(
                _LIMITS.c.project_id == project_id, _LIMITS.c.resource.in_(wanted)
            )
        )
    }
    return {r: int(own[r]) if r in own else defaults.limit(r) for r in wanted}


def usage(connection: Connection, project_id: str) -> dict[str, int]:
    """What the project uses: ``instances`` and ``resource_class:<class>`` counts."""
    rows = connection.execute(
        select(_FLAVORS.c.resource_class, func.count())
        .select_from(_INSTANCES.outerjoin(_FLAVORS, _FLAVORS.c.name == _INSTANCES.c.flavor))
        .where(
            _INSTANCES.c.project_id == project_id,
            _INSTANCES.c.vm_state != VmState.DELETED.value,
        )
        .group_by(_FLAVORS.c.resource_class)
    ).all()
    used = {INSTANCES: sum(int(count) for _rc, count in rows)}
    for resource_class, count in rows:
        if resource_class is not None:
            used[RESOURCE_CLASS_PREFIX + resource_class] = int(count)
    return used


def check(
    connection: Connection,
    project_id: str,
    resource_class: str,
    count: int,
    defaults: Defaults,
) -> None:
    """Refuse a build of ``count`` instances of ``resource_class`` over a quota.

    Call it in the build's transaction, before its insert: when a limit
    applies, it takes the project's lock (:func:`lock_project`) and counts
    under it, so the insert that follows in the same transaction cannot race
    another build of the project.

    :raises QuotaExceeded: naming the first quota exceeded, its limit and usage.
    :raises NoLockRow: see :func:`lock_project`.
    """
    resources = (INSTANCES, RESOURCE_CLASS_PREFIX + resource_class)
    limits = limits_of(connection, project_id, resources, defaults)
    if all(limits[r] == UNLIMITED for r in resources):
        return
    lock_project(connection, project_id)
    # Read again under the lock: an admin's change committed meanwhile counts.
    limits = limits_of(connection, project_id, resources, defaults)
    used = usage(connection, project_id)
    for resource in resources:
        limit, in_use = limits[resource], used.get(resource, 0)
        if limit != UNLIMITED and in_use + count > limit:
            raise QuotaExceeded(resource=resource, requested=count, used=in_use, limit=limit)


@retry_on_dead_connection
def get_limits(db: Database, project_id: str) -> tuple[dict[str, int], dict[str, int]]:
    """The project's own limits and its usage, in one read."""
    with db.read() as connection:
        own = {
            row.resource: int(row.hard_limit)
            for row in connection.execute(
                select(_LIMITS.c.resource, _LIMITS.c.hard_limit).where(
                    _LIMITS.c.project_id == project_id
                )
            )
        }
        return own, usage(connection, project_id)


@retry_on_dead_connection
def resource_classes(db: Database) -> list[str]:
    """The resource classes of the flavors (what a project may have a quota of)."""
    with db.read() as connection:
        return sorted(
            row[0] for row in connection.execute(select(_FLAVORS.c.resource_class).distinct())
        )


@retry_on_dead_connection
def list_limits(db: Database) -> dict[str, dict[str, int]]:
    """Every project that has limits of its own, with them."""
    projects: dict[str, dict[str, int]] = {}
    with db.read() as connection:
        for row in connection.execute(
            select(_LIMITS.c.project_id, _LIMITS.c.resource, _LIMITS.c.hard_limit).order_by(
                _LIMITS.c.project_id, _LIMITS.c.resource
            )
        ):
            projects.setdefault(row.project_id, {})[row.resource] = int(row.hard_limit)
    return projects


@retry_on_dead_connection
def set_limits(db: Database, project_id: str, limits: Mapping[str, int]) -> dict[str, int]:
    """Set some of a project's own limits (the others are kept), in one
    transaction; the project's own limits after it."""
    try:
        with db.writing() as connection:
            now = utcnow()
            for resource, limit in sorted(limits.items()):
                changed = connection.execute(
                    update(_LIMITS)
                    .where(_LIMITS.c.project_id == project_id, _LIMITS.c.resource == resource)
                    .values(hard_limit=limit, updated_at=now)
                )
                if changed.rowcount == 0:
                    connection.execute(
                        insert(_LIMITS).values(
                            project_id=project_id,
                            resource=resource,
                            hard_limit=limit,
                            created_at=now,
                            updated_at=now,
                        )
                    )
    except IntegrityError:
        # Another admin inserted the same limit meanwhile: it exists now,
        # the update path takes it.
        return set_limits(db, project_id, limits)
    own, _used = get_limits(db, project_id)
    return own


@retry_on_dead_connection
def delete_limits(db: Database, project_id: str, resources: Iterable[str] | None = None) -> int:
    """Drop a project's own limits (all, or ``resources``): the defaults apply
    again.  How many were dropped."""
    statement = delete(_LIMITS).where(_LIMITS.c.project_id == project_id)
    if resources is not None:
        statement = statement.where(_LIMITS.c.resource.in_(list(resources)))
    with db.writing() as connection:
        return int(connection.execute(statement).rowcount)
