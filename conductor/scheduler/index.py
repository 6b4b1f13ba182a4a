# SPDX-License-Identifier: Apache-2.0
"""The scheduler's in-memory index of nodes, so a decision does not scan the fleet.

Layout (all of it guarded by the scheduler's lock; nothing here locks):

* every node the conductor knows, by uuid, and grouped in *buckets* keyed
  by (resource class as Placement names it, group), which is how a flavor
  and a group hint select nodes;
* inside a bucket, the **free** nodes (those Placement would offer:
  ``available``, not in maintenance, no instance, power state known)
  grouped by *profile* -- their traits and hardware
  (:data:`HardwareKey`: capabilities, and what Nova reads them from) -- and
  within a profile by owning agent.  Filters that only look at a node's
  profile are evaluated once per profile and cached there, per flavor; the
  spread weigher looks at owners.  A decision therefore costs about
  (profiles in the bucket x agents), whatever the number of nodes;
* per agent, how many of its nodes host an instance (the spread weigher's
  input);
* the free nodes with failed builds counted (``failed_builds`` > 0, few in
  a healthy fleet), which the failed-builds weighers single out.

Coherence with the database is the scheduler's job (incremental refreshes of
changed rows, periodic full rebuilds, and local updates the moment this
conductor allocates).  The index records which nodes it changed locally and
when (a *generation* counter), so that a refresh whose read started before a
local change does not overwrite it with the older row.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from conductor.common.objects import Node, ProvisionState
from conductor.common.resource_class import placement_name

__all__ = [
    "PASSES",
    "Bucket",
    "HardwareKey",
    "NodeIndex",
    "NodeSet",
    "Profile",
    "hardware_key",
    "hardware_key_of",
    "is_free",
]

#: a node's hardware as per-profile filters may see it: its sorted capability
#: items, then ``properties["cpu_arch"]`` and ``properties["capabilities"]``
#: as text (``None``: absent), from which Nova's host state is built
#: (:func:`conductor.scheduler.nova.nova_stats`: nodes whose capabilities
#: parse alike may still differ there, in architecture or in items Nova
#: reads differently)
HardwareKey = tuple[tuple[tuple[str, str], ...], str | None, str | None]
#: (traits, hardware): what per-profile filters may look at, besides the
#: bucket's resource class and group
ProfileKey = tuple[frozenset[str], HardwareKey]

_AVAILABLE = ProvisionState.AVAILABLE
_SERIALS = itertools.count(1)
#: how many flavors' verdicts a profile remembers before forgetting them all
_MAX_VERDICTS = 128
#: a profile's verdict when every per-profile filter passes it (:attr:`Profile.verdicts`)
PASSES = -1


def is_free(node: Node) -> bool:
    """Whether *node* may take a new instance: what Placement would offer in Nova.

    Nova's ironic driver reserves a node's one unit while it is in
    maintenance, not ``available``, of an unknown power state, or hosting an
    instance; Placement offers the others.
    """
    return (
        node.provision_state is ProvisionState.AVAILABLE
        and not node.maintenance
        and node.instance_uuid is None
        and node.power_state is not None
    )


def hardware_key(node: Node) -> HardwareKey:
    """*node*'s :data:`HardwareKey`: its capabilities (order-independent) and their source."""
    return hardware_key_of(node.capabilities, node.properties)


def hardware_key_of(capabilities: Mapping[str, str], properties: Mapping[str, Any]) -> HardwareKey:
    """The :data:`HardwareKey` of a node's parsed *capabilities* and its *properties*."""
    arch = properties.get("cpu_arch")
    text = properties.get("capabilities")
    return (
        tuple(sorted(capabilities.items())),
        None if arch is None else str(arch),
        None if text is None else str(text),
    )


class NodeSet:
    """Nodes by uuid with O(1) add, discard, and access by position.

    Positions let the scheduler draw a uniformly random node without
    copying the set.
    """

    __slots__ = ("_items", "_positions")

    def __init__(self) -> None:
        self._items: list[Node] = []
        self._positions: dict[str, int] = {}

    def add(self, node: Node) -> None:
        position = self._positions.get(node.uuid)
        if position is None:
            self._positions[node.uuid] = len(self._items)
            self._items.append(node)
        else:
            self._items[position] = node

    def discard(self, uuid: str) -> None:
        position = self._positions.pop(uuid, None)
        if position is None:
            return
        last = self._items.pop()
        if position < len(self._items):
            self._items[position] = last
            self._positions[last.uuid] = position

    def at(self, position: int) -> Node:
        return self._items[position]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Node]:
        return iter(self._items)

    def __contains__(self, uuid: object) -> bool:
        return uuid in self._positions


class Profile:
    """The free nodes of one bucket sharing traits and hardware (:data:`HardwareKey`).

    :ivar sample: a node with this profile (perhaps no longer free: only its
        resource class, group, traits, capabilities and the properties
        ``cpu_arch`` and ``capabilities`` are meant to be read)
    :ivar by_owner: owning agent (``None``: no owner) -> its free nodes
    :ivar verdicts: flavor key -> the position in the scheduler's chain of
        the first per-profile filter refusing the profile, or :data:`PASSES`
        (kept so that a "no valid node" answer says which filter refused
        the profile without calling the filters again)
    """

    __slots__ = ("by_owner", "key", "sample", "size", "verdicts")

    def __init__(self, key: ProfileKey, sample: Node) -> None:
        self.key = key
        self.sample = sample
        self.by_owner: dict[str | None, NodeSet] = {}
        self.size = 0
        self.verdicts: dict[Any, int] = {}

    def remember(self, flavor_key: Any, verdict: int) -> None:
        if len(self.verdicts) >= _MAX_VERDICTS:
            self.verdicts.clear()
        self.verdicts[flavor_key] = verdict


class Bucket:
    """Every node of one (resource class, group), and its free nodes by profile."""

    __slots__ = ("group", "nodes", "profiles", "resource_class")

    def __init__(self, resource_class: str, group: str) -> None:
        self.resource_class = resource_class
        self.group = group
        self.nodes: dict[str, Node] = {}
        self.profiles: dict[ProfileKey, Profile] = {}


class NodeIndex:
    """Nodes by uuid, by (resource class, group), and free ones by profile and owner."""

    def __init__(self) -> None:
        self._nodes: dict[str, Node] = {}
        self._buckets: dict[str, dict[str, Bucket]] = {}
        self._free_in: dict[str, Profile] = {}
        self._failing: dict[str, Node] = {}
        self._allocations: dict[str, int] = {}
        self.allocations: Mapping[str, int] = MappingProxyType(self._allocations)
        """agent -> how many of its nodes host an instance (read-only view)"""
        self._generation = 0
        self._touched: dict[str, int] = {}
        self.serial = next(_SERIALS)
        """unique per index (ids of objects may be reused)"""
        self.structure = 0
        """bumped whenever a bucket, a profile or an owner's node set appears or
        goes away (not when a set merely grows or shrinks): what the chooser's
        caches of candidate sets depend on"""

    # -- reading --------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, uuid: object) -> bool:
        return uuid in self._nodes

    def get(self, uuid: str) -> Node | None:
        return self._nodes.get(uuid)

    def nodes(self) -> Iterator[Node]:
        return iter(self._nodes.values())

    @property
    def free_count(self) -> int:
        return len(self._free_in)

    def is_free(self, uuid: str) -> bool:
        """Whether the index holds *uuid* as a free node."""
        return uuid in self._free_in

    def failing(self) -> Iterator[Node]:
        """The free nodes whose ``failed_builds`` is not 0."""
        return iter(self._failing.values())

    def profile_of(self, uuid: str) -> Profile | None:
        """The profile of the free node *uuid*; ``None`` if it is not a free node here."""
        return self._free_in.get(uuid)

    def buckets(self, resource_class: str, group: str | None) -> list[Bucket]:
        """The buckets of *resource_class* (Placement's name, ``CUSTOM_...``):
        one group's, or all (*group* ``None``)."""
        by_group = self._buckets.get(resource_class)
        if not by_group:
            return []
        if group is None:
            return list(by_group.values())
        bucket = by_group.get(group)
        return [bucket] if bucket is not None else []

    def count_resource_class(self, resource_class: str) -> int:
        """How many nodes (free or not) have *resource_class* (Placement's name)."""
        by_group = self._buckets.get(resource_class, {})
        return sum(len(bucket.nodes) for bucket in by_group.values())

    def stats(self) -> dict[str, int]:
        buckets = [b for by_group in self._buckets.values() for b in by_group.values()]
        return {
            "nodes": len(self._nodes),
            "free": len(self._free_in),
            "buckets": len(buckets),
            "profiles": sum(len(b.profiles) for b in buckets),
            "allocated": sum(self._allocations.values()),
        }

    # -- local-change bookkeeping -----------------------------------------------------

    @property
    def generation(self) -> int:
        """Counter of local changes; compare with :meth:`changed_locally_after`."""
        return self._generation

    def changed_locally_after(self, uuid: str, generation: int) -> bool:
        """Whether this conductor changed *uuid* after *generation* was read."""
        return self._touched.get(uuid, 0) > generation

    def forget_local_changes(self, upto: int) -> None:
        """Drop the records of local changes made at or before *upto*."""
        if self._touched:
            self._touched = {u: g for u, g in self._touched.items() if g > upto}

    def adopt_local_changes(self, previous: NodeIndex, after: int) -> None:
        """Replay onto this (freshly read) index what *previous* changed after *after*."""
        self._generation = max(self._generation, previous._generation)
        for uuid, generation in sorted(previous._touched.items(), key=lambda item: item[1]):
            if generation <= after:
                continue
            node = previous._nodes.get(uuid)
            if node is None:
                self.remove(uuid, local=True)
            else:
                self.put(node, local=True)

    # -- writing ----------------------------------------------------------------------

    def put(
        self,
        node: Node,
        hardware: HardwareKey | None = None,
        *,
        local: bool = False,
    ) -> None:
        """Insert or replace *node*.

        :param hardware: :func:`hardware_key` of *node*, when already known
        :param local: this conductor made the change (recorded, see the module doc)
        """
        uuid = node.uuid
        old = self._nodes.get(uuid)
        if old is not None:
            self._unplace(old)
        self._nodes[uuid] = node
        resource_class = placement_name(node.resource_class)
        by_group = self._buckets.get(resource_class)
        if by_group is None:
            by_group = self._buckets[resource_class] = {}
        bucket = by_group.get(node.group)
        if bucket is None:
            bucket = by_group[node.group] = Bucket(resource_class, node.group)
            self.structure += 1
        bucket.nodes[uuid] = node
        if (  # is_free(node), inlined: this is most of an index build
            node.provision_state is _AVAILABLE
            and not node.maintenance
            and node.instance_uuid is None
            and node.power_state is not None
        ):
            key = (node.traits, hardware if hardware is not None else hardware_key(node))
            profile = bucket.profiles.get(key)
            if profile is None:
                profile = bucket.profiles[key] = Profile(key, node)
            owned = profile.by_owner.get(node.owner)
            if owned is None:
                owned = profile.by_owner[node.owner] = NodeSet()
                self.structure += 1
            owned.add(node)
            profile.size += 1
            self._free_in[uuid] = profile
            if node.failed_builds:
                self._failing[uuid] = node
        elif node.instance_uuid is not None and node.owner is not None:
            self._allocations[node.owner] = self._allocations.get(node.owner, 0) + 1
        if local:
            self._touch(uuid)

    def remove(self, uuid: str, *, local: bool = False) -> None:
        """Forget *uuid* (a deleted node)."""
        old = self._nodes.pop(uuid, None)
        if old is not None:
            self._unplace(old)
        if local:
            self._touch(uuid)

    def _touch(self, uuid: str) -> None:
        self._generation += 1
        self._touched[uuid] = self._generation

    def _unplace(self, old: Node) -> None:
        uuid = old.uuid
        resource_class = placement_name(old.resource_class)
        by_group = self._buckets[resource_class]
        bucket = by_group[old.group]
        del bucket.nodes[uuid]
        profile = self._free_in.pop(uuid, None)
        if profile is not None:
            self._failing.pop(uuid, None)
            owned = profile.by_owner[old.owner]
            owned.discard(uuid)
            if not owned:
                del profile.by_owner[old.owner]
                self.structure += 1
            profile.size -= 1
            if profile.size == 0:
                del bucket.profiles[profile.key]
        elif old.instance_uuid is not None and old.owner is not None:
            left = self._allocations[old.owner] - 1
            if left:
                self._allocations[old.owner] = left
            else:
                del self._allocations[old.owner]
        if not bucket.nodes:
            self.structure += 1
            del by_group[old.group]
            if not by_group:
                del self._buckets[resource_class]
