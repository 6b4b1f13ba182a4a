# SPDX-License-Identifier: Apache-2.0
"""API v1's instance action history (Nova's ``os-instance-actions``), since 1.12.

Each create, delete, reboot, stop, start and rebuild of an instance, with
the request id that asked for it, who asked, when it started and ended,
and how (:mod:`conductor.db.instance_actions` says where they are recorded).
Since 1.13 a page at a time, as Nova's 2.58 and 2.66: ``limit``,
``marker`` (a request id), ``changes-since``, ``changes-before``, and a
``next`` link when the page is full; since 1.14 a marker the instance has
no action of is 400 naming it, as Nova's.
"""

from __future__ import annotations

from conductor.api.app import E400, E404, E503, Call, Param, Reply, Route
from conductor.api.microversion import INSTANCE_ACTIONS, NOVA_HABITS
from conductor.api.v1_paging import marker_in_list, page, page_limit
from conductor.common.exception import FieldError, InstanceActionNotFound, InvalidInput
from conductor.common.list_filters import check_instant

__all__ = ["ACTION_ROUTES"]

_INSTANT = "an ISO 8601 instant; UTC without a zone"
#: The query parameters of the list (1.13), each by its RPC argument.
ACTION_PAGING = (
    Param(
        "limit",
        "integer",
        "At most this many actions (capped to [api] max_limit); a full page has a next link.",
        minimum=1,
        maximum=999_999_999,
        min_version=NOVA_HABITS,
    ),
    Param(
        "marker",
        "string",
        "The request_id of the previous page's last action (one the instance does not "
        "have: 400 naming marker, as Nova's, since 1.14; 404 below).",
        min_version=NOVA_HABITS,
        pattern="^[A-Za-z0-9._-]{1,255}$",
    ),
    Param(
        "changes-since",
        "string",
        f"Only actions updated at or after this instant ({_INSTANT}).",
        min_version=NOVA_HABITS,
        format="date-time",
    ),
    Param(
        "changes-before",
        "string",
        f"Only actions updated at or before this instant ({_INSTANT}).",
        min_version=NOVA_HABITS,
        format="date-time",
    ),
)


def list_actions(call: Call) -> Reply:
    instance = call.path["instance"]
    if call.version < NOVA_HABITS:
        return Reply(200, {"instanceActions": call.api.list_instance_actions(instance)})
    errors: list[FieldError] = []
    for name in ("changes-since", "changes-before"):
        # Checked here too: a bad one is named without a conductor call.
        check_instant(call.query.get(name), name, errors)
    if errors:
        raise InvalidInput(errors)
    limit = page_limit(call)
    with marker_in_list(call, InstanceActionNotFound):
        actions = call.api.list_instance_actions(
            instance,
            limit=limit,
            marker=call.query.get("marker"),
            changes_since=call.query.get("changes-since"),
            changes_before=call.query.get("changes-before"),
        )
    return page(call, "instanceActions", actions, limit, marker_key="request_id")


def show_action(call: Call) -> Reply:
    action = call.api.show_instance_action(call.path["instance"], call.path["request_id"])
    return Reply(200, {"instanceAction": action})


ACTION_ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/v1/instances/{instance}/actions",
        list_actions,
        "ringfleet:instance:actions:list",
        "listInstanceActions",
        "An instance's actions, the newest first (Nova's os-instance-actions).",
        query=ACTION_PAGING,
        response="InstanceActionList",
        errors=(E400, E404, E503),
        min_version=INSTANCE_ACTIONS,
        tag="instances",
        description="Each create, delete, reboot, stop, start and rebuild, from the request "
        "that asked for it (request_id: its x-openstack-request-id) to the answer that ended "
        "it (finish_time null while in flight). A deleted instance's actions are shown; "
        "another project's instance is 404, unless the caller is an admin. Since 1.13 a "
        "page at a time (limit, marker: a request_id; a full page has next, the link to "
        "the following one) and filtered on updated_at by changes-since and "
        "changes-before (Nova's 2.58 and 2.66).",
    ),
    Route(
        "GET",
        "/v1/instances/{instance}/actions/{request_id}",
        show_action,
        "ringfleet:instance:actions:show",
        "showInstanceAction",
        "One action of an instance, by its request id, with its events.",
        response="InstanceActionDetail",
        errors=(E400, E404, E503),
        min_version=INSTANCE_ACTIONS,
        tag="instances",
        description="404 when the instance has no action of that request id.",
    ),
)
