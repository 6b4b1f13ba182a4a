# SPDX-License-Identifier: Apache-2.0
"""A graceful stop as steps, each with a deadline of its own.

A step that waits on a dependency that does not answer (a frozen broker
holding the RPC server's stop, a database that hangs a dispose) must not
eat the time of the steps after it: leaving the coordination group, the one
step that spares the fleet a takeover, would then never come.  Each step
runs on a daemon thread and is waited for up to its own limit, never past
what the stop's budget has left once the time reserved for the steps that
must always run is set aside.  A step cut short is said in one WARNING
naming it, and the stop goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["StopSteps"]

LOG = logging.getLogger(__name__)


class StopSteps:
    """The steps of one stop, within *budget* seconds (see the module docstring)."""

    def __init__(self, who: str, budget: float, *, reserve: float = 0.0) -> None:
        """*who* names the service in the log; *reserve*: seconds kept for
        the steps run with ``reserved=True`` (they may use it, others not)."""
        self._who = who
        self._deadline = time.monotonic() + budget
        self._reserve = reserve
        #: What the stop is doing now (named by the runner if its deadline passes).
        self.current = "starting to stop"
        #: The steps cut short, in order.
        self.cut: list[str] = []

    def left(self, *, reserved: bool = False) -> float:
        """Seconds a step may take now."""
        left = self._deadline - time.monotonic()
        return max(0.0, left if reserved else left - self._reserve)

    def run(
        self, name: str, step: Callable[[], object], limit: float, *, reserved: bool = False
    ) -> bool:
        """Run *step* for up to *limit* seconds (less if the budget is short);
        whether it finished.  Its exception is logged, never raised: the
        stop goes on."""
        self.current = name
        seconds = min(limit, self.left(reserved=reserved))
        failed: list[BaseException] = []

        def call() -> None:
            try:
                step()
            except Exception as exc:  # said below; the stop goes on
                failed.append(exc)

        thread = threading.Thread(target=call, name=f"stop: {name}", daemon=True)
        thread.start()
        thread.join(seconds)
        if thread.is_alive():
            self.cut.append(name)
            LOG.warning(
                "%s: stop step cut short after %.1f s: %s (going on without it)",
                self._who,
                seconds,
                name,
            )
            return False
        if failed:
            LOG.warning("%s: stop step failed: %s: %s", self._who, name, failed[0])
            return False
        return True
