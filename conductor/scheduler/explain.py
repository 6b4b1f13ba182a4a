# SPDX-License-Identifier: Apache-2.0
"""Why no node fits a request: how many nodes each filter removed.

A "no valid node" answer is a decision too, and must not cost a build's
worth of work per node: it is counted per profile and owner, from the
index's structure and the verdicts the failed decision just cached, and no
filter is called again (only per-owner and per-node filters, rare, are
called, per owner or on the nodes one by one).

Two steps, so that the scheduler holds its lock only for the first:

* :func:`survey`, under the index's lock: the counts the index keeps
  (nodes of the resource class, of the group, free), and per profile of the
  free nodes its sample, its cached verdict for the request (which
  per-profile filter refused it first) and, per owner, the set's size, a
  node of it, how many of its nodes the request excludes, and (only when a
  per-node filter is configured) its nodes -- copies, O(profiles x owners);
* :func:`account`, without the lock: each node counted against the first
  filter of the chain that refuses it, and how many of the nodes lacking
  only a live owner would fit with one.  A profile without a cached verdict
  (one that appeared after the decision) has its per-profile filters called
  here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

from conductor.common.exception import NoValidNode
from conductor.common.objects import Node
from conductor.scheduler.filters import ALWAYS_APPLIED, BaseFilter
from conductor.scheduler.index import PASSES, NodeIndex
from conductor.scheduler.request import RequestSpec

__all__ = ["OwnerSet", "ProfileSurvey", "Survey", "account", "survey"]

#: positions in the chain of the always-applied filters, in ALWAYS_APPLIED's
#: order (ResourceClassFilter, GroupFilter, AvailabilityFilter, TraitsFilter,
#: LiveOwnerFilter, RetryFilter: tests/unit/test_scheduler_filters.py holds it)
_CLASS, _GROUP, _AVAILABILITY, _TRAITS, _LIVE_OWNER, _RETRY = range(len(ALWAYS_APPLIED))


class OwnerSet(NamedTuple):
    """One owner's free nodes of one profile, as surveyed (a tuple: one per
    profile and owner is made under the scheduler's lock)."""

    owner: str | None
    size: int
    first: Node
    excluded: int
    #: its nodes the request does not exclude (``None``: not needed, no per-node filter)
    nodes: tuple[Node, ...] | None


class ProfileSurvey(NamedTuple):
    sample: Node
    #: the chain position of the first per-profile filter refusing it, as the
    #: decision cached it (:data:`~conductor.scheduler.index.PASSES`: none;
    #: ``None``: not decided yet)
    verdict: int | None
    #: its free nodes
    size: int
    #: per owner (empty when its traits refuse it: only its size counts)
    owners: tuple[OwnerSet, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Survey:
    """What :func:`account` needs of the index, copied under its lock."""

    total: int
    of_class: int
    in_group: int
    free: int
    profiles: tuple[ProfileSurvey, ...]


def survey(index: NodeIndex, request: RequestSpec, *, with_nodes: bool) -> Survey:
    """Copy what explaining *request* needs of *index* (the caller holds its lock).

    :param with_nodes: copy each set's nodes too (a per-node filter is configured)
    """
    buckets = index.buckets(request.resource_class, request.group)
    excluded = request.exclude_nodes
    profiles = []
    for bucket in buckets:
        for profile in bucket.profiles.values():
            verdict = profile.verdicts.get(request.flavor_key)
            if verdict == _TRAITS:
                profiles.append(ProfileSurvey(profile.sample, verdict, profile.size, ()))
                continue
            owners = []
            for owner, nodes in profile.by_owner.items():
                hit = sum(1 for uuid in excluded if uuid in nodes) if excluded else 0
                kept = None
                if with_nodes:
                    kept = tuple(n for n in nodes if n.uuid not in excluded)
                owners.append(OwnerSet(owner, len(nodes), nodes.at(0), hit, kept))
            profiles.append(ProfileSurvey(profile.sample, verdict, profile.size, tuple(owners)))
    return Survey(
        total=len(index),
        of_class=index.count_resource_class(request.resource_class),
        in_group=sum(len(bucket.nodes) for bucket in buckets),
        free=sum(profile.size for bucket in buckets for profile in bucket.profiles.values()),
        profiles=tuple(profiles),
    )


def account(
    surveyed: Survey,
    chain: Sequence[BaseFilter],
    configured_from: int,
    request: RequestSpec,
) -> NoValidNode:
    """The nodes each filter of *chain* removed, counted in chain order.

    :param chain: the always-applied filters (resource class, group,
        availability, traits, live owner, retry), then the configured ones
    :param configured_from: the position of the first configured filter
    """
    counts = [0] * len(chain)
    counts[_CLASS] = surveyed.total - surveyed.of_class
    counts[_GROUP] = surveyed.of_class - surveyed.in_group
    counts[_AVAILABILITY] = surveyed.in_group - surveyed.free
    configured = tuple(enumerate(chain[configured_from:], start=configured_from))
    live = request.live_members
    awaiting_owner = 0
    for profile in surveyed.profiles:
        verdict = profile.verdict
        if verdict is None:
            verdict = _profile_verdict(chain, profile.sample, request)
        if verdict == _TRAITS:
            counts[_TRAITS] += profile.size
            continue
        for entry in profile.owners:
            if entry.owner is None or entry.owner not in live:
                counts[_LIVE_OWNER] += entry.size
                # Only its owner is missing: an agent re-joining, or a peer
                # about to take the node over, makes it fit.
                awaiting_owner += _passing(configured, verdict, entry, request, counts=None)
                continue
            counts[_RETRY] += entry.excluded
            _passing(configured, verdict, entry, request, counts=counts)
    return NoValidNode(
        request.flavor.name,
        surveyed.total,
        [(node_filter.name, count) for node_filter, count in zip(chain, counts, strict=True)],
        awaiting_owner,
    )


def _profile_verdict(chain: Sequence[BaseFilter], sample: Node, request: RequestSpec) -> int:
    """The chain position of the first per-profile filter refusing *sample*, or PASSES
    (what :meth:`conductor.scheduler.decide.Chooser.choose` caches per profile)."""
    for position in range(_TRAITS, len(chain)):
        node_filter = chain[position]
        if node_filter.per_profile and not node_filter.filter(sample, request):
            return position
    return PASSES


def _passing(
    configured: Sequence[tuple[int, BaseFilter]],
    verdict: int,
    entry: OwnerSet,
    request: RequestSpec,
    *,
    counts: list[int] | None,
) -> int:
    """How many of *entry*'s non-excluded nodes pass the configured filters
    (each one refused counted in *counts*, when given, against the first refusing it).

    :param verdict: the profile's (the position of its first refusing
        per-profile filter, or PASSES): the per-profile filters are not called
    """
    remaining = entry.size - entry.excluded
    nodes = entry.nodes
    for position, node_filter in configured:
        if remaining == 0:
            break
        if node_filter.per_profile:
            removed = remaining if position == verdict else 0
        elif node_filter.per_owner:
            removed = 0 if node_filter.filter(entry.first, request) else remaining
        else:
            assert nodes is not None, "surveyed without nodes, but a per-node filter is configured"
            nodes = tuple(node for node in nodes if node_filter.filter(node, request))
            removed = remaining - len(nodes)
        remaining -= removed
        if counts is not None:
            counts[position] += removed
    return remaining
