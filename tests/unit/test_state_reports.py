# SPDX-License-Identifier: Apache-2.0
"""Which node states an agent sends: changes only, and everything every full interval."""

from __future__ import annotations

from typing import Any

from compute_agent.state_reports import StateReports


def _state(node: str, epoch: int = 1, power: str = "power on") -> dict[str, Any]:
    return {"node_uuid": node, "epoch": epoch, "power_state": power, "provision_state": None}


def _nodes(states: list[dict[str, Any]]) -> list[str]:
    return [s["node_uuid"] for s in states]


def test_only_what_the_conductor_has_not_taken_is_sent_between_full_reports() -> None:
    reports = StateReports(full_interval=100.0)
    fleet = [_state(f"n{i}") for i in range(5)]
    first = reports.due(fleet, now=0.0)
    assert _nodes(first) == ["n0", "n1", "n2", "n3", "n4"]  # the first report is full
    reports.sent(first, stale=["n4"])
    # Unchanged and taken: not sent again; refused as stale: sent again.
    assert _nodes(reports.due(fleet, now=1.0)) == ["n4"]
    # A changed power state, and a node acquired again at a new epoch.
    fleet[1] = _state("n1", power="power off")
    fleet[2] = _state("n2", epoch=2)
    assert _nodes(reports.due(fleet, now=2.0)) == ["n1", "n2", "n4"]
    # Not taken (the call failed): still due.
    assert _nodes(reports.due(fleet, now=3.0)) == ["n1", "n2", "n4"]
    reports.sent(reports.due(fleet, now=4.0), stale=[])
    assert reports.due(fleet, now=5.0) == []
    # Every full_interval, everything again: the record may have changed meanwhile.
    assert _nodes(reports.due(fleet, now=100.0)) == ["n0", "n1", "n2", "n3", "n4"]
    assert reports.due(fleet, now=101.0) == []


def test_a_node_given_up_and_held_again_is_sent_again() -> None:
    reports = StateReports(full_interval=100.0)
    reports.sent(reports.due([_state("n0"), _state("n1")], now=0.0), stale=[])
    assert reports.due([_state("n1")], now=1.0) == []  # n0 released: forgotten
    assert _nodes(reports.due([_state("n0"), _state("n1")], now=2.0)) == ["n0"]


def test_a_full_interval_of_zero_sends_everything_every_time() -> None:
    reports = StateReports(full_interval=0.0)
    fleet = [_state("n0"), _state("n1")]
    reports.sent(reports.due(fleet, now=0.0), stale=[])
    assert _nodes(reports.due(fleet, now=0.5)) == ["n0", "n1"]
