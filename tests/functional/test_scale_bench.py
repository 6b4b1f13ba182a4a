# SPDX-License-Identifier: Apache-2.0
"""Smoke test of benchmarks.scale_bench at a tiny size (200 nodes, 3 agents).

Checks that the harness's convergence computation works on a real fleet:
after the cold start every unpinned node is owned by its ring owner
(``hashring`` over the live agents, per node group), the join moves nodes
only to the new agent, the claim counts come from the conductor's log, and
a wave (join, builds, kill -9) measures the conductor's RSS.  The three
agents run in one process (``--agents-per-process 3``); the inventory rows
each read, the cold start's broker bytes and the join's are checked to be
there and sane.
No timing thresholds: the goals may print PASS or MISS.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import scale_bench
from benchmarks.scale import run as scale_run
from benchmarks.scale.projection import Protocol, project
from benchmarks.scale.report import traffic_rows
from conductor.db import migration
from conductor.db.engine import Database


def test_cold_start_and_join_converge_on_the_ring(
    tmp_path: Path,
    pg_url: str,
    transport_url: str,
    etcd_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    database = Database(pg_url)
    migration.upgrade(database)
    database.dispose()
    args = scale_bench.parse_args(
        [
            "--nodes",
            "200",
            "--agents",
            "3",
            # One process for the three (benchmarks/multi_agent.py): fewer
            # interpreters to start than before, and the launcher is covered;
            # the joined agents are processes of their own.
            "--agents-per-process",
            "3",
            "--steps",
            "cold,join",
            "--timeout",
            "60",
            "--db-url",
            pg_url,
            "--transport-url",
            transport_url,
            "--etcd-url",
            etcd_url,
        ]
    )
    fleet = scale_bench.make_fleet(tmp_path, pg_url, transport_url, etcd_url)
    watch = scale_bench.ConvergenceWatch(etcd_url, fleet.group).start()
    try:
        results: dict[str, object] = {}
        bench = scale_bench.Run(args, fleet, watch, lambda _line: None)
        bench.traffic.QUIET = 0.5  # 200 nodes are quiet at once; keep the test short
        # The test fleet's short intervals keep a conductor above "idle";
        # the wait is still taken, briefly.
        monkeypatch.setattr(scale_run, "SETTLE_MOST", 2.0)
        scale_bench.steps(args, bench, 3, results)
        view = watch.view()
        assert view is not None
        nodes = scale_bench.read_nodes(fleet.db)
        agents = {"agent-00", "agent-01", "agent-02", "agent-joined"}
        assert scale_bench.converged(view, nodes, agents) == (True, 0)
        # Not converged for another member set: the check is not vacuous.
        assert not scale_bench.converged(view, nodes, agents - {"agent-joined"})[0]
        owners = scale_bench.ring_owners(view, nodes)
        assert len(owners) == 200
        assert {owner for _g, owner, _p in nodes.values()} == agents
        cold = results["cold"]
        assert isinstance(cold, dict)
        assert cold["granted"] >= 200  # every node claimed at least once
        assert cold["processes"] == 1
        # Each agent of the group has its own counter; every node was read
        # by some agent, and no agent read more than the others together.
        assert set(cold["rows_read"]) == {"agent-00", "agent-01", "agent-02"}
        assert cold["rows_read_total"] >= 200
        assert 0 < cold["rows_read_max"] <= cold["rows_read_total"]
        assert cold["traffic"]["broker_mb"] > 0
        assert cold["traffic"]["quiet_calls_s"] is None
        assert cold["conductor_cpu_s"] > 0
        assert scale_bench.bytes_per_row(cold) is not None
        # The agents' CPU, PostgreSQL's, and etcd's requests per client
        # (3 agents and the conductor), counted by etcd, the watcher's off.
        assert cold["agent_cpu_s"] >= cold["agent_cpu_after_serving_s"] > 0
        assert cold["nodes_owned"] == 200
        assert cold["server_cpu_s"]["postgres"] > 0
        etcd = cold["etcd"]
        assert etcd is not None and etcd["clients"] == 4
        assert etcd["requests"] > 0 and etcd["own_requests"] > 0
        assert etcd["per_client"] == etcd["requests"] / 4
        join = results["join"]
        assert isinstance(join, dict)
        assert join["moved_between_stayed"] == 0
        assert 0 < join["moved"] < 200
        # The join's cost on the bus: the new agent's claims at least, and
        # the bytes through the broker (the harness's RabbitMQ is known).
        traffic = join["traffic"]
        assert traffic["calls"] >= join["claim_calls"] > 0
        assert traffic["broker_mb"] is not None and traffic["broker_mb"] > 0
        assert join["rows_read_joiner"] > 0
        assert join["rows_read_others"] >= 0 and join["conductor_cpu_s"] >= 0
        assert join["startup_cpu_s"] > 0 and join["joiner_cpu_s"] >= 0
        assert join["nodes_owned"] == join["moved"]  # the joiner's: every node it got
        # The projection of both steps, from what they measured.
        protocol = Protocol(ttl=3, watch_interval=0.2)
        for step in ("cold", "join"):
            row = project({"agents": 3, **results}, step, protocol)
            assert row["startup_s"] == join["startup_cpu_s"]
            assert 0 < row["low"] <= row["high"]
            assert row["measured"] == results[step]["seconds"]  # type: ignore[index]
        share = scale_bench.join_share_mb(results)
        assert share is not None and share > 0
        (label, value), _quiet, (cpu_label, cpu_value), index_row = traffic_rows(join)
        # The node index refreshed all along (the joiner's claims among its rows).
        assert traffic["node_index_cpu_s"] > 0
        assert index_row == (
            "  conductor CPU in its node index (s)",
            f"{traffic['node_index_cpu_s']:.2f}",
        )
        assert "broker MB / conductor calls" in label
        assert value == f"{traffic['broker_mb']:.1f} / {traffic['calls']:,}"
        # The conductor's CPU by method, of the methods it served.
        spent = traffic["cpu_s_by_method"]
        assert spent and set(spent) <= set(traffic["calls_by_method"])
        assert "by method" in cpu_label and max(spent, key=spent.__getitem__) in cpu_value
        # A wave (--waves): another agent joins, builds, kill -9 of it.
        args.builds, args.batch = 10, 5
        rss = bench.sampler.max_rss
        assert 0 < rss["agent_share"] < rss["agent_group"]  # 1/3 of the group's process
        assert rss["agent"] > 0  # the joiner, a process of its own
        # Every agent's own endpoint still answers after the join (the
        # group's three and the joiner's): no counter silently missing.
        assert set(bench.rows_read()) == agents
        wave = bench.wave("agent-wave-1")
        assert wave["join_s"] is not None and wave["owned_s"] is not None
        assert wave["builds_per_s"] > 0 and wave["conductor_rss_mb"] > 0
        nodes = scale_bench.read_nodes(fleet.db)
        assert all(owner != "agent-wave-1" for _g, owner, _p in nodes.values())
    finally:
        watch.stop()
        fleet.close()
