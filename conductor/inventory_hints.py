# SPDX-License-Identifier: Apache-2.0
"""Telling the agents that an operator changed nodes: hints, pushed, coalesced.

A quiet agent reads its share's changes only every ``[compute_agent]
quiet_reconcile_interval``: each read is a call to a conductor, and a quiet
fleet's reads, polled, cost its conductor in proportion to the agent count.
What changes nodes in a quiet fleet is mostly an operator (nodes created,
imported, synced from Ironic, updated, put in or out of maintenance, moved,
deleted), through a conductor; so that conductor says so, with one fanout
cast to every agent (``inventory_changed``, compute API 1.6), and each agent
reads its share's changes at once.  A quiet fleet then costs nothing per
interval but the slow safety poll, and an operator's change still reaches
its agent within a second.  Nodes released or handed over are news to their
new owners alone: those are cast to, each on its own server (at a join of a
100-agent fleet, the fanout of every release made each of the 99 agents
that stayed read its share about eight times, for nothing).

The hints of one conductor are coalesced: at most one cast per
:data:`MIN_GAP`, naming the union of the groups changed meanwhile, so an
operator's loop of a thousand updates costs the agents a read a second, not
a thousand.  A hint is an optimisation, never the record: an agent that
misses one (it was restarting, the broker dropped the cast) reads the change
at its next pass all the same.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Protocol

__all__ = ["MIN_GAP", "InventoryHints"]

LOG = logging.getLogger(__name__)

#: Seconds between two casts of one conductor at least.
MIN_GAP = 1.0


class HintSender(Protocol):
    """What sends the cast: :meth:`compute_agent.rpcapi.ComputeAPI.inventory_changed`."""

    def inventory_changed(
        self, groups: Sequence[str] | None = None, hosts: Sequence[str] | None = None
    ) -> bool: ...


class InventoryHints:
    """Sends ``inventory_changed`` for the changes :meth:`changed` is told of."""

    def __init__(self, sender: HintSender, *, min_gap: float = MIN_GAP) -> None:
        self._sender = sender
        self._min_gap = min_gap
        self._lock = threading.Lock()
        # The groups changed since the last cast; None inside: any group.
        self._pending: set[str] | None = set()
        # The agents to tell; None inside: every agent (a fanout).
        self._hosts: set[str] | None = set()
        self._due = False
        self._timer: threading.Timer | None = None
        self._last = -float("inf")
        self._stopped = False
        self._failing = False

    def changed(
        self, groups: Iterable[str] | None = None, hosts: Iterable[str] | None = None
    ) -> None:
        """Nodes of ``groups`` (``None``: of any group, or not known) changed;
        ``hosts``: only those agents have anything to read (``None``: any)."""
        with self._lock:
            if self._stopped:
                return
            if groups is None or self._pending is None:
                self._pending = None
            else:
                self._pending.update(groups)
            if hosts is None or self._hosts is None:
                self._hosts = None
            else:
                self._hosts.update(hosts)
            self._due = True
            if self._timer is not None:
                return  # the cast already waiting takes these too
            wait = max(0.0, self._last + self._min_gap - time.monotonic())
            # A timer thread, started here at runtime (never before a fork):
            # the caller, an RPC worker, does not wait for the broker.
            self._timer = threading.Timer(wait, self._send)
            self._timer.daemon = True
            self._timer.start()

    def _send(self) -> None:
        with self._lock:
            self._timer = None
            if not self._due or self._stopped:
                return
            groups = None if self._pending is None else sorted(self._pending)
            hosts = None if self._hosts is None else sorted(self._hosts)
            self._pending, self._hosts, self._due = set(), set(), False
            self._last = time.monotonic()
        try:
            self._sender.inventory_changed(groups, hosts)
        except Exception as exc:  # the agents' next passes read it all the same
            if not self._failing:
                LOG.warning(
                    "Could not tell the agents that nodes changed (%s); they read "
                    "it at their next pass",
                    exc,
                )
            self._failing = True
        else:
            if self._failing:
                LOG.info("Telling the agents of node changes works again")
            self._failing = False

    def stop(self) -> None:
        """No more casts (a stopping conductor): a pending one is dropped."""
        with self._lock:
            self._stopped = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
