# SPDX-License-Identifier: Apache-2.0
"""The Ironic inventory sync at 1,000 nodes, beside what Nova's ironic driver did.

Run against a real Ironic (``tools/with-test-servers.sh`` starts one)::

    SERVERS=ironic tools/with-test-servers.sh .venv/bin/python -m benchmarks.ironic_sync_bench

It enrolls ``--nodes`` fake-hardware nodes in a fresh shard, then measures
(medians of ``--repeat`` runs):

* ringfleet's first pass (every node created), a steady pass (nothing
  changed in Ironic) and a pass after 5 % of the nodes changed maintenance;
* the listings behind them: ``?fields=`` (ringfleet's) and ``/nodes/detail``;
* the prior art, measured in the same run: Nova's ironic driver had *every*
  nova-compute list the whole Ironic fleet each periodic task, so a fleet of
  ``--agents`` compute services paid that many listings per interval, where
  ringfleet pays one per conductor;
* the alternative ringfleet rejected on this measurement: every agent reading
  each of its own nodes (``--agents`` equal shares, one GET each) per
  interval.

Goals are reported, never turned into an exit status (the machine is shared).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from oslo_config import cfg

from benchmarks.report import Goals, format_goals
from conductor.common import conf as common_conf
from conductor.db.engine import Database
from conductor.ironic_sync import IronicInventorySync
from tests.dbutil import migrated
from tests.harness.ironic import IronicHarness, unique_shard

__all__ = ["main"]


def _timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def _enroll(url: str, shard: str, count: int, threads: int) -> list[str]:
    shares = [count // threads + (1 if i < count % threads else 0) for i in range(threads)]

    def enroll(index: int) -> list[str]:
        with IronicHarness(url) as harness:
            return harness.enroll(
                shares[index], shard=shard, name_prefix=f"{shard}-{index}", timeout=600
            )

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        return [uuid for part in pool.map(enroll, range(threads)) for uuid in part]


def _sync(db_url: str, url: str, shard: str) -> tuple[IronicInventorySync, Database]:
    conf = cfg.ConfigOpts()
    common_conf.register_opts(conf, common_conf.CONDUCTOR)
    conf([], project="ringfleet-bench")
    conf.set_override("auth_type", "none", "ironic")
    conf.set_override("endpoint_override", url, "ironic")
    conf.set_override("shards", [shard], "ironic")
    db = Database(db_url)
    return IronicInventorySync(db, conf), db


def run(args: argparse.Namespace) -> dict[str, Any]:
    url = args.ironic_url
    shard = unique_shard("rf-bench")
    workdir = Path(tempfile.mkdtemp(prefix="ironic-sync-bench-"))
    enroll_s, uuids = _timed(lambda: _enroll(url, shard, args.nodes, args.enroll_threads))
    print(f"enrolled {len(uuids)} nodes in {enroll_s:.1f} s", file=sys.stderr)
    harness = IronicHarness(url)
    results: dict[str, list[float]] = {
        "first pass": [],
        "steady pass": [],
        "pass after 5% maintenance changes": [],
        "listing ?fields= (one page walk)": [],
        "listing /nodes/detail": [],
        "agent refresh of its own nodes": [],
    }
    try:
        for attempt in range(args.repeat):
            db_url = args.db_url or f"sqlite:///{workdir / f'ringfleet-{attempt}.db'}"
            migrated(db_url).dispose()
            sync, db = _sync(db_url, url, shard)
            seconds, summary = _timed(sync.run)
            assert summary.created == len(uuids), summary
            results["first pass"].append(seconds)
            seconds, summary = _timed(sync.run)
            assert summary.created == summary.updated == 0, summary
            results["steady pass"].append(seconds)
            changed = uuids[attempt::20]
            for uuid in changed:
                harness.set_maintenance(uuid, True, reason="bench")
            seconds, summary = _timed(sync.run)
            if summary.updated < len(changed):
                in_ironic = sum(1 for n in harness.nodes(shard) if n["maintenance"])
                raise AssertionError(
                    f"{len(changed)} nodes changed maintenance, the pass changed "
                    f"{summary.updated}; Ironic shows {in_ironic} in the new state: {summary}"
                )
            results["pass after 5% maintenance changes"].append(seconds)
            for uuid in changed:  # the next attempt starts from a fresh database
                harness.set_maintenance(uuid, False)
            db.dispose()
            seconds, _ = _timed(
                lambda: harness.request(
                    "GET",
                    f"/v1/nodes?shard={shard}&limit=1000&fields=uuid,name,"
                    "resource_class,traits,properties,conductor_group,shard,maintenance,"
                    "maintenance_reason,power_state,provision_state,instance_uuid,last_error",
                )
            )
            results["listing ?fields= (one page walk)"].append(seconds)
            seconds, _ = _timed(
                lambda: harness.request("GET", f"/v1/nodes/detail?shard={shard}&limit=1000")
            )
            results["listing /nodes/detail"].append(seconds)
            own = uuids[: max(1, len(uuids) // args.agents)]

            def refresh(own: list[str] = own) -> None:
                for uuid in own:
                    harness.request("GET", f"/v1/nodes/{uuid}?fields=power_state,provision_state")

            seconds, _ = _timed(refresh)
            results["agent refresh of its own nodes"].append(seconds)
    finally:
        harness.close()
    medians = {name: statistics.median(values) for name, values in results.items()}
    # Ironic API time per interval: ringfleet's conductors each walk one
    # ?fields= listing (agents read a node only when they act on it); every
    # Nova compute service listed the whole fleet in detail.  The third
    # figure is the alternative ringfleet measured and did not take: every
    # agent reading each of its own nodes.
    api_ringfleet = medians["listing ?fields= (one page walk)"] * args.conductors
    api_per_agent_reads = medians["agent refresh of its own nodes"] * args.agents
    api_nova = medians["listing /nodes/detail"] * args.agents
    goals = Goals()
    goals.add(
        f"steady sync pass at {args.nodes} nodes",
        "<= 5 s",
        medians["steady pass"],
        medians["steady pass"] <= 5.0,
        f"{medians['steady pass']:.2f} s",
    )
    goals.add(
        "Ironic API time per interval, Nova-style / ringfleet",
        ">= 1x",
        api_nova / api_ringfleet if api_ringfleet else None,
        api_nova >= api_ringfleet,
        f"ringfleet {api_ringfleet:.2f} s ({args.conductors} conductor listings) vs "
        f"Nova-style {api_nova:.2f} s ({args.agents} computes x detailed listing); "
        f"per-agent reads of owned nodes would cost {api_per_agent_reads:.2f} s",
    )
    return {
        "nodes": len(uuids),
        "enroll_seconds": enroll_s,
        "repeat": args.repeat,
        "medians": medians,
        "goals": goals.items,
    }


def render(report: dict[str, Any]) -> str:
    lines = [
        f"Ironic inventory sync, {report['nodes']} nodes, medians of {report['repeat']} runs",
        "",
        f"{'step':<46} {'seconds':>9}",
    ]
    for name, value in report["medians"].items():
        lines.append(f"{name:<46} {value:>9.3f}")
    lines.append("")
    lines += format_goals(report["goals"], lambda goal: str(goal.get("detail", goal["value"])))
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--agents", type=int, default=10, help="compute services (prior art)")
    parser.add_argument("--conductors", type=int, default=2, help="conductors syncing")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--enroll-threads", type=int, default=4)
    parser.add_argument("--db-url", default=None, help="default: a temporary SQLite file")
    parser.add_argument("--ironic-url", default=os.environ.get("RINGFLEET_TEST_IRONIC_URL"))
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if not args.ironic_url:
        parser.error("--ironic-url or RINGFLEET_TEST_IRONIC_URL is required")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    report = run(args)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
