# SPDX-License-Identifier: Apache-2.0
"""Scheduler filters: which nodes a build may land on.

A filter answers, for one node and one request, "may this build go there?".
The chain is the filters that are always applied, in the order of
:data:`ALWAYS_APPLIED`, followed by the configurable ones named in ``[scheduler]
enabled_filters``.  The always-applied filters are Placement's half of
Nova's scheduling (the resource class as Nova normalizes it, availability as
Placement offers a node, required and forbidden traits), then the group
hint, live owners and a reschedule's exclusions.  They are what the node
index is organized by (resource class and group are its bucket keys, only
free nodes are in its buckets, traits are part of a profile, owners are
checked once per owner), so the scheduler answers them without calling them
per node; their ``filter`` methods still define the semantics, and are what
"no valid node" counts with.

Writing a filter (operators' plugins)
-------------------------------------
Subclass :class:`BaseFilter`, implement :meth:`BaseFilter.filter`, and
register the class as an entry point in the ``ringfleet.scheduler.filters``
namespace, e.g. in a ``pyproject.toml``::

    [project.entry-points."ringfleet.scheduler.filters"]
    RackFilter = "mysite.filters:RackFilter"

then add ``RackFilter`` to ``[scheduler] enabled_filters``.  Register the
class under its :attr:`BaseFilter.name` (the class name unless it sets
another): that is what "no valid node" messages call it.  The class is
instantiated once, without arguments, when the scheduler starts; ``filter``
is then called from several threads and must not block or do I/O (it runs
while the index is locked).  ``node`` is a :class:`~conductor.common.objects.Node`
as the conductor's index knows it: its ``created_at`` and ``updated_at`` may
be missing, and its mappings are read-only.

A filter that looks only at ``node.resource_class``, ``node.group``,
``node.traits``, ``node.capabilities`` (and the ``cpu_arch`` and
``capabilities`` of ``node.properties``) and ``request.flavor`` (or
``request.capabilities``, which comes from the flavor) should set
``per_profile = True``: it is then called once per distinct combination of
those node attributes and flavor, not once per node, which keeps a decision
independent of the fleet size.  Any other filter is called per node, on the
nodes the scheduler is about to choose from.  A per-profile filter that also
reads ``request.scheduler_hints`` must set ``reads_hints = True``: its
verdicts are then cached per flavor *and hints*.  (Otherwise the hints are
left out of the cache key, so that clients sending hints nobody reads do not
defeat the cache.)

A filter whose verdict also depends on the node's owner (``node.owner``,
or its address in ``request.host_ips``) but on nothing else of the node may
set ``per_owner = True`` instead: it is then called once per profile and
owning agent.

Filters written for Nova (``host_passes(host_state, spec_obj)``) need no
rewrite: name them by import path (:mod:`conductor.scheduler.nova`).
"""

from __future__ import annotations

from typing import ClassVar

from conductor.common.objects import Node
from conductor.common.resource_class import placement_name
from conductor.scheduler.index import is_free
from conductor.scheduler.request import RequestSpec

__all__ = [
    "ALWAYS_APPLIED",
    "LISTABLE",
    "AvailabilityFilter",
    "BaseFilter",
    "CapabilitiesFilter",
    "GroupFilter",
    "LiveOwnerFilter",
    "ResourceClassFilter",
    "RetryFilter",
    "TraitsFilter",
]


class BaseFilter:
    """Base class of every scheduler filter.

    :cvar name: how the configuration and "no valid node" messages name the
        filter; the class name unless a subclass sets it
    :cvar per_profile: see the module documentation
    :cvar per_owner: see the module documentation (ignored when ``per_profile``)
    :cvar reads_hints: see the module documentation
    """

    name: ClassVar[str] = "BaseFilter"
    per_profile: ClassVar[bool] = False
    per_owner: ClassVar[bool] = False
    reads_hints: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__

    def filter(self, node: Node, request: RequestSpec) -> bool:
        """Whether the build of *request* may go to *node*."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


# -- always applied, in this order ------------------------------------------------
#
# The first four are Placement's half of Nova's scheduling: what Placement's
# allocation candidates offer an ironic flavor in Nova, before any of Nova's
# filters runs, whatever ``enabled_filters`` says.


class ResourceClassFilter(BaseFilter):
    """The node offers the Placement class the flavor asks one unit of.

    Both sides are named as Nova names them (:mod:`conductor.common.resource_class`):
    the node's class normalized (``baremetal.gold`` is ``CUSTOM_BAREMETAL_GOLD``),
    the flavor's from its ``resources:CUSTOM_<X>=1`` spec, else its own class
    normalized.
    """

    per_profile = True

    def filter(self, node: Node, request: RequestSpec) -> bool:
        return placement_name(node.resource_class) == request.resource_class


class GroupFilter(BaseFilter):
    """With a group hint, only nodes of that group (``""`` is the default group)."""

    def filter(self, node: Node, request: RequestSpec) -> bool:
        return request.group is None or node.group == request.group


class AvailabilityFilter(BaseFilter):
    """Only nodes Placement would offer: ``available``, not in maintenance,
    hosting no instance, power state known (Nova's ironic driver reserves
    the others' one unit)."""

    def filter(self, node: Node, request: RequestSpec) -> bool:
        return is_free(node)


class TraitsFilter(BaseFilter):
    """The node has every required trait of the flavor and none of the forbidden.

    The flavor's ``trait:<TRAIT>=required|forbidden`` extra specs are merged
    into its trait sets when it is created, so this is Placement's trait
    check.  Always applied; listing it in ``enabled_filters`` changes nothing.
    """

    per_profile = True

    def filter(self, node: Node, request: RequestSpec) -> bool:
        flavor = request.flavor
        return flavor.required_traits <= node.traits and node.traits.isdisjoint(
            flavor.forbidden_traits
        )


class LiveOwnerFilter(BaseFilter):
    """Only nodes owned by a live member (the agent the build is routed to)."""

    def filter(self, node: Node, request: RequestSpec) -> bool:
        return node.owner is not None and node.owner in request.live_members


class RetryFilter(BaseFilter):
    """Not the nodes a reschedule was told to avoid (earlier failed attempts)."""

    def filter(self, node: Node, request: RequestSpec) -> bool:
        return node.uuid not in request.exclude_nodes


#: filter classes applied to every request, first, in this order
ALWAYS_APPLIED: tuple[type[BaseFilter], ...] = (
    ResourceClassFilter,
    GroupFilter,
    AvailabilityFilter,
    TraitsFilter,
    LiveOwnerFilter,
    RetryFilter,
)

#: always-applied filters that ``enabled_filters`` may still list (they were
#: configurable once): listed, they are not applied a second time
LISTABLE: frozenset[str] = frozenset({TraitsFilter.name})


# -- configurable ------------------------------------------------------------------


class CapabilitiesFilter(BaseFilter):
    """Every ``capabilities:<key>`` extra spec matches the node's capability.

    Nova's ComputeCapabilitiesFilter semantics (see
    :meth:`conductor.validation.capabilities.CapabilityExpression.matches`): a node
    without the capability never matches, ``= N`` means "at least N",
    ``s==`` compares strings, ``<in>`` looks for a substring, ``<or>``
    accepts one of several words.  As in Nova, an unscoped extra spec
    (``boot_mode``, no colon) is a requirement too, but only on nodes that
    have a capability of that name: the others pass.
    """

    per_profile = True

    def filter(self, node: Node, request: RequestSpec) -> bool:
        capabilities = node.capabilities
        if not all(
            expression.matches(capabilities.get(key))
            for key, expression in request.capabilities.items()
        ):
            return False
        for key, expression in request.unscoped_capabilities.items():
            value = capabilities.get(key)
            if value is not None and not expression.matches(value):
                return False
        return True
