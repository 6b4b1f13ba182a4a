# SPDX-License-Identifier: Apache-2.0
"""Smoke test of benchmarks.sched_bench: tiny sizes, structure and sanity only.

No wall-clock assertions: timings only have to be positive numbers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from benchmarks import sched_bench
from conductor.db import migration, nodes

SIZES = (400, 800)
REQUESTS = 40


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("sched_bench") / "results.json"
    argv = [
        "--sizes",
        ",".join(map(str, SIZES)),
        "--requests",
        str(REQUESTS),
        "--baseline-seconds",
        "0.2",
        "--seed",
        "7",
        "--db-url",
        "",  # SQLite only, even under tools/with-test-servers.sh
        "--json",
        str(out),
    ]
    assert sched_bench.main(argv) == 0
    data: dict[str, Any] = json.loads(Path(out).read_text(encoding="utf-8"))
    return data


def test_config_is_recorded(report: dict[str, Any]) -> None:
    config = report["config"]
    assert config["sizes"] == list(SIZES)
    assert config["requests"] == REQUESTS
    assert config["synchronous"] == "normal"
    assert config["seed"] == 7
    assert config["agents"] == 10
    assert config["resource_classes"] == 20
    assert len(config["flavors"]) >= 3
    assert report["implementations"] == [
        "ringfleet",
        "ringfleet+nova",
        "nova-defaults",
        "nova-mem",
        "nova-db",
    ]
    assert set(report["environment"]["versions"]) == {"SQLAlchemy", "stevedore", "nova"}


@pytest.mark.parametrize("size", SIZES)
def test_results_are_sane(report: dict[str, Any], size: int) -> None:
    res = report["results"][str(size)]
    assert res["nodes"] == size
    assert sum(res["states"].values()) == size
    assert res["index_bytes_per_node"] > 0
    assert res["db_floor_per_s"] > 0
    ours = res["ringfleet"]
    assert ours["decisions"] + ours["no_valid_node"] == REQUESTS
    assert ours["decisions"] > 0
    assert ours["index"]["nodes"] == size
    assert 0 < ours["index"]["free"] < size
    assert ours["index_build_s"] > 0
    assert ours["lost_races"] == 0  # one scheduler alone never loses a race
    # Nova's ComputeCapabilitiesFilter agrees with ringfleet's on every
    # request: the same seed then makes the same random draws.
    assert res["ringfleet+nova"]["placements_differing"] == 0
    assert res["ringfleet+nova"]["no_valid_node"] == ours["no_valid_node"]
    assert "placements" not in ours
    for name in ("ringfleet", "ringfleet+nova", "nova-defaults", "nova-mem", "nova-db"):
        run = res[name]
        assert run["double_allocations"] == 0
        assert 1 <= run["decisions"] <= REQUESTS
        for key in ("allocations_per_s", "p50_ms", "p99_ms", "wall_s"):
            assert math.isfinite(run[key]) and run[key] > 0
        assert run["p50_ms"] <= run["p99_ms"]
        assert 0 < run["db_share"] <= 1
    # A "no valid node" answer is timed where ringfleet's scheduler decides.
    for name in ("ringfleet", "ringfleet+nova", "nova-defaults"):
        assert res[name]["no_fit_p50_ms"] > 0
        assert res[name]["no_fit_ratio"] == pytest.approx(
            res[name]["no_fit_p50_ms"] / res[name]["p50_ms"]
        )
        assert res[name]["no_fit_quiet_ratio"] == pytest.approx(
            res[name]["no_fit_quiet_p50_ms"] / res[name]["p50_ms"]
        )
    assert "no_fit_p50_ms" not in res["nova-mem"]
    # The baselines run at least three requests whatever their time budget.
    assert res["nova-db"]["decisions"] >= 3
    assert res["speedup_vs_nova_mem"] == pytest.approx(
        ours["allocations_per_s"] / res["nova-mem"]["allocations_per_s"]
    )


def test_goals_are_reported_not_enforced(report: dict[str, Any]) -> None:
    goals = report["goals"]
    assert len(goals) == 8
    for goal in goals:
        assert set(goal) == {"name", "target", "value", "status"}
        # 10k and 100k nodes were not measured here.
        assert goal["status"] == "SKIP"
        assert goal["value"] is None


def test_report_prints_a_table(report: dict[str, Any]) -> None:
    text = sched_bench.format_report(report)
    assert "committed allocations/s" in text
    assert "index build (s)" in text
    assert "nova-db: all nodes read from the database per request" in text
    assert text.count("SKIP") == 8
    assert "'no valid node' p50 (ms)" in text
    assert "nova-defaults" in text
    assert "ringfleet+nova" in text
    assert "placed 0 of 40 requests differently" in text


def test_fleets_are_deterministic(tmp_path: Path) -> None:
    counts = []
    for name in ("a", "b"):
        db = sched_bench.open_db(tmp_path / f"{name}.db", "full")
        try:
            migration.upgrade(db)
            states = sched_bench.make_fleet(db, 300, seed=3)
            counts.append(
                (states, sorted((n.name, n.resource_class, n.group) for n in nodes.iter_nodes(db)))
            )
        finally:
            db.dispose()
    assert counts[0] == counts[1]


@pytest.mark.parametrize(
    "argv",
    [["--sizes", "10"], ["--sizes", "a"], ["--requests", "0"], ["--baseline-seconds", "0"]],
)
def test_bad_options_are_rejected(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as excinfo:
        sched_bench.parse_args(argv)
    assert excinfo.value.code == 2
