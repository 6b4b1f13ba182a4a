# SPDX-License-Identifier: Apache-2.0
"""Requests the fleet makes to etcd during a step of the scale benchmark.

Counted by etcd itself: its ``/metrics`` page's
``grpc_server_msg_received_total`` per gRPC method, scraped before and
after.  The services reach etcd through tooz's ``etcd3+http`` driver, i.e.
etcd's JSON gateway, which etcd serves by calling its own gRPC server: each
HTTP request is one gRPC message received (a lease keep-alive too, one
message on a stream of its own), so the server's counter sees every
request of every process without touching the services.  Why not a
counter in the clients: the services would need code for it, and a run
with ``--code`` (another checkout) would not have it.

The benchmark's own watcher (:class:`benchmarks.scale.observe.ConvergenceWatch`,
a group read every 0.1 s) reaches the same etcd: its requests are counted
in this process (every ``requests`` call to etcd's address) and taken off
the server's total.  What is left is divided by the fleet's etcd clients:
each agent and each conductor has its own (K agents in one process: K
clients, each with its own lease), so with one agent per process this is
etcd requests per process.
"""

from __future__ import annotations

import re
import threading
import urllib.parse
from collections.abc import Mapping
from typing import Any

import requests

from benchmarks.scale.observe import scrape

__all__ = ["EtcdRequests", "grpc_requests", "metrics_url", "requests_between"]

MSG_RECEIVED = re.compile(
    r'^grpc_server_msg_received_total\{[^}]*grpc_method="([^"]+)"[^}]*\} (\S+)$', re.M
)

#: (etcd's count per method, this process's own requests to etcd), or None: unknown.
EtcdSample = tuple[dict[str, int], int] | None


def metrics_url(etcd_url: str) -> str:
    """etcd's metrics page for a tooz URL (``etcd3+http://host:port?...``)."""
    parts = urllib.parse.urlsplit(etcd_url)
    scheme = parts.scheme.rpartition("+")[2] or "http"
    return f"{scheme}://{parts.netloc}/metrics"


def grpc_requests(text: str) -> dict[str, int]:
    """gRPC method -> messages received, summed over services, from etcd's metrics."""
    counts: dict[str, int] = {}
    for method, value in MSG_RECEIVED.findall(text):
        counts[method] = counts.get(method, 0) + int(float(value))
    return counts


class _OwnRequests:
    """This process's HTTP requests to one address, counted at
    ``requests.Session.send`` (the etcd3gw client's path)."""

    def __init__(self, netloc: str) -> None:
        self.netloc = netloc
        self.count = 0
        self._lock = threading.Lock()
        original = requests.Session.send

        def send(session: requests.Session, request: Any, **kwargs: Any) -> Any:
            if urllib.parse.urlsplit(request.url).netloc == self.netloc:
                with self._lock:
                    self.count += 1
            return original(session, request, **kwargs)

        # Once per process and address: a second counter would wrap the first.
        requests.Session.send = send  # type: ignore[method-assign,assignment]


_COUNTERS: dict[str, _OwnRequests] = {}


class EtcdRequests:
    """Samples of etcd's request counts and of this process's own."""

    def __init__(self, etcd_url: str | None) -> None:
        self.url = metrics_url(etcd_url) if etcd_url else None
        netloc = urllib.parse.urlsplit(etcd_url or "").netloc
        if netloc and netloc not in _COUNTERS:
            _COUNTERS[netloc] = _OwnRequests(netloc)
        self._own = _COUNTERS.get(netloc)

    def sample(self) -> EtcdSample:
        if self.url is None or self._own is None:
            return None
        try:
            server = grpc_requests(scrape(self.url))
        except OSError:
            return None
        own = self._own.count
        if not server:
            return None
        # Our scrape is plain urllib: not counted as a request to etcd's API.
        return server, own


def requests_between(start: EtcdSample, end: EtcdSample, clients: int) -> dict[str, Any] | None:
    """The fleet's etcd requests between two samples, per method and per
    client (``clients``: agents + conductors); None if either is unknown."""
    if start is None or end is None or clients < 1:
        return None
    by_method = _grown(end[0], start[0])
    own = end[1] - start[1]
    total = max(sum(by_method.values()) - own, 0)
    return {
        "requests": total,
        "own_requests": own,
        "by_method": {m: n for m, n in sorted(by_method.items()) if n > 0},
        "clients": clients,
        "per_client": total / clients,
    }


def _grown(now: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    return {key: value - before.get(key, 0) for key, value in now.items()}
