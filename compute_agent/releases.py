# SPDX-License-Identifier: Apache-2.0
"""Giving nodes up: what a new view gives the agent's peers, and a drain.

A node is released by a compare-and-swap on the epoch held
(``release_nodes``), refused for a node the record no longer gives us, so a
release needs no read first.  On a view that gives this agent another
share, :meth:`Releaser.release_first` releases what the view gives a peer
before the agent reads what it gained: a joining agent claims its share
only once every peer released its part, and every peer's reads on that view
wait their turn at a conductor with all the others'.

:class:`Releaser` is a base of :class:`compute_agent.ownership.OwnershipManager`,
like :class:`compute_agent.share_claims.ShareClaimer`: the attributes below
are the manager's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from compute_agent.conductor_client import OwnershipCalls
from compute_agent.inventory_reads import ShareKey, share_rings
from compute_agent.metrics import AgentMetrics
from hashring.membership import Membership, MembershipView

__all__ = ["Releaser"]

#: The ownership manager's logger: these releases are its own.
LOG = logging.getLogger("compute_agent.ownership")

#: Seconds an adopted node is kept even if our view says it belongs elsewhere.
_ADOPTION_SETTLE = 5.0

#: Nodes per release call: the most a conductor takes in one (a release is
#: a compare-and-swap by uuid, no read, no turn).  At ``claim_batch`` (500)
#: an agent that read its share on a small view at a cold start of 100
#: agents gave 19,826 nodes back in 40 calls, each behind the others'
#: claims at the conductor, each making their new owners read again: three
#: minutes, while the owners' claims of those nodes were refused.
_RELEASE_BATCH = 10_000  # conductor.validation.arguments.MAX_AGENT_BATCH


class Releaser:
    """Releases and hands over the manager's nodes (a base of the manager)."""

    host: str
    _conductor: OwnershipCalls
    _membership: Membership
    _metrics: AgentMetrics
    _groups: list[str]
    _batch: int
    _lock: threading.Lock
    _reconcile_lock: threading.RLock
    _busy_nodes: Callable[[], set[str]]
    _held: dict[str, int]
    _pinned: set[str]
    _inventory: dict[str, str]
    _adopted_at: dict[str, float]
    _read_rings: dict[ShareKey, dict[str, Any]] | None

    def desired(self, view: MembershipView) -> set[str]:
        raise NotImplementedError

    def needs_revalidation(self) -> bool:
        raise NotImplementedError

    def forget(self, node_uuids: Iterable[str]) -> None:
        raise NotImplementedError

    def _drop(self, nodes: Collection[str]) -> None:
        raise NotImplementedError

    def release_first(self, view: MembershipView) -> int:
        """On a view that gives us another share than the one read, release
        what it gives a peer now, before the read of what it gave us
        (module docstring); the nodes released.

        The nodes to release are known from the inventory read already.
        At a join of a 100-agent fleet, peers released 6 to 28 s after the
        view, each behind its own reads, and the join took 35 s.  Not before
        the first read, nor while the held set awaits its re-validation
        after a re-join.
        """
        if (
            self._read_rings is None
            or self.host not in view.members
            or not self._membership.can_act()
            or self.needs_revalidation()
            or self._read_rings == share_rings(view, self.host, self._groups)
        ):
            return 0
        with self._reconcile_lock:
            desired = self.desired(view)
            busy = self._busy_nodes()
            with self._lock:
                releasable = self._releasable(desired, busy)
            released = self._release(releasable)
        if released:
            LOG.info(
                "Agent %s released %d nodes the view of %d members gives its peers, "
                "before reading its new share",
                self.host,
                released,
                len(view.members),
            )
            self._metrics.released(released)
        return released

    def _releasable(self, desired: set[str], busy: Collection[str]) -> dict[str, int]:
        """The nodes held and not desired that may be released now, with their
        epochs (under the lock): not pinned, busy or adopted lately."""
        settle = time.monotonic() - _ADOPTION_SETTLE
        self._adopted_at = {n: t for n, t in self._adopted_at.items() if t > settle}
        # Set differences first (in C): a pass walks only the nodes that
        # differ, not every node held and desired (10,000 each at 100k
        # nodes on 10 agents), which is the usual few once converged.
        return {
            n: self._held[n]
            for n in self._held.keys() - desired
            if n not in self._pinned and n not in busy and n not in self._adopted_at
        }

    def _release(self, releasable: Mapping[str, int]) -> int:
        items = sorted(releasable.items())
        done = 0
        for start in range(0, len(items), _RELEASE_BATCH):
            out = self._conductor.release_nodes(
                self.host, dict(items[start : start + _RELEASE_BATCH])
            )
            self.forget(out.done)
            if self._read_rings is not None:
                # Read by share: a node released is no longer our share, and
                # its changes are no longer read (nor is it asked for).
                with self._lock:
                    self._drop(out.done)
            # Refused: already not ours (taken over while we were away).
            self.forget(u for u, own in out.refused.items() if not own or own.owner != self.host)
            done += len(out.done)
        return done

    def drain(self, view: MembershipView) -> tuple[int, int]:
        """Hand every node, pins included, to its ring successor.

        Returns (handed over, refused).  Nodes of a group no other agent
        serves cannot be handed over and stay ours.
        """
        with self._lock:
            held = dict(self._held)
            groups = {n: self._inventory.get(n, "") for n in held}
        transfers = []
        for node, epoch in sorted(held.items()):
            ring = view.ring(groups[node], exclude=self.host)
            if len(ring):
                transfers.append({"node_uuid": node, "epoch": epoch, "new_owner": ring.owner(node)})
        handed = refused = 0
        for start in range(0, len(transfers), self._batch):
            out = self._conductor.transfer_nodes(self.host, transfers[start : start + self._batch])
            self.forget(out.done)
            handed += len(out.done)
            refused += len(out.refused)
        LOG.info(
            "Agent %s drained: %d nodes handed over, %d refused, %d kept",
            self.host,
            handed,
            refused,
            len(held) - len(transfers),
        )
        return handed, refused
