# SPDX-License-Identifier: Apache-2.0
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

    building | active | stopped | error | deleting ──DELETE──> deleting/deleting
    deleting ──TORN_DOWN──> deleted        deleting ──TEARDOWN_FAILED──> error

The power and lifecycle verbs (a user's reboot, stop, start, rebuild) run
on an instance that stays ``active`` or ``stopped``: the verb sets the
task state (the action in flight, which a takeover's new owner finishes
from the record), the owner's answer ends it::

    active ──REBOOT / REBOOT_HARD──> active/rebooting(_hard) ──POWERED_ON──> active
    active ──STOP──> active/powering-off ──POWERED_OFF──> stopped
    stopped ──START──> stopped/powering-on ──POWERED_ON──> active
    active | stopped ──REBUILD──> (same)/rebuilding ──REBUILT──> active
    any of these in flight ──ACTION_FAILED──> the vm_state it was in, no task

The back end's power is the truth (as Nova's power-state sync): an idle
``active`` instance whose node is found powered off outside ringfleet (an
operator in Ironic, a shutdown from inside the OS) is ``stopped``, so that
``start`` works::

    active (no task) ──FOUND_OFF──> stopped

A ``stopped`` instance found powered on is only reported
(:mod:`conductor.power_sync` says why).

A verb may start only while no action runs, or while the same one runs:
issuing it again routes it again (the operator's way out of an action
stuck on a dead agent, see ``fleet check``); hard reboot also takes over
a soft one, as in Nova.  Those rows carry ``tasks``, the task states the
event may happen in, checked with the ``vm_state`` by the same
compare-and-swap; a row without ``tasks`` ignores the task state.
A failed action keeps the instance where it was (its ``fault`` says why)
rather than ``error``: the node's power state shows what the hardware did,
and the user may issue the verb again.

Each verb's API action, policy rule, CLI command, agent call and
notification are in the verb table beside this one,
:mod:`conductor.common.verbs`.

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
    "ACTION_TASKS",
    "TRANSITIONS",
    "VERBS",
    "Event",
    "State",
    "Transition",
    "can",
    "sources",
    "target",
    "task_sources",
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
    #: A user asked for a soft reboot (the OS is asked to restart).
    REBOOT = "reboot"
    #: A user asked for a hard reboot (power cycle).
    REBOOT_HARD = "reboot_hard"
    #: A user asked to power the instance off.
    STOP = "stop"
    #: A user asked to power a stopped instance on.
    START = "start"
    #: A user asked to re-image the instance on its node.
    REBUILD = "rebuild"
    #: The owner reports the node powered on (a reboot or start is done).
    POWERED_ON = "powered_on"
    #: The owner reports the node powered off (a stop is done).
    POWERED_OFF = "powered_off"
    #: The owner reports the rebuild done.
    REBUILT = "rebuilt"
    #: The action in flight failed for good: the task ends, the state stays.
    ACTION_FAILED = "action_failed"
    #: The back end shows the idle instance's node powered off, by no
    #: action of ringfleet's (:mod:`conductor.power_sync`).
    FOUND_OFF = "found_off"


@dataclasses.dataclass(frozen=True)
class State:
    """Where an instance is: its ``vm_state`` and, while work runs, its ``task_state``.

    ``vm_state`` is ``None`` only in the target of an event that keeps the
    instance's ``vm_state`` (:attr:`Event.REBUILD`, :attr:`Event.ACTION_FAILED`).
    """

    vm_state: VmState | None
    task_state: TaskState | None = None


@dataclasses.dataclass(frozen=True)
class Transition:
    """``event`` may happen while the instance is in one of ``sources``; it leads to ``target``.

    ``sources`` is empty for :attr:`Event.REQUEST` (the instance does not
    exist before it).  ``tasks``, when set, are the task states (``None``:
    no task) the event may happen in too; unset, any task state will do.
    """

    event: Event
    sources: frozenset[VmState]
    target: State
    tasks: frozenset[TaskState | None] | None = None


def _transitions(*rows: Transition) -> Mapping[Event, Transition]:
    return {row.event: row for row in rows}


_BUILDING = frozenset({VmState.BUILDING})
_SCHEDULING = State(VmState.BUILDING, TaskState.SCHEDULING)
_ACTIVE = frozenset({VmState.ACTIVE})
_POWERED = frozenset({VmState.ACTIVE, VmState.STOPPED})

#: The task states of the power and lifecycle verbs: an action in flight on
#: an ``active`` or ``stopped`` instance, routed to its node's owner.
ACTION_TASKS: frozenset[TaskState] = frozenset(
    {
        TaskState.REBOOTING,
        TaskState.REBOOTING_HARD,
        TaskState.POWERING_OFF,
        TaskState.POWERING_ON,
        TaskState.REBUILDING,
    }
)


def _idle_or(*tasks: TaskState) -> frozenset[TaskState | None]:
    """No action in flight, or one of *tasks* (issuing a verb again routes it again)."""
    return frozenset({None, *tasks})


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
        # A delete wins over a power action in flight (whose answer then
        # finds the instance deleting and changes nothing).
        frozenset(
            {VmState.BUILDING, VmState.ACTIVE, VmState.STOPPED, VmState.ERROR, VmState.DELETING}
        ),
        State(VmState.DELETING, TaskState.DELETING),
    ),
    Transition(Event.TORN_DOWN, frozenset({VmState.DELETING}), State(VmState.DELETED)),
    Transition(Event.TEARDOWN_FAILED, frozenset({VmState.DELETING}), State(VmState.ERROR)),
    Transition(
        Event.REBOOT,
        _ACTIVE,
        State(VmState.ACTIVE, TaskState.REBOOTING),
        _idle_or(TaskState.REBOOTING),
    ),
    Transition(
        Event.REBOOT_HARD,
        _ACTIVE,
        State(VmState.ACTIVE, TaskState.REBOOTING_HARD),
        # As in Nova, a hard reboot takes over a soft one that hangs.
        _idle_or(TaskState.REBOOTING, TaskState.REBOOTING_HARD),
    ),
    Transition(
        Event.STOP,
        _ACTIVE,
        State(VmState.ACTIVE, TaskState.POWERING_OFF),
        _idle_or(TaskState.POWERING_OFF),
    ),
    Transition(
        Event.START,
        frozenset({VmState.STOPPED}),
        State(VmState.STOPPED, TaskState.POWERING_ON),
        _idle_or(TaskState.POWERING_ON),
    ),
    Transition(
        Event.REBUILD, _POWERED, State(None, TaskState.REBUILDING), _idle_or(TaskState.REBUILDING)
    ),
    Transition(
        Event.POWERED_ON,
        _POWERED,
        State(VmState.ACTIVE),
        frozenset({TaskState.REBOOTING, TaskState.REBOOTING_HARD, TaskState.POWERING_ON}),
    ),
    Transition(
        Event.POWERED_OFF, _ACTIVE, State(VmState.STOPPED), frozenset({TaskState.POWERING_OFF})
    ),
    Transition(Event.REBUILT, _POWERED, State(VmState.ACTIVE), frozenset({TaskState.REBUILDING})),
    Transition(Event.ACTION_FAILED, _POWERED, State(None), frozenset(ACTION_TASKS)),
    # Only while no action runs: a verb in flight owns the power (its answer
    # decides), and a delete or a rebuild moves the instance on anyway.
    Transition(Event.FOUND_OFF, _ACTIVE, State(VmState.STOPPED), frozenset({None})),
)

#: The verb that starts each action, by its task state (its name in messages
#: and the event a re-route after a takeover repeats).
VERBS: Mapping[TaskState, Event] = {
    TaskState.REBOOTING: Event.REBOOT,
    TaskState.REBOOTING_HARD: Event.REBOOT_HARD,
    TaskState.POWERING_OFF: Event.STOP,
    TaskState.POWERING_ON: Event.START,
    TaskState.REBUILDING: Event.REBUILD,
}


def task_sources(event: Event) -> tuple[str | None, ...] | None:
    """The ``task_state`` values *event* may happen in (``None`` in it: no task);
    ``None`` when any will do."""
    tasks = TRANSITIONS[event].tasks
    if tasks is None:
        return None
    return tuple(sorted((t.value if t is not None else None for t in tasks), key=str))


def sources(event: Event) -> tuple[str, ...]:
    """The ``vm_state`` values *event* may happen in (a compare-and-swap condition)."""
    return tuple(sorted(state.value for state in TRANSITIONS[event].sources))


def target(event: Event) -> State:
    """Where *event* leads, from any of its sources."""
    return TRANSITIONS[event].target


def can(event: Event, current: VmState, task: TaskState | None = None) -> bool:
    """Whether *event* may happen to an instance in *current* (with *task* in flight)."""
    row = TRANSITIONS[event]
    return current in row.sources and (row.tasks is None or task in row.tasks)


def transition(event: Event, current: VmState | None, task: TaskState | None = None) -> State:
    """Where *event* takes an instance in *current* (``None``: not stored yet),
    with *task* in flight; a target ``vm_state`` of ``None`` keeps *current*.

    :raises InvalidTransition: when the table has no such transition
    """
    row = TRANSITIONS[event]
    if (
        (current is None and row.sources)
        or (current is not None and current not in row.sources)
        or (current is not None and row.tasks is not None and task not in row.tasks)
    ):
        state = None if current is None else current.value
        if current is not None and task is not None:
            state = f"{state}/{task.value}"
        raise InvalidTransition(
            event=event.value,
            state=state,
            allowed=sorted(s.value for s in row.sources),
        )
    if row.target.vm_state is None and current is not None:
        return State(current, row.target.task_state)
    return row.target
