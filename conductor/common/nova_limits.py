# SPDX-License-Identifier: Apache-2.0
"""Nova's ``/limits`` of a project, from its ringfleet quota.

ringfleet limits instances and nodes per resource class; it counts no
cores nor RAM (a node is whole), so Nova's ``maxTotalCores`` and
``maxTotalRAMSize`` are -1 (unlimited) and their usage 0, as Nova shows a
quota it does not enforce.  The resource classes' limits are beside
``absolute``, in ``resource_classes``.  Shared by the API
(``GET /v1/limits``) and the CLI over RPC (``ringfleet limits show``).
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["ABSOLUTE", "nova_limits"]

_UNLIMITED: Final = -1
#: The quota resources (:mod:`conductor.db.quotas`'s names; the API does not import it).
_INSTANCES: Final = "instances"
_RESOURCE_CLASS_PREFIX: Final = "resource_class:"

#: Nova's absolute limits that ringfleet answers.
ABSOLUTE: Final = (
    "maxTotalInstances",
    "totalInstancesUsed",
    "maxTotalCores",
    "totalCoresUsed",
    "maxTotalRAMSize",
    "totalRAMUsed",
)


def nova_limits(quota: dict[str, Any]) -> dict[str, Any]:
    """Nova's ``limits`` of a quota as ``show_quota`` answers it."""
    quotas = quota["quotas"]
    instances = quotas.get(_INSTANCES, {"limit": _UNLIMITED, "in_use": 0})
    return {
        "rate": [],
        "absolute": {
            "maxTotalInstances": instances["limit"],
            "totalInstancesUsed": instances["in_use"],
            "maxTotalCores": _UNLIMITED,
            "totalCoresUsed": 0,
            "maxTotalRAMSize": _UNLIMITED,
            "totalRAMUsed": 0,
        },
        "resource_classes": {
            resource.removeprefix(_RESOURCE_CLASS_PREFIX): {
                "limit": q["limit"],
                "in_use": q["in_use"],
            }
            for resource, q in sorted(quotas.items())
            if resource.startswith(_RESOURCE_CLASS_PREFIX)
        },
    }
