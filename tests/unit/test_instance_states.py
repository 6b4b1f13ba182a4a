# SPDX-License-Identifier: Apache-2.0
"""The instance state machine: the table walked, and the database held to it.

Every (state, event) pair is tried in memory and against a stored instance:
a transition in the table moves the instance to its target, any other is
refused (:class:`InvalidTransition` in memory, no write in the database).
A scan of the code checks that no module writes a state the table did not
give it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update

from conductor.common.exception import InvalidTransition
from conductor.common.instance_states import (
    ACTION_TASKS,
    TRANSITIONS,
    VERBS,
    Event,
    State,
    can,
    target,
    transition,
)
from conductor.common.objects import TaskState, VmState
from conductor.db import instances
from conductor.db.engine import Database
from conductor.db.models import InstanceModel
from conductor.validation import validate_build_request
from tests.dbutil import migrated

REPO = Path(__file__).resolve().parents[2]

STATES: tuple[VmState | None, ...] = (None, *VmState)
#: The task states tried with every state: none, and every action's.
TASKS: tuple[TaskState | None, ...] = (None, *sorted(ACTION_TASKS))


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    yield database
    database.dispose()


def test_every_event_has_a_row() -> None:
    assert set(TRANSITIONS) == set(Event)


def _expected(event: Event, current: VmState | None, task: TaskState | None) -> State | None:
    """Where the table says *event* leads from (*current*, *task*); None: refused."""
    row = TRANSITIONS[event]
    if current is None:
        return row.target if not row.sources and task is None else None
    if current not in row.sources or (row.tasks is not None and task not in row.tasks):
        return None
    if row.target.vm_state is None:  # the event keeps the vm_state
        return State(current, row.target.task_state)
    return row.target


@pytest.mark.parametrize("event", list(Event))
@pytest.mark.parametrize("current", STATES)
def test_the_table_walked(event: Event, current: VmState | None) -> None:
    for task in TASKS if current is not None else (None,):
        expected = _expected(event, current, task)
        if expected is not None:
            assert transition(event, current, task) == expected
            assert current is None or can(event, current, task)
        else:
            with pytest.raises(InvalidTransition) as err:
                transition(event, current, task)
            assert err.value.event == event.value
            state = None if current is None else current.value
            if task is not None:
                state = f"{state}/{task.value}"
            assert err.value.state == state
            assert event.value in str(err.value)
            assert current is None or not can(event, current, task)


@pytest.mark.parametrize(
    ("event", "current", "task", "expected"),
    [
        # A verb starts only from its states, with no other action running.
        (Event.REBOOT, VmState.ACTIVE, None, State(VmState.ACTIVE, TaskState.REBOOTING)),
        (Event.REBOOT, VmState.STOPPED, None, None),
        (Event.REBOOT, VmState.ACTIVE, TaskState.POWERING_OFF, None),
        # Issued again while in flight: allowed (routed anew).
        (
            Event.REBOOT,
            VmState.ACTIVE,
            TaskState.REBOOTING,
            State(VmState.ACTIVE, TaskState.REBOOTING),
        ),
        # A hard reboot takes over a soft one (Nova), never the reverse.
        (
            Event.REBOOT_HARD,
            VmState.ACTIVE,
            TaskState.REBOOTING,
            State(VmState.ACTIVE, TaskState.REBOOTING_HARD),
        ),
        (Event.REBOOT, VmState.ACTIVE, TaskState.REBOOTING_HARD, None),
        (Event.STOP, VmState.ACTIVE, None, State(VmState.ACTIVE, TaskState.POWERING_OFF)),
        (Event.STOP, VmState.STOPPED, None, None),
        (Event.STOP, VmState.BUILDING, TaskState.SPAWNING, None),
        (Event.START, VmState.STOPPED, None, State(VmState.STOPPED, TaskState.POWERING_ON)),
        (Event.START, VmState.ACTIVE, None, None),
        (Event.START, VmState.STOPPED, TaskState.POWERING_OFF, None),
        (Event.REBUILD, VmState.STOPPED, None, State(VmState.STOPPED, TaskState.REBUILDING)),
        (Event.REBUILD, VmState.ERROR, None, None),
        # The ends: each only from the action it ends.
        (Event.POWERED_OFF, VmState.ACTIVE, TaskState.POWERING_OFF, State(VmState.STOPPED)),
        (Event.POWERED_OFF, VmState.ACTIVE, TaskState.REBOOTING, None),
        (Event.POWERED_OFF, VmState.ACTIVE, None, None),
        (Event.POWERED_ON, VmState.STOPPED, TaskState.POWERING_ON, State(VmState.ACTIVE)),
        (Event.POWERED_ON, VmState.ACTIVE, TaskState.REBOOTING_HARD, State(VmState.ACTIVE)),
        (Event.POWERED_ON, VmState.ACTIVE, TaskState.POWERING_OFF, None),
        (Event.REBUILT, VmState.STOPPED, TaskState.REBUILDING, State(VmState.ACTIVE)),
        # A failed action keeps the instance where it was.
        (Event.ACTION_FAILED, VmState.STOPPED, TaskState.POWERING_ON, State(VmState.STOPPED)),
        (Event.ACTION_FAILED, VmState.ACTIVE, TaskState.POWERING_OFF, State(VmState.ACTIVE)),
        (Event.ACTION_FAILED, VmState.ACTIVE, None, None),
        # Power found off outside ringfleet: only an idle active instance
        # follows it (an action in flight owns the power; its answer decides).
        (Event.FOUND_OFF, VmState.ACTIVE, None, State(VmState.STOPPED)),
        (Event.FOUND_OFF, VmState.ACTIVE, TaskState.POWERING_OFF, None),
        (Event.FOUND_OFF, VmState.ACTIVE, TaskState.REBOOTING_HARD, None),
        (Event.FOUND_OFF, VmState.ACTIVE, TaskState.REBUILDING, None),
        (Event.FOUND_OFF, VmState.STOPPED, None, None),
        (Event.FOUND_OFF, VmState.STOPPED, TaskState.POWERING_ON, None),
        (Event.FOUND_OFF, VmState.BUILDING, TaskState.SPAWNING, None),
        (Event.FOUND_OFF, VmState.DELETING, TaskState.DELETING, None),
        # A delete wins over an action in flight.
        (
            Event.DELETE,
            VmState.STOPPED,
            TaskState.POWERING_ON,
            State(VmState.DELETING, TaskState.DELETING),
        ),
    ],
)
def test_verbs_and_their_ends(
    event: Event, current: VmState, task: TaskState | None, expected: State | None
) -> None:
    if expected is None:
        with pytest.raises(InvalidTransition, match=event.value):
            transition(event, current, task)
        assert not can(event, current, task)
    else:
        assert transition(event, current, task) == expected
        assert can(event, current, task)


def test_every_verb_names_the_task_it_starts() -> None:
    assert set(VERBS) == set(ACTION_TASKS)
    for task, event in VERBS.items():
        assert target(event).task_state is task


def _reachable() -> set[VmState]:
    seen: set[VmState | None] = {target(Event.REQUEST).vm_state}
    grew = True
    while grew:
        grew = False
        for row in TRANSITIONS.values():
            if row.target.vm_state is None:
                continue  # keeps the state: reaches nothing new
            if row.sources & seen and row.target.vm_state not in seen:
                seen.add(row.target.vm_state)
                grew = True
    return seen


def test_every_state_is_reachable_and_deleted_is_final() -> None:
    assert _reachable() == set(VmState)
    assert not any(VmState.DELETED in row.sources for row in TRANSITIONS.values())
    # Whatever happened, a user can delete it (and again, while deleting).
    assert {s for s in VmState if can(Event.DELETE, s)} == set(VmState) - {VmState.DELETED}


def test_work_in_flight_has_a_task_state_and_none_at_rest() -> None:
    for row in TRANSITIONS.values():
        in_flight = row.target.vm_state in (VmState.BUILDING, VmState.DELETING)
        acting = row.event in VERBS.values()
        assert (row.target.task_state is not None) == (in_flight or acting), row
        assert not acting or row.target.task_state in ACTION_TASKS, row


def _stored_in(db: Database, state: VmState, task: TaskState | None = None) -> str:
    [instance], _ = instances.create_instances(db, validate_build_request({"flavor": "f"}))
    with db.transaction() as session:
        session.execute(
            update(InstanceModel)
            .where(InstanceModel.uuid == instance.uuid)
            .values(vm_state=state.value, task_state=None if task is None else task.value)
        )
    return instance.uuid


@pytest.mark.parametrize("event", [e for e in Event if e is not Event.REQUEST])
def test_the_database_writes_only_what_the_table_allows(db: Database, event: Event) -> None:
    for state in VmState:
        for task in TASKS:
            uuid = _stored_in(db, state, task)
            written = instances.set_state(db, uuid, event)
            after = instances.get_instance(db, uuid)
            expected = _expected(event, state, task)
            assert written == (expected is not None), (event, state, task)
            if expected is not None:
                assert State(after.vm_state, after.task_state) == expected
            else:
                assert (after.vm_state, after.task_state) == (state, task)


def test_an_answer_ends_only_the_action_it_was_for(db: Database) -> None:
    """A late answer of a soft reboot a hard one took over changes nothing."""
    uuid = _stored_in(db, VmState.ACTIVE, TaskState.REBOOTING_HARD)
    assert not instances.set_state(db, uuid, Event.POWERED_ON, task_state=TaskState.REBOOTING)
    assert instances.get_instance(db, uuid).task_state is TaskState.REBOOTING_HARD
    assert instances.set_state(db, uuid, Event.POWERED_ON, task_state=TaskState.REBOOTING_HARD)
    after = instances.get_instance(db, uuid)
    assert (after.vm_state, after.task_state) == (VmState.ACTIVE, None)


def test_a_request_is_stored_in_the_requested_state(db: Database) -> None:
    [instance], _ = instances.create_instances(db, validate_build_request({"flavor": "f"}))
    stored = instances.get_instance(db, instance.uuid)
    assert State(stored.vm_state, stored.task_state) == target(Event.REQUEST)
    assert (instance.vm_state, instance.task_state) == (VmState.BUILDING, TaskState.SCHEDULING)


#: Calls that would write an instance's state from a literal member.
_WRITERS = ("values", "set_state", "Instance")


def _literal_state(node: ast.expr) -> bool:
    """``VmState.X``, ``TaskState.X`` or either with ``.value``."""
    while isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id in ("VmState", "TaskState"):
            return True
        node = node.value
    return False


def _literal_state_writes(source: str) -> Iterator[int]:
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in _WRITERS:
            continue
        for keyword in node.keywords:
            if keyword.arg in ("vm_state", "task_state") and _literal_state(keyword.value):
                yield node.lineno


def test_no_module_writes_a_state_the_table_did_not_give() -> None:
    """State changes go through the table: no ``.values(vm_state=VmState.ACTIVE...)``."""
    found = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sorted((REPO / "conductor").rglob("*.py"))
        if path.name != "instance_states.py"
        for line in _literal_state_writes(path.read_text())
    ]
    assert found == []


def test_the_scan_finds_a_literal_write() -> None:
    assert list(_literal_state_writes("update(t).values(vm_state=VmState.ACTIVE.value)\n")) == [1]
    assert list(_literal_state_writes("set_state(db, u, task_state=TaskState.SPAWNING)\n")) == [1]
    assert list(_literal_state_writes("list_instances(db, vm_state=VmState.BUILDING)\n")) == []
