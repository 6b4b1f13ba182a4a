# SPDX-License-Identifier: Apache-2.0
"""Options of the ``[ring]`` group: the consistent hash ring."""

from __future__ import annotations

from oslo_config import cfg

from conductor.common.conf.groups import GroupOptions
from hashring.ring import MAX_WEIGHT

group = cfg.OptGroup(
    "ring",
    title="Hash ring options",
    help="How nodes are split between the compute agents.",
)

opts = [
    cfg.IntOpt(
        "version",
        default=1,
        min=1,
        help=(
            "Ring version. Every agent and conductor must use the same one: a "
            "peer announcing another version is excluded from the ring and "
            "logged as an error. Changing it remaps nearly every unpinned node, "
            "so change it on the whole fleet at once, deliberately."
        ),
    ),
    cfg.FloatOpt(
        "weight",
        default=1.0,
        min=0.001,
        max=MAX_WEIGHT,
        help=(
            "This agent's share of the nodes relative to the others (1.0 is "
            "standard; 2.0 takes twice as many). Changing it moves nodes only "
            "to or from this agent."
        ),
    ),
]

OPTIONS = GroupOptions(group, opts)
