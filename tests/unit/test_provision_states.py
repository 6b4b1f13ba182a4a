# SPDX-License-Identifier: Apache-2.0
"""The node's provision-state machine: the table walked, and the database held to it.

Every (state, event, target) is tried in memory and through the database
write that names the event, against a node stored in every state: a
transition in the table moves the node to its target, any other is refused
(:class:`InvalidProvisionTransition` in memory and for a state the writer
names, no write in the database for a compare-and-swap that finds the node
elsewhere).  A scan of ``conductor/db`` checks that no module writes a
provision state the table did not give it.
"""

from __future__ import annotations

import ast
import dataclasses
import uuid as uuidlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, update

from conductor.common.objects import ProvisionState
from conductor.common.provision_states import (
    ANY,
    IDLE,
    TRANSITIONS,
    Event,
    InvalidProvisionTransition,
    can,
    sources,
    target,
    transition,
)
from conductor.common.schemas import ALLOWED_PROVISION_STATES
from conductor.db import allocations, node_states, nodes
from conductor.db.engine import Database
from conductor.db.models import InstanceModel, NodeModel
from conductor.db.ownership import Fence
from conductor.validation import validate_node_spec
from tests.dbutil import add_nodes, migrated

REPO = Path(__file__).resolve().parents[2]
PS = ProvisionState
STATES: tuple[ProvisionState | None, ...] = (None, *ProvisionState)
OWNER = "agent-1"
FENCE = Fence(OWNER, 0)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    yield database
    database.dispose()


# -- the table ---------------------------------------------------------------------------------


def test_every_event_has_a_row_with_sources_and_targets() -> None:
    assert set(TRANSITIONS) == set(Event)
    for event, row in TRANSITIONS.items():
        assert row.event is event
        assert row.targets, event
        # Only the creation has no source: every other event happens to a stored node.
        assert bool(row.sources) == (event is not Event.CREATE), event


def _reachable(events: set[Event]) -> set[ProvisionState]:
    seen = set(TRANSITIONS[Event.CREATE].targets)
    grew = True
    while grew:
        grew = False
        for row in TRANSITIONS.values():
            if row.event in events and row.sources & seen and not row.targets <= seen:
                seen |= row.targets
                grew = True
    return seen


def test_every_state_is_reachable() -> None:
    assert _reachable(set(Event)) == set(ProvisionState)
    # deleting: only an owner's report writes it (no flow of the conductor's does).
    assert _reachable(set(Event) - {Event.REPORT}) == set(ProvisionState) - {PS.DELETING}


def test_the_table_as_the_writes_had_it() -> None:
    """The states each write compared and wrote before the table: unchanged."""
    assert sources(Event.ALLOCATE) == ("available",) and target(Event.ALLOCATE) is PS.DEPLOYING
    assert target(Event.DEPLOYED) is PS.ACTIVE
    for event in (Event.GIVE_BACK, Event.TORN_DOWN, Event.ATTEMPT_FAILED_CLEAN):
        assert target(event) is PS.AVAILABLE
    assert target(Event.ATTEMPT_FAILED) is PS.ERROR
    # Guarded by the instance on the node and the fence, never the node's state.
    for event in (*(e for e in Event if e not in (Event.CREATE, Event.ALLOCATE, Event.MIRROR)),):
        assert sources(event) is None and TRANSITIONS[event].sources == ANY, event
    assert TRANSITIONS[Event.MIRROR].sources == TRANSITIONS[Event.MIRROR].targets == IDLE
    assert sources(Event.CREATE) == ()
    # What a client may create a node in is what the table lets it store.
    assert set(ALLOWED_PROVISION_STATES) <= TRANSITIONS[Event.CREATE].targets == IDLE
    assert TRANSITIONS[Event.REPORT].targets == ANY


def _expected(
    event: Event, current: ProvisionState | None, wanted: ProvisionState | None
) -> ProvisionState | None:
    """Where the table says *event* takes a node in *current* to (*wanted*); None: refused."""
    row = TRANSITIONS[event]
    if not (current in row.sources if current is not None else not row.sources):
        return None
    if wanted is None:
        return next(iter(row.targets)) if len(row.targets) == 1 else None
    return wanted if wanted in row.targets else None


@pytest.mark.parametrize("event", list(Event))
@pytest.mark.parametrize("current", STATES)
def test_the_table_walked(event: Event, current: ProvisionState | None) -> None:
    for wanted in STATES:
        expected = _expected(event, current, wanted)
        assert can(event, current, wanted) == (expected is not None), (current, wanted)
        if expected is not None:
            assert transition(event, current, wanted) is expected
        else:
            with pytest.raises(InvalidProvisionTransition) as err:
                transition(event, current, wanted)
            assert err.value.event == event.value
            assert f"node event {event.value!r}" in str(err.value)


def test_a_target_is_checked_as_a_string_too() -> None:
    assert target(Event.REPORT, "cleaning") is PS.CLEANING
    with pytest.raises(InvalidProvisionTransition, match="cannot lead to 'bogus'") as err:
        target(Event.REPORT, "bogus")
    assert err.value.wanted == "bogus"
    with pytest.raises(InvalidProvisionTransition, match="cannot lead to 'active'"):
        target(Event.MIRROR, "active")
    with pytest.raises(InvalidProvisionTransition, match="needs its target named"):
        target(Event.MIRROR)
    with pytest.raises(InvalidProvisionTransition, match=r"\(only to deploying\)"):
        target(Event.ALLOCATE, "active")  # its one target only, when named
    assert target(Event.ALLOCATE, "deploying") is PS.DEPLOYING


# -- the database ------------------------------------------------------------------------------


def _instance(db: Database, vm_state: str = "building", node: str | None = None) -> str:
    uuid = str(uuidlib.uuid4())
    with db.transaction() as session:
        session.add(
            InstanceModel(
                uuid=uuid,
                name=f"vm-{uuid[:8]}",
                flavor="bm",
                vm_state=vm_state,
                node_uuid=node,
                host=OWNER if node else None,
            )
        )
    return uuid


def _node(db: Database, state: ProvisionState, instance: str | None = None) -> str:
    """A node of OWNER's at epoch 0, stored in *state*, hosting *instance*."""
    [uuid] = add_nodes(db, 1, owner=OWNER)
    with db.transaction() as session:
        session.execute(
            update(NodeModel)
            .where(NodeModel.uuid == uuid)
            .values(provision_state=state.value, instance_uuid=instance)
        )
    return uuid


def _hosting(db: Database, state: ProvisionState, vm_state: str = "building") -> tuple[str, str]:
    """A node in *state* and the instance on it (in *vm_state*)."""
    node = _node(db, state)
    instance = _instance(db, vm_state, node)
    with db.transaction() as session:
        session.execute(
            update(NodeModel).where(NodeModel.uuid == node).values(instance_uuid=instance)
        )
    return node, instance


def _state(db: Database, node: str) -> ProvisionState:
    with db.read() as connection:
        stored = connection.execute(
            select(NodeModel.provision_state).where(NodeModel.uuid == node)
        ).scalar_one()
    return ProvisionState(stored)


@pytest.mark.parametrize("state", list(ProvisionState))
def test_allocate_takes_only_an_available_node(db: Database, state: ProvisionState) -> None:
    node, instance = _node(db, state), _instance(db)
    taken = allocations.allocate(db, node, instance)
    expected = _expected(Event.ALLOCATE, state, None)
    assert (taken is not None) == (expected is not None)
    assert _state(db, node) is (expected or state)


#: The writes that end or complete a build's hold on a node: (event, vm_state
#: of the instance on it, the write; whether it wrote).
_ON_A_HOSTING_NODE: dict[str, tuple[Event, str, Callable[[Database, str, str], object]]] = {
    "complete": (
        Event.DEPLOYED,
        "building",
        lambda db, node, inst: allocations.complete(db, node, inst, fence=FENCE),
    ),
    "deployed_while_deleting": (
        Event.DEPLOYED,
        "deleting",
        lambda db, node, inst: allocations.deployed_while_deleting(db, node, inst, FENCE),
    ),
    "give_back": (Event.GIVE_BACK, "building", allocations.give_back),
    "release": (
        Event.TORN_DOWN,
        "deleting",
        lambda db, node, inst: allocations.release(db, node, inst, fence=FENCE),
    ),
    "fail_attempt_clean": (
        Event.ATTEMPT_FAILED_CLEAN,
        "building",
        lambda db, node, inst: allocations.fail_attempt(
            db, node, inst, "boom", node_clean=True, fence=FENCE, max_attempts=3
        ),
    ),
    "fail_attempt": (
        Event.ATTEMPT_FAILED,
        "building",
        lambda db, node, inst: allocations.fail_attempt(
            db, node, inst, "boom", node_clean=False, fence=FENCE, max_attempts=3
        ),
    ),
}


@pytest.mark.parametrize("write", sorted(_ON_A_HOSTING_NODE))
def test_a_write_on_a_hosting_node_moves_it_from_any_state(db: Database, write: str) -> None:
    event, vm_state, apply = _ON_A_HOSTING_NODE[write]
    for state in ProvisionState:
        node, instance = _hosting(db, state, vm_state)
        expected = _expected(event, state, None)
        assert expected is not None  # any state: the instance and the fence guard it
        assert apply(db, node, instance) not in (None, False), state
        assert _state(db, node) is expected
        # Not the node's instance (nor any): refused, whatever its state.
        other = _node(db, state)
        assert apply(db, other, instance) in (None, False)
        assert _state(db, other) is state


@pytest.mark.parametrize("stored", list(ProvisionState))
def test_the_mirror_moves_only_between_idle_states(db: Database, stored: ProvisionState) -> None:
    for wanted in ProvisionState:
        node = _node(db, stored)
        change = nodes.BackEndState(node, provision_state=(stored, wanted))
        expected = _expected(Event.MIRROR, stored, wanted)
        if expected is None:
            with pytest.raises(InvalidProvisionTransition):
                nodes.mirror_back_end_states(db, [change])
        else:
            assert nodes.mirror_back_end_states(db, [change]) == 1
        assert _state(db, node) is (expected or stored)
    # A compare-and-swap on the state read: a node that moved on is left alone.
    if stored in IDLE:
        node = _node(db, stored)
        others = sorted(IDLE - {stored})
        moved_on = nodes.BackEndState(node, provision_state=(others[0], others[1]))
        assert nodes.mirror_back_end_states(db, [moved_on]) == 0
        assert _state(db, node) is stored


@pytest.mark.parametrize("stored", list(ProvisionState))
def test_a_report_stores_any_state_from_any(db: Database, stored: ProvisionState) -> None:
    for wanted in ProvisionState:
        node = _node(db, stored)
        report: node_states.StateReport = {
            "node_uuid": node,
            "epoch": 0,
            "power_state": None,
            "provision_state": wanted.value,
        }
        assert node_states.record_node_states(db, OWNER, [report]).stale == []
        assert _state(db, node) is _expected(Event.REPORT, stored, wanted)
    node = _node(db, stored)
    bogus: node_states.StateReport = {
        "node_uuid": node,
        "epoch": 0,
        "power_state": None,
        "provision_state": "bogus",
    }
    with pytest.raises(InvalidProvisionTransition):
        node_states.record_node_states(db, OWNER, [bogus])
    assert _state(db, node) is stored


def test_a_node_is_created_only_in_an_idle_state(db: Database) -> None:
    for state in ProvisionState:
        spec = dataclasses.replace(
            validate_node_spec({"name": f"n-{state.value}", "resource_class": "baremetal"}),
            provision_state=state,
        )
        expected = _expected(Event.CREATE, None, state)
        if expected is None:
            with pytest.raises(InvalidProvisionTransition):
                nodes.create_nodes(db, [spec])
            assert nodes.count_nodes(db, uuids=[spec.uuid]) == 0
        else:
            nodes.create_nodes(db, [spec])
            assert _state(db, spec.uuid) is expected


# -- no write around the table -----------------------------------------------------------------

#: The table's helpers: a provision state written is one of their values.
_HELPERS = frozenset({"provision_value"})


def _called(node: ast.expr, names: frozenset[str]) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) in names


def _names_a_state(node: ast.AST) -> bool:
    """``ProvisionState.X`` somewhere in *node*."""
    return any(
        isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id == "ProvisionState"
        for n in ast.walk(node)
    )


def _on_update(call: ast.Call) -> bool:
    """Whether *call* (``.where``, ``.values``) is chained on ``update(...)``."""
    node: ast.expr = call.func
    while isinstance(node, ast.Attribute | ast.Call):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id == "update":
                return True
            node = node.func
        else:
            node = node.value
    return False


def _method(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else ""


def _unruled_writes(source: str) -> Iterator[int]:
    """Lines writing a provision state the table did not give."""
    tree = ast.parse(source)
    module_names = {
        target.id: stmt.value
        for stmt in tree.body
        if isinstance(stmt, ast.Assign)
        for target in stmt.targets
        if isinstance(target, ast.Name)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _method(node) == "values":
            for keyword in node.keywords:
                if keyword.arg == "provision_state" and not _called(keyword.value, _HELPERS):
                    yield node.lineno
            for arg in node.args:
                for key, value in zip(
                    getattr(arg, "keys", ()), getattr(arg, "values", ()), strict=True
                ):
                    if _is_column_key(key) and not _called(value, _HELPERS):
                        yield node.lineno
        elif isinstance(node, ast.Call) and _method(node) == "where" and _on_update(node):
            for arg in node.args:
                if isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Name):
                    arg = module_names.get(arg.value.id, arg)
                if _names_a_state(arg):
                    yield node.lineno
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                copied = isinstance(value, ast.Attribute) and value.attr == "provision_state"
                if _is_column_key(key) and not copied and not _called(value, _HELPERS):
                    yield node.lineno
        elif isinstance(node, ast.Assign):
            for target_ in node.targets:
                written = (
                    isinstance(target_, ast.Attribute) and target_.attr == "provision_state"
                ) or (
                    isinstance(target_, ast.Subscript)
                    and isinstance(target_.slice, ast.Constant)
                    and "provision_state" in str(target_.slice.value)
                )
                if written and not _called(node.value, _HELPERS):
                    yield node.lineno


def _is_column_key(key: ast.expr | None) -> bool:
    return isinstance(key, ast.Constant) and key.value == "provision_state"


def _db_modules() -> list[Path]:
    return sorted((REPO / "conductor" / "db").glob("*.py"))


def test_no_db_module_writes_a_provision_state_around_the_table() -> None:
    found = [
        f"{path.relative_to(REPO)}:{line}"
        for path in _db_modules()
        for line in _unruled_writes(path.read_text())
    ]
    assert found == []


def test_every_event_is_written_by_the_database_layer() -> None:
    named = {
        node.attr
        for path in _db_modules()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "NodeEvent"
    }
    assert named == {event.name for event in Event}


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        ("update(t).values(provision_state=ProvisionState.ACTIVE.value)\n", [1]),
        ("update(t).values(provision_state=provision_value(NodeEvent.DEPLOYED))\n", []),
        ("update(t).values({'provision_state': row.provision_state})\n", [1]),
        ("row = {'provision_state': 'available'}\n", [1]),
        ("row = {'provision_state': provision_value(NodeEvent.CREATE, s)}\n", []),
        ("listed = {'provision_state': row.provision_state}\n", []),
        ("params['new_provision_state'] = provision\n", [1]),
        ("params['new_provision_state'] = provision_value(NodeEvent.REPORT, p)\n", []),
        ("row.provision_state = 'error'\n", [1]),
        ("update(t).where(t.c.provision_state == ProvisionState.AVAILABLE.value)\n", [1]),
        ("update(t).where(*provision_guard(t.c.provision_state, NodeEvent.ALLOCATE))\n", []),
        ("select(t).where(t.c.provision_state == ProvisionState.ERROR.value)\n", []),
        (
            "F = (t.c.provision_state == ProvisionState.AVAILABLE.value,)\nupdate(t).where(*F)\n",
            [2],
        ),
        ("Node(provision_state=ProvisionState(row.provision_state))\n", []),
    ],
)
def test_the_scan_finds_a_write_around_the_table(source: str, lines: list[int]) -> None:
    assert list(_unruled_writes(source)) == lines
