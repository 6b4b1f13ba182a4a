# SPDX-License-Identifier: Apache-2.0
"""The OpenAPI 3 document, generated from the route table and the schemas below.

``docs/openapi.json`` is this document as checked in (regenerate it with
``python -m conductor.api.openapi > docs/openapi.json``; a unit test fails
when it is stale); the API serves it at ``/v1/openapi.json``.  The schemas
of what a client sends (nodes, node changes, flavors, build requests) are
the conductor's own (:mod:`conductor.common.schemas`, which its validation
enforces); the conductor's ``InvalidInput`` answer (400) names any field it
refuses, including by the rules a schema cannot say.  The API's own request
envelopes are those of the routes (``Route.envelope``, which the application
checks); the replies' schemas are written here.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any

from conductor.api import microversion, openapi_rules
from conductor.api.app import Param, Route
from conductor.common import schemas
from conductor.common.nova_limits import ABSOLUTE, KEY_PAIR_LIMITS, SERVER_META_LIMIT
from conductor.common.nova_status import STATUSES
from conductor.common.objects import PowerState, ProvisionState, TaskState, VmState

__all__ = ["SCHEMAS", "document"]

_STR = {"type": "string"}
_NSTR = {"type": ["string", "null"]}
_BOOL = {"type": "boolean"}
_INT = {"type": "integer"}
#: What /v1/limits' key pair entries say (since 1.13).
_KEY_PAIR_LIMITS = (
    "Since 1.13: the key pairs each user may have when creating one in the project "
    "(Nova's key_pairs quota; -1 unlimited).",
    "Since 1.13 (ringfleet's; Nova's /limits has none): the caller's own key pairs, "
    "which the limit counts (per user, in every project).",
)
_STRS = {"type": "array", "items": _STR}
_TIME = {"type": "string", "format": "date-time"}
_FLAT = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}}


def _obj(
    props: dict[str, Any], required: Iterable[str] = (), closed: bool = True
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = sorted(required)
    if closed:
        schema["additionalProperties"] = False
    return schema


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


#: An instance action's fields (Nova's os-instance-actions).
_ACTION: dict[str, Any] = {
    "action": {"enum": ["create", "delete", "reboot", "stop", "start", "rebuild"]},
    "instance_uuid": {**_STR, "format": "uuid"},
    "request_id": _STR,
    "project_id": _NSTR,
    "user_id": _NSTR,
    "start_time": _TIME,
    "finish_time": {"type": ["string", "null"], "format": "date-time"},
    "updated_at": _TIME,
    "message": {"enum": ["Error", None]},
}
#: An action's event (Nova's, one per action here: the work's).
_EVENT: dict[str, Any] = {
    "event": _STR,
    "start_time": _TIME,
    "finish_time": {"type": ["string", "null"], "format": "date-time"},
    "result": {"enum": ["Success", "Error", None]},
}

#: The Instance fields policy leaves out for others (conductor.api.v1_instances.HOST_FIELDS).
_ADMIN_ONLY = (
    "Left out unless the policy ringfleet:instance:show:host allows the caller (admins by "
    "default), as Nova's extended server attributes."
)

SCHEMAS: dict[str, dict[str, Any]] = {
    "Object": {"type": "object", "description": "See docs/rpc-api.rst for the fields."},
    "Node": _obj(
        {
            "uuid": {**_STR, "format": "uuid"},
            "name": _STR,
            "resource_class": _STR,
            "traits": _STRS,
            "properties": _FLAT,
            "capabilities": {"type": "object"},
            "group": _STR,
            "provision_state": {"enum": [state.value for state in ProvisionState]},
            "power_state": {"enum": [*(state.value for state in PowerState), None]},
            "maintenance": _BOOL,
            "maintenance_reason": _NSTR,
            "owner": _NSTR,
            "owner_epoch": _INT,
            "instance_uuid": _NSTR,
            "created_at": _TIME,
            "updated_at": _TIME,
            "failed_builds": _INT,
        },
        closed=False,
    ),
    "ImportResult": _obj({"created": _INT, "checked": _INT, "uuids": _STRS}, closed=False),
    "SyncSummary": _obj(
        {
            "listed": _INT,
            "created": _INT,
            "updated": _INT,
            "retired": _INT,
            "observed": _INT,
            "orphans": _INT,
            "invalid": _INT,
            "invalid_nodes": _STRS,
            "seconds": {"type": "number"},
        },
        closed=False,
    ),
    "NodeOwner": _obj(
        {"node_uuid": _STR, "owner": _NSTR, "epoch": _INT, "pinned": _BOOL, "ring_owner": _NSTR},
        closed=False,
    ),
    "NodeList": _obj(
        {"nodes": {"type": "array", "items": _ref("Node")}, "next": {**_STR, "format": "uri"}},
        required=("nodes",),
    ),
    "Flavor": _obj(
        {
            "name": _STR,
            "resource_class": _STR,
            "required_traits": _STRS,
            "forbidden_traits": _STRS,
            "extra_specs": {"type": "object"},
            "created_at": _TIME,
            "default_image": {"type": ["object", "null"]},
        },
        closed=False,
    ),
    "FlavorList": _obj(
        {"flavors": {"type": "array", "items": _ref("Flavor")}}, required=("flavors",)
    ),
    "Instance": _obj(
        {
            "uuid": {**_STR, "format": "uuid"},
            "name": _STR,
            "flavor": _STR,
            # From the state machine's own enums, so that no state is left out.
            "vm_state": {"enum": [state.value for state in VmState]},
            "task_state": {**_NSTR, "enum": [*(task.value for task in TaskState), None]},
            "node_uuid": {**_NSTR, "description": _ADMIN_ONLY},
            "host": {**_NSTR, "description": _ADMIN_ONLY},
            "group_hint": _NSTR,
            "fault": _NSTR,
            "attempts": _INT,
            "tried_nodes": {**_STRS, "description": _ADMIN_ONLY},
            "created_at": _TIME,
            "updated_at": _TIME,
            "scheduler_hints": {"type": "object"},
            "image": {"type": ["object", "null"]},
            "config_drive": {
                "type": ["object", "null"],
                "description": "user_data (left out of lists), meta_data, network_data.",
            },
            "project_id": {**_NSTR, "x-min-version": "1.2"},
            "user_id": {**_NSTR, "x-min-version": "1.2"},
            "key_name": {
                **_NSTR,
                "x-min-version": "1.8",
                "description": "The key pair it was built with (Nova's key_name).",
            },
            "metadata": {
                "type": "object",
                "additionalProperties": _STR,
                "x-min-version": "1.9",
                "description": "Nova's server metadata.",
            },
            "tags": {
                **_STRS,
                "x-min-version": "1.9",
                "description": "Nova's server tags, sorted.",
            },
            "status": {
                "enum": list(STATUSES),
                "description": "Nova's status, from vm_state and task_state.",
                "x-min-version": "1.10",
            },
            "addresses": {
                "type": "object",
                "description": "Nova's addresses, from the network data: per network, "
                "its static addresses.",
                "additionalProperties": {"type": "array", "items": _ref("Address")},
                "x-min-version": "1.10",
            },
        },
        closed=False,
    ),
    "Address": _obj(
        {
            "addr": _STR,
            "version": {"enum": [4, 6]},
            "OS-EXT-IPS:type": {"enum": ["fixed"]},
            "OS-EXT-IPS-MAC:mac_addr": _NSTR,
        },
        required=("addr", "version", "OS-EXT-IPS:type", "OS-EXT-IPS-MAC:mac_addr"),
    ),
    "InstanceActionList": _obj(
        {"instanceActions": {"type": "array", "items": _ref("InstanceActionRecord")}},
        required=("instanceActions",),
    ),
    # Not "InstanceAction": that is the action request's envelope.
    "InstanceActionRecord": _obj(_ACTION, required=tuple(_ACTION)),
    "InstanceActionDetail": _obj(
        {
            "instanceAction": _obj(
                {
                    **_ACTION,
                    "events": {
                        "type": "array",
                        "items": _obj(_EVENT, required=tuple(_EVENT)),
                    },
                },
                required=(*_ACTION, "events"),
            )
        },
        required=("instanceAction",),
    ),
    "Limits": _obj(
        {
            "limits": _obj(
                {
                    "rate": {"type": "array", "maxItems": 0},
                    "absolute": _obj(
                        {key: _INT for key in ABSOLUTE}
                        | {
                            key: {**_INT, "description": what}
                            for key, what in zip(KEY_PAIR_LIMITS, _KEY_PAIR_LIMITS, strict=True)
                        }
                        | {
                            SERVER_META_LIMIT: {
                                **_INT,
                                "x-min-version": str(microversion.NOVA_ANSWERS),
                                "description": "Since 1.14: the metadata items an instance "
                                "may have (Nova's metadata_items, 128).",
                            }
                        },
                        required=ABSOLUTE,
                    ),
                    "resource_classes": {
                        "type": "object",
                        "additionalProperties": _obj(
                            {"limit": _INT, "in_use": _INT}, required=("limit", "in_use")
                        ),
                    },
                },
                required=("rate", "absolute", "resource_classes"),
            )
        },
        required=("limits",),
    ),
    "InstanceList": _obj(
        {
            "instances": {"type": "array", "items": _ref("Instance")},
            "next": {**_STR, "format": "uri"},
        },
        required=("instances",),
    ),
    "Quota": _obj(
        {
            "project_id": _STR,
            "quotas": {
                "type": "object",
                "description": "Per resource (instances, resource_class:<class>): the "
                "limit (-1 unlimited), the usage, and whether the limit is the default.",
                "additionalProperties": _obj(
                    {"limit": _INT, "in_use": _INT, "default": _BOOL},
                    required=("limit", "in_use", "default"),
                ),
            },
        },
        required=("project_id", "quotas"),
    ),
    "QuotaList": _obj(
        {
            "quotas": {
                "type": "array",
                "items": _obj(
                    {
                        "project_id": _STR,
                        "limits": {"type": "object", "additionalProperties": _INT},
                    },
                    required=("project_id", "limits"),
                ),
            }
        },
        required=("quotas",),
    ),
    "KeyPair": _obj(
        {
            "name": _STR,
            "type": {"enum": ["ssh"]},
            "fingerprint": _STR,
            "public_key": _STR,
            "user_id": _STR,
            "created_at": _TIME,
        },
        required=("name", "type", "fingerprint", "public_key", "user_id"),
        closed=False,
    ),
    "KeyPairShown": _obj({"keypair": _ref("KeyPair")}, required=("keypair",)),
    "KeyPairCreated": _obj(
        {
            "keypair": {
                "allOf": [
                    _ref("KeyPair"),
                    {
                        "type": "object",
                        "properties": {
                            "private_key": {
                                **_STR,
                                "description": "Only when the key was generated: PEM, "
                                "returned this once and stored nowhere.",
                            }
                        },
                    },
                ]
            }
        },
        required=("keypair",),
    ),
    "KeyPairList": _obj(
        {"keypairs": {"type": "array", "items": _ref("KeyPairShown")}}, required=("keypairs",)
    ),
    "Errors": _obj(
        {
            "errors": {
                "type": "array",
                "items": _obj(
                    {
                        "status": _INT,
                        "code": _STR,
                        "title": _STR,
                        "detail": _STR,
                        "request_id": _STR,
                        "field": _NSTR,
                        "reason": _STR,
                        "value": _NSTR,
                        "index": {"type": ["integer", "null"]},
                    },
                    required=("status", "code", "title", "detail", "request_id"),
                    closed=False,
                ),
            }
        },
        required=("errors",),
    ),
    "Versions": {"type": "object"},
}

_REASONS = {
    200: "OK",
    201: "Created",
    202: "Accepted",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    406: "Not Acceptable",
    409: "Conflict",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    503: "Service Unavailable",
}


def _query_parameter(route: Route, param: Param) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": param.kind}
    if param.minimum is not None:
        schema["minimum"] = param.minimum
    if param.maximum is not None:
        schema["maximum"] = param.maximum
    if param.enum:
        schema["enum"] = list(param.enum)
    if param.format is not None:
        schema["format"] = param.format
    if param.pattern is not None:
        schema["pattern"] = param.pattern
    schema = openapi_rules.with_text_rule(schema)
    entry = {
        "name": param.name,
        "in": "query",
        "required": False,
        "description": param.description,
        "schema": schema,
    }
    if param.min_version > route.min_version:
        entry["x-min-version"] = str(param.min_version)
    return entry


def _content(route: Route) -> dict[str, Any]:
    """A success's body, when the route answers one."""
    if route.response is None:
        return {}
    return {"content": {"application/json": {"schema": _ref(route.response)}}}


def _operation(route: Route) -> dict[str, Any]:
    parameters: list[dict[str, Any]] = [
        {
            "name": name.strip("{}"),
            "in": "path",
            "required": True,
            "schema": openapi_rules.PATH_SCHEMAS[name.strip("{}")],
        }
        for name in route.path.split("/")
        if name.startswith("{")
    ]
    parameters.extend(_query_parameter(route, param) for param in route.query)
    parameters.append({"$ref": "#/components/parameters/ApiVersion"})
    op: dict[str, Any] = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "tags": [route.tag],
        "parameters": parameters,
        "x-policy-rule": route.rule,
        "x-min-version": str(route.min_version),
    }
    if route.description:
        op["description"] = route.description
    if route.operation_id in openapi_rules.RULES:
        op["x-rules"] = list(openapi_rules.RULES[route.operation_id])
    if route.fields_since:
        op["x-fields-min-version"] = {k: str(v) for k, v in sorted(route.fields_since.items())}
    if route.body is not None:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(route.body)}},
        }
    ok: dict[str, Any] = {"description": _REASONS[route.status], **_content(route)}
    if route.status == 201 or route.operation_id == "buildInstances":
        ok["headers"] = {"Location": {"schema": {**_STR, "format": "uri"}}}
    links = openapi_rules.LINKS.get(route.operation_id, {}).get(route.status)
    if links:
        ok["links"] = links
    responses: dict[str, Any] = {str(route.status): ok}
    for status in route.other_statuses:
        responses[str(status)] = {"description": _REASONS[status], **_content(route)}
    if route.operation_id == "buildInstances":
        responses["200"] = {
            "description": "A retry of an identical request: the instances as they are now.",
            "content": ok["content"],
        }
    # Any request may carry a malformed OpenStack-API-Version (400); a route
    # asked for below its microversion is unknown (404).
    codes = {*route.errors, 400, 401, 403, 406}
    if route.min_version > microversion.MIN_VERSION:
        codes.add(404)
    if route.body is not None:
        codes |= {400, 413, 415}
    for code in sorted(codes):
        responses[str(code)] = {"$ref": f"#/components/responses/E{code}"}
    op["responses"] = responses
    return op


def document(routes: Iterable[Route]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes``."""
    routes = list(routes)
    paths: dict[str, dict[str, Any]] = {}
    envelopes: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
        if route.envelope is not None:
            if route.envelope.name in SCHEMAS:
                raise ValueError(f"envelope {route.envelope.name} clashes with a reply's schema")
            envelopes[route.envelope.name] = openapi_rules.tightened(
                route.envelope.name, route.envelope.json_schema()
            )
    bodies = {**_requests(), **envelopes}
    for route in routes:
        # Each field where it is, too (x-fields-min-version says it per operation).
        for key, since in route.fields_since.items():
            bodies[str(route.body)]["properties"][key]["x-min-version"] = str(since)
    error = {"application/json": {"schema": _ref("Errors")}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "ringfleet bare-metal fleet API",
            "version": str(microversion.MAX_VERSION),
            "description": "Schedule bare metal through ringfleet over HTTP. Microversions: "
            f"send '{microversion.HEADER}: {microversion.SERVICE_TYPE} X.Y' "
            f"({microversion.MIN_VERSION} to {microversion.MAX_VERSION}). Every answer carries "
            "x-openstack-request-id. See docs/http-api.rst.",
        },
        "servers": [{"url": "/"}],
        "security": [{"token": []}],
        "tags": [
            {"name": t} for t in ("nodes", "flavors", "instances", "keypairs", "quotas", "fleet")
        ],
        "paths": paths,
        "components": {
            "schemas": {**SCHEMAS, **bodies},
            "securitySchemes": {
                "token": {"type": "apiKey", "in": "header", "name": "X-Auth-Token"}
            },
            "parameters": {
                "ApiVersion": {
                    "name": microversion.HEADER,
                    "in": "header",
                    "required": False,
                    "description": f"'{microversion.SERVICE_TYPE} X.Y' or "
                    f"'{microversion.SERVICE_TYPE} latest', among other services' "
                    "(comma-separated; theirs are ignored). Without ours: "
                    f"{microversion.MIN_VERSION}. Malformed: 400; outside "
                    f"{microversion.MIN_VERSION} to {microversion.MAX_VERSION}: 406.",
                    "schema": {
                        **_STR,
                        "example": f"{microversion.SERVICE_TYPE} {microversion.MAX_VERSION}",
                    },
                }
            },
            "responses": {
                f"E{code}": {"description": reason, "content": error}
                for code, reason in _REASONS.items()
                if code >= 400
            },
        },
    }


def _requests() -> dict[str, Any]:
    """The conductor's payloads, as the server takes them, and the JSON they may hold."""
    return {
        "Json": openapi_rules.JSON_SCHEMA,
        **{
            name: openapi_rules.tightened(name, resource.json_schema())
            for name, resource in schemas.RESOURCES.items()
        },
    }


def render(routes: Iterable[Route]) -> str:
    return json.dumps(document(routes), indent=2, sort_keys=True) + "\n"


def main() -> None:
    from conductor.api.v1 import ROUTES  # noqa: PLC0415 -- v1 imports app; keep this module light

    sys.stdout.write(render(ROUTES))


if __name__ == "__main__":
    main()
