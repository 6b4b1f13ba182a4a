# SPDX-License-Identifier: Apache-2.0
"""One node as a Placement resource provider: what it should show, what it shows, mending it.

The rules follow Nova's ironic driver, so that a Nova sharing the Placement
reads ringfleet's nodes as it read its own:

* the provider's uuid is the node's, its name the node's name;
* its inventory is one unit of the node's resource class, normalized as
  ``os_resource_classes.normalize_name`` does (``baremetal-gold`` ->
  ``CUSTOM_BAREMETAL_GOLD``), with ``min_unit = max_unit = step_size = 1``;
* ``reserved`` is 1 — no capacity — while the node cannot take a build
  (maintenance, cleaning, enrolling, error...) and hosts nothing; a node that
  hosts an instance keeps ``reserved = 0`` and its allocation (Nova's
  ``skip_reserve_in_use_ironic_nodes``);
* its traits are the node's (custom ones created as needed);
* an instance on it is a consumer (uuid = instance uuid, type ``INSTANCE``)
  with one unit of that class.

Each provider is also a member of ringfleet's aggregate (``[placement]
aggregate``), which is how ``ringfleet placement check`` finds providers of
nodes ringfleet no longer has.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from conductor.common.objects import ProvisionState
from conductor.common.placement.client import (
    CONCURRENT_UPDATE,
    PlacementClient,
    PlacementConflict,
)
from conductor.common.resource_class import placement_name as resource_class_name

__all__ = [
    "Shown",
    "Wanted",
    "differences",
    "inventory",
    "mend",
    "read",
    "resource_class_name",
    "wanted",
]

LOG = logging.getLogger(__name__)

#: Tries of one write under a provider generation: a concurrent writer (a
#: Nova allocating, our own allocation write bumping the generation) makes
#: the first fail; the re-read one normally succeeds.
_GENERATION_TRIES: Final = 4


@dataclasses.dataclass(frozen=True, slots=True)
class Wanted:
    """What Placement should show for one node, from ringfleet's records."""

    uuid: str
    name: str
    resource_class: str  # Placement's name, CUSTOM_...
    reserved: int
    traits: frozenset[str]
    #: The instance on the node (its allocation's consumer), or None.
    consumer: str | None = None
    project_id: str | None = None
    user_id: str | None = None


def wanted(
    node: Mapping[str, Any], instance: Mapping[str, Any] | None, default_project: str
) -> Wanted:
    """What Placement should show for ``node`` (a node record as listed),
    hosting ``instance`` (its record) if it has one."""
    consumer = node.get("instance_uuid")
    schedulable = (
        not node.get("maintenance") and node.get("provision_state") == ProvisionState.AVAILABLE
    )
    project = user = None
    if consumer is not None:
        found = instance or {}
        project = found.get("project_id") or default_project
        user = found.get("user_id") or project
    return Wanted(
        uuid=node["uuid"],
        name=node.get("name") or node["uuid"],
        resource_class=resource_class_name(node["resource_class"]),
        reserved=0 if schedulable or consumer is not None else 1,
        traits=frozenset(node.get("traits") or ()),
        consumer=consumer,
        project_id=project,
        user_id=user,
    )


def inventory(want: Wanted) -> dict[str, dict[str, Any]]:
    """The provider's whole inventory: one unit of the node's class."""
    return {
        want.resource_class: {
            "total": 1,
            "reserved": want.reserved,
            "min_unit": 1,
            "max_unit": 1,
            "step_size": 1,
            "allocation_ratio": 1.0,
        }
    }


@dataclasses.dataclass(slots=True)
class Shown:
    """What Placement shows for one provider (read, or as we last wrote it)."""

    name: str
    inventories: dict[str, dict[str, Any]]
    traits: frozenset[str]
    aggregates: frozenset[str]
    #: consumer uuid -> resources, of the allocations against the provider.
    consumers: dict[str, dict[str, int]]
    #: The provider generation; None when not known (re-read before a write).
    generation: int | None = None


def read(client: PlacementClient, uuid: str) -> Shown | None:
    """The provider as Placement shows it now, or None if it has none."""
    provider = client.get_provider(uuid)
    if provider is None:
        return None
    _, inventories = client.get_inventories(uuid)
    _, traits = client.get_traits(uuid)
    generation, aggregates = client.get_aggregates(uuid)
    consumers = client.get_provider_allocations(uuid)
    return Shown(
        name=str(provider["name"]),
        inventories=inventories,
        traits=traits,
        aggregates=aggregates,
        consumers=consumers,
        generation=generation,
    )


def as_written(want: Wanted, aggregate: str) -> Shown:
    """What Placement shows once :func:`mend` made it agree with ``want``
    (generation unknown): the reporter's memory of a provider it wrote."""
    return Shown(
        name=want.name,
        inventories=inventory(want),
        traits=want.traits,
        aggregates=frozenset({aggregate}),
        consumers={want.consumer: {want.resource_class: 1}} if want.consumer else {},
    )


def _inventory_differs(shown: Mapping[str, Mapping[str, Any]], want: Wanted) -> bool:
    expected = inventory(want)
    if set(shown) != set(expected):
        return True
    have, should = shown[want.resource_class], expected[want.resource_class]
    return any(have.get(key) != value for key, value in should.items())


def differences(
    want: Wanted, shown: Shown | None, aggregate: str, refused_traits: frozenset[str] = frozenset()
) -> list[str]:
    """How ``shown`` differs from ``want``, in words (empty: they agree).
    Traits Placement cannot take (``refused_traits``) are not counted."""
    if shown is None:
        return ["no resource provider"]
    found: list[str] = []
    if shown.name != want.name:
        found.append(f"name {shown.name!r}, not {want.name!r}")
    if _inventory_differs(shown.inventories, want):
        found.append(f"inventory {shown.inventories}, not {inventory(want)}")
    if shown.traits != want.traits - refused_traits:
        found.append(f"traits {sorted(shown.traits)}, not {sorted(want.traits - refused_traits)}")
    if aggregate not in shown.aggregates:
        found.append(f"not in aggregate {aggregate}")
    expected = {want.consumer: {want.resource_class: 1}} if want.consumer else {}
    if shown.consumers != expected:
        found.append(
            f"allocations of {sorted(shown.consumers) or 'nobody'}, "
            f"not {sorted(expected) or 'nobody'}"
        )
    return found


class _Provider:
    """One provider being mended: its generation, re-read when a write finds it stale."""

    def __init__(self, uuid: str, generation: int | None) -> None:
        self.uuid, self.generation = uuid, generation

    def write(self, read: Callable[[str], tuple[int, Any]], put: Callable[[int, Any], int]) -> None:
        """``put(generation, current)`` under the provider's generation;
        ``current`` is what ``read`` found, None if the generation was known.
        Re-read and tried again when Placement says the generation is stale."""
        for attempt in range(_GENERATION_TRIES):
            current = None
            if self.generation is None or attempt > 0:
                self.generation, current = read(self.uuid)
            try:
                self.generation = put(self.generation, current)
                return
            except PlacementConflict as exc:
                if exc.code != CONCURRENT_UPDATE or attempt == _GENERATION_TRIES - 1:
                    raise
                LOG.debug("Provider %s changed under us; reading it again", self.uuid)
        raise AssertionError("unreachable")


def mend(
    client: PlacementClient,
    want: Wanted,
    shown: Shown | None,
    aggregate: str,
    is_ours: Callable[[str], bool] = lambda consumer: True,
) -> dict[str, Any] | None:
    """Make the provider agree with ``want``, except for a new allocation,
    which is returned (the caller writes many in one request): the entry of
    ``POST /allocations`` for ``want.consumer``, or None.

    Allocations of other consumers against the provider are removed first
    (an instance deleted), so that the inventory may then take the node's
    capacity away; a new allocation is written after the inventory gave it
    back.  Only consumers ``is_ours`` says are ringfleet instances are
    removed: another's (a Nova instance) is left, with a WARNING.

    :raises ServiceUnavailable: Placement did not answer
    :raises PlacementRefused: Placement refused a write (the reason says which)
    """
    fresh = False  # created now: nothing on it yet, nothing to read back
    if shown is None:
        created = _create(client, want)
        if created is None:  # created meanwhile (another agent, a Nova)
            shown = read(client, want.uuid)
        if created is not None or shown is None:
            created = created or client.create_provider(want.uuid, want.name)
            fresh = True
            shown = Shown(
                name=str(created["name"]),
                inventories={},
                traits=frozenset(),
                aggregates=frozenset(),
                consumers={},
                generation=int(created["generation"]),
            )
    provider = _Provider(want.uuid, shown.generation)
    if shown.name != want.name:
        _rename(client, want, shown)
    for consumer in sorted(set(shown.consumers) - {want.consumer}):
        if not is_ours(consumer):
            # Not a ringfleet instance: a Nova instance on a node imported
            # from Nova's ironic driver.  Its allocation is Nova's to keep.
            LOG.warning(
                "Node %s: Placement has an allocation of %s, which is no ringfleet "
                "instance, on its provider; left as it is",
                want.uuid,
                consumer,
            )
            continue
        _remove_consumer(client, consumer, want.uuid)
        provider.generation = None  # an allocation write bumps it
    if _inventory_differs(shown.inventories, want):
        provider.write(
            client.get_inventories,
            lambda generation, _: client.set_inventories(want.uuid, generation, inventory(want)),
        )
    refused = client.ensure_traits(want.traits)
    if shown.traits != want.traits - refused:
        provider.write(
            client.get_traits,
            lambda generation, _: client.set_traits(want.uuid, generation, want.traits),
        )
    if aggregate not in shown.aggregates:
        if not fresh:
            provider.generation = None  # read them: an operator's own are kept
        provider.write(
            client.get_aggregates,
            lambda generation, current: client.set_aggregates(
                want.uuid, generation, set(current or ()) | {aggregate}
            ),
        )
    if want.consumer is None or shown.consumers.get(want.consumer) == {want.resource_class: 1}:
        return None
    if want.consumer in shown.consumers:  # another amount, another class: read it
        return allocation_entry(client, want)
    # A new instance: Placement has no allocation of it yet (consumer
    # generation null).  If it has one elsewhere after all, the write is
    # refused as stale and the caller writes it with allocation_entry().
    return allocation_entry(client, want, known=(None, {}))


def allocation_entry(
    client: PlacementClient,
    want: Wanted,
    known: tuple[int | None, dict[str, dict[str, int]]] | None = None,
) -> dict[str, Any]:
    """The ``POST /allocations`` entry giving ``want.consumer`` its node, and
    nothing else (its allocations elsewhere, if any, are kept): read from
    Placement, unless ``known`` gives the consumer's generation and
    allocations."""
    assert want.consumer is not None
    generation, allocations = known if known is not None else client.get_consumer(want.consumer)[:2]
    allocations = {p: r for p, r in allocations.items() if p != want.uuid}
    allocations[want.uuid] = {want.resource_class: 1}
    return {
        "allocations": {p: {"resources": r} for p, r in allocations.items()},
        "project_id": want.project_id,
        "user_id": want.user_id,
        "consumer_generation": generation,
        "consumer_type": "INSTANCE",
    }


def _create(client: PlacementClient, want: Wanted) -> dict[str, Any] | None:
    """The provider created for ``want``; None if one with its uuid exists."""
    try:
        return client.create_provider(want.uuid, want.name)
    except PlacementConflict:
        if client.get_provider(want.uuid) is not None:
            return None
        # The name is another provider's (a Nova's compute node, a node of
        # another fleet): the uuid names it until the clash is resolved.
        LOG.warning(
            "Node %s: Placement has another provider named %r; its provider is named "
            "by its uuid instead",
            want.uuid,
            want.name,
        )
        return client.create_provider(want.uuid, want.uuid)


def _rename(client: PlacementClient, want: Wanted, shown: Shown) -> None:
    try:
        client.rename_provider(want.uuid, want.name)
    except PlacementConflict as exc:
        if shown.name != want.uuid:
            LOG.warning(
                "Node %s: cannot name its provider %r (%s); it keeps %r",
                want.uuid,
                want.name,
                exc.detail,
                shown.name,
            )


def _remove_consumer(client: PlacementClient, consumer: str, provider: str) -> None:
    """Take ``consumer``'s allocation off ``provider``, keeping any elsewhere."""
    generation, allocations, rest = client.get_consumer(consumer)
    others = {p: r for p, r in allocations.items() if p != provider}
    if not others:
        client.delete_allocations(consumer)
        return
    client.put_allocations(
        {
            consumer: {
                "allocations": {p: {"resources": r} for p, r in others.items()},
                "project_id": rest.get("project_id"),
                "user_id": rest.get("user_id"),
                "consumer_generation": generation,
                "consumer_type": rest.get("consumer_type") or "INSTANCE",
            }
        }
    )
