# SPDX-License-Identifier: Apache-2.0
"""The compute agent service's own decisions, without running its loops."""

from __future__ import annotations

import logging
from pathlib import Path

import oslo_messaging as messaging
import pytest
from oslo_config import cfg

from compute_agent.service import AgentService
from compute_agent.state_reports import StateReports, StateSender
from conductor.common import broker_outage, rpc
from conductor.common import conf as common_conf
from conductor.common.exception import FieldError, InvalidInput


def _service(tmp_path: Path) -> AgentService:
    path = tmp_path / "agent.conf"
    path.write_text("[DEFAULT]\nhost = agent-7\n")
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    common_conf.register_opts(conf, common_conf.COMPUTE_AGENT)
    conf(["--config-file", str(path)], project="ringfleet", default_config_files=[])
    return AgentService(conf)


def test_a_conductor_not_seeing_a_new_agent_yet_is_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A restarted agent's first claims can reach a conductor before it read the group
    again: a harmless race, retried at once, not a WARNING that reads like a bug."""
    service = _service(tmp_path)
    caplog.set_level(logging.DEBUG, logger="compute_agent.service")
    # As received over RPC: rebuilt from its primitives.
    race = InvalidInput(**InvalidInput.not_live_member("agent-7").kwargs)
    service._reconcile_failed(race)
    service._reconcile_failed(race)
    service._reconcile_failed(None)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.INFO,
            "Agent agent-7: reconcile failed: the conductor does not see this agent in the "
            "group yet; retrying",
        ),
        (
            logging.DEBUG,
            "Agent agent-7: reconcile failed again: the conductor does not see this agent in "
            "the group yet",
        ),
        (logging.INFO, "Agent agent-7: reconcile works again"),
    ]
    caplog.clear()
    # Any other refusal is ours to look into.
    service._reconcile_failed(InvalidInput([FieldError("node_uuids[0]", "must be a UUID")]))
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.WARNING,
            "Agent agent-7: reconcile failed: invalid input: node_uuids[0]: must be a UUID; "
            "retrying",
        )
    ]


def test_calls_timing_out_are_one_reason_said_as_info_during_a_broker_outage_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each timeout names its message id: said once, not once per call; and
    at INFO while this process said its broker outage (that WARNING is the
    cause, and the one line the operator needs)."""
    service = _service(tmp_path)
    caplog.set_level(logging.DEBUG, logger="compute_agent.service")
    for message_id in ("e01", "f02"):
        service._reconcile_failed(
            messaging.MessagingTimeout(f"Timed out waiting for a reply to message ID {message_id}")
        )
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert said == [
        (
            logging.WARNING,
            "Agent agent-7: reconcile failed: no reply from a conductor within 30 s; retrying",
        ),
        (
            logging.DEBUG,
            "Agent agent-7: reconcile failed again: no reply from a conductor within 30 s",
        ),
    ]
    service._reconcile_failed(None)
    caplog.clear()
    monkeypatch.setattr(broker_outage, "known_down", lambda: True)
    service._reconcile_failed(messaging.MessagingTimeout("Timed out ... message ID a03"))
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    # A topic nobody serves is not a broker outage's: said as it is.
    caplog.clear()
    service._reconcile_failed(rpc.NoConsumer("ringfleet-conductor"))
    assert [r.levelno for r in caplog.records] == [logging.WARNING]


class _Conductor:
    """report_node_states fails while ``down``, as over RPC: with the remote traceback."""

    def __init__(self) -> None:
        self.down = True
        self.taken: list[list[dict[str, object]]] = []

    def report_node_states(self, host: str, states: list[dict[str, object]]) -> dict[str, object]:
        if self.down:
            raise RuntimeError(
                "service unavailable: the database is unreachable\n"
                "Traceback (most recent call last):\n  File conductor/db/engine.py ..."
            )
        self.taken.append(states)
        return {"accepted": len(states), "stale": []}


def test_a_state_report_outage_is_one_warning_without_the_remote_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    conductor = _Conductor()
    sender = StateSender(conductor, "agent-7", 30.0)  # type: ignore[arg-type]
    reports = StateReports(full_interval=60.0)
    state = {"node_uuid": "n1", "epoch": 1, "power_state": "power on", "provision_state": None}
    caplog.set_level(logging.DEBUG, logger="compute_agent.state_reports")
    for _ in range(5):  # the database is down for five report intervals
        sender.send(reports, reports.due([state], 0.0))
    conductor.down = False
    sender.send(reports, reports.due([state], 0.0))
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert said[0] == (
        logging.WARNING,
        "Agent agent-7: state report failed: service unavailable: the database is "
        "unreachable; retrying every 30 s",
    )
    assert [level for level, _ in said[1:5]] == [logging.DEBUG] * 4
    assert said[5][0] == logging.INFO and "state reports taken again after" in said[5][1]
    assert len(said) == 6 and not any("Traceback" in m for _, m in said)
    assert conductor.taken == [[state]]  # due until taken


def test_a_state_report_failing_during_a_broker_outage_said_is_info(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(broker_outage, "known_down", lambda: True)
    sender = StateSender(_Conductor(), "agent-7", 30.0)  # type: ignore[arg-type]
    reports = StateReports(full_interval=60.0)
    state = {"node_uuid": "n1", "epoch": 1, "power_state": "power on", "provision_state": None}
    caplog.set_level(logging.DEBUG, logger="compute_agent.state_reports")
    sender.send(reports, reports.due([state], 0.0))
    assert [r.levelno for r in caplog.records] == [logging.INFO]
