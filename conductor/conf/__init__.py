# SPDX-License-Identifier: Apache-2.0
"""Configuration options of the conductor, one module per option group.

:func:`register_opts` registers everything a conductor (and the operator
CLI) reads: the shared groups of :mod:`conductor.common.conf` and the
conductor's own ``[conductor]``, ``[database]``, ``[scheduler]`` and
``[quota]``, which a
compute agent never registers, and ``[ironic]`` for the inventory sync.

Nothing here reads configuration at import time: callers build or receive a
``cfg.ConfigOpts`` and call :func:`register_opts` on it before parsing.
"""

from __future__ import annotations

from oslo_config import cfg

from conductor.common import conf as common_conf
from conductor.common.ironic import conf as ironic_conf
from conductor.conf import conductor, database, quota, scheduler

__all__ = ["register_opts"]


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register every option group a conductor reads."""
    common_conf.register_opts(conf)
    conductor.register_opts(conf)
    database.register_opts(conf)
    scheduler.register_opts(conf)
    quota.register_opts(conf)
    # The inventory sync reads [ironic] (agents register it only with the
    # ironic driver).
    ironic_conf.register_opts(conf)
