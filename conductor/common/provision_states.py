# SPDX-License-Identifier: Apache-2.0
"""The node's provision-state machine: every state a node can be in, and how it moves.

Declared once, here, as a table (after Ironic's ``ironic/common/states.py``,
beside :mod:`conductor.common.instance_states`): an *event* names what
happened to a node (a build allocated it, its owner reported the deploy
done, an attempt failed, the back end shows it cleaning), the table says
in which ``provision_state`` it may happen and which state it leads to.
Nothing else writes a node's provision state: the database layer's writes
name an :class:`Event`, take their compare-and-swap condition (the
sources) and the value they write (the target) from this table.

The life of a node, in events::

    CREATE ──> enroll | manageable | available | cleaning | error
                  ^___________ MIRROR (between idle states) ___________|

    available ──ALLOCATE──> deploying ──DEPLOYED──> active
    (node hosting the instance) ──GIVE_BACK / TORN_DOWN / ATTEMPT_FAILED_CLEAN──> available
    (node hosting the instance) ──ATTEMPT_FAILED──> error
    any ──REPORT──> what the node's owner reports

Most events that end a build's hold on a node happen in *any* state
(:data:`ANY`): what guards them is the instance on the node and the
reporting agent's fence (:func:`conductor.db.ownership.holds`), never the
node's state, which an owner may have reported changed meanwhile.  Such an
event adds no condition on the state to its write.

Three events do not choose their target: the writer names it, and the
table bounds it (:attr:`Transition.targets`).  :attr:`Event.CREATE` stores
a node in the state its creator gave (a client's import: enroll, manageable
or available; the Ironic sync's: any idle state); :attr:`Event.MIRROR`
moves a node hosting nothing between idle states, as the back end shows
it; :attr:`Event.REPORT` stores what the node's owner reports.

A writer asking for a transition the table does not hold (a state it
*knows* the node is in, or a target the event cannot lead to) gets
:class:`InvalidProvisionTransition`: a programming error, nothing is
written.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Final

from conductor.common.exception import InvalidTransition, RingfleetError
from conductor.common.objects import ProvisionState

__all__ = [
    "ANY",
    "IDLE",
    "TRANSITIONS",
    "Event",
    "InvalidProvisionTransition",
    "Transition",
    "can",
    "sources",
    "target",
    "transition",
]

_PS = ProvisionState


class Event(enum.StrEnum):
    """What happened to a node (the only way its provision state changes)."""

    #: The node was stored: a client's create or import, or the Ironic sync's.
    CREATE = "create"
    #: A build reserved the node (one instance per node: invariant 7).
    ALLOCATE = "allocate"
    #: The node's owner reported the deploy done (also on an instance deleted
    #: meanwhile: the node is deployed, and its teardown follows).
    DEPLOYED = "deployed"
    #: The conductor undid its own allocation (the node's owner is not live).
    GIVE_BACK = "give_back"
    #: The node is free of its instance (torn down, or never deployed).
    TORN_DOWN = "torn_down"
    #: A build attempt on the node failed and the node was cleaned.
    ATTEMPT_FAILED_CLEAN = "attempt_failed_clean"
    #: A build attempt on the node failed (or timed out): its state is unknown.
    ATTEMPT_FAILED = "attempt_failed"
    #: The back end (Ironic) shows an idle node hosting nothing in another
    #: idle state (the inventory sync).
    MIRROR = "mirror"
    #: The node's owner reported a provision state (fenced by its epoch).
    REPORT = "report"


#: Every state: the event adds no condition on the node's state.
ANY: Final[frozenset[ProvisionState]] = frozenset(ProvisionState)
#: The states of a node no build holds, between which the back end may move
#: it; ``deploying``, ``active`` and ``deleting`` belong to builds and teardowns.
IDLE: Final[frozenset[ProvisionState]] = frozenset(
    {_PS.ENROLL, _PS.MANAGEABLE, _PS.AVAILABLE, _PS.CLEANING, _PS.ERROR}
)


@dataclasses.dataclass(frozen=True)
class Transition:
    """``event`` may happen while the node is in one of ``sources``; it leads to
    one of ``targets``.

    ``sources`` is empty for :attr:`Event.CREATE` (the node does not exist
    before it), :data:`ANY` for an event the node's state does not guard.
    ``targets`` holds one state, or, for an event whose writer names the
    state (what was given or observed), the states it may name.
    """

    event: Event
    sources: frozenset[ProvisionState]
    targets: frozenset[ProvisionState]


def _transitions(*rows: Transition) -> Mapping[Event, Transition]:
    return {row.event: row for row in rows}


def _to(state: ProvisionState) -> frozenset[ProvisionState]:
    return frozenset({state})


#: The table: every transition a node can make, by event.
TRANSITIONS: Final[Mapping[Event, Transition]] = _transitions(
    Transition(Event.CREATE, frozenset(), IDLE),
    Transition(Event.ALLOCATE, _to(_PS.AVAILABLE), _to(_PS.DEPLOYING)),
    Transition(Event.DEPLOYED, ANY, _to(_PS.ACTIVE)),
    Transition(Event.GIVE_BACK, ANY, _to(_PS.AVAILABLE)),
    Transition(Event.TORN_DOWN, ANY, _to(_PS.AVAILABLE)),
    Transition(Event.ATTEMPT_FAILED_CLEAN, ANY, _to(_PS.AVAILABLE)),
    Transition(Event.ATTEMPT_FAILED, ANY, _to(_PS.ERROR)),
    Transition(Event.MIRROR, IDLE, IDLE),
    Transition(Event.REPORT, ANY, ANY),
)


class InvalidProvisionTransition(InvalidTransition):
    """A node was asked to move where its provision-state machine does not go.

    A programming error, never a user's (see :data:`TRANSITIONS`).  Nothing
    was written.  ``state``: the node's state (``None``: not stored yet, or
    not known to the writer); ``wanted``: the target refused (``""``: none
    named, for an event with several); ``allowed``: the event's sources, or
    its targets when ``wanted`` is given.
    """

    def __init__(
        self, *, event: str, state: str | None, allowed: list[str], wanted: str | None = None
    ) -> None:
        self.event = event
        self.state = state
        self.allowed = allowed
        self.wanted = wanted
        if wanted is None:
            message = (
                f"node event {event!r} is not allowed from state {state!r} "
                f"(only from {', '.join(allowed) or 'a node not stored yet'})"
            )
        elif not wanted:
            message = f"node event {event!r} needs its target named (one of {', '.join(allowed)})"
        else:
            message = (
                f"node event {event!r} cannot lead to {wanted!r} (only to {', '.join(allowed)})"
            )
        RingfleetError.__init__(
            self, message, event=event, state=state, allowed=allowed, wanted=wanted
        )


def sources(event: Event) -> tuple[str, ...] | None:
    """The ``provision_state`` values *event* may happen in (a compare-and-swap
    condition); ``None`` when any will do (no condition); empty for
    :attr:`Event.CREATE`."""
    row = TRANSITIONS[event]
    if row.sources == ANY:
        return None
    return tuple(sorted(state.value for state in row.sources))


def target(event: Event, wanted: str | None = None) -> ProvisionState:
    """Where *event* leads: its one target, or *wanted*, which must be one of
    its targets (required when it has several).

    :raises InvalidProvisionTransition: when *wanted* is not a target of *event*
    """
    targets = TRANSITIONS[event].targets
    if wanted is None and len(targets) == 1:
        [only] = targets
        return only
    if not wanted or wanted not in targets:  # a str equals its ProvisionState member
        raise InvalidProvisionTransition(
            event=event.value,
            state=None,
            allowed=sorted(t.value for t in targets),
            wanted=wanted or "",
        )
    return ProvisionState(wanted)


def can(event: Event, current: ProvisionState | None, wanted: str | None = None) -> bool:
    """Whether *event* may take a node in *current* (``None``: not stored yet)
    to *wanted* (``None``: the event's one target)."""
    row = TRANSITIONS[event]
    if not (current in row.sources if current is not None else not row.sources):
        return False
    return (len(row.targets) == 1) if wanted is None else wanted in row.targets


def transition(
    event: Event, current: ProvisionState | None, wanted: str | None = None
) -> ProvisionState:
    """Where *event* takes a node in *current* (``None``: not stored yet):
    its one target, or *wanted* among its targets.

    :raises InvalidProvisionTransition: when the table has no such transition
    """
    row = TRANSITIONS[event]
    if (current is None and row.sources) or (current is not None and current not in row.sources):
        raise InvalidProvisionTransition(
            event=event.value,
            state=None if current is None else current.value,
            allowed=sorted(s.value for s in row.sources),
        )
    return target(event, wanted)
