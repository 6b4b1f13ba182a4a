# SPDX-License-Identifier: Apache-2.0
"""Option listing for oslo-config-generator (entry point ``oslo.config.opts``,
namespace ``ringfleet.conductor``)."""

from __future__ import annotations

from oslo_config import cfg

from conductor.common.ironic import conf as ironic_conf
from conductor.conf import conductor, database, quota, scheduler


def list_opts() -> list[tuple[str | cfg.OptGroup, list[cfg.Opt]]]:
    """The conductor's own option groups (the shared ones: ``ringfleet.common``)."""
    return [
        (conductor.group, list(conductor.opts)),
        (database.group, list(database.opts)),
        (scheduler.group, list(scheduler.opts)),
        (quota.group, list(quota.opts)),
        # Shared with the agents of the ironic driver, listed once, here.
        (ironic_conf.group, ironic_conf.list_opts()),
    ]
