# SPDX-License-Identifier: Apache-2.0
"""API v1's limits (Nova's ``GET /limits``), since 1.11: a project's quotas
and usage in Nova's shape (:mod:`conductor.common.nova_limits`), from the
conductor's ``show_quota`` (as ``GET /v1/quotas/{project_id}``).
"""

from __future__ import annotations

from conductor.api import auth
from conductor.api.app import E400, E503, ApiError, Call, Param, Reply, Route
from conductor.api.microversion import LIMITS, NOVA_ANSWERS, NOVA_HABITS
from conductor.api.v1_instances import PROJECT_PATTERN
from conductor.common.nova_limits import nova_limits

__all__ = ["LIMITS_OTHER_RULE", "LIMITS_ROUTES"]

#: Who may ask for another project's limits (Nova's ``os_compute_api:limits:other_project``).
LIMITS_OTHER_RULE = "ringfleet:limits:other_project"


def show_limits(call: Call) -> Reply:
    credentials = call.request.environ.get(auth.CREDENTIALS)
    own = getattr(credentials, "project_id", None)
    project = call.query.get("tenant_id", own)
    if project is None:
        raise ApiError.invalid("tenant_id", "required: the caller's token has no project")
    if project != own and not call.allowed(LIMITS_OTHER_RULE):
        raise ApiError(
            403,
            "ringfleet.forbidden",
            f"tenant_id: policy does not allow {LIMITS_OTHER_RULE}",
            fields=[{"field": "tenant_id", "reason": f"policy does not allow {LIMITS_OTHER_RULE}"}],
        )
    quota = call.api.show_quota(project)
    limits = nova_limits(
        quota,
        key_pairs=call.version >= NOVA_HABITS,
        server_meta=call.version >= NOVA_ANSWERS,
    )
    return Reply(200, {"limits": limits})


LIMITS_ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/v1/limits",
        show_limits,
        "ringfleet:limits:get",
        "showLimits",
        "The caller's project's limits and usage, in Nova's /limits shape.",
        query=(
            Param(
                "tenant_id",
                "string",
                "Another project's limits (admins: policy ringfleet:limits:other_project).",
                pattern=PROJECT_PATTERN,
            ),
        ),
        response="Limits",
        errors=(E400, E503),
        min_version=LIMITS,
        tag="quotas",
        description="absolute: maxTotalInstances and totalInstancesUsed from the project's "
        "quota (-1 unlimited); maxTotalCores and maxTotalRAMSize are -1 and their usage 0 "
        "(ringfleet counts whole nodes, per resource class: resource_classes). Since 1.13 "
        "maxTotalKeypairs (Nova's; each user's limit in this project) and totalKeyPairsUsed "
        "(ringfleet's: the caller's own key pairs, as they count per user). Since 1.14 "
        "maxServerMeta (Nova's: the metadata items an instance may have). rate is "
        "always empty, as Nova's since its 2.39.",
    ),
)
