# SPDX-License-Identifier: Apache-2.0
"""Options of the ``[placement]`` group: reporting nodes to OpenStack Placement.

Off by default: a cloud without Nova has no Placement to keep.  Setting
``auth_type`` turns the reporter on in every agent (each writes the nodes it
owns) and lets ``ringfleet placement check`` compare.  Authentication and
the endpoint are keystoneauth's own options, as for ``[ironic]``:
``auth_type = none`` with ``endpoint_override`` for a standalone Placement,
``password`` or ``v3applicationcredential`` with ``auth_url`` behind Keystone.
"""

from __future__ import annotations

from typing import Final

from oslo_config import cfg

from conductor.common.conf.groups import GroupOptions

__all__ = [
    "API_VERSION",
    "DEFAULT_AGGREGATE",
    "OPTIONS",
    "REQUEST_TIMEOUT",
    "enabled",
    "group",
    "opts",
]

group = cfg.OptGroup(
    "placement",
    title="OpenStack Placement options",
    help=(
        "The Placement service ringfleet reports its nodes to, as resource "
        "providers, for clouds whose Nova schedules virtual machines with the "
        "same Placement. Off unless auth_type is set. Authentication, endpoint "
        "and TLS are keystoneauth's options."
    ),
)

#: The Placement microversion every request is pinned to: 1.39 is the newest
#: of openstack-placement 16 (2026.2); ringfleet needs 1.38 (``consumer_type``
#: on allocations), 1.28 (consumer generations) and 1.19 (aggregates with the
#: provider generation).
API_VERSION: Final = "1.39"

#: ``[placement] aggregate`` unless set: the same in every ringfleet.
DEFAULT_AGGREGATE: Final = "b2f5f1d6-3a0e-5c2b-9d64-7a1f1c4e2a10"

opts = [
    cfg.IntOpt(
        "resync_interval",
        default=600,
        min=0,
        mutable=True,
        help=(
            "Seconds between two full comparisons of every node an agent owns "
            "with what Placement shows (drift repair): each provider is read "
            "again and any difference written back. Between them an agent "
            "writes only what changed in ringfleet's records, at every "
            "reconcile. 0 disables the periodic comparison (a takeover still "
            "re-reads the providers it gains)."
        ),
    ),
    cfg.IntOpt(
        "concurrency",
        default=4,
        min=1,
        max=64,
        help=(
            "Requests one agent (or 'ringfleet placement check') has in flight "
            "to Placement at once. Placement has no call that creates or "
            "updates many providers: a first report of N nodes takes about "
            "2N requests, spread over this many connections."
        ),
    ),
    cfg.StrOpt(
        "aggregate",
        default=DEFAULT_AGGREGATE,
        help=(
            "The uuid of the Placement aggregate every ringfleet node's "
            "provider is a member of: how 'ringfleet placement check' finds "
            "providers of nodes ringfleet no longer has, and how an operator "
            "tells ringfleet's providers from Nova's. One per fleet sharing a "
            "Placement."
        ),
    ),
    cfg.StrOpt(
        "default_project_id",
        default="ringfleet",
        help=(
            "The project (and user) an allocation is recorded for when the "
            "instance has none: built by an operator before projects existed, "
            "or through the RPC API without a caller. Placement requires both."
        ),
    ),
]

#: The default of a request's ``timeout``, in seconds, as for Ironic: a hung
#: Placement is an outage said at once, not a report that blocks for as long
#: as Placement hangs (keystoneauth has no timeout of its own).
REQUEST_TIMEOUT: Final = 10.0

#: ringfleet's options and keystoneauth's, finding Placement as ``placement``.
OPTIONS = GroupOptions(group, opts, service_type="placement", request_timeout=REQUEST_TIMEOUT)


def enabled(conf: cfg.ConfigOpts) -> bool:
    """Whether the reporter is configured (``[placement] auth_type`` set)."""
    OPTIONS.register(conf)
    return bool(conf.placement.auth_type)
