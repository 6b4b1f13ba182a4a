# SPDX-License-Identifier: Apache-2.0
"""Node inventory queries: create, import, read, list, maintenance.

Ownership columns are not written here (see :mod:`conductor.db.ownership`),
nor the instance a node hosts (see :mod:`conductor.db.allocations`), nor
its states as observed (see :mod:`conductor.db.node_states`, whose
:class:`BackEndState` and :func:`mirror_back_end_states` are also here), nor
what the back end shows of it (see :mod:`conductor.db.backend_observations`,
whose names are also here).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Table,
    Text,
    cast,
    delete,
    exists,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from conductor.common.clock import shown
from conductor.common.exception import DuplicateNode, FieldError, InvalidInput, NodeNotFound
from conductor.common.objects import Node, PowerState, ProvisionState, VmState
from conductor.common.provision_states import Event as NodeEvent
from conductor.db import bulk, node_writes, value_lists
from conductor.db.backend_observations import (
    BACK_END_COLUMNS,
    BackEndObservation,
    StoredObservation,
    back_end_observations,
    new_row_values,
    record_back_end_observations,
)
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.models import InstanceModel, NodeModel, utcnow
from conductor.db.node_states import BackEndState, mirror_back_end_states, provision_value
from conductor.validation import MAX_TRAITS, NodeSpec, NodeUpdate
from conductor.validation.capabilities import stored_capabilities
from hashring.ring import node_position

__all__ = [
    "BackEndObservation",
    "BackEndState",
    "OrphanClaim",
    "StoredObservation",
    "back_end_observations",
    "changed_since",
    "count_nodes",
    "create_nodes",
    "delete_node",
    "get_node",
    "get_nodes",
    "insert_nodes",
    "iter_nodes",
    "list_node_dicts",
    "list_nodes",
    "mirror_back_end_states",
    "record_back_end_observations",
    "repairable_orphans",
    "set_maintenance",
    "to_node",
    "update_node",
]

_NODES: Table = NodeModel.__table__  # type: ignore[assignment]
# list_node_dicts: JSON columns as text, decoded once per distinct text
_LIST_COLUMNS = (
    *(
        column
        for column in _NODES.columns
        if column.name not in ("traits", "properties", *BACK_END_COLUMNS)
    ),
    cast(_NODES.c.traits, Text).label("traits_text"),
    cast(_NODES.c.properties, Text).label("properties_text"),
)


def _capabilities(properties: Mapping[str, Any] | None) -> dict[str, str]:
    """``properties["capabilities"]`` ("k1:v1,k2:v2") parsed."""
    return stored_capabilities((properties or {}).get("capabilities"))


def to_node(row: NodeModel) -> Node:
    """The data object of a row (capabilities parsed from the properties)."""
    return Node(
        uuid=row.uuid,
        name=row.name,
        resource_class=row.resource_class,
        traits=frozenset(row.traits or ()),
        properties=dict(row.properties or {}),
        capabilities=_capabilities(row.properties),
        group=row.node_group,
        provision_state=ProvisionState(row.provision_state),
        power_state=PowerState(row.power_state) if row.power_state else None,
        maintenance=row.maintenance,
        maintenance_reason=row.maintenance_reason,
        owner=row.owner,
        owner_epoch=row.owner_epoch,
        instance_uuid=row.instance_uuid,
        created_at=row.created_at,
        updated_at=row.updated_at,
        failed_builds=row.failed_builds,
    )


def create_nodes(
    db: Database,
    specs: Sequence[NodeSpec],
    *,
    observed: Mapping[str, BackEndObservation] | None = None,
) -> list[Node]:
    """Insert validated nodes, all or none (:func:`insert_nodes`); the nodes.

    They are built from the specs: every column is known before the insert,
    so reading the rows back (half the cost of a large import) would tell
    nothing new.

    :raises DuplicateNode: when a name or uuid exists already (nothing is
        inserted); its ``index`` is the first such spec's.
    """
    now = insert_nodes(db, specs, observed=observed)
    return [
        Node(
            uuid=spec.uuid,
            name=spec.name,
            resource_class=spec.resource_class,
            traits=frozenset(spec.traits),
            properties=dict(spec.properties),
            capabilities=_capabilities(spec.properties),
            group=spec.group,
            provision_state=spec.provision_state,
            power_state=spec.power_state,
            maintenance=spec.maintenance,
            maintenance_reason=spec.maintenance_reason,
            created_at=now,
            updated_at=now,
        )
        for spec in specs
    ]


def insert_nodes(
    db: Database,
    specs: Sequence[NodeSpec],
    *,
    observed: Mapping[str, BackEndObservation] | None = None,
    every_clash: bool = False,
) -> datetime.datetime:
    """Insert validated nodes, all or none; their ``created_at``.

    Written in one transaction by :func:`conductor.db.bulk.insert_rows`
    (``COPY`` on PostgreSQL), a chunk of rows at a time
    (:data:`conductor.db.bulk.COPY_CHUNK`), each written before the next is
    built: a 100,000-node import never holds every row at once.  The unique
    constraints on name and uuid are the check: a clash aborts the insert,
    and only then is it looked up to be named.

    ``observed``: what the back end shows of some of them (uuid ->
    observation), stored with the row as seen at its creation: nothing of
    ringfleet's can have changed a node before it existed, so the
    observation is as fresh as the row and the sync need not write it again.

    :raises DuplicateNode: when a name or uuid exists already (nothing is
        inserted); its ``index`` is the first such spec's.
    :raises InvalidInput: instead, with ``every_clash``: every spec whose
        name or uuid exists already, as :func:`existing_clashes` names them
        (an import checked and written in one call)
    """
    seen = observed or {}
    try:
        # Recorded while it runs: an import commits seconds after its stamp.
        with node_writes.recorded(db) as now, db.writing() as connection:
            for start in range(0, len(specs), bulk.COPY_CHUNK):
                chunk = specs[start : start + bulk.COPY_CHUNK]
                rows = [_new_row(spec, now, seen.get(spec.uuid)) for spec in chunk]
                bulk.insert_rows(connection, _NODES, rows)
    except IntegrityError as exc:
        clashes = _stored_clashes(db, specs)
        if not clashes:  # a concurrent import's rows, rolled back since
            raise DuplicateNode(field="name", value=None, reason=str(exc.orig)) from None
        if every_clash:
            raise InvalidInput(_clash_errors(clashes)) from None
        index, field, value = clashes[0]
        raise DuplicateNode(field=field, value=value, index=index) from None
    return now


def _new_row(
    spec: NodeSpec, now: datetime.datetime, observation: BackEndObservation | None
) -> dict[str, Any]:
    """The row of a new node: every column an insert writes, in one place
    (one multi-row INSERT or COPY needs the same keys in every row)."""
    return {
        "uuid": spec.uuid,
        "name": spec.name,
        "resource_class": spec.resource_class,
        "traits": sorted(spec.traits),
        "properties": dict(spec.properties),
        "node_group": spec.group,
        "provision_state": provision_value(NodeEvent.CREATE, spec.provision_state),
        "power_state": spec.power_state.value,
        "maintenance": spec.maintenance,
        "maintenance_reason": spec.maintenance_reason,
        "owner_epoch": 0,
        "created_at": now,
        "updated_at": now,
        # Written here, not left to the column's default: COPY applies none.
        "ring_position": node_position(spec.uuid),
        "failed_builds": 0,
        **new_row_values(observation, now),
    }


#: Names (and uuids) per clash query: an IN list of each.
_CLASH_CHUNK = 1000


@retry_on_dead_connection
def _stored_clashes(db: Database, specs: Sequence[NodeSpec]) -> list[tuple[int, str, str]]:
    """``(index, "uuid" or "name", value)`` of every spec whose uuid or name is
    stored already, by index, a uuid before a name: a stored uuid says the
    very node exists (a retried create), which is what its client needs to
    hear, whatever the name."""
    index_of_name = {s.name: i for i, s in enumerate(specs)}
    index_of_uuid = {s.uuid: i for i, s in enumerate(specs)}
    clashes: list[tuple[int, str, str]] = []
    with db.read() as connection:
        for start in range(0, len(specs), _CLASH_CHUNK):
            chunk = specs[start : start + _CLASH_CHUNK]
            for name, uuid in connection.execute(
                select(_NODES.c.name, _NODES.c.uuid).where(
                    _NODES.c.name.in_([s.name for s in chunk])
                    | _NODES.c.uuid.in_([s.uuid for s in chunk])
                )
            ):
                if name in index_of_name:
                    clashes.append((index_of_name[name], "name", name))
                if uuid in index_of_uuid:
                    clashes.append((index_of_uuid[uuid], "uuid", uuid))
    return sorted(clashes, key=lambda clash: (clash[0], clash[1] != "uuid", clash[2]))


def existing_clashes(db: Database, specs: Sequence[NodeSpec]) -> list[FieldError]:
    """Every spec whose name or uuid is stored already, as ``nodes[i]`` errors.

    For checking a whole import before any of it is written (the insert
    itself re-checks, in its transaction: another import may come between).
    """
    return _clash_errors(_stored_clashes(db, specs))


def _clash_errors(clashes: Sequence[tuple[int, str, str]]) -> list[FieldError]:
    """:func:`_stored_clashes` as ``nodes[i].name`` / ``nodes[i].uuid`` errors."""
    errors = [
        FieldError.about(f"nodes[{index}].{field}", "exists already", value)
        for index, field, value in clashes
    ]
    return sorted(errors, key=lambda e: e.field)


@retry_on_dead_connection
def get_node(db: Database, ident: str) -> Node:
    """A node by uuid or name.

    :raises NodeNotFound:
    """
    with db.transaction() as session:
        row = session.scalars(
            select(NodeModel).where((NodeModel.uuid == ident) | (NodeModel.name == ident))
        ).first()
        if row is None:
            raise NodeNotFound(ident)
        return to_node(row)


@retry_on_dead_connection
def get_nodes(db: Database, uuids: Sequence[str]) -> list[Node]:
    """The nodes of *uuids* that exist, in uuid order (one query)."""
    query = select(NodeModel).where(NodeModel.uuid.in_(list(uuids))).order_by(NodeModel.uuid)
    with db.transaction() as session:
        return [to_node(row) for row in session.scalars(query)]


def groups_of(db: Database, uuids: Sequence[str]) -> dict[str, str]:
    """The group of each of *uuids* that exists (two columns; one query on
    PostgreSQL, :data:`conductor.db.value_lists.CHUNK` uuids a query elsewhere)."""
    dialect = db.engine.dialect
    groups: dict[str, str] = {}
    with db.read() as connection:
        for chunk in value_lists.chunks(list(uuids), dialect):
            query = select(NodeModel.uuid, NodeModel.node_group).where(
                value_lists.one_of(_NODES.c.uuid, chunk, dialect)
            )
            groups.update((uuid, group or "") for uuid, group in connection.execute(query))
    return groups


@retry_on_dead_connection
def delete_node(db: Database, node_uuid: str) -> bool:
    """Forget the node *node_uuid* if it is in maintenance and hosts nothing; whether it did.

    One statement, the checks in it: a build allocated the node a moment
    ago (its ``instance_uuid``, or an instance row placed on it that is not
    deleted) keeps it.
    """
    placed = exists().where(
        InstanceModel.node_uuid == node_uuid, InstanceModel.vm_state != VmState.DELETED.value
    )
    with db.transaction() as session:
        result = session.execute(
            delete(NodeModel)
            .where(
                NodeModel.uuid == node_uuid,
                NodeModel.maintenance.is_(True),
                NodeModel.instance_uuid.is_(None),
                ~placed,
            )
            .execution_options(synchronize_session=False)
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def _conditions(
    *,
    resource_class: str | None = None,
    group: str | None = None,
    owner: str | None = None,
    provision_state: str | None = None,
    maintenance: bool | None = None,
    pinned: bool | None = None,
    uuids: Sequence[str] | None = None,
) -> list[Any]:
    conditions: list[Any] = []
    if uuids is not None:
        conditions.append(NodeModel.uuid.in_(uuids))
    if resource_class is not None:
        conditions.append(NodeModel.resource_class == resource_class)
    if group is not None:
        conditions.append(NodeModel.node_group == group)
    if owner is not None:
        conditions.append(NodeModel.owner == owner)
    if provision_state is not None:
        conditions.append(NodeModel.provision_state == provision_state)
    if maintenance is not None:
        conditions.append(NodeModel.maintenance == maintenance)
    if pinned is not None:
        column = NodeModel.instance_uuid
        conditions.append(column.is_not(None) if pinned else column.is_(None))
    return conditions


@retry_on_dead_connection
def list_nodes(
    db: Database, *, limit: int = 1000, marker: str | None = None, **filters: Any
) -> list[Node]:
    """Nodes in uuid order, ``limit`` at a time after the ``marker`` uuid."""
    query = select(NodeModel).where(*_conditions(**filters)).order_by(NodeModel.uuid).limit(limit)
    if marker is not None:
        query = query.where(NodeModel.uuid > marker)
    with db.transaction() as session:
        return [to_node(row) for row in session.scalars(query)]


@retry_on_dead_connection
def list_node_dicts(
    db: Database, *, limit: int = 1000, marker: str | None = None, **filters: Any
) -> list[dict[str, Any]]:
    """:func:`list_nodes` as the RPC API sends it (``Node.to_dict()`` of each).

    Plain columns straight into dicts: no ORM objects and no ``Node`` in
    between, which were most of the conductor's time in a paged listing
    of a large fleet.  Traits and properties are read as JSON text and each
    distinct text decoded once per page (most of a fleet shares a handful
    of hardware profiles); the dicts share the decoded values, which are
    only serialized.
    """
    query = select(*_LIST_COLUMNS).where(*_conditions(**filters)).order_by(NodeModel.uuid)
    if marker is not None:
        query = query.where(NodeModel.uuid > marker)
    with db.read() as connection:
        rows = connection.execute(query.limit(limit)).all()
    traits: dict[str | None, list[str]] = {}
    properties: dict[str | None, tuple[dict[str, Any], dict[str, str]]] = {}
    listed = []
    for row in rows:
        if row.traits_text not in traits:
            traits[row.traits_text] = sorted(set(json.loads(row.traits_text or "[]") or ()))
        if row.properties_text not in properties:
            decoded = json.loads(row.properties_text or "{}") or {}
            properties[row.properties_text] = decoded, _capabilities(decoded)
        props, capabilities = properties[row.properties_text]
        listed.append(
            {
                "uuid": row.uuid,
                "name": row.name,
                "resource_class": row.resource_class,
                "traits": traits[row.traits_text],
                "properties": props,
                "capabilities": capabilities,
                "group": row.node_group,
                "provision_state": row.provision_state,
                "power_state": row.power_state or None,
                "maintenance": row.maintenance,
                "maintenance_reason": row.maintenance_reason,
                "owner": row.owner,
                "owner_epoch": row.owner_epoch,
                "instance_uuid": row.instance_uuid,
                "created_at": shown(row.created_at),
                "updated_at": shown(row.updated_at),
                "failed_builds": row.failed_builds,
            }
        )
    return listed


def iter_nodes(db: Database, *, batch: int = 5000, **filters: Any) -> Iterator[Node]:
    """Every matching node, read in batches (for index builds and exports)."""
    marker = None
    while True:
        page = list_nodes(db, limit=batch, marker=marker, **filters)
        yield from page
        if len(page) < batch:
            return
        marker = page[-1].uuid


@retry_on_dead_connection
def count_nodes(db: Database, **filters: Any) -> int:
    query = select(func.count()).select_from(NodeModel).where(*_conditions(**filters))
    with db.transaction() as session:
        return int(session.execute(query).scalar_one())


@retry_on_dead_connection
def changed_since(db: Database, since: datetime.datetime, *, limit: int = 10000) -> list[Node]:
    """Nodes whose row changed at or after ``since`` (oldest first).

    The scheduler's index uses it to stay coherent with the database without
    re-reading every node.
    """
    query = (
        select(NodeModel)
        .where(NodeModel.updated_at >= since)
        .order_by(NodeModel.updated_at, NodeModel.uuid)
        .limit(limit)
    )
    with db.transaction() as session:
        return [to_node(row) for row in session.scalars(query)]


@retry_on_dead_connection
def set_maintenance(db: Database, ident: str, maintenance: bool, reason: str | None) -> Node:
    """Put a node in or out of maintenance (a reason only when entering it)."""
    with db.transaction() as session:
        result = session.execute(
            update(NodeModel)
            .where((NodeModel.uuid == ident) | (NodeModel.name == ident))
            .values(
                maintenance=maintenance,
                maintenance_reason=reason if maintenance else None,
                updated_at=utcnow(),
            )
            .execution_options(synchronize_session=False)
        )
        if result.rowcount == 0:  # type: ignore[attr-defined]
            raise NodeNotFound(ident)
    return get_node(db, ident)


@retry_on_dead_connection
def update_node(db: Database, ident: str, changes: NodeUpdate) -> Node:
    """Apply a validated :class:`NodeUpdate` to the node ``ident`` (uuid or name).

    Read and written in one transaction with the row locked (``FOR UPDATE``
    where the database has it), so two concurrent changes both apply.  The
    ``updated_at`` bump makes the schedulers' index refresh pick it up.

    :raises NodeNotFound:
    :raises InvalidInput: when the traits would exceed the maximum
    """
    with db.transaction() as session:
        row = session.scalars(
            select(NodeModel)
            .where((NodeModel.uuid == ident) | (NodeModel.name == ident))
            .with_for_update()
        ).first()
        if row is None:
            raise NodeNotFound(ident)
        properties = dict(row.properties or {})
        properties.update(changes.properties)
        for key in changes.remove_properties:
            properties.pop(key, None)
        traits = (set(row.traits or ()) | changes.add_traits) - changes.remove_traits
        if len(traits) > MAX_TRAITS:
            raise InvalidInput(
                [
                    FieldError.about(
                        "changes.add_traits",
                        f"node would have more than {MAX_TRAITS} traits",
                        len(traits),
                    )
                ]
            )
        row.properties = properties
        row.traits = sorted(traits)
        if changes.resource_class is not None:
            row.resource_class = changes.resource_class
        row.updated_at = utcnow()
        session.flush()
        return to_node(row)


@dataclasses.dataclass(frozen=True, slots=True)
class OrphanClaim:
    """A node the back end shows still claimed by a ringfleet instance that
    ringfleet no longer places there (see :func:`repairable_orphans`).

    :ivar node: the node as stored (its owner and epoch: who may tear it down)
    :ivar instance_uuid: the instance that claims it in the back end
    """

    node: Node
    instance_uuid: str


@retry_on_dead_connection
def repairable_orphans(
    db: Database, *, limit: int = 100, after: str | None = None
) -> list[OrphanClaim]:
    """Nodes whose back-end claim its owner may tear down; the first ``limit``
    (by node uuid, those after ``after`` if given).

    A node qualifies when, as the inventory sync last observed it, the back
    end shows it claimed by an instance **of ringfleet's** (a row of the
    instances table: an instance ringfleet does not know, e.g. Nova's, is
    never returned) that ringfleet does not place on it (the instance is on
    no node or on another, or deleted or in error), and ringfleet's node
    hosts no instance, is ``error`` (out of scheduling), is not in
    maintenance (an operator's or Ironic's: hands off) and has an owner;
    and the observation is no older than ringfleet's last change to the
    node (``backend_seen_at >= updated_at``): a node freed or changed since
    waits for a pass that saw it after that.  One query.
    """
    node = NodeModel
    claimant = InstanceModel
    query = (
        select(node, claimant.uuid)
        .join(claimant, claimant.uuid == node.backend_instance_uuid)
        .where(
            node.backend_instance_uuid.is_not(None),
            node.backend_seen_at.is_not(None),
            node.backend_seen_at >= node.updated_at,
            node.instance_uuid.is_(None),
            node.provision_state == ProvisionState.ERROR.value,
            node.maintenance.is_(False),
            node.owner.is_not(None),
            or_(
                claimant.node_uuid.is_(None),
                claimant.node_uuid != node.uuid,
                claimant.vm_state.in_([VmState.DELETED.value, VmState.ERROR.value]),
            ),
            *([node.uuid > after] if after is not None else []),
        )
        .order_by(node.uuid)
        .limit(limit)
    )
    with db.reading() as session:
        return [
            OrphanClaim(to_node(row), instance_uuid)
            for row, instance_uuid in session.execute(query).all()
        ]
