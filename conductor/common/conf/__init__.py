# SPDX-License-Identifier: Apache-2.0
"""Option groups that both services read, one module per group.

``[DEFAULT] host``, ``[coordination]``, ``[ring]``, ``[metrics]`` and
``[upgrade_levels]``: every
conductor and compute agent registers them (:func:`register_opts`, called by
:func:`conductor.common.prepare.prepare_service`); each service registers its
own groups on top (:mod:`conductor.conf`, :mod:`compute_agent.conf`), so a
process never carries options it does not read.

Nothing here reads configuration at import time: callers build or receive a
``cfg.ConfigOpts`` and call :func:`register_opts` on it before parsing.
"""

from __future__ import annotations

from oslo_config import cfg

from conductor.common.conf import coordination, default, metrics, ring, upgrade_levels

__all__ = ["register_opts"]


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register the option groups both services read."""
    default.register_opts(conf)
    coordination.register_opts(conf)
    metrics.register_opts(conf)
    ring.register_opts(conf)
    upgrade_levels.register_opts(conf)
