# SPDX-License-Identifier: Apache-2.0
"""The request schemas: each resource a client sends, its fields and their limits, declared once.

A node to create, a change to a node, a flavor and a build request are each
one :class:`Resource`: its fields as JSON Schema (the 2020-12 dialect of
OpenAPI 3.1), which are required, and the patterns and limits they use.
Two things are derived from these declarations:

* :mod:`conductor.validation` takes its field lists, patterns, limits and
  choices from here, and enforces them field by field (naming every bad
  field, and adding the rules a schema cannot say: names that are not
  UUIDs, parsed capabilities, a build's name leaving room for its suffix);
* the HTTP API's OpenAPI document (:mod:`conductor.api.openapi`) publishes
  :meth:`Resource.json_schema`.

So the document cannot drift from what the conductor accepts; a unit test
checks that every payload validation accepts is valid under its published
schema.  The declarations are in the shared layer because the HTTP API
imports only that.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from conductor.common.checks import MAX_NAME_LENGTH, NAME_PATTERN, UUID_PATTERN
from conductor.common.objects import PowerState, ProvisionState

__all__ = [
    "ALLOWED_PROVISION_STATES",
    "BUILD_REQUEST",
    "CAPABILITIES_SCOPE",
    "CAPABILITY_EXPRESSION_PATTERN",
    "CAPABILITY_KEY_PATTERN",
    "CONFIG_DRIVE_FIELDS",
    "DISK_FORMATS",
    "EXTRA_SPEC_KEY_PATTERN",
    "FLAVOR_SPEC",
    "GROUP_PATTERN",
    "HASH_LENGTHS",
    "IMAGE_SCHEMA",
    "MAX_BATCH",
    "MAX_CONFIG_DRIVE_JSON",
    "MAX_COUNT",
    "MAX_EXTRA_SPEC_VALUE_LENGTH",
    "MAX_HINT_NAME_LENGTH",
    "MAX_HINT_VALUE_LENGTH",
    "MAX_PROPERTY_KEY_LENGTH",
    "MAX_QUOTA_LIMIT",
    "MAX_REASON_LENGTH",
    "MAX_SCHEDULER_HINTS",
    "MAX_TRAITS",
    "MAX_URL_LENGTH",
    "MAX_USER_DATA",
    "NODE_SPEC",
    "NODE_UPDATE",
    "PROJECT_ID_PATTERN",
    "QUOTA_RESOURCE_PATTERN",
    "RESOURCES",
    "RESOURCE_CLASS_PATTERN",
    "TRAIT_PATTERN",
    "TRAIT_SCOPE",
    "Resource",
]

# Every pattern is matched with fullmatch(): "$" alone would accept a
# trailing newline.
RESOURCE_CLASS_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$"
TRAIT_PATTERN: Final = r"^[A-Z][A-Z0-9_]{0,254}$"
#: A Keystone project id: 1 to 255 characters, none a space nor a control
#: character (C0, DEL, C1); the conductor's check and the API's pattern.
PROJECT_ID_PATTERN: Final = r"^[^\x00-\x20\x7f-\x9f]{1,255}$"
#: The largest quota limit (a 32-bit column); -1 is unlimited.
MAX_QUOTA_LIMIT: Final = 2**31 - 1
#: A quota's resource: ``instances``, ``key_pairs`` or ``resource_class:<class>``.
QUOTA_RESOURCE_PATTERN: Final = (
    r"^(instances|key_pairs|resource_class:" + RESOURCE_CLASS_PATTERN.removeprefix("^")[:-1] + r")$"
)
GROUP_PATTERN: Final = r"^[A-Za-z0-9._-]{0,80}$"
CAPABILITY_KEY_PATTERN: Final = r"^[A-Za-z0-9_.-]+$"
#: any other extra spec's key (an operator's ``mycompany:racks``, ``boot_mode``):
#: Nova's flavor extra-spec key pattern
EXTRA_SPEC_KEY_PATTERN: Final = r"^[A-Za-z0-9_.: -]{1,255}$"

MAX_TRAITS: Final = 64
#: Nova's key pair names (microversion 2.92), metadata keys and tags
#: (:mod:`conductor.validation.tenant_data`).
KEY_NAME_PATTERN: Final = r"^[_\-@. a-zA-Z0-9]+$"
METADATA_KEY_PATTERN: Final = r"^[a-zA-Z0-9\-_:. ]{1,255}$"
#: No ',' nor '/' (Nova's), nor a control character (the text rule).
TAG_PATTERN: Final = r"^[^,/\x00-\x08\x0b\x0c\x0e-\x1f\x7f]*$"
#: Nova's default ``[quota] metadata_items``, and its key and value length.
MAX_METADATA_ITEMS: Final = 128
MAX_METADATA_LENGTH: Final = 255
#: Nova's ``MAX_TAG_COUNT`` and ``MAX_TAG_LENGTH``.
MAX_TAGS: Final = 50
MAX_TAG_LENGTH: Final = 60
#: Nodes in one bulk import.
MAX_BATCH: Final = 100_000
#: Instances in one build request.
MAX_COUNT: Final = 1000
MAX_REASON_LENGTH: Final = 255
MAX_PROPERTY_KEY_LENGTH: Final = 255
MAX_EXTRA_SPEC_VALUE_LENGTH: Final = 255
MAX_SCHEDULER_HINTS: Final = 64
MAX_HINT_NAME_LENGTH: Final = 255
# Long enough for a JsonFilter query.
MAX_HINT_VALUE_LENGTH: Final = 4096

#: Bytes of a build's user data (UTF-8), as Nova's limit on Ironic (64 KiB).
MAX_USER_DATA: Final = 65536
#: Bytes of each of a config drive's JSON documents (meta_data, network_data), serialized.
MAX_CONFIG_DRIVE_JSON: Final = 65536
MAX_URL_LENGTH: Final = 2048
#: The image checksum algorithms Ironic verifies, and their hex digest lengths.
HASH_LENGTHS: Final = {"md5": 32, "sha256": 64, "sha512": 128}
#: Glance's disk formats that Ironic can write to a disk.
DISK_FORMATS: Final = ("raw", "qcow2", "iso", "vmdk", "vhd", "vhdx", "vdi")
#: A build request's config drive fields (stored together as its config drive).
CONFIG_DRIVE_FIELDS: Final = ("user_data", "meta_data", "network_data")

#: The provision states a node may be created in.
ALLOWED_PROVISION_STATES: Final = (
    ProvisionState.ENROLL,
    ProvisionState.MANAGEABLE,
    ProvisionState.AVAILABLE,
)

#: The extra spec scopes of a flavor: ``capabilities:<key>`` and ``trait:<TRAIT>``.
CAPABILITIES_SCOPE: Final = "capabilities:"
TRAIT_SCOPE: Final = "trait:"


@dataclasses.dataclass(frozen=True)
class Resource:
    """One resource a client sends: its fields' JSON Schemas, the required ones.

    No other field is accepted.  With ``null_means_absent`` (the conductor's
    rule for its payloads) an optional field may also be ``null``, which
    means the same as leaving it out.
    """

    name: str
    description: str
    properties: Mapping[str, Mapping[str, Any]]
    required: frozenset[str] = frozenset()
    null_means_absent: bool = True

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(self.properties)

    def json_schema(self) -> dict[str, Any]:
        """The JSON Schema of the whole payload (an OpenAPI 3.1 component)."""
        return {
            "type": "object",
            "description": self.description,
            "properties": {
                key: _or_null(schema)
                if self.null_means_absent and key not in self.required
                else dict(schema)
                for key, schema in self.properties.items()
            },
            "required": sorted(self.required),
            "additionalProperties": False,
        }


def _or_null(schema: Mapping[str, Any]) -> dict[str, Any]:
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    kind = schema["type"]
    kinds = [*kind, "null"] if isinstance(kind, list) else [kind, "null"]
    return {**schema, "type": kinds}


def _inner(pattern: str) -> str:
    """A fullmatch pattern without its anchors, to build a bigger one."""
    return pattern.removeprefix("^").removesuffix("$")


_NAME: Final = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_NAME_LENGTH,
    "pattern": NAME_PATTERN,
    "description": "Not UUID-shaped: names and uuids share lookups.",
}
_UUID: Final = {
    "type": "string",
    "pattern": UUID_PATTERN,
    "description": "8-4-4-4-12 or 32 hex digits, any case; stored lower-case hyphenated.",
}
_RESOURCE_CLASS: Final = {"type": "string", "pattern": RESOURCE_CLASS_PATTERN}
_GROUP: Final = {"type": "string", "pattern": GROUP_PATTERN}
_TRAITS: Final = {
    "type": "array",
    "items": {"type": "string", "pattern": TRAIT_PATTERN},
    "maxItems": MAX_TRAITS,
    "uniqueItems": True,
}
_PROPERTY_NAME: Final = {"type": "string", "minLength": 1, "maxLength": MAX_PROPERTY_KEY_LENGTH}
_PROPERTIES: Final = {
    "type": "object",
    "propertyNames": _PROPERTY_NAME,
    "additionalProperties": {"type": ["string", "number", "boolean"]},
    "description": "Flat: strings, finite numbers, booleans. 'capabilities' is the text "
    "'key:value,key:value' (Ironic's form), parsed and normalized.",
}

_URL: Final = {
    "type": "string",
    "maxLength": MAX_URL_LENGTH,
    # A host first, no space (Python's isspace: \s and the separators \x1c-\x1f).
    "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://[^\\s/?#\\x00-\\x1f\\x7f][^\\s\\x00-\\x1f\\x7f]*$",
    "description": "An http(s) URL Ironic fetches: a host, no spaces.",
}
_HEX: Final = {"type": "string", "pattern": "^[0-9A-Fa-f]+$"}
#: An image to deploy: where Ironic fetches it and how it checks it.
IMAGE_SCHEMA: Final = {
    "type": "object",
    "description": "The image Ironic writes to the node (instance_info): an http(s) "
    "URL, its checksum (os_hash_algo and os_hash_value, or the legacy md5 checksum), "
    "its disk format; kernel and ramdisk for a partition image (both or neither); "
    "properties for Nova's filters (not sent to Ironic). "
    "Since microversion 1.1.",
    # As in every payload of the conductor's, an optional null is an absent field.
    "properties": {
        "source": _URL,
        "os_hash_algo": _or_null({"enum": sorted(HASH_LENGTHS)}),
        "os_hash_value": _or_null({**_HEX, "minLength": 32, "maxLength": 128}),
        "checksum": _or_null({**_HEX, "minLength": 32, "maxLength": 32}),
        "disk_format": _or_null({"enum": list(DISK_FORMATS)}),
        "kernel": _or_null(_URL),
        "ramdisk": _or_null(_URL),
        "properties": _or_null(
            {
                "type": "object",
                "description": "Glance-style image properties for Nova's filters "
                "(hw_architecture, img_hv_type, hw_vm_mode, img_hv_requested_version...), "
                "checked by Nova's rules; needs the nova-filters extra. Since "
                "microversion 1.1.",
                "maxProperties": 128,
                "propertyNames": {"minLength": 1, "maxLength": 255},
                "additionalProperties": {"type": "string", "maxLength": 255},
            }
        ),
    },
    "required": ["source"],
    "additionalProperties": False,
    "allOf": [
        # A checksum: os_hash_algo with os_hash_value, or checksum (md5), or both.
        {
            "anyOf": [
                {"required": ["checksum"], "properties": {"checksum": {"type": "string"}}},
                {"required": ["os_hash_algo"], "properties": {"os_hash_algo": {"type": "string"}}},
            ]
        },
        # os_hash_algo and os_hash_value together, the digest as long as the algorithm's.
        {
            "anyOf": [
                {
                    "properties": {
                        "os_hash_algo": {"type": "null"},
                        "os_hash_value": {"type": "null"},
                    }
                },
                *(
                    {
                        "required": ["os_hash_algo", "os_hash_value"],
                        "properties": {
                            "os_hash_algo": {"const": algo},
                            "os_hash_value": {"type": "string", "minLength": n, "maxLength": n},
                        },
                    }
                    for algo, n in sorted(HASH_LENGTHS.items())
                ),
            ]
        },
        # kernel and ramdisk: both (a partition image) or neither.
        {
            "anyOf": [
                {"properties": {"kernel": {"type": "null"}, "ramdisk": {"type": "null"}}},
                {
                    "required": ["kernel", "ramdisk"],
                    "properties": {"kernel": {"type": "string"}, "ramdisk": {"type": "string"}},
                },
            ]
        },
    ],
}
#: The names of a config drive's text map, and its values.
_TEXT_MAP_NAMES: Final = {"minLength": 1, "maxLength": 255}
_META_DATA: Final = {
    "type": "object",
    "properties": {
        # The instance's own, set by the conductor.
        "uuid": False,
        "name": False,
        "public_keys": {
            "type": "object",
            "propertyNames": _TEXT_MAP_NAMES,
            "additionalProperties": {"type": "string", "minLength": 1, "maxLength": 16384},
        },
        "meta": {
            "type": "object",
            "propertyNames": _TEXT_MAP_NAMES,
            "additionalProperties": {"type": "string", "minLength": 1, "maxLength": 255},
        },
    },
}
_NETWORK_DATA: Final = {
    "type": "object",
    "properties": {
        key: {"type": "array", "items": {"type": "object"}}
        for key in ("links", "networks", "services")
    },
}

NODE_SPEC: Final = Resource(
    name="NodeSpec",
    description="A node to enroll. Without a uuid the conductor chooses one.",
    properties={
        "name": _NAME,
        "uuid": _UUID,
        "resource_class": _RESOURCE_CLASS,
        "traits": _TRAITS,
        "properties": _PROPERTIES,
        "group": _GROUP,
        "maintenance": {"type": "boolean"},
        "maintenance_reason": {
            "type": "string",
            "maxLength": MAX_REASON_LENGTH,
            "description": "Only with maintenance true.",
        },
        "provision_state": {"enum": [s.value for s in ALLOWED_PROVISION_STATES]},
        "power_state": {"enum": [s.value for s in PowerState]},
    },
    required=frozenset({"name", "resource_class"}),
)

NODE_UPDATE: Final = Resource(
    name="NodeUpdate",
    description="A change to a node: properties set (merged) then removed, traits added "
    "and removed, a new resource class. It must change something, and may not both set "
    "and remove one property, nor both add and remove one trait.",
    properties={
        "properties": _PROPERTIES,
        "remove_properties": {"type": "array", "items": _PROPERTY_NAME},
        "add_traits": _TRAITS,
        "remove_traits": _TRAITS,
        "resource_class": _RESOURCE_CLASS,
    },
)

_WORD: Final = r"[^\s\x00-\x1f\x7f]+"
#: A number every match of which is finite (the conductor refuses one that
#: is not: "=  9e99999"): at most 100 digits either side of the point, an
#: exponent of at most two digits (below 1e200).
_NUMBER: Final = r"[+-]?([0-9]{1,100}(\.[0-9]{0,100})?|\.[0-9]{1,100})([eE][+-]?[0-9]{1,2})?"
#: The blanks that separate a capability expression's words (the conductor
#: splits it on whitespace; the text rule lets tab, line feed and carriage
#: return through).
_BLANK: Final = r"[ \t\n\r]"
#: What a plain capability value may not start with: an operator, glued to
#: its operand or not, or a lone "<" or ">" (the conductor says why).
_NOT_AN_OPERATOR: Final = r"(?!(=|!=|<=|>=|s==|s!=|s>=|s<=|s>|s<|<in>|<all-in>|<or>))(?![<>](\s|$))"
#: A capability expression (Nova's ComputeCapabilitiesFilter language) as
#: the conductor parses it: a plain value (no operator first), a numeric
#: comparison, a text one, <all-in> words, or <or> alternatives; operators
#: and operands separated by blanks, blanks before and after.
CAPABILITY_EXPRESSION_PATTERN: Final = (
    rf"^{_BLANK}*({_NOT_AN_OPERATOR}[^\s\x00-\x1f\x7f][^\x00-\x08\x0b\x0c\x0e-\x1f\x7f]*"
    rf"|(=|==|!=|>=|<=){_BLANK}+{_NUMBER}{_BLANK}*"
    rf"|(s==|s!=|s>=|s<=|s>|s<|<in>){_BLANK}+{_WORD}{_BLANK}*"
    rf"|<all-in>({_BLANK}+{_WORD})+{_BLANK}*"
    rf"|<or>{_BLANK}+{_WORD}({_BLANK}+<or>{_BLANK}+{_WORD})+{_BLANK}*)$"
)

FLAVOR_SPEC: Final = Resource(
    name="FlavorSpec",
    description="A flavor to create. required_traits and forbidden_traits are disjoint.",
    properties={
        "name": _NAME,
        "resource_class": _RESOURCE_CLASS,
        "required_traits": _TRAITS,
        "forbidden_traits": _TRAITS,
        "extra_specs": {
            "type": "object",
            "propertyNames": {
                "pattern": f"^({CAPABILITIES_SCOPE}{_inner(CAPABILITY_KEY_PATTERN)}"
                f"|{TRAIT_SCOPE}{_inner(TRAIT_PATTERN)}"
                # Not a numbered request group (trait1:, resources1:): Placement's, not ours.
                f"|(?!{CAPABILITIES_SCOPE}|{TRAIT_SCOPE}|(resources|trait)[A-Za-z0-9_-]+:)"
                f"{_inner(EXTRA_SPEC_KEY_PATTERN)})$"
            },
            "additionalProperties": {"type": "string", "maxLength": MAX_EXTRA_SPEC_VALUE_LENGTH},
            # A trait's spec says whether the flavor requires or forbids it.
            "patternProperties": {
                f"^{TRAIT_SCOPE}": {"enum": ["required", "forbidden"]},
                # A node offers one unit of its own class: 0 or 1.
                "^resources:": {"enum": ["0", "1"]},
                # Unscoped: matched as a capability of that name (Nova's filter).
                "^[^:]+$": {
                    "type": "string",
                    "maxLength": MAX_EXTRA_SPEC_VALUE_LENGTH,
                    "pattern": CAPABILITY_EXPRESSION_PATTERN,
                },
                f"^{CAPABILITIES_SCOPE}": {
                    "type": "string",
                    "maxLength": MAX_EXTRA_SPEC_VALUE_LENGTH,
                    "pattern": CAPABILITY_EXPRESSION_PATTERN,
                },
            },
            "description": "'capabilities:<key>': a capability expression (Nova's "
            "ComputeCapabilitiesFilter language); 'trait:<TRAIT>': 'required' or "
            "'forbidden', merged into the trait lists; any other key (an operator's "
            "'mycompany:racks', 'boot_mode'): stored as given, for Nova filters.",
        },
        "default_image": {
            **IMAGE_SCHEMA,
            "description": "The image of a build of this flavor whose request names "
            "none. Since microversion 1.1.",
        },
    },
    required=frozenset({"name", "resource_class"}),
)

KEY_NAME_SCHEMA: Final = {
    "type": "string",
    "minLength": 1,
    "maxLength": 255,
    # KEY_NAME_PATTERN's characters, no space first or last.
    "pattern": r"^[_\-@.a-zA-Z0-9]([_\-@. a-zA-Z0-9]*[_\-@.a-zA-Z0-9])?$",
}
METADATA_SCHEMA: Final = {
    "type": "object",
    "maxProperties": MAX_METADATA_ITEMS,
    "propertyNames": {"pattern": METADATA_KEY_PATTERN},
    "additionalProperties": {"type": "string", "maxLength": MAX_METADATA_LENGTH},
}
TAG_SCHEMA: Final = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_TAG_LENGTH,
    "pattern": TAG_PATTERN,
}
TAGS_SCHEMA: Final = {"type": "array", "items": TAG_SCHEMA, "maxItems": MAX_TAGS}

BUILD_REQUEST: Final = Resource(
    name="BuildRequest",
    description="Build count instances of a flavor. With instance_uuids (one per "
    "instance) a retry of the same request is safe.",
    properties={
        "flavor": _NAME,
        "count": {"type": "integer", "minimum": 1, "maximum": MAX_COUNT},
        "name": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_NAME_LENGTH,
            "description": "With count > 1 the instances are name-1 .. name-N, and the "
            "limit includes that suffix. No control characters, no surrounding spaces.",
        },
        "group": {**_GROUP, "description": "A node group hint; '' is the default group."},
        "instance_uuids": {
            "type": "array",
            "items": _UUID,
            "maxItems": MAX_COUNT,
            "uniqueItems": True,
            "description": "Exactly count of them.",
        },
        "scheduler_hints": {
            "type": "object",
            "maxProperties": MAX_SCHEDULER_HINTS,
            "propertyNames": {"minLength": 1, "maxLength": MAX_HINT_NAME_LENGTH},
            "additionalProperties": {
                "type": ["string", "number", "boolean", "null"],
                "maxLength": MAX_HINT_VALUE_LENGTH,
            },
            "description": "For scheduler filters that read hints (since API 1.6).",
        },
        "image": IMAGE_SCHEMA,
        "user_data": {
            "type": "string",
            "maxLength": MAX_USER_DATA,
            # As the latest microversion takes it: base64 of UTF-8 text (the
            # format names that, for a generator that reads no content keyword).
            "contentEncoding": "base64",
            "contentMediaType": "text/plain",
            "format": "base64-text",
            "description": "The config drive's user data. Since microversion 1.7 "
            "base64-encoded, as in Nova's API (at most 65535 characters encoded; UTF-8 text "
            f"once decoded); from 1.1 to 1.6 the text itself, at most {MAX_USER_DATA} bytes "
            "of UTF-8. Never logged.",
        },
        "meta_data": {
            **_META_DATA,
            "description": "The config drive's meta_data.json: 'public_keys' (name -> "
            "key), 'meta' (name -> string) and more; 'uuid' and 'name' are the "
            "instance's. Since microversion 1.1.",
        },
        "network_data": {
            **_NETWORK_DATA,
            "description": "The config drive's network_data.json (OpenStack's links, "
            "networks, services). Since microversion 1.1.",
        },
        "key_name": {
            **KEY_NAME_SCHEMA,
            "description": "A key pair of the caller's: its public key goes into the "
            "config drive's meta_data public_keys, as Nova's. Since microversion 1.8.",
        },
        "metadata": {
            **METADATA_SCHEMA,
            "description": "The instance's metadata (Nova's server metadata), also the "
            "config drive's meta_data 'meta'. Since microversion 1.9.",
        },
        "tags": {
            **TAGS_SCHEMA,
            "description": "The instance's tags (Nova's server tags). Since microversion 1.9.",
        },
    },
    required=frozenset({"flavor"}),
)

#: Every resource, by name.
RESOURCES: Final = {r.name: r for r in (NODE_SPEC, NODE_UPDATE, FLAVOR_SPEC, BUILD_REQUEST)}
