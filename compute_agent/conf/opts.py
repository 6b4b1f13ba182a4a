# SPDX-License-Identifier: Apache-2.0
"""Option listing for oslo-config-generator (entry point ``oslo.config.opts``)."""

from __future__ import annotations

from oslo_config import cfg

from compute_agent.conf import agent
from compute_agent.drivers.simulated import conf as simulated_conf
from conductor.common.placement import conf as placement_conf


def list_opts() -> list[tuple[str | cfg.OptGroup, list[cfg.Opt]]]:
    """The compute agent's own option groups."""
    return [
        (agent.group, list(agent.opts)),
        (simulated_conf.group, list(simulated_conf.opts)),
        # Read by the agents (the reporter) and 'ringfleet placement check'.
        (placement_conf.group, placement_conf.list_opts()),
    ]
