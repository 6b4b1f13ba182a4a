# SPDX-License-Identifier: Apache-2.0
"""Prometheus metrics both services have: the HTTP endpoint, RPC latency, membership.

Every service owns a :class:`prometheus_client.CollectorRegistry` (never the
process-global default one): the embedded demo and the tests run a conductor
and several agents in one process, each with its own series.  A metrics
object is handed to the classes it instruments; their default is one that
records into a private registry nobody serves, so callers that do not care
need not pass anything.

Labels are few-valued on purpose (host, group, method, outcome): a node or
instance id as a label would create a series per node.  What the hot paths
do is an increment or an observation on a pre-resolved child, no lock of
ours held, no work per node.  ``docs/metrics.rst`` lists every metric.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from wsgiref.simple_server import WSGIServer

from oslo_config import cfg
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from conductor.common.exception import ConfigurationError
from hashring.membership import MembershipView, State

__all__ = [
    "ALL_GROUPS",
    "MetricsServer",
    "ServiceMetrics",
]

LOG = logging.getLogger(__name__)

#: The ``group`` label of the ring of every member, whatever group it serves
#: (a node group name never contains ``*``).
ALL_GROUPS = "*"

#: Seconds; RPC calls are short "accept" calls, claims are batches.
RPC_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ServiceMetrics:
    """What every ringfleet service measures: RPC latency and its view of the group.

    :param host: the service's ``[DEFAULT] host``, the ``host`` label.
    :param registry: where the metrics live; ``None``: a private registry
        nobody serves (the no-op default of the instrumented classes).
    """

    def __init__(self, host: str, registry: CollectorRegistry | None = None) -> None:
        self.host = host
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self._rpc_served = Histogram(
            "ringfleet_rpc_server_duration_seconds",
            "RPC calls served by this service, by method and outcome.",
            ["host", "method", "outcome"],
            buckets=RPC_BUCKETS,
            registry=reg,
        )
        self._rpc_served_cpu = Counter(
            "ringfleet_rpc_server_cpu_seconds_total",
            "CPU time of the RPC calls served by this service (the serving "
            "thread's), by method: what each kind of call costs the process.",
            ["host", "method"],
            registry=reg,
        )
        self._rpc_made = Histogram(
            "ringfleet_rpc_client_duration_seconds",
            "RPC calls this service made (agent to conductor, conductor to agent), "
            "by method and outcome.",
            ["host", "method", "outcome"],
            buckets=RPC_BUCKETS,
            registry=reg,
        )
        self._state = Gauge(
            "ringfleet_membership_state",
            "1 for the current state of this service's group membership "
            "(connected, suspended, lost), 0 for the others.",
            ["host", "state"],
            registry=reg,
        )
        self._states = {s: self._state.labels(host, s.value) for s in State}
        self._ring_members = Gauge(
            "ringfleet_ring_members",
            "Members of each node group's ring as this service sees them "
            f"(group '{ALL_GROUPS}': every ring member).",
            ["host", "group"],
            registry=reg,
        )
        self._ring_groups: set[str] = set()

    # -- RPC (conductor.common.rpc.RpcObserver callables) -------------------------------

    def rpc_served(self, method: str, outcome: str, seconds: float) -> None:
        self._rpc_served.labels(self.host, method, outcome).observe(seconds)

    def rpc_served_cpu(self, method: str, cpu_seconds: float) -> None:
        self._rpc_served_cpu.labels(self.host, method).inc(cpu_seconds)

    def rpc_made(self, method: str, outcome: str, seconds: float) -> None:
        self._rpc_made.labels(self.host, method, outcome).observe(seconds)

    # -- membership ----------------------------------------------------------------

    def membership_state(self, state: State) -> None:
        for each, child in self._states.items():
            child.set(1 if each is state else 0)

    def ring_members(self, view: MembershipView, groups: Iterable[str] | None = None) -> None:
        """Ring sizes of ``view`` for ``groups`` (``None``: every announced group)."""
        if groups is None:
            wanted: set[str] = set()
            for member in view.members.values():
                wanted.update(member.capabilities.get("groups") or [])
        else:
            wanted = set(groups)
        # Counted, not built: a ring costs 4096 points per member.
        sizes = {g: len(view.weights_for(g)) for g in wanted}
        sizes[ALL_GROUPS] = len(view.members)
        # Called by the membership's one watcher thread: no lock needed.
        for gone in self._ring_groups - sizes.keys():
            self._ring_members.remove(self.host, gone)
        self._ring_groups = set(sizes)
        for group, size in sizes.items():
            self._ring_members.labels(self.host, group).set(size)


class MetricsServer:
    """The HTTP endpoint serving one registry, per ``[metrics]`` options.

    The server runs in a daemon thread started by :meth:`start` (from a
    service's ``run()``: never at import, never before a fork) and is shut
    down by :meth:`stop`.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int | None:
        """The port listened on (the one picked when ``port = 0``); None if not serving."""
        return None if self._server is None else int(self._server.server_address[1])

    def start(self, conf: cfg.ConfigOpts, default_port: int, host: str) -> bool:
        """Serve if ``[metrics] enabled``; True if serving.

        :raises ConfigurationError: naming ``[metrics] port`` when the
            address cannot be listened on (in use, not local, ...).
        """
        opts = conf.metrics
        if not opts.enabled:
            return False
        port = default_port if opts.port is None else int(opts.port)
        try:
            self._server, self._thread = start_http_server(
                port, addr=opts.listen_address, registry=self._registry
            )
        except OSError as exc:
            raise ConfigurationError(
                "metrics", "port", f"cannot listen on {opts.listen_address}:{port}: {exc}"
            ) from None
        LOG.info("%s serving metrics on http://%s:%d/metrics", host, opts.listen_address, self.port)
        return True

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(5)
