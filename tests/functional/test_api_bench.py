# SPDX-License-Identifier: Apache-2.0
"""Smoke test of benchmarks.api_bench: a tiny run on the real servers.

Checks the structure of the table and of the JSON report, and that every
measured call succeeded.  No timing thresholds: the goals may print PASS or
MISS, the exit status is 0 either way.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from tests.harness import REPO


def test_api_bench_reports_both_paths_and_the_goals(
    tmp_path: Path, database_url: str, transport_url: str, etcd_url: str
) -> None:
    out = tmp_path / "api.json"
    argv = [
        sys.executable,
        "-m",
        "benchmarks.api_bench",
        "--json",
        str(out),
        "--requests",
        "20",
        "--builds",
        "5",
        "--seconds",
        "1",
        "--clients",
        "2",
        "--db-url",
        database_url,
        "--transport-url",
        transport_url,
        "--etcd-url",
        etcd_url,
    ]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-5000:]}"
    report = json.loads(out.read_text(encoding="utf-8"))
    for call, count in (("get", 20), ("build", 5), ("build_settled", 5)):
        for path in ("rpc", "api"):
            stats = report[call][path]
            assert stats["count"] == count
            assert 0 < stats["p50_ms"] <= stats["p90_ms"] <= stats["p99_ms"]
        assert math.isfinite(report[call]["overhead_p50_ms"])
    assert report["throughput"]["gets"] > 0
    assert report["throughput"]["api_cpu_ms_per_get"] > 0
    # The conductor's and the broker's CPU per GET were found and measured.
    assert report["throughput"]["conductor_cpu_ms_per_get"] > 0
    assert report["throughput"]["broker_cpu_ms_per_get"] > 0
    assert [g["status"] for g in report["goals"]] != []
    assert all(g["status"] in ("PASS", "MISS") for g in report["goals"])
    assert "goals" in done.stdout and "GETs/s" in done.stdout
