# SPDX-License-Identifier: Apache-2.0
"""Option listing for oslo-config-generator (entry point ``oslo.config.opts``,
namespace ``ringfleet.common``)."""

from __future__ import annotations

from oslo_config import cfg

from conductor.common.conf import coordination, default, metrics, ring, upgrade_levels


def list_opts() -> list[tuple[str | cfg.OptGroup, list[cfg.Opt]]]:
    """The options both services read, by group."""
    return [
        ("DEFAULT", list(default.opts)),
        (coordination.group, list(coordination.opts)),
        (metrics.group, list(metrics.opts)),
        (ring.group, list(ring.opts)),
        (upgrade_levels.group, list(upgrade_levels.opts)),
    ]
