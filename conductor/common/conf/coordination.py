# SPDX-License-Identifier: Apache-2.0
"""Options of the ``[coordination]`` group: the membership backend."""

from __future__ import annotations

from oslo_config import cfg

from conductor.common.conf.groups import GroupOptions

group = cfg.OptGroup(
    "coordination",
    title="Coordination options",
    help="The tooz group that agents join and conductors watch.",
)

opts = [
    cfg.StrOpt(
        "backend_url",
        secret=True,
        help=(
            "tooz backend URL. Production: etcd 3, e.g. "
            "'etcd3+http://127.0.0.1:2379?membership_timeout=10'. The "
            "membership_timeout (seconds, default 30) is the lease TTL: a dead "
            "agent's nodes are taken over about that long after it died, and a "
            "live agent stops acting after half of it without reaching etcd. "
            "Lower means faster takeover but more false suspensions on a busy "
            "etcd; etcd grants no lease under about 2 s; TTL/2 should exceed an "
            "etcd leader election. The URL names exactly one etcd endpoint "
            "(tooz talks to one): for an etcd cluster, run 'etcd gateway start "
            "--endpoints=A,B,C --listen-addr=127.0.0.1:23790' on each host and "
            "use 'etcd3+http://127.0.0.1:23790?membership_timeout=10'. A URL "
            "listing several endpoints is refused at start. Redis instead "
            "(the redis extra): 'redis://host:6379?membership_timeout=10', or "
            "through Sentinel 'redis://s1:26379?sentinel=NAME&sentinel_fallback="
            "s2:26379&membership_timeout=10' (docs/operations.rst, 'Redis "
            "instead of etcd'). The embedded mode "
            "uses 'file:///some/dir?timeout=5' (one machine only)."
        ),
    ),
    cfg.StrOpt(
        "group",
        default="ringfleet-compute",
        help="Name of the tooz group the compute agents join.",
    ),
    cfg.StrOpt(
        "conductor_group",
        help=(
            "Name of the tooz group the conductors join: when one leaves or "
            "its lease expires, its peers carry on the builds, deletes, "
            "instance actions and node power requests it was carrying. "
            "Unset: the agents' group name followed by '-conductors' "
            "('ringfleet-compute-conductors' by default), so that two "
            "fleets sharing one etcd with their own agents' groups have "
            "their own conductors' groups too."
        ),
    ),
    cfg.FloatOpt(
        "watch_interval",
        default=1.0,
        min=0.05,
        max=1.0,
        help=(
            "Seconds between two reads of the group. Joins and leaves are "
            "noticed within this delay (plus the TTL for a crash)."
        ),
    ),
]

OPTIONS = GroupOptions(group, opts)
