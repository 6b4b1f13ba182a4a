# SPDX-License-Identifier: Apache-2.0
"""API v1's nodes: enroll, import, sync, show, change, power, move and forget them."""

from __future__ import annotations

from conductor.api.app import E400, E404, E409, E503, Call, Param, Reply, Route
from conductor.api.microversion import EVERY_CLASH, VERBS_VERSION
from conductor.api.v1_paging import LIMIT, MARKER, page, page_limit
from conductor.common import schemas
from conductor.common.schemas import Resource

__all__ = ["NODE_ROUTES"]

NODE_FILTERS = (
    Param("resource_class", "string", "Only nodes of this resource class."),
    Param("group", "string", "Only nodes of this group ('' is the default group)."),
    Param("owner", "string", "Only nodes owned by this agent."),
    Param("provision_state", "string", "Only nodes in this provision state."),
    Param("maintenance", "boolean", "Only nodes in (true) or out of (false) maintenance."),
    Param("pinned", "boolean", "Only nodes that host an instance (true) or not (false)."),
)

# The API's own request bodies: envelopes around the conductor's payloads,
# checked by the application before the call (Route.envelope).
NODE_IMPORT = Resource(
    name="NodeImport",
    description="Nodes to enroll in one transaction (all or nothing), or to check (dry_run).",
    properties={
        "nodes": {
            "type": "array",
            "items": {"$ref": "#/components/schemas/NodeSpec"},
            "maxItems": schemas.MAX_BATCH,
        },
        "dry_run": {"type": "boolean"},
        "every_clash": {"type": "boolean"},
    },
    required=frozenset({"nodes"}),
    null_means_absent=False,
)

MAINTENANCE = Resource(
    name="Maintenance",
    description="In or out of maintenance; a reason only when entering it.",
    properties={"maintenance": {"type": "boolean"}, "reason": {"type": ["string", "null"]}},
    required=frozenset({"maintenance"}),
    null_means_absent=False,
)

NODE_POWER = Resource(
    name="NodePower",
    description="The power state to reach, in Ironic's names.",
    properties={
        "target": {
            "type": "string",
            "enum": ["power on", "power off", "rebooting", "soft power off", "soft rebooting"],
        }
    },
    required=frozenset({"target"}),
    null_means_absent=False,
)

MOVE = Resource(
    name="Move",
    description="The live agent to move the node to.",
    properties={"host": {"type": "string"}},
    required=frozenset({"host"}),
    null_means_absent=False,
)


def list_nodes(call: Call) -> Reply:
    filters = {p.name: call.query[p.name] for p in NODE_FILTERS if p.name in call.query}
    limit = page_limit(call)
    items = call.api.list_nodes(
        filters=filters or None, limit=limit, marker=call.query.get("marker")
    )
    return page(call, "nodes", items, limit)


def show_node(call: Call) -> Reply:
    return Reply(200, call.api.show_node(call.path["node"]))


def create_node(call: Call) -> Reply:
    node = call.api.create_node(call.body)
    location = f"{call.base_url}/v1/nodes/{node['uuid']}"
    return Reply(201, node, {"Location": location})


def import_nodes(call: Call) -> Reply:
    dry_run = call.body.get("dry_run", False)
    every_clash = call.body.get("every_clash", False)
    result = call.api.import_nodes(call.body["nodes"], dry_run=dry_run, every_clash=every_clash)
    return Reply(200 if dry_run else 201, result)


def sync_nodes(call: Call) -> Reply:
    return Reply(200, call.api.sync_ironic_nodes())


def set_node(call: Call) -> Reply:
    return Reply(200, call.api.set_node(call.path["node"], call.body))


def set_node_power(call: Call) -> Reply:
    """202 with the node as it is: its owner powers it in the background."""
    return Reply(202, call.api.set_node_power_state(call.path["node"], call.body["target"]))


def delete_node(call: Call) -> Reply:
    call.api.delete_node(call.path["node"])
    return Reply(204)


def set_maintenance(call: Call) -> Reply:
    maintenance, reason = call.body["maintenance"], call.body.get("reason")
    return Reply(200, call.api.set_node_maintenance(call.path["node"], maintenance, reason))


def node_owner(call: Call) -> Reply:
    return Reply(200, call.api.node_owner(call.path["node"]))


def move_node(call: Call) -> Reply:
    return Reply(200, call.api.move_node(call.path["node"], call.body["host"]))


NODE_ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/v1/nodes",
        list_nodes,
        "ringfleet:node:list",
        "listNodes",
        "List nodes, in uuid order, a page at a time.",
        query=(*NODE_FILTERS, LIMIT, MARKER),
        response="NodeList",
        errors=(E400, E503),
        tag="nodes",
    ),
    Route(
        "POST",
        "/v1/nodes",
        create_node,
        "ringfleet:node:create",
        "createNode",
        "Enroll one node.",
        status=201,
        body="NodeSpec",
        response="Node",
        errors=(E400, E409, E503),
        tag="nodes",
        description="Give the node a uuid to make retries safe: a retry then "
        "gets 409 on uuid, which means the first attempt was stored.",
    ),
    Route(
        "POST",
        "/v1/nodes/import",
        import_nodes,
        "ringfleet:node:create",
        "importNodes",
        "Enroll many nodes in one transaction (all or nothing), or check them (dry_run).",
        status=201,
        body=NODE_IMPORT.name,
        response="ImportResult",
        envelope=NODE_IMPORT,
        errors=(E400, E409, E503),
        tag="nodes",
        fields_since={"every_clash": EVERY_CLASH},
        # A dry_run stores nothing: 200 with what was checked.
        other_statuses=(200,),
    ),
    Route(
        "POST",
        "/v1/nodes/sync",
        sync_nodes,
        "ringfleet:node:sync",
        "syncNodes",
        "Import OpenStack Ironic's inventory now: one pass of the sync.",
        response="SyncSummary",
        errors=(E409, E503),
        tag="nodes",
        description=(
            "What the conductor's ``[ironic] sync_interval`` pass does, run now by the "
            "conductor that takes the call: new Ironic nodes are enrolled, changed ones "
            "updated, removed ones retired.  409 ``ringfleet.not_configured`` when the "
            "conductors are not configured to reach Ironic."
        ),
    ),
    Route(
        "GET",
        "/v1/nodes/{node}",
        show_node,
        "ringfleet:node:get",
        "showNode",
        "Show a node, by uuid or name.",
        response="Node",
        errors=(E400, E404, E503),
        tag="nodes",
    ),
    Route(
        "PATCH",
        "/v1/nodes/{node}",
        set_node,
        "ringfleet:node:update",
        "setNode",
        "Change a node's properties, traits or resource class.",
        body="NodeUpdate",
        response="Node",
        errors=(E400, E404, E409, E503),
        tag="nodes",
    ),
    Route(
        "PUT",
        "/v1/nodes/{node}/maintenance",
        set_maintenance,
        "ringfleet:node:update",
        "setNodeMaintenance",
        "Put a node in or out of maintenance.",
        body=MAINTENANCE.name,
        response="Node",
        envelope=MAINTENANCE,
        errors=(E400, E404, E503),
        tag="nodes",
    ),
    Route(
        "PUT",
        "/v1/nodes/{node}/states/power",
        set_node_power,
        "ringfleet:node:power",
        "setNodePowerState",
        "Power a node on or off, or reboot it (operator call); answers at once (202).",
        status=202,
        body=NODE_POWER.name,
        response="Node",
        envelope=NODE_POWER,
        errors=(E400, E404, E409, E503),
        min_version=VERBS_VERSION,
        tag="nodes",
        description=(
            "The node's owner, called at its epoch as for a build, does it in the "
            "background; the node's power_state follows. Nothing records the request: "
            "if the owner dies meanwhile, issue it again. An instance on the node keeps "
            "its state: tenants use the instance actions."
        ),
    ),
    Route(
        "DELETE",
        "/v1/nodes/{node}",
        delete_node,
        "ringfleet:node:delete",
        "deleteNode",
        "Forget a node in maintenance that hosts nothing (never deleted in Ironic).",
        status=204,
        errors=(E400, E404, E409, E503),
        min_version=VERBS_VERSION,
        tag="nodes",
        description=(
            "409 naming why when the node hosts an instance, is not in maintenance, or "
            "was imported from Ironic and would be imported again by the next sync "
            "(tag it CUSTOM_RINGFLEET_EXCLUDE in Ironic, or remove it there, first)."
        ),
    ),
    Route(
        "GET",
        "/v1/nodes/{node}/owner",
        node_owner,
        "ringfleet:node:get",
        "showNodeOwner",
        "Who owns a node, and whom the ring assigns it to.",
        response="NodeOwner",
        errors=(E400, E404, E503),
        tag="nodes",
    ),
    Route(
        "POST",
        "/v1/nodes/{node}/move",
        move_node,
        "ringfleet:node:move",
        "moveNode",
        "Move a node to another live agent (operator call).",
        body=MOVE.name,
        response="Node",
        envelope=MOVE,
        errors=(E400, E404, E409, E503),
        tag="nodes",
    ),
)
