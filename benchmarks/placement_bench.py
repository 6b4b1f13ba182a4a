# SPDX-License-Identifier: Apache-2.0
"""Benchmark of the agents' Placement reporter against a real Placement, in one run.

Run from the repository root, with a Placement to write to (the test
servers' one: ``SERVERS=placement tools/with-test-servers.sh``)::

    python -m benchmarks.placement_bench [--nodes 2000] [--concurrency 1,4,8]
                                         [--url URL] [--json FILE]

``--url`` defaults to ``$RINGFLEET_TEST_PLACEMENT_URL`` (noauth2, token
``admin``).  The node records come from an in-memory stand-in for the
conductor (the reporter's reads of its owned nodes are the conductor's
work, measured by ``scale_bench``); everything sent to Placement is real.

For each concurrency, on providers of fresh uuids, one agent's reporter:

``first report``
    every node's provider created, with inventory, traits and aggregate:
    providers/s and requests per provider.
``unchanged``
    a pass when nothing changed: its seconds (no request to Placement).
``changes``
    1 % of the nodes put into maintenance and 1 % given an instance: the
    pass's seconds and requests (the allocations in one request).
``full comparison``
    the drift repair (``[placement] resync_interval``): every provider
    read back and compared; providers/s.

``concurrency 1`` is the prior art's way: Nova's resource tracker writes
its compute nodes' providers one after the other, one request at a time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
import uuid as uuid_lib
from typing import Any

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

import conductor  # noqa: F401  (native threads first: no eventlet)
from benchmarks.argtypes import at_least
from compute_agent.placement_report import PlacementReporter
from conductor.common.conf import placement as placement_conf
from conductor.common.placement.client import PlacementClient


class _Records:
    """The conductor calls the reporter makes, over in-memory records."""

    def __init__(self, n: int, host: str) -> None:
        self.nodes = {}
        for i in range(n):
            uuid = str(uuid_lib.uuid4())
            self.nodes[uuid] = {
                "uuid": uuid,
                "name": f"bench-{uuid[:8]}-{i}",
                "resource_class": f"bench-{i % 5}",
                "traits": ["CUSTOM_BENCH_RAID"] if i % 2 else [],
                "maintenance": False,
                "provision_state": "available",
                "instance_uuid": None,
                "owner": host,
            }
        self.instances: dict[str, dict[str, Any]] = {}
        self.changed: set[str] = set()  # the bench's changes since the last feed read

    def list_node_share(
        self, member: str, *, since: str | None = None, marker: str | None = None, limit: int = 5000
    ) -> dict[str, Any]:
        """The change feed of the agent's nodes: what the bench changed."""
        changed, self.changed = sorted(self.changed), set()
        as_of = datetime.datetime.now(datetime.UTC).isoformat()
        return {"nodes": [{"uuid": u} for u in changed], "as_of": as_of, "next": None}

    def list_nodes(
        self, filters: Any = None, limit: int = 1000, marker: str | None = None
    ) -> list[dict[str, Any]]:
        ordered = sorted(self.nodes)
        start = 0 if marker is None else ordered.index(marker) + 1
        return [dict(self.nodes[u]) for u in ordered[start : start + limit]]

    def show_instance(self, instance: str) -> dict[str, Any]:
        return self.instances[instance]

    def show_node(self, node: str) -> dict[str, Any]:
        return self.nodes[node]


class _Counting:
    """keystoneauth's adapter, counting requests."""

    def __init__(self, adapter: Any) -> None:
        self.adapter, self.requests = adapter, 0

    def request(self, *args: Any, **kwargs: Any) -> Any:
        self.requests += 1
        return self.adapter.request(*args, **kwargs)


def _reporter(url: str, concurrency: int, records: _Records) -> tuple[PlacementReporter, _Counting]:
    conf = cfg.ConfigOpts()
    placement_conf.OPTIONS.register(conf)
    conf([])
    conf.set_override("auth_type", "admin_token", "placement")
    conf.register_opts(ks_loading.get_auth_plugin_conf_options("admin_token"), "placement")
    conf.set_override("token", "admin", "placement")
    conf.set_override("endpoint", url, "placement")
    conf.set_override("endpoint_override", url, "placement")
    conf.set_override("concurrency", concurrency, "placement")
    real = PlacementClient.from_conf(conf)
    counting = _Counting(real._adapter)
    client = PlacementClient(counting, url)
    reporter = PlacementReporter(
        "bench-agent",
        conf,
        client,
        records,  # type: ignore[arg-type]
        interval=lambda: 60.0,
        can_act=lambda: True,
        held=records.nodes.keys,
        holds=records.nodes.__contains__,
    )
    return reporter, counting


def run(url: str, nodes: int, concurrency: int) -> dict[str, Any]:
    records = _Records(nodes, "bench-agent")
    reporter, counting = _reporter(url, concurrency, records)
    out: dict[str, Any] = {"concurrency": concurrency, "nodes": nodes}
    started = time.perf_counter()
    reporter.run_pass()
    seconds = time.perf_counter() - started
    out["first_report_s"] = round(seconds, 2)
    out["first_providers_per_s"] = round(nodes / seconds, 1)
    out["first_requests_per_provider"] = round(counting.requests / nodes, 2)

    counting.requests = 0
    started = time.perf_counter()
    reporter.run_pass()
    out["unchanged_s"] = round(time.perf_counter() - started, 3)
    out["unchanged_requests"] = counting.requests

    changed = sorted(records.nodes)[: max(1, nodes // 100) * 2]
    records.changed.update(changed)
    for i, uuid in enumerate(changed):
        if i % 2:
            records.nodes[uuid]["maintenance"] = True
        else:
            instance = str(uuid_lib.uuid4())
            records.instances[instance] = {"project_id": "bench", "user_id": "bench"}
            records.nodes[uuid].update(instance_uuid=instance, provision_state="active")
    counting.requests = 0
    started = time.perf_counter()
    result = reporter.run_pass()
    out["changes"] = len(changed)
    out["changes_s"] = round(time.perf_counter() - started, 2)
    out["changes_requests"] = counting.requests
    out["changes_allocation_requests"] = 1 if result.allocations else 0

    counting.requests = 0
    started = time.perf_counter()
    reporter.run_pass(full=True)
    seconds = time.perf_counter() - started
    out["full_comparison_s"] = round(seconds, 2)
    out["full_providers_per_s"] = round(nodes / seconds, 1)
    out["full_requests_per_provider"] = round(counting.requests / nodes, 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=at_least(1), default=2000)
    parser.add_argument("--concurrency", default="1,4,8")
    parser.add_argument("--url", default=os.environ.get("RINGFLEET_TEST_PLACEMENT_URL"))
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    if not args.url:
        parser.error("--url: no Placement (or set RINGFLEET_TEST_PLACEMENT_URL)")
    rows = [run(args.url, args.nodes, int(c)) for c in args.concurrency.split(",")]
    keys = [k for k in rows[0] if k not in ("concurrency",)]
    print(f"{'':32}" + "".join(f"{'concurrency ' + str(r['concurrency']):>18}" for r in rows))
    for key in keys:
        print(f"{key:32}" + "".join(f"{r[key]!s:>18}" for r in rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(rows, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
