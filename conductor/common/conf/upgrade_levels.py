# SPDX-License-Identifier: Apache-2.0
"""Options of the ``[upgrade_levels]`` group: RPC versions pinned during an upgrade.

As in Nova and Ironic: while a rolling upgrade runs, the services of the new
release must not send what the old ones cannot serve.  Pin each API to the
version the oldest running peer speaks; every call then uses the newest form
the pin allows (``can_send_version``), and no peer is probed with a call it
may refuse.  Remove the pin once every peer runs the new release.
"""

from __future__ import annotations

from oslo_config import cfg, types

from conductor.common.conf.groups import GroupOptions

group = cfg.OptGroup(
    "upgrade_levels",
    title="RPC version pins for rolling upgrades",
    help=(
        "Set during a rolling upgrade, to the API version of the oldest release "
        "still running; unset (the newest version) otherwise."
    ),
)

_VERSION = types.String(regex=r"^[1-9][0-9]*\.[0-9]+$", type_name="version")

opts = [
    cfg.Opt(
        "compute",
        type=_VERSION,
        help=(
            "Highest compute agent API version the conductors send (e.g. 1.0 "
            "while agents of a release before build_instances still run). "
            "Unset: the newest this release speaks."
        ),
    ),
    cfg.Opt(
        "conductor",
        type=_VERSION,
        help=(
            "Highest conductor API version the agents send (e.g. 1.1 while "
            "conductors older than report_build_results still run). Unset: "
            "the newest this release speaks."
        ),
    ),
]

OPTIONS = GroupOptions(group, opts)
