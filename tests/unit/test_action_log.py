# SPDX-License-Identifier: Apache-2.0
"""The fencing check over the action log, and strict reading of the log."""

from __future__ import annotations

import dataclasses
import json
import uuid as uuidlib
from pathlib import Path

import pytest
from oslo_config import cfg

from compute_agent.drivers import ActionContext
from compute_agent.drivers.simulated import SimulatedDriver
from compute_agent.drivers.simulated.action_log import Action, ActionLog, check_fencing, read_log
from conductor.common.conf import simulated_driver as simulated_conf
from conductor.common.exception import ActionLogError
from conductor.common.objects import Node

NODE = "9b1c1b9e-2f0a-4d5e-8a57-0d3c3f6a1b01"
OTHER = "0f6e4c1a-7d2b-4c3e-9b8a-5e4d3c2b1a00"
SECOND = 1_000_000_000
T0 = 1_790_000_000 * SECOND  # 2026-09-21T14:13:20Z


def act(agent: str, epoch: int, at: float, action: str = "power_on", node: str = NODE) -> Action:
    """An action of *agent* at *epoch*, *at* seconds after T0."""
    ns = T0 + int(at * SECOND)
    return Action(node=node, agent=agent, epoch=epoch, action=action, instance=None, ns=ns)


def when(at: float) -> str:
    return act("x", 0, at).when()


def test_times_are_shown_as_utc_with_microseconds() -> None:
    assert when(0) == "2026-09-21T14:13:20.000000Z"
    assert when(1.2345678) == "2026-09-21T14:13:21.234567Z"


# -- check_fencing -----------------------------------------------------------------------------


def test_a_clean_handover_history_passes() -> None:
    history = [
        act("agent-a", 1, 0, "deploy_start"),
        act("agent-a", 1, 1, "deploy_step"),
        act("agent-a", 1, 2, "deploy_done"),
        # agent-a is gone; agent-b takes over at epoch 2
        act("agent-b", 2, 10, "power_off"),
        act("agent-b", 2, 11, "destroy"),
        # drained back to agent-a at epoch 3
        act("agent-a", 3, 20, "power_on"),
        # another node has its own epochs
        act("agent-b", 1, 5, node=OTHER),
        act("agent-c", 7, 6, node=OTHER),
    ]
    assert check_fencing(history) == []
    assert check_fencing([]) == []
    assert check_fencing(reversed(history)) == []  # order of the input does not matter


def test_a_stale_owner_acting_after_a_takeover_is_found() -> None:
    history = [
        act("agent-a", 1, 0, "deploy_start"),
        act("agent-b", 2, 10, "power_off"),  # takeover (agent-a was SIGSTOPped)
        act("agent-a", 1, 12, "deploy_step"),  # agent-a resumes with its old epoch
        act("agent-a", 1, 13, "deploy_done"),
        act("agent-b", 2, 14, "destroy"),
    ]
    (violation,) = check_fencing(history)
    assert violation == (
        f"node {NODE}: stale epoch: agent agent-a acted at epoch 1 "
        f"(2 action(s): deploy_step, deploy_done; {when(12)} .. {when(13)}) "
        f"after agent agent-b took over at epoch 2 (first power_off at {when(10)})"
    )


def test_an_epoch_going_backwards_for_the_same_agent_is_stale_too() -> None:
    history = [
        act("agent-a", 1, 0),
        act("agent-b", 2, 1),
        act("agent-a", 3, 2),
        act("agent-a", 1, 3),
    ]
    (violation,) = check_fencing(history)
    assert "agent agent-a acted at epoch 1" in violation
    assert "after agent agent-a took over at epoch 3" in violation
    assert when(3) in violation


def test_one_epoch_used_by_two_agents_is_found() -> None:
    history = [
        act("agent-a", 4, 0, "deploy_start"),
        act("agent-b", 4, 1, "power_off"),
        act("agent-a", 4, 2, "deploy_done"),
    ]
    (violation,) = check_fencing(history)
    assert violation == (
        f"node {NODE}: epoch 4 used by 2 agents: agent-a (first deploy_start at {when(0)}), "
        f"agent-b (first power_off at {when(1)})"
    )


def test_violations_are_reported_per_node_in_time_order() -> None:
    history = [
        act("agent-a", 1, 0, node=OTHER),
        act("agent-b", 1, 1, node=OTHER),  # shared epoch on OTHER
        act("agent-a", 1, 0),
        act("agent-b", 2, 1),
        act("agent-a", 1, 2),  # stale on NODE
        act("agent-c", 2, 3),  # and epoch 2 shared on NODE
    ]
    violations = check_fencing(history)
    assert len(violations) == 3
    assert violations[0].startswith(f"node {OTHER}: epoch 1 used by 2 agents")
    assert violations[1].startswith(f"node {NODE}: stale epoch: agent agent-a")
    assert violations[2].startswith(f"node {NODE}: epoch 2 used by 2 agents: agent-b")


def test_time_order_not_file_order_decides() -> None:
    # agent-b's line was appended first but its action happened later
    history = [
        Action(NODE, "agent-b", 2, "power_on", None, T0 + 5 * SECOND, line=1),
        Action(NODE, "agent-a", 1, "power_off", None, T0, line=2),
    ]
    assert check_fencing(history) == []
    # equal times: file order breaks the tie
    tie = [
        Action(NODE, "agent-b", 2, "power_on", None, T0, line=1),
        Action(NODE, "agent-a", 1, "power_off", None, T0, line=2),
    ]
    assert len(check_fencing(tie)) == 1


# -- through the simulated driver ---------------------------------------------------------------


def simulated(tmp_path: Path, host: str, log: Path) -> SimulatedDriver:
    path = tmp_path / f"{host}.conf"
    path.write_text(
        f"[simulated_driver]\nstep_duration = 0\nclean_duration = 0\naction_log = {log}\n"
    )
    conf = cfg.ConfigOpts()
    simulated_conf.OPTIONS.register(conf)
    conf(["--config-file", str(path)], project="ringfleet", default_config_files=[])
    return SimulatedDriver(conf, host)


def test_two_agents_sharing_a_log_stale_power_off_is_caught(tmp_path: Path) -> None:
    log = tmp_path / "actions.log"
    a, b = simulated(tmp_path, "agent-a", log), simulated(tmp_path, "agent-b", log)
    node = Node(uuid=NODE, name="n1", resource_class="baremetal")
    instance = str(uuidlib.uuid4())
    a.deploy(ActionContext(NODE, "agent-a", 1, instance), node, lambda _step: None)
    b.destroy(ActionContext(NODE, "agent-b", 2, instance), node)  # takeover, then a clean
    assert check_fencing(read_log(log)) == []
    a.set_power(ActionContext(NODE, "agent-a", 1), node, "power off")  # a stale agent
    (violation,) = check_fencing(read_log(log))
    assert "agent agent-a acted at epoch 1 (1 action(s): power_off" in violation
    assert "after agent agent-b took over at epoch 2 (first destroy at" in violation


# -- read_log ----------------------------------------------------------------------------------


def good_line(**changes: object) -> str:
    record = {
        "node": NODE,
        "agent": "agent-a",
        "epoch": 1,
        "action": "power_on",
        "instance": None,
        "t": T0 / 1e9,
        "ns": T0,
        "pid": 42,
        **changes,
    }
    return json.dumps({k: v for k, v in record.items() if v != "<drop>"})


def test_read_log_round_trips_what_was_appended(tmp_path: Path) -> None:
    path = tmp_path / "actions.log"
    log = ActionLog(path)
    written = [
        log.append(node=NODE, agent="agent-a", epoch=1, action="deploy_start", instance="i-1"),
        log.append(
            node=NODE,
            agent="agent-a",
            epoch=1,
            action="deploy_failed",
            instance="i-1",
            step="rebooting",
            reason="simulated failure",
        ),
    ]
    read = read_log(path)
    assert read == [dataclasses.replace(w, line=n) for n, w in enumerate(written, start=1)]
    assert (read[1].step, read[1].reason) == ("rebooting", "simulated failure")
    (tmp_path / "empty.log").write_bytes(b"")
    assert read_log(tmp_path / "empty.log") == []
    with pytest.raises(FileNotFoundError):
        read_log(tmp_path / "missing.log")


def test_unknown_extra_fields_and_action_names_are_kept_readable(tmp_path: Path) -> None:
    path = tmp_path / "actions.log"
    path.write_text(good_line(action="firmware_update", extra="x") + "\n")
    (action,) = read_log(path)
    assert action.action == "firmware_update"
    assert action.pid == 42
    assert action.t == pytest.approx(T0 / 1e9)


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        (good_line() + "\n" + good_line()[:40], 2, "last line is incomplete"),
        (good_line() + "\n\n" + good_line() + "\n", 2, "not a JSON line"),
        (good_line() + "\n" + good_line()[:40] + good_line() + "\n", 2, "not a JSON line"),
        ("[1, 2]\n", 1, "not a JSON object"),
        (good_line(epoch="<drop>") + "\n", 1, "missing field 'epoch'"),
        (good_line(epoch="3") + "\n", 1, "field 'epoch' must be int"),
        (good_line(epoch=True) + "\n", 1, "field 'epoch' must be int"),
        (good_line(agent="") + "\n", 1, "field 'agent' must not be empty"),
        (good_line(ns=1.5) + "\n", 1, "field 'ns' must be int"),
        (good_line(instance=7) + "\n", 1, "field 'instance' must be str"),
    ],
)
def test_read_log_refuses_torn_or_malformed_lines(
    tmp_path: Path, text: str, line: int, reason: str
) -> None:
    path = tmp_path / "actions.log"
    path.write_text(text)
    with pytest.raises(ActionLogError, match=reason) as caught:
        read_log(path)
    assert (caught.value.path, caught.value.line) == (str(path), line)
