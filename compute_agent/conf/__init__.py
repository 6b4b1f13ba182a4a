"""Configuration options of the compute agent, one module per option group.

:func:`register_opts` registers the agent's groups on top of the shared ones
(``[DEFAULT]``, ``[coordination]``, ``[ring]``, ... from :mod:`conductor.conf`).
"""

from __future__ import annotations

from oslo_config import cfg

from compute_agent.conf import agent, simulated

__all__ = ["register_opts"]


def register_opts(conf: cfg.ConfigOpts) -> None:
    agent.register_opts(conf)
    simulated.register_opts(conf)
