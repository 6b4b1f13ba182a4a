# SPDX-License-Identifier: Apache-2.0
"""What the server refuses, said in the OpenAPI document.

The schemas of :mod:`conductor.common.schemas` say the shape of what a
client sends; the server refuses more: the text rule on every string
(:func:`conductor.common.checks.text_problem`), the path variables' own
rules, and rules between fields (a maintenance reason only with
maintenance, a change that changes something).  Here each is written into
the document (:func:`tightened`, :data:`PATH_SCHEMAS`), so that a request
the document allows is one the server takes (checked by schemathesis in
``tests/functional/test_api_schema.py``).  The few rules no JSON Schema
can say (a value that must match the path's, two lists that must not
share an item, an OpenSSH key that must parse) are each named in the
operation's ``x-rules``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from conductor.common.checks import MAX_NAME_LENGTH, NAME_PATTERN
from conductor.common.schemas import (
    KEY_NAME_SCHEMA,
    MAX_QUOTA_LIMIT,
    PROJECT_ID_PATTERN,
    QUOTA_RESOURCE_PATTERN,
    TAG_SCHEMA,
)

__all__ = [
    "JSON_SCHEMA",
    "LINKS",
    "PATH_SCHEMAS",
    "RULES",
    "TEXT_PATTERN",
    "tightened",
    "with_text_rule",
]

#: The text rule: no control character but tab, line feed and carriage return.
TEXT_PATTERN: Final = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f]*$"


_NAME: Final = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_NAME_LENGTH,
    "pattern": NAME_PATTERN,
}


def _not_only_dots(inner: str, dotless: str) -> str:
    """A path segment of ``inner`` characters that is not ``.`` nor ``..``
    (a client's URL library would resolve those): one of ``dotless`` at least."""
    return f"^{inner}*{dotless}{inner}*$"


#: The path variables: what the server takes (another value is 400 naming it).
PATH_SCHEMAS: Final[Mapping[str, dict[str, Any]]] = {
    "instance": {"type": "string", "format": "uuid"},
    # A request id as the API makes them (req-<uuid>); another one is no action's.
    "request_id": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,255}$"},
    "node": {**_NAME, "description": "The node's name or uuid."},
    "flavor": _NAME,
    "host": {**_NAME, "description": "An agent's name (a live member of the fleet)."},
    "keypair": {
        **KEY_NAME_SCHEMA,
        # KEY_NAME_SCHEMA's, but not "." nor "..": one or two characters, or more.
        "pattern": r"^([_\-@a-zA-Z0-9]|[_\-@a-zA-Z0-9][_\-@.a-zA-Z0-9]|\.[_\-@a-zA-Z0-9]"
        r"|[_\-@.a-zA-Z0-9][_\-@. a-zA-Z0-9]+[_\-@.a-zA-Z0-9])$",
    },
    "project_id": {"type": "string", "pattern": PROJECT_ID_PATTERN},
    "key": {
        "type": "string",
        "minLength": 1,
        "maxLength": 255,
        # METADATA_KEY_PATTERN's characters.
        "pattern": _not_only_dots(r"[a-zA-Z0-9\-_:. ]", r"[a-zA-Z0-9\-_: ]"),
    },
    "tag": {**TAG_SCHEMA, "pattern": _not_only_dots(r"[^,/\x00-\x1f\x7f]", r"[^,/.\x00-\x1f\x7f]")},
}

#: Keywords where the text rule says nothing more.
_CONSTRAINED = ("pattern", "enum", "const", "format", "contentEncoding")


def with_text_rule(schema: Any) -> Any:
    """``schema`` (a copy) with the text rule on every string and key it
    allows that has no pattern of its own (patterns here never allow a
    control character)."""
    if isinstance(schema, list):
        return [with_text_rule(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: with_text_rule(value) for key, value in schema.items()}
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "string" in kinds and not any(key in schema for key in _CONSTRAINED):
        out["pattern"] = TEXT_PATTERN
    if "object" in kinds or "propertyNames" in schema:
        if schema.get("additionalProperties") is not False:
            out["propertyNames"] = {"pattern": TEXT_PATTERN, **(out.get("propertyNames") or {})}
        if schema.get("additionalProperties", True) is True and "object" in kinds:
            # An open object (meta_data, network_data): text to any depth.
            out["additionalProperties"] = {"$ref": "#/components/schemas/Json"}
    return out


#: JSON of text without control characters, numbers, booleans and null, to any depth
#: (the server walks every string and key of a request).
JSON_SCHEMA: Final = {
    "description": "Any JSON whose strings and keys keep the text rule.",
    "anyOf": [
        {"type": ["number", "boolean", "null"]},
        {"type": "string", "pattern": TEXT_PATTERN},
        {"type": "array", "items": {"$ref": "#/components/schemas/Json"}, "maxItems": 8},
        {
            "type": "object",
            "propertyNames": {"pattern": TEXT_PATTERN},
            "additionalProperties": {"$ref": "#/components/schemas/Json"},
            "maxProperties": 8,
        },
    ],
}


def _only_with(flag: str, field: str) -> dict[str, Any]:
    """``field`` only when ``flag`` is true (null or absent otherwise)."""
    return {
        "if": {"properties": {flag: {"const": True}}, "required": [flag]},
        "else": {"properties": {field: {"type": "null"}}},
    }


#: Rules between a request's fields, by component: JSON Schema keywords added.
_BETWEEN_FIELDS: Final[Mapping[str, dict[str, Any]]] = {
    "NodeSpec": _only_with("maintenance", "maintenance_reason"),
    "Maintenance": _only_with("maintenance", "reason"),
    "NodeUpdate": {
        # It must change something: one non-empty field at least.
        "anyOf": [
            {"required": [key], "properties": {key: nonempty}}
            for key, nonempty in (
                ("properties", {"type": "object", "minProperties": 1}),
                ("remove_properties", {"type": "array", "minItems": 1}),
                ("add_traits", {"type": "array", "minItems": 1}),
                ("remove_traits", {"type": "array", "minItems": 1}),
                ("resource_class", {"type": "string"}),
            )
        ]
    },
    "InstanceAction": {"minProperties": 1, "maxProperties": 1},
}

#: Fields whose schema the server narrows, by component.
_FIELDS: Final[Mapping[str, Mapping[str, dict[str, Any]]]] = {
    "QuotaSet": {
        "quotas": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": QUOTA_RESOURCE_PATTERN},
            "additionalProperties": {
                "type": "integer",
                "minimum": -1,
                "maximum": MAX_QUOTA_LIMIT,
            },
        }
    },
    "Move": {"host": _NAME},
}

#: The rules no JSON Schema says, by operation (``x-rules``).
#: The rule of a list's marker: the fleet's state, which no schema says.
_MARKER_RULE = "marker names {}: else 400 naming marker (since 1.14, as Nova's; 404 below)."

RULES: Final[Mapping[str, tuple[str, ...]]] = {
    "setNode": ("A property is not both set and removed; a trait not both added and removed.",),
    "createFlavor": (
        "required_traits and forbidden_traits share no trait.",
        "A resources:<CLASS> spec agrees with resource_class: 0 for a standard class "
        "(VCPU...), 1 only for the flavor's own custom class.",
    ),
    "setInstanceMetadataItem": ("The body's one key is the path's key.",),
    "buildInstances": (
        "instance_uuids, when given, has exactly count items (count 1 if not given).",
        "key_name names a key pair of the caller's: else 400, as in Nova.",
    ),
    "instanceAction": ("A rebuild's key_name names a key pair of the caller's: else 400.",),
    "importNodes": (
        "A batch names each node (name, uuid) once; a node stored already is a clash: 409, "
        "or with dry_run or every_clash a 400 naming every clash.",
    ),
    "createKeyPair": (
        "public_key is an OpenSSH public key line that parses (format ssh-public-key).",
    ),
    "listInstances": (_MARKER_RULE.format("with a sort_key, an instance of the caller's list"),),
    "listInstanceActions": (_MARKER_RULE.format("an action of the instance"),),
    "listKeyPairs": (_MARKER_RULE.format("a key pair of the user's"),),
}


def tightened(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """A request body's component with the server's rules written in."""
    out = copy.deepcopy(schema)
    for field, narrowed in _FIELDS.get(name, {}).items():
        out["properties"][field] = {**out["properties"][field], **narrowed}
    out.update(copy.deepcopy(_BETWEEN_FIELDS.get(name, {})))
    return with_text_rule(out)  # type: ignore[no-any-return]


def _links(source: str, variable: str, *operations: str) -> dict[str, dict[str, Any]]:
    return {op: {"operationId": op, "parameters": {variable: source}} for op in operations}


_INSTANCE = "$response.body#/instances/0/uuid"

#: OpenAPI links, by operation and status: what a reply names, and the
#: operations that take it (schemathesis' state machine chains them).
LINKS: Final[Mapping[str, Mapping[int, dict[str, dict[str, Any]]]]] = {
    "createFlavor": {201: _links("$response.body#/name", "flavor", "showFlavor", "deleteFlavor")},
    "createNode": {
        201: _links(
            "$response.body#/uuid",
            "node",
            "showNode",
            "setNode",
            "setNodeMaintenance",
            "setNodePowerState",
            "showNodeOwner",
            "deleteNode",
        )
    },
    "buildInstances": {
        202: _links(
            _INSTANCE,
            "instance",
            "showInstance",
            "deleteInstance",
            "instanceAction",
            "listInstanceActions",
            "listInstanceMetadata",
            "updateInstanceMetadata",
            "listInstanceTags",
            "replaceInstanceTags",
        )
    },
    "createKeyPair": {
        201: _links("$response.body#/keypair/name", "keypair", "showKeyPair", "deleteKeyPair")
    },
    "setQuota": {
        200: _links("$response.body#/project_id", "project_id", "showQuota", "deleteQuota")
    },
    "listInstanceActions": {
        200: {
            "showInstanceAction": {
                "operationId": "showInstanceAction",
                "parameters": {
                    "instance": "$request.path.instance",
                    "request_id": "$response.body#/instanceActions/0/request_id",
                },
            }
        }
    },
}
