# SPDX-License-Identifier: Apache-2.0
"""Configuration options of the compute agent, one module per option group.

:func:`register_opts` registers everything an agent reads: the shared groups
of :mod:`conductor.common.conf` (``[DEFAULT]``, ``[coordination]``,
``[ring]``, ``[metrics]``), the agent's own, and the simulator's
(``[simulated_driver]``, kept with the simulator in
:mod:`compute_agent.drivers.simulated.conf`), and ``[placement]`` (the
reporter, off unless configured).  The conductor's groups
(``[conductor]``, ``[database]``, ``[scheduler]``) are never registered here.
"""

from __future__ import annotations

from oslo_config import cfg

from compute_agent.conf import agent
from compute_agent.drivers.simulated import conf as simulated_conf
from conductor.common import conf as common_conf
from conductor.common.placement import conf as placement_conf

__all__ = ["register_opts"]


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register every option group a compute agent reads."""
    common_conf.register_opts(conf)
    agent.register_opts(conf)
    simulated_conf.register_opts(conf)
    placement_conf.register_opts(conf)
