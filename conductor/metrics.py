# SPDX-License-Identifier: Apache-2.0
"""A conductor's Prometheus metrics: the common ones, builds by outcome, what
its node index reads, and the fleet check's problems and the database's
reachability at scrape time.

The common metrics (RPC latency, membership state, ring members) and the
HTTP endpoint come from :mod:`conductor.common.metrics`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from conductor.common.exception import DatabaseUnavailable
from conductor.common.metrics import ServiceMetrics

__all__ = ["BUILD_OUTCOMES", "ConductorMetrics"]

#: The ``outcome`` label of ``ringfleet_conductor_builds_total``.
BUILD_OUTCOMES = ("active", "error", "rescheduled")

#: Counts of the fleet check's problems by kind; raises DatabaseUnavailable.
ProblemCounts = Callable[[], Mapping[str, int]]


class ConductorMetrics(ServiceMetrics):
    """A conductor's metrics: the common ones, builds by outcome, and (once
    :meth:`watch_fleet` is called) the fleet's problems."""

    def __init__(self, host: str, registry: CollectorRegistry | None = None) -> None:
        super().__init__(host, registry)
        builds = Counter(
            "ringfleet_conductor_builds",
            "Build attempts ended, by outcome: active (deployed), error (the "
            "instance went to ERROR), rescheduled (a failed attempt tried on "
            "another node).",
            ["host", "outcome"],
            registry=self.registry,
        )
        self._builds = {o: builds.labels(host, o) for o in BUILD_OUTCOMES}
        self._index_cpu = Counter(
            "ringfleet_conductor_node_index_cpu_seconds",
            "CPU time the scheduler's node index spent reading the database's node "
            "rows and applying them, by read: refresh (the rows changed since the "
            "previous one) or rebuild (every node).",
            ["host", "read"],
            registry=self.registry,
        )
        self._index_rows = Counter(
            "ringfleet_conductor_node_index_rows",
            "Node rows the scheduler's node index read and applied, by read (refresh or rebuild).",
            ["host", "read"],
            registry=self.registry,
        )

    def build_ended(self, outcome: str) -> None:
        """Count one build outcome (one of :data:`BUILD_OUTCOMES`)."""
        self._builds[outcome].inc()

    def node_index_read(self, read: str, rows: int, cpu_seconds: float) -> None:
        """Count one read of the node index (``read``: ``refresh`` or ``rebuild``):
        its rows and its CPU time (the reading thread's)."""
        self._index_rows.labels(self.host, read).inc(rows)
        self._index_cpu.labels(self.host, read).inc(cpu_seconds)

    def watch_fleet(self, counts: ProblemCounts, database_reachable: Callable[[], bool]) -> None:
        """Export ``counts()`` (the fleet check's problems by kind) and
        ``database_reachable()`` (the conductor's :attr:`Database.reachable`),
        read at every scrape."""
        self.registry.register(_FleetCollector(self.host, counts, database_reachable))


class _FleetCollector(Collector):
    """``ringfleet_fleet_problems`` and ``ringfleet_conductor_database_up``,
    read from the database when scraped (a few grouped counts, as ``fleet
    check`` does), so an alert needs nobody to run the check."""

    def __init__(
        self, host: str, counts: ProblemCounts, database_reachable: Callable[[], bool]
    ) -> None:
        self._host = host
        self._counts = counts
        self._reachable = database_reachable

    def describe(self) -> Iterator[Metric]:
        # Without describe(), registering would call collect(): a query at start-up.
        yield self._problems()
        yield self._up()

    def collect(self) -> Iterator[Metric]:
        problems, up = self._problems(), self._up()
        try:
            counts: Mapping[str, int] = self._counts()
        except DatabaseUnavailable:
            # Down, or every pooled connection busy: the database logs which
            # (once), and its reachable flag below tells them apart.
            counts = {}
        for kind, count in sorted(counts.items()):
            problems.add_metric([self._host, kind], count)
        up.add_metric([self._host], 1 if self._reachable() else 0)
        if counts:
            yield problems
        yield up

    @staticmethod
    def _problems() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "ringfleet_fleet_problems",
            "What fleet check would report, by kind: nodes for orphaned (absent "
            "while this conductor's membership is not connected), agents for "
            "excluded, instances or nodes for the others.",
            labels=["host", "kind"],
        )

    @staticmethod
    def _up() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "ringfleet_conductor_database_up",
            "1 while the conductor reaches its database, 0 from a failure to "
            "reach it until a transaction succeeds again.",
            labels=["host"],
        )
