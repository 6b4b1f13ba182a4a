"""The compute agent service's own decisions, without running its loops."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from oslo_config import cfg

from compute_agent import conf as agent_conf
from compute_agent.service import AgentService
from conductor.common import rpc
from conductor.common.exception import FieldError, InvalidInput


def _service(tmp_path: Path) -> AgentService:
    path = tmp_path / "agent.conf"
    path.write_text("[DEFAULT]\nhost = agent-7\n")
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    agent_conf.register_opts(conf)
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
