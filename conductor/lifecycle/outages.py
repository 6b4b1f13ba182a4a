# SPDX-License-Identifier: Apache-2.0
"""Outages that many pieces of work wait on, said once each.

When an agent stops answering, or the conductor loses sight of the fleet,
every build, delete and action waiting on it is retried every few seconds:
a line per piece of work per retry buried the one fact an operator needs
(one agent is unreachable) under hundreds.  :class:`Outages` says an outage
once when it starts (a WARNING naming what fails and why), at DEBUG while
it lasts, again when its cause changes, and once when it ends (an INFO with
how long it lasted and how many waits it caused).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

__all__ = ["Outages"]

LOG = logging.getLogger(__name__)


@dataclass
class _Outage:
    cause: str
    since: float
    last: float
    waits: int = 0


class Outages:
    """Outages of the things named by a key (an agent's host, ``"membership"``)."""

    def __init__(self, what: str, limit: int = 10_000) -> None:
        """*what* names the kind of thing in the log ("Agent"); past *limit*
        outages at once, the oldest are forgotten (at worst one said twice)."""
        self._what = what
        self._limit = limit
        self._lock = threading.Lock()
        self._ongoing: dict[str, _Outage] = {}

    def failed(
        self,
        key: str,
        cause: str,
        consequence: str = "the work waits",
        level: int = logging.WARNING,
    ) -> None:
        """*key* failed for *cause*: said at *level* when its outage starts or
        its cause changes (INFO when what caused it said so already)."""
        now = time.monotonic()
        with self._lock:
            outage = self._ongoing.get(key)
            said = outage is not None and outage.cause == cause
            if outage is None:
                if len(self._ongoing) >= self._limit:
                    self._ongoing.pop(next(iter(self._ongoing)))
                outage = self._ongoing[key] = _Outage(cause, now, now)
            outage.cause = cause
            outage.last = now
            outage.waits += 1
        if said:
            LOG.debug("%s %s still fails: %s", self._what, key, cause)
            return
        LOG.log(
            level,
            "%s %s fails: %s; %s (repeats at debug level until it answers)",
            self._what,
            key,
            cause,
            consequence,
        )

    def answered(self, key: str) -> None:
        """*key* answered: its outage, if any, ends (one INFO)."""
        if key not in self._ongoing:  # the common case, without the lock
            return
        with self._lock:
            outage = self._ongoing.pop(key, None)
        if outage is not None:
            LOG.info(
                "%s %s works again after %.1f s (%d waits)",
                self._what,
                key,
                time.monotonic() - outage.since,
                outage.waits,
            )

    def failing(self, within: float) -> frozenset[str]:
        """The keys whose outage is ongoing and failed within the last *within* seconds."""
        since = time.monotonic() - within
        with self._lock:
            return frozenset(key for key, o in self._ongoing.items() if o.last >= since)

    def ongoing(self, key: str) -> bool:
        """Whether an outage of *key* was said and has not ended."""
        return key in self._ongoing
