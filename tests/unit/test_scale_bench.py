# SPDX-License-Identifier: Apache-2.0
"""Unit tests of the scale benchmark's helpers (benchmarks.scale) and of benchmarks.multi_agent's
configuration: no servers, no fleet (tests/functional/test_scale_bench.py runs one).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks import multi_agent, scale_bench
from benchmarks.scale import goals as scale_goals
from benchmarks.scale import observe, report, run, runner, scaling
from conductor.common.conf import compute_agent

METRICS_PAGE = """\
# HELP ringfleet_agent_inventory_rows_total Node rows this agent read
# TYPE ringfleet_agent_inventory_rows_total counter
ringfleet_agent_inventory_rows_total{host="agent-00"} 1234.0
ringfleet_agent_inventory_rows_created{host="agent-00"} 1.7e+09
ringfleet_agent_claims_total{host="agent-00",outcome="granted"} 5.0
"""


def test_inventory_rows_reads_the_counter_per_host() -> None:
    assert observe.inventory_rows(METRICS_PAGE) == {"agent-00": 1234}
    assert observe.inventory_rows("") == {}


def test_metrics_urls_name_each_agent_of_a_shared_log() -> None:
    log = (
        "2026-01-01 00:00:00.000 1 INFO conductor.common.metrics [-] agent-00 serving "
        "metrics on http://127.0.0.1:4001/metrics\n"
        "2026-01-01 00:00:00.001 1 INFO conductor.common.metrics [-] agent-01 serving "
        "metrics on http://127.0.0.1:4002/metrics\n"
    )
    assert observe.metrics_urls(log) == {
        "agent-00": "http://127.0.0.1:4001/metrics",
        "agent-01": "http://127.0.0.1:4002/metrics",
    }


def test_rows_read_per_host_sum_and_largest() -> None:
    grown = observe.since({"a": 10, "b": 7, "new": 3}, {"a": 4, "b": 7})
    assert grown == {"a": 6, "b": 0, "new": 3}
    rows = observe.rows_summary(grown, ["a", "b", "silent"])
    assert rows == {
        "rows_read": {"a": 6, "b": 0, "silent": 0},
        "rows_read_total": 6,
        "rows_read_max": 6,
    }
    assert observe.rows_summary({}, [])["rows_read_max"] == 0


def _run(agents: int, cpu: float, mb: float | None, rows: int) -> dict[str, Any]:
    traffic = {"seconds": 5.0, "broker_mb": mb, "calls": 10}
    return {
        "agents": agents,
        "agents_per_process": 1,
        "cold": {
            "seconds": 5.0,
            "off": 0,
            "conductor_cpu_s": cpu,
            "traffic": traffic,
            "rows_read_total": rows,
            "rows_read_max": rows // agents,
        },
        "agent_rss_mb": 100.0,
        "conductor_rss_mb": 500.0,
    }


def _goal(goals: list[dict[str, Any]], start: str) -> dict[str, Any]:
    (found,) = [g for g in goals if g["name"].startswith(start)]
    return found


def test_bytes_per_row_and_the_joiners_share() -> None:
    res = _run(10, 10.0, 50.0, 1000)
    assert scale_bench.bytes_per_row(res["cold"]) == pytest.approx(50_000)
    assert scale_bench.join_share_mb(res) is None  # no join
    res["join"] = {"ideal": 1000 / 11}
    assert scale_bench.join_share_mb(res) == pytest.approx(1000 / 11 * 50_000 / 1e6)
    assert scale_bench.bytes_per_row({**res["cold"], "rows_read_total": 0}) is None
    assert scale_bench.bytes_per_row({**res["cold"], "traffic": {"broker_mb": None}}) is None


def test_goals_rows_read_and_cold_start_scaling() -> None:
    runs = [_run(10, 10.0, 50.0, 1100), _run(50, 14.0, 70.0, 5000)]
    goals = scale_goals.goals(runs, 1000)
    assert _goal(goals, "[10 agents] cold start, rows read")["status"] == "PASS"  # 1.1 x
    assert _goal(goals, "[50 agents] cold start, rows read")["status"] == "MISS"  # 5 x
    cpu = _goal(goals, "[50 vs 10 agents] conductor CPU per cold start")
    assert cpu["status"] == "MISS" and cpu["value"] == pytest.approx(1.4)
    octets = _goal(goals, "[50 vs 10 agents] broker bytes per cold start")
    assert octets["status"] == "MISS" and octets["value"] == pytest.approx(1.4)
    # One agent count: nothing to compare with.
    assert not [g for g in scale_goals.goals(runs[:1], 1000) if " vs " in g["name"]]
    # Broker bytes unknown (no rabbitmqctl): SKIP, not MISS.
    runs = [_run(10, 10.0, None, 1000), _run(50, 12.0, None, 1000)]
    goals = scale_goals.goals(runs, 1000)
    assert _goal(goals, "[50 vs 10 agents] broker bytes per cold start")["status"] == "SKIP"
    assert _goal(goals, "[50 vs 10 agents] conductor CPU per cold start")["status"] == "PASS"
    # No quiet minute measured: SKIP too.
    assert _goal(goals, "[50 vs 10 agents] conductor CPU per quiet minute")["status"] == "SKIP"


def _quiet(res: dict[str, Any], cpu: float, mb: float) -> dict[str, Any]:
    res["cold"]["quiet"] = {
        "conductor_cpu_s_per_min": cpu,
        "broker_mb_per_min": mb,
        "ownership_calls": 3 if res["agents"] == 100 else 0,
    }
    return res


def test_every_larger_count_against_the_smallest_and_the_table() -> None:
    runs = [
        _quiet(_run(50, 12.0, 55.0, 1000), 2.5, 9.0),
        _quiet(_run(10, 10.0, 50.0, 1000), 2.0, 6.0),
        _quiet(_run(100, 12.5, 60.0, 1100), 3.0, 12.0),
    ]
    runs[2]["conductor_rss_mb"] = 700.0
    goals = scale_goals.goals(runs, 1000)
    quiet = _goal(goals, "[50 vs 10 agents] conductor CPU per quiet minute")
    assert quiet["status"] == "PASS" and quiet["value"] == pytest.approx(1.25)
    quiet = _goal(goals, "[100 vs 10 agents] conductor CPU per quiet minute")
    assert quiet["status"] == "MISS" and quiet["value"] == pytest.approx(1.5)
    assert _goal(goals, "[100 vs 10 agents] conductor RSS")["status"] == "MISS"  # 1.4 x
    assert _goal(goals, "[50 vs 10 agents] conductor RSS")["status"] == "PASS"
    assert not [g for g in goals if "broker bytes per quiet minute" in g["name"]]  # shown only

    lines = scaling.format_scaling(runs, 1000)
    assert "10 agents" in lines[2] and lines[2].index("10 agents") < lines[2].index("50 agents")
    (quiet_row,) = [line for line in lines if "conductor CPU per quiet minute" in line]
    assert quiet_row.split()[-6:] == ["2.00", "(1.00x)", "2.50", "(1.25x)", "3.00", "(1.50x)"]
    (claims_row,) = [line for line in lines if "claim / release calls" in line]
    assert claims_row.split()[-3:] == ["0", "0", "3"]  # the 100-agent minute was not quiet
    (rows_row,) = [line for line in lines if "rows read per cold start" in line]
    assert rows_row.split()[-3:] == ["1.00", "1.00", "1.10"]
    assert scaling.format_scaling(runs[:1], 1000) == []


def test_the_cold_starts_cpu_is_split_into_its_calls_and_its_node_index() -> None:
    runs = [_run(10, 2.0, 50.0, 1000), _run(100, 3.0, 50.0, 1000)]
    runs[0]["cold"]["traffic"].update(
        cpu_s_by_method={"claim_share": 0.25, "owned_nodes": 0.05}, node_index_cpu_s=1.0
    )
    runs[1]["cold"]["traffic"] = {
        **runs[1]["cold"]["traffic"],
        "cpu_s_by_method": {"claim_share": 0.75, "owned_nodes": 0.15},
        "node_index_cpu_s": 1.2,
        "quiet_broker_kb_s": None,
        "quiet_calls_s": None,
    }
    lines = scaling.format_scaling(runs, 1000)
    (calls,) = [line for line in lines if "in the calls it served" in line]
    assert calls.split()[-4:] == ["0.30", "(1.00x)", "0.90", "(3.00x)"]
    (index,) = [line for line in lines if "in its node index" in line]
    assert index.split()[-4:] == ["1.00", "(1.00x)", "1.20", "(1.20x)"]
    # Not judged: the goal is the whole cold start's.
    assert not [g for g in scale_goals.goals(runs, 1000) if "node index" in g["name"]]
    rows = report.traffic_rows(runs[1]["cold"])
    assert ("  conductor CPU in its node index (s)", "1.20") in rows
    # From conductors older than the metrics: n/a, not 0.
    (older,) = [
        line
        for line in scaling.format_scaling(
            [_run(10, 2.0, 50.0, 1000), _run(100, 3.0, 50.0, 1000)], 1000
        )
        if "in its node index" in line
    ]
    assert older.split()[-2:] == ["n/a", "n/a"]


def test_a_whole_cold_start_is_judged_apart_and_said_when_not_measured() -> None:
    """The cold start counted to its end (the first state reports done,
    the conductors idle) has a row and a ratio goal of its own; runs that
    did not measure it say n/a and SKIP, never a ratio of nothing."""
    runs = [_run(10, 3.0, 50.0, 1000), _run(100, 4.5, 50.0, 1000)]
    whole = "[100 vs 10 agents] conductor CPU per whole cold start"
    assert _goal(scale_goals.goals(runs, 1000), whole)["status"] == "SKIP"
    runs[0]["cold"]["whole"] = {"seconds": 40.0, "conductor_cpu_s": 5.0}
    runs[1]["cold"]["whole"] = {"seconds": 45.0, "conductor_cpu_s": 7.0}
    judged = _goal(scale_goals.goals(runs, 1000), whole)
    assert judged["status"] == "MISS" and judged["value"] == pytest.approx(1.4)
    cold = _goal(scale_goals.goals(runs, 1000), "[100 vs 10 agents] conductor CPU per cold start")
    assert cold["value"] == pytest.approx(1.5)  # each judged on its own numbers
    (row,) = [line for line in scaling.format_scaling(runs, 1000) if "whole cold start" in line]
    assert row.split()[-4:] == ["5.00", "(1.00x)", "7.00", "(1.40x)"]


def test_a_count_run_again_is_judged_by_the_median_of_its_runs() -> None:
    # 10, 100, 10, 100, 10, 100: one slow run of each count (12.0, 30.0).
    cpus = [(10, 4.0), (100, 5.0), (10, 12.0), (100, 30.0), (10, 5.0), (100, 6.0)]
    runs = [_run(agents, cpu, 50.0, 1000) for agents, cpu in cpus]
    table = scaling.scaling(runs, 1000)
    assert [(row["agents"], row["runs"]) for row in table] == [(10, 3), (100, 3)]
    cpu = _goal(scale_goals.goals(runs, 1000), "[100 vs 10 agents] conductor CPU per cold start")
    # The medians, 6.0 / 5.0: not the mean (13.7 / 7.0) nor one pair of runs.
    assert cpu["status"] == "PASS" and cpu["value"] == pytest.approx(1.2)
    assert "medians of the runs" in cpu["detail"]
    lines = scaling.format_scaling(runs, 1000)
    assert "10 agents, 3 runs" in lines[2]
    (each,) = [
        line for line in lines if line.strip().startswith("conductor CPU per cold start (s):")
    ]
    assert each.split(":", 1)[1].strip() == "10: 4.00, 12.0, 5.00; 100: 5.00, 30.0, 6.00"


def test_rpc_served_by_method_sums_the_outcomes() -> None:
    page = (
        'ringfleet_rpc_server_duration_seconds_count{host="c",method="list_node_uuids",'
        'outcome="ok"} 240.0\n'
        'ringfleet_rpc_server_duration_seconds_count{host="c",method="list_node_uuids",'
        'outcome="error"} 2.0\n'
        'ringfleet_rpc_server_duration_seconds_sum{host="c",method="list_node_uuids",'
        'outcome="ok"} 6.5\n'
        'ringfleet_rpc_server_duration_seconds_bucket{host="c",method="claim_share",'
        'outcome="ok",le="0.005"} 1.0\n'
    )
    assert observe.rpc_served(page) == {"list_node_uuids": (242, 6.5)}


def test_rpc_served_cpu_by_method_sums_the_hosts() -> None:
    page = (
        'ringfleet_rpc_server_cpu_seconds_total{host="c1",method="claim_share"} 1.25\n'
        'ringfleet_rpc_server_cpu_seconds_total{host="c2",method="claim_share"} 0.5\n'
        'ringfleet_rpc_server_cpu_seconds_created{host="c1",method="claim_share"} 1.7e9\n'
        'ringfleet_rpc_server_cpu_seconds_total{host="c1",method="resume_work"} 0.25\n'
    )
    assert observe.rpc_served_cpu(page) == {"claim_share": 1.75, "resume_work": 0.25}


def test_node_index_cpu_sums_reads_and_hosts() -> None:
    page = (
        'ringfleet_conductor_node_index_cpu_seconds_total{host="c1",read="refresh"} 1.25\n'
        'ringfleet_conductor_node_index_cpu_seconds_total{host="c1",read="rebuild"} 0.5\n'
        'ringfleet_conductor_node_index_cpu_seconds_created{host="c1",read="refresh"} 1.7e9\n'
        'ringfleet_conductor_node_index_cpu_seconds_total{host="c2",read="refresh"} 0.25\n'
        'ringfleet_conductor_node_index_rows_total{host="c2",read="refresh"} 900.0\n'
    )
    assert observe.node_index_cpu(page) == 2.0
    assert observe.node_index_cpu("") == 0.0


def test_goal_join_bytes_against_the_joiners_share() -> None:
    res = _run(10, 10.0, 50.0, 1000)  # 50 kB per row read
    res["join"] = {
        "seconds": 5.0,
        "off": 0,
        "moved_between_stayed": 0,
        "ideal": 1000 / 11,  # a share of 4.5 MB
        "traffic": {"broker_mb": 10.0},
    }
    goal = _goal(scale_goals.goals([res], 1000), "[10 agents] join, broker bytes")
    assert goal["status"] == "MISS" and goal["value"] == pytest.approx(10.0 / (1000 / 11 * 0.05))
    res["join"]["traffic"]["broker_mb"] = 8.0
    goal = _goal(scale_goals.goals([res], 1000), "[10 agents] join, broker bytes")
    assert goal["status"] == "PASS"


def test_agents_per_process_option(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DB_URL", "TRANSPORT_URL", "ETCD_URL"):
        monkeypatch.setenv(f"RINGFLEET_TEST_{name}", "x://")
    assert scale_bench.parse_args([]).agents_per_process == 1
    assert scale_bench.parse_args(["--agents-per-process", "25"]).agents_per_process == 25
    with pytest.raises(SystemExit):
        scale_bench.parse_args(["--agents-per-process", "0"])


def test_multi_agent_gives_each_agent_its_own_configuration(tmp_path: Path) -> None:
    config = tmp_path / "agents.conf"
    config.write_text(
        "[DEFAULT]\nhost = agent-00\ntransport_url = rabbit://\n"
        "[compute_agent]\nreconcile_interval = 7\n"
    )
    one = multi_agent.agent_conf_for(str(config), "agent-00", setup_logging=False)
    two = multi_agent.agent_conf_for(str(config), "agent-01", setup_logging=False)
    assert one is not two
    assert (one.host, two.host) == ("agent-00", "agent-01")
    assert one.compute_agent.reconcile_interval == two.compute_agent.reconcile_interval == 7


class _GatedAgent:
    """Stands for an AgentService in :func:`multi_agent.run_agents`."""

    def __init__(self, conf: Any) -> None:
        self.host = conf
        self.ran = threading.Event()
        self.stopped = threading.Event()

    def run(self) -> None:
        self.ran.set()
        self.stopped.wait(10)

    def terminate(self) -> None:
        self.stopped.set()


def test_multi_agent_starts_its_agents_only_once_the_gate_is_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The benchmark's cold start counts from the gate: nothing runs before it."""
    made: list[_GatedAgent] = []

    def agent(conf: Any) -> _GatedAgent:
        made.append(_GatedAgent(conf))
        return made[-1]

    monkeypatch.setattr(multi_agent, "AgentService", agent)
    monkeypatch.setattr(multi_agent, "agent_conf_for", lambda _file, host, setup_logging: host)
    monkeypatch.setattr(multi_agent.signal, "signal", lambda *_: None)  # not the main thread
    gate = tmp_path / "gate"
    caplog.set_level(logging.INFO, "benchmarks.multi_agent")
    out: list[int] = []
    runner_thread = threading.Thread(
        target=lambda: out.append(multi_agent.run_agents("x.conf", ["a-0", "a-1"], gate))
    )
    runner_thread.start()
    try:
        deadline = time.monotonic() + 10
        while multi_agent.LOADED not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.01)
        assert f"2 {multi_agent.LOADED} {gate}" in caplog.text
        assert [a.host for a in made] == ["a-0", "a-1"]
        time.sleep(5 * multi_agent.GATE_POLL)
        assert not any(a.ran.is_set() for a in made)  # built, waiting at the gate
        gate.touch()
        assert all(a.ran.wait(10) for a in made)
    finally:
        for a in made:
            a.terminate()
        gate.touch()
        runner_thread.join(10)
    assert out == [0]


def test_goals_keep_agents_in_groups_apart() -> None:
    res = _run(10, 10.0, 50.0, 1000)
    res.update(agents_per_process=10, agent_share_rss_mb=20.0, agent_group_rss_mb=200.0)
    res["agent_rss_mb"] = 0.0  # no agent ran in a process of its own
    goals = scale_goals.goals([res], 1000)
    assert _goal(goals, "[10 agents] agent RSS (max)")["status"] == "SKIP"
    share = _goal(goals, "[10 agents] agent RSS share, 10 to a process")
    assert share["status"] == "PASS" and share["value"] == 20.0
    del res["cold"]  # the table's rows for it need a whole cold start
    labels = [label for label, _value in report._rows({**res, "conductor_cpu_s": 1.0})]
    assert "10-agent process RSS, max (MB)" in labels


def test_the_report_interval_waited_for_is_the_agents_default() -> None:
    """The quiet minute waits for the agents' first reports, at their default pace."""
    (opt,) = [o for o in compute_agent.opts if o.name == "report_interval"]
    assert opt.default == run.REPORT_INTERVAL
    assert "report_interval" in runner._TEST_INTERVALS  # removed: the default runs


def test_builds_are_judged_against_the_small_fleets_rate() -> None:
    res = _run(10, 10.0, 50.0, 1000)
    res["builds"] = [{"builds_per_s": 70.0, "conductors": 1}]
    res["builds_baseline"] = {"nodes": 1000, "builds": [{"builds_per_s": 80.0, "conductors": 1}]}
    name = "[10 agents] builds/s, 1 conductor(s), vs 1000 nodes"
    goal = _goal(scale_goals.goals([res], 100_000), name)
    assert goal["status"] == "PASS" and goal["value"] == pytest.approx(70 / 80)
    res["builds"][0]["builds_per_s"] = 60.0
    assert _goal(scale_goals.goals([res], 100_000), name)["status"] == "MISS"


def test_the_baseline_builds_on_a_small_fleet_first(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DB_URL", "TRANSPORT_URL", "ETCD_URL"):
        monkeypatch.setenv(f"RINGFLEET_TEST_{name}", "x://")
    seen: list[tuple[int, list[str], int]] = []

    def fake_run_one(args: Any, agents: int, _log: Any) -> dict[str, Any]:
        seen.append((args.nodes, list(args.steps), agents))
        return {"builds": [{"builds_per_s": float(args.nodes), "conductors": 1}]}

    monkeypatch.setattr(runner, "run_one", fake_run_one)
    args = scale_bench.parse_args(["--steps", "cold,join,builds", "--builds", "800"])
    results = runner._with_baseline(args, 10, lambda _line: None)
    # Half the small fleet at most is built; the large one runs its own steps.
    assert seen == [(1600, ["builds"], 10), (100_000, ["cold", "join", "builds"], 10)]
    assert results["builds_baseline"]["nodes"] == 1600
    assert results["builds_baseline"]["builds"][0]["builds_per_s"] == 1600.0
    seen.clear()
    runner._with_baseline(scale_bench.parse_args(["--steps", "cold,join"]), 10, lambda _l: None)
    assert seen == [(100_000, ["cold", "join"], 10)]  # no builds: no baseline
