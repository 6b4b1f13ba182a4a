# SPDX-License-Identifier: Apache-2.0
"""The scale benchmark's runs: a fresh database and fleet per agent count
(:func:`run_one`), the steps in order (:func:`steps`) and the report of
every count (:func:`run`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.report import Goals
from benchmarks.scale.goals import goals
from benchmarks.scale.observe import ConvergenceWatch, Log
from benchmarks.scale.procs import spawn
from benchmarks.scale.projection import project_report, projection_goals
from benchmarks.scale.report import cell
from benchmarks.scale.run import Run
from conductor.db import migration
from conductor.db.engine import Database
from tests.dbutil import fresh_database
from tests.functional.fleet_harness import TTL, Fleet
from tests.harness import ServiceProcess

__all__ = ["judge", "make_fleet", "run", "run_one", "steps"]

#: The functional tests' agent intervals, and what the fleet runs with here
#: instead: the defaults, as an operator runs them.  (The tests' one-second
#: reconcile and two-second power report exist to make failures show fast
#: in a test of a few nodes; at 100k nodes they cost the agents, together,
#: about a quarter of a core more than the defaults.)
_TEST_INTERVALS = "reconcile_interval = 1\nreport_interval = 2\nquiet_reconcile_interval = 1\n"


def make_fleet(
    workdir: Path,
    db_url: str,
    transport_url: str,
    etcd_url: str,
    ttl: int = TTL,
    watch_interval: float = 0.2,
) -> Fleet:
    """The functional tests' fleet, deploy and clean time 0, DEBUG logging off
    (at 100k nodes DEBUG lines are most of the logging cost), the agents'
    reconcile and report intervals at their defaults, and the membership
    TTL and watch interval given."""
    fleet = Fleet(
        workdir,
        db_url=db_url,
        transport_url=transport_url,
        etcd_url=etcd_url,
        step_duration=0.0,
        backend_url=f"{etcd_url}?membership_timeout={ttl}",
        watch_interval=watch_interval,
    )
    assert _TEST_INTERVALS in fleet.common, "the functional fleet's intervals changed"
    fleet.common = (
        fleet.common.replace("debug = true", "debug = false")
        .replace("clean_duration = 0.05", "clean_duration = 0")
        .replace(_TEST_INTERVALS, "")
    ) + "[metrics]\nenabled = true\nlisten_address = 127.0.0.1\nport = 0\n"  # Traffic reads them
    return fleet


def run_one(args: argparse.Namespace, agents: int, log: Log) -> dict[str, Any]:
    """The steps for one agent count, on a fresh database and fleet."""
    with contextlib.ExitStack() as stack:
        workdir = Path(tempfile.mkdtemp(prefix=f"scale-bench-{agents}-"))
        db_url = stack.enter_context(fresh_database(args.db_url, prefix="rf_bench"))
        database = Database(db_url)
        migration.upgrade(database)
        database.dispose()
        fleet = make_fleet(
            workdir, db_url, args.transport_url, args.etcd_url, args.ttl, args.watch_interval
        )
        stack.callback(fleet.close)  # kill -9 of every process: nothing to wait for
        watch = ConvergenceWatch(args.etcd_url, fleet.group).start()
        stack.callback(watch.stop)
        bench = Run(args, fleet, watch, log)
        results: dict[str, Any] = {
            "agents": agents,
            "agents_per_process": args.agents_per_process,
            "workdir": str(workdir),
        }
        started = time.monotonic()
        try:
            steps(args, bench, agents, results)
        except BaseException:
            log(f"failed; the process logs are in {workdir}")
            raise
        results["conductor_cpu_s"] = bench.sampler.conductor_cpu()
        results["conductor_rss_mb"] = bench.sampler.max_rss["conductor"] / 2**20
        results["agent_rss_mb"] = bench.sampler.max_rss["agent"] / 2**20
        if args.agents_per_process > 1:
            results["agent_share_rss_mb"] = bench.sampler.max_rss["agent_share"] / 2**20
            results["agent_group_rss_mb"] = bench.sampler.max_rss["agent_group"] / 2**20
        results["wall_s"] = time.monotonic() - started
        results["load_end"] = os.getloadavg()[0]  # a shared machine: how busy it was
        return results


def steps(args: argparse.Namespace, bench: Run, agents: int, results: dict[str, Any]) -> None:
    """Start the conductors, then ``args.steps`` in order, into ``results``."""
    conductors = _start(args, bench, agents, results)
    _note_rss(bench, results, "start")
    _cold(args, bench, agents, results)
    _note_rss(bench, results, "cold")
    _changes(args, bench, agents, results)
    _note_rss(bench, results, "changes")
    if "builds" in args.steps:
        _builds(args, bench, agents, conductors, results)
    for wave in range(1, args.waves + 1):
        bench.log(
            f"[{agents} agents] wave {wave} of {args.waves}: join, {args.builds} builds, kill -9"
        )
        results.setdefault("waves", []).append(bench.wave(f"agent-wave-{wave}"))
        bench.log(f"  conductor RSS {results['waves'][-1]['conductor_rss_mb']:.0f} MB")
    if "list" in args.steps:
        bench.log(f"[{agents} agents] ringfleet node list")
        results["node_list"] = bench.node_list()
        bench.log(f"  {results['node_list']['seconds']:.1f} s")


def _note_rss(bench: Run, results: dict[str, Any], step: str) -> None:
    """The conductor's RSS after ``step``, now and the largest so far (MB):
    what it keeps, against the peaks of the steps behind it."""
    now = bench.sampler.conductor_rss_mb()
    results.setdefault("conductor_rss_by_step", {})[step] = {
        "now": now,
        "max": bench.sampler.max_rss["conductor"] / 2**20,
    }


def _start(
    args: argparse.Namespace, bench: Run, agents: int, results: dict[str, Any]
) -> list[ServiceProcess]:
    """The conductors, serving; the nodes imported (measured with ``import``)."""
    fleet = bench.fleet
    conductors = [
        spawn(fleet, "conductor.cmd.conductor", f"cond-{i + 1}", args.code)
        for i in range(args.conductors)
    ]
    for proc in conductors:
        proc.wait_serving(120)
    if "import" in args.steps:
        bench.log(f"[{agents} agents] ringfleet node import of {args.nodes} rows")
        results["import"] = bench.import_nodes()
        bench.log(f"  {results['import']['seconds']:.1f} s")
    else:  # the nodes are needed all the same: by RPC, not measured
        for start in range(0, args.nodes, 1000):
            fleet.api.import_nodes(
                [
                    {"name": f"scale-{i:06d}", "resource_class": "baremetal"}
                    for i in range(start, min(args.nodes, start + 1000))
                ]
            )
    # The conductors take in the new rows (their index reads them) before
    # the cold start, whose CPU is measured: that work is the import's.
    settled = bench.wait_conductors_idle()
    bench.log(f"  conductors idle {settled:.1f} s after the nodes were in")
    return conductors


def _cold(args: argparse.Namespace, bench: Run, agents: int, results: dict[str, Any]) -> None:
    """The cold start (always: the later steps need a fleet), and the quiet fleet."""
    names = [f"agent-{i:02d}" for i in range(agents)]
    per_process, steps = args.agents_per_process, args.steps
    # kill -9 of one agent must not take others with it: without a join
    # (whose agent is killed then), the victim runs in a process of its own.
    alone = names[:1] if per_process > 1 and "kill" in steps and "join" not in steps else []
    bench.log(
        f"[{agents} agents] cold start of {agents} agents"
        + (f", {per_process} to a process" if per_process > 1 else "")
    )
    cold = bench.cold(names, alone)
    if args.quiet:
        cold["quiet"] = bench.quiet(args.quiet)
        cpu = cold["quiet"]["conductor_cpu_s_per_min"]
        bench.log(f"  quiet: conductor CPU {cpu:.2f} s per minute")
    if "cold" in steps:
        results["cold"] = cold
        seconds = cell(cold["seconds"], cold["off"])
        bench.log(f"  {seconds}, {cold['granted']} granted, {cold['refused']} refused")


def _changes(args: argparse.Namespace, bench: Run, agents: int, results: dict[str, Any]) -> None:
    """One agent joins, then kill -9 of it (of the first agent, without a join)."""
    if "join" in args.steps:
        bench.log(f"[{agents} agents] one agent joins")
        results["join"] = join = bench.join("agent-joined")
        bench.log(f"  {cell(join['seconds'], join['off'])}, moved {join['moved']}")
    if "kill" in args.steps:
        victim = "agent-joined" if "join" in args.steps else "agent-00"
        bench.log(f"[{agents} agents] kill -9 of {victim}")
        results["kill"] = bench.kill(victim)
        bench.log(f"  owned again after {cell(results['kill']['owned_s'])}")


def _builds(
    args: argparse.Namespace,
    bench: Run,
    agents: int,
    conductors: Sequence[ServiceProcess],
    results: dict[str, Any],
) -> None:
    """``--builds`` builds; with two conductors, again with one."""
    waves = []
    bench.log(f"[{agents} agents] {args.builds} builds, {len(conductors)} conductor(s)")
    waves.append(bench.builds())
    bench.log(f"  {waves[-1]['builds_per_s']:.0f}/s")
    if len(conductors) > 1:
        for proc in conductors[1:]:
            bench.sampler.sample()  # its CPU time until now
            proc.terminate(60)
        bench.log(f"[{agents} agents] {args.builds} builds, 1 conductor")
        waves.append(bench.builds())
        bench.log(f"  {waves[-1]['builds_per_s']:.0f}/s")
    results["builds"] = waves


def run(args: argparse.Namespace, log: Log = lambda _line: None) -> dict[str, Any]:
    """Every agent count in turn; the JSON-ready report."""
    load_before = os.getloadavg()[0]
    commit = _commit(args.code)  # before the runs: not a commit made meanwhile
    runs = [_with_baseline(args, agents, log) for agents in args.agents]
    report: dict[str, Any] = {
        "config": {
            "nodes": args.nodes,
            "agents": list(args.agents),
            "agents_per_process": args.agents_per_process,
            "conductors": args.conductors,
            "steps": list(args.steps),
            "builds": args.builds,
            "batch": args.batch,
            "baseline_nodes": args.baseline_nodes,
            "ttl_s": args.ttl,
            "watch_interval_s": args.watch_interval,
            "conductor_cores": args.conductor_cores,
            "code": str(args.code) if args.code else None,
            "commit": commit,
        },
        "environment": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_before": load_before,
        },
        "runs": runs,
    }
    return judge(report)


def _with_baseline(args: argparse.Namespace, agents: int, log: Log) -> dict[str, Any]:
    """:func:`run_one`; with builds and ``--baseline-nodes``, after the same
    builds on a small fleet of the same agents (the rate the builds at the
    large fleet are judged against, measured in the same run)."""
    if "builds" not in args.steps or not args.baseline_nodes:
        return run_one(args, agents, log)
    small = argparse.Namespace(**vars(args))
    # Half the fleet at most is built: a full one schedules its last builds slowly.
    small.nodes = max(args.baseline_nodes, 2 * args.builds)
    small.steps, small.waves, small.quiet = ["builds"], 0, 0.0
    log(f"[{agents} agents] baseline: {args.builds} builds on {small.nodes} nodes")
    baseline = run_one(small, agents, log)
    results = run_one(args, agents, log)
    results["builds_baseline"] = {"nodes": small.nodes, "builds": baseline["builds"]}
    return results


def judge(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with its projection and its goals (computed again if there)."""
    config = report["config"]
    report["projection"] = project_report(report)
    projected = Goals()
    projection_goals(projected, report["projection"])
    report["goals"] = goals(report["runs"], config["nodes"], config["ttl_s"]) + projected.items
    return report


def _commit(code: Path | None) -> str | None:
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=code or Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    return None
