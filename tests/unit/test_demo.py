# SPDX-License-Identifier: Apache-2.0
"""``ringfleet demo``: a real conductor and real agents in this process, no servers.

One small demo runs for the whole module (a few seconds: the crash waits for
the TTL and the grace); its numbers and text are checked by several tests.
The invariant checkers are also fed fabricated states that break them.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conductor.cmd import cli
from conductor.common.extras import MissingExtra
from fleet_demo import checks, scenario
from fleet_demo.checks import FleetState, InstanceRecord, NodeRecord
from fleet_demo.report import DemoResult, ProgressBar

OPTIONS = scenario.DemoOptions(
    agents=3, nodes=90, instances=30, ttl=2.0, rehome_grace=1.0, step_duration=0.0, seed=7
)


@dataclass
class Ran:
    result: DemoResult
    text: str
    threads_before: set[threading.Thread]


@pytest.fixture(scope="module", params=["file", "redis"])
def ran(request: pytest.FixtureRequest) -> Iterator[Ran]:
    """The demo on each membership backend: the same story, the same checks."""
    before = set(threading.enumerate())
    out = io.StringIO()
    result = scenario.run_demo(dataclasses.replace(OPTIONS, backend=request.param), out)
    yield Ran(result, out.getvalue(), before)


def test_every_invariant_held_and_every_build_is_active(ran: Ran) -> None:
    assert ran.result.violations == [], ran.text
    assert (ran.result.active, ran.result.error) == (OPTIONS.instances, 0)
    assert "All invariants held." in ran.text


def test_the_image_and_the_ssh_key_reached_every_active_machine(ran: Ran) -> None:
    # Read back from the simulated machines (the node store), not from the
    # conductor: the flavor's default image and the request's key got there.
    assert ran.result.provisioned == OPTIONS.instances
    assert (
        f"Image ubuntu-24.04.qcow2 and SSH key 'demo' reached {OPTIONS.instances} of "
        f"{OPTIONS.instances} active machines" in ran.text
    )


def test_the_crash_moved_the_victims_share_and_re_homed_its_pins(ran: Ran) -> None:
    result = ran.result
    # The victim had about a third of the nodes (3 agents): zero would mean
    # no takeover, all of them would mean survivors' nodes moved too.
    assert OPTIONS.nodes / 6 < result.moved_on_crash < OPTIONS.nodes * 2 / 3
    # It is the agent with the most pins: at least its share of 30 instances.
    assert result.pins_rehomed >= OPTIONS.instances // 3
    assert result.takeover_seconds is not None and result.rehome_seconds is not None
    # Lower bounds only: nothing may move before the lease expired, and the
    # pins wait for the grace on top.
    assert result.takeover_seconds >= OPTIONS.ttl / 2
    assert result.rehome_seconds >= max(result.takeover_seconds, OPTIONS.rehome_grace)


def test_the_join_moved_only_the_newcomers_share(ran: Ran) -> None:
    result = ran.result
    assert result.joined == "agent-4"
    # About a quarter of the nodes, less the pinned ones (they stay).
    assert 0 < result.moved_on_join == result.expected_on_join < OPTIONS.nodes / 2
    assert result.moved_to_newcomer == result.moved_on_join
    assert f"nodes moved to {result.joined} in" in ran.text
    assert "0 elsewhere" in ran.text


def test_tables_and_plain_progress_lines_are_printed(ran: Ran) -> None:
    for title in ("Nodes split by the ring:", "After the takeover:", "After re-homing:"):
        assert title in ran.text
    after_join = ran.text.split("After the join:")[1]
    rows = re.findall(r"^  (agent-\d)\s+(\w+)\s+(\d+)\s+(\d+)", after_join, re.MULTILINE)
    assert {host: state for host, state, _, _ in rows} == {
        "agent-1": "up",
        "agent-2": "up",
        "agent-3": "up",
        "agent-4": "up",
    } | {ran.result.crashed: "gone"}
    assert sum(int(owned) for _, _, owned, _ in rows) == OPTIONS.nodes
    # Not a terminal: plain lines, the last one at 100 %, no carriage return.
    assert f"100%  builds {OPTIONS.instances}/{OPTIONS.instances}" in ran.text
    assert "\r" not in ran.text


def test_every_thread_stopped_and_the_temp_dir_is_gone(ran: Ran) -> None:
    left = [t for t in set(threading.enumerate()) - ran.threads_before if t.is_alive()]
    assert left == []
    match = re.search(r"tooz (?:file://|redis:// on an in-process fakeredis) in (\S+)\)", ran.text)
    assert match is not None
    assert not Path(match.group(1)).exists()


def test_cli_runs_the_demo_and_exits_0() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "conductor.cmd.cli",
            "demo",
            "--agents",
            "2",
            "--nodes",
            "30",
            "--instances",
            "6",
            "--ttl",
            "2",
            "--rehome-grace",
            "0",
            "--step-duration",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All invariants held." in done.stdout
    # The crash is on purpose: its warnings stay off the console without -v.
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--agents", "1"], "--agents"),
        (["--agents", "three"], "--agents"),
        (["--nodes", "0"], "--nodes"),
        (["--instances", "0"], "--instances"),
        (["--nodes", "10", "--instances", "11"], "--instances"),
        (["--ttl", "0"], "--ttl"),
        (["--rehome-grace", "-1"], "--rehome-grace"),
        (["--step-duration", "nan"], "--step-duration"),
        (["--failure-rate", "1.5"], "--failure-rate"),
        (["--seed", "-1"], "--seed"),
        (["--backend", "etcd"], "--backend"),
    ],
)
def test_bad_options_exit_2_naming_the_option(
    argv: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # argparse refuses a bad value with SystemExit(2) (the console script's
    # exit status); the cross-option check returns 2 itself.
    try:
        code = cli.main(["demo", *argv])
    except SystemExit as exc:
        code = exc.code  # type: ignore[assignment]
    assert code == 2
    assert f"argument {option}:" in capsys.readouterr().err


def test_a_violation_makes_the_command_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fake(options: scenario.DemoOptions, out: io.StringIO) -> DemoResult:
        result = DemoResult(agents=3, nodes=1, instances=1, ttl=2.0, rehome_grace=1.0)
        result.violations.append("node n1 has no owner")
        return result

    monkeypatch.setattr(scenario, "run_demo", fake)
    assert cli.main(["demo", "--nodes", "1", "--instances", "1"]) == 1


# -- the checkers, fed states that break them -----------------------------------------


def _state(
    nodes: list[NodeRecord],
    instances: list[InstanceRecord] = (),  # type: ignore[assignment]
    held: dict[str, dict[str, int]] | None = None,
) -> FleetState:
    return FleetState(
        {n.uuid: n for n in nodes}, {i.uuid: i for i in instances}, held if held else {}
    )


def test_single_owner_check_passes_a_consistent_fleet() -> None:
    state = _state(
        [NodeRecord("n1", "a1", 2, None), NodeRecord("n2", "a2", 1, None)],
        held={"a1": {"n1": 2}, "a2": {"n2": 1}},
    )
    assert checks.check_single_owner(state) == []


@pytest.mark.parametrize(
    ("nodes", "held", "expected"),
    [
        ([NodeRecord("n1", None, 0, None)], {"a1": {}}, "node n1 has no owner"),
        ([NodeRecord("n1", "dead", 1, None)], {"a1": {}}, "owned by dead, which is not a live"),
        (
            [NodeRecord("n1", "a1", 1, None)],
            {"a1": {"n1": 1}, "a2": {"n1": 2}},
            "held by a1 at epoch 1, a2 at epoch 2",
        ),
        ([NodeRecord("n1", "a1", 3, None)], {"a1": {"n1": 2}}, "held by a1 at epoch 2"),
        ([], {"a1": {"ghost": 1}}, "node ghost is held by a1 but unknown"),
    ],
)
def test_single_owner_check_catches(
    nodes: list[NodeRecord], held: dict[str, dict[str, int]], expected: str
) -> None:
    [violation] = checks.check_single_owner(_state(nodes, held=held))
    assert expected in violation


def test_allocation_violations_are_the_conductors_fleet_check_allocation_problems() -> None:
    reply = {
        "ok": False,
        "problems": [
            {"kind": "orphaned", "message": "3 nodes (0 pinned) owned by a9"},
            {
                "kind": "double-claimed",
                "node_uuid": "n1",
                "instance_uuid": "i2",
                "message": "node n1, instance i2: instance is placed on node n1, which hosts i1",
            },
        ],
    }
    assert checks.check_allocations(reply) == [
        "allocation: node n1, instance i2: instance is placed on node n1, which hosts i1"
    ]
    assert checks.check_allocations({"ok": True, "problems": []}) == []


def test_build_check_catches_stuck_and_unexplained_builds() -> None:
    state = _state(
        [],
        [
            InstanceRecord("i1", "building", None, None, None),
            InstanceRecord("i2", "error", None, None, None),
            InstanceRecord("i3", "error", None, None, "NoValidNode: no node left"),
            InstanceRecord("i4", "active", "n1", "a1", None),
        ],
    )
    assert checks.check_builds(state, ["i1", "i2", "i3", "i4", "i5"]) == [
        "instance i1 is still building",
        "instance i2 is in ERROR without a reason",
        "instance i5 was requested but is not stored",
    ]


def test_move_check_catches_a_move_between_survivors() -> None:
    before = {"n1": "a1", "n2": "a2", "n3": "dead"}
    ok = {"n1": "a1", "n2": "a2", "n3": "a1"}
    assert checks.check_moves(before, ok, stayed={"a1", "a2"}, step="crash") == []
    bad = {"n1": "a2", "n2": "a2", "n3": "a1"}
    [violation] = checks.check_moves(before, bad, stayed={"a1", "a2"}, step="crash")
    assert violation.startswith("crash: 1 nodes moved between agents that both stayed: n1")


def test_fencing_check_reads_the_action_log(tmp_path: Path) -> None:
    log = tmp_path / "actions.jsonl"
    assert checks.check_fencing_log(log) == []  # nothing written: nothing overlapped
    lines = [
        {"node": "n1", "agent": "a1", "epoch": 1, "action": "deploy_start", "instance": None,
         "t": 1.0, "ns": 1_000_000_000, "pid": 1},
        {"node": "n1", "agent": "a2", "epoch": 1, "action": "deploy_start", "instance": None,
         "t": 2.0, "ns": 2_000_000_000, "pid": 1},
    ]  # fmt: skip
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    [violation] = checks.check_fencing_log(log)
    assert "node n1: epoch 1 used by 2 agents" in violation
    log.write_text("not json\n")
    [violation] = checks.check_fencing_log(log)
    assert violation.startswith("action log unreadable")


# -- the progress bar -----------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_redraws_on_a_terminal_and_prints_tenths_otherwise() -> None:
    tty = _Terminal()
    bar = ProgressBar(4, tty, clock=lambda: 0.0)
    for done in range(5):
        bar.update(done)
    bar.finish()
    assert tty.getvalue().count("\r") == 5
    assert "[" + "#" * 30 + "] builds 4/4" in tty.getvalue()
    assert tty.getvalue().endswith("\n")

    plain = io.StringIO()
    bar = ProgressBar(100, plain, clock=lambda: 0.0)
    for done in (0, 1, 5, 10, 11, 55, 100, 100):
        bar.update(done)
    bar.finish()
    lines = plain.getvalue().splitlines()
    assert [line.split("%")[0].strip() for line in lines] == ["0", "10", "55", "100"]


def test_the_redis_demo_without_fakeredis_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """fakeredis is an optional extra: the default demo never needs it, the
    Redis one says in one line how to get it and fails before starting anything."""
    monkeypatch.setitem(sys.modules, "fakeredis", None)
    with pytest.raises(MissingExtra) as missing:
        scenario.run_demo(dataclasses.replace(OPTIONS, backend="redis"), io.StringIO())
    assert missing.value.extra == "demo-redis"
    assert cli.main(["demo", "--backend", "redis", "--nodes", "1", "--instances", "1"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "ringfleet demo: error: the in-process Redis (ringfleet demo --backend redis) needs "
        "the 'demo-redis' extra (fakeredis is not installed): pip install 'ringfleet[demo-redis]'"
    ]
