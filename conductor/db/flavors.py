# SPDX-License-Identifier: Apache-2.0
"""Flavor queries: create, read, list, delete."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, Table, bindparam, delete, select
from sqlalchemy.exc import IntegrityError

from conductor.common.exception import Conflict, DuplicateFlavor, FlavorNotFound
from conductor.common.objects import Flavor, VmState
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.models import FlavorModel, InstanceModel
from conductor.validation import FlavorSpec

__all__ = [
    "FLAVOR_BY_NAME",
    "create_flavor",
    "delete_flavor",
    "flavor_named",
    "get_flavor",
    "list_flavors",
    "to_flavor",
]

_FLAVORS: Table = FlavorModel.__table__  # type: ignore[assignment]
# Built once: every build request and every build reads its flavor.
FLAVOR_BY_NAME = select(_FLAVORS).where(_FLAVORS.c.name == bindparam("name"))


def to_flavor(row: FlavorModel | Row[Any]) -> Flavor:
    return Flavor(
        name=row.name,
        resource_class=row.resource_class,
        required_traits=frozenset(row.required_traits or ()),
        forbidden_traits=frozenset(row.forbidden_traits or ()),
        extra_specs=dict(row.extra_specs or {}),
        created_at=row.created_at,
        default_image=row.default_image,
    )


@retry_on_dead_connection
def create_flavor(db: Database, spec: FlavorSpec) -> Flavor:
    """Store a validated flavor.

    :raises DuplicateFlavor: when the name is taken.
    """
    try:
        with db.transaction() as session:
            if session.scalars(select(FlavorModel).where(FlavorModel.name == spec.name)).first():
                raise DuplicateFlavor(field="name", value=spec.name)
            session.add(
                FlavorModel(
                    name=spec.name,
                    resource_class=spec.resource_class,
                    required_traits=sorted(spec.required_traits),
                    forbidden_traits=sorted(spec.forbidden_traits),
                    extra_specs=dict(spec.extra_specs),
                    default_image=None if spec.default_image is None else dict(spec.default_image),
                )
            )
    except IntegrityError:
        raise DuplicateFlavor(field="name", value=spec.name) from None
    return get_flavor(db, spec.name)


@retry_on_dead_connection
def get_flavor(db: Database, name: str) -> Flavor:
    """:raises FlavorNotFound:"""
    with db.read() as connection:
        return flavor_named(connection, name)


def flavor_named(connection: Connection, name: str) -> Flavor:
    """The flavor *name*, read in the caller's transaction.

    :raises FlavorNotFound:
    """
    row = connection.execute(FLAVOR_BY_NAME, {"name": name}).first()
    if row is None:
        raise FlavorNotFound(name)
    return to_flavor(row)


@retry_on_dead_connection
def list_flavors(db: Database) -> list[Flavor]:
    with db.transaction() as session:
        return [
            to_flavor(r) for r in session.scalars(select(FlavorModel).order_by(FlavorModel.name))
        ]


@retry_on_dead_connection
def delete_flavor(db: Database, name: str) -> None:
    """Delete a flavor no live instance uses.

    :raises FlavorNotFound:
    :raises Conflict: when instances (not deleted) still use it.
    """
    with db.transaction() as session:
        in_use = session.scalars(
            select(InstanceModel.uuid).where(
                InstanceModel.flavor == name, InstanceModel.vm_state != VmState.DELETED.value
            )
        ).first()
        if in_use is not None:
            raise Conflict(field="name", value=name, reason=f"flavor is used by instance {in_use}")
        result = session.execute(delete(FlavorModel).where(FlavorModel.name == name))
        if result.rowcount == 0:  # type: ignore[attr-defined]
            raise FlavorNotFound(name)
