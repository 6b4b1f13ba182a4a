# SPDX-License-Identifier: Apache-2.0
"""API v1's instance action history (Nova's ``os-instance-actions``), since 1.12.

Each create, delete, reboot, stop, start and rebuild of an instance, with
the request id that asked for it, who asked, when it started and ended,
and how (:mod:`conductor.db.instance_actions` says where they are recorded).
"""

from __future__ import annotations

from conductor.api.app import E400, E404, E503, Call, Reply, Route
from conductor.api.microversion import INSTANCE_ACTIONS

__all__ = ["ACTION_ROUTES"]


def list_actions(call: Call) -> Reply:
    actions = call.api.list_instance_actions(call.path["instance"])
    return Reply(200, {"instanceActions": actions})


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
        response="InstanceActionList",
        errors=(E400, E404, E503),
        min_version=INSTANCE_ACTIONS,
        tag="instances",
        description="Each create, delete, reboot, stop, start and rebuild, from the request "
        "that asked for it (request_id: its x-openstack-request-id) to the answer that ended "
        "it (finish_time null while in flight). A deleted instance's actions are shown; "
        "another project's instance is 404, unless the caller is an admin.",
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
