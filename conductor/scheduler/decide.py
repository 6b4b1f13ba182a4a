# SPDX-License-Identifier: Apache-2.0
"""Choosing a node from the index, and explaining why none fits.

:meth:`Chooser.choose` walks the index instead of the fleet: the buckets of
the flavor's resource class (and the group hint), the profiles in them whose
cached per-profile verdict passes, the live owners holding free nodes of
those profiles that pass the per-owner filters (this owner -> node sets map
is cached per resource class, group and flavor -- and the agents' addresses
when a per-owner filter is configured -- until a set appears or empties in
the index).  It then
ranks the owners with the (per-owner) weighers, random tie-break first, and
draws a random free node of the best owner that passes the per-node checks.
When a weigher reads the nodes' failed builds (``reads_failed_builds``), the
nodes the index holds with failed builds are weighed apart, one per owner
and count, and an owner's other nodes drawn without them.  Only when a
configured weigher needs to see every node does it weigh every candidate
node (see :mod:`conductor.scheduler.weighers`).

:meth:`Chooser.survey` and :meth:`Chooser.account` explain a failure
(:mod:`conductor.scheduler.explain`): how many nodes each filter removed,
for :class:`~conductor.common.exception.NoValidNode`, and how many of them
lack only a live owner (the build may wait for one), counted per profile
and owner as a decision is; the scheduler holds its lock only for the
survey.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from conductor.common.exception import NoValidNode
from conductor.common.objects import Node
from conductor.scheduler.explain import Survey, account, survey
from conductor.scheduler.filters import (
    ALWAYS_APPLIED,
    BaseFilter,
    GroupFilter,
    ResourceClassFilter,
)
from conductor.scheduler.index import PASSES, NodeIndex, NodeSet, Profile
from conductor.scheduler.request import RequestSpec
from conductor.scheduler.weighers import BaseWeigher, WeighingContext, total_weights

__all__ = ["Chooser"]

#: random draws from an owner's nodes before scanning them in order (draws
#: fail only on excluded nodes or per-node filters)
_RANDOM_DRAWS = 4
#: requests (resource class, group, flavor) whose candidate sets are remembered
_MAX_CACHED = 256


class Chooser:
    """The decision procedure for one filter and weigher configuration.

    Not thread-safe: the caller holds the lock of the index it passes.
    """

    def __init__(
        self,
        filters: Sequence[BaseFilter],
        weighers: Sequence[BaseWeigher],
        rng: random.Random | None = None,
    ) -> None:
        self.always: tuple[BaseFilter, ...] = tuple(cls() for cls in ALWAYS_APPLIED)
        assert isinstance(self.always[0], ResourceClassFilter)
        assert isinstance(self.always[1], GroupFilter)
        # A listed always-applied filter (TraitsFilter) is not applied twice.
        self.filters: tuple[BaseFilter, ...] = tuple(
            f for f in filters if not isinstance(f, ALWAYS_APPLIED)
        )
        self.weighers: tuple[BaseWeigher, ...] = tuple(weighers)
        # The always-applied per-profile checks beyond the bucket's resource
        # class (traits: Placement's half) come first.
        always_profile = tuple(
            f for f in self.always if f.per_profile and not isinstance(f, ResourceClassFilter)
        )
        self._profile_filters = always_profile + tuple(f for f in self.filters if f.per_profile)
        # Their positions in the chain: a profile's verdict is the first refusing one's.
        chain = self.chain
        self._profile_positions = tuple(
            next(i for i, f in enumerate(chain) if f is g) for g in self._profile_filters
        )
        self._owner_filters = tuple(f for f in self.filters if f.per_owner and not f.per_profile)
        self._node_filters = tuple(f for f in self.filters if not f.per_profile and not f.per_owner)
        # Per-request weighers weigh every candidate alike: they add 0 to each total.
        self._weighing = tuple(w for w in self.weighers if not w.per_request)
        self._per_owner = all(w.per_owner for w in self._weighing)
        self._by_failures = any(w.reads_failed_builds for w in self._weighing)
        self._rng = rng or random.Random()
        # (resource class, group, flavor key) -> owner -> its free node sets in
        # the profiles that pass; valid while the index's structure is unchanged.
        self._sets_cache: dict[tuple[Any, ...], dict[str | None, list[NodeSet]]] = {}
        self._cached_for: tuple[int, int] = (0, -1)

    @property
    def chain(self) -> tuple[BaseFilter, ...]:
        """Every filter, in the order they are applied and counted."""
        return self.always + self.filters

    # -- deciding -----------------------------------------------------------------------

    def choose(self, index: NodeIndex, request: RequestSpec) -> Node | None:
        """The best free node for *request*, or ``None`` when none passes."""
        sets_by_owner = self._candidate_sets(index, request)
        if not sets_by_owner:
            return None
        context = WeighingContext(index.allocations)
        if self._per_owner:
            failing = _failing_by_owner(index, sets_by_owner) if self._by_failures else {}
            return self._choose_by_owner(sets_by_owner, failing, request, context)
        return self._choose_by_node(sets_by_owner, request, context)

    def _candidate_sets(self, index: NodeIndex, request: RequestSpec) -> dict[str, list[NodeSet]]:
        """Live owner -> its (non-empty) sets of free nodes in the profiles that pass."""
        live = request.live_members
        return {
            owner: sets
            for owner, sets in self._sets_by_owner(index, request).items()
            if owner is not None and owner in live
        }

    def _sets_by_owner(
        self, index: NodeIndex, request: RequestSpec
    ) -> dict[str | None, list[NodeSet]]:
        state = (index.serial, index.structure)
        if state != self._cached_for:
            self._sets_cache.clear()
            self._cached_for = state
        key: tuple[Any, ...] = (request.resource_class, request.group, request.flavor_key)
        owner_filters = self._owner_filters
        if owner_filters:
            # What they may read of an owner besides its name: its address.
            key += (tuple(sorted(request.host_ips.items())),)
        cached = self._sets_cache.get(key)
        if cached is not None:
            return cached
        result: dict[str | None, list[NodeSet]] = {}
        for bucket in index.buckets(request.resource_class, request.group):
            for profile in bucket.profiles.values():
                if not self._profile_passes(profile, request):
                    continue
                for owner, nodes in profile.by_owner.items():
                    if owner_filters and not all(
                        f.filter(nodes.at(0), request) for f in owner_filters
                    ):
                        continue
                    sets = result.get(owner)
                    if sets is None:
                        result[owner] = [nodes]
                    else:
                        sets.append(nodes)
        if len(self._sets_cache) >= _MAX_CACHED:
            self._sets_cache.clear()
        self._sets_cache[key] = result
        return result

    def _profile_passes(self, profile: Profile, request: RequestSpec) -> bool:
        verdict = profile.verdicts.get(request.flavor_key)
        if verdict is None:
            verdict = self._profile_verdict(profile.sample, request)
            profile.remember(request.flavor_key, verdict)
        return verdict == PASSES

    def _profile_verdict(self, sample: Node, request: RequestSpec) -> int:
        """The chain position of the first per-profile filter refusing *sample*, or PASSES."""
        for node_filter, position in zip(
            self._profile_filters, self._profile_positions, strict=True
        ):
            if not node_filter.filter(sample, request):
                return position
        return PASSES

    def _node_passes(self, node: Node, request: RequestSpec) -> bool:
        if node.uuid in request.exclude_nodes:
            return False
        return all(f.filter(node, request) for f in self._node_filters)

    def _choose_by_owner(
        self,
        sets_by_owner: dict[str, list[NodeSet]],
        failing: dict[str, dict[int, list[Node]]],
        request: RequestSpec,
        context: WeighingContext,
    ) -> Node | None:
        """The best owner's random node; *failing*: each owner's candidates
        with failed builds, by count (empty unless a weigher reads them).

        Per-owner weighers give every node of an owner the same weight, and
        those reading failed builds every node of an owner with the same
        count: one sample node is weighed per owner and count (0: the
        owner's other nodes), and the normalized totals are those every
        node would get.
        """
        # (owner, sample, the failing nodes drawn from; None: the owner's others)
        groups: list[tuple[str, Node, list[Node] | None]] = []
        for owner, sets in sets_by_owner.items():
            by_count = failing.get(owner)
            if not by_count:
                groups.append((owner, sets[0].at(0), None))
                continue
            if sum(len(nodes) for nodes in sets) > sum(map(len, by_count.values())):
                groups.append((owner, _clean_sample(sets), None))
            groups.extend((owner, nodes[0], nodes) for nodes in by_count.values())
        self._rng.shuffle(groups)  # the tie-break: sorting below is stable
        if self._weighing and len(groups) > 1:
            totals = total_weights(self._weighing, [g[1] for g in groups], request, context)
            order = sorted(range(len(groups)), key=totals.__getitem__, reverse=True)
            groups = [groups[i] for i in order]
        for owner, _sample, failed in groups:
            if failed is None:
                node = self._draw(sets_by_owner[owner], request, skip_failing=owner in failing)
            else:
                node = self._draw_failing(failed, request)
            if node is not None:
                return node
        return None

    def _draw_failing(self, nodes: list[Node], request: RequestSpec) -> Node | None:
        """A random node of *nodes* (alike but for their identity) passing the per-node checks."""
        for position in self._rng.sample(range(len(nodes)), len(nodes)):
            if self._node_passes(nodes[position], request):
                return nodes[position]
        return None

    def _draw(
        self, sets: list[NodeSet], request: RequestSpec, *, skip_failing: bool = False
    ) -> Node | None:
        """A random node of *sets* passing the per-node checks, if any does;
        *skip_failing*: none with failed builds (they are weighed apart)."""
        simple = not request.exclude_nodes and not self._node_filters and not skip_failing
        total = sum(len(nodes) for nodes in sets)
        for _ in range(_RANDOM_DRAWS):
            position = int(self._rng.random() * total)
            for nodes in sets:
                if position < len(nodes):
                    node = nodes.at(position)
                    break
                position -= len(nodes)
            else:  # pragma: no cover - position < total by construction
                node = sets[-1].at(len(sets[-1]) - 1)
            if simple or (
                not (skip_failing and node.failed_builds) and self._node_passes(node, request)
            ):
                return node
        for nodes in sets:
            for node in nodes:
                if not (skip_failing and node.failed_builds) and self._node_passes(node, request):
                    return node
        return None

    def _choose_by_node(
        self,
        sets_by_owner: dict[str, list[NodeSet]],
        request: RequestSpec,
        context: WeighingContext,
    ) -> Node | None:
        candidates = [
            node
            for sets in sets_by_owner.values()
            for nodes in sets
            for node in nodes
            if self._node_passes(node, request)
        ]
        if not candidates:
            return None
        self._rng.shuffle(candidates)  # the tie-break: max() keeps the first best
        totals = total_weights(self._weighing, candidates, request, context)
        best = max(range(len(candidates)), key=totals.__getitem__)
        return candidates[best]

    # -- explaining -----------------------------------------------------------------------

    def survey(self, index: NodeIndex, request: RequestSpec) -> Survey:
        """What :meth:`account` needs of *index* (the caller holds its lock; cheap)."""
        return survey(index, request, with_nodes=bool(self._node_filters))

    def account(self, surveyed: Survey, request: RequestSpec) -> NoValidNode:
        """Why no node fits, from :meth:`survey`'s copy (no lock needed)."""
        return account(surveyed, self.chain, len(self.always), request)

    def explain(self, index: NodeIndex, request: RequestSpec) -> NoValidNode:
        """Why no node fits: the nodes each filter removed, counted in chain order
        (:mod:`conductor.scheduler.explain`; the caller holds the index's lock)."""
        return self.account(self.survey(index, request), request)


def _failing_by_owner(
    index: NodeIndex, sets_by_owner: dict[str, list[NodeSet]]
) -> dict[str, dict[int, list[Node]]]:
    """Owner -> failed-builds count -> its candidate nodes with that count (not 0)."""
    failing: dict[str, dict[int, list[Node]]] = {}
    for node in index.failing():
        owner = node.owner
        if owner is None or owner not in sets_by_owner:
            continue
        if any(node.uuid in nodes for nodes in sets_by_owner[owner]):
            failing.setdefault(owner, {}).setdefault(node.failed_builds, []).append(node)
    return failing


def _clean_sample(sets: list[NodeSet]) -> Node:
    """A node of *sets* as weighed for the nodes without failed builds."""
    for nodes in sets:
        for node in nodes:
            if not node.failed_builds:
                return node
    raise AssertionError("no node without failed builds")  # pragma: no cover - counted before
