# SPDX-License-Identifier: Apache-2.0
"""End-to-end benchmark: builds routed over real RabbitMQ to agent processes.

Run from the repository root, with the test servers::

    tools/with-test-servers.sh python -m benchmarks.e2e_bench
    tools/with-test-servers.sh python -m benchmarks.e2e_bench --nodes 1000 --builds 500 \\
        --batch 10 --clients 4 --latency-requests 100 --bare-calls 1000 --ttl 3 --json e2e.json

One conductor and three compute agents run as separate processes (the
simulated driver with zero deploy time) on the PostgreSQL, RabbitMQ and etcd
that ``tools/with-test-servers.sh`` started (``RINGFLEET_TEST_*``; or pass
``--db-url``, ``--transport-url``, ``--etcd-url``).  The benchmark creates a
private database on that PostgreSQL server and drops it afterwards.  In one
run it measures:

``bare call``
    The floor: round trips of a trivial oslo.messaging ``call`` to an echo
    server in this process, over the same broker.
``routing latency``
    One-instance ``build_instances`` calls, one after the other: from the
    moment the call is made to the agent's accept, i.e. the ``deploy_start``
    the agent writes to the simulated driver's action log when it starts the
    deployment it has just accepted (wall clock of one machine, ns).
``builds/s``
    Several client threads request ``--builds`` instances in requests of
    ``--batch``; from the first request to the last instance ACTIVE (its
    ``updated_at`` in the database).
``failover``
    kill -9 of one agent; the time until every node is owned by a surviving
    agent again (polling the database every 50 ms), against the membership
    TTL (``membership_timeout``).  ``rehome_grace`` is 0 here, so the dead
    agent's pinned nodes count too.

A benchmark reports, tests check: the goals print PASS/MISS, and the exit
status is 0 either way (non-zero only on bad options, missing servers, or a
run that could not complete).  See ``benchmarks/README.rst``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import oslo_messaging as messaging
import psutil
from oslo_config import cfg
from sqlalchemy import select

from benchmarks import argtypes
from benchmarks.report import Goals, format_goals, log_line, percentile, publish
from compute_agent.drivers.simulated.action_log import check_fencing, read_log
from conductor.common import rpc
from conductor.db import migration
from conductor.db.engine import Database
from conductor.db.models import InstanceModel, NodeModel
from conductor.rpcapi import ConductorAPI
from tests.dbutil import fresh_database
from tests.harness import ServiceProcess, wait_for

__all__ = ["format_report", "main", "parse_args", "run"]

AGENTS = ("bench-agent-1", "bench-agent-2", "bench-agent-3")
CONDUCTOR = "bench-conductor"
FLAVOR = "bench"
ECHO_TOPIC = "ringfleet-bench-echo"

Log = Callable[[str], None]


# -- helpers ---------------------------------------------------------------------------


_positive = argtypes.at_least(1)

_non_negative = argtypes.at_least(0)

_seconds = argtypes.seconds(allow_zero=True)


def _stats_ms(values_ms: Sequence[float]) -> dict[str, float]:
    return {
        "count": len(values_ms),
        "p50_ms": percentile(values_ms, 50),
        "p99_ms": percentile(values_ms, 99),
        "mean_ms": sum(values_ms) / len(values_ms) if values_ms else float("nan"),
        "max_ms": max(values_ms) if values_ms else float("nan"),
    }


def _utcnow() -> datetime.datetime:
    # The same naive-UTC convention as conductor.db.models.utcnow.
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


def _transport(transport_url: str) -> Any:
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    conf([], project="ringfleet-e2e-bench", default_config_files=[])
    conf.set_override("transport_url", transport_url)
    return rpc.get_transport(conf)


def stop_all(daemons: Sequence[ServiceProcess], log: Log, timeout: float = 15.0) -> None:
    """Graceful stop (SIGTERM), SIGKILL after ``timeout``: the agents together,
    then the conductors (an agent's last calls need a conductor to answer)."""
    started = time.monotonic()
    agents = [d for d in daemons if d.module.startswith("compute_agent")]
    others = [d for d in daemons if d not in agents]
    stopped = 0
    for group in (agents, others):
        running = [d for d in group if d.running()]
        for daemon in running:
            assert daemon.proc is not None
            daemon.proc.terminate()
        deadline = time.monotonic() + timeout
        for daemon in running:
            assert daemon.proc is not None
            try:
                daemon.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log(f"{daemon.name} still running {timeout:.0f} s after SIGTERM: SIGKILL")
                daemon.kill()
        stopped += len(running)
    if stopped:
        log(f"stopped {stopped} processes in {time.monotonic() - started:.1f} s")


def _common_config(
    *,
    transport_url: str,
    db_url: str,
    etcd_url: str,
    group: str,
    ttl: float,
    watch_interval: float,
    workers: int,
    reconcile_interval: float,
    action_log: Path,
) -> str:
    return (
        f"transport_url = {transport_url}\n"
        "debug = false\n"
        "[database]\n"
        f"connection = {db_url}\n"
        "[coordination]\n"
        f"backend_url = {etcd_url}?membership_timeout={ttl:g}\n"
        f"group = {group}\n"
        f"watch_interval = {watch_interval:g}\n"
        "[conductor]\n"
        # Pinned nodes of a dead agent move at once: failover covers every node.
        "rehome_grace = 0\n"
        f"workers = {workers}\n"
        "[compute_agent]\n"
        f"reconcile_interval = {reconcile_interval:g}\n"
        "[simulated_driver]\n"
        f"action_log = {action_log}\n"
        f"node_store = {action_log.with_name('nodes.sqlite')}\n"
        "step_duration = 0\n"
        "clean_duration = 0\n"
    )


# -- the measurements ---------------------------------------------------------------------


class _Echo:
    target = messaging.Target(version="1.0")

    def echo(self, ctxt: dict[str, Any], payload: Any) -> Any:
        return payload


def bare_calls(transport_url: str, calls: int) -> dict[str, float]:
    """Round trips of a trivial call to an echo server in this process."""
    server_transport = _transport(transport_url)
    client_transport = _transport(transport_url)
    topic = f"{ECHO_TOPIC}-{uuidlib.uuid4().hex[:8]}"
    server = rpc.get_server(server_transport, topic, "bench", [_Echo()])
    server.start()
    try:
        client = rpc.get_client(client_transport, topic, version="1.0", server="bench", timeout=30)
        payload = {"instance_uuid": str(uuidlib.uuid4()), "epoch": 1}
        for _ in range(min(20, calls)):  # connections, queues, reply queue
            client.call({}, "echo", payload=payload)
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            client.call({}, "echo", payload=payload)
            times.append((time.perf_counter() - start) * 1000)
    finally:
        server.stop()
        server.wait()
        server_transport.cleanup()
        client_transport.cleanup()
    return _stats_ms(times)


def _states(db: Database, uuids: Sequence[str]) -> dict[str, tuple[str, datetime.datetime]]:
    found: dict[str, tuple[str, datetime.datetime]] = {}
    with db.transaction() as session:
        for start in range(0, len(uuids), 1000):
            chunk = list(uuids[start : start + 1000])
            for uuid, state, updated in session.execute(
                select(InstanceModel.uuid, InstanceModel.vm_state, InstanceModel.updated_at).where(
                    InstanceModel.uuid.in_(chunk)
                )
            ):
                found[uuid] = (state, updated)
    return found


def _wait_built(db: Database, uuids: Sequence[str], timeout: float) -> dict[str, Any]:
    """Wait until every instance is ACTIVE or ERROR; their states and times."""

    def done() -> dict[str, tuple[str, datetime.datetime]] | None:
        states = _states(db, uuids)
        finished = sum(1 for s, _t in states.values() if s in ("active", "error"))
        return states if finished == len(uuids) else None

    # Polled often: the throughput is measured to when the last one ended.
    states: dict[str, tuple[str, datetime.datetime]] = wait_for(
        done, timeout, f"{len(uuids)} builds ACTIVE or ERROR", step=0.05
    )
    return states


def routing_latency(
    api: ConductorAPI, db: Database, action_log: Path, requests: int, interval: float
) -> dict[str, Any]:
    """Sequential one-instance builds: call -> the agent's accept."""
    sent: list[tuple[str, int, int]] = []
    for _ in range(requests):
        uuid = str(uuidlib.uuid4())
        slot = time.monotonic() + interval
        start = time.time_ns()
        api.build_instances({"flavor": FLAVOR, "count": 1, "instance_uuids": [uuid]})
        sent.append((uuid, start, time.time_ns()))
        time.sleep(max(0.0, slot - time.monotonic()))
    states = _wait_built(db, [u for u, _s, _r in sent], 60 + requests * 0.1)
    accepted: dict[str, int] = {}
    for action in read_log(action_log):
        if action.action == "deploy_start" and action.instance is not None:
            accepted.setdefault(action.instance, action.ns)
    latencies = [(accepted[u] - start) / 1e6 for u, start, _r in sent if u in accepted]
    replies = [(reply - start) / 1e6 for _u, start, reply in sent]
    return {
        "requests": requests,
        "interval_s": interval,
        "accept": _stats_ms(latencies),
        "reply": _stats_ms(replies),
        "errors": sum(1 for s, _t in states.values() if s == "error"),
    }


def throughput(
    transport_url: str, db: Database, builds: int, batch: int, clients: int
) -> dict[str, Any]:
    """``builds`` instances requested by ``clients`` threads in requests of ``batch``."""
    uuids = [str(uuidlib.uuid4()) for _ in range(builds)]
    chunks = [uuids[i : i + batch] for i in range(0, builds, batch)]
    lock = threading.Lock()
    failures: list[str] = []
    transports = [_transport(transport_url) for _ in range(clients)]
    apis = [ConductorAPI(t, timeout=60) for t in transports]
    for api in apis:  # connect before the clock starts
        api.list_flavors()

    def client(api: ConductorAPI) -> None:
        while True:
            with lock:
                if not chunks:
                    return
                chunk = chunks.pop(0)
            try:
                api.build_instances(
                    {"flavor": FLAVOR, "count": len(chunk), "instance_uuids": chunk}
                )
            except Exception as exc:  # reported; the count below shows it
                failures.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=client, args=(api,), daemon=True) for api in apis]
    started_wall = _utcnow()
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stored_s = time.perf_counter() - started
    try:
        if failures:
            raise RuntimeError(f"{len(failures)} build requests failed: {failures[:3]}")
        states = _wait_built(db, uuids, 60 + builds * 0.1)
    finally:
        for transport in transports:
            transport.cleanup()
    last = max(t for _s, t in states.values())
    elapsed = max((last - started_wall).total_seconds(), 1e-6)
    return {
        "builds": builds,
        "batch": batch,
        "clients": clients,
        "stored_s": stored_s,
        "elapsed_s": elapsed,
        "builds_per_s": builds / elapsed,
        "errors": sum(1 for s, _t in states.values() if s == "error"),
    }


def _owners(db: Database) -> list[tuple[str | None, bool, bool]]:
    with db.transaction() as session:
        rows = session.execute(
            select(NodeModel.owner, NodeModel.instance_uuid, NodeModel.maintenance)
        ).all()
    return [(owner, instance is not None, maintenance) for owner, instance, maintenance in rows]


def failover(
    db: Database, victim: ServiceProcess, survivors: set[str], ttl: float, timeout: float
) -> dict[str, Any]:
    """kill -9 ``victim``; seconds until its nodes are all owned by survivors."""
    pinned_on_victim = sum(1 for o, p, _m in _owners(db) if o == victim.name and p)
    owned_by_victim = sum(1 for o, _p, _m in _owners(db) if o == victim.name)
    killed = time.monotonic()
    victim.kill()
    unpinned_s: float | None = None
    all_s: float | None = None
    while time.monotonic() - killed < timeout:
        rows = [r for r in _owners(db) if not r[2]]
        now = time.monotonic() - killed
        if unpinned_s is None and all(o in survivors for o, pinned, _m in rows if not pinned):
            unpinned_s = now
        if all(o in survivors for o, _p, _m in rows):
            all_s = now
            break
        time.sleep(0.05)
    return {
        "victim": victim.name,
        "nodes_owned": owned_by_victim,
        "pinned_owned": pinned_on_victim,
        "ttl_s": ttl,
        "unpinned_s": unpinned_s,
        "all_s": all_s,
        "timeout_s": timeout,
    }


# -- the run ------------------------------------------------------------------------------


def run(args: argparse.Namespace, log: Log = lambda _line: None) -> dict[str, Any]:
    """Start the fleet, measure, stop it; the JSON-ready report."""
    with contextlib.ExitStack() as stack:
        workdir = args.workdir
        failed: list[bool] = []
        if workdir is None:
            workdir = Path(tempfile.mkdtemp(prefix="e2e-bench-"))
            if not args.keep:

                def remove(path: Path = workdir) -> None:
                    if not failed:  # a failed run keeps its logs
                        shutil.rmtree(path, ignore_errors=True)

                stack.callback(remove)  # registered first: runs last
        workdir.mkdir(parents=True, exist_ok=True)
        db_url = stack.enter_context(fresh_database(args.db_url, prefix="rf_bench"))
        database = Database(db_url)
        stack.callback(database.dispose)
        migration.upgrade(database)
        action_log = workdir / "actions.jsonl"
        common = _common_config(
            transport_url=args.transport_url,
            db_url=db_url,
            etcd_url=args.etcd_url,
            group=f"bench-{uuidlib.uuid4().hex[:8]}",
            ttl=args.ttl,
            watch_interval=args.watch_interval,
            workers=args.conductor_workers,
            reconcile_interval=args.reconcile_interval,
            action_log=action_log,
        )
        daemons = [
            ServiceProcess.configured(
                "conductor.cmd.conductor", _conductor_name(i, args.conductors), workdir, common
            )
            for i in range(args.conductors)
        ]
        daemons += [
            ServiceProcess.configured("compute_agent.cmd.agent", name, workdir, common)
            for name in AGENTS
        ]
        stack.callback(stop_all, daemons, log)
        try:
            return _measure(args, log, database, daemons, action_log, workdir)
        except BaseException:
            failed.append(True)
            log(f"failed; the process logs are kept in {workdir}")
            for daemon in daemons:
                tail = [line for line in daemon.log().splitlines() if " DEBUG " not in line]
                log(f"--- {daemon.name} ({daemon.log_file}), last lines:")
                for line in tail[-15:]:
                    log(line)
            raise


def _measure(
    args: argparse.Namespace,
    log: Log,
    db: Database,
    daemons: list[ServiceProcess],
    action_log: Path,
    workdir: Path,
) -> dict[str, Any]:
    started = time.monotonic()
    conductors = daemons[: args.conductors]
    agent_daemons = daemons[args.conductors :]
    log(f"starting {len(conductors)} conductor(s) and {len(AGENTS)} agents (logs in {workdir})")
    # The conductors first: an agent's first call to a conductor topic nobody
    # consumes yet is dropped and waits for its whole timeout (30 s).
    for daemon in conductors:
        daemon.start()
    for daemon in conductors:
        daemon.wait_serving(90)
    for daemon in agent_daemons:
        daemon.start()
    for daemon in agent_daemons:
        daemon.wait_serving(90)
    transport = _transport(args.transport_url)
    try:
        api = ConductorAPI(transport, timeout=60)
        for start in range(0, args.nodes, 1000):
            api.import_nodes(
                [
                    {"name": f"node-{i:06d}", "resource_class": "baremetal"}
                    for i in range(start, min(args.nodes, start + 1000))
                ]
            )
        api.create_flavor({"name": FLAVOR, "resource_class": "baremetal"})
        agents = set(AGENTS)
        wait_for(
            lambda: all(o in agents for o, _p, _m in _owners(db)),
            60,
            f"{args.nodes} nodes owned by the agents",
            step=0.2,
        )
        log(f"fleet ready in {time.monotonic() - started:.1f} s; warming up")
        warm = [str(uuidlib.uuid4()) for _ in range(args.warmup)]
        if warm:
            api.build_instances({"flavor": FLAVOR, "count": len(warm), "instance_uuids": warm})
            _wait_built(db, warm, 60)
        log(f"bare oslo.messaging calls: {args.bare_calls}")
        floor = bare_calls(args.transport_url, args.bare_calls)
        log(f"routing latency: {args.latency_requests} sequential one-instance builds")
        routing = routing_latency(api, db, action_log, args.latency_requests, args.latency_interval)
        log(f"throughput: {args.builds} builds, {args.clients} clients, {args.batch} per request")
        cpu_before = _cpu_seconds(daemons)
        rate = throughput(args.transport_url, db, args.builds, args.batch, args.clients)
        cpu_after = _cpu_seconds(daemons)
        rate["cpu_ms_per_build"] = {
            role: (cpu_after[role] - cpu_before[role]) * 1000 / args.builds for role in cpu_before
        }
        victim = agent_daemons[len(AGENTS) // 2]
        log(f"failover: kill -9 of {victim.name}")
        fail = failover(db, victim, agents - {victim.name}, args.ttl, args.ttl + 30)
        violations = _fencing(action_log)
    finally:
        transport.cleanup()
    report = {
        "config": {
            "nodes": args.nodes,
            "builds": args.builds,
            "batch": args.batch,
            "clients": args.clients,
            "latency_requests": args.latency_requests,
            "latency_interval_s": args.latency_interval,
            "bare_calls": args.bare_calls,
            "warmup": args.warmup,
            "ttl_s": args.ttl,
            "watch_interval_s": args.watch_interval,
            "conductor_workers": args.conductor_workers,
            "reconcile_interval_s": args.reconcile_interval,
            "rehome_grace_s": 0.0,
            "conductors": args.conductors,
            "agents": len(AGENTS),
            "deploy_time_s": 0.0,
        },
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "versions": {
                dist: _version(dist)
                for dist in ("oslo.messaging", "kombu", "amqp", "tooz", "SQLAlchemy", "psycopg2")
            },
        },
        "results": {
            "bare_call": floor,
            "routing": routing,
            "throughput": rate,
            "failover": fail,
            "fencing_violations": len(violations),
            "wall_s": time.monotonic() - started,
        },
    }
    report["goals"] = _goals(report["results"])
    return report


def _conductor_name(index: int, count: int) -> str:
    return CONDUCTOR if count == 1 else f"{CONDUCTOR}-{index}"


def _cpu_seconds(daemons: Sequence[ServiceProcess]) -> dict[str, float]:
    """User + system CPU used so far by the conductors and by the agents (s)."""
    used = {"conductors": 0.0, "agents": 0.0}
    for daemon in daemons:
        assert daemon.proc is not None
        times = psutil.Process(daemon.proc.pid).cpu_times()
        role = "agents" if daemon.module.startswith("compute_agent") else "conductors"
        used[role] += times.user + times.system
    return used


def _fencing(action_log: Path) -> list[str]:
    return check_fencing(read_log(action_log)) if action_log.exists() else []


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        if dist == "psycopg2":
            return _version("psycopg2-binary")
        return None


# -- goals and report ------------------------------------------------------------------------


def _goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    goals = Goals()

    def add(name: str, target: str, value: float | None, detail: str, ok: bool | None) -> None:
        goals.add(name, target, value, ok, detail=detail)

    rate = results["throughput"]["builds_per_s"]
    add("end-to-end builds/s", ">= 200/s", rate, f"{rate:,.0f}/s", rate >= 200)
    bare = results["bare_call"]["p50_ms"]
    routed = results["routing"]["accept"]["p50_ms"]
    ratio = routed / bare if bare > 0 else float("inf")
    add(
        "routing latency p50 vs the bare call p50",
        "<= 2x",
        ratio,
        f"{routed:.2f} ms = {ratio:.1f}x {bare:.2f} ms",
        ratio <= 2.0,
    )
    fail = results["failover"]
    limit = fail["ttl_s"] + 2.0
    seconds = fail["all_s"]
    add(
        "failover after kill -9 (every node owned again)",
        f"<= membership_timeout + 2 s = {limit:g} s",
        seconds,
        "not within the benchmark's wait" if seconds is None else f"{seconds:.2f} s",
        seconds is not None and seconds <= limit,
    )
    return goals.items


def format_report(report: dict[str, Any]) -> str:
    """The human-readable table of a :func:`run` report."""
    config, res = report["config"], report["results"]
    env = report["environment"]
    floor, routing, rate, fail = (
        res["bare_call"],
        res["routing"],
        res["throughput"],
        res["failover"],
    )

    def seconds(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2f}"

    rows = [
        ("bare oslo.messaging call p50 (ms)", f"{floor['p50_ms']:.2f}"),
        ("bare oslo.messaging call p99 (ms)", f"{floor['p99_ms']:.2f}"),
        ("build_instances reply p50 (ms)", f"{routing['reply']['p50_ms']:.2f}"),
        ("build_instances reply p99 (ms)", f"{routing['reply']['p99_ms']:.2f}"),
        ("routing latency p50 (ms)", f"{routing['accept']['p50_ms']:.2f}"),
        ("routing latency p99 (ms)", f"{routing['accept']['p99_ms']:.2f}"),
        ("routing p50 / bare call p50", f"{routing['accept']['p50_ms'] / floor['p50_ms']:.1f}x"),
        ("end-to-end builds/s", f"{rate['builds_per_s']:.1f}"),
        (f"  {rate['builds']} builds stored after (s)", f"{rate['stored_s']:.2f}"),
        (f"  {rate['builds']} builds ACTIVE after (s)", f"{rate['elapsed_s']:.2f}"),
        ("  conductor CPU per build (ms)", f"{rate['cpu_ms_per_build']['conductors']:.2f}"),
        ("  agent CPU per build (ms)", f"{rate['cpu_ms_per_build']['agents']:.2f}"),
        ("builds in ERROR", str(rate["errors"] + routing["errors"])),
        (
            f"failover, unpinned nodes (s) [{fail['nodes_owned']} nodes]",
            seconds(fail["unpinned_s"]),
        ),
        (
            f"failover, all nodes (s) [{fail['pinned_owned']} pinned]",
            seconds(fail["all_s"]),
        ),
        ("membership_timeout (s)", f"{fail['ttl_s']:g}"),
        ("fencing violations", str(res["fencing_violations"])),
    ]
    width = max(len(label) for label, _v in rows) + 2
    lines = [
        f"end-to-end benchmark: {config['conductors']} conductor process(es), "
        f"{config['agents']} agent processes, {config['nodes']:,} nodes, deploy time 0, "
        f"RabbitMQ / etcd / PostgreSQL on this machine; Python {env['python']}, "
        f"{env['cpus']} CPUs; oslo.messaging {env['versions'].get('oslo.messaging')}",
        f"builds: {config['builds']} in requests of {config['batch']} from "
        f"{config['clients']} client threads; routing latency: {config['latency_requests']} "
        f"sequential one-instance requests; bare calls: {config['bare_calls']}; "
        f"membership_timeout {config['ttl_s']:g} s, watch_interval "
        f"{config['watch_interval_s']:g} s, reconcile_interval "
        f"{config['reconcile_interval_s']:g} s, rehome_grace 0, "
        f"{config['conductor_workers']} conductor workers",
        "",
    ]
    lines += [f"{label:<{width}}{value:>10}" for label, value in rows]
    lines += format_goals(report["goals"])
    return "\n".join(lines)


# -- command line ----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command-line options (server URLs default to ``RINGFLEET_TEST_*``)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.e2e_bench",
        description=(
            "End-to-end builds over real RabbitMQ to agent processes: builds/s, routing "
            "latency against the bare oslo.messaging call, failover after kill -9. "
            "Run it through tools/with-test-servers.sh."
        ),
    )
    env = os.environ.get
    parser.add_argument("--nodes", type=_positive, default=1000, help="nodes (default 1000)")
    parser.add_argument(
        "--builds", type=_positive, default=500, help="instances of the throughput run (500)"
    )
    parser.add_argument("--batch", type=_positive, default=10, help="instances per request (10)")
    parser.add_argument("--clients", type=_positive, default=4, help="client threads (4)")
    parser.add_argument(
        "--latency-requests",
        type=_positive,
        default=100,
        help="sequential one-instance requests of the latency run (100)",
    )
    parser.add_argument(
        "--latency-interval",
        type=_seconds,
        default=0.1,
        help=(
            "seconds between the starts of two latency requests (0.1: longer than a "
            "whole build, so that requests do not overlap)"
        ),
    )
    parser.add_argument(
        "--bare-calls", type=_positive, default=1000, help="bare RPC round trips (1000)"
    )
    parser.add_argument(
        "--warmup", type=_non_negative, default=10, help="builds before measuring (10)"
    )
    parser.add_argument(
        "--ttl", type=_seconds, default=3.0, help="membership_timeout in seconds (3)"
    )
    parser.add_argument(
        "--watch-interval",
        type=_seconds,
        default=1.0,
        help="[coordination] watch_interval of every process (1.0, the default)",
    )
    parser.add_argument(
        "--reconcile-interval",
        type=_seconds,
        default=5.0,
        help="[compute_agent] reconcile_interval of the agents (5, the default)",
    )
    parser.add_argument(
        "--conductor-workers",
        type=_positive,
        default=8,
        help="[conductor] workers: build threads of the conductor (8, the default)",
    )
    parser.add_argument(
        "--conductors",
        type=_positive,
        default=1,
        help="conductor processes, active-active on the same topic and database (1)",
    )
    parser.add_argument("--db-url", default=env("RINGFLEET_TEST_DB_URL"))
    parser.add_argument("--transport-url", default=env("RINGFLEET_TEST_TRANSPORT_URL"))
    parser.add_argument("--etcd-url", default=env("RINGFLEET_TEST_ETCD_URL"))
    parser.add_argument("--workdir", type=Path, help="configs and logs here (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir with the logs")
    parser.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    args = parser.parse_args(argv)
    argtypes.require_servers(
        parser, args, "tools/with-test-servers.sh python -m benchmarks.e2e_bench"
    )
    needed = args.builds + args.latency_requests + args.warmup
    if args.nodes < needed:
        parser.error(f"--nodes {args.nodes} < the {needed} instances the run builds")
    if args.ttl < 2.0:
        parser.error("--ttl must be >= 2 (etcd grants no shorter lease)")
    if not 0.05 <= args.watch_interval <= 1.0:
        parser.error("--watch-interval must be within 0.05..1.0")
    if args.reconcile_interval < 0.5:
        parser.error("--reconcile-interval must be >= 0.5")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return publish("e2e_bench", lambda: run(args, log=log_line), format_report, args.json)


if __name__ == "__main__":
    sys.exit(main())
