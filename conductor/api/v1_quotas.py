# SPDX-License-Identifier: Apache-2.0
"""API v1's quotas: a project's limits and usage, shown, set and dropped (admins).

``key_pairs`` (Nova's, per user) is shown and set from microversion 1.13;
before it, the replies leave it out and a body naming it is refused, as then.
"""

from __future__ import annotations

from typing import Any

from conductor.api.app import E400, E503, ApiError, Call, Reply, Route
from conductor.api.microversion import NOVA_HABITS, TENANCY
from conductor.common.schemas import Resource

#: The quota resource shown and set from 1.13 on.
_KEY_PAIRS = "key_pairs"

__all__ = ["QUOTA_ROUTES"]

QUOTA_SET = Resource(
    name="QuotaSet",
    description="Limits to set: instances, key_pairs (since 1.13) or resource_class:<class> "
    "to a whole number (-1 unlimited); the project's other limits are kept.",
    properties={"quotas": {"type": "object", "additionalProperties": {"type": "integer"}}},
    required=frozenset({"quotas"}),
    null_means_absent=False,
)


def _without_key_pairs(value: Any, key: str) -> Any:
    """*value* (a conductor's reply, passed on as is otherwise) without
    key_pairs in its mapping *key*."""
    if not isinstance(value, dict) or not isinstance(value.get(key), dict):
        return value
    return {**value, key: {k: v for k, v in value[key].items() if k != _KEY_PAIRS}}


def _shown(call: Call, quota: Any) -> Reply:
    """A quota as the call's microversion shows it (no key_pairs before 1.13)."""
    return Reply(200, quota if call.version >= NOVA_HABITS else _without_key_pairs(quota, "quotas"))


def list_quotas(call: Call) -> Reply:
    listed = call.api.list_quotas()
    if call.version < NOVA_HABITS and isinstance(listed, list):
        # A project whose only own limit is key_pairs had none before 1.13.
        listed = [
            shown
            for shown in (_without_key_pairs(p, "limits") for p in listed)
            if not isinstance(shown, dict) or shown.get("limits") != {}
        ]
    return Reply(200, {"quotas": listed})


def show_quota(call: Call) -> Reply:
    return _shown(call, call.api.show_quota(call.path["project_id"]))


def set_quota(call: Call) -> Reply:
    quotas = call.body["quotas"]
    if call.version < NOVA_HABITS and isinstance(quotas, dict) and _KEY_PAIRS in quotas:
        raise ApiError.invalid(
            f"quotas.{_KEY_PAIRS}", "not a quota before microversion 1.13", quotas[_KEY_PAIRS]
        )
    return _shown(call, call.api.set_quota(call.path["project_id"], quotas))


def delete_quota(call: Call) -> Reply:
    return _shown(call, call.api.delete_quota(call.path["project_id"]))


QUOTA_ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/v1/quotas",
        list_quotas,
        "ringfleet:quota:list",
        "listQuotas",
        "The projects with quotas of their own, and them.",
        response="QuotaList",
        errors=(E503,),
        tag="quotas",
        min_version=TENANCY,
    ),
    Route(
        "GET",
        "/v1/quotas/{project_id}",
        show_quota,
        "ringfleet:quota:get",
        "showQuota",
        "A project's limits and usage, per resource.",
        response="Quota",
        errors=(E400, E503),
        tag="quotas",
        min_version=TENANCY,
        description="Resources: instances, resource_class:<class> (nodes of that "
        "class, one per instance of a flavor of it) and, since 1.13, key_pairs (Nova's: "
        "counted per user, so its in_use is the caller's own key pairs; the limit is each "
        "user's when creating in this project). A limit of -1 is unlimited; "
        "default tells a [quota] default from the project's own limit.",
    ),
    Route(
        "PUT",
        "/v1/quotas/{project_id}",
        set_quota,
        "ringfleet:quota:update",
        "setQuota",
        "Set some of a project's own limits (the others are kept).",
        body=QUOTA_SET.name,
        response="Quota",
        envelope=QUOTA_SET,
        errors=(E400, E503),
        tag="quotas",
        min_version=TENANCY,
        description="A limit below the usage refuses the project's next builds and "
        "touches none of its instances.",
    ),
    Route(
        "DELETE",
        "/v1/quotas/{project_id}",
        delete_quota,
        "ringfleet:quota:update",
        "deleteQuota",
        "Drop a project's own limits: the defaults apply again.",
        response="Quota",
        errors=(E400, E503),
        tag="quotas",
        min_version=TENANCY,
    ),
)
