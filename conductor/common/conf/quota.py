# SPDX-License-Identifier: Apache-2.0
"""Options of the ``[quota]`` group: the limits of a project without its own.

A project's own limits (``ringfleet quota set``, ``PUT /v1/quotas/{project}``)
replace these per resource; ``-1`` is unlimited.  Usage is counted, never
stored: instances that are not ``deleted`` (``building``, ``active``,
``error`` and ``deleting`` ones count, as in Nova), and per resource class
the nodes those instances hold or will hold (one per instance of a flavor
of that class).  Builds by the operator (no project) count against nothing.
``key_pairs`` is per user, as Nova's: a user creating a key pair in a project
may have that project's limit of key pairs, all their key pairs counted.
"""

from __future__ import annotations

from oslo_config import cfg

from conductor.common.conf.groups import GroupOptions

group = cfg.OptGroup(
    "quota",
    title="Quota options",
    help="Default per-project limits; -1 is unlimited.",
)

opts = [
    cfg.IntOpt(
        "instances",
        default=-1,
        min=-1,
        help=(
            "Instances a project may have (not deleted) unless it has its own "
            "limit. -1 (the default, so that an upgrade refuses nothing) is "
            "unlimited; Nova's default is 10."
        ),
    ),
    cfg.IntOpt(
        "nodes",
        default=-1,
        min=-1,
        help=(
            "Nodes of any one resource class a project may use (its instances "
            "of flavors of that class, not deleted) unless resource_class_nodes "
            "or the project's own limit says otherwise. -1 is unlimited."
        ),
    ),
    cfg.IntOpt(
        "key_pairs",
        default=100,
        min=-1,
        help=(
            "Key pairs a user may have (counted per user, in every project, as "
            "Nova's key_pairs quota) when creating one in a project without its "
            "own key_pairs limit. -1 is unlimited; 100 is Nova's default."
        ),
    ),
    cfg.DictOpt(
        "resource_class_nodes",
        default={},
        help=(
            "Per resource class, the default limit of nodes of that class a "
            "project may use, e.g. 'baremetal-gold:4,baremetal-large:10' "
            "(overrides 'nodes' for those classes)."
        ),
    ),
]

OPTIONS = GroupOptions(group, opts)
