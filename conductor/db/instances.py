# SPDX-License-Identifier: Apache-2.0
"""Instance records: build requests are stored here before they are routed.

A build request becomes instance rows in state ``building`` at once, so a
conductor that dies mid-build loses nothing: another one finds the rows and
resumes them.  Client-chosen instance uuids make a retried request
idempotent.  State changes are compare-and-swap on the expected state, so a
late report cannot resurrect a deleted instance.
"""

from __future__ import annotations

import datetime
import uuid as uuidlib
from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import (
    ColumnElement,
    Connection,
    Row,
    Table,
    bindparam,
    case,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from conductor.common.exception import (
    DuplicateInstance,
    InstanceNotFound,
    InstanceStateConflict,
    QuotaExceeded,
)
from conductor.common.instance_states import (
    ACTION_TASKS,
    Event,
    sources,
    target,
    task_sources,
)
from conductor.common.objects import Flavor, Instance, TaskState, VmState
from conductor.db import instance_actions, instance_labels, quotas
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.flavors import FLAVOR_BY_NAME, flavor_named, to_flavor
from conductor.db.models import InstanceModel, NodeModel, utcnow
from conductor.validation import BuildRequest, RebuildRequest

#: The vm_states of an instance an agent is working on (a build or a teardown).
IN_FLIGHT = (VmState.BUILDING.value, VmState.DELETING.value)
#: The task states of an action (reboot, stop, start, rebuild) an agent is
#: working on, on an ``active`` or ``stopped`` instance.
ACTION_IN_FLIGHT = tuple(sorted(t.value for t in ACTION_TASKS))

__all__ = [
    "ACTION_IN_FLIGHT",
    "IN_FLIGHT",
    "count_attempt",
    "create_instances",
    "fail_build",
    "get_build",
    "get_instance",
    "may_happen",
    "request_rebuild",
    "set_state",
    "state_values",
    "store_build_request",
    "to_instance",
]


# Core statements built once: reading and storing instances is on the path of
# every build, and the ORM's per-call work cost more than the SQL.
_INSTANCES: Table = InstanceModel.__table__  # type: ignore[assignment]
_INSTANCE_BY_UUID = select(_INSTANCES).where(_INSTANCES.c.uuid == bindparam("uuid"))
_INSTANCES_BY_UUIDS = select(_INSTANCES).where(
    _INSTANCES.c.uuid.in_(bindparam("uuids", expanding=True))
)
_INSERT_INSTANCE = insert(_INSTANCES)


def to_instance(row: InstanceModel | Row[Any]) -> Instance:
    return Instance(
        uuid=row.uuid,
        name=row.name,
        flavor=row.flavor,
        vm_state=VmState(row.vm_state),
        task_state=TaskState(row.task_state) if row.task_state else None,
        node_uuid=row.node_uuid,
        host=row.host,
        group_hint=row.group_hint,
        fault=row.fault,
        attempts=row.attempts,
        tried_nodes=tuple(row.tried_nodes or ()),
        created_at=row.created_at,
        updated_at=row.updated_at,
        scheduler_hints=row.scheduler_hints or {},
        image=row.image,
        config_drive=row.config_drive,
        project_id=row.project_id,
        user_id=row.user_id,
        key_name=row.key_name,
    )


def _names(request: BuildRequest, uuids: Sequence[str]) -> list[str]:
    if request.name is None:
        return [f"instance-{u[:8]}" for u in uuids]
    if request.count == 1:
        return [request.name]
    return [f"{request.name}-{i}" for i in range(1, request.count + 1)]


def _config_drive(request: BuildRequest, uuid: str, name: str) -> dict[str, Any] | None:
    """The config drive of one instance of *request*: its meta_data carries the
    instance's own uuid and name (cloud-init's instance id and name)."""
    if request.config_drive is None:
        return None
    return _own_meta(dict(request.config_drive), uuid, name)


def _own_meta(drive: dict[str, Any], uuid: str, name: str) -> dict[str, Any]:
    """*drive* with the instance's own uuid and name in its meta_data."""
    drive["meta_data"] = {**drive.get("meta_data", {}), "uuid": uuid, "name": name}
    return drive


def create_instances(db: Database, request: BuildRequest) -> tuple[list[Instance], bool]:
    """Store a validated build request as ``count`` building instances, of
    no project (the builds of a caller are :func:`store_build_request`'s).

    Returns the instances and whether they were created now (``False``: the
    same request was stored before — a client retry — and is returned as is).

    :raises DuplicateInstance: when a client-chosen uuid exists with another
        flavor (a different request reusing an id).
    """
    _flavor, stored, created = _store(db, request, _Owner(None, None, None), with_flavor=False)
    return stored, created


def store_build_request(
    db: Database,
    request: BuildRequest,
    *,
    project_id: str | None = None,
    user_id: str | None = None,
    quota: quotas.Defaults | None = None,
    requester: instance_actions.Requester | None = None,
) -> tuple[Flavor, list[Instance], bool]:
    """:func:`create_instances` for a flavor that must exist, in one transaction.

    The instances belong to ``project_id`` and ``user_id``.  With ``quota``
    (the defaults) and a project, the project's quotas are checked in the
    same transaction, race-safe (:func:`conductor.db.quotas.check`); a
    retry of a stored request is answered whatever the quota.

    Returns the flavor too (what the build workers schedule with).
    ``requester``: the instances' create action is recorded for it.

    :raises FlavorNotFound: before anything is stored
    :raises DuplicateInstance: as :func:`create_instances`
    :raises QuotaExceeded: nothing stored
    """
    owner = _Owner(project_id, user_id, quota, requester)
    flavor, stored, created = _store(db, request, owner, with_flavor=True)
    assert flavor is not None
    return flavor, stored, created


class _Owner(NamedTuple):
    project_id: str | None
    user_id: str | None
    quota: quotas.Defaults | None
    #: Who asked: the instances' create action is recorded for them.
    requester: instance_actions.Requester | None = None


@retry_on_dead_connection
def _store(
    db: Database,
    request: BuildRequest,
    owner: _Owner,
    *,
    with_flavor: bool,
    check_first: bool = False,
) -> tuple[Flavor | None, list[Instance], bool]:
    """One transaction; ``check_first`` reads the ids before inserting them.

    The first attempt inserts at once: a new request (the usual case) then
    costs no read of its ids, a statement that was about a tenth of the
    routing latency.  An id already stored makes the insert fail
    (``uniq_instances0uuid``) and roll back whole; the request is then tried
    again reading first, which tells a client's retry (answered with what
    was stored) from an id reused by another request (refused).
    """
    uuids = list(request.instance_uuids or [str(uuidlib.uuid4()) for _ in range(request.count)])
    names = _names(request, uuids)
    drives = [_config_drive(request, u, name) for u, name in zip(uuids, names, strict=True)]
    try:
        with db.writing() as connection:
            flavor = flavor_named(connection, request.flavor) if with_flavor else None
            image = _stored_image(request, flavor)
            found = _stored_before(
                connection, request, owner, flavor, uuids, check_first=check_first
            )
            if found:
                kept = _retried(request, owner, uuids, names, found, image=image, drives=drives)
                return flavor, kept, False
            now = utcnow()
            stored = _new_instances(request, owner, uuids, names, drives=drives, image=image)
            carried = {"conductor": db.carrier}
            connection.execute(_INSERT_INSTANCE, [_inserted(i) | carried for i in stored])
            instance_labels.insert(connection, uuids, request.metadata, request.tags)
            if owner.requester is not None:
                instance_actions.started(connection, uuids, Event.REQUEST, owner.requester, now)
            return flavor, stored, True
    except quotas.NoLockRow as missing:
        # The project's first limited build: nothing was written.
        quotas.add_project(db, missing.project_id)
        return _store(db, request, owner, with_flavor=with_flavor, check_first=check_first)
    except IntegrityError:
        # An id is stored already (a retry, a reused id, or a concurrent
        # identical request that won): read first this time.
        return _store(db, request, owner, with_flavor=with_flavor, check_first=True)


def _stored_image(request: BuildRequest, flavor: Flavor | None) -> dict[str, Any] | None:
    """The request's image, else its flavor's default (if any), as stored."""
    image = flavor.default_image if request.image is None and flavor is not None else request.image
    return None if image is None else dict(image)


def _stored_before(
    connection: Connection,
    request: BuildRequest,
    owner: _Owner,
    flavor: Flavor | None,
    uuids: list[str],
    *,
    check_first: bool,
) -> dict[str, Row[Any]]:
    """The rows of ``uuids`` when the request is to be answered with what is
    stored (``{}``: store it), the owner's quota checked on the way.

    :raises QuotaExceeded: a new request past the project's quota
    """
    if check_first and (existing := _existing(connection, uuids)):
        return existing
    if flavor is not None and owner.quota is not None and owner.project_id is not None:
        try:
            quotas.check(
                connection, owner.project_id, flavor.resource_class, len(uuids), owner.quota
            )
        except QuotaExceeded:
            # A client's retry of a stored request is answered with it, even
            # when the project is at its quota now.  Only the project's own
            # rows: another project's uuid is refused as an unknown one is
            # (the quota), not as a clash that would say it exists.
            retry = request.instance_uuids and not check_first
            existing = _existing(connection, uuids) if retry else {}
            if existing and all(r.project_id == owner.project_id for r in existing.values()):
                return existing
            raise
    return {}


def _new_instances(
    request: BuildRequest,
    owner: _Owner,
    uuids: list[str],
    names: list[str],
    *,
    drives: list[dict[str, Any] | None],
    image: dict[str, Any] | None,
) -> list[Instance]:
    """The instances of a new request, as they are stored: requested, untried."""
    now = utcnow()
    requested = target(Event.REQUEST)
    assert requested.vm_state is not None  # a request names its state
    return [
        Instance(
            uuid=u,
            name=name,
            flavor=request.flavor,
            vm_state=requested.vm_state,
            task_state=requested.task_state,
            group_hint=request.group,
            attempts=0,
            tried_nodes=(),
            created_at=now,
            updated_at=now,
            scheduler_hints=dict(request.scheduler_hints),
            image=image,
            config_drive=drive,
            project_id=owner.project_id,
            user_id=owner.user_id,
            key_name=request.key_name,
        )
        for u, name, drive in zip(uuids, names, drives, strict=True)
    ]


def _inserted(instance: Instance) -> dict[str, Any]:
    """The row of a new *instance* (as :func:`_new_instances` makes it)."""
    return {
        "uuid": instance.uuid,
        "name": instance.name,
        "flavor": instance.flavor,
        "vm_state": instance.vm_state.value,
        "task_state": _value(instance.task_state),
        "group_hint": instance.group_hint,
        "attempts": 0,
        "tried_nodes": [],
        "scheduler_hints": dict(instance.scheduler_hints),
        "image": instance.image,
        "config_drive": instance.config_drive,
        "project_id": instance.project_id,
        "user_id": instance.user_id,
        "key_name": instance.key_name,
        "created_at": instance.created_at,
        "updated_at": instance.updated_at,
    }


def _existing(connection: Connection, uuids: list[str]) -> dict[str, Row[Any]]:
    return {row.uuid: row for row in connection.execute(_INSTANCES_BY_UUIDS, {"uuids": uuids})}


def _retried(
    request: BuildRequest,
    owner: _Owner,
    uuids: list[str],
    names: list[str],
    existing: dict[str, Row[Any]],
    *,
    image: dict[str, Any] | None,
    drives: list[dict[str, Any] | None],
) -> list[Instance]:
    """A retry of the same request returns what was stored; any other use
    of these ids (another project's included) is a different request,
    refused alike whoever holds the id (invariant 12: no sign of another
    project's instance).
    """
    for index, u in enumerate(uuids):
        row = existing.get(u)
        if row is None:
            continue
        same = (
            len(existing) == len(uuids)
            and row.flavor == request.flavor
            and row.group_hint == request.group
            and (row.scheduler_hints or {}) == dict(request.scheduler_hints)
            and row.name == names[index]
            and row.project_id == owner.project_id
            and row.image == image
            and row.config_drive == drives[index]
        )
        if not same:
            raise DuplicateInstance(
                field="instance_uuids",
                value=u,
                index=index,
                reason=DuplicateInstance.UNUSABLE,
            )
    return [to_instance(existing[u]) for u in uuids]


@retry_on_dead_connection
def get_instance(db: Database, instance_uuid: str) -> Instance:
    """:raises InstanceNotFound:"""
    with db.read() as connection:
        row = connection.execute(_INSTANCE_BY_UUID, {"uuid": instance_uuid}).first()
    if row is None:
        raise InstanceNotFound(instance_uuid)
    return to_instance(row)


@retry_on_dead_connection
def get_build(db: Database, instance_uuid: str) -> tuple[Instance, Flavor | None]:
    """An instance and its flavor (``None`` if the flavor is gone), in one read.

    What a build worker needs to schedule a stored request.

    :raises InstanceNotFound:
    """
    with db.read() as connection:
        row = connection.execute(_INSTANCE_BY_UUID, {"uuid": instance_uuid}).first()
        if row is None:
            raise InstanceNotFound(instance_uuid)
        flavor = connection.execute(FLAVOR_BY_NAME, {"name": row.flavor}).first()
    return to_instance(row), None if flavor is None else to_flavor(flavor)


def _value(task_state: TaskState | None) -> str | None:
    return None if task_state is None else task_state.value


def may_happen(column: ColumnElement[str], event: Event) -> ColumnElement[bool]:
    """The condition that the ``vm_state`` *column* is one *event* may happen in.

    ``=`` for the usual single source state: an expanding ``IN`` costs a
    rendering step on every execution of the hot statements.
    """
    states = sources(event)
    return column == states[0] if len(states) == 1 else column.in_(states)


def task_may_happen(column: ColumnElement[str | None], event: Event) -> ColumnElement[bool] | None:
    """The condition that the ``task_state`` *column* is one *event* may happen in
    (``None``: the event ignores the task state)."""
    tasks = task_sources(event)
    if tasks is None:
        return None
    named = [t for t in tasks if t is not None]
    if None in tasks:
        return or_(column.is_(None), column.in_(named)) if named else column.is_(None)
    return column.in_(named)


def state_values(event: Event, carrier: str | None = None) -> dict[str, Any]:
    """The columns *event*'s target state writes (see :mod:`conductor.common.instance_states`);
    ``vm_state`` is left out when the event keeps it.

    An event that leaves work in flight (a build, a teardown, an action)
    names *carrier*, the conductor applying it, as the one carrying that
    work (its queue holds it now; when it goes, a peer adopts the record).
    A new action gets a new request id; the same verb issued again keeps
    its own, so that the agent does it once however often it is routed.
    """
    state = target(event)
    values: dict[str, Any] = {"task_state": _value(state.task_state)}
    if state.vm_state is not None:
        values["vm_state"] = state.vm_state.value
    if carrier is not None and _leaves_in_flight(event):
        values["conductor"] = carrier
    if state.task_state in ACTION_TASKS:
        assert state.task_state is not None
        values["action_id"] = case(
            (_INSTANCES.c.task_state == state.task_state.value, _INSTANCES.c.action_id),
            else_=str(uuidlib.uuid4()),
        )
    return values


def _leaves_in_flight(event: Event) -> bool:
    """Whether *event* leaves an agent work to do: a build, a teardown or an action."""
    state = target(event)
    return state.vm_state in (VmState.BUILDING, VmState.DELETING) or (
        state.task_state in ACTION_TASKS
    )


@retry_on_dead_connection
def set_state(
    db: Database,
    instance_uuid: str,
    event: Event,
    *,
    fault: str | None = None,
    task_state: TaskState | None = None,
    requester: instance_actions.Requester | None = None,
) -> bool:
    """Apply *event* to the instance if its state allows it; whether it did.

    A compare-and-swap on the event's source states (and task states, for
    the events that name them): an instance that moved on meanwhile (a late
    report, a delete that won) is left alone.  ``fault`` replaces the
    instance's fault.  ``task_state``: only while exactly that action is
    in flight (an answer ends the action it was for, not another).
    ``requester``: *event* starts a new action of theirs (recorded); the
    actions an event ends are finished either way (:mod:`conductor.db.instance_actions`).
    """
    now = utcnow()
    values = state_values(event, db.carrier) | {"updated_at": now}
    if fault is not None:
        values["fault"] = fault
    where = [_INSTANCES.c.uuid == instance_uuid, may_happen(_INSTANCES.c.vm_state, event)]
    task = task_may_happen(_INSTANCES.c.task_state, event)
    if task is not None:
        where.append(task)
    if task_state is not None:
        # The action the caller finished: a later verb's action is not ended by it.
        where.append(_INSTANCES.c.task_state == task_state.value)
    with db.writing() as connection:
        result = connection.execute(update(_INSTANCES).where(*where).values(values))
        if result.rowcount != 1:
            return False
        _record(connection, instance_uuid, event, requester, now)
        return True


def _record(
    connection: Connection,
    instance_uuid: str,
    event: Event,
    requester: instance_actions.Requester | None,
    now: datetime.datetime,
) -> None:
    """The action history of an event just applied: the action it starts, or ends."""
    if requester is not None and event in instance_actions.ACTION_OF:
        instance_actions.started(connection, [instance_uuid], event, requester, now)
    else:
        instance_actions.finished(connection, instance_uuid, event, now)


@retry_on_dead_connection
def request_rebuild(
    db: Database,
    instance_uuid: str,
    request: RebuildRequest,
    requester: instance_actions.Requester | None = None,
) -> bool:
    """Apply :attr:`Event.REBUILD` and store what *request* replaces, in one
    transaction; whether it did (``False``: the instance moved on, nothing changed).

    The new image replaces the stored one; each config drive part given
    replaces that part (a new meta_data gets the instance's own uuid and
    name, as at build), the others are kept; a new key pair (or none)
    replaces the old one's in meta_data ``public_keys`` and ``key_name``.
    An agent that adopts the node after a takeover reads the record: it
    redeploys what is stored here.

    A rebuild issued again while one is in flight (to re-route it) keeps its
    image and config drive, or gives the very same ones: a different one is
    refused, since the call in flight may be deploying the stored one and
    its answer would end the action (a rebuild with the new one is issued
    once this one is over).

    :raises InstanceNotFound:
    :raises InstanceStateConflict: a rebuild with another image or config
        drive is in flight
    """
    where = [_INSTANCES.c.uuid == instance_uuid, may_happen(_INSTANCES.c.vm_state, Event.REBUILD)]
    task = task_may_happen(_INSTANCES.c.task_state, Event.REBUILD)
    if task is not None:
        where.append(task)
    with db.writing() as connection:
        row = connection.execute(
            select(
                _INSTANCES.c.name,
                _INSTANCES.c.task_state,
                _INSTANCES.c.image,
                _INSTANCES.c.config_drive,
                _INSTANCES.c.key_name,
            )
            .where(_INSTANCES.c.uuid == instance_uuid)
            .with_for_update()
        ).first()
        if row is None:
            raise InstanceNotFound(instance_uuid)
        image = row.image if request.image is None else dict(request.image)
        drive = dict(row.config_drive or {}) | request.config_drive
        if "meta_data" in request.config_drive:
            drive = _own_meta(drive, instance_uuid, row.name)
        config_drive = request.keyed(drive, row.key_name) or None
        if row.task_state == TaskState.REBUILDING.value and (
            image != row.image or config_drive != row.config_drive
        ):
            raise InstanceStateConflict(
                field="task_state",
                value=row.task_state,
                reason="a rebuild with another image or config drive is in flight; "
                "rebuild again once it is over",
            )
        now = utcnow()
        values = state_values(Event.REBUILD, db.carrier) | {
            "updated_at": now,
            "image": image,
            "config_drive": config_drive,
        }
        if request.key is not None:  # a rebuild's key_name (Nova's 2.54)
            values["key_name"] = request.key.name
        result = connection.execute(update(_INSTANCES).where(*where).values(values))
        if result.rowcount != 1:
            return False
        _record(connection, instance_uuid, Event.REBUILD, requester, now)
        return True


@retry_on_dead_connection
def fail_build(db: Database, instance_uuid: str, fault: str) -> int | None:
    """The build gives up (:attr:`Event.FAIL`) without a node.

    One transaction (:func:`count_attempt`); ``None`` (nothing changed) when
    it is no longer building; the attempts so far otherwise.
    """
    with db.writing() as connection:
        return count_attempt(connection, instance_uuid, fault, now=utcnow(), carrier=db.carrier)


def count_attempt(
    connection: Connection,
    instance_uuid: str,
    fault: str,
    *,
    now: datetime.datetime,
    node_uuid: str | None = None,
    max_attempts: int | None = None,
    carrier: str | None = None,
) -> int | None:
    """Count a failed attempt of a building instance, in the caller's transaction.

    Its fault is appended (``attempt N[ on node X]: fault``) and the build
    rescheduled (:attr:`Event.RESCHEDULE`) or failed (:attr:`Event.FAIL`: at
    ``max_attempts``, or at once without one), by compare-and-swap on the
    attempts read, so a success or a delete that came in between wins.  With
    ``node_uuid``, only a build on that node counts, and it leaves the node
    (remembered, so that a reschedule goes elsewhere).  The attempts so far,
    or ``None`` when nothing changed.
    """
    on = [_INSTANCES.c.uuid == instance_uuid]
    if node_uuid is not None:
        on.append(_INSTANCES.c.node_uuid == node_uuid)
    row = connection.execute(
        select(_INSTANCES.c.attempts, _INSTANCES.c.fault, _INSTANCES.c.tried_nodes).where(
            *on, may_happen(_INSTANCES.c.vm_state, Event.RESCHEDULE)
        )
    ).first()
    if row is None:
        return None
    attempts = int(row.attempts) + 1
    where = f" on node {node_uuid}" if node_uuid is not None else ""
    line = f"attempt {attempts}{where}: {fault}"
    gives_up = max_attempts is None or attempts >= max_attempts
    event = Event.FAIL if gives_up else Event.RESCHEDULE
    values: dict[str, Any] = {
        "attempts": attempts,
        "fault": f"{row.fault}\n{line}" if row.fault else line,
        "updated_at": now,
        **state_values(event, carrier),
    }
    if node_uuid is not None:
        values |= {
            "tried_nodes": [*(row.tried_nodes or []), node_uuid],
            "node_uuid": None,
            "host": None,
        }
    counted = connection.execute(
        update(_INSTANCES)
        .where(*on, may_happen(_INSTANCES.c.vm_state, event), _INSTANCES.c.attempts == row.attempts)
        .values(values)
    )
    if counted.rowcount != 1:
        return None
    instance_actions.finished(connection, instance_uuid, event, now)
    return attempts


@retry_on_dead_connection
def touch_progressing(db: Database, host: str, epochs: dict[str, int]) -> list[str]:
    """The back end moved the builds on these nodes: mark their progress.

    *epochs* maps each node to the epoch *host* holds; only a node owned by
    *host* at exactly that epoch counts (a report from a stale owner is no
    heartbeat), and only the build or teardown in flight there is touched.
    Returns the instances touched.
    """
    if not epochs:
        return []
    with db.transaction() as session:
        rows = session.execute(
            select(InstanceModel.uuid, NodeModel.uuid, NodeModel.owner_epoch)
            .join(NodeModel, NodeModel.instance_uuid == InstanceModel.uuid)
            .where(
                NodeModel.uuid.in_(list(epochs)),
                NodeModel.owner == host,
                InstanceModel.vm_state.in_(IN_FLIGHT),
            )
        ).all()
        touched = [instance for instance, node, epoch in rows if epoch == epochs[node]]
        if touched:
            session.execute(
                update(InstanceModel)
                .where(InstanceModel.uuid.in_(touched))
                .where(InstanceModel.vm_state.in_(IN_FLIGHT))
                .values(updated_at=utcnow())
                .execution_options(synchronize_session=False)
            )
        return touched


@retry_on_dead_connection
def get_instances(db: Database, instance_uuids: Sequence[str]) -> list[Instance]:
    """The stored instances among ``instance_uuids`` (missing ones left out), one read."""
    if not instance_uuids:
        return []
    with db.read() as connection:
        rows = connection.execute(_INSTANCES_BY_UUIDS, {"uuids": list(instance_uuids)})
        return [to_instance(row) for row in rows]
