"""Options of the ``[DEFAULT]`` group shared by every ringfleet service."""

from __future__ import annotations

import socket

from oslo_config import cfg

opts = [
    cfg.StrOpt(
        "host",
        default=socket.gethostname(),
        sample_default="localhost",
        help=(
            "Name of this service in the fleet: the agent's member id in the "
            "coordination group and the RPC server name. It must be unique per "
            "agent and stable across restarts, since nodes pinned to an agent "
            "are found again by this name after a restart."
        ),
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(opts)
