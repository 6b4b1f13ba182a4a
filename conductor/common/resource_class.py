# SPDX-License-Identifier: Apache-2.0
"""Resource classes as Placement names them, and what a flavor's ``resources:`` asks for.

Nova's ironic driver reports each node as one unit of its resource class,
normalized by ``os_resource_classes.normalize_name``: every run of
characters other than ASCII letters and digits becomes ``_``, the result is
upper-cased and prefixed with ``CUSTOM_`` (always: a node whose class is
already ``CUSTOM_GOLD`` is ``CUSTOM_CUSTOM_GOLD`` in Placement).  A Nova
flavor asks for nodes by ``resources:CUSTOM_<CLASS>=1``, with its standard
resources zeroed (``resources:VCPU=0``, ``MEMORY_MB``, ``DISK_GB``).

The scheduler (Placement's half, :mod:`conductor.scheduler.filters`), the
flavor validation and the Placement reporter all use these rules, so that a
flavor means the nodes Placement would offer for it in Nova.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Final

__all__ = [
    "CUSTOM_PREFIX",
    "RESOURCES_SCOPE",
    "placement_name",
    "requested_class",
    "resource_amounts",
]

#: Placement's prefix of custom resource classes
CUSTOM_PREFIX: Final = "CUSTOM_"
#: the extra-spec prefix of Placement resource requests (the unnumbered group)
RESOURCES_SCOPE: Final = "resources:"

_NOT_ALNUM: Final = re.compile("[^0-9A-Za-z]+")


@functools.lru_cache(maxsize=1024)
def placement_name(resource_class: str) -> str:
    """A node's (or flavor's) resource class as Placement's custom class, as Nova names it.

    ``baremetal-gold``, ``baremetal.gold`` and ``BAREMETAL_GOLD`` are all
    ``CUSTOM_BAREMETAL_GOLD``.  Cached: a fleet has few distinct classes and
    the node index normalizes every node it holds.
    """
    return CUSTOM_PREFIX + _NOT_ALNUM.sub("_", resource_class).upper()


def resource_amounts(extra_specs: Mapping[str, str]) -> dict[str, int | None]:
    """The flavor's ``resources:<CLASS>`` specs: class -> amount (``None``: not an integer)."""
    amounts: dict[str, int | None] = {}
    for key, value in extra_specs.items():
        if key.startswith(RESOURCES_SCOPE):
            text = value.strip()
            amounts[key[len(RESOURCES_SCOPE) :]] = (
                int(text) if text.isascii() and text.isdigit() else None
            )
    return amounts


def requested_class(resource_class: str, extra_specs: Mapping[str, str]) -> str:
    """The Placement class a flavor's build needs one unit of; ``""`` when no node can offer it.

    A ``resources:CUSTOM_<X>=1`` spec names it (as in Nova); without one,
    the flavor's own ``resource_class``, normalized.  Flavors are validated
    when created (:func:`conductor.validation.flavor.validate_flavor_spec`
    refuses one whose ``resources:`` contradicts its class); a stored flavor
    asking for what no bare-metal node offers (another class, more than one
    unit, a non-zero standard resource, its own class zeroed) gets ``""``:
    Placement would offer no candidate for it, and neither does the
    scheduler.
    """
    amounts = resource_amounts(extra_specs)
    own = placement_name(resource_class)
    wanted = {name for name, amount in amounts.items() if amount != 0}
    if not wanted:
        return "" if own in amounts else own
    if len(wanted) == 1:
        (name,) = wanted
        if name.startswith(CUSTOM_PREFIX) and amounts[name] == 1:
            return name
    return ""
