"""A conductor's Prometheus metrics: the common ones plus builds by outcome.

The common metrics (RPC latency, membership state, ring members) and the
HTTP endpoint come from :mod:`conductor.common.metrics`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from conductor.common.metrics import ServiceMetrics

__all__ = ["BUILD_OUTCOMES", "ConductorMetrics"]

#: The ``outcome`` label of ``ringfleet_conductor_builds_total``.
BUILD_OUTCOMES = ("active", "error", "rescheduled")


class ConductorMetrics(ServiceMetrics):
    """A conductor's metrics: the common ones plus builds by outcome."""

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
