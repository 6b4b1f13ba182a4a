# SPDX-License-Identifier: Apache-2.0
"""The conductor's view of the agent fleet: who is alive, from the group itself.

Membership comes only from the coordination service (never from a database
view that differs per host): the conductor watches the group without
joining it, records departures in the database (for re-homing after the
grace), and answers "is this agent alive?" for claims and scheduling.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType

from conductor.common.exception import DatabaseUnavailable, ServiceUnavailable
from conductor.db import agents
from conductor.db.engine import Database
from hashring.membership import Membership, MembershipView, State
from hashring.ring import Ring

__all__ = ["FleetView"]

LOG = logging.getLogger(__name__)

# How soon a view that could not be recorded (database down) is tried again.
_RECORD_RETRY_S = 1.0
#: The least time between two reads of the group on an agent's word.
_READ_SOON_S = 0.25


class FleetView:
    """Live members as seen by this conductor's observer membership."""

    def __init__(self, db: Database) -> None:
        self._membership: Membership | None = None
        self._db = db
        self._lock = threading.Lock()
        self._view: MembershipView | None = None
        self._host_ips: Mapping[str, str] = MappingProxyType({})
        self._listeners: list[Callable[[MembershipView], None]] = []
        self._record_retry: threading.Timer | None = None
        self._read_soon_at = -_READ_SOON_S

    def attach(self, membership: Membership) -> None:
        """The membership whose changes call :meth:`on_change` (set once)."""
        self._membership = membership

    def add_listener(self, listener: Callable[[MembershipView], None]) -> None:
        self._listeners.append(listener)

    def on_change(self, view: MembershipView) -> None:
        """Membership callback: record the view, then tell the listeners."""
        host_ips = MappingProxyType(view.host_ips())
        with self._lock:
            self._view, self._host_ips = view, host_ips
        self._record(view)
        for listener in self._listeners:
            listener(view)

    def _record(self, view: MembershipView) -> None:
        try:
            agents.record_membership(self._db, view.weights)
        except DatabaseUnavailable:
            # Departures in this view start their re-homing grace only once
            # recorded: waiting for the next change could strand their nodes.
            # The database's own WARNING says it is down; try again soon.
            LOG.debug("Membership of %d agents not recorded: database down", len(view.members))
            self._record_later()
        except Exception:  # the next change records again; keep watching
            LOG.exception("Could not record membership of %d agents", len(view.members))

    def _record_later(self) -> None:
        with self._lock:
            if self._record_retry is not None:
                return
            self._record_retry = threading.Timer(_RECORD_RETRY_S, self._record_newest)
            self._record_retry.daemon = True
            self._record_retry.start()

    def _record_newest(self) -> None:
        with self._lock:
            self._record_retry, view = None, self._view
        if view is not None:
            self._record(view)

    @property
    def state(self) -> State:
        return self._membership.state if self._membership else State.LOST

    @property
    def backend_failing(self) -> bool:
        """Whether the membership's back end fails now, and said so (one WARNING)."""
        return self._membership is not None and self._membership.backend_failing

    def live_members(self) -> frozenset[str]:
        """The live agents (ring members) now.

        :raises ServiceUnavailable: when this conductor cannot currently vouch
            for the membership (its own connection is suspended or lost).
        """
        with self._lock:
            view = self._view
        state = self.state
        if view is None or state is not State.CONNECTED:
            raise ServiceUnavailable(
                reason=f"membership is {state.value}; cannot tell who is alive"
            )
        return frozenset(view.members)

    def host_ips(self) -> Mapping[str, str]:
        """Live agent -> its IP address (``[DEFAULT] my_ip``), for those announcing one.

        Nova filters see it as ``host_state.host_ip``; empty before the first view.
        """
        with self._lock:
            return self._host_ips

    def ring(self, group: str | None = None) -> Ring:
        """The ring of the latest view (of ``group``'s members if given);
        empty before the first view.  Built on demand: few callers need it."""
        with self._lock:
            view = self._view
        return view.ring(group) if view is not None else Ring([])

    def view(self) -> MembershipView | None:
        with self._lock:
            return self._view

    def read_soon(self) -> None:
        """Have the membership read the group now, not at its next watch
        interval: an agent saw a member leave that this view still has (at
        100 agents on two cores this view lagged the first agents' by 2.4 to
        3.5 s, and their claims of the departed member's nodes waited).  At
        most once per :data:`_READ_SOON_S`, however many agents say so."""
        now = time.monotonic()
        with self._lock:
            if now - self._read_soon_at < _READ_SOON_S:
                return
            self._read_soon_at = now
        if self._membership is not None:
            self._membership.read_soon()
