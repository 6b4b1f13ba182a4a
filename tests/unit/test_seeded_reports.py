# SPDX-License-Identifier: Apache-2.0
"""An agent's first state report sends only the states that differ from the record.

The agent's inventory reads carry each node's recorded power state; its
reporter takes a node it just claimed (a cold start, a join, a takeover)
whose power reads as recorded for reported already.  At a cold start of
100,000 nodes every agent's first report otherwise re-sent every node of
its share, and the conductor wrote nothing.  The real agents endpoint on
SQLite, the agent's ownership manager over it in-process, a dict for the
hardware.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compute_agent.ownership import OwnershipManager
from compute_agent.state_reports import StateReports, StateSender
from conductor.db.engine import Database
from conductor.db.models import NodeModel
from conductor.endpoints.agents import AgentsEndpoint
from conductor.fleet_view import FleetView
from tests.dbutil import add_nodes, migrated
from tests.unit.test_agent_ownership import CTXT, ConductorAdapter, Fleet, StubMembership

FULL_INTERVAL = 600.0


class Reporting(ConductorAdapter):
    """The in-process conductor, with the state reports too."""

    def report_node_states(self, host: str, states: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls.append(("report", [s["node_uuid"] for s in states]))
        return self.endpoint.report_node_states(CTXT, host=host, states=states)

    def reported(self) -> set[str]:
        return {node for call in self.of("report") for node in call}


def _older(endpoint: AgentsEndpoint) -> None:
    """The endpoint answers as a conductor that predates the recorded states."""
    real = endpoint.list_node_uuids

    def older(*args: Any, **kwargs: Any) -> dict[str, Any]:
        reply = real(*args, **kwargs)
        reply.pop("power_states", None)
        for node in reply.get("nodes", ()):
            node.pop("power_state", None)
        return reply

    endpoint.list_node_uuids = older  # type: ignore[method-assign]


@pytest.fixture(params=["by-share", "whole-fleet"])
def fleet(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Fleet]:
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    view = FleetView(db)
    view.attach(StubMembership())  # type: ignore[arg-type]
    endpoint = AgentsEndpoint(db, view, lambda: 3600.0, restart_grace=lambda: 60.0)
    conductor = Reporting(endpoint, by_share=request.param == "by-share")
    try:
        yield Fleet(db=db, fleet=view, conductor=conductor, grace=[3600.0])
    finally:
        db.dispose()


class Reporter:
    """An agent's report loop, one report per call, over a dict of powers."""

    def __init__(self, fleet: Fleet, agent: OwnershipManager, hardware: dict[str, str]) -> None:
        conductor = fleet.conductor
        assert isinstance(conductor, Reporting)
        self.agent = agent
        self.hardware = hardware
        self.reports = StateReports(FULL_INTERVAL, recorded=agent.recorded_power)
        self.sender = StateSender(conductor, agent.host, 30.0, forget=agent.forget_deleted)  # type: ignore[arg-type]

    def report(self, now: float) -> None:
        states = [
            {
                "node_uuid": node,
                "epoch": epoch,
                "power_state": self.hardware.get(node, "power off"),
                "provision_state": None,
            }
            for node, epoch in sorted(self.agent.held().items())
        ]
        self.sender.send(self.reports, self.reports.due(states, now))


def _cold_start(
    fleet: Fleet, count: int = 40
) -> tuple[list[str], dict[str, Reporter], dict[str, str]]:
    """``count`` nodes owned by the agents of a previous run, recorded
    "power off"; a1 and a2 start, claim and report once."""
    nodes = add_nodes(fleet.db, count, owner="old-agent")
    hardware: dict[str, str] = {}
    fleet.live({"a1": [], "a2": []})
    reporters = {h: Reporter(fleet, fleet.agent(h), hardware) for h in ("a1", "a2")}
    fleet.settle()
    assert set(reporters["a1"].agent.held()) | set(reporters["a2"].agent.held()) == set(nodes)
    return nodes, reporters, hardware


def _powers(db: Database, nodes: list[str]) -> dict[str, str | None]:
    with db.transaction() as session:
        rows = session.query(NodeModel.uuid, NodeModel.power_state).filter(
            NodeModel.uuid.in_(nodes)
        )
        return {uuid: power for uuid, power in rows}


def test_a_cold_start_sends_only_the_states_that_differ_from_the_record(fleet: Fleet) -> None:
    nodes, reporters, hardware = _cold_start(fleet)
    changed = set(nodes[::7])  # powered on while no agent ran
    hardware.update(dict.fromkeys(changed, "power on"))
    for reporter in reporters.values():
        reporter.report(0.0)
    conductor = fleet.conductor
    assert isinstance(conductor, Reporting)
    assert conductor.reported() == changed
    assert _powers(fleet.db, nodes) == {n: hardware.get(n, "power off") for n in nodes}
    # Nothing more until the full report, which carries every node again.
    conductor.calls.clear()
    for reporter in reporters.values():
        reporter.report(1.0)
    assert conductor.of("report") == []
    for reporter in reporters.values():
        reporter.report(FULL_INTERVAL)
    assert conductor.reported() == set(nodes)


def test_with_an_older_conductor_the_first_report_is_full(fleet: Fleet) -> None:
    _older(fleet.conductor.endpoint)
    nodes, reporters, _hardware = _cold_start(fleet)
    for reporter in reporters.values():
        reporter.report(0.0)
    conductor = fleet.conductor
    assert isinstance(conductor, Reporting)
    assert conductor.reported() == set(nodes)
    conductor.calls.clear()
    for reporter in reporters.values():
        reporter.report(1.0)
    assert conductor.of("report") == []


def test_a_takeover_sends_only_the_states_that_differ_from_what_the_peer_reported(
    fleet: Fleet,
) -> None:
    nodes, reporters, hardware = _cold_start(fleet)
    hardware.update(dict.fromkeys(nodes[::2], "power on"))
    for reporter in reporters.values():
        reporter.report(0.0)
    conductor = fleet.conductor
    assert isinstance(conductor, Reporting)
    assert conductor.reported() == set(nodes[::2])
    # a2 dies; a1 takes its nodes over, at new epochs.
    taken = set(reporters["a2"].agent.held())
    a1 = reporters["a1"].agent
    del fleet.agents["a2"]
    fleet.live({"a1": []})
    fleet.settle()
    assert set(a1.held()) == set(nodes)
    # One of them was powered off after a2's last report.
    off = sorted(taken & set(nodes[::2]))[0]
    hardware[off] = "power off"
    conductor.calls.clear()
    reporters["a1"].report(1.0)
    assert conductor.of("report") == [[off]]
    assert _powers(fleet.db, [off]) == {off: "power off"}
