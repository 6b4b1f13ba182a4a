# SPDX-License-Identifier: Apache-2.0
"""HTTP API benchmark: the same calls through ringfleet-api and straight over RPC.

Run from the repository root, with the test servers::

    tools/with-test-servers.sh python -m benchmarks.api_bench
    tools/with-test-servers.sh python -m benchmarks.api_bench --requests 500 \\
        --builds 100 --seconds 10 --clients 8 --json api.json

One conductor and one compute agent (simulated driver) run as processes on
the PostgreSQL, RabbitMQ and etcd that ``tools/with-test-servers.sh``
started (a private database, dropped afterwards), and ``ringfleet-api``
runs under gunicorn with ONE worker process (``--threads`` threads), static
tokens.  In one run it measures:

``GET node``
    ``--requests`` sequential ``show_node`` of one node through RPC
    (``ConductorAPI``) and ``GET /v1/nodes/{uuid}`` through the API (a
    kept-alive ``requests`` session), interleaved; the API's overhead is
    the difference of the medians.
``build``
    ``--builds`` sequential one-instance ``build_instances`` through RPC and
    ``POST /v1/instances`` through the API, interleaved, likewise, twice:
    back to back (each request while the previous instances are still
    being scheduled and built), and *settled* (each request once the
    previous instance is ACTIVE).  On a 2-core machine the background work
    of the previous builds (conductor, agent, broker, database) competes
    with the two extra hops an HTTP request makes (client -> API -> broker
    -> conductor and back), so back to back measures that contention as
    much as the API; settled measures what the API adds.
``GETs/s``
    ``--clients`` threads doing ``GET /v1/nodes/{uuid}`` for ``--seconds``:
    what one API process serves while client, API, conductor, broker and
    database share this machine's cores (so mostly the conductor's rate),
    and the API worker's own CPU time per GET (psutil), whose inverse is
    what one API process serves on a core of its own.  The CPU time per
    GET of the conductor and the broker is printed too: their sum with the
    API's is what one GET costs this machine, which bounds the measured
    rate (cores / CPU per GET).

A benchmark reports, tests check: the goals print PASS/MISS and the exit
status is 0 either way (non-zero only on bad options, missing servers, or a
run that could not complete).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid as uuidlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil
import requests

from benchmarks.report import Goals, format_goals, log_line, percentile, publish
from conductor.db import migration
from conductor.db.engine import Database
from tests.dbutil import fresh_database
from tests.functional.api_harness import ApiServer
from tests.functional.fleet_harness import Fleet, start_processes

__all__ = ["format_report", "main", "parse_args", "run"]

Log = Callable[[str], None]

GOAL_OVERHEAD_MS = 2.0
GOAL_GETS_PER_S = 500.0


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000.0


def _ok(response: requests.Response, status: int) -> Any:
    if response.status_code != status:
        raise RuntimeError(
            f"{response.request.method} {response.url}: "
            f"{response.status_code} {response.text[:500]}"
        )
    return response.json()


def run(args: argparse.Namespace, log: Log = lambda _line: None) -> dict[str, Any]:
    """Start the fleet and the API, measure, stop them; the JSON-ready report."""
    with contextlib.ExitStack() as stack:
        workdir = Path(tempfile.mkdtemp(prefix="api-bench-"))
        stack.callback(shutil.rmtree, workdir, True)
        db_url = stack.enter_context(fresh_database(args.db_url, prefix="rf_bench"))
        database = Database(db_url)
        migration.upgrade(database)
        database.dispose()
        fleet = Fleet(
            workdir,
            db_url=db_url,
            transport_url=args.transport_url,
            etcd_url=args.etcd_url,
            step_duration=0.0,
        )
        stack.callback(fleet.close)
        log("starting a conductor and an agent")
        start_processes(fleet, ["bench-conductor"], ["bench-agent"])
        server = ApiServer(workdir, args.transport_url, threads=args.threads, debug=False).start()
        stack.callback(server.stop)
        return _measure(args, log, fleet, server)


def _measure(args: argparse.Namespace, log: Log, fleet: Fleet, server: ApiServer) -> dict[str, Any]:
    rpc, url = fleet.api, server.url
    http = server.session("admin-token")
    nodes = args.builds * 4 + 10
    log(f"enrolling {nodes} nodes and a flavor")
    specs = [{"name": f"bench-{i:05d}", "resource_class": "bench"} for i in range(nodes)]
    _ok(http.post(f"{url}/v1/nodes/import", json={"nodes": specs}, timeout=120), 201)
    _ok(http.post(f"{url}/v1/flavors", json={"name": "bench", "resource_class": "bench"}), 201)
    node = rpc.list_nodes(limit=1)[0]["uuid"]

    log(f"GET node: {args.requests} through RPC and through the API, interleaved")
    for _ in range(20):  # warm-up: connections, caches
        rpc.show_node(node)
        _ok(http.get(f"{url}/v1/nodes/{node}"), 200)
    rpc_get, api_get = [], []
    for _ in range(args.requests):
        rpc_get.append(_timed(lambda: rpc.show_node(node)))
        api_get.append(_timed(lambda: _ok(http.get(f"{url}/v1/nodes/{node}"), 200)))

    log(f"build: {args.builds} one-instance requests each way, interleaved, back to back")
    rpc_build, api_build = _builds(args.builds, rpc, http, url, settle=None)
    log(f"build: {args.builds} each way again, each once the previous instance is ACTIVE")
    rpc_settled, api_settled = _builds(
        args.builds, rpc, http, url, settle=lambda uuid: _wait_active(rpc, uuid)
    )

    log(f"GETs/s: {args.clients} client threads for {args.seconds} s on one API process")
    counts = [0] * args.clients
    errors: list[str] = []
    stop = time.monotonic() + args.seconds

    def client(index: int) -> None:
        session = server.session("admin-token")
        while time.monotonic() < stop:
            response = session.get(f"{url}/v1/nodes/{node}", timeout=30)
            if response.status_code != 200:
                errors.append(f"{response.status_code} {response.text[:200]}")
                return
            counts[index] += 1

    assert server.proc is not None
    workers = psutil.Process(server.proc.pid).children()
    others = {
        "conductor": _processes(fleet, "bench-conductor"),
        "broker": _broker(args.transport_url),
    }
    cpu_before = sum(sum(w.cpu_times()[:2]) for w in workers)
    others_before = {name: _cpu(procs) for name, procs in others.items()}
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    cpu_used = sum(sum(w.cpu_times()[:2]) for w in workers) - cpu_before
    others_ms = {
        name: (_cpu(procs) - others_before[name]) * 1000.0 / max(1, sum(counts))
        for name, procs in others.items()
    }
    if errors:
        raise RuntimeError(f"GET failed under load: {errors[0]}")
    gets_per_s = sum(counts) / elapsed
    cpu_ms_per_get = cpu_used * 1000.0 / max(1, sum(counts))
    # What the API process could serve were it alone on a core: 1 / its CPU per GET.
    capacity = 1000.0 / cpu_ms_per_get if cpu_ms_per_get > 0 else float("inf")

    def stats(values: list[float]) -> dict[str, float]:
        return {
            "p50_ms": percentile(values, 50),
            "p90_ms": percentile(values, 90),
            "p99_ms": percentile(values, 99),
            "count": len(values),
        }

    get_overhead = percentile(api_get, 50) - percentile(rpc_get, 50)
    build_overhead = percentile(api_build, 50) - percentile(rpc_build, 50)
    settled_overhead = percentile(api_settled, 50) - percentile(rpc_settled, 50)
    stack_ms = cpu_ms_per_get + sum(others_ms.values())
    goals = Goals()
    for label, overhead in (
        ("GET node overhead p50 (API - RPC)", get_overhead),
        ("build overhead p50 (API - RPC), settled", settled_overhead),
        ("build overhead p50 (API - RPC), back to back", build_overhead),
    ):
        goals.add(
            label,
            f"<= {GOAL_OVERHEAD_MS} ms",
            overhead,
            overhead <= GOAL_OVERHEAD_MS,
            f"{overhead:.3f} ms",
        )
    goals.add(
        "GETs/s per API process (measured; conductor, broker, DB on the same cores)",
        f">= {GOAL_GETS_PER_S:.0f}",
        gets_per_s,
        gets_per_s >= GOAL_GETS_PER_S,
        f"{gets_per_s:.0f}",
    )
    goals.add(
        "GETs/s per API process (1 / its CPU per GET: on a core of its own)",
        f">= {GOAL_GETS_PER_S:.0f}",
        capacity,
        capacity >= GOAL_GETS_PER_S,
        f"{capacity:.0f} ({cpu_ms_per_get:.3f} ms CPU per GET)",
    )
    return {
        "config": {
            "requests": args.requests,
            "builds": args.builds,
            "seconds": args.seconds,
            "clients": args.clients,
            "threads": args.threads,
            "cpus": os.cpu_count(),
        },
        "get": {"rpc": stats(rpc_get), "api": stats(api_get), "overhead_p50_ms": get_overhead},
        "build": {
            "rpc": stats(rpc_build),
            "api": stats(api_build),
            "overhead_p50_ms": build_overhead,
        },
        "build_settled": {
            "rpc": stats(rpc_settled),
            "api": stats(api_settled),
            "overhead_p50_ms": settled_overhead,
        },
        "throughput": {
            "gets_per_s": gets_per_s,
            "gets": sum(counts),
            "seconds": elapsed,
            "api_cpu_ms_per_get": cpu_ms_per_get,
            "api_capacity_per_s": capacity,
            "conductor_cpu_ms_per_get": others_ms["conductor"],
            "broker_cpu_ms_per_get": others_ms["broker"],
            "stack_cpu_ms_per_get": stack_ms,
        },
        "goals": goals.items,
    }


def _builds(
    count: int,
    rpc: Any,
    http: requests.Session,
    url: str,
    settle: Callable[[str], None] | None,
) -> tuple[list[float], list[float]]:
    """``count`` one-instance builds through RPC and through the API,
    interleaved; with ``settle``, each waits for the previous instance."""
    rpc_ms, api_ms = [], []
    for _ in range(count):
        request = {"flavor": "bench", "instance_uuids": [str(uuidlib.uuid4())]}
        rpc_ms.append(_timed(lambda r=request: rpc.build_instances(r)))
        if settle is not None:
            settle(request["instance_uuids"][0])
        request = {"flavor": "bench", "instance_uuids": [str(uuidlib.uuid4())]}
        api_ms.append(_timed(lambda r=request: _ok(http.post(f"{url}/v1/instances", json=r), 202)))
        if settle is not None:
            settle(request["instance_uuids"][0])
    return rpc_ms, api_ms


def _wait_active(rpc: Any, instance: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while rpc.show_instance(instance)["vm_state"] != "active":
        if time.monotonic() > deadline:
            raise RuntimeError(f"instance {instance} not ACTIVE after {timeout:.0f} s")
        time.sleep(0.005)


def _processes(fleet: Fleet, name: str) -> list[psutil.Process]:
    proc = fleet.procs[name].proc
    assert proc is not None
    return [psutil.Process(proc.pid)]


def _broker(transport_url: str) -> list[psutil.Process]:
    """The process listening on the transport URL's port: RabbitMQ's Erlang
    VM (not any ``beam.smp``: each ``rabbitmqctl`` run is one too, and it ends)."""
    port = urllib.parse.urlsplit(transport_url.split(",", maxsplit=1)[0]).port or 5672
    found = []
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] != "beam.smp":
            continue
        with contextlib.suppress(psutil.Error):
            listening = proc.net_connections(kind="tcp")
            if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in listening):
                found.append(proc)
    return found


def _cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += sum(proc.cpu_times()[:2])
    return total


def format_report(report: dict[str, Any]) -> str:
    config = report["config"]
    lines = [
        f"api_bench: {config['cpus']} CPUs, one gunicorn worker x {config['threads']} threads",
        "",
        f"{'call':<10} {'path':<5} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'n':>6}",
    ]
    for call in ("get", "build", "build_settled"):
        for path in ("rpc", "api"):
            s = report[call][path]
            lines.append(
                f"{call:<10} {path:<5} {s['p50_ms']:>8.3f} {s['p90_ms']:>8.3f} "
                f"{s['p99_ms']:>8.3f} {s['count']:>6}"
            )
        lines.append(f"{call:<10} {'over':<5} {report[call]['overhead_p50_ms']:>8.3f}")
    t = report["throughput"]
    lines.append("")
    lines.append(
        f"GETs/s (one API process, {config['clients']} clients): "
        f"{t['gets_per_s']:.0f} ({t['gets']} in {t['seconds']:.1f} s); "
        f"API worker CPU {t['api_cpu_ms_per_get']:.3f} ms per GET"
    )
    lines.append(
        f"CPU per GET: API {t['api_cpu_ms_per_get']:.3f} + conductor "
        f"{t['conductor_cpu_ms_per_get']:.3f} + broker {t['broker_cpu_ms_per_get']:.3f} = "
        f"{t['stack_cpu_ms_per_get']:.3f} ms (client and database not counted): "
        f"{config['cpus']} cores serve at most "
        f"{config['cpus'] * 1000.0 / max(t['stack_cpu_ms_per_get'], 1e-9):.0f} GETs/s"
    )
    lines.extend(format_goals(report["goals"]))
    return "\n".join(lines)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.api_bench", description="ringfleet-api against RPC"
    )
    parser.add_argument("--requests", type=_positive, default=500, help="GETs each way (500)")
    parser.add_argument("--builds", type=_positive, default=100, help="builds each way (100)")
    parser.add_argument("--seconds", type=_positive, default=10, help="throughput run (10)")
    parser.add_argument("--clients", type=_positive, default=8, help="client threads (8)")
    parser.add_argument("--threads", type=_positive, default=8, help="gunicorn threads (8)")
    env = os.environ.get
    parser.add_argument("--db-url", default=env("RINGFLEET_TEST_DB_URL"))
    parser.add_argument("--transport-url", default=env("RINGFLEET_TEST_TRANSPORT_URL"))
    parser.add_argument("--etcd-url", default=env("RINGFLEET_TEST_ETCD_URL"))
    parser.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    args = parser.parse_args(argv)
    missing = [n for n in ("db_url", "transport_url", "etcd_url") if not getattr(args, n)]
    if missing:
        parser.error(
            f"{', '.join(missing)} not given and RINGFLEET_TEST_* unset: run it as "
            "tools/with-test-servers.sh python -m benchmarks.api_bench"
        )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return publish("api_bench", lambda: run(args, log=log_line), format_report, args.json)


if __name__ == "__main__":
    sys.exit(main())
