# SPDX-License-Identifier: Apache-2.0
"""The routes of API v1 and their handlers: each calls the conductors over RPC.

:data:`ROUTES` is the one table the application dispatches on, checks
policy with and generates the OpenAPI document from.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from conductor.api import microversion
from conductor.api.app import ApiError, Call, Param, Reply, Route
from conductor.api.microversion import ANY_EXTRA_SPECS, REBUILD_IMAGE, VERBS_VERSION
from conductor.common import schemas, verbs
from conductor.common.instance_states import TRANSITIONS, Event
from conductor.common.objects import VmState
from conductor.common.schemas import CAPABILITIES_SCOPE, TRAIT_SCOPE, Resource

__all__ = ["ROUTES"]

LIMIT = Param("limit", "integer", "At most this many items (capped to [api] max_limit).", 1)
MARKER = Param("marker", "string", "The uuid of the last item of the previous page.")
NODE_FILTERS = (
    Param("resource_class", "string", "Only nodes of this resource class."),
    Param("group", "string", "Only nodes of this group ('' is the default group)."),
    Param("owner", "string", "Only nodes owned by this agent."),
    Param("provision_state", "string", "Only nodes in this provision state."),
    Param("maintenance", "boolean", "Only nodes in (true) or out of (false) maintenance."),
    Param("pinned", "boolean", "Only nodes that host an instance (true) or not (false)."),
)
INSTANCE_FILTERS = (
    Param(
        "vm_state",
        "string",
        ", ".join(state.value for state in list(VmState)[:-1])
        + f" or {list(VmState)[-1].value} (without it, deleted instances are left out).",
    ),
    Param("host", "string", "Only instances on this agent."),
    Param(
        "all_projects",
        "boolean",
        "Every project's instances, not only the caller's (admins).",
        min_version=microversion.Version(1, 2),
    ),
    Param(
        "project_id",
        "string",
        "Only this project's instances (admins).",
        min_version=microversion.Version(1, 2),
    ),
)
#: Instances show their project and user from 1.2.
TENANCY = microversion.Version(1, 2)
_TENANCY_FIELDS = ("project_id", "user_id")
ALL_PROJECTS_RULE = "ringfleet:instance:list:all_projects"


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
QUOTA_SET = Resource(
    name="QuotaSet",
    description="Limits to set: instances or resource_class:<class> to a whole number "
    "(-1 unlimited); the project's other limits are kept.",
    properties={"quotas": {"type": "object", "additionalProperties": {"type": "integer"}}},
    required=frozenset({"quotas"}),
    null_means_absent=False,
)
#: What a rebuild may replace (microversion 1.4), as a build request has them.
REBUILD_FIELDS = ("image", "user_data", "meta_data", "network_data")
#: Nova's names for what ringfleet's rebuild takes otherwise: said in the refusal.
_NOVA_REBUILD_NAMES = {
    "imageRef": "image (an object with source, checksum and disk_format)",
    "key_name": "meta_data.public_keys",
    "metadata": "meta_data.meta",
}
#: The instance actions by their body's key (the verb table's), each with its
#: verbs: one, or one per ``type`` (reboot's SOFT and HARD).
_ACTIONS: Mapping[str, tuple[verbs.Verb, ...]] = {
    key: tuple(verb for verb in verbs.ACTIONS if verb.http.action == key)
    for key in dict.fromkeys(verb.http.action for verb in verbs.ACTIONS if verb.http.action)
}
#: The actions whose body is an object of fields (the others take null, or a type).
_OBJECT_ACTIONS: Mapping[str, dict[str, Any]] = {
    "rebuild": {
        "type": "object",
        "description": "Each field given replaces the instance's stored one (since "
        "microversion 1.4; before it, only {}); the others are kept.",
        "properties": {key: schemas.BUILD_REQUEST.properties[key] for key in REBUILD_FIELDS},
        "additionalProperties": False,
    }
}


def _types(key: str) -> tuple[str, ...]:
    """The ``type`` values an action takes (none: it takes null or an object)."""
    return tuple(verb.http.action_type for verb in _ACTIONS[key] if verb.http.action_type)


def _action_schema(key: str) -> dict[str, Any]:
    if key in _OBJECT_ACTIONS:
        return _OBJECT_ACTIONS[key]
    if _types(key):
        return {
            "type": "object",
            "properties": {"type": {"type": "string", "enum": list(_types(key))}},
            "required": ["type"],
            "additionalProperties": False,
        }
    return {"type": "null"}


def _action_example(key: str) -> str:
    if key in _OBJECT_ACTIONS:
        return f'{{"{key}": {{...}}}}'
    if _types(key):
        return f'{{"{key}": {{"type": ' + "|".join(f'"{t}"' for t in _types(key)) + "}}"
    return f'{{"{key}": null}}'


_EXAMPLES = [_action_example(key) for key in _ACTIONS]
INSTANCE_ACTION = Resource(
    name="InstanceAction",
    description=(
        f"One action, Nova style: {', '.join(_EXAMPLES[:-1])} or {_EXAMPLES[-1]}: the "
        "instance redeployed on its node, with its own image and config drive, "
        "or (since microversion 1.4) a new image and/or config drive parts."
    ),
    properties={key: _action_schema(key) for key in _ACTIONS},
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


def _quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def _page(call: Call, key: str, items: list[dict[str, Any]], limit: int) -> Reply:
    """A list reply with a ``next`` link when the page is full."""
    body: dict[str, Any] = {key: items}
    if len(items) >= limit and items:
        query = {k: _text(v) for k, v in call.query.items() if k != "marker"}
        query["limit"] = str(limit)
        query["marker"] = items[-1]["uuid"]
        body["next"] = f"{call.base_url}{call.request.path_info}?{urllib.parse.urlencode(query)}"
    return Reply(200, body)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _limit(call: Call) -> int:
    return min(int(call.query.get("limit", call.max_limit)), call.max_limit)


# -- nodes ---------------------------------------------------------------------


def list_nodes(call: Call) -> Reply:
    filters = {p.name: call.query[p.name] for p in NODE_FILTERS if p.name in call.query}
    limit = _limit(call)
    items = call.api.list_nodes(
        filters=filters or None, limit=limit, marker=call.query.get("marker")
    )
    return _page(call, "nodes", items, limit)


def show_node(call: Call) -> Reply:
    return Reply(200, call.api.show_node(call.path["node"]))


def create_node(call: Call) -> Reply:
    node = call.api.create_node(call.body)
    location = f"{call.base_url}/v1/nodes/{node['uuid']}"
    return Reply(201, node, {"Location": location})


def import_nodes(call: Call) -> Reply:
    dry_run = call.body.get("dry_run", False)
    result = call.api.import_nodes(call.body["nodes"], dry_run=dry_run)
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


# -- flavors -------------------------------------------------------------------


def list_flavors(call: Call) -> Reply:
    return Reply(200, {"flavors": call.api.list_flavors()})


def show_flavor(call: Call) -> Reply:
    return Reply(200, call.api.show_flavor(call.path["flavor"]))


def create_flavor(call: Call) -> Reply:
    if call.version < ANY_EXTRA_SPECS:
        _refuse_other_extra_specs(call)
    flavor = call.api.create_flavor(call.body)
    location = f"{call.base_url}/v1/flavors/{_quote(flavor['name'])}"
    return Reply(201, flavor, {"Location": location})


def _refuse_other_extra_specs(call: Call) -> None:
    """Before 1.5 a flavor's extra specs are ``capabilities:`` and ``trait:`` ones only."""
    body = call.body
    specs = body.get("extra_specs") if isinstance(body, dict) else None
    if not isinstance(specs, dict):
        return  # the conductor's validation names what is wrong with it
    for key in sorted(k for k in specs if isinstance(k, str)):
        if not key.startswith((CAPABILITIES_SCOPE, TRAIT_SCOPE)):
            raise ApiError.invalid(
                f"extra_specs.{key[:100]}",
                "unknown extra spec (use 'capabilities:<key>' or 'trait:<TRAIT>'); "
                f"other namespaces need microversion {ANY_EXTRA_SPECS} or later "
                f"(this request is {call.version})",
            )


def delete_flavor(call: Call) -> Reply:
    call.api.delete_flavor(call.path["flavor"])
    return Reply(204)


# -- instances -----------------------------------------------------------------


def _shown(call: Call, instance: dict[str, Any]) -> dict[str, Any]:
    """An instance as the request's microversion shows it."""
    if call.version < TENANCY:
        return {k: v for k, v in instance.items() if k not in _TENANCY_FIELDS}
    return instance


def build_instances(call: Call) -> Reply:
    """202 with the instances as stored.  With ``instance_uuids`` a retry of
    the same request is safe: the conductor then returns the stored
    instances as they are now (and a different request reusing one of the
    uuids is 409)."""
    instances = [_shown(call, i) for i in call.api.build_instances(call.body)]
    return Reply(202, {"instances": instances}, _location(call, instances))


def _location(call: Call, instances: list[dict[str, Any]]) -> dict[str, str]:
    if len(instances) != 1:
        return {}
    return {"Location": f"{call.base_url}/v1/instances/{instances[0]['uuid']}"}


def list_instances(call: Call) -> Reply:
    limit = _limit(call)
    all_projects = call.query.get("all_projects", False)
    project_id = call.query.get("project_id")
    if (all_projects or project_id is not None) and not call.allowed(ALL_PROJECTS_RULE):
        raise ApiError(403, "ringfleet.forbidden", f"policy does not allow {ALL_PROJECTS_RULE}")
    scope: dict[str, Any] = {}
    if all_projects or project_id is not None:
        scope = {"all_projects": all_projects, "project_id": project_id}
    items = call.api.list_instances(
        vm_state=call.query.get("vm_state"),
        host=call.query.get("host"),
        limit=limit,
        marker=call.query.get("marker"),
        **scope,
    )
    return _page(call, "instances", [_shown(call, i) for i in items], limit)


def show_instance(call: Call) -> Reply:
    return Reply(200, _shown(call, call.api.show_instance(call.path["instance"])))


#: The delete verb's row: its route's method, path and rule.
_DELETE = verbs.BY_EVENT[Event.DELETE]


def delete_instance(call: Call) -> Reply:
    conductor_method = getattr(call.api, _DELETE.conductor_method)
    return Reply(202, _shown(call, conductor_method(call.path["instance"])))


def _done_state(verb: verbs.Verb) -> str:
    """The ``vm_state`` an instance is in once *verb* is done."""
    state = TRANSITIONS[verb.done].target.vm_state
    if state is None:  # an answer that keeps the state ends no verb
        raise ValueError(f"{verb.done.value} keeps the vm_state")
    return state.value


# -- quotas --------------------------------------------------------------------


def list_quotas(call: Call) -> Reply:
    return Reply(200, {"quotas": call.api.list_quotas()})


def show_quota(call: Call) -> Reply:
    return Reply(200, call.api.show_quota(call.path["project_id"]))


def set_quota(call: Call) -> Reply:
    return Reply(200, call.api.set_quota(call.path["project_id"], call.body["quotas"]))


def delete_quota(call: Call) -> Reply:
    return Reply(200, call.api.delete_quota(call.path["project_id"]))


def instance_action(call: Call) -> Reply:
    """202 with the instance, its task state showing the action in flight.

    The body's one key picks the verb of the table (:mod:`conductor.common.verbs`),
    whose conductor method is called with the instance.
    """
    body = call.body if isinstance(call.body, dict) else {}
    if len(body) != 1:
        raise ApiError.invalid(
            "body", "exactly one action: " + ", ".join(sorted(INSTANCE_ACTION.fields))
        )
    [(action, value)] = body.items()
    arguments: dict[str, Any] = {}
    if action == "rebuild":
        verb, arguments = _ACTIONS[action][0], _rebuild_arguments(call, value)
    elif _types(action):
        verb = _typed_verb(action, value)
    else:
        if value is not None:
            raise ApiError.invalid(action, "must be null", value)
        verb = _ACTIONS[action][0]
    conductor_method = getattr(call.api, verb.conductor_method)
    instance = call.path["instance"]
    return Reply(202, conductor_method(instance, **verb.conductor_arguments, **arguments))


def _typed_verb(action: str, value: Any) -> verbs.Verb:
    """The verb of an action with a type (``{"reboot": {"type": "HARD"}}``)."""
    if not isinstance(value, dict) or set(value) != {"type"}:
        quoted = " or ".join(f'"{kind}"' for kind in _types(action))
        raise ApiError.invalid(action, f'must be {{"type": {quoted}}}', value)
    kind = value["type"]
    for verb in _ACTIONS[action]:
        if isinstance(kind, str) and kind.upper() == verb.http.action_type:
            return verb
    raise ApiError.invalid(f"{action}.type", "must be " + " or ".join(_types(action)), kind)


def _rebuild_arguments(call: Call, value: Any) -> dict[str, Any]:
    """What a rebuild replaces: the fields given (the conductor checks them as
    a build's, naming e.g. image.source)."""
    if not isinstance(value, dict):
        raise ApiError.invalid("rebuild", "must be an object", value)
    for key in sorted(value):
        if key not in REBUILD_FIELDS:
            hint = _NOVA_REBUILD_NAMES.get(key, ", ".join(REBUILD_FIELDS))
            # The value is not shown: an unknown key may be a misspelt user_data.
            raise ApiError.invalid(f"rebuild.{key[:100]}", f"unknown field; use {hint}")
    given = {key: item for key, item in value.items() if item is not None}
    if given and call.version < REBUILD_IMAGE:
        # An older client's rebuild redeploys the instance's own image.
        raise ApiError.invalid(
            f"rebuild.{min(given)}",
            f"needs microversion {REBUILD_IMAGE} or later "
            f"(this request is {call.version}); under it a rebuild takes {{}}",
        )
    return given


# -- fleet ---------------------------------------------------------------------


def fleet_status(call: Call) -> Reply:
    return Reply(200, call.api.fleet_status_details())


def fleet_check(call: Call) -> Reply:
    return Reply(200, call.api.fleet_check())


def ring_status(call: Call) -> Reply:
    return Reply(200, call.api.ring_status())


def drain_agent(call: Call) -> Reply:
    return Reply(202, call.api.drain_agent(call.path["host"]))


E400, E404, E409, E503 = 400, 404, 409, 503

#: The build request fields of microversion 1.1: an image and a config drive.
_IMAGE_FIELDS = dict.fromkeys(
    ("image", "user_data", "meta_data", "network_data"), microversion.IMAGES
)

ROUTES: tuple[Route, ...] = (
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
    Route(
        "GET",
        "/v1/flavors",
        list_flavors,
        "ringfleet:flavor:list",
        "listFlavors",
        "List flavors.",
        response="FlavorList",
        errors=(E503,),
        tag="flavors",
    ),
    Route(
        "POST",
        "/v1/flavors",
        create_flavor,
        "ringfleet:flavor:create",
        "createFlavor",
        "Create a flavor.",
        status=201,
        body="FlavorSpec",
        response="Flavor",
        errors=(E400, E409, E503),
        tag="flavors",
        fields_since={"default_image": microversion.IMAGES},
    ),
    Route(
        "GET",
        "/v1/flavors/{flavor}",
        show_flavor,
        "ringfleet:flavor:list",
        "showFlavor",
        "Show a flavor.",
        response="Flavor",
        errors=(E400, E404, E503),
        tag="flavors",
    ),
    Route(
        "DELETE",
        "/v1/flavors/{flavor}",
        delete_flavor,
        "ringfleet:flavor:delete",
        "deleteFlavor",
        "Delete a flavor.",
        status=204,
        errors=(E400, E404, E409, E503),
        tag="flavors",
    ),
    Route(
        "GET",
        "/v1/instances",
        list_instances,
        "ringfleet:instance:list",
        "listInstances",
        "List instances, in uuid order, a page at a time.",
        query=(*INSTANCE_FILTERS, LIMIT, MARKER),
        response="InstanceList",
        errors=(E400, E503),
        tag="instances",
    ),
    Route(
        "POST",
        "/v1/instances",
        build_instances,
        "ringfleet:instance:create",
        "buildInstances",
        "Build instances of a flavor; answers at once (202).",
        status=202,
        body="BuildRequest",
        response="InstanceList",
        errors=(E400, E404, E409, E503),
        tag="instances",
        description="Give instance_uuids to make retries safe: a retry of the "
        "same request (same uuids, flavor, group, name, hints) answers 202 with the "
        "stored instances as they are now and builds nothing; another request "
        "reusing one of the uuids is 409. Location is set when one instance is built. "
        "Since 1.1 a build may carry an image and a config drive (user_data, meta_data, "
        "network_data); without an image it gets its flavor's default_image, if any. "
        "The instances belong to the caller's project; a build that would take it over "
        "a quota is 403 ringfleet.quota_exceeded ('Quota exceeded for instances: "
        "Requested 3, but already used 9 of 10 instances') and stores nothing.",
        fields_since=_IMAGE_FIELDS,
    ),
    Route(
        "GET",
        "/v1/instances/{instance}",
        show_instance,
        "ringfleet:instance:list",
        "showInstance",
        "Show an instance (poll it until vm_state is active or error).",
        response="Instance",
        errors=(E400, E404, E503),
        tag="instances",
        description="Another project's instance is 404, unless the caller is an admin.",
    ),
    Route(
        _DELETE.http.method,
        _DELETE.http.path,
        delete_instance,
        _DELETE.policy_rule,
        "deleteInstance",
        "Start deleting an instance (idempotent).",
        status=202,
        response="Instance",
        errors=(E400, E404, E503),
        tag="instances",
        description="Another project's instance is 404, unless the caller is an admin. "
        "The instance counts against its project's quotas until it is deleted.",
    ),
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
    Route(
        "POST",
        verbs.ACTION_PATH,
        instance_action,
        verbs.ACTION_RULE,
        "instanceAction",
        f"{verbs.action_names()} an instance (Nova-style body); answers at once (202).",
        status=202,
        body=INSTANCE_ACTION.name,
        response="Instance",
        envelope=INSTANCE_ACTION,
        errors=(E400, E404, E409, E503),
        min_version=VERBS_VERSION,
        tag="instances",
        description=(
            "The instance's task_state shows the action in flight ("
            + ", ".join(verb.task_state.value for verb in verbs.ACTIONS)
            + "); vm_state is "
            + " or ".join(dict.fromkeys(_done_state(verb) for verb in verbs.ACTIONS))
            + " when it is done. 409 names the state that does not allow the action. "
            "Issuing the same action again while it is in flight routes it anew (the "
            "way out of an action fleet check reports stuck). Since microversion 1.4 a "
            "rebuild takes a new image and/or config drive parts (user_data, meta_data, "
            "network_data), checked as a build's and stored with the rebuild (each "
            "given replaces the stored one, the others are kept); a rebuild in flight "
            "issued again with different ones is a 409 until it is over."
        ),
    ),
    Route(
        "GET",
        "/v1/fleet/status",
        fleet_status,
        "ringfleet:fleet:get",
        "fleetStatus",
        "Agents, their nodes and builds in flight.",
        response="Object",
        errors=(E503,),
        tag="fleet",
    ),
    Route(
        "GET",
        "/v1/fleet/check",
        fleet_check,
        "ringfleet:fleet:check",
        "fleetCheck",
        "Orphans, allocation mismatches, excluded peers, stuck builds and deletes, "
        "node state mismatches, back-end (Ironic) mismatches.",
        response="Object",
        errors=(E503,),
        tag="fleet",
    ),
    Route(
        "GET",
        "/v1/fleet/ring",
        ring_status,
        "ringfleet:fleet:get",
        "ringStatus",
        "Nodes per group and owner against the hash ring.",
        response="Object",
        errors=(E503,),
        tag="fleet",
    ),
    Route(
        "POST",
        "/v1/agents/{host}/drain",
        drain_agent,
        "ringfleet:agent:drain",
        "drainAgent",
        "Drain an agent: it hands its nodes over and stops (operator call).",
        status=202,
        response="Object",
        errors=(E400, E404, E409, E503),
        tag="fleet",
    ),
)
