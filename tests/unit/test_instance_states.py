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
    TRANSITIONS,
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


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    yield database
    database.dispose()


def test_every_event_has_a_row() -> None:
    assert set(TRANSITIONS) == set(Event)


@pytest.mark.parametrize("event", list(Event))
@pytest.mark.parametrize("current", STATES)
def test_the_table_walked(event: Event, current: VmState | None) -> None:
    row = TRANSITIONS[event]
    allowed = current in row.sources if current is not None else not row.sources
    if allowed:
        assert transition(event, current) == row.target == target(event)
        assert current is None or can(event, current)
    else:
        with pytest.raises(InvalidTransition) as err:
            transition(event, current)
        assert err.value.event == event.value
        assert err.value.state == (None if current is None else current.value)
        assert event.value in str(err.value)
        assert current is None or not can(event, current)


def _reachable() -> set[VmState]:
    seen = {target(Event.REQUEST).vm_state}
    grew = True
    while grew:
        grew = False
        for row in TRANSITIONS.values():
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
        assert (row.target.task_state is not None) == in_flight, row


def _stored_in(db: Database, state: VmState) -> str:
    [instance], _ = instances.create_instances(db, validate_build_request({"flavor": "f"}))
    with db.transaction() as session:
        session.execute(
            update(InstanceModel)
            .where(InstanceModel.uuid == instance.uuid)
            .values(vm_state=state.value, task_state=None)
        )
    return instance.uuid


@pytest.mark.parametrize("event", [e for e in Event if e is not Event.REQUEST])
def test_the_database_writes_only_what_the_table_allows(db: Database, event: Event) -> None:
    for state in VmState:
        uuid = _stored_in(db, state)
        written = instances.set_state(db, uuid, event)
        after = instances.get_instance(db, uuid)
        assert written == can(event, state), (event, state)
        if written:
            assert State(after.vm_state, after.task_state) == target(event)
        else:
            assert (after.vm_state, after.task_state) == (state, None)


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
