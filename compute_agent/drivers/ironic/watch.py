# SPDX-License-Identifier: Apache-2.0
"""One action of the Ironic driver following one node: reads, writes and waits.

:class:`Watch` polls Ironic for a node's transition, repeats a write Ironic
answers "not now" (locked by its own task, unreachable), and keeps the
action's deadline, which Ironic's progress pushes back.  :class:`IronicLink`
is what every watch of one driver shares: the client, the poll intervals,
the agent's stop, and the threads inside a request when it stops.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, TypeVar

from compute_agent.drivers.base import ActionContext, ProgressCallback
from conductor.common.exception import ActionAbandoned, DriverError, ServiceUnavailable
from conductor.common.ironic import states
from conductor.common.ironic.client import BaremetalClient, IronicNode, IronicNodeLocked

__all__ = ["IronicLink", "Watch", "failure"]

LOG = logging.getLogger(__name__)

#: Seconds a node read failed without a reason is read again for Ironic's
#: reason: its periodic timeout checks (a deploy's callback, a cleaning's
#: wait) save the failed state first and the reason in a second save, from a
#: worker they spawn; a fault without the reason tells the user nothing.
_REASON_WITHIN: Final = 5.0

_T = TypeVar("_T")


class IronicLink:
    """The driver's Ironic as its watches share it (module docstring)."""

    def __init__(
        self, client: BaremetalClient, *, poll_interval: float, poll_max_interval: float
    ) -> None:
        self.client = client
        self.poll_interval = poll_interval
        self.poll_max_interval = poll_max_interval
        #: Set when the agent stops: every wait ends at once.
        self.stopping = threading.Event()
        self._requesting: set[int] = set()  # action threads inside a request
        self._requesting_lock = threading.Lock()

    def threads_left_waiting(self) -> frozenset[int]:
        """The threads still inside a request to Ironic once the agent stops."""
        if not self.stopping.is_set():
            return frozenset()
        with self._requesting_lock:
            return frozenset(self._requesting)

    @contextlib.contextmanager
    def requesting_now(self) -> Iterator[None]:
        """Mark the calling thread as inside a request to Ironic."""
        ident = threading.get_ident()
        with self._requesting_lock:
            self._requesting.add(ident)
        try:
            yield
        finally:
            with self._requesting_lock:
                self._requesting.discard(ident)


class Watch:
    """One action following one node in Ironic: reads, writes and waits.

    Every wait is a short, doubling poll that ends at once when the agent
    stops (:class:`ActionAbandoned`).  ``progress`` (if given) is called
    before every read and write that follows a wait: it raises as soon as
    the agent may no longer act on the node, so an action it lost stops
    here, touching nothing.  The deadline is ``timeout`` seconds after
    Ironic last changed the node's provision state (``provision_updated_at``):
    Ironic's progress keeps it off.
    """

    def __init__(
        self,
        link: IronicLink,
        ctx: ActionContext,
        action: str,
        timeout: float,
        progress: ProgressCallback | None,
    ) -> None:
        self.ctx = ctx
        self._link = link
        self._ironic = link.client
        self._action = action
        self._timeout = timeout
        self._progress = progress
        self._deadline = time.monotonic() + timeout
        self._delay = link.poll_interval
        self._last: tuple[str | None, str | None] | None = None

    # -- reads -------------------------------------------------------------------

    def read(self, *, following: bool = False) -> IronicNode:
        """The node now; an unreachable Ironic is waited for (until the deadline).

        :param following: a read of a transition being followed: the
            agent's fence is checked first (``progress``)
        """
        while True:
            if following and self._progress is not None:
                self._progress(self._state_name())
            following = True  # a read after a wait checks it too
            try:
                with self._link.requesting_now():
                    found = self._ironic.get_node(self.ctx.node_uuid, action=self._action)
            except ServiceUnavailable as exc:
                self._check_deadline(f"Ironic unreachable: {exc.reason}")
                self.pause()
                continue
            self._moved(found)
            return found

    def with_reason(self, found: IronicNode) -> IronicNode:
        """*found*, or a later read of it that carries Ironic's reason
        (``last_error``) for its failed state (:data:`_REASON_WITHIN`)."""
        until = time.monotonic() + _REASON_WITHIN
        while (
            found.provision_state in states.FAILED
            and not found.last_error
            and time.monotonic() < until
        ):
            if self._link.stopping.wait(self._link.poll_interval):
                raise ActionAbandoned(self.ctx.node_uuid, self._action)
            found = self.read(following=True)
        return found

    def until(self, done: Callable[[IronicNode], bool]) -> IronicNode:
        """Read until ``done(node)``; that last read."""
        while True:
            found = self.read(following=True)
            if done(found):
                return found
            self._check_deadline(failure(found, "still"))
            self.pause()

    def until_at_rest(self) -> IronicNode:
        """Read until Ironic's transition is over (:func:`states.in_transition`)."""
        return self.until(lambda n: not states.in_transition(n.provision_state))

    # -- writes ------------------------------------------------------------------

    def call(self, write: Callable[..., _T], *args: object, **kwargs: object) -> _T:
        """One write, repeated while Ironic is locked by its own task or unreachable.

        Both are Ironic saying "not now": the same request succeeds once its
        task ends or it answers again.  A refusal retrying cannot fix (a
        4xx, the claim of another instance) is raised at once.
        """
        retry = False
        while True:
            if retry and self._progress is not None:
                self._progress(self._state_name())
            retry = True
            try:
                with self._link.requesting_now():
                    return write(*args, **kwargs)
            except IronicNodeLocked as exc:
                LOG.debug(
                    "Ironic node %s (instance %s) locked: %s; retrying",
                    self.ctx.node_uuid,
                    self.ctx.instance_uuid,
                    exc,
                )
                self._check_deadline(f"locked in Ironic: {exc}")
            except ServiceUnavailable as exc:
                self._check_deadline(f"Ironic unreachable: {exc.reason}")
            self.pause()

    def request(
        self, found: IronicNode, target: str, *, configdrive: Mapping[str, Any] | None = None
    ) -> IronicNode:
        """Ask Ironic for provision *target* (with a config drive, for
        ``active``); the node once that transition is over."""
        before = (found.provision_state, found.provision_updated_at)
        extra: dict[str, Any] = {} if configdrive is None else {"configdrive": configdrive}
        try:
            self.call(
                self._ironic.set_provision_state,
                self.ctx.node_uuid,
                target,
                action=self._action,
                **extra,
            )
        except DriverError:
            # A request that timed out may have been done all the same: its
            # retry is then refused (400), the node being past the state the
            # target applies to.  A node that moved since was taken: the
            # caller reads where it is now, not a failure.
            moved = self.read()
            if (moved.provision_state, moved.provision_updated_at) == before:
                raise
            LOG.info(
                "Ironic node %s (instance %s): %s refused, the node moved on meanwhile "
                "(%s -> %s): an earlier request of it was taken",
                self.ctx.node_uuid,
                self.ctx.instance_uuid,
                target,
                before[0],
                moved.provision_state,
            )
        self._delay = self._link.poll_interval
        # Ironic moves the node before it answers 202; a node that still
        # shows what it showed before has not yet been picked up.
        return self.until(
            lambda n: (
                (n.provision_state, n.provision_updated_at) != before
                and not states.in_transition(n.provision_state)
            )
        )

    # -- waiting -------------------------------------------------------------------

    def pause(self) -> None:
        """Sleep the next poll interval; :class:`ActionAbandoned` if the agent stops."""
        if self._link.stopping.wait(self._delay):
            raise ActionAbandoned(self.ctx.node_uuid, self._action)
        self._delay = min(self._delay * 2, self._link.poll_max_interval)

    def _moved(self, found: IronicNode) -> None:
        """Ironic changed the node since the last read: progress, the deadline moves."""
        now = (found.provision_state, found.provision_updated_at)
        if now == self._last:
            return
        if self._last is not None and found.provision_state != self._last[0]:
            LOG.debug(
                "Ironic node %s (instance %s): %s -> %s",
                self.ctx.node_uuid,
                self.ctx.instance_uuid,
                self._last[0],
                found.provision_state,
            )
            self._delay = self._link.poll_interval
        self._last = now
        self._deadline = time.monotonic() + self._timeout

    def _check_deadline(self, what: str) -> None:
        if time.monotonic() >= self._deadline:
            raise DriverError(
                self.ctx.node_uuid,
                self._action,
                f"{what}; no progress in Ironic for {self._timeout:.0f} s",
            )

    def _state_name(self) -> str:
        return (self._last[0] if self._last else None) or "waiting"


def failure(found: IronicNode, still: str = "") -> str:
    """Ironic's state and its own reason, for the instance's fault."""
    state = f"{still} {found.provision_state}" if still else found.provision_state
    return f"Ironic shows the node {state}: {found.last_error or 'no error'}"
