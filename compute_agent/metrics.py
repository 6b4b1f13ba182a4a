# SPDX-License-Identifier: Apache-2.0
"""A compute agent's Prometheus metrics: ownership, claims, convergence.

The common ones (RPC latency, membership state, ring members) and the HTTP
endpoint come from :mod:`conductor.common.metrics`.  The ownership manager reports
to an :class:`AgentMetrics` at the end of each reconcile pass (counts per
group are computed there, from the copy it already makes, never per claim),
and the service tells it of every membership view change.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Collection, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from conductor.common.metrics import ServiceMetrics
from hashring.membership import MembershipView

__all__ = ["AgentMetrics", "group_counts"]

#: Seconds from a membership change to the owned set matching the desired
#: set: a reconcile pass or two (claims are batches) up to a takeover that
#: waits for a peer's release.
CONVERGENCE_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)


class AgentMetrics(ServiceMetrics):
    """An agent's metrics (arguments: see :class:`conductor.common.metrics.ServiceMetrics`)."""

    def __init__(self, host: str, registry: CollectorRegistry | None = None) -> None:
        super().__init__(host, registry)
        reg = self.registry
        self._owned = Gauge(
            "ringfleet_agent_nodes_owned",
            "Nodes this agent owns (holds a claim on), by node group.",
            ["host", "group"],
            registry=reg,
        )
        self._pinned = Gauge(
            "ringfleet_agent_nodes_pinned",
            "Owned nodes that host an instance (pinned to this agent), by node group.",
            ["host", "group"],
            registry=reg,
        )
        self._groups: set[str] = set()
        claims = Counter(
            "ringfleet_agent_claims",
            "Nodes this agent asked to claim, by outcome: granted, refused "
            "(another owner keeps it).",
            ["host", "outcome"],
            registry=reg,
        )
        self._granted = claims.labels(host, "granted")
        self._refused = claims.labels(host, "refused")
        self._released = Counter(
            "ringfleet_agent_releases",
            "Nodes this agent released (no longer its share of the ring).",
            ["host"],
            registry=reg,
        ).labels(host)
        takeovers = Counter(
            "ringfleet_agent_takeovers",
            "Ownership taken against the previous owner, by outcome: rehomed "
            "(this agent took pinned nodes of a departed agent), lost (a peer "
            "took nodes of this agent while it was away).",
            ["host", "outcome"],
            registry=reg,
        )
        self._rehomed = takeovers.labels(host, "rehomed")
        self._lost = takeovers.labels(host, "lost")
        self._inventory_rows = Counter(
            "ringfleet_agent_inventory_rows",
            "Node rows this agent read from the conductor for its inventory "
            "(full and incremental reads): what scaling by share keeps near "
            "this agent's share of the fleet.",
            ["host"],
            registry=reg,
        ).labels(host)
        self._placement_writes = Counter(
            "ringfleet_agent_placement_writes",
            "What the Placement reporter wrote, by kind: providers (created or "
            "mended), allocations, deleted (providers of deleted nodes), "
            "refused (Placement refused a node's provider: see the log).",
            ["host", "kind"],
            registry=reg,
        )
        for kind in ("providers", "allocations", "deleted", "refused"):
            self._placement_writes.labels(host, kind)
        self._placement_up = Gauge(
            "ringfleet_agent_placement_up",
            "1 when the Placement reporter's last pass completed, 0 when "
            "Placement (or a conductor) did not answer it; absent without "
            "[placement].",
            ["host"],
            registry=reg,
        )
        self._convergence = Histogram(
            "ringfleet_agent_convergence_seconds",
            "Seconds from a membership view change to this agent owning exactly "
            "its desired nodes (its ring share and its pins, less the nodes "
            "pinned to other agents).",
            ["host"],
            buckets=CONVERGENCE_BUCKETS,
            registry=reg,
        ).labels(host)
        # (when the first unconverged change was seen, the latest view)
        self._pending: tuple[float, MembershipView] | None = None
        self._pending_lock = threading.Lock()

    # -- counters (one increment per batch, not per node) --------------------------

    def claimed(self, granted: int, refused: int) -> None:
        self._granted.inc(granted)
        self._refused.inc(refused)

    def released(self, count: int) -> None:
        self._released.inc(count)

    def rehomed(self, count: int) -> None:
        self._rehomed.inc(count)

    def lost(self, count: int) -> None:
        self._lost.inc(count)

    def inventory_read(self, rows: int) -> None:
        self._inventory_rows.inc(rows)

    def placement_pass(
        self,
        *,
        complete: bool,
        providers: int = 0,
        allocations: int = 0,
        deleted: int = 0,
        refused: int = 0,
    ) -> None:
        """A Placement reporter's pass ended (``complete``: Placement answered it all)."""
        for kind, count in (
            ("providers", providers),
            ("allocations", allocations),
            ("deleted", deleted),
            ("refused", refused),
        ):
            if count:
                self._placement_writes.labels(self.host, kind).inc(count)
        self._placement_up.labels(self.host).set(1 if complete else 0)

    # -- gauges, after each reconcile ------------------------------------------------

    def owned(self, by_group: Mapping[str, tuple[int, int]]) -> None:
        """Set the owned and pinned gauges: group -> (owned, pinned)."""
        for gone in self._groups - by_group.keys():
            self._owned.remove(self.host, gone)
            self._pinned.remove(self.host, gone)
        self._groups = set(by_group)
        for group, (owned, pinned) in by_group.items():
            self._owned.labels(self.host, group).set(owned)
            self._pinned.labels(self.host, group).set(pinned)

    def pinned_by(self, group: str, change: int) -> None:
        """One node of ``group`` pinned (+1) or unpinned (-1) since :meth:`owned`;
        a group it has not published yet waits for the next."""
        if group in self._groups:
            self._pinned.labels(self.host, group).inc(change)

    # -- convergence ---------------------------------------------------------------

    def view_changed(self, view: MembershipView) -> None:
        """A new membership view: the clock runs until a pass on it converges."""
        now = time.monotonic()
        with self._pending_lock:
            since = self._pending[0] if self._pending is not None else now
            self._pending = (since, view)

    def reconciled(self, view: MembershipView, converged: bool) -> None:
        """A reconcile pass on ``view`` ended; observe if it converged on the latest view.

        A pass on an older view does not count: a newer change is still to
        be acted on.
        """
        with self._pending_lock:
            pending = self._pending
            if pending is None or not converged or pending[1] is not view:
                return
            self._pending = None
        self._convergence.observe(time.monotonic() - pending[0])


def group_counts(
    nodes: Collection[str], group_of: Mapping[str, str], pinned: Iterable[str]
) -> dict[str, tuple[int, int]]:
    """(owned, pinned) per node group of ``nodes`` (group unknown yet: ``""``)."""
    # Counted in C (map, collections.Counter), the few pins apart: it runs on
    # every reconcile pass over every node the agent owns (10,000 at 100k
    # nodes on 10 agents), and the loop in Python was a tenth of an agent's
    # time while builds ran.
    owned = collections.Counter(map(group_of.get, nodes, itertools.repeat("")))
    pins = collections.Counter(group_of.get(n, "") for n in set(pinned) if n in nodes)
    return {group: (count, pins[group]) for group, count in owned.items()}
