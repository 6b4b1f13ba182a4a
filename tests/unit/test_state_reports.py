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


class _Record:
    """The conductor's record as the agent's inventory reads last showed it."""

    def __init__(self, powers: dict[str, str]) -> None:
        self.powers = powers
        self.asked: list[list[str]] = []

    def __call__(self, nodes: list[str]) -> dict[str, str]:
        self.asked.append(list(nodes))
        return {n: self.powers[n] for n in nodes if n in self.powers}


def test_the_first_report_sends_only_what_differs_from_the_record() -> None:
    # n0-n2 read as recorded; n3 differs; n4's record does not say.
    record = _Record({"n0": "power on", "n1": "power on", "n2": "power on", "n3": "power off"})
    reports = StateReports(full_interval=100.0, recorded=record)
    fleet = [_state(f"n{i}") for i in range(5)]
    first = reports.due(fleet, now=0.0)
    assert _nodes(first) == ["n3", "n4"]
    reports.sent(first, stale=[])
    assert reports.due(fleet, now=1.0) == []
    assert record.asked == [["n0", "n1", "n2", "n3", "n4"]]  # then nothing to ask
    # The full report still comes every full_interval from the first one.
    assert _nodes(reports.due(fleet, now=100.0)) == ["n0", "n1", "n2", "n3", "n4"]
    assert reports.due(fleet, now=101.0) == []


def test_without_a_record_the_first_report_is_full() -> None:
    # A conductor whose reads do not say the power states: every node, as before.
    reports = StateReports(full_interval=100.0, recorded=_Record({}))
    fleet = [_state(f"n{i}") for i in range(3)]
    first = reports.due(fleet, now=0.0)
    assert _nodes(first) == ["n0", "n1", "n2"]
    reports.sent(first, stale=[])
    assert reports.due(fleet, now=1.0) == []


def test_a_node_held_at_a_new_epoch_is_sent_only_if_it_differs_from_the_record() -> None:
    record = _Record({"n0": "power on", "n1": "power on"})
    reports = StateReports(full_interval=100.0, recorded=record)
    assert reports.due([_state("n0")], now=0.0) == []
    # Taken over, claimed, adopted: held at an epoch no report was taken at.
    fleet = [_state("n0", epoch=2), _state("n1", epoch=3), _state("n2", epoch=3)]
    assert _nodes(reports.due(fleet, now=1.0)) == ["n2"]
    # n1 lost and claimed again, its record changed by someone else meanwhile
    # (n2's report was not taken: still due).
    record.powers["n1"] = "power off"
    fleet[1] = _state("n1", epoch=4)
    assert _nodes(reports.due(fleet, now=2.0)) == ["n1", "n2"]


def test_the_record_does_not_hide_a_change_made_after_a_report_was_taken() -> None:
    """The record as read lags the reports taken (read back at the next
    refresh): a power that went back to what it shows is sent all the same."""
    record = _Record({"n0": "power on"})
    reports = StateReports(full_interval=100.0, recorded=record)
    assert reports.due([_state("n0")], now=0.0) == []
    off = reports.due([_state("n0", power="power off")], now=1.0)
    assert _nodes(off) == ["n0"]
    reports.sent(off, stale=[])
    # Back on before the record "power off" was read back: still sent.
    assert _nodes(reports.due([_state("n0")], now=2.0)) == ["n0"]


def test_a_stale_node_that_reads_as_recorded_is_not_sent_again() -> None:
    record = _Record({"n0": "power off"})
    reports = StateReports(full_interval=100.0, recorded=record)
    first = reports.due([_state("n0")], now=0.0)
    assert _nodes(first) == ["n0"]
    reports.sent(first, stale=["n0"])  # not ours at that epoch (a read will say)
    assert _nodes(reports.due([_state("n0")], now=1.0)) == ["n0"]
    record.powers["n0"] = "power on"  # its new owner reported it
    assert reports.due([_state("n0")], now=2.0) == []


def test_a_full_interval_of_zero_sends_everything_every_time_even_with_a_record() -> None:
    reports = StateReports(full_interval=0.0, recorded=_Record({"n0": "power on"}))
    assert _nodes(reports.due([_state("n0")], now=0.0)) == []
    assert _nodes(reports.due([_state("n0")], now=0.5)) == ["n0"]
