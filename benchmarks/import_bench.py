# SPDX-License-Identifier: Apache-2.0
"""Node import benchmark: ``ringfleet node import`` of a large CSV on real PostgreSQL.

Run from the repository root, with the test servers::

    SERVERS=etcd,rabbit,postgres tools/with-test-servers.sh \\
        .venv/bin/python -m benchmarks.import_bench --nodes 100000
    ... -m benchmarks.import_bench --before /tmp/ringfleet-main --repeat 2

One conductor (a separate process, the functional fleet's configuration with
DEBUG logging off) on a fresh private database, no agent; the CLI as an
operator runs it, a process of its own, in RPC mode.  Each run imports a CSV
of ``--nodes`` rows (``name,resource_class``) into an empty fleet and reports
the wall time of the command, the CPU seconds (user + system) of the CLI
and of the conductor during it, and the machine's load average before and
after (the machine is shared: the ratios of one invocation say more than
the seconds).

``--before DIR`` runs the same import, in the same invocation, with the CLI
and the conductor of another checkout (e.g. ``git archive main | tar -x -C
DIR``), alternating with this one: "before" and "after" on the same servers.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from benchmarks import argtypes
from benchmarks.report import log_line, publish
from benchmarks.scale_bench import make_fleet, spawn
from conductor.db import migration
from conductor.db import nodes as node_db
from conductor.db.engine import Database
from tests.dbutil import fresh_database
from tests.harness.process import REPO

#: The console script's module, run with the checkout's code first on the path.
_CLI = "conductor.cmd.cli"

GOAL_S = 10.0


def write_csv(path: Path, nodes: int) -> None:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["name", "resource_class"])
        writer.writerows([f"import-{i:06d}", "baremetal"] for i in range(nodes))


def _cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def import_once(args: argparse.Namespace, code: Path, label: str) -> dict[str, Any]:
    """One import of ``--nodes`` rows into a fresh fleet run from ``code``."""
    with contextlib.ExitStack() as stack:
        workdir = Path(tempfile.mkdtemp(prefix="import-bench-"))
        db_url = stack.enter_context(fresh_database(args.db_url, prefix="rf_import"))
        database = Database(db_url)
        migration.upgrade(database)
        database.dispose()
        fleet = make_fleet(workdir, db_url, args.transport_url, args.etcd_url)
        stack.callback(fleet.close)
        conductor = spawn(fleet, "conductor.cmd.conductor", "cond-1", code)
        conductor.wait_serving(120)
        assert conductor.proc is not None
        cli_conf = workdir / "cli.conf"
        cli_conf.write_text(f"[DEFAULT]\ntransport_url = {args.transport_url}\n")
        nodes_csv = workdir / "nodes.csv"
        write_csv(nodes_csv, args.nodes)
        load_before = os.getloadavg()[0]
        cpu_before = _cpu(conductor.proc.pid)
        started = time.monotonic()
        argv = ["--config-file", str(cli_conf), "--rpc-timeout", "300", "node", "import"]
        cli = subprocess.Popen(
            [sys.executable, "-m", _CLI, *argv, str(nodes_csv)],
            cwd=code,
            env={**os.environ, "PYTHONPATH": str(code)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _pid, status, usage = os.wait4(cli.pid, 0)
        wall = time.monotonic() - started
        conductor_cpu = _cpu(conductor.proc.pid) - cpu_before
        rss = psutil.Process(conductor.proc.pid).memory_info().rss
        out, err = cli.communicate()
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{label}: node import failed: {err[-2000:]}")
        database = Database(db_url)
        stored = node_db.count_nodes(database)
        database.dispose()
        if stored != args.nodes:
            raise RuntimeError(f"{label}: {stored} nodes stored, not {args.nodes}")
        return {
            "code": label,
            "seconds": wall,
            "cli_cpu_s": usage.ru_utime + usage.ru_stime,
            "conductor_cpu_s": conductor_cpu,
            "conductor_rss_mb": rss / 2**20,
            "load_before": load_before,
            "load_after": os.getloadavg()[0],
            "output": out.strip(),
        }


def run(args: argparse.Namespace) -> dict[str, Any]:
    codes = [("after", REPO)]
    if args.before is not None:
        codes.insert(0, ("before", args.before))
    runs = []
    for _ in range(args.repeat):
        for label, code in codes:
            log_line(f"{label}: node import of {args.nodes} rows ({code})")
            runs.append(import_once(args, code, label))
            log_line(f"  {runs[-1]['seconds']:.1f} s")
    return {"nodes": args.nodes, "cpus": os.cpu_count(), "runs": runs}


def format_report(report: dict[str, Any]) -> str:
    lines = [
        f"ringfleet node import of {report['nodes']:,} rows (CSV), 1 conductor, "
        f"PostgreSQL; {report['cpus']} CPUs",
        f"{'code':8} {'wall s':>7} {'CLI CPU s':>10} {'conductor CPU s':>16} "
        f"{'conductor RSS MB':>17} {'load before/after':>18}",
    ]
    for run_ in report["runs"]:
        load = f"{run_['load_before']:.1f} / {run_['load_after']:.1f}"
        lines.append(
            f"{run_['code']:8} {run_['seconds']:7.1f} {run_['cli_cpu_s']:10.1f} "
            f"{run_['conductor_cpu_s']:16.1f} {run_['conductor_rss_mb']:17.0f} {load:>18}"
        )
    after = [r["seconds"] for r in report["runs"] if r["code"] == "after"]
    verdict = "PASS" if after and min(after) <= GOAL_S else "MISS"
    lines.append(f"goal: <= {GOAL_S:g} s for 100,000 nodes: {verdict}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.import_bench",
        description="ringfleet node import of a large CSV on real PostgreSQL.",
    )
    env = os.environ.get
    parser.add_argument("--nodes", type=argtypes.at_least(1), default=100_000, help="(100000)")
    parser.add_argument("--repeat", type=argtypes.at_least(1), default=1, help="runs of each (1)")
    parser.add_argument(
        "--before", type=Path, help="also run the CLI and conductor of this checkout, alternating"
    )
    parser.add_argument("--db-url", default=env("RINGFLEET_TEST_DB_URL"))
    parser.add_argument("--transport-url", default=env("RINGFLEET_TEST_TRANSPORT_URL"))
    parser.add_argument("--etcd-url", default=env("RINGFLEET_TEST_ETCD_URL"))
    parser.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    args = parser.parse_args(argv)
    if not (args.db_url and args.transport_url and args.etcd_url):
        parser.error(
            "run it as SERVERS=etcd,rabbit,postgres tools/with-test-servers.sh "
            ".venv/bin/python -m benchmarks.import_bench"
        )
    if args.before is not None:
        args.before = args.before.resolve()
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return publish("import_bench", lambda: run(args), format_report, args.json)


if __name__ == "__main__":
    sys.exit(main())
