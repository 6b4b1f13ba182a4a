# SPDX-License-Identifier: Apache-2.0
"""Telling the agents that members left their group, so that each reads it now.

Every process reads the agents' group on its own schedule (``[coordination]
watch_interval``, and whenever its threads get a core).  After a kill -9 of
one of 100 agents, ten to a process on two cores, the survivors saw the
departure over 5.2 s, and each claims what it gained only once it has: the
last claims landed 7 s after the lease expired.  A conductor that sees
members leave (told early by the first survivor's claim: ``claim_share``'s
``still_live``) casts ``group_changed`` to every agent (compute API 1.7), and
each reads the group at once.  A hint, never the record: an agent that
misses one reads the group at its next interval, as before.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from conductor.common.exception import first_line
from conductor.common.repeated_failure import RepeatedFailure
from hashring.membership import MembershipView

__all__ = ["GroupHints"]

LOG = logging.getLogger(__name__)


class GroupHintSender(Protocol):
    """What sends the cast: :class:`compute_agent.rpcapi.ComputeAPI`."""

    def group_changed(self) -> bool: ...


class GroupHints:
    """A fleet view listener (:meth:`conductor.fleet_view.FleetView.add_listener`)
    that casts ``group_changed`` when a view has lost members."""

    def __init__(self, sender: GroupHintSender) -> None:
        self._sender = sender
        self._lock = threading.Lock()
        self._members: frozenset[str] | None = None
        self._stopped = False
        self._failures = RepeatedFailure(
            LOG,
            "Could not tell the agents that members left the group (%s); they read it at "
            "their next interval",
            "Could not tell the agents that members left the group again (%s)",
            "Telling the agents that members left the group works again",
        )

    def on_view(self, view: MembershipView) -> None:
        """A new view: a cast if it lost members since the previous one.

        Sent from a thread of its own: this runs in the membership's watch
        thread, which a broker that does not answer must not hold up."""
        members = frozenset(view.members)
        with self._lock:
            previous, self._members = self._members, members
            if self._stopped or previous is None or not previous - members:
                return
        threading.Thread(target=self._send, name="group-hint", daemon=True).start()

    def _send(self) -> None:
        try:
            self._sender.group_changed()
        except Exception as exc:  # the agents read the group at their next interval
            with self._lock:  # casts run in threads of their own
                self._failures.failed(first_line(exc))
        else:
            with self._lock:
                self._failures.worked()

    def stop(self) -> None:
        """No more casts (a stopping conductor)."""
        with self._lock:
            self._stopped = True
