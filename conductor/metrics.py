"""A conductor's Prometheus metrics: the common ones, builds by outcome, and
the fleet check's problems and the database's reachability at scrape time.

The common metrics (RPC latency, membership state, ring members) and the
HTTP endpoint come from :mod:`conductor.common.metrics`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from conductor.common.exception import DatabaseUnavailable
from conductor.common.metrics import ServiceMetrics

__all__ = ["BUILD_OUTCOMES", "ConductorMetrics"]

LOG = logging.getLogger(__name__)

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

    def build_ended(self, outcome: str) -> None:
        """Count one build outcome (one of :data:`BUILD_OUTCOMES`)."""
        self._builds[outcome].inc()

    def watch_fleet(self, counts: ProblemCounts) -> None:
        """Export ``counts()`` (the fleet check's problems by kind) and whether
        the database answered it, computed at every scrape."""
        self.registry.register(_FleetCollector(self.host, counts))


class _FleetCollector(Collector):
    """``ringfleet_fleet_problems`` and ``ringfleet_conductor_database_up``,
    read from the database when scraped (a few grouped counts, as ``fleet
    check`` does), so an alert needs nobody to run the check."""

    def __init__(self, host: str, counts: ProblemCounts) -> None:
        self._host = host
        self._counts = counts
        self._database_up = True  # the last scrape's, to log changes only

    def describe(self) -> Iterator[Metric]:
        # Without describe(), registering would call collect(): a query at start-up.
        yield self._problems()
        yield self._up()

    def collect(self) -> Iterator[Metric]:
        problems, up = self._problems(), self._up()
        try:
            counts = self._counts()
        except DatabaseUnavailable as exc:
            if self._database_up:
                LOG.warning("Conductor %s: fleet metrics: %s", self._host, exc)
            self._database_up = False
            up.add_metric([self._host], 0)
            yield up
            return
        if not self._database_up:
            LOG.info("Conductor %s: fleet metrics: the database answers again", self._host)
        self._database_up = True
        for kind, count in sorted(counts.items()):
            problems.add_metric([self._host, kind], count)
        up.add_metric([self._host], 1)
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
            "1 if the database answered this scrape's fleet counts, 0 if it could not be reached.",
            labels=["host"],
        )
