"""Option listing for oslo-config-generator (entry point ``oslo.config.opts``)."""

from __future__ import annotations

from oslo_config import cfg

from conductor.conf import (
    conductor,
    coordination,
    database,
    default,
    metrics,
    ring,
    scheduler,
)


def list_opts() -> list[tuple[str | cfg.OptGroup, list[cfg.Opt]]]:
    """Every option of ringfleet's shared configuration, by group."""
    return [
        ("DEFAULT", list(default.opts)),
        (conductor.group, list(conductor.opts)),
        (coordination.group, list(coordination.opts)),
        (database.group, list(database.opts)),
        (metrics.group, list(metrics.opts)),
        (ring.group, list(ring.opts)),
        (scheduler.group, list(scheduler.opts)),
    ]
