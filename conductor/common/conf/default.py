# SPDX-License-Identifier: Apache-2.0
"""Options of the ``[DEFAULT]`` group shared by every ringfleet service."""

from __future__ import annotations

import socket

from oslo_config import cfg, types
from oslo_utils import netutils

from conductor.common.conf.groups import GroupOptions

__all__ = ["OPTIONS", "HostName", "my_ip", "opts"]


class HostName(types.HostDomain):
    """A DNS host name (or IP address), normalised to lower case.

    Host names are DNS names, which are case-insensitive: ``Agent-1`` and
    ``agent-1`` are one host.  Lower-casing at the one place a host name
    enters (this option, and ``check_host`` for RPC arguments) keeps them
    one ring member, one RPC server and one owner in the database.
    """

    def __init__(self) -> None:
        super().__init__(type_name="host name")

    def __call__(self, value: object) -> str:
        return str(super().__call__(value)).lower()


opts = [
    cfg.Opt(
        "host",
        type=HostName(),
        default=socket.gethostname(),
        sample_default="localhost",
        help=(
            "Name of this service in the fleet: the agent's member id in the "
            "coordination group and the RPC server name. It must be unique per "
            "agent and stable across restarts, since nodes pinned to an agent "
            "are found again by this name after a restart. A DNS host name (or "
            "an IP address); host names are case-insensitive, so it is "
            "lower-cased (Agent-1 and agent-1 are the same host)."
        ),
    ),
    cfg.IPOpt(
        "my_ip",
        sample_default="<host_ipv4>",
        help=(
            "IP address of this host, as Nova's [DEFAULT] my_ip (default: "
            "the address of the interface this host would reach the Internet "
            "through, as Nova computes it; 127.0.0.1 without one). An agent "
            "announces it with its membership, and Nova filters see it as "
            "host_state.host_ip of the nodes it owns "
            "(SimpleCIDRAffinityFilter's build_near_host_ip hint)."
        ),
    ),
]

OPTIONS = GroupOptions(None, opts)


def my_ip(conf: cfg.ConfigOpts) -> str:
    """``[DEFAULT] my_ip``, or this host's address as Nova's default computes it."""
    configured: str | None = conf.my_ip
    if configured:
        return configured
    return netutils.get_my_ipv4()
