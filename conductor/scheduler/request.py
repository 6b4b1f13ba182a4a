# SPDX-License-Identifier: Apache-2.0
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
from typing import Any

from conductor.common.objects import Flavor
from conductor.common.resource_class import requested_class
from conductor.validation.capabilities import (
    CapabilityExpression,
    expression_or_reason,
    parse_capability_expression,
)

__all__ = [
    "CAPABILITIES_SCOPE",
    "RequestSpec",
    "flavor_key",
    "parse_flavor_capabilities",
    "parse_unscoped_capabilities",
    "request_key",
]

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
    :ivar unscoped_capabilities: the flavor's unscoped extra specs (no
        colon), parsed: key -> expression, a requirement only on nodes that
        have a capability of that name (Nova's rule)
    :ivar flavor_key: a hashable identity of everything per-profile filters
        may read of the request: the flavor, and the scheduler hints when a
        per-profile filter reads them (see :func:`request_key`); the
        scheduler caches their results under it
    :ivar scheduler_hints: the build's scheduler hints: name -> a string,
        number, boolean or ``None`` (read by Nova filters such as JsonFilter,
        :mod:`conductor.scheduler.nova`)
    :ivar project_id: the instance's project (``None``: unknown), for Nova
        filters' ``spec_obj.project_id``
    :ivar image: the build's own image (``None``: it names none), for Nova
        filters' ``spec_obj.image`` (which shows its disk format and
        properties)
    :ivar host_ips: live agent -> its IP address (``[DEFAULT] my_ip``, as
        announced with its membership), for Nova filters'
        ``host_state.host_ip``; agents announcing none are absent
    :ivar resource_class: the Placement class the build needs one unit of
        (:func:`conductor.common.resource_class.requested_class`: the
        flavor's ``resources:CUSTOM_<X>=1``, else its resource class,
        normalized as Nova does; ``""``: no node offers it), derived from
        the flavor
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
    unscoped_capabilities: Mapping[str, CapabilityExpression] = dataclasses.field(
        default_factory=lambda: MappingProxyType({})
    )
    scheduler_hints: Mapping[str, Any] = dataclasses.field(
        default_factory=lambda: MappingProxyType({})
    )
    project_id: str | None = None
    image: Mapping[str, Any] | None = None
    host_ips: Mapping[str, str] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    resource_class: str = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        flavor = self.flavor
        object.__setattr__(
            self, "resource_class", requested_class(flavor.resource_class, flavor.extra_specs)
        )

    @classmethod
    def build(
        cls,
        flavor: Flavor,
        instance_uuid: str,
        *,
        live_members: frozenset[str],
        group: str | None = None,
        exclude_nodes: frozenset[str] = frozenset(),
        scheduler_hints: Mapping[str, Any] | None = None,
        project_id: str | None = None,
        image: Mapping[str, Any] | None = None,
        host_ips: Mapping[str, str] | None = None,
    ) -> RequestSpec:
        """A request with the flavor's capabilities parsed (uncached)."""
        hints = MappingProxyType(dict(scheduler_hints or {}))
        return cls(
            flavor=flavor,
            instance_uuid=instance_uuid,
            live_members=live_members,
            group=group,
            exclude_nodes=exclude_nodes,
            capabilities=parse_flavor_capabilities(flavor),
            unscoped_capabilities=parse_unscoped_capabilities(flavor),
            flavor_key=request_key(flavor_key(flavor), hints, project_id, image),
            scheduler_hints=hints,
            project_id=project_id,
            image=None if image is None else MappingProxyType(dict(image)),
            host_ips=MappingProxyType(dict(host_ips or {})),
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


def request_key(
    key_of_flavor: Hashable,
    scheduler_hints: Mapping[str, Any],
    project_id: str | None = None,
    image: Mapping[str, Any] | None = None,
) -> Hashable:
    """:attr:`RequestSpec.flavor_key`: the flavor's key, with the hints, project and image if any.

    Without them it is the flavor's key itself, so requests without hints
    share one cache entry per flavor as before hints existed.
    """
    # Of the image, only its disk format and properties are shown to Nova
    # filters: its checksums would make every build's key distinct and
    # defeat the cache.
    disk_format = None if image is None else image.get("disk_format", "")
    if not scheduler_hints and project_id is None and disk_format is None:
        return key_of_flavor
    context: tuple[Any, ...] = (project_id, disk_format)
    if context == (None, None):
        return (key_of_flavor, tuple(sorted(scheduler_hints.items())))
    properties = None if image is None else image.get("properties")
    if properties:
        context += (tuple(sorted(properties.items())),)
    return (key_of_flavor, tuple(sorted(scheduler_hints.items())), context)


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


def parse_unscoped_capabilities(flavor: Flavor) -> Mapping[str, CapabilityExpression]:
    """The unscoped extra specs of *flavor* (keys without a colon), parsed (read-only).

    Nova's ComputeCapabilitiesFilter checks an unscoped key against the
    host's attribute or stat of that name when the host has one, and
    ignores it otherwise; :class:`~conductor.scheduler.filters.CapabilitiesFilter`
    checks it against the node's capability of that name.  A stored value
    that does not parse (a flavor written before unscoped values were
    validated) is left out: it constrains no node, as before.
    """
    parsed: dict[str, CapabilityExpression] = {}
    for key, value in sorted(flavor.extra_specs.items()):
        if ":" not in key:
            result = expression_or_reason(value)
            if not isinstance(result, str):
                parsed[key] = result
    return MappingProxyType(parsed)
