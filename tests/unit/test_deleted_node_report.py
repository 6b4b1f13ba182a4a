# SPDX-License-Identifier: Apache-2.0
"""What the conductor's answer to an agent's state report does at the agent.

It names the reported nodes that no longer exist (``gone``, conductor API
1.20); the agent's :class:`~compute_agent.state_reports.StateSender` hands
them to :meth:`~compute_agent.ownership.OwnershipManager.forget_deleted`,
so the node is neither reported (a stale report, a conductor WARNING,
every report for ever) nor claimed again.  And it says the change time it
wrote (``changed_at``, API 1.27), which the agent's change reads leave
out, as its claims'.  The real agents endpoint on SQLite, the agent's
ownership manager over it in-process.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compute_agent.ownership import OwnershipManager
from compute_agent.state_reports import StateReports, StateSender
from conductor.db import nodes
from conductor.endpoints.agents import AgentsEndpoint
from conductor.fleet_view import FleetView
from tests.dbutil import migrated
from tests.unit.test_agent_ownership import (  # noqa: F401 (clock: a fixture)
    CTXT,
    ConductorAdapter,
    Fleet,
    StubMembership,
    clock,
    grouped_nodes,
)


class Reporting(ConductorAdapter):
    """The in-process conductor, with the state reports too."""

    def report_node_states(self, host: str, states: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls.append(("report", [s["node_uuid"] for s in states]))
        return self.endpoint.report_node_states(CTXT, host=host, states=states)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    view = FleetView(db)
    view.attach(StubMembership())  # type: ignore[arg-type]
    endpoint = AgentsEndpoint(db, view, lambda: 3600.0, restart_grace=lambda: 60.0)
    try:
        yield Fleet(db=db, fleet=view, conductor=Reporting(endpoint), grace=[3600.0])
    finally:
        db.dispose()


def _report(sender: StateSender, reports: StateReports, agent: OwnershipManager) -> None:
    """One report of every held node, as the agent's report loop sends it."""
    states = [
        {"node_uuid": node, "epoch": epoch, "power_state": "power on", "provision_state": None}
        for node, epoch in sorted(agent.held().items())
    ]
    sender.send(reports, reports.due(states, 0.0))


def test_a_node_deleted_while_owned_is_forgotten_at_the_next_report(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    owned = grouped_nodes(fleet.db, "rack1", 3)
    fleet.live({"a1": []})
    agent = fleet.agent("a1")
    fleet.settle()
    assert set(agent.held()) == set(owned)
    doomed, *kept = owned
    # An operator forgets the node: maintenance first, then delete.
    nodes.set_maintenance(fleet.db, doomed, True, "retired")
    assert nodes.delete_node(fleet.db, doomed)

    conductor = fleet.conductor
    assert isinstance(conductor, Reporting)
    sender = StateSender(conductor, "a1", 30.0, forget=agent.forget_deleted)  # type: ignore[arg-type]
    reports = StateReports(full_interval=60.0)
    caplog.set_level(logging.INFO)
    _report(sender, reports, agent)
    assert set(agent.held()) == set(kept)
    # Not claimed again, nor reported again.
    fleet.settle()
    assert doomed not in agent.desired(fleet.view)
    assert all(doomed not in claimed for claimed in conductor.of("claim"))
    reports = StateReports(full_interval=60.0)  # a full report
    _report(sender, reports, agent)
    assert conductor.of("report")[-1] == sorted(kept)
    said = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert not [m for _n, level, m in said if level >= logging.WARNING], said
    assert [m for n, _l, m in said if n == "conductor.endpoints.state_reports"] == [
        f"Agent a1 reported 1 nodes deleted since it claimed them; it forgets them: {doomed}"
    ]
    assert f"Agent a1 forgets 1 nodes deleted while it owned them: {doomed}" in [
        m for _n, _l, m in said
    ]


def test_a_node_taken_over_is_stale_but_not_gone(fleet: Fleet) -> None:
    """Only deleted nodes are gone: a node another agent holds now is the
    inventory reads' to learn (the agent adopts it back if handed again)."""
    [node] = grouped_nodes(fleet.db, "rack1", 1)
    fleet.live({"a1": []})
    agent = fleet.agent("a1")
    fleet.settle()
    epoch = agent.held()[node]
    out = fleet.conductor.endpoint.report_node_states(
        CTXT,
        host="a1",
        states=[{"node_uuid": node, "epoch": epoch + 1, "power_state": "power on"}],
    )
    assert out == {"accepted": 0, "stale": [node], "gone": [], "changed_at": None}


@pytest.mark.parametrize("says_changes", [True, False])
def test_change_reads_leave_out_what_the_agents_own_reports_changed(
    fleet: Fleet,
    clock: list[float],  # noqa: F811 (the fixture imported above)
    says_changes: bool,
) -> None:
    """An agent's first report after a cold start changes every node it
    holds (the record had no power state).  With the conductor's change
    time (API 1.27) its next change read -- a quiet agent's comes ten
    minutes later -- reads none of them back; without (an older
    conductor), all of them."""
    owned = grouped_nodes(fleet.db, "rack1", 6)
    fleet.live({"a1": []})
    agent = fleet.agent("a1")
    fleet.settle()
    assert set(agent.held()) == set(owned) and agent.refresh_inventory() == 0
    conductor = fleet.conductor
    assert isinstance(conductor, Reporting)
    wrote: list[tuple[str, dict[str, str]]] = []

    def note(changed_at: str, powers: dict[str, str]) -> None:
        wrote.append((changed_at, powers))
        if says_changes:
            agent.wrote_states(changed_at, powers)

    sender = StateSender(conductor, "a1", 30.0, wrote=note)  # type: ignore[arg-type]
    _report(sender, StateReports(full_interval=60.0), agent)
    [(changed_at, powers)] = wrote
    assert changed_at and powers == dict.fromkeys(owned, "power on")
    clock[0] += 600.0
    assert agent.refresh_inventory() == (0 if says_changes else len(owned))
    assert agent.recorded_power(owned) == dict.fromkeys(owned, "power on")
    if says_changes:  # a later change by anything else is read
        nodes.set_maintenance(fleet.db, owned[0], True, "disk swap")
        assert agent.refresh_inventory() == 1
