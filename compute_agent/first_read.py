# SPDX-License-Identifier: Apache-2.0
"""When an agent reads its first inventory: once its peers stopped joining.

In a cold start the agents start within seconds of each other.  An agent
that read its share at once would read the share of the ring it sees at
that moment -- the whole fleet, for the first one up -- claim it, and hand
most of it on again as the others appear: rows read and claims made for
nothing, and hand-overs that hold the ring's convergence back.  Waiting
until the group has not changed for a moment (and never longer than a
bound) makes each agent read and claim its share of the ring the cold
start ends with.

A lone start or restart sees its peers in its first view and does not
wait: only a change of the peers *after* that first view starts the
quiet period, and only the first read ever waits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from hashring.membership import MembershipView

__all__ = ["FirstReadSettle"]


class FirstReadSettle:
    """Tells the reconcile loop how long its first inventory read waits.

    :param host: this agent (its own appearance in a view is no change)
    :param quiet: seconds the peers must stay the same
    :param limit: seconds after construction (the agent's start) after which
        the first read waits no more, whatever the peers do
    """

    def __init__(
        self,
        host: str,
        *,
        quiet: float,
        limit: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._host = host
        self._quiet = quiet
        self._clock = clock
        self._deadline = clock() + limit
        self._lock = threading.Lock()
        self._peers: frozenset[str] | None = None
        self._changed_at: float | None = None
        self._done = False

    def saw(self, view: MembershipView) -> None:
        """Note a view of the group (the membership's change callback)."""
        peers = frozenset(view.members) - {self._host}
        with self._lock:
            if self._peers is not None and peers != self._peers:
                self._changed_at = self._clock()
            self._peers = peers

    def wait(self) -> float:
        """Seconds the first read should still wait; 0.0 from then on."""
        with self._lock:
            if self._done:
                return 0.0
            now = self._clock()
            remaining = 0.0 if self._changed_at is None else self._changed_at + self._quiet - now
            remaining = min(remaining, self._deadline - now)
            if remaining <= 0:
                self._done = True
                return 0.0
            return remaining
