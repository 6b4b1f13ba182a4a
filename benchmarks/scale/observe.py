# SPDX-License-Identifier: Apache-2.0
"""What the scale benchmark observes of a fleet: whether the ring converged
(every unpinned node owned by its ring owner, as the agents compute it),
the claims the conductors logged, and the counters on the services' own
metrics endpoints (inventory rows read, RPC calls served).
"""

from __future__ import annotations

import re
import threading
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sqlalchemy import select

from conductor.db.engine import Database
from conductor.db.models import NodeModel
from hashring.membership import Membership, MembershipView

__all__ = [
    "METRICS_AT",
    "ConvergenceWatch",
    "Log",
    "Nodes",
    "converged",
    "count_claims",
    "inventory_rows",
    "metrics_urls",
    "node_index_cpu",
    "read_nodes",
    "ring_owners",
    "rows_summary",
    "rpc_served",
    "rpc_served_cpu",
    "scrape",
    "since",
]

CLAIMED = re.compile(r"Agent (\S+) claimed (\d+) of (\d+) nodes \((\d+) refused")
RELEASED = re.compile(r"Agent (\S+) released (\d+) nodes")

Log = Callable[[str], None]
#: node uuid -> (group, owner, pinned)
Nodes = dict[str, tuple[str, str | None, bool]]


# -- what converged means ---------------------------------------------------------------


def read_nodes(db: Database) -> Nodes:
    """Every node's group, owner and whether it is pinned (holds an instance)."""
    with db.transaction() as session:
        rows = session.execute(
            select(NodeModel.uuid, NodeModel.node_group, NodeModel.owner, NodeModel.instance_uuid)
        ).all()
    return {u: (g, o, i is not None) for u, g, o, i in rows}


def ring_owners(view: MembershipView, nodes: Nodes) -> dict[str, str]:
    """Each node's ring owner in ``view`` (the agents' own rule,
    :meth:`compute_agent.ownership.Ownership.desired`: one ring per node group)."""
    by_group: dict[str, list[str]] = {}
    for uuid, (group, _owner, _pinned) in nodes.items():
        by_group.setdefault(group, []).append(uuid)
    owners: dict[str, str] = {}
    for group, uuids in by_group.items():
        ring = view.ring(group)
        if len(ring):
            owners.update(zip(uuids, ring.assign(uuids), strict=True))
    return owners


def converged(view: MembershipView, nodes: Nodes, agents: set[str]) -> tuple[bool, int]:
    """Whether ``view`` holds exactly ``agents`` and every unpinned node is
    owned by its ring owner; and how many unpinned nodes are not (yet)."""
    if set(view.members) != agents:
        return False, -1
    owners = ring_owners(view, nodes)
    off = sum(
        1
        for uuid, (_group, owner, pinned) in nodes.items()
        if not pinned and owner != owners.get(uuid)
    )
    return off == 0, off


class ConvergenceWatch:
    """The live group as a conductor sees it: a passive member of the fleet's
    group (``join=False``), its latest view."""

    def __init__(self, etcd_url: str, group: str) -> None:
        self._lock = threading.Lock()
        self._view: MembershipView | None = None
        # Its TTL matters to nobody (it never joins): a long one keeps a
        # benchmark process busy reading 100k rows from flapping to SUSPENDED.
        self._membership = Membership(
            f"{etcd_url}?membership_timeout=60",
            "scale-bench-watch",
            group=group,
            on_change=self._changed,
            watch_interval=0.1,
            join=False,
        )

    def _changed(self, view: MembershipView) -> None:
        with self._lock:
            self._view = view

    def start(self) -> ConvergenceWatch:
        self._membership.start()
        return self

    def stop(self) -> None:
        self._membership.stop(leave=False)

    def view(self) -> MembershipView | None:
        with self._lock:
            return self._view

    def members(self) -> set[str]:
        view = self.view()
        return set(view.members) if view is not None else set()


def count_claims(text: str) -> dict[str, int]:
    """Claims granted and refused, claim calls, and releases in conductor log text."""
    counts = {"claim_calls": 0, "granted": 0, "refused": 0, "release_calls": 0, "released": 0}
    for match in CLAIMED.finditer(text):
        counts["claim_calls"] += 1
        counts["granted"] += int(match.group(2))
        counts["refused"] += int(match.group(4))
    for match in RELEASED.finditer(text):
        counts["release_calls"] += 1
        counts["released"] += int(match.group(2))
    return counts


#: ``<host> serving metrics on URL``: every service logs its metrics endpoint
#: (port 0: a free one), an agent of a group too, with its own host.
METRICS_AT = re.compile(r"(\S+) serving metrics on (http://127\.0\.0\.1:\d+/metrics)")
INVENTORY_ROWS = re.compile(r'^ringfleet_agent_inventory_rows_total\{host="([^"]+)"\} (\S+)$', re.M)


def metrics_urls(log: str) -> dict[str, str]:
    """Host -> metrics URL, from a process log (the last one logged per host)."""
    return {host: url for host, url in METRICS_AT.findall(log)}


def inventory_rows(text: str) -> dict[str, int]:
    """Host -> ``ringfleet_agent_inventory_rows_total`` in a Prometheus text page."""
    return {host: int(float(value)) for host, value in INVENTORY_ROWS.findall(text)}


RPC_SERVED = re.compile(
    r'^ringfleet_rpc_server_duration_seconds_(count|sum)\{[^}]*method="([^"]+)"[^}]*\} (\S+)$',
    re.M,
)


def rpc_served(text: str) -> dict[str, tuple[int, float]]:
    """Method -> (calls, seconds) served, summed over outcomes, from a
    conductor's metrics page (``ringfleet_rpc_server_duration_seconds``)."""
    served: dict[str, list[float]] = {}
    for kind, method, value in RPC_SERVED.findall(text):
        entry = served.setdefault(method, [0.0, 0.0])
        entry[0 if kind == "count" else 1] += float(value)
    return {method: (int(count), seconds) for method, (count, seconds) in served.items()}


RPC_SERVED_CPU = re.compile(
    r'^ringfleet_rpc_server_cpu_seconds_total\{[^}]*method="([^"]+)"[^}]*\} (\S+)$', re.M
)


def rpc_served_cpu(text: str) -> dict[str, float]:
    """Method -> CPU seconds its calls took, from a service's metrics page
    (``ringfleet_rpc_server_cpu_seconds_total``; none from an older one)."""
    spent: dict[str, float] = {}
    for method, value in RPC_SERVED_CPU.findall(text):
        spent[method] = spent.get(method, 0.0) + float(value)
    return spent


NODE_INDEX_CPU = re.compile(
    r"^ringfleet_conductor_node_index_cpu_seconds_total\{[^}]*\} (\S+)$", re.M
)


def node_index_cpu(text: str) -> float:
    """The CPU seconds a conductor's node index took so far, refreshes and
    rebuilds (``ringfleet_conductor_node_index_cpu_seconds_total``; 0 from
    an older conductor)."""
    return sum(float(value) for value in NODE_INDEX_CPU.findall(text))


def scrape(url: str) -> str:
    """A metrics page (the endpoints are the fleet's own, on 127.0.0.1)."""
    with urllib.request.urlopen(url, timeout=30) as answer:
        text: str = answer.read().decode()
    return text


def since(now: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    """Per host, the counter's growth since ``before`` (a new host: all of it)."""
    return {host: count - before.get(host, 0) for host, count in now.items()}


def rows_summary(rows: Mapping[str, int], hosts: Iterable[str]) -> dict[str, Any]:
    """Rows read by ``hosts`` (one that served no counter: 0): per host, sum, largest."""
    mine = {host: rows.get(host, 0) for host in sorted(hosts)}
    return {
        "rows_read": mine,
        "rows_read_total": sum(mine.values()),
        "rows_read_max": max(mine.values(), default=0),
    }
