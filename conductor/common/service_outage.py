# SPDX-License-Identifier: Apache-2.0
"""An OpenStack service's outage as one process sees it: one WARNING, one INFO.

A client of Ironic or Placement makes many requests a second while the
service is down; the operator needs one line when it goes and one when it
answers again, not one per request.
"""

from __future__ import annotations

import logging
import threading
import time

from conductor.common.exception import ServiceUnavailable

__all__ = ["ServiceOutage"]

LOG = logging.getLogger(__name__)


class ServiceOutage:
    """Whether ``service`` answers, for one client (thread-safe)."""

    def __init__(self, service: str, endpoint: str) -> None:
        self.service = service
        self.endpoint = endpoint
        self.down = False
        #: Why the outage began (the first failed request's reason); None when up.
        self.reason: str | None = None
        self._down_at = 0.0  # when it went (time.monotonic())
        self._up_at = 0.0  # when it was last seen answering again
        self._lock = threading.Lock()

    def unavailable(self, reason: str, sent: float | None = None) -> ServiceUnavailable:
        """The error for a request that got no answer; the first of an outage
        is logged (WARNING).

        *sent* (``time.monotonic()``): when a request that timed out was
        sent.  One sent before the service was last seen answering again
        waited through the outage just ended: its failure is no new outage.
        """
        with self._lock:
            if sent is not None and not self.down and sent < self._up_at:
                LOG.debug("%s: a request sent during the outage failed: %s", self.service, reason)
                return ServiceUnavailable(reason)
            first, self.down = not self.down, True
            if first:
                self._down_at = time.monotonic()
                self.reason = reason
        if first:
            LOG.warning("%s unavailable: %s", self.service, reason)
        return ServiceUnavailable(reason)

    def answered(self, started: float) -> None:
        """A request sent at ``started`` (``time.monotonic()``) was answered:
        the service is back if it was sent after the service went (an answer
        to one sent before proves nothing, and would make one outage read as
        several)."""
        if not self.down:
            return
        with self._lock:
            was = self.down and started >= self._down_at
            if was:
                self.down = False
                self.reason = None
                self._up_at = time.monotonic()
        if was:
            LOG.info("%s at %s answers again", self.service, self.endpoint)
