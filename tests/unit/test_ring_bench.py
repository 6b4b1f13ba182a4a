# SPDX-License-Identifier: Apache-2.0
"""Smoke test of benchmarks.ring_bench: tiny sizes, structure and sanity only.

No wall-clock assertions: timings only have to be positive numbers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from benchmarks import ring_bench

NODES = 2000
MEMBER_COUNTS = (3, 10)
IMPLS = ("ringfleet", "tooz-32", "tooz-256")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("ring_bench") / "results.json"
    argv = [
        "--nodes",
        str(NODES),
        "--members",
        ",".join(map(str, MEMBER_COUNTS)),
        "--repeat",
        "1",
        "--seed",
        "7",
        "--json",
        str(out),
    ]
    assert ring_bench.main(argv) == 0
    data: dict[str, Any] = json.loads(Path(out).read_text(encoding="utf-8"))
    return data


def test_config_is_recorded(report: dict[str, Any]) -> None:
    assert report["config"] == {
        "nodes": NODES,
        "members": list(MEMBER_COUNTS),
        "seed": 7,
        "repeat": 1,
    }
    assert report["implementations"] == list(IMPLS)
    assert set(report["environment"]["versions"]) == {"numpy", "xxhash", "tooz"}


def test_every_member_count_and_implementation_present(
    report: dict[str, Any],
) -> None:
    assert set(report["results"]) == {str(m) for m in MEMBER_COUNTS}
    for by_impl in report["results"].values():
        assert set(by_impl) == set(IMPLS)
    assert set(report["speedup_vs_tooz_32"]) == {str(m) for m in MEMBER_COUNTS}


@pytest.mark.parametrize("m", MEMBER_COUNTS)
@pytest.mark.parametrize("impl", IMPLS)
def test_results_are_sane(report: dict[str, Any], m: int, impl: str) -> None:
    res = report["results"][str(m)][impl]
    for key in ("build_s", "bulk_s", "single_s", "bulk_per_s", "single_per_s"):
        assert math.isfinite(res[key])
        assert res[key] > 0
    assert res["load_total"] == NODES
    assert 0 <= res["load_min"] <= res["load_max"] <= NODES
    mean = NODES / m
    assert res["peak_over_mean"] == pytest.approx(res["load_max"] / mean)
    assert res["min_over_mean"] == pytest.approx(res["load_min"] / mean)
    assert res["min_over_mean"] <= 1 <= res["peak_over_mean"]

    join, leave = res["join"], res["leave"]
    assert join["member"] == f"agent-{m:03d}"
    assert leave["member"] == f"agent-{m // 2:03d}"
    assert join["ideal"] == pytest.approx(1 / (m + 1))
    assert leave["ideal"] == pytest.approx(1 / m)
    for event in (join, leave):
        assert 0 <= event["fraction"] <= 1
        assert event["fraction"] == pytest.approx(event["moved"] / NODES)
        assert 0 <= event["survivor_moves"] <= event["moved"]


@pytest.mark.parametrize("m", MEMBER_COUNTS)
def test_ours_moves_nothing_between_survivors(report: dict[str, Any], m: int) -> None:
    ours = report["results"][str(m)]["ringfleet"]
    assert ours["join"]["survivor_moves"] == 0
    assert ours["leave"]["survivor_moves"] == 0
    # Something does move: the new member takes nodes, the leaver's are freed.
    assert ours["join"]["moved"] > 0
    assert ours["leave"]["moved"] > 0


def test_goals_are_reported_not_enforced(report: dict[str, Any]) -> None:
    goals = report["goals"]
    assert len(goals) == 5
    for goal in goals:
        assert goal["status"] in {"PASS", "MISS", "SKIP"}
        assert set(goal) == {"name", "target", "value", "status"}
    # M=100 and M=200 were not measured: those goals are skipped.
    by_name = {goal["name"]: goal for goal in goals}
    assert by_name["peak/mean load at M=100"]["status"] == "SKIP"
    assert by_name["peak/mean load at M=200"]["status"] == "SKIP"
    survivors = by_name["moves between survivors (all M, join+leave)"]
    assert survivors["status"] == "PASS"
    assert survivors["value"] == 0


def test_speedups_are_ratios_of_timings(report: dict[str, Any]) -> None:
    for m, speed in report["speedup_vs_tooz_32"].items():
        ours = report["results"][m]["ringfleet"]
        base = report["results"][m]["tooz-32"]
        assert speed["bulk"] == pytest.approx(base["bulk_s"] / ours["bulk_s"])
        assert speed["single"] == pytest.approx(base["single_s"] / ours["single_s"])


def test_node_ids_are_deterministic_128_bit_hex() -> None:
    ids = ring_bench.make_node_ids(50, seed=3)
    assert ids == ring_bench.make_node_ids(50, seed=3)
    assert ids != ring_bench.make_node_ids(50, seed=4)
    assert all(len(node_id) == 32 for node_id in ids)
    assert all(int(node_id, 16) < 2**128 for node_id in ids)


@pytest.mark.parametrize(
    "argv",
    [["--members", "1,3"], ["--members", "a,b"], ["--nodes", "0"], ["--repeat", "0"]],
)
def test_bad_options_are_rejected(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as excinfo:
        ring_bench.parse_args(argv)
    assert excinfo.value.code == 2
