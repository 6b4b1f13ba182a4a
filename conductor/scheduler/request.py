"""What one scheduling decision is about, as filters and weighers see it.

A :class:`RequestSpec` is built once per decision from the flavor and the
caller's view of the world (live members, nodes to avoid).  The flavor's
``capabilities:<key>`` extra specs are parsed here, once per distinct flavor,
so that no filter re-parses an expression per node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from types import MappingProxyType

from conductor.common.objects import Flavor
from conductor.scheduler.capabilities import CapabilityExpression, parse_capability_expression

__all__ = ["CAPABILITIES_SCOPE", "RequestSpec", "flavor_key", "parse_flavor_capabilities"]

#: the extra-spec prefix of capability requirements (Nova's scope)
CAPABILITIES_SCOPE = "capabilities:"


@dataclasses.dataclass(frozen=True, slots=True)
class RequestSpec:
    """The input of one decision.

    :ivar flavor: what the build asks for
    :ivar instance_uuid: the instance being placed
    :ivar live_members: the agents currently in the membership group; only
        nodes they own are eligible
    :ivar group: the build's group hint (only nodes of that group), or
        ``None`` for any group
    :ivar exclude_nodes: nodes not to use (a reschedule's earlier attempts)
    :ivar capabilities: the flavor's capability requirements, parsed:
        capability key (without the ``capabilities:`` scope) -> expression
    :ivar flavor_key: a hashable identity of everything in the flavor; the
        scheduler caches per-profile filter results under it
    """

    flavor: Flavor
    instance_uuid: str
    live_members: frozenset[str]
    group: str | None = None
    exclude_nodes: frozenset[str] = frozenset()
    capabilities: Mapping[str, CapabilityExpression] = dataclasses.field(
        default_factory=lambda: MappingProxyType({})
    )
    flavor_key: Hashable = None

    @classmethod
    def build(
        cls,
        flavor: Flavor,
        instance_uuid: str,
        *,
        live_members: frozenset[str],
        group: str | None = None,
        exclude_nodes: frozenset[str] = frozenset(),
    ) -> RequestSpec:
        """A request with the flavor's capabilities parsed (uncached)."""
        return cls(
            flavor=flavor,
            instance_uuid=instance_uuid,
            live_members=live_members,
            group=group,
            exclude_nodes=exclude_nodes,
            capabilities=parse_flavor_capabilities(flavor),
            flavor_key=flavor_key(flavor),
        )


def flavor_key(flavor: Flavor) -> Hashable:
    """Everything a flavor says, as a hashable value (``Flavor`` holds a dict)."""
    return (
        flavor.name,
        flavor.resource_class,
        flavor.required_traits,
        flavor.forbidden_traits,
        tuple(sorted(flavor.extra_specs.items())),
    )


def parse_flavor_capabilities(flavor: Flavor) -> Mapping[str, CapabilityExpression]:
    """The ``capabilities:<key>`` extra specs of *flavor*, parsed (read-only).

    Other extra specs are not the scheduler's (``trait:`` ones are merged
    into the trait sets when a flavor is created).

    :raises InvalidInput: naming ``extra_specs.capabilities:<key>`` when an
        expression does not parse (flavors are validated when created, so
        this means the stored flavor was written by something else)
    """
    parsed: dict[str, CapabilityExpression] = {}
    for key, value in sorted(flavor.extra_specs.items()):
        if key.startswith(CAPABILITIES_SCOPE):
            parsed[key[len(CAPABILITIES_SCOPE) :]] = parse_capability_expression(
                value, field=f"extra_specs.{key}"
            )
    return MappingProxyType(parsed)
