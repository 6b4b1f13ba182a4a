# SPDX-License-Identifier: Apache-2.0
"""Options of the ``[scheduler]`` group: filters, weighers and the node index.

The filters that the in-memory index is organized by (Placement's half of
Nova's scheduling: resource class, availability and traits; then group, live
owner, and the reschedule exclusion) are always applied and are not listed
here; ``enabled_filters`` and ``weighers`` choose the rest,
including operators' own plugins (see :mod:`conductor.scheduler.plugins`).
"""

from __future__ import annotations

from oslo_config import cfg

from conductor.common.conf.groups import GroupOptions

group = cfg.OptGroup(
    "scheduler",
    title="Scheduler options",
    help="How a conductor picks the node a build lands on.",
)

DEFAULT_FILTERS = ["CapabilitiesFilter"]
#: nova.conf's group of these options: ``[filter_scheduler] enabled_filters``
#: and ``weight_classes`` are read as ``enabled_filters`` and ``weighers``
#: (any other option of that group stops a conductor at start, see
#: :func:`conductor.scheduler.plugins.check_nova_options`)
NOVA_GROUP = "filter_scheduler"
DEFAULT_WEIGHERS = ["FailedBuildsWeigher", "SpreadWeigher"]

opts = [
    cfg.ListOpt(
        "enabled_filters",
        default=list(DEFAULT_FILTERS),
        # nova.conf's name: a pasted [filter_scheduler] section is read.
        deprecated_opts=[cfg.DeprecatedOpt("enabled_filters", group=NOVA_GROUP)],
        help=(
            "Filters applied, in this order, after the ones that are always "
            "applied first: Placement's half of Nova's scheduling "
            "(ResourceClassFilter: the flavor's resources:CUSTOM_<X>=1 or its "
            "resource class, names normalized as Nova does; "
            "AvailabilityFilter: nodes Placement would offer; TraitsFilter: "
            "the flavor's required and forbidden traits), GroupFilter, "
            "LiveOwnerFilter and RetryFilter. Listing TraitsFilter changes "
            "nothing. Names are "
            "entry points in the 'ringfleet.scheduler.filters' namespace: "
            "CapabilitiesFilter "
            "(the flavor's 'capabilities:<key>' extra specs, with Nova's "
            "ComputeCapabilitiesFilter operators), or an operator's own "
            "subclass of conductor.scheduler.filters.BaseFilter. With the "
            "ringfleet[nova-filters] extra, Nova's filters run unchanged: a "
            "name no entry point registers that is one of Nova's in-tree "
            "filter classes, as nova.conf writes it (ComputeFilter), "
            "nova.scheduler.filters.all_filters (all of them), or a name "
            "with a dot: the import path of a subclass of "
            "nova.scheduler.filters.BaseHostFilter (Nova's or an "
            "operator's). ringfleet's names win over Nova's (a clash is "
            "logged at start). Removing "
            "CapabilitiesFilter makes the scheduler ignore the flavors' "
            "capabilities."
        ),
    ),
    cfg.ListOpt(
        "per_node_filters",
        default=[],
        help=(
            "Nova filters among enabled_filters (as named there) that read "
            "per-node state (the host state's host, nodename, uuid or "
            "hypervisor_hostname): they are called for each node the "
            "scheduler is about to choose. Every other Nova filter is called "
            "once per node profile (resource class, group, traits, "
            "capabilities and the cpu_arch and capabilities properties) and "
            "flavor and scheduler hints, its verdict cached, and sees those "
            "per-node attributes as None. A filter class may instead set "
            "ringfleet_per_node = True."
        ),
    ),
    cfg.ListOpt(
        "weighers",
        default=list(DEFAULT_WEIGHERS),
        deprecated_opts=[cfg.DeprecatedOpt("weight_classes", group=NOVA_GROUP)],
        help=(
            "Weighers ranking the nodes that passed every filter; the node "
            "with the highest sum of normalized weights times multipliers "
            "wins, ties broken at random. Names are entry points in the "
            "'ringfleet.scheduler.weighers' namespace: FailedBuildsWeigher "
            "(prefer nodes with fewer builds failed since their last success, "
            "as Nova's BuildFailureWeigher; multiplier 1000000.0), "
            "SpreadWeigher (prefer "
            "the agent hosting the fewest instances), or an operator's own "
            "subclass of conductor.scheduler.weighers.BaseWeigher. With the "
            "ringfleet[nova-filters] extra, Nova's weighers: a class name as "
            "nova.conf writes it (RAMWeigher), "
            "nova.scheduler.weights.all_weighers (all of them), or the import "
            "path of a subclass of nova.scheduler.weights.BaseHostWeigher "
            "(its multiplier: weigher_multipliers, else the default of its "
            "nova.conf option; nova.conf is not read); an operator's weighs every "
            "candidate node, so decisions cost more on large fleets. An empty "
            "list picks at random among the nodes that passed."
        ),
    ),
    cfg.DictOpt(
        "weigher_multipliers",
        default={},
        help=(
            "Multiplier of each weigher's normalized weight, as "
            "'Name:multiplier' pairs (e.g. 'SpreadWeigher:2.0'). Weighers not "
            "listed use their own default (1.0 for SpreadWeigher, 1000000.0 "
            "for FailedBuildsWeigher); a negative "
            "multiplier inverts a weigher's preference."
        ),
    ),
    cfg.FloatOpt(
        "index_refresh_interval",
        default=1.0,
        min=0.0,
        help=(
            "Seconds between two incremental refreshes of the in-memory node "
            "index, each reading only the nodes changed since the previous one. "
            "The conductor refreshes it in the background at this pace (at "
            "least every 0.5 s), and a decision that finds it older refreshes "
            "it first; 0 refreshes before every decision. A stale index never causes a "
            "double allocation (the allocation is a compare-and-swap), only "
            "retries or a missed free node until the next refresh."
        ),
    ),
    cfg.FloatOpt(
        "index_refresh_overlap",
        default=2.0,
        min=0.0,
        help=(
            "Seconds each incremental refresh re-reads before the start of the "
            "previous one. Must exceed the clock skew between conductors plus "
            "the longest short write transaction on the nodes table, since a "
            "row's change time is taken when its transaction starts, not when "
            "it commits. Long writes (an import, a share's claims) are recorded "
            "while they run, and refreshes start before them whatever they take."
        ),
    ),
    cfg.FloatOpt(
        "index_resync_interval",
        default=600.0,
        min=0.0,
        help=(
            "Seconds between two full rebuilds of the node index, which catch "
            "what incremental refreshes cannot see (deleted nodes, changes "
            "older than the overlap). 0 disables them."
        ),
    ),
]

OPTIONS = GroupOptions(group, opts)
