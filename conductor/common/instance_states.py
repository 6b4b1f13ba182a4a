"""The instance state machine: every state an instance can be in, and how it moves.

Declared once, here, as a table (after Ironic's ``ironic/common/states.py``):
an *event* names what happened (the scheduler allocated a node, the owner
reported a deploy, a user asked for a delete), the table says from which
``vm_state`` it may happen and which ``(vm_state, task_state)`` it leads to.
Nothing else writes an instance's state: the database layer's writes take
an :class:`Event` and derive their compare-and-swap condition (the sources)
and their values (the target) from this table, so a transition the table
does not hold cannot be written.

The story of one build, in events::

    REQUEST ──> building/scheduling ──ALLOCATE──> building/spawning ──DEPLOYED──> active
                   ^      |                          |      |
                   |      +──────FAIL──> error <──FAIL──+      |
                   +──────RESCHEDULE / GIVE_BACK──────────────+

    building | active | error | deleting ──DELETE──> deleting/deleting
    deleting ──TORN_DOWN──> deleted        deleting ──TEARDOWN_FAILED──> error

``deleted`` is final.  A compare-and-swap that finds the instance in no
source state changes nothing and says so (a late report lost a race); a
caller asking for an event from a state it *knows* the instance is in, where
the table has no such transition, gets :class:`InvalidTransition`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from conductor.common.exception import InvalidTransition
from conductor.common.objects import TaskState, VmState

__all__ = [
    "TRANSITIONS",
    "Event",
    "State",
    "Transition",
    "can",
    "sources",
    "target",
    "transition",
]


class Event(enum.StrEnum):
    """What happened to an instance (the only way its state changes)."""

    #: A build request was stored: the instance waits for a node.
    REQUEST = "request"
    #: The scheduler reserved a node for it: the build is routed to its owner.
    ALLOCATE = "allocate"
    #: The conductor undid its own allocation (the node's owner is not live).
    GIVE_BACK = "give_back"
    #: The node's owner reported the deploy done.
    DEPLOYED = "deployed"
    #: An attempt failed (the owner's report, a refusal, the sweeper) and
    #: attempts remain: the build waits for another node.
    RESCHEDULE = "reschedule"
    #: The build gave up: no valid node, its last attempt failed, or bad input.
    FAIL = "fail"
    #: A user asked for a delete.
    DELETE = "delete"
    #: The node is free of it (torn down, or never deployed).
    TORN_DOWN = "torn_down"
    #: The owner could not tear the node down: someone must look.
    TEARDOWN_FAILED = "teardown_failed"


@dataclasses.dataclass(frozen=True)
class State:
    """Where an instance is: its ``vm_state`` and, while work runs, its ``task_state``."""

    vm_state: VmState
    task_state: TaskState | None = None


@dataclasses.dataclass(frozen=True)
class Transition:
    """``event`` may happen while the instance is in one of ``sources``; it leads to ``target``.

    ``sources`` is empty for :attr:`Event.REQUEST` (the instance does not
    exist before it).
    """

    event: Event
    sources: frozenset[VmState]
    target: State


def _transitions(*rows: Transition) -> Mapping[Event, Transition]:
    return {row.event: row for row in rows}


_BUILDING = frozenset({VmState.BUILDING})
_SCHEDULING = State(VmState.BUILDING, TaskState.SCHEDULING)

#: The table: every transition an instance can make, by event.
TRANSITIONS: Mapping[Event, Transition] = _transitions(
    Transition(Event.REQUEST, frozenset(), _SCHEDULING),
    Transition(Event.ALLOCATE, _BUILDING, State(VmState.BUILDING, TaskState.SPAWNING)),
    Transition(Event.GIVE_BACK, _BUILDING, _SCHEDULING),
    Transition(Event.DEPLOYED, _BUILDING, State(VmState.ACTIVE)),
    Transition(Event.RESCHEDULE, _BUILDING, _SCHEDULING),
    Transition(Event.FAIL, _BUILDING, State(VmState.ERROR)),
    Transition(
        Event.DELETE,
        # Deleting again is allowed: it routes the teardown again.
        frozenset({VmState.BUILDING, VmState.ACTIVE, VmState.ERROR, VmState.DELETING}),
        State(VmState.DELETING, TaskState.DELETING),
    ),
    Transition(Event.TORN_DOWN, frozenset({VmState.DELETING}), State(VmState.DELETED)),
    Transition(Event.TEARDOWN_FAILED, frozenset({VmState.DELETING}), State(VmState.ERROR)),
)


def sources(event: Event) -> tuple[str, ...]:
    """The ``vm_state`` values *event* may happen in (a compare-and-swap condition)."""
    return tuple(sorted(state.value for state in TRANSITIONS[event].sources))


def target(event: Event) -> State:
    """Where *event* leads, from any of its sources."""
    return TRANSITIONS[event].target


def can(event: Event, current: VmState) -> bool:
    """Whether *event* may happen to an instance in *current*."""
    return current in TRANSITIONS[event].sources


def transition(event: Event, current: VmState | None) -> State:
    """Where *event* takes an instance in *current* (``None``: not stored yet).

    :raises InvalidTransition: when the table has no such transition
    """
    row = TRANSITIONS[event]
    if (current is None and row.sources) or (current is not None and current not in row.sources):
        raise InvalidTransition(
            event=event.value,
            state=None if current is None else current.value,
            allowed=sorted(s.value for s in row.sources),
        )
    return row.target
