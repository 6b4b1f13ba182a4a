# SPDX-License-Identifier: Apache-2.0
"""Smoke test of benchmarks.sched_bench on PostgreSQL: a tiny size, side by side with SQLite.

No wall-clock assertions: the PostgreSQL columns only have to exist, hold
sane numbers and place no two instances on one node; the benchmark's own
databases are dropped afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import create_engine, text

from benchmarks import sched_bench


def _bench_databases(admin_url: str) -> set[str]:
    engine = create_engine(admin_url)
    try:
        with engine.connect() as connection:
            return set(
                connection.scalars(
                    text("SELECT datname FROM pg_database WHERE datname LIKE 'rf_sched_%'")
                )
            )
    finally:
        engine.dispose()


def test_runs_on_postgresql_beside_sqlite(tmp_path: Path, pg_url: str, capsys: object) -> None:
    before = _bench_databases(pg_url)
    out = tmp_path / "results.json"
    argv = ["--sizes", "300", "--requests", "20", "--baseline-seconds", "0.2"]
    assert sched_bench.main([*argv, "--db-url", pg_url, "--json", str(out)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["config"]["databases"] == ["sqlite", "postgresql"]
    sqlite, postgres = report["results"]["300"], report["postgresql"]["300"]
    assert postgres["nodes"] == 300 and postgres["states"] == sqlite["states"]
    for name in ("ringfleet", "nova-mem", "nova-db"):
        assert postgres[name]["decisions"] > 0
        assert postgres[name]["allocations_per_s"] > 0
        assert postgres[name]["double_allocations"] == 0
    assert postgres["db_floor_per_s"] > 0
    assert [g["name"] for g in report["goals_postgresql"]] == [g["name"] for g in report["goals"]]
    table = sched_bench.format_report(report)
    assert "ringfleet pg" in table and "on PostgreSQL:" in table
    assert _bench_databases(pg_url) == before  # every database it made is dropped
