# SPDX-License-Identifier: Apache-2.0
"""The one way the conductor reaches a node's owner.

Every verb that must run on the agent owning a node -- a build's accept, a
delete's teardown, an instance action, an operator's node power verb, the
clean-up of an orphan claim -- is one :meth:`OwnerCalls.call`: the node's
``(owner, epoch)`` is read, that agent is called with it, and whatever
happened is one :class:`Reply`, its :class:`Outcome` decided here for every
verb alike:

``ACCEPTED``
    the owner took the work (or answered it);
``WAIT``
    the owner is not live, or is busy, stopping, unreachable or slow: the
    work stays stored and is tried again later (its reason said once, by
    :meth:`OwnerCalls.say_wait`, then at DEBUG until it changes);
``REFUSED``
    a refusal retrying cannot fix (the back end shows the node hosting
    another instance, bad input, a method the agent does not serve): the
    caller reschedules or fails the work with the reason, never retries it;
``MOOT``
    nothing left to do: the node no longer holds the work, or a call for the
    same work and owner epoch is in flight already (its answer ends it).

``NotOwner`` never reaches a caller: the claim moved meanwhile, so the node
is re-read and its new owner called at once, a few times.

The calls that must not hold their caller (a sender per agent for accepts,
actions waiting up to ``action_timeout`` for their end) run on
:class:`CallPool` lanes, started on first use: never before a fork.
"""

from __future__ import annotations

import enum
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import oslo_messaging as messaging

from conductor.common import exception as errors
from conductor.common import rpc
from conductor.common.exception import first_line
from conductor.common.objects import Node
from conductor.db import nodes
from conductor.db.engine import Database
from conductor.db.ownership import Fence
from conductor.fleet_view import FleetView
from conductor.lifecycle.outages import Outages

__all__ = [
    "CallPool",
    "Outcome",
    "OwnerCalls",
    "Reply",
    "WaitReasons",
    "outcome_of_error",
]

LOG = logging.getLogger(__name__)

_T = TypeVar("_T")

#: How many times ``NotOwner`` is answered by re-reading the node and calling again.
REROUTES = 3

#: Seconds after an agent's last failed call during which the scheduler
#: does not choose its nodes for new builds (work already there retries,
#: and its first answer ends the outage at once).
SKIP_S = 30.0


class Outcome(enum.Enum):
    """What became of one call to a node's owner (see the module docstring)."""

    ACCEPTED = "accepted"
    WAIT = "wait"
    REFUSED = "refused"
    MOOT = "moot"


@dataclass(frozen=True)
class Reply(Generic[_T]):
    """One call's outcome, with the node as last read and the owner last called."""

    outcome: Outcome
    node: Node
    #: The owner and epoch of the last call made (the node's, when none was made).
    fence: Fence
    answer: _T | None = None
    #: Why, for anything but ACCEPTED: one line, for a log line or a fault.
    reason: str = ""
    #: The error's name (``NodeNotBuildable``, ``NoSuchMethod``...), when there was one.
    error: str | None = None
    #: WAIT because the owner cannot take any work now (it was said once for
    #: all the work waiting on it: :class:`~conductor.lifecycle.outages.Outages`).
    outage: bool = False

    @property
    def untouched(self) -> bool:
        """The owner refused before touching the node (it does not serve the call)."""
        return self.error in rpc.NOT_SERVED


#: Refusals a later call can outlive: the owner is busy, stopping or cannot
#: reach its back end right now, or it stopped following an action.
_RETRYABLE: tuple[type[errors.RingfleetError], ...] = (
    errors.ServiceUnavailable,
    errors.ActionAbandoned,
)


def outcome_of_error(name: str) -> Outcome | None:
    """The outcome of an owner's refusal named *name*; None for ``NotOwner``.

    By the exception classes of :mod:`conductor.common.exception` (how an
    agent's refusal travels by name in a batch's reply, or as an
    unexpected remote error's type): see :func:`_outcome_of_class`;
    anything not ours -- a transport error, an unexpected remote error --
    waits.
    """
    if name in rpc.NOT_SERVED:
        return Outcome.REFUSED
    error = getattr(errors, name, None)
    if not isinstance(error, type) or not issubclass(error, errors.RingfleetError):
        return Outcome.WAIT
    return _outcome_of_class(error)


def _outcome_of_class(error: type[errors.RingfleetError]) -> Outcome | None:
    """A refusal retrying cannot fix is one of ours that is neither a
    conflict with the node's current use (busy) nor an unavailability."""
    if issubclass(error, errors.NotOwner):
        return None
    if issubclass(error, errors.NodeNotBuildable):
        return Outcome.REFUSED
    if issubclass(error, (errors.Conflict, *_RETRYABLE)):
        return Outcome.WAIT
    return Outcome.REFUSED


def _outcome(exc: Exception) -> Outcome | None:
    """The outcome of a call that raised *exc*; None for ``NotOwner``.

    An agent's own exception arrives as a subclass oslo.messaging makes of
    it (``NodeNotBuildable_Remote``): classed by what it is, not its name.
    """
    if isinstance(exc, errors.RingfleetError):
        return _outcome_of_class(type(exc))
    if isinstance(exc, messaging.RemoteError):
        return outcome_of_error(exc.exc_type or "")
    return Outcome.WAIT


def _is_outage(exc: Exception) -> bool:
    """Whether *exc* says the owner cannot take any work now, not only this
    piece: no answer, stopping or cut from its back end, transport trouble."""
    if isinstance(exc, (messaging.MessagingTimeout, errors.ServiceUnavailable)):
        return True
    return not isinstance(exc, (errors.RingfleetError, messaging.RemoteError))


def _error_name(exc: Exception) -> str:
    """The error's name: a remote error's type, one of ours without the
    suffix oslo.messaging gives the class it rebuilds it as."""
    if isinstance(exc, messaging.RemoteError):
        return exc.exc_type or type(exc).__name__
    return type(exc).__name__.removesuffix("_Remote")


def _reason(exc: Exception, owner: str) -> str:
    if isinstance(exc, messaging.MessagingTimeout):
        return f"no answer from {owner} in time ({first_line(exc)})"
    if isinstance(exc, errors.NodeNotBuildable) and exc.reason:
        return exc.reason  # rebuilt from its kwargs on this side: no traceback
    return first_line(exc)


class WaitReasons:
    """Why each waiting piece of work last waited.

    A cause is said at its level the first time, at DEBUG on every retry
    after: one line per cause, not one every 2 s.  Bounded: past *limit*
    keys it forgets them all (at worst a line said twice).
    """

    def __init__(self, limit: int = 10_000) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._why: dict[str, str] = {}

    def level(self, key: str, why: str, level: int = logging.INFO) -> int:
        """*level* the first time *key* waits for *why*, DEBUG after."""
        with self._lock:
            said = self._why.get(key) == why
            if len(self._why) >= self._limit:
                self._why.clear()
            self._why[key] = why
        return logging.DEBUG if said else level

    def forget(self, key: str) -> None:
        """*key* no longer waits: its next wait is said again."""
        with self._lock:
            self._why.pop(key, None)


class OwnerCalls:
    """Calls a node's owner, fenced by its epoch; see the module docstring."""

    def __init__(self, db: Database, fleet: FleetView, lanes: Mapping[str, int] = {}) -> None:
        self._db = db
        self._fleet = fleet
        self.waits = WaitReasons()
        #: Agents that cannot take work now: said once for all the work waiting.
        self.outages = Outages("Agent")
        self._lock = threading.Lock()
        # (work, owner, epoch) of every guarded call in flight: one at a time each.
        self._in_flight: set[tuple[Hashable, str, int]] = set()
        self._lanes = {name: CallPool(size, name) for name, size in lanes.items()}

    def call(
        self,
        subject: str,
        node: Node,
        send: Callable[[Fence, Node], _T],
        *,
        fence: Fence | None = None,
        holds: Callable[[Node], bool] | None = None,
        once_per: Hashable | None = None,
        attempts: int = REROUTES,
    ) -> Reply[_T]:
        """``send(fence, node)`` to *node*'s owner; its :class:`Reply`.

        *subject* names the work in the log ("Instance <uuid>").  *fence*: the
        owner and epoch to call first when the caller read them with the
        work (a build's allocation), else the node's.  After ``NotOwner`` the
        node is re-read; *holds* says whether it still holds the work (MOOT
        when not).  *once_per*: a key of the work; a second call for it and
        the same owner epoch while one is in flight is MOOT.
        """
        fence = fence or Fence(node.owner or "", node.owner_epoch)
        for _attempt in range(attempts):
            if not fence.owner or not self.is_live(fence.owner):
                who = fence.owner or "none"
                return Reply(Outcome.WAIT, node, fence, reason=f"its owner {who} is not live")
            try:
                answer = self._guarded(once_per, fence, functools.partial(send, fence, node))
            except _InFlight:
                return Reply(Outcome.MOOT, node, fence, reason="a call for it is in flight")
            except Exception as exc:
                outcome = _outcome(exc)
                if outcome is not None:
                    return self._refused(outcome, node, fence, exc)
                # A remote exception's text carries its traceback: first line only.
                LOG.info(
                    "%s: %s refused node %s at epoch %d (%s); re-reading",
                    subject,
                    fence.owner,
                    node.uuid,
                    fence.epoch,
                    first_line(exc),
                )
                node = nodes.get_node(self._db, node.uuid)
                fence = Fence(node.owner or "", node.owner_epoch)
                if holds is not None and not holds(node):
                    return Reply(Outcome.MOOT, node, fence, reason="the node no longer holds it")
                continue
            self.outages.answered(fence.owner)
            return Reply(Outcome.ACCEPTED, node, fence, answer=answer)
        return Reply(Outcome.WAIT, node, fence, reason="its owner kept changing")

    def _refused(self, outcome: Outcome, node: Node, fence: Fence, exc: Exception) -> Reply[Any]:
        """The reply to a refusal or failure; an owner that cannot take any
        work is said once for all the work waiting on it."""
        outage = outcome is Outcome.WAIT and _is_outage(exc)
        if outage:
            # The cause without what differs per call (a timeout's message id).
            timed_out = isinstance(exc, messaging.MessagingTimeout)
            self.outages.failed(
                fence.owner,
                "no answer in time" if timed_out else first_line(exc),
                "the work waits; new builds go to other agents meanwhile",
            )
        else:
            self.outages.answered(fence.owner)
        return Reply(
            outcome,
            node,
            fence,
            reason=_reason(exc, fence.owner),
            error=_error_name(exc),
            outage=outage,
        )

    def _guarded(self, key: Hashable | None, fence: Fence, send: Callable[[], _T]) -> _T:
        if key is None:
            return send()
        guard = (key, fence.owner, fence.epoch)
        with self._lock:
            if guard in self._in_flight:
                raise _InFlight
            self._in_flight.add(guard)
        try:
            return send()
        finally:
            with self._lock:
                self._in_flight.discard(guard)

    def unreachable(self) -> frozenset[str]:
        """The agents not to choose for new builds: their last call failed
        (no answer, stopping, transport trouble) within :data:`SKIP_S`, and
        none answered since."""
        return self.outages.failing(SKIP_S)

    def is_live(self, host: str) -> bool:
        try:
            return host in self._fleet.live_members()
        except errors.ServiceUnavailable:
            return True  # cannot tell: assume alive, never act as if it died

    def in_background(self, lane: str, call: Callable[..., None], *args: object) -> bool:
        """Run ``call(*args)`` on *lane*'s threads; False without such a lane,
        or once it is closed (the caller runs it itself, or keeps the record)."""
        pool = self._lanes.get(lane)
        return pool is not None and pool.submit(call, *args)

    def close(self, drain: Mapping[str, float] = {}) -> None:
        """Close every lane; *drain*: seconds a lane gets to finish what it was given."""
        for name, pool in self._lanes.items():
            pool.close(drain.get(name, 0.0))


class CallPool:
    """A few daemon threads running submitted calls, started on first use.

    Not a ``ThreadPoolExecutor``: its threads are joined at interpreter
    exit, and a call to an agent that died waits for its timeout (up to
    ``action_timeout``, 300 s): a stopping conductor must not wait for that
    beyond what it grants (:meth:`close`).
    """

    def __init__(self, size: int, name: str) -> None:
        if size < 0:
            raise ValueError(f"{name} senders must be >= 0, not {size}")
        self._size = size
        self._name = name
        self._calls: queue.SimpleQueue[tuple[Callable[..., None], tuple[object, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(self, call: Callable[..., None], *args: object) -> bool:
        """Run ``call(*args)`` on a pool thread; False once closed, or without threads."""
        with self._lock:
            if self._closed or not self._size:
                return False
            if not self._threads:  # never started before a fork
                self._threads = [
                    threading.Thread(target=self._run, name=f"{self._name}-{i}", daemon=True)
                    for i in range(self._size)
                ]
                for thread in self._threads:
                    thread.start()
            self._calls.put((call, args))
        return True

    def close(self, drain: float = 0.0) -> None:
        """Take no more calls; wait up to *drain* seconds for those given to end."""
        with self._lock:
            self._closed = True
            for _thread in self._threads:
                self._calls.put(None)  # after what was given: it runs first
            threads = list(self._threads)
        deadline = time.monotonic() + drain
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        left = sum(thread.is_alive() for thread in threads)
        if drain and left:
            LOG.warning(
                "%d %s threads still busy after %.0f s; not waited for", left, self._name, drain
            )

    def _run(self) -> None:
        while (item := self._calls.get()) is not None:
            call, args = item
            try:
                call(*args)
            except Exception:  # the calls log their own failures; never lose the thread
                LOG.exception("%s: a call failed", self._name)


class _InFlight(Exception):
    """A call for the same work and owner epoch is in flight."""
