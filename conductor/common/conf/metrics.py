# SPDX-License-Identifier: Apache-2.0
"""Options of the ``[metrics]`` group: the Prometheus endpoint of each service.

Shared by the conductor and the compute agent; each service has its own
default port (see :data:`CONDUCTOR_PORT` and :data:`AGENT_PORT`).
"""

from __future__ import annotations

from oslo_config import cfg

from conductor.common.conf.groups import GroupOptions

group = cfg.OptGroup(
    "metrics",
    title="Metrics options",
    help=(
        "Prometheus metrics served over HTTP by every conductor and compute "
        "agent (text exposition format at /metrics); docs/metrics.rst lists "
        "every metric."
    ),
)

#: Default port of a conductor's metrics endpoint.
CONDUCTOR_PORT = 9468
#: Default port of a compute agent's metrics endpoint.
AGENT_PORT = 9469

opts = [
    cfg.BoolOpt(
        "enabled",
        default=False,
        help=(
            "Serve Prometheus metrics. The endpoint is plain HTTP without "
            "authentication; it exposes counts and latencies only (labels are "
            "host, group, method, outcome: never node or instance ids), but "
            "anyone who can reach it can read them, so bind it to a management "
            "network. Off by default because every service on a host needs a "
            "port of its own (see 'port')."
        ),
    ),
    cfg.StrOpt(
        "listen_address",
        default="0.0.0.0",  # noqa: S104 - a scrape target must be reachable
        help=(
            "Address the metrics endpoint listens on. 0.0.0.0 (or :: for IPv6) "
            "lets a Prometheus server on another host scrape it; a management "
            "address keeps it off the other networks; 127.0.0.1 is for a local "
            "scraper or agent only."
        ),
    ),
    cfg.PortOpt(
        "port",
        sample_default=f"{CONDUCTOR_PORT} (conductor), {AGENT_PORT} (compute agent)",
        help=(
            "TCP port of the metrics endpoint. Unset: "
            f"{CONDUCTOR_PORT} for a conductor, {AGENT_PORT} for a compute agent. "
            "Several services on one host each need their own: with the "
            "ringfleet-compute-agent@NAME systemd instances, set [metrics] port "
            "in each /etc/ringfleet/agent-NAME.conf (e.g. 9470, 9471, ...), not "
            "in the shared ringfleet.conf. 0 picks a free port and logs it "
            "(tests; useless to a scraper with a static target list). A port in "
            "use stops the service at start with an error naming this option."
        ),
    ),
]

OPTIONS = GroupOptions(group, opts)
