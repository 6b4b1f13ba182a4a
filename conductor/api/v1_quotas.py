# SPDX-License-Identifier: Apache-2.0
"""API v1's quotas: a project's limits and usage, shown, set and dropped (admins)."""

from __future__ import annotations

from conductor.api.app import E400, E503, Call, Reply, Route
from conductor.api.microversion import TENANCY
from conductor.common.schemas import Resource

__all__ = ["QUOTA_ROUTES"]

QUOTA_SET = Resource(
    name="QuotaSet",
    description="Limits to set: instances or resource_class:<class> to a whole number "
    "(-1 unlimited); the project's other limits are kept.",
    properties={"quotas": {"type": "object", "additionalProperties": {"type": "integer"}}},
    required=frozenset({"quotas"}),
    null_means_absent=False,
)


def list_quotas(call: Call) -> Reply:
    return Reply(200, {"quotas": call.api.list_quotas()})


def show_quota(call: Call) -> Reply:
    return Reply(200, call.api.show_quota(call.path["project_id"]))


def set_quota(call: Call) -> Reply:
    return Reply(200, call.api.set_quota(call.path["project_id"], call.body["quotas"]))


def delete_quota(call: Call) -> Reply:
    return Reply(200, call.api.delete_quota(call.path["project_id"]))


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
        description="Resources: instances, and resource_class:<class> (nodes of that "
        "class, one per instance of a flavor of it). A limit of -1 is unlimited; "
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
