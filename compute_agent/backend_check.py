# SPDX-License-Identifier: Apache-2.0
"""Whether this agent reaches its back end (Ironic): capability ``backend`` of its entry.

An agent that cannot reach Ironic keeps its ring share -- Ironic is shared
by every agent, so moving nodes would not help -- but the operator must see
it: ``fleet check`` reports ``BACKEND-UNREACHABLE`` and ``fleet status``
says why, from what each agent announces in its group entry (the reason,
or ``None`` when it reaches its back end).

The driver judges (:meth:`~compute_agent.drivers.base.ComputeDriver.backend_problem`):
every request it makes counts, and an idle driver probes, so an agent with
no work still finds a hung Ironic within its request timeout.  The probe
may block that long, so it runs on a thread of its own, never on the
serving check's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from conductor.common.exception import first_line
from conductor.common.repeated_failure import RepeatedFailure
from hashring.membership import Membership

__all__ = ["CAPABILITY", "BackendCheck"]

LOG = logging.getLogger(__name__)

#: The capability of an agent's group entry: why it cannot reach its back end, or None.
CAPABILITY = "backend"


class BackendCheck:
    """Asks *problem* every *interval* seconds and announces a change."""

    def __init__(
        self,
        host: str,
        problem: Callable[[], str | None],
        membership: Membership,
        *,
        interval: float,
    ) -> None:
        self._host = host
        self._problem = problem
        self._membership = membership
        self._interval = interval
        # A new process's entry says nothing: fine until a problem is found.
        self._announced: str | None = None
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._failures = RepeatedFailure(
            LOG,
            "Agent %s: checking its back end failed: %s",
            "Agent %s: checking its back end failed again: %s",
            "Agent %s: checking its back end works again",
            host,
        )

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._loop, name=f"backend-check-{self._host}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop checking; a probe in flight is not waited for (it ends by its timeout)."""
        self._stopped.set()

    def _loop(self) -> None:
        while not self._stopped.wait(self._interval):
            self.check()

    def check(self) -> None:
        """Ask the driver and announce what changed (one step of the loop)."""
        try:
            problem = self._problem()
        except Exception as exc:  # a bug in a driver: say it (once), keep checking
            self._failures.failed(first_line(exc), logging.ERROR, exc_info=True)
            return
        self._failures.worked()
        if problem == self._announced or self._stopped.is_set():
            return
        # The driver's own client said the outage (one WARNING, one INFO):
        # this only tells the peers and the conductors.
        if self._membership.announce(CAPABILITY, problem):
            self._announced = problem
