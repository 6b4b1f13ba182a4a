"""Configuration options of ringfleet, one module per option group.

Nothing here reads configuration at import time: callers build or receive a
``cfg.ConfigOpts`` and call :func:`register_opts` on it before parsing.
"""

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

__all__ = ["register_opts"]


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register every option group of ringfleet's shared configuration."""
    default.register_opts(conf)
    conductor.register_opts(conf)
    coordination.register_opts(conf)
    database.register_opts(conf)
    metrics.register_opts(conf)
    ring.register_opts(conf)
    scheduler.register_opts(conf)
