"""Building the CLI's conductor client from the operator's configuration."""

from __future__ import annotations

import os
from collections.abc import Sequence

import oslo_messaging as messaging
from oslo_config import cfg

from conductor import conf as conductor_conf
from conductor.common import rpc
from conductor.rpcapi import ConductorAPI

__all__ = ["DEFAULT_CONFIG_FILE", "build_client"]

DEFAULT_CONFIG_FILE = "/etc/ringfleet/ringfleet.conf"


def build_client(
    config_files: Sequence[str], timeout: float
) -> tuple[messaging.Transport, ConductorAPI]:
    """Parse the config files and return (transport, client) for the conductors."""
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    conductor_conf.register_opts(conf)
    files = list(config_files)
    if not files and os.path.exists(DEFAULT_CONFIG_FILE):
        files = [DEFAULT_CONFIG_FILE]
    # No argv: the CLI's own parser already consumed the command line.
    conf([], project="ringfleet", default_config_files=files)
    transport = rpc.get_transport(conf)
    return transport, ConductorAPI(transport, timeout=timeout)
