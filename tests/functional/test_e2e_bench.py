# SPDX-License-Identifier: Apache-2.0
"""Smoke test of benchmarks.e2e_bench: a tiny run on the real servers.

Checks the structure of the table and of the JSON report, and that the run
itself was sound (every build ended ACTIVE, no fencing violation, every node
owned again after the kill).  No timing thresholds: the goals may print
PASS or MISS, the exit status is 0 either way.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.harness import REPO

ARGS = {
    "--nodes": "40",
    "--builds": "20",
    "--batch": "5",
    "--clients": "2",
    "--latency-requests": "5",
    "--latency-interval": "0.05",
    "--bare-calls": "20",
    "--warmup": "2",
    "--reconcile-interval": "1",
}


def _bench(
    out_dir: Path, servers: tuple[str, str, str], extra: dict[str, str]
) -> tuple[str, dict[str, Any]]:
    out = out_dir / "e2e.json"
    argv = [sys.executable, "-m", "benchmarks.e2e_bench", "--json", str(out)]
    for option, value in {**ARGS, **extra}.items():
        argv += [option, value]
    database_url, transport_url, etcd_url = servers
    argv += ["--db-url", database_url, "--transport-url", transport_url, "--etcd-url", etcd_url]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-5000:]}"
    report: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return done.stdout, report


@pytest.fixture(scope="module")
def run(
    tmp_path_factory: pytest.TempPathFactory,
    database_url: str,
    transport_url: str,
    etcd_url: str,
) -> tuple[str, dict[str, Any]]:
    servers = (database_url, transport_url, etcd_url)
    return _bench(tmp_path_factory.mktemp("e2e_bench"), servers, {})


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value >= 0


def test_table(run: tuple[str, dict[str, Any]]) -> None:
    table, _report = run
    for label in (
        "bare oslo.messaging call p50 (ms)",
        "bare oslo.messaging call p99 (ms)",
        "routing latency p50 (ms)",
        "routing latency p99 (ms)",
        "end-to-end builds/s",
        "conductor CPU per build (ms)",
        "agent CPU per build (ms)",
        "failover, all nodes (s)",
        "membership_timeout (s)",
    ):
        assert label in table
    goals = table.split("\ngoals\n", 1)[1].splitlines()
    assert len(goals) == 3
    for line, name in zip(
        goals, ("end-to-end builds/s", "routing latency p50", "failover after kill -9"), strict=True
    ):
        status = line.split()[0]
        assert status in ("PASS", "MISS"), line
        assert name in line


def test_report(run: tuple[str, dict[str, Any]]) -> None:
    _table, report = run
    config = report["config"]
    assert config["nodes"] == 40
    assert config["builds"] == 20
    assert config["agents"] == 3
    assert config["conductors"] == 1
    assert config["deploy_time_s"] == 0
    assert config["ttl_s"] == 3
    res = report["results"]
    assert res["bare_call"]["count"] == 20
    assert res["routing"]["accept"]["count"] == 5  # every request was accepted
    assert res["routing"]["reply"]["count"] == 5
    for stats in (res["bare_call"], res["routing"]["accept"], res["routing"]["reply"]):
        assert all(_number(stats[k]) for k in ("p50_ms", "p99_ms", "mean_ms", "max_ms"))
        assert stats["p50_ms"] <= stats["p99_ms"] <= stats["max_ms"]
    rate = res["throughput"]
    assert rate["builds"] == 20
    assert _number(rate["builds_per_s"]) and rate["builds_per_s"] > 0
    assert rate["errors"] == 0 and res["routing"]["errors"] == 0
    cpu = rate["cpu_ms_per_build"]
    assert set(cpu) == {"conductors", "agents"}
    assert all(_number(v) and v > 0 for v in cpu.values())
    fail = res["failover"]
    assert fail["nodes_owned"] > 0
    assert _number(fail["all_s"]), "the dead agent's nodes were not all taken over"
    assert _number(fail["unpinned_s"]) and fail["unpinned_s"] <= fail["all_s"]
    assert res["fencing_violations"] == 0
    assert [g["status"] in ("PASS", "MISS") for g in report["goals"]] == [True] * 3
    assert set(report["environment"]["versions"]) >= {"oslo.messaging", "kombu", "tooz"}


def test_two_conductors(
    tmp_path: Path, database_url: str, transport_url: str, etcd_url: str
) -> None:
    """Active-active conductors: every build ends ACTIVE, with no fencing violation."""
    table, report = _bench(
        tmp_path,
        (database_url, transport_url, etcd_url),
        {"--conductors": "2", "--latency-requests": "3", "--bare-calls": "5"},
    )
    assert "2 conductor process(es)" in table
    assert report["config"]["conductors"] == 2
    res = report["results"]
    assert res["throughput"]["errors"] == 0 and res["routing"]["errors"] == 0
    assert res["routing"]["accept"]["count"] == 3
    assert res["fencing_violations"] == 0
