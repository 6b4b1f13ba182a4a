# SPDX-License-Identifier: Apache-2.0
"""Unit tests of the scale benchmark's package layout, its etcd request
counts, the scaling table's columns and the projection to one agent per
host (benchmarks.scale): numbers in, numbers out; no servers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import scale_bench
from benchmarks.report import Goals
from benchmarks.scale import cli, etcd, procs, projection, scaling
from benchmarks.scale.projection import Protocol, project
from benchmarks.scale.report import format_report
from compute_agent import ownership
from tests.unit.test_sizes import MAX_FUNCTION_LINES, MAX_MODULE_LINES, sizes

PACKAGE = Path(scaling.__file__).resolve().parent


def test_every_module_of_the_package_keeps_the_size_rule() -> None:
    modules = sorted(PACKAGE.glob("*.py"))
    assert {m.name for m in modules} >= {"run.py", "runner.py", "projection.py", "etcd.py"}
    for module in modules:
        for label, lines in sizes(module.name, module.read_text()).items():
            limit = MAX_FUNCTION_LINES if "::" in label else MAX_MODULE_LINES
            assert lines <= limit, f"{label}: {lines} lines"


def test_the_command_is_the_packages() -> None:
    assert scale_bench.main is cli.main
    assert scale_bench.parse_args is cli.parse_args
    # The multi-agent launcher is found by path from the package.
    assert procs.MULTI_AGENT.is_file() and procs.MULTI_AGENT.name == "multi_agent.py"


def test_conductor_cores_option(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DB_URL", "TRANSPORT_URL", "ETCD_URL"):
        monkeypatch.setenv(f"RINGFLEET_TEST_{name}", "x://")
    assert scale_bench.parse_args([]).conductor_cores == 1
    assert scale_bench.parse_args(["--conductor-cores", "4"]).conductor_cores == 4


ETCD_PAGE = "".join(
    f'{metric}{{grpc_method="{method}",grpc_service="{service}",grpc_type="{kind}"}} {value}\n'
    for metric, method, service, kind, value in (
        ("grpc_server_msg_received_total", "Range", "etcdserverpb.KV", "unary", 120),
        ("grpc_server_msg_received_total", "LeaseKeepAlive", "etcdserverpb.Lease", "bidi", 30),
        ("grpc_server_msg_received_total", "Watch", "grpc.health.v1.Health", "stream", 0),
        ("grpc_server_started_total", "Range", "etcdserverpb.KV", "unary", 120),
    )
)


def test_etcd_requests_by_method_less_our_own_per_client() -> None:
    assert etcd.grpc_requests(ETCD_PAGE) == {"Range": 120, "LeaseKeepAlive": 30, "Watch": 0}
    assert etcd.metrics_url("etcd3+http://127.0.0.1:2379?membership_timeout=3") == (
        "http://127.0.0.1:2379/metrics"
    )
    start = ({"Range": 100, "LeaseKeepAlive": 10}, 40)
    end = ({"Range": 220, "LeaseKeepAlive": 40, "Txn": 2}, 90)
    found = etcd.requests_between(start, end, clients=4)
    assert found is not None
    # 152 requests reached etcd; 50 were the benchmark's own watcher's.
    assert found["requests"] == 102 and found["own_requests"] == 50
    assert found["per_client"] == pytest.approx(25.5)
    assert found["by_method"] == {"LeaseKeepAlive": 30, "Range": 120, "Txn": 2}
    assert etcd.requests_between(None, end, 4) is None


def _res(agents: int, scale: float) -> dict[str, Any]:
    """One agent count's result; ``scale`` multiplies the costs."""
    step = {
        "conductor_cpu_s": 2.0 * scale,
        "traffic": {
            "seconds": 5.0,
            "broker_mb": 10.0 * scale,
            "calls": 100,
            "quiet_broker_kb_s": None,
            "quiet_calls_s": None,
        },
        "agent_cpu_s": 6.0,
        "server_cpu_s": {"postgres": 1.0},
    }
    return {
        "agents": agents,
        "agents_per_process": 1,
        "conductor_rss_mb": 300.0,
        "cold": {
            **step,
            "seconds": 20.0 * scale,
            "off": 0,
            "serving_s": 4.0,
            "agent_cpu_after_serving_s": 5.0 * scale,
            "nodes_owned": 5000,
            "processes": agents,
            "etcd": {"per_client": 40.0 * scale, "requests": 440 * scale, "clients": 11},
            "rows_read_total": 5000,
            "quiet": {
                "conductor_cpu_s_per_min": 1.0,
                "agent_cpu_s_per_min": 2.5 * scale,
                "etcd_per_client_per_min": 120.0,
                "ownership_calls": 0,
                "rows_read_per_min": 0,
            },
        },
        "join": {
            **step,
            "seconds": 8.0,
            "agents_before": agents,
            "startup_cpu_s": 1.5,
            "joiner_cpu_s": 0.5,
        },
        "kill": {**step, "owned_s": 11.0 * scale, "survivors": agents},
    }


def _row(lines: list[str], label: str) -> list[str]:
    (line,) = [line for line in lines if line.strip().startswith(label)]
    return line.split()


def test_the_table_has_join_kill_etcd_agent_cpu_and_wall_times() -> None:
    lines = scaling.format_scaling([_res(10, 1.0), _res(20, 2.0)], 5000)
    assert _row(lines, "conductor CPU per join (s)")[-4:] == ["2.00", "(1.00x)", "4.00", "(2.00x)"]
    assert _row(lines, "broker bytes per kill -9 (MB)")[-4:] == [
        "10.0",
        "(1.00x)",
        "20.0",
        "(2.00x)",
    ]
    assert _row(lines, "etcd requests per client, cold start")[-4:] == [
        "40.0",
        "(1.00x)",
        "80.0",
        "(2.00x)",
    ]
    # 5 s of agent CPU after the last served over 5,000 nodes: 1 ms a node.
    assert _row(lines, "agent CPU per node owned, cold start")[-4:] == [
        "1.00",
        "(1.00x)",
        "2.00",
        "(2.00x)",
    ]
    assert _row(lines, "agent CPU per node owned, quiet minute")[-2:] == ["1.00", "(2.00x)"]
    assert _row(lines, "wall: converged after the last served")[-4:] == [
        "16.0",
        "(1.00x)",
        "36.0",
        "(2.25x)",
    ]
    assert _row(lines, "wall: kill -9, all owned again")[-2:] == ["22.0", "(2.00x)"]
    # Shown, not judged: only the ratio goals are goals.
    goals = Goals()
    scaling.scaling_goals(goals, [_res(10, 1.0), _res(20, 2.0)], 5000)
    assert not [g for g in goals.items if "join" in g["name"] or "wall" in g["name"]]


def test_protocol_waits_follow_the_ttl_and_watch_interval() -> None:
    protocol = Protocol(ttl=10, watch_interval=1)
    # The first read's settle, from when the last member was seen: 0-1 s.
    assert protocol.fixed("cold") == protocol.fixed("join") == (3.5, 4.75)
    # The victim's lease: 7.5-10 s after the kill; + etcd's tick, a read, a retry.
    assert protocol.fixed("kill") == (7.5, 12.5)
    assert projection.HANDOVER_POLL == ownership._HANDOVER_POLL


def test_projection_numbers_in_numbers_out() -> None:
    res = _res(10, 1.0)
    protocol = Protocol(ttl=10, watch_interval=1)
    cold = project(res, "cold", protocol)
    # S 1.5 (the joiner's start-up), F 3.5, C 2, D 1, A 5/10 = 0.5,
    # R 100 calls / 10 agents x 0.5 ms, B 10 MB / 125 MB/s.
    assert (cold["startup_s"], cold["conductor_s"], cold["database_s"]) == (1.5, 2.0, 1.0)
    assert cold["agent_s"] == pytest.approx(0.5)
    assert cold["low"] == pytest.approx(1.5 + 3.5 + 2.0)
    assert cold["high"] == pytest.approx(1.5 + 4.75 + 2.0 + 1.0 + 0.5 + 0.005 + 0.08)
    assert cold["measured"] == 20.0
    assert projection.verdict(cold).startswith("above by 10.2 s")
    # From the moment the last agent served: no start-up, 20 - 4 s measured.
    served = project(res, "served", protocol)
    assert served["startup_s"] == 0 and served["measured"] == 16.0
    assert served["high"] == pytest.approx(cold["high"] - 1.5)
    # Two cores for the conductor halve its term.
    assert project(res, "cold", protocol, cores=2)["conductor_s"] == 1.0
    join = project(res, "join", protocol)
    # The joiner's 0.5 s against the others' (6 - 0.5 - 1.5) / 10.
    assert join["agent_s"] == pytest.approx(0.5)
    assert join["low"] <= 8.0 <= join["high"] and projection.verdict(join) == "within"
    kill = project(res, "kill", protocol)
    assert kill["startup_s"] == 0.0 and kill["agent_s"] == pytest.approx(0.6)
    assert kill["low"] == pytest.approx(7.5 + 2.0)


def test_projection_without_a_join_takes_the_start_up_per_process() -> None:
    res = _res(10, 1.0)
    del res["join"]
    res["cold"]["processes"] = 2  # 6 - 5 s of start-up over 2 processes
    assert project(res, "cold", Protocol(3, 0.2))["startup_s"] == pytest.approx(0.5)


def test_projection_goals_pass_and_miss() -> None:
    report = {
        "config": {"ttl_s": 10, "watch_interval_s": 1, "conductors": 1, "conductor_cores": 1},
        "runs": [_res(10, 1.0), _res(100, 8.0)],
    }
    projected = projection.project_report(report)
    assert [(r["agents"], r["step"]) for r in projected["steps"]][:4] == [
        (10, "cold"),
        (10, "served"),
        (10, "join"),
        (10, "kill"),
    ]
    goals = Goals()
    projection.projection_goals(goals, projected)
    status = {g["name"]: g["status"] for g in goals.items}
    assert status["[10 agents] cold, projected to one agent per host (high)"] == "PASS"
    # After the last served: 3.5-4.75 s of waits and 3.6 s of work > 5 s.
    assert status["[10 agents] served, projected to one agent per host (high)"] == "MISS"
    # 100 agents at 8x the conductor's CPU: 16 s of conductor alone > 15 s.
    assert status["[100 agents] cold, projected to one agent per host (high)"] == "MISS"
    # A kill at 100 agents may take TTL + 5 s; the high bound is 12.5 + 16 + ...
    assert status["[100 agents] kill, projected to one agent per host (high)"] == "MISS"
    assert (
        projection.goal_limit("kill", 10, 10) == 12 and projection.goal_limit("kill", 100, 10) == 15
    )
    lines = projection.format_projection(projected)
    assert "T_high = S + F_high + C/N + D + A + R + B" in "\n".join(lines)
    assert any(line.split()[:2] == ["10", "join"] and line.endswith("within") for line in lines)
    assert projection.format_projection(None) == []


def test_an_earlier_report_projected_again(tmp_path: Path) -> None:
    """``--project JSON``: the projection and the goals of a saved run, with
    another conductor host, and no servers needed."""
    saved = {
        "config": {
            "nodes": 5000,
            "agents": [10],
            "conductors": 1,
            "ttl_s": 10,
            "watch_interval_s": 1,
            "code": None,
            "commit": "abc1234",
            "conductor_cores": 1,
        },
        "environment": {"python": "3.11", "cpus": 2, "load_before": 1.0},
        "runs": [{**_res(10, 1.0), "wall_s": 60.0, "agent_rss_mb": 80.0}],
        "goals": [],
    }
    run = saved["runs"][0]  # type: ignore[index]
    del run["join"], run["kill"]  # the report's rows of those need more fields
    run["conductor_cpu_s"] = 9.0
    claims = dict.fromkeys(("granted", "refused", "released", "claim_calls", "release_calls"), 0)
    run["cold"].update(claims, rows_read_max=500)
    path = tmp_path / "scale.json"
    path.write_text(json.dumps(saved))
    args = scale_bench.parse_args(["--project", str(path), "--conductor-cores", "2"])
    report = cli.reproject(args.project, args.conductor_cores)
    (cold,) = [r for r in report["projection"]["steps"] if r["step"] == "cold"]
    assert cold["conductor_s"] == 1.0  # 2 s of conductor CPU on 2 cores
    names = [g["name"] for g in report["goals"]]
    assert "[10 agents] cold start, ring converged" in names
    assert "[10 agents] cold, projected to one agent per host (high)" in names
    assert "conductor on 2 core(s)" in format_report(report)
