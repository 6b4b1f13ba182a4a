# SPDX-License-Identifier: Apache-2.0
"""Options of the ``[ironic]`` group: how ringfleet reaches OpenStack Ironic.

Read by the compute agents that use the ``ironic`` driver (they act on the
nodes) and by the conductors (they import Ironic's inventory).  Neither
registers the group unless it uses Ironic: an agent of the simulated driver
carries no Ironic options.

Authentication and the endpoint are keystoneauth's own options, so an
operator configures them as for any OpenStack service: ``auth_type = none``
with ``endpoint_override`` for a standalone Ironic, ``password`` or
``v3applicationcredential`` with ``auth_url`` for one behind Keystone.
"""

from __future__ import annotations

from typing import Final

from oslo_config import cfg

from conductor.common.conf.groups import GroupOptions

__all__ = ["API_VERSION", "OPTIONS", "REQUEST_TIMEOUT", "group", "opts"]

group = cfg.OptGroup(
    "ironic",
    title="OpenStack Ironic options",
    help=(
        "The Ironic service ringfleet drives bare metal through (compute "
        "driver 'ironic') and imports nodes from (the conductors' inventory "
        "sync). Authentication, endpoint and TLS are keystoneauth's options."
    ),
)

#: The Ironic API microversion every request is pinned to: 1.82 brings node
#: shards (listing ``?shard=``), the newest feature ringfleet reads; pinning
#: it keeps the fields and states ringfleet parses the same whatever the
#: server's newest version is.
API_VERSION: Final = "1.82"

#: The default of a request's ``timeout`` (keystoneauth's session option), in
#: seconds: the slowest request ringfleet makes, a page of 1,000 nodes, takes
#: about 0.3 s (docs/benchmarks.rst), and a hung Ironic must become an outage
#: said within seconds, not a read that blocks the agent's actions and its
#: stop for as long as Ironic hangs.
REQUEST_TIMEOUT: Final = 10.0

opts = [
    cfg.FloatOpt(
        "poll_interval",
        default=0.1,
        min=0.01,
        max=60.0,
        help=(
            "Seconds between the first two reads of a node whose provision or "
            "power state ringfleet is following; the interval then doubles up "
            "to 'poll_max_interval'. Short, so that a transition that takes "
            "100 ms is seen in about that time (openstacksdk's own waits poll "
            "every 2 s)."
        ),
    ),
    cfg.FloatOpt(
        "poll_max_interval",
        default=2.0,
        min=0.05,
        max=300.0,
        help="Longest interval between two reads of a node being followed, in seconds.",
    ),
    cfg.IntOpt(
        "deploy_timeout",
        default=3600,
        min=1,
        help=(
            "Seconds a deploy may stay in a transitional state (deploying, "
            "wait call-back) before the agent gives up on it: the build fails "
            "and the node is torn down. A last resort against a hung Ironic "
            "conductor, never the normal path: keep it above the slowest "
            "real deploy."
        ),
    ),
    cfg.IntOpt(
        "teardown_timeout",
        default=3600,
        min=1,
        help=(
            "Seconds a tear-down (deleting, cleaning) may take before the "
            "agent reports it failed. Cleaning real disks takes long: keep it "
            "above the slowest cleaning."
        ),
    ),
    cfg.IntOpt(
        "sync_interval",
        default=0,
        min=0,
        help=(
            "Seconds between two imports of Ironic's inventory by each "
            "conductor (new nodes created, maintenance and provision states "
            "mirrored, nodes removed from Ironic retired, Ironic's state and "
            "claim of every node recorded for 'fleet check', orphan claims of "
            "ringfleet instances handed to their nodes' owners to tear "
            "down). 0 disables the "
            "periodic import; 'ringfleet node sync' runs one at any time."
        ),
    ),
    cfg.ListOpt(
        "shards",
        default=[],
        help=(
            "Import only the Ironic nodes of these shards (empty: every node). "
            "For an Ironic shared with other consumers, or one fleet per shard."
        ),
    ),
    cfg.StrOpt(
        "node_group_from",
        default="shard",
        choices=[
            ("shard", "the node's Ironic shard"),
            ("conductor_group", "the node's Ironic conductor group"),
            ("none", "no group: every node in the default group"),
        ],
        help=(
            "Which Ironic field becomes the ringfleet node group of an "
            "imported node. Node groups partition scheduling and ownership; "
            "an empty shard or conductor group maps to the default group."
        ),
    ),
]

#: ringfleet's options and keystoneauth's, finding Ironic as ``baremetal``.
OPTIONS = GroupOptions(group, opts, service_type="baremetal", request_timeout=REQUEST_TIMEOUT)
