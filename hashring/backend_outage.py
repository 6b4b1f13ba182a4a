# SPDX-License-Identifier: Apache-2.0
"""The membership backend's failures, logged the way an operator needs them.

During an etcd outage every heartbeat and every read of the group fails
(several times a second), and tooz's ``ToozConnectionError`` has an empty
message: the log read ``could not read group …: :`` twice a second (issue 16).
:class:`BackendOutage` logs one WARNING when the backend starts failing,
saying what failed, where and why (the reason is down the exception's chain
of causes), the repeats at debug level, and one INFO when it answers again.
"""

from __future__ import annotations

import logging
import threading
import time

__all__ = ["BackendOutage", "described"]

LOG = logging.getLogger(__name__)

#: At most this many characters of a cause's message (requests' are long).
_MAX_REASON = 300


def described(exc: BaseException) -> str:
    """``exc`` in words: its class and those of its causes, and the first message found.

    E.g. ``ToozConnectionError <- ConnectionFailedError <- ConnectionError:
    ('Connection aborted.', ConnectionResetError(104, 'Connection reset by
    peer'))``: tooz's and etcd3gw's errors say nothing themselves.
    """
    names: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        names.append(type(current).__name__)
        lines = str(current).strip().splitlines()
        if lines:
            return f"{' <- '.join(names)}: {lines[0][:_MAX_REASON]}"
        current = current.__cause__ or current.__context__
    return " <- ".join(names)


class BackendOutage:
    """Failures of one member's actions on its backend (heartbeat, reading the group...).

    An outage starts when a first action fails (one WARNING) and ends when
    every action that failed has worked again (one INFO); failures between
    are logged at debug level.  Thread-safe: the keeper and the watcher
    threads report to the same outage.
    """

    def __init__(self, member_id: str, backend: str) -> None:
        """``backend``: the backend's URL, without credentials."""
        self._member_id = member_id
        self._backend = backend
        self._lock = threading.Lock()
        self._failing: set[str] = set()
        self._since = 0.0
        self._ended: float | None = None

    def failed(self, action: str, exc: BaseException) -> None:
        """``action`` (e.g. ``"heartbeat"``) failed with ``exc``."""
        with self._lock:
            first = not self._failing
            self._failing.add(action)
            if first:
                self._since = time.monotonic()
        if first:
            LOG.warning(
                "Member %s: %s failed at %s: %s; retrying (repeats logged at debug level "
                "until it answers)",
                self._member_id,
                action,
                self._backend,
                described(exc),
            )
        else:
            LOG.debug("Member %s: %s failed again: %s", self._member_id, action, described(exc))

    @property
    def ongoing(self) -> bool:
        """Whether an outage was logged (its WARNING) and has not ended yet."""
        return bool(self._failing)

    def said_within(self, seconds: float) -> bool:
        """Whether an outage is ongoing or ended less than *seconds* ago: what
        follows from it (a lease expired meanwhile) was said by its WARNING."""
        ended = self._ended
        return self.ongoing or (ended is not None and time.monotonic() - ended < seconds)

    def succeeded(self, action: str) -> None:
        """``action`` worked: the outage ends when no other action still fails."""
        if action not in self._failing:  # the common case, without the lock
            return
        with self._lock:
            if action not in self._failing:
                return
            self._failing.discard(action)
            over = not self._failing
            lasted = time.monotonic() - self._since
            if over:
                self._ended = time.monotonic()
        if over:
            LOG.info(
                "Member %s: %s answers again (failures for %.1f s)",
                self._member_id,
                self._backend,
                lasted,
            )
