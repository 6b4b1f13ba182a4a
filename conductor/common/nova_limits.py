# SPDX-License-Identifier: Apache-2.0
"""Nova's ``/limits`` of a project, from its ringfleet quota.

ringfleet limits instances and nodes per resource class; it counts no
cores nor RAM (a node is whole), so Nova's ``maxTotalCores`` and
``maxTotalRAMSize`` are -1 (unlimited) and their usage 0, as Nova shows a
quota it does not enforce.  The resource classes' limits are beside
``absolute``, in ``resource_classes``.  Key pairs (Nova's
``maxTotalKeypairs``; API 1.13) come with ``totalKeyPairsUsed``, the
caller's own key pairs (they count per user), which Nova's ``/limits``
does not show.  ``maxServerMeta`` (API 1.14) is the metadata items an
instance may have: 128, Nova's default, fixed.  Shared by the API
(``GET /v1/limits``) and the CLI over RPC (``ringfleet limits show``).
"""

from __future__ import annotations

from typing import Any, Final

from conductor.common.schemas import MAX_METADATA_ITEMS

__all__ = ["ABSOLUTE", "KEY_PAIR_LIMITS", "SERVER_META_LIMIT", "nova_limits"]

_UNLIMITED: Final = -1
#: The quota resources (:mod:`conductor.db.quotas`'s names; the API does not import it).
_INSTANCES: Final = "instances"
_KEY_PAIRS: Final = "key_pairs"
#: The key pair limit of a conductor older than API 1.23 (fixed, per user).
_OLD_KEY_PAIRS: Final = 100
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
#: Nova's key pair limit, and its usage (ringfleet's name, after Nova's other totals).
KEY_PAIR_LIMITS: Final = ("maxTotalKeypairs", "totalKeyPairsUsed")
#: Nova's limit of an instance's metadata items.
SERVER_META_LIMIT: Final = "maxServerMeta"


def nova_limits(
    quota: dict[str, Any], key_pairs: bool = True, server_meta: bool = True
) -> dict[str, Any]:
    """Nova's ``limits`` of a quota as ``show_quota`` answers it
    (``key_pairs``: with the key pair limit and usage, as from API 1.13;
    ``server_meta``: with ``maxServerMeta``, as from API 1.14)."""
    quotas = quota["quotas"]
    unset = {"limit": _UNLIMITED, "in_use": 0}
    instances = quotas.get(_INSTANCES, unset)
    absolute = {
        "maxTotalInstances": instances["limit"],
        "totalInstancesUsed": instances["in_use"],
        "maxTotalCores": _UNLIMITED,
        "totalCoresUsed": 0,
        "maxTotalRAMSize": _UNLIMITED,
        "totalRAMUsed": 0,
    }
    if key_pairs:
        # A conductor older than API 1.23 shows no key_pairs: it enforced
        # Nova's default, 100 per user, and says no usage.
        keys = quotas.get(_KEY_PAIRS, {"limit": _OLD_KEY_PAIRS, "in_use": 0})
        absolute |= {"maxTotalKeypairs": keys["limit"], "totalKeyPairsUsed": keys["in_use"]}
    if server_meta:
        absolute[SERVER_META_LIMIT] = MAX_METADATA_ITEMS
    return {
        "rate": [],
        "absolute": absolute,
        "resource_classes": {
            resource.removeprefix(_RESOURCE_CLASS_PREFIX): {
                "limit": q["limit"],
                "in_use": q["in_use"],
            }
            for resource, q in sorted(quotas.items())
            if resource.startswith(_RESOURCE_CLASS_PREFIX)
        },
    }
